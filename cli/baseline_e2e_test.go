package cli_test

import (
	"encoding/csv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/cli"
)

// TestCLIBaseline: a baseline's life from the CLI on a real server whose
// inventory sync reads installed versions from the Core simulator:
// create, compliance (table, csv, roll-ups), a stale edit refused, bad
// input named, activation, import from Core, and apply's dry run.
func TestCLIBaseline(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	b := s.bundle()
	s.addRack(t, 0, rackOptions{linked: true})
	s.addRack(t, 1, rackOptions{linked: true})
	b.mustFlow(t, "sync", "run")

	_, _, err := b.flow("compliance")
	require.ErrorContains(t, err, "failed_precondition: baseline: no baseline is active")

	out := b.mustFlow(t, "baseline", "create", "site", "--set", "compute.bmc=2.0", "--description", "GB200 fall 2026", "--activate")
	require.Contains(t, out, "baseline site revision 1 of 1 (active: revision 1")
	require.Contains(t, out, "compute  bmc        2.0")

	out = b.mustFlow(t, "compliance", "--by", "rack")
	require.Contains(t, out, "70 devices: 0 compliant, 36 upgrade, 0 downgrade, 0 unknown, 0 updating, 34 not covered")
	require.Contains(t, out, "demo-0000-ct-00")
	require.Contains(t, out, "bmc 1.0→2.0")
	require.Contains(t, out, "rack  demo-0001  upgrade")

	out = b.mustFlow(t, "-o", "csv", "compliance", "--rack", "demo-0001", "--type", "compute", "--limit", "2")
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 3)
	require.Equal(t, []string{"device", "component_id", "type", "rack", "nvl_domain", "row", "hall", "state", "reason", "sub_component", "sub_state", "desired", "installed", "seen_at"}, rows[0])
	require.Equal(t, []string{"demo-0001", "upgrade", "bmc", "upgrade", "2.0", "1.0"}, []string{rows[1][3], rows[1][7], rows[1][9], rows[1][10], rows[1][11], rows[1][12]})
	_, _, err = b.flow("-o", "csv", "baseline", "list")
	require.Equal(t, 2, cli.ExitCode(err), "csv is compliance's")

	// Edits: one based on an older revision is refused, bad input named.
	b.mustFlow(t, "baseline", "update", "site", "--revision", "1", "--set", "compute.bmc=2.0", "--set", "nvswitch.nvos=25.02")
	_, _, err = b.flow("baseline", "update", "site", "--revision", "1", "--set", "compute.bmc=3.0")
	require.ErrorContains(t, err, "aborted: baseline: changed since it was read: site is at revision 2")
	_, _, err = b.flow("baseline", "update", "site", "--revision", "2", "--set", "compute.bogus=1.0")
	require.ErrorContains(t, err, `invalid_argument: entries[0].component: unknown compute sub-component "bogus"`)
	_, _, err = b.flow("baseline", "create", "empty", "--set", "compute.bmc=")
	require.ErrorContains(t, err, "invalid_argument: entries[0].version: is required")
	_, _, err = b.flow("baseline", "activate", "site", "--revision", "9")
	require.ErrorContains(t, err, "not_found: baseline: not found: site has no revision 9 (its newest is 2)")
	_, _, err = b.flow("baseline", "update", "site", "--set", "compute.bmc=2.0")
	require.Equal(t, 2, cli.ExitCode(err), "--revision is required")
	out = b.mustFlow(t, "baseline", "get", "site")
	require.Contains(t, out, "baseline site revision 2 of 2 (active: revision 1")
	require.Contains(t, out, "history:")
	out = b.mustFlow(t, "baseline", "list")
	require.Contains(t, out, "site")
	require.Contains(t, out, "revision 1")

	// Apply, dry: the one plan, nothing created.
	out = b.mustFlow(t, "baseline", "apply", "--dry-run", "--waves", "1")
	require.Contains(t, out, "dry run: would upgrade 36 devices on 2 racks in 2 waves to baseline site revision 1")
	require.Contains(t, out, `versions: {"compute":{"bmc":"2.0"}}`)
	out = b.mustFlow(t, "rollout", "list")
	require.NotContains(t, out, "baseline-site")

	// Apply: one run brings both racks to the baseline; the next sync
	// finds every tray compliant, and a second apply has nothing to do.
	out = b.mustFlow(t, "baseline", "apply", "--waves", "1", "--name", "to-baseline")
	require.Contains(t, out, "upgrades 36 devices on 2 racks in 2 waves to baseline site revision 1")
	b.mustFlow(t, "rollout", "watch", "to-baseline", "--interval", "100ms")
	b.mustFlow(t, "sync", "run")
	out = b.mustFlow(t, "compliance", "--type", "compute")
	require.Contains(t, out, "36 devices: 36 compliant, 0 upgrade")
	out = b.mustFlow(t, "baseline", "apply")
	require.Contains(t, out, "nothing to do: no device is below baseline site revision 1; no run created")
}
