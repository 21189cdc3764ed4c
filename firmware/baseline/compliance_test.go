package baseline

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
)

func TestNormalizeEntries(t *testing.T) {
	t.Parallel()
	ok := Entry{ComponentType: "Compute", Component: "BMC", Version: " 2.0 "}
	for _, tt := range []struct {
		name    string
		entries []Entry
		field   string // the field the error names ("" no error)
	}{
		{name: "Fine", entries: []Entry{ok, {ComponentType: "nvswitch", Component: "nvos", Version: "NVOS 25.02"}}},
		{name: "None", entries: nil, field: "entries"},
		{name: "UnknownType", entries: []Entry{ok, {ComponentType: "gpu", Component: "bmc", Version: "1"}}, field: "entries[1].component_type"},
		{name: "UnknownSub", entries: []Entry{{ComponentType: "powershelf", Component: "bios", Version: "1"}}, field: "entries[0].component"},
		{name: "EmptyVersion", entries: []Entry{{ComponentType: "compute", Component: "bios", Version: "  "}}, field: "entries[0].version"},
		{name: "NoDigit", entries: []Entry{{ComponentType: "compute", Component: "bios", Version: "latest"}}, field: "entries[0].version"},
		{name: "Control", entries: []Entry{{ComponentType: "compute", Component: "bios", Version: "1.0\n"}}, field: ""},
		{name: "ControlInside", entries: []Entry{{ComponentType: "compute", Component: "bios", Version: "1.\x000"}}, field: "entries[0].version"},
		{name: "Duplicate", entries: []Entry{ok, {ComponentType: "compute", Component: "bmc", Version: "3.0"}}, field: "entries[1]"},
		{name: "VendorsDiffer", entries: []Entry{ok, {ComponentType: "compute", Component: "bmc", Version: "3.0", Vendor: "Wiwynn"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := NormalizeEntries("entries", tt.entries)
			if tt.field == "" {
				require.NoError(t, err)
				for _, e := range got {
					require.Equal(t, e.Component, lower(e.Component))
				}
				return
			}
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.ErrorIs(t, err, ErrInvalid)
			require.Equal(t, tt.field, fe.Field, err.Error())
		})
	}
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

func TestEvaluate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	entries, err := NormalizeEntries("entries", []Entry{
		{ComponentType: "compute", Component: "bmc", Version: "2.0"},
		{ComponentType: "compute", Component: "nic", Version: "28.39.1002"},
		{ComponentType: "compute", Component: "bmc", Version: "2.5", Model: "GB300 Compute Tray"},
		{ComponentType: "compute", Component: "bmc", Version: "2.1", Vendor: "wiwynn"},
		{ComponentType: "nvswitch", Component: "nvos", Version: "NVOS 25.02"},
	})
	require.NoError(t, err)
	ev := NewEvaluator(entries, now, time.Hour)
	seen := func(ago time.Duration, v inventory.SubVersions) *inventory.InstalledFirmware {
		return &inventory.InstalledFirmware{Versions: v, Reported: true, SeenAt: now.Add(-ago)}
	}
	tray := func(maker, model string, in *inventory.InstalledFirmware) inventory.FirmwareDevice {
		return inventory.FirmwareDevice{ID: uuid.New(), Type: inventory.ComponentTypeCompute, Manufacturer: maker, Model: model, Installed: in}
	}
	task := uuid.New()
	for _, tt := range []struct {
		name  string
		dev   inventory.FirmwareDevice
		task  *uuid.UUID
		state string
		diffs map[string]string // sub-component → its state
	}{
		{name: "Compliant", dev: tray("Quanta", "", seen(0, inventory.SubVersions{"bmc": {"2.0"}, "nic": {"28.39.1002", "28.39.1002"}})), state: StateCompliant},
		{name: "SameVersionOtherSpelling", dev: tray("Quanta", "", seen(0, inventory.SubVersions{"bmc": {"2.0.0GA"}, "nic": {"28.39.1002"}})), state: StateCompliant},
		{name: "Below", dev: tray("Quanta", "", seen(0, inventory.SubVersions{"bmc": {"1.9"}, "nic": {"28.39.1002"}})), state: StateUpgrade, diffs: map[string]string{"bmc": StateUpgrade}},
		{name: "OneOfTwoNICsBelow", dev: tray("Quanta", "", seen(0, inventory.SubVersions{"bmc": {"2.0"}, "nic": {"28.39.1002", "28.38.9"}})), state: StateUpgrade, diffs: map[string]string{"nic": StateUpgrade}},
		{name: "Above", dev: tray("Quanta", "", seen(0, inventory.SubVersions{"bmc": {"2.0.1"}, "nic": {"28.39.1002"}})), state: StateDowngrade, diffs: map[string]string{"bmc": StateDowngrade}},
		{name: "BelowBeatsAbove", dev: tray("Quanta", "", seen(0, inventory.SubVersions{"bmc": {"3.0"}, "nic": {"1.0"}})), state: StateUpgrade, diffs: map[string]string{"bmc": StateDowngrade, "nic": StateUpgrade}},
		{name: "SubNotReported", dev: tray("Quanta", "", seen(0, inventory.SubVersions{"bmc": {"2.0"}})), state: StateUnknown, diffs: map[string]string{"nic": StateUnknown}},
		{name: "Unorderable", dev: tray("Quanta", "", seen(0, inventory.SubVersions{"bmc": {"FW 2.0"}, "nic": {"28.39.1002"}})), state: StateUnknown, diffs: map[string]string{"bmc": StateUnknown}},
		{name: "NeverReported", dev: tray("Quanta", "", nil), state: StateUnknown},
		{name: "Stale", dev: tray("Quanta", "", seen(2*time.Hour, inventory.SubVersions{"bmc": {"2.0"}, "nic": {"28.39.1002"}})), state: StateUnknown},
		{name: "UnreportedButRecent", dev: tray("Quanta", "", &inventory.InstalledFirmware{Versions: inventory.SubVersions{"bmc": {"2.0"}, "nic": {"28.39.1002"}}, SeenAt: now.Add(-time.Minute)}), state: StateCompliant},
		{name: "Updating", dev: tray("Quanta", "", seen(0, inventory.SubVersions{"bmc": {"1.0"}})), task: &task, state: StateUpdating},
		{name: "VendorEntryWins", dev: tray("WIWYNN", "", seen(0, inventory.SubVersions{"bmc": {"2.0"}, "nic": {"28.39.1002"}})), state: StateUpgrade, diffs: map[string]string{"bmc": StateUpgrade}},
		{name: "ModelEntryWinsOverVendor", dev: tray("Wiwynn", "GB300 Compute Tray", seen(0, inventory.SubVersions{"bmc": {"2.5"}, "nic": {"28.39.1002"}})), state: StateCompliant},
		{name: "ShelfNotCovered", dev: inventory.FirmwareDevice{Type: inventory.ComponentTypePowerShelf, Installed: seen(0, nil)}, state: StateNotCovered},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ev.Evaluate(&tt.dev, tt.task)
			require.Equal(t, tt.state, got.State, "%+v", got)
			diffs := map[string]string{}
			for _, d := range got.Differences {
				diffs[d.Component] = d.State
			}
			if tt.diffs == nil {
				tt.diffs = map[string]string{}
			}
			require.Equal(t, tt.diffs, diffs)
		})
	}
}
