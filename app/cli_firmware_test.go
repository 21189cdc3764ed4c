package app

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
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
	_, stderr, err := b.flow("bringup")
	require.Error(t, err)
	require.Contains(t, stderr, "flow bringup")
}

func TestReadCredentials(t *testing.T) {
	t.Parallel()
	shared, err := readCredentials("", true, false, strings.NewReader("  tok\n"))
	require.NoError(t, err)
	require.Equal(t, "tok", shared.GetShared())

	per, err := readCredentials("", true, true, strings.NewReader(`{"compute":"c","nvswitch":"n"}`))
	require.NoError(t, err)
	require.True(t, proto.Equal(&flowv1.PerComponentFirmwareAuthenticationData{Compute: ptr("c"), Nvswitch: ptr("n")}, per.GetPerComponent()))

	_, err = readCredentials("", true, true, strings.NewReader(`{"gpu":"hunter2"}`))
	require.ErrorContains(t, err, "JSON object with keys")
	require.NotContains(t, err.Error(), "hunter2", "a secret is never echoed")

	_, err = readCredentials("", true, false, strings.NewReader(" \n"))
	require.ErrorContains(t, err, "empty")
	_, err = readCredentials("", false, true, nil)
	require.ErrorContains(t, err, "--per-component needs")
	none, err := readCredentials("", false, false, nil)
	require.NoError(t, err)
	require.Nil(t, none)
}
