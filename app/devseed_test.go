package app

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/sim/nicosim"
)

// TestDevFirmwareMix: the devices `flow dev --seed 30` simulates start
// with the documented mix (docs/simulators.md), the same every time, and
// Core's desired versions are the current set.
func TestDevFirmwareMix(t *testing.T) {
	t.Parallel()
	fleet := func() []nicosim.Device {
		var comps []inventory.Component
		for i := range 30 {
			comps = append(comps, inventory.DemoRack(i).Components...)
		}
		devs := simDevices(comps)
		for i := range devs {
			withFirmwareMix(&devs[i])
		}
		return devs
	}
	devs := fleet()
	require.Equal(t, devs, fleet(), "deterministic")
	require.Len(t, devs, 30*35)

	desired := map[string]map[string]string{} // kind → sub-component → version
	for _, e := range demoDesiredFirmware() {
		switch e.Model {
		case "GB200 Compute Tray":
			desired[nicosim.KindCompute] = e.Components
		case "GB200 NVLink Switch Tray":
			desired[nicosim.KindNVSwitch] = e.Components
		case "GB200 Power Shelf":
			desired[nicosim.KindPowerShelf] = e.Components
		}
	}
	require.Len(t, desired, 3, "one desired entry per demo vendor and model")

	counts := map[string][]string{}
	for _, d := range devs {
		require.ElementsMatch(t, nicosim.SubComponents(d.Kind), slices.Collect(maps.Keys(d.Firmware)), d.Name)
		require.ElementsMatch(t, slices.Collect(maps.Keys(desired[d.Kind])), slices.Collect(maps.Keys(d.Firmware)), d.Name)
		if d.Kind == nicosim.KindCompute {
			require.Equal(t, map[string]int{"nic": 2}, d.Instances, d.Name)
		}
		state := "current"
		for c, v := range d.Firmware {
			switch {
			case v == desired[d.Kind][c]:
			case v == demoPrevious[d.Kind][c]:
				state = "behind"
			case d.Name == demoAhead.name && c == demoAhead.component && v == demoAhead.version:
				state = "ahead"
			default:
				t.Fatalf("%s: %s %s is neither current, previous nor ahead", d.Name, c, v)
			}
		}
		if d.Unreported {
			state = "unreported"
		}
		counts[state] = append(counts[state], d.Name)
	}
	require.Equal(t, []string{"demo-0000-ct-00"}, counts["ahead"])
	require.Equal(t, []string{"demo-0002-ct-04", "demo-0003-ct-09"}, counts["unreported"])
	// Racks 1, 11 and 21 whole; in racks 5, 15 and 25 a tray's NICs and a
	// shelf's PSU.
	require.Len(t, counts["behind"], 3*35+3*2)
	require.Contains(t, counts["behind"], "demo-0015-ct-03")
	require.Contains(t, counts["behind"], "demo-0025-ps-06")
	require.Len(t, counts["current"], 30*35-3*35-3*2-1-2)
}
