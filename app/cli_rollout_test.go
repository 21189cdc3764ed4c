package app

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCLIRollout drives a rollout through the CLI: created from a YAML
// file (flags overriding it), watched to its phase gate (exit 4), listed,
// shown, its targets, advanced past the gate with the --expect guard,
// watched to its end (exit 0); a second one from flags only, paused,
// resumed and cancelled. A create without an explicit selection, or with
// --percentage 0, creates nothing.
func TestCLIRollout(t *testing.T) {
	t.Parallel()
	bench := newRolloutBench(t, 4, time.Millisecond)
	srv := bench.serve(t, nil, nil)
	b := &cliBundle{env: map[string]string{"FLOW_SERVER": srv.url}}

	file := writeFile(t, "rollout.yaml", `name: cli rollout
description: from a file
percentage: 100
phases: 2
max_concurrent: 1
gate_count: 2
target_version: "2.0"
initial_retry_delay: 1s
`)
	// No selection, or 0 %: refused, nothing created.
	_, _, err := b.flow("rollout", "create", "--name", "x", "--max-concurrent", "2", "--gate-count", "1")
	require.ErrorContains(t, err, "choose the targets: --all (every rack of the site), --racks R,... (those racks) or --percentage N")
	require.Equal(t, 2, ExitCode(err))
	_, _, err = b.flow("rollout", "create", "--name", "x", "--max-concurrent", "2", "--gate-count", "1", "--percentage", "0", "--version", "2.0")
	require.ErrorContains(t, err, "--percentage must be 1-100, not 0")
	require.Equal(t, 2, ExitCode(err))
	require.Contains(t, b.mustFlow(t, "rollout", "list"), "0 of 0 rollouts")

	out := b.mustFlow(t, "rollout", "create", "-f", file, "--max-concurrent", "2")
	require.Regexp(t, `^created rollout [0-9a-f-]{36}$`, out)
	// watch returns at the phase gate, exit 4, saying how to go on.
	gate, _, err := b.flow("rollout", "watch", "cli rollout", "--interval", "50ms")
	require.Equal(t, 4, ExitCode(err), "%v", err)
	require.ErrorContains(t, err, "rollout cli rollout paused at the phase gate (paused/phase_gate): phase 0 finished; advance to start phase 1\n  open phase 1: flow --server "+srv.url+" rollout advance 'cli rollout' --expect 1")
	require.Contains(t, gate, "cli rollout  paused/phase_gate  phase 0 of phases 0-1")
	got := b.mustFlow(t, "rollout", "get", "cli rollout")
	require.Contains(t, got, "State:       paused/phase_gate")
	require.Contains(t, got, "Phase:       0 of phases 0-1 (auto-advance: false)")
	require.Contains(t, got, "Concurrency: 2")
	require.Contains(t, got, "Gate 0:      2 failed (per phase)")
	require.Contains(t, got, "This phase:  2 targets: 2 completed, 0 failed")
	targets := b.mustFlow(t, "rollout", "targets", "cli rollout")
	require.Regexp(t, `^PHASE\s+SEQ\s+RACK\s+STATUS\s+TASK\s+MESSAGE\n0\s+0\s+demo-03\d\d\s+completed\s+[0-9a-f-]{36}\s+Succeeded\n`, targets)
	require.Contains(t, targets, "2 of 2 targets")

	_, _, err = b.flow("rollout", "advance", "cli rollout", "--expect", "5")
	require.ErrorContains(t, err, "expected_phase_index")
	require.Contains(t, b.mustFlow(t, "rollout", "advance", "cli rollout", "--expect", "1"), "advanced rollout")
	watch := b.mustFlow(t, "rollout", "watch", "cli rollout", "--interval", "50ms")
	require.Contains(t, watch, "cli rollout  completed  phase 1 of phases 0-1")
	require.Regexp(t, `PHASE\s+TARGETS\s+PENDING\s+RUNNING\s+BLOCKED\s+COMPLETED\s+FAILED\s+TERMINATED\s+SKIPPED\n0\s+2\s+0\s+0\s+0\s+2\s+0\s+0\s+0\n1\s+2\s+0\s+0\s+0\s+2`, watch)
	require.Regexp(t, `cli rollout\s+completed\s+2\s+all 4 targets finished`, b.mustFlow(t, "rollout", "list"))
	require.Contains(t, b.mustFlow(t, "rollout", "targets", "cli rollout", "--phases", "all"), "4 of 4 targets")

	// From flags only, over two named racks, excluding nothing new.
	out = b.mustFlow(t, "rollout", "create", "--name", "by flags", "--racks", bench.racks[0].Name+","+bench.racks[1].Name,
		"--max-concurrent", "1", "--gate-rate", "50", "--phase-counts", "1", "--auto-advance", "--ordering", "round-robin", "--version", "2.0")
	require.Regexp(t, `^created rollout `, out)
	require.Contains(t, b.mustFlow(t, "rollout", "pause", "by flags"), "paused rollout")
	require.Contains(t, b.mustFlow(t, "rollout", "get", "by flags"), "State:       paused/operator_paused")
	require.Contains(t, b.mustFlow(t, "rollout", "list", "--status", "paused"), "by flags")
	require.Contains(t, b.mustFlow(t, "rollout", "resume", "by flags"), "resumed rollout")
	require.Contains(t, b.mustFlow(t, "rollout", "cancel", "by flags", "--reason", "enough"), "cancelled rollout")
	require.Contains(t, b.mustFlow(t, "rollout", "get", "by flags"), "Message:     operation run cancelled: enough")

	_, _, err = b.flow("rollout", "create", "--name", "bad", "--all", "--version", "2.0", "--max-concurrent", "0", "--gate-rate", "10")
	require.ErrorContains(t, err, "flow rollout create needs --max-concurrent N", "0 racks at once is no value: the flag is named")
	_, _, err = b.flow("rollout", "create", "--name", "bad", "--all", "--version", "2.0", "--max-concurrent", "-1", "--gate-rate", "10")
	require.ErrorContains(t, err, "max_concurrent_targets", "a value the server refuses: its field is named")
	_, _, err = b.flow("rollout", "get", "no such rollout")
	require.Error(t, err)
}
