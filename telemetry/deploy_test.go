package telemetry_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/nicoflow/flow/telemetry"
)

// stateMetrics returns the metrics app's scrape-time collectors add (they
// are not in NewMetrics' registry), read from app/observe.go so that a new
// collector needs no edit here.
func stateMetrics(t *testing.T) []string {
	b, err := os.ReadFile("../app/observe.go")
	require.NoError(t, err)
	var out []string
	for _, m := range regexp.MustCompile(`prometheus\.NewDesc\("(flow_[a-z_]+)"`).FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	require.Contains(t, out, "flow_tasks")
	return out
}

var metricRef = regexp.MustCompile(`\bflow_[a-z_]+`)

// known reports whether the metric a PromQL expression names exists:
// registered by NewMetrics (histograms with their _bucket, _sum, _count)
// or by the state collector.
func known(t *testing.T) func(string) bool {
	m := telemetry.NewMetrics()
	names := map[string]bool{}
	for _, n := range stateMetrics(t) {
		names[n] = true
	}
	for _, n := range m.Names() {
		names[n] = true
	}
	return func(ref string) bool {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			if names[strings.TrimSuffix(ref, suffix)] && strings.HasSuffix(ref, suffix) {
				return true
			}
		}
		return false
	}
}

// documented returns the flow_* metrics docs/observability.md lists.
func documented(t *testing.T) []string {
	b, err := os.ReadFile("../docs/observability.md")
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `flow_") {
			out = append(out, strings.Trim(strings.Split(line, "|")[1], " `"))
		}
	}
	require.NotEmpty(t, out)
	return out
}

// TestDocsListEveryMetric: every metric Flow registers is in
// docs/observability.md, and every documented one exists.
func TestDocsListEveryMetric(t *testing.T) {
	t.Parallel()
	m := telemetry.NewMetrics()
	docs := map[string]bool{}
	for _, n := range documented(t) {
		docs[n] = true
	}
	registered := map[string]bool{}
	for _, n := range stateMetrics(t) {
		registered[n] = true
	}
	for _, n := range m.Names() {
		registered[n] = true
	}
	for n := range registered {
		require.True(t, docs[n], "%s is not documented in docs/observability.md", n)
	}
	for n := range docs {
		require.True(t, registered[n], "docs/observability.md lists %s, which Flow does not register", n)
	}
}

// TestAlertRules parses deploy/prometheus/alerts.yaml as Prometheus rule
// groups (promtool is not packaged in Debian): every rule has a name, an
// expression naming only metrics Flow exports, a severity and a summary.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../deploy/prometheus/alerts.yaml")
	require.NoError(t, err)
	var doc struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&doc))
	require.NotEmpty(t, doc.Groups)
	ok := known(t)
	seen := map[string]bool{}
	for _, g := range doc.Groups {
		require.NotEmpty(t, g.Name)
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			require.False(t, seen[r.Alert], "duplicate alert %s", r.Alert)
			seen[r.Alert] = true
			require.NotEmpty(t, r.Expr, r.Alert)
			require.Equal(t, strings.Count(r.Expr, "("), strings.Count(r.Expr, ")"), "%s: unbalanced parentheses", r.Alert)
			require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			for _, ref := range metricRef.FindAllString(r.Expr, -1) {
				require.True(t, ok(ref), "%s: unknown metric %s", r.Alert, ref)
			}
		}
	}
	for _, want := range []string{"FlowTaskFailureRatioHigh", "FlowBackendErrorRatioHigh", "FlowQueueWaitHigh", "FlowSyncFailing", "FlowScheduleFiringLate", "FlowNoSystemJobLeader", "FlowPruneFailing"} {
		require.True(t, seen[want], "missing alert %s", want)
	}
}

// TestGrafanaDashboard parses deploy/grafana/flow.json: every panel's
// queries name only metrics Flow exports, and the dashboard covers tasks,
// steps, backends, the queue and the DB pool.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../deploy/grafana/flow.json")
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	require.NotEmpty(t, dash.UID)
	ok := known(t)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			require.Equal(t, strings.Count(tg.Expr, "("), strings.Count(tg.Expr, ")"), p.Title)
			for _, ref := range metricRef.FindAllString(tg.Expr, -1) {
				require.True(t, ok(ref), "%s: unknown metric %s", p.Title, ref)
				used[ref] = true
			}
		}
	}
	for _, want := range []string{"flow_tasks_ended_total", "flow_engine_steps_ended_total", "flow_backend_calls_total", "flow_river_queue_jobs", "flow_db_pool_connections",
		"flow_schedule_firings_total", "flow_schedule_firing_lag_seconds_bucket", "flow_operation_runs", "flow_operation_run_targets", "flow_operation_run_phase",
		"flow_sync_cycle_duration_seconds_bucket", "flow_sync_rows_changed_total", "flow_sync_drift_rows", "flow_sync_last_success_timestamp_seconds",
		"flow_prune_rows_deleted_total", "flow_prune_oldest_kept_timestamp_seconds"} {
		require.True(t, used[want], "dashboard does not chart %s", want)
	}
}
