package cli_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/cli"
	"github.com/nicoflow/flow/inventory"
)

func TestCLIRackOperations(t *testing.T) {
	t.Parallel()
	fb := startServer(t, map[string]string{"FLOW_DATA_ENCRYPTION_KEY_PATH": newKeyFile(t)})
	b := fb.bundle()

	t.Run("FirmwareUpgrade", func(t *testing.T) {
		t.Parallel()
		r := fb.addRack(t, 41, rackOptions{})
		creds := writeFile(t, "token", "cli-token\n")
		out := b.mustFlow(t, "firmware", "upgrade", r.Name, "--version", "2.0", "--sub-target", "bmc", "--credentials-file", creds,
			"--start", "2026-01-02T15:04:05Z", "--wait", "--interval", "20ms")
		require.Regexp(t, `demo-0041\s+completed\s+Succeeded$`, out)
		st, _ := fb.sims.NICo.State(computeMACs(r)[0])
		require.Equal(t, "2.0", st.Firmware["bmc"])
		requireFlowError(t, b, "not both", "firmware", "upgrade", r.Name, "--credentials-file", creds, "--credentials-stdin")
		requireFlowError(t, b, "RFC 3339", "firmware", "upgrade", r.Name, "--start", "tomorrow")
	})
	t.Run("Ingest", func(t *testing.T) {
		t.Parallel()
		r := fb.addRack(t, 42, rackOptions{})
		require.Regexp(t, `demo-0042\s+completed\s+Succeeded$`, b.mustFlow(t, "ingest", r.Name, "--wait", "--interval", "20ms"))
	})
	t.Run("Decommission", func(t *testing.T) {
		t.Parallel()
		r := fb.addRack(t, 43, rackOptions{linked: true})
		require.Regexp(t, `demo-0043\s+completed\s+Succeeded$`, b.mustFlow(t, "decommission", r.Name, "--wait", "--interval", "20ms"))
	})
	t.Run("BringUpSubmits", func(t *testing.T) {
		t.Parallel()
		r := fb.addRack(t, 44, rackOptions{})
		out := b.mustFlow(t, "bringup", r.Name)
		require.Regexp(t, `^TASK\s+RACK\n[0-9a-f-]{36}\s+demo-0044$`, out)
	})
	_, _, err := b.flow("bringup")
	require.ErrorContains(t, err, "want RACK... or --component C (names or UUIDs)\nRun 'flow bringup --help' for usage.")
	require.Equal(t, 2, cli.ExitCode(err))
}

// computeMACs returns the BMC MACs of r's compute trays.
func computeMACs(r inventory.Rack) []string {
	var out []string
	for _, c := range r.Components {
		if c.Type == inventory.ComponentTypeCompute {
			out = append(out, c.BMCs[0].MAC.String())
		}
	}
	return out
}
