package app

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCLIRackOperations(t *testing.T) {
	t.Parallel()
	fb := newFWBench(t, time.Millisecond)
	srv := fb.serve(t, map[string]string{"FLOW_DATA_ENCRYPTION_KEY_PATH": newKeyFile(t)}, nil)
	b := &cliBundle{env: map[string]string{"FLOW_SERVER": srv.url}}

	t.Run("FirmwareUpgrade", func(t *testing.T) {
		t.Parallel()
		r := fb.addRack(t, 41, false)
		creds := writeFile(t, "token", "cli-token\n")
		out := b.mustFlow(t, "firmware", "upgrade", r.Name, "--version", "2.0", "--sub-target", "bmc", "--credentials-file", creds,
			"--start", "2026-01-02T15:04:05Z", "--wait", "--interval", "20ms")
		require.Regexp(t, `demo-0041\s+completed\s+Succeeded$`, out)
		st, _ := fb.sims.nico.State(macs(r, "Compute")[0])
		require.Equal(t, "2.0", st.Firmware["bmc"])
		requireFlowError(t, b, "not both", "firmware", "upgrade", r.Name, "--credentials-file", creds, "--credentials-stdin")
		requireFlowError(t, b, "RFC 3339", "firmware", "upgrade", r.Name, "--start", "tomorrow")
	})
	t.Run("Ingest", func(t *testing.T) {
		t.Parallel()
		r := fb.addRack(t, 42, false)
		require.Regexp(t, `demo-0042\s+completed\s+Succeeded$`, b.mustFlow(t, "ingest", r.Name, "--wait", "--interval", "20ms"))
	})
	t.Run("Decommission", func(t *testing.T) {
		t.Parallel()
		r := fb.addRack(t, 43, true)
		require.Regexp(t, `demo-0043\s+completed\s+Succeeded$`, b.mustFlow(t, "decommission", r.Name, "--wait", "--interval", "20ms"))
	})
	t.Run("BringUpSubmits", func(t *testing.T) {
		t.Parallel()
		r := fb.addRack(t, 44, false)
		out := b.mustFlow(t, "bringup", r.Name)
		require.Regexp(t, `^TASK\s+RACK\n[0-9a-f-]{36}\s+demo-0044$`, out)
	})
	_, _, err := b.flow("bringup")
	require.ErrorContains(t, err, "want RACK... or --component C (names or UUIDs)\nRun 'flow bringup --help' for usage.")
	require.Equal(t, 2, ExitCode(err))
}

func ptr[T any](v T) *T { return &v }
