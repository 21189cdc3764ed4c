package reconcile

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
)

func TestDeviceIndexFindsTheLastOfEqualKeys(t *testing.T) {
	t.Parallel()
	devs := []device{
		{id: "c", mac: "02:00:00:00:00:03"},
		{id: "a", mac: "02:00:00:00:00:01"},
		{id: "b", mac: ""},
		{id: "a", mac: "02:00:00:00:00:02"},
		{id: "d", mac: "02:00:00:00:00:01"},
	}
	byMAC := newDeviceIndex(devs, func(d *device) string { return d.mac })
	byID := newDeviceIndex(devs, func(d *device) string { return d.id })
	for _, tt := range []struct {
		name  string
		index deviceIndex
		key   string
		want  int
		found bool
	}{
		{name: "MACOnce", index: byMAC, key: "02:00:00:00:00:03", want: 0, found: true},
		{name: "MACTwiceLastWins", index: byMAC, key: "02:00:00:00:00:01", want: 4, found: true},
		{name: "MACAbsent", index: byMAC, key: "02:00:00:00:00:09", want: -1},
		{name: "MACBeforeAll", index: byMAC, key: "00", want: -1},
		{name: "MACAfterAll", index: byMAC, key: "ff", want: -1},
		{name: "EmptyMACNotIndexed", index: byMAC, key: "", want: -1},
		{name: "IDTwiceLastWins", index: byID, key: "a", want: 3, found: true},
		{name: "IDOnce", index: byID, key: "b", want: 2, found: true},
		{name: "IDAbsent", index: byID, key: "e", want: -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			i, ok := tt.index.find(tt.key)
			require.Equal(t, tt.found, ok)
			require.Equal(t, tt.want, i)
		})
	}
}

func TestPositionDiffsComparesOnlyKnownValues(t *testing.T) {
	t.Parallel()
	slot, tray := int32(5), int32(-1)
	core := positionOf(nicoPosition(&slot, &tray, nil))
	require.True(t, core.ok)
	// Flow's tray 3 against Core's -1, and Flow's host 2 against none:
	// neither is compared; the slot differs.
	fs := positionDiffs(inventoryPosition(7, 3, 2), core)
	require.Len(t, fs, 1)
	require.Equal(t, "position.slot_id", fs[0].Field)
	require.Equal(t, "7", fs[0].Expected)
	require.Equal(t, "5", fs[0].Actual)
	require.Empty(t, positionDiffs(inventoryPosition(-1, 3, 2), core))
}

func nicoPosition(slot, tray, topology *int32) nico.Position {
	return nico.Position{SlotID: slot, TrayIndex: tray, TopologyID: topology}
}

func inventoryPosition(slot, tray, host int32) inventory.Position {
	return inventory.Position{SlotID: slot, TrayIdx: tray, HostID: host}
}

// TestShareComponents: a host listing the set of the host before shares
// it (no new set); a different set, or one naming a sub-component twice
// (whose entries' versions are merged, as nico.Client.InstalledVersions
// merges them), is a set of its own with the same content and hash as the
// map shareVersions is given.
func TestShareComponents(t *testing.T) {
	t.Parallel()
	cv := func(c string, vs ...string) nico.ComponentVersions {
		return nico.ComponentVersions{Component: c, Versions: vs}
	}
	var he healthEncoder
	a := he.shareComponents([]nico.ComponentVersions{cv("bmc", "1.0"), cv("bios", "2.0"), cv("nic", "3.0", "3.1")})
	require.Equal(t, inventory.SubVersions{"bmc": {"1.0"}, "bios": {"2.0"}, "nic": {"3.0", "3.1"}}, a.v)
	same := he.shareComponents([]nico.ComponentVersions{cv("nic", "3.0", "3.1"), cv("bmc", "1.0"), cv("bios", "2.0")})
	require.Same(t, a, same, "the set of the host before, in another order")
	other := he.shareComponents([]nico.ComponentVersions{cv("bmc", "1.1"), cv("bios", "2.0"), cv("nic", "3.0", "3.1")})
	require.NotSame(t, a, other)
	require.Equal(t, inventory.SubVersions{"bmc": {"1.1"}, "bios": {"2.0"}, "nic": {"3.0", "3.1"}}, other.v)
	require.NotEqual(t, a.sum, other.sum)
	// Three entries, two sub-components: as long as the set before (three
	// sub-components) but not it.
	he.last = a
	twice := he.shareComponents([]nico.ComponentVersions{cv("bmc", "1.0"), cv("nic", "3.0"), cv("nic", "3.1")})
	require.NotSame(t, a, twice)
	require.Equal(t, inventory.SubVersions{"bmc": {"1.0"}, "nic": {"3.0", "3.1"}}, twice.v)
	// A name listed twice whose every entry matches the set before: not it.
	two := he.shareComponents([]nico.ComponentVersions{cv("bmc", "1.0"), cv("nic", "3.0")})
	dup := he.shareComponents([]nico.ComponentVersions{cv("bmc", "1.0"), cv("bmc", "1.0")})
	require.NotSame(t, two, dup)
	require.Equal(t, inventory.SubVersions{"bmc": {"1.0", "1.0"}}, dup.v)
	// Back to the first set: found by its key, the same set and hash.
	again := he.shareComponents([]nico.ComponentVersions{cv("bmc", "1.0"), cv("bios", "2.0"), cv("nic", "3.0", "3.1")})
	require.Same(t, a, again)
}
