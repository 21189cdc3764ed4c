package app

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMetricsPresentFromTheStart scrapes a fresh server that has done
// nothing yet: every flow_* family docs/observability.md names is there,
// with the label values known at start at zero, so a rate() over any of
// them has a series before the first event.
func TestMetricsPresentFromTheStart(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond, withAdmin)
	doc, err := os.ReadFile("../docs/observability.md")
	require.NoError(t, err)
	var want []string
	for _, m := range regexp.MustCompile("`(flow_[a-z_]+[a-z])(?:\\{[^`]*)?`").FindAllStringSubmatch(string(doc), -1) {
		if !slices.Contains(want, m[1]) {
			want = append(want, m[1])
		}
	}
	require.Greater(t, len(want), 40, "docs/observability.md names the families")
	got := e.scrape(t)
	families := map[string]bool{}
	for key := range got {
		name := key[:strings.IndexByte(key, '{')]
		families[strings.TrimSuffix(name, "_count")] = true
		families[name] = true
	}
	var missing []string
	for _, f := range want {
		// One series per unfinished run, labelled by its ID: with no
		// run there is nothing to number (docs/observability.md says so).
		if f == "flow_operation_run_phase" {
			continue
		}
		// Likewise one pair per feed with a power budget: none yet.
		if f == "flow_power_budget_transitions" {
			continue
		}
		if !families[f] {
			missing = append(missing, f)
		}
	}
	require.Empty(t, missing, "families docs/observability.md names that an idle fresh server does not export")

	// Known label values, at zero.
	for _, key := range []string{
		`flow_tasks_submitted_total{operation="power_on"}`,
		`flow_tasks_ended_total{operation="upgrade",status="failed"}`,
		`flow_engine_steps_ended_total{action="flow.firmware_control",outcome="failed"}`,
		`flow_backend_calls_total{backend="nico",code="ok",method="UpdateComponentFirmware"}`,
		`flow_backend_calls_total{backend="psm",code="ok",method="PowerOn"}`,
		`flow_rpc_requests_total{code="ok",method="/v1.Flow/PowerOnRack"}`,
		`flow_schedule_firings_total{outcome="submitted"}`,
		`flow_leak_unknown_device_total{kind="compute",outcome="power_off_sent"}`,
		`flow_prune_rows_deleted_total{table="task"}`,
		`flow_sync_rows_changed_total{part="compute"}`,
		`flow_river_job_wait_seconds_count{kind="engine.run_step"}`,
	} {
		v, ok := got[key]
		require.True(t, ok, "%s is not exported", key)
		require.Zero(t, v, key)
	}
}
