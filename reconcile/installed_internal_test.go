package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

// TestInstalledOfDecodesOnlyChangedEntries: a compute host whose
// ListComponentFirmwareVersions entry has the bytes of its last read gets
// the set it decoded to then (the same set, where a decode would make a
// new one: each read has its own healthEncoder, as each cycle does); a
// host whose versions moved is decoded; a host Core does not answer for
// is absent; pruneEntries forgets the hosts the last read did not see.
func TestInstalledOfDecodesOnlyChangedEntries(t *testing.T) {
	t.Parallel()
	core := nicosim.New(nicosim.Options{})
	require.NoError(t, core.Seed([]nicosim.Device{
		{Kind: nicosim.KindCompute, ID: "m1", BMCMAC: "aa:00:00:00:00:01", RackID: "r1", Firmware: map[string]string{"bmc": "1.0", "bios": "1.0"}},
		{Kind: nicosim.KindCompute, ID: "m2", BMCMAC: "aa:00:00:00:00:02", RackID: "r1", Firmware: map[string]string{"bmc": "1.0", "bios": "1.0"}},
		{Kind: nicosim.KindCompute, ID: "m3", BMCMAC: "aa:00:00:00:00:03", RackID: "r1", Firmware: map[string]string{"bmc": "1.0", "bios": "2.0"}},
	}))
	srv, err := sim.Listen("127.0.0.1:0", core.Handler())
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = srv.Close(ctx)
	})
	nc, err := nico.NewClient(srv.URL(), nico.WithTimeout(5*time.Second))
	require.NoError(t, err)
	s := NewSyncer(SyncConfig{Core: nc})
	ctx := context.Background()
	ids := []string{"m1", "m2", "m3"}
	read := func() map[string]*versionSet {
		t.Helper()
		s.entryRead++
		var p SyncPart
		var he healthEncoder
		out, ok := (&cycle{s: s}).installedOf(ctx, &p, ids, &he)
		require.True(t, ok, p.Warnings)
		require.Empty(t, p.Warnings)
		return out
	}

	first := read()
	require.Len(t, first, 3)
	require.Equal(t, []string{"2.0"}, first["m3"].v["bios"])
	require.Same(t, first["m1"], first["m2"], "equal sets shared")
	second := read()
	for _, id := range ids {
		require.Same(t, first[id], second[id], "%s: its entry's bytes are the last read's: not decoded", id)
	}

	require.NoError(t, core.Update("m2", nicosim.DevicePatch{Firmware: map[string]string{"bios": "1.1"}}))
	yes := true
	require.NoError(t, core.Update("m3", nicosim.DevicePatch{Unreported: &yes}))
	third := read()
	require.Same(t, first["m1"], third["m1"])
	require.NotSame(t, first["m2"], third["m2"], "m2's versions moved: decoded")
	require.Equal(t, inventory.SubVersions{"bmc": {"1.0"}, "bios": {"1.1"}}, third["m2"].v)
	require.NotContains(t, third, "m3", "unreported: not answered for")

	s.pruneEntries()
	require.Len(t, s.entries, 2, "m3 was not seen by the last read")
	require.Contains(t, s.entries, "m1")
	require.Contains(t, s.entries, "m2")
}
