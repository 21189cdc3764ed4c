package app

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDevReadmeSequenceValidatesClean runs the README's sequence on
// `flow dev --seed 1` (create g10, power it on, upgrade its firmware, bring
// up the demo rack) and checks that, once the inventory sync has run,
// `flow component validate` reports no diffs: Flow learnt the new firmware
// versions and power states from Core.
func TestDevReadmeSequenceValidatesClean(t *testing.T) {
	t.Parallel()
	devSlot(t)
	dir, err := os.MkdirTemp("", "flow-dev-readme-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithCancel(context.Background())
	r := &devRun{cancel: cancel, done: make(chan error, 1), out: &syncBuffer{}}
	// A free admin port: another flow dev (or test) may hold the default.
	env := map[string]string{"FLOW_LOG_LEVEL": "warn", "FLOW_ADMIN_LISTEN_ADDR": "127.0.0.1:0"}
	// --sim-phase 1s, as the documents' examples run (doctest): the
	// sequence's firmware phases, ingestion and bring-up steps take 1 s
	// each instead of 10 s. --sim-power-delay 1ms: a power change is done
	// before the rules' VerifyPowerStatus first looks, which otherwise
	// polls again only after 15 s (bring-up alone took 110 s of such
	// polls). What is checked (Flow learns the outcome from Core) does not
	// depend on how long the simulators take.
	go func() {
		r.done <- run(ctx, []string{"flow", "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--seed", "1", "--sim-phase", "1s", "--sim-power-delay", "1ms"}, func(k string) string { return env[k] }, r.out, r.out)
	}()
	addr := r.addr(t)
	defer r.stop(t)
	flow := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := run(ctx, append([]string{"flow", "--server", addr}, args...), func(string) string { return "" }, &stdout, &stderr)
		require.NoError(t, err, "flow %s\n%s\n%s", strings.Join(args, " "), stdout.String(), stderr.String())
		return stdout.String()
	}
	flow("rack", "create", "-f", "../examples/rack-g10.json")
	time.Sleep(devSeedInterval + time.Second) // the simulators learn g10
	flow("power", "on", "g10", "--wait")
	flow("firmware", "upgrade", "g10", "--version", "2.0", "--wait")
	flow("bringup", "demo-0000", "--wait")

	// Within one sync interval (10s under flow dev) of the last operation,
	// the periodic sync has made Flow hold the new versions, and the stored
	// drift is clean.
	require.Eventually(t, func() bool {
		return strings.Contains(flow("component", "list", "--rack", "g10", "-o", "json"), `"firmwareVersion": "2.0"`)
	}, 30*time.Second, time.Second)
	out := flow("component", "validate")
	require.Contains(t, out, "(0 of 0 diffs: 0 missing, 0 unexpected, 0 mismatch;")
	require.Contains(t, out, "as of the inventory sync at")
	require.Contains(t, flow("sync", "run"), "rows changed")
	status := flow("sync", "status")
	require.Contains(t, status, "compute")
	require.NotContains(t, status, "FAILED")
}
