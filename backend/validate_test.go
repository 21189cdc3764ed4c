package backend_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/backend"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	expected := []backend.Expected{
		{ID: "u1", Name: "a-compute", Type: backend.Compute, BMCMAC: "AA-00-00-00-00-01", Position: &backend.Position{SlotID: 1, TrayIndex: 0, HostID: 1}},
		{ID: "u2", Name: "b-compute", Type: backend.Compute, BMCMAC: "aa:00:00:00:00:02", Position: &backend.Position{SlotID: 2, TrayIndex: 1, HostID: -1}},
		{ID: "u3", Name: "c-switch", Type: backend.NVSwitch, BMCMAC: "aa:00:00:00:00:03"},
		{ID: "u4", Name: "d-shelf", Type: backend.PowerShelf, ExternalID: "p4"},
	}
	actual := []backend.Actual{
		{Type: backend.Compute, ExternalID: "m1", BMCMAC: "aa:00:00:00:00:01", Position: &backend.Position{SlotID: 1, TrayIndex: 0, HostID: 1}},
		{Type: backend.Compute, ExternalID: "m2", BMCMAC: "aa:00:00:00:00:02", Position: &backend.Position{SlotID: 3, TrayIndex: 1, HostID: 7}},
		{Type: backend.PowerShelf, ExternalID: "p4"},
		{Type: backend.NVSwitch, ExternalID: "s9", BMCMAC: "aa:00:00:00:00:09"},
	}
	res := backend.Validate(expected, actual, backend.ValidateOptions{})
	require.Equal(t, 3, res.Total)
	require.Equal(t, 1, res.Missing)
	require.Equal(t, 1, res.Unexpected)
	require.Equal(t, 1, res.Mismatch)
	require.Equal(t, 2, res.Match)
	require.Len(t, res.Diffs, 3)

	require.Equal(t, backend.DiffMismatch, res.Diffs[0].Type)
	require.Equal(t, "m2", res.Diffs[0].ComponentID)
	require.Equal(t, []backend.FieldDiff{{Field: "position.slot_id", Expected: "2", Actual: "3"}}, res.Diffs[0].Fields, "unknown host_id is not compared")
	require.Equal(t, backend.DiffMissing, res.Diffs[1].Type)
	require.Equal(t, "u3", res.Diffs[1].ID)
	require.Equal(t, "aa:00:00:00:00:03", res.Diffs[1].MAC)
	require.Equal(t, backend.DiffUnexpected, res.Diffs[2].Type)
	require.Equal(t, "s9", res.Diffs[2].ComponentID)

	page := backend.Validate(expected, actual, backend.ValidateOptions{Offset: 1, Limit: 1})
	require.Equal(t, 3, page.Total, "counts cover every diff")
	require.Len(t, page.Diffs, 1)
	require.Equal(t, backend.DiffMissing, page.Diffs[0].Type)

	desc := backend.Validate(expected, actual, backend.ValidateOptions{Descending: true})
	require.Equal(t, backend.DiffUnexpected, desc.Diffs[0].Type)

	beyond := backend.Validate(expected, actual, backend.ValidateOptions{Offset: 10})
	require.Empty(t, beyond.Diffs)
	require.Equal(t, 3, beyond.Total)
}

func TestValidateFields(t *testing.T) {
	t.Parallel()
	e := backend.Expected{ID: "u1", Name: "c1", Type: backend.Compute, BMCMAC: "aa:00:00:00:00:01", Serial: "S1", ExternalID: "m1", FirmwareVersion: "1.0",
		Position: &backend.Position{SlotID: 1, TrayIndex: 2, HostID: -1}}
	for _, tt := range []struct {
		name string
		a    backend.Actual
		want []backend.FieldDiff
	}{
		{name: "Same", a: backend.Actual{Type: backend.Compute, ExternalID: "m1", BMCMAC: "AA:00:00:00:00:01", Serial: "S1", FirmwareVersion: "1.0"}},
		{name: "UnknownIsNotCompared", a: backend.Actual{BMCMAC: "aa:00:00:00:00:01"}},
		{name: "Serial", a: backend.Actual{ExternalID: "m1", BMCMAC: "aa:00:00:00:00:01", Serial: "S2"},
			want: []backend.FieldDiff{{Field: "serial_number", Expected: "S1", Actual: "S2"}}},
		{name: "Firmware", a: backend.Actual{BMCMAC: "aa:00:00:00:00:01", FirmwareVersion: "1.1"},
			want: []backend.FieldDiff{{Field: "firmware_version", Expected: "1.0", Actual: "1.1"}}},
		{name: "ManagerID", a: backend.Actual{ExternalID: "m9", BMCMAC: "aa:00:00:00:00:01"},
			want: []backend.FieldDiff{{Field: "component_id", Expected: "m1", Actual: "m9"}}},
		{name: "MACWhenMatchedByID", a: backend.Actual{ExternalID: "m1", BMCMAC: "aa:00:00:00:00:77"},
			want: []backend.FieldDiff{{Field: "bmcs.mac_address", Expected: "aa:00:00:00:00:01", Actual: "aa:00:00:00:00:77"}}},
		{name: "PSMKeyIsNotAnID", a: backend.Actual{ExternalID: "aa:00:00:00:00:01", BMCMAC: "aa:00:00:00:00:01"}},
		{name: "TypeAndPosition", a: backend.Actual{Type: backend.NVSwitch, BMCMAC: "aa:00:00:00:00:01", Position: &backend.Position{SlotID: 1, TrayIndex: 3, HostID: 4}},
			want: []backend.FieldDiff{{Field: "type", Expected: "compute", Actual: "nvswitch"}, {Field: "position.tray_idx", Expected: "2", Actual: "3"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := backend.Validate([]backend.Expected{e}, []backend.Actual{tt.a}, backend.ValidateOptions{})
			if tt.want == nil {
				require.Zero(t, res.Total)
				require.Equal(t, 1, res.Match)
				return
			}
			require.Equal(t, 1, res.Mismatch)
			require.Equal(t, tt.want, res.Diffs[0].Fields)
		})
	}
}

func TestValidateScope(t *testing.T) {
	t.Parallel()
	expected := []backend.Expected{
		{ID: "in", Name: "a", Type: backend.Compute, BMCMAC: "aa:00:00:00:00:01"},
		{ID: "out", Name: "b", Type: backend.Compute, BMCMAC: "aa:00:00:00:00:02"},
		{ID: "gone", Name: "c", Type: backend.Compute, BMCMAC: "aa:00:00:00:00:03"},
	}
	actual := []backend.Actual{
		{Type: backend.Compute, ExternalID: "m1", BMCMAC: "aa:00:00:00:00:01"},
		{Type: backend.Compute, ExternalID: "m2", BMCMAC: "aa:00:00:00:00:02"},
		{Type: backend.Compute, ExternalID: "x1", BMCMAC: "aa:00:00:00:00:08", RackID: "r1"},
		{Type: backend.Compute, ExternalID: "x2", BMCMAC: "aa:00:00:00:00:09", RackID: "r2"},
	}
	res := backend.Validate(expected, actual, backend.ValidateOptions{
		InScope:        func(e *backend.Expected) bool { return e.ID != "out" },
		KeepUnexpected: func(a *backend.Actual) bool { return a.RackID == "r1" },
	})
	require.Equal(t, 1, res.Match, "out of scope, matched all the same: never unexpected")
	require.Equal(t, 1, res.Missing)
	require.Equal(t, 1, res.Unexpected)
	require.Equal(t, 2, res.Total)
	require.Equal(t, "gone", res.Diffs[0].ID)
	require.Equal(t, "x1", res.Diffs[1].ComponentID)
}

// TestValidateAgainstSimulator is the done-when: a seeded fleet
// validates clean, and a device the simulator loses shows up missing.
func TestValidateAgainstSimulator(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ms := backend.New(backend.DefaultConfig(), b.nico, b.psm)
	ctx := context.Background()
	expected := []backend.Expected{
		{ID: "u1", Name: "compute-1", Type: backend.Compute, BMCMAC: "cc:00:00:00:01:01"},
		{ID: "u2", Name: "switch-1", Type: backend.NVSwitch, BMCMAC: "cc:00:00:00:02:01"},
		{ID: "u3", Name: "shelf-1", Type: backend.PowerShelf, BMCMAC: shelfMAC},
	}
	actual, err := ms.Inventory(ctx)
	require.NoError(t, err)
	got := map[string]backend.Actual{}
	for _, a := range actual {
		got[a.ExternalID] = a
	}
	require.Equal(t, backend.Actual{Type: backend.Compute, ExternalID: "m1", BMCMAC: "cc:00:00:00:01:01", Serial: "C1", FirmwareVersion: "1.0"}, got["m1"])
	require.Equal(t, "S1", got["s1"].Serial, "switch serial from GetComponentInventory")
	require.Equal(t, "2.0", got["s1"].FirmwareVersion)
	require.Equal(t, "P1", got["p1"].Serial)
	require.Equal(t, "3.0", got["p1"].FirmwareVersion, "shelf: PMC version when no BMC entry")
	res := backend.Validate(expected, actual, backend.ValidateOptions{})
	require.Zero(t, res.Total)
	require.Equal(t, 3, res.Match)

	require.True(t, b.nicoSim.Remove("s1"))
	actual, err = ms.Inventory(ctx)
	require.NoError(t, err)
	res = backend.Validate(expected, actual, backend.ValidateOptions{})
	require.Equal(t, 1, res.Missing)
	require.Equal(t, "u2", res.Diffs[0].ID)
}
