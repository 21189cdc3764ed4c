package app

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCLIRollout drives a rollout through the CLI: created from a YAML
// file (flags overriding it), listed, shown, its targets, advanced past a
// phase gate with the --expect guard, watched to its end; a second one from
// flags only, paused, resumed and cancelled.
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
	out := b.mustFlow(t, "rollout", "create", "-f", file, "--max-concurrent", "2")
	require.Regexp(t, `^created rollout [0-9a-f-]{36}$`, out)
	require.Eventually(t, func() bool {
		return strings.Contains(b.mustFlow(t, "rollout", "get", "cli rollout"), "State:       paused/phase_gate")
	}, time.Minute, 50*time.Millisecond)
	got := b.mustFlow(t, "rollout", "get", "cli rollout")
	require.Contains(t, got, "Phase:       1 of 2 (auto-advance: false)")
	require.Contains(t, got, "Concurrency: 2")
	require.Contains(t, got, "Gate 0:      2 failed (per phase)")
	require.Contains(t, got, "This phase:  2 targets: 2 completed, 0 failed")
	targets := b.mustFlow(t, "rollout", "targets", "cli rollout")
	require.Regexp(t, `^PHASE\s+SEQ\s+RACK\s+STATUS\s+TASK\s+MESSAGE\n0\s+0\s+demo-03\d\d\s+completed\s+[0-9a-f-]{36}\s+Succeeded\n`, targets)
	require.Contains(t, targets, "2 of 2 targets")

	_, _, err := b.flow("rollout", "advance", "cli rollout", "--expect", "5")
	require.ErrorContains(t, err, "expected_phase_index")
	require.Contains(t, b.mustFlow(t, "rollout", "advance", "cli rollout", "--expect", "1"), "advanced rollout")
	watch := b.mustFlow(t, "rollout", "watch", "cli rollout", "--interval", "50ms")
	require.Contains(t, watch, "cli rollout  completed  phase 2/2")
	require.Regexp(t, `PHASE\s+TARGETS\s+PENDING\s+RUNNING\s+BLOCKED\s+COMPLETED\s+FAILED\s+TERMINATED\s+SKIPPED\n1\s+2\s+0\s+0\s+0\s+2\s+0\s+0\s+0\n2\s+2\s+0\s+0\s+0\s+2`, watch)
	require.Regexp(t, `cli rollout\s+completed\s+2\s+all 4 targets finished`, b.mustFlow(t, "rollout", "list"))
	require.Contains(t, b.mustFlow(t, "rollout", "targets", "cli rollout", "--phases", "all"), "4 of 4 targets")

	// From flags only, over two named racks, excluding nothing new.
	out = b.mustFlow(t, "rollout", "create", "--name", "by flags", "--racks", bench.racks[0].Name+","+bench.racks[1].Name,
		"--max-concurrent", "1", "--gate-rate", "50", "--phase-counts", "1", "--auto-advance", "--ordering", "round-robin")
	require.Regexp(t, `^created rollout `, out)
	require.Contains(t, b.mustFlow(t, "rollout", "pause", "by flags"), "paused rollout")
	require.Contains(t, b.mustFlow(t, "rollout", "get", "by flags"), "State:       paused/operator_paused")
	require.Contains(t, b.mustFlow(t, "rollout", "list", "--status", "paused"), "by flags")
	require.Contains(t, b.mustFlow(t, "rollout", "resume", "by flags"), "resumed rollout")
	require.Contains(t, b.mustFlow(t, "rollout", "cancel", "by flags", "--reason", "enough"), "cancelled rollout")
	require.Contains(t, b.mustFlow(t, "rollout", "get", "by flags"), "Message:     operation run cancelled: enough")

	_, _, err = b.flow("rollout", "create", "--name", "bad", "--max-concurrent", "0", "--gate-rate", "10")
	require.ErrorContains(t, err, "max_concurrent_targets")
	_, _, err = b.flow("rollout", "get", "no such rollout")
	require.Error(t, err)
}
