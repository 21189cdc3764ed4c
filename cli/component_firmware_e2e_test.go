package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/sim/nicosim"
)

// TestCLIComponentInstalledFirmware: `flow component get` shows a
// component's installed firmware per sub-component as the inventory sync
// last read it from the Core simulator, with when it was seen; a device
// Core stops answering for shows since when; -o json stays the component
// read alone.
func TestCLIComponentInstalledFirmware(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	b := s.bundle()
	r := s.addRack(t, 0, rackOptions{linked: true})
	var tray, shelf string // Core IDs
	for _, c := range r.Components {
		switch c.Name {
		case "demo-0000-ct-00":
			tray = c.ExternalID
		case "demo-0000-ps-00":
			shelf = c.ExternalID
		}
	}
	require.NoError(t, s.sims.NICo.Update(tray, nicosim.DevicePatch{
		Firmware: map[string]string{"bios": "1.3.2", "nic": "28.43.1014"}, Instances: map[string]int{"nic": 2},
	}))
	require.NoError(t, s.sims.NICo.Update(shelf, nicosim.DevicePatch{Firmware: map[string]string{"pmc": "PS 3.1.0", "psu": "1.4.2"}}))

	out := b.mustFlow(t, "component", "get", "demo-0000-ct-00")
	require.Contains(t, out, "Installed firmware: never reported by NICo Core")

	b.mustFlow(t, "sync", "run")
	out = b.mustFlow(t, "component", "get", "demo-0000-ct-00")
	require.Contains(t, out, "Installed firmware (seen ")
	require.Regexp(t, `SUB-COMPONENT +VERSIONS`, out)
	require.Regexp(t, `bios +1\.3\.2\n`, out)
	require.Regexp(t, `bmc +1\.0\n`, out)
	require.Regexp(t, `nic +28\.43\.1014, 28\.43\.1014`, out, "one version per NIC")
	out = b.mustFlow(t, "component", "get", "--manufacturer", "Delta", "--serial", "DEMO00000ps00")
	require.Regexp(t, `pmc +PS 3\.1\.0\n`, out)
	require.Regexp(t, `psu +1\.4\.2`, out)
	require.NotContains(t, b.mustFlow(t, "component", "get", "demo-0000-ct-00", "-o", "json"), "bios")

	unreported := true
	require.NoError(t, s.sims.NICo.Update(tray, nicosim.DevicePatch{Unreported: &unreported}))
	b.mustFlow(t, "sync", "run")
	out = b.mustFlow(t, "component", "get", "demo-0000-ct-00")
	require.Contains(t, out, "Installed firmware: not reported by NICo Core since ")
	require.Regexp(t, `bios +1\.3\.2\n`, out, "the versions last seen")
}
