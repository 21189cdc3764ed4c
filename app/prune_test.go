package app

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

func TestParseRetention(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"90d": 90 * 24 * time.Hour, "0": 0, "36h": 36 * time.Hour, " 7d ": 7 * 24 * time.Hour} {
		got, err := parseRetention(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "-1d", "soon", "1.5d", "-2h"} {
		_, err := parseRetention(bad)
		require.Error(t, err, bad)
	}
	cfg, err := LoadConfig(func(k string) string { return map[string]string{"DATABASE_URL": "postgres://localhost/x"}[k] })
	require.NoError(t, err)
	require.Equal(t, RetentionConfig{Tasks: 90 * 24 * time.Hour, OperationRuns: 90 * 24 * time.Hour, Events: 90 * 24 * time.Hour, RiverJobs: 24 * time.Hour, Interval: 10 * time.Minute,
		NotifyDelivered: 24 * time.Hour, NotifyDead: 30 * 24 * time.Hour}, cfg.Retention)
	_, err = LoadConfig(func(k string) string {
		return map[string]string{"DATABASE_URL": "postgres://localhost/x", "FLOW_TASK_RETENTION": "ninety", "FLOW_PRUNE_INTERVAL": "0"}[k]
	})
	require.ErrorContains(t, err, "FLOW_TASK_RETENTION must be a duration")
	require.ErrorContains(t, err, "FLOW_PRUNE_INTERVAL must be positive")
}

// TestPruneDeletesOnlyWhatRetentionLets runs real tasks, ages some of them
// past FLOW_TASK_RETENTION, and runs the prune job: the old finished tasks
// go with their engine runs and steps; a recent one, an active one, and old
// ones a schedule, an active operation run or an open event execution
// points to stay. Operation runs and events follow their own settings and
// the same "never touches" rules. flow db status and the metrics say what
// went.
func TestPruneDeletesOnlyWhatRetentionLets(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond, func(env map[string]string) {
		env["FLOW_TASK_RETENTION"] = "1d"
		env["FLOW_OPERATION_RUN_RETENTION"] = "2d"
		env["FLOW_EVENT_RETENTION"] = "3d"
		env["FLOW_NOTIFY_DELIVERED_RETENTION"] = "1d"
		env["FLOW_PRUNE_INTERVAL"] = "1h" // run by hand below
		env["FLOW_METRICS"] = "true"
	})
	ctx := context.Background()
	rack := e.addRack(t, 0, true)
	var ids []uuid.UUID
	for range 7 {
		res, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name), Description: "prune"})
		require.NoError(t, err)
		id := res.GetTaskIds()[0]
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, e.wait(t, id).GetStatus())
		ids = append(ids, uuid.MustParse(id.GetId()))
	}
	pool := openPool(t, e.dbURL)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	old := time.Now().Add(-48 * time.Hour)
	// ids[0], ids[1]: old and free; ids[2]: recent; ids[3]: old, active;
	// ids[4]: old, a schedule's last task; ids[5]: old, an active run's
	// target; ids[6]: old, an open event execution's task.
	exec(`UPDATE task SET finished_at = $1, created_at = $1 WHERE id = ANY($2) AND id <> $3`, old, ids, ids[2])
	exec(`UPDATE task SET status = 'running' WHERE id = $1`, ids[3])
	var schedID uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO task_schedule (name, spec_type, spec, operation_template, enabled)
		VALUES ('s', 'interval', '1h', '{}', false) RETURNING id`).Scan(&schedID))
	exec(`INSERT INTO task_schedule_scope (schedule_id, rack_id, last_task_id) VALUES ($1, $2, $3)`, schedID, rack.ID, ids[4])
	runRow := func(status string, finished *time.Time) uuid.UUID {
		var id uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO operation_run (name, selector, options, operation_template, operation_type, operation_code, status, created_at, finished_at)
			VALUES ('r', '{}', '{}', '{}', 'power_control', 'power_on', $1, $2, $2) RETURNING id`, status, finished).Scan(&id))
		return id
	}
	activeRun := runRow("running", &old)
	doneRun := runRow("completed", &old)
	now := time.Now()
	recentRun := runRow("completed", &now)
	exec(`INSERT INTO operation_run_target (operation_run_id, rack_id, sequence_index, phase_index, components_by_type, task_id) VALUES ($1, $2, 0, 0, '{}', $3)`, activeRun, rack.ID, ids[5])
	exec(`INSERT INTO operation_run_target (operation_run_id, rack_id, sequence_index, phase_index, components_by_type) VALUES ($1, $2, 0, 0, '{}')`, doneRun, rack.ID)
	veryOld := time.Now().Add(-96 * time.Hour)
	event := func(key, execStatus string, taskIDs []uuid.UUID) uuid.UUID {
		var id uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO event (source_name, source_key, event_type, severity, resource_kind, resource_id, rack_id, applied_rule_id, effective_policy, observed_at, created_at, last_observed_at)
			VALUES ('test', $1, 'leak', 'critical', 'rack', $2, $2, $2, '{}', $3, $3, $3) RETURNING id`, key, rack.ID, veryOld).Scan(&id))
		exec(`INSERT INTO event_action_execution (event_id, action_name, action_type, plan, status, task_ids) VALUES ($1, 'a', 'submit_task', '{}', $2, $3)`, id, execStatus, taskIDs)
		return id
	}
	openEvent := event("open", "running", []uuid.UUID{ids[6]})
	doneEvent := event("done", "completed", []uuid.UUID{})

	var steps0 int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM engine_step s JOIN task t ON t.run_id = s.run_id WHERE t.id = ANY($1)`, ids[:2]).Scan(&steps0))
	require.Positive(t, steps0)

	// The console's log of changed racks: rows older than an hour go,
	// whatever the retention of history.
	exec(`TRUNCATE rack_cell_change`)
	exec(`INSERT INTO rack_cell_change (rack_id, at) VALUES ($1, now() - interval '61 minutes'), ($1, now() - interval '62 minutes'), ($1, now() - interval '59 minutes')`, rack.ID)

	// Webhook deliveries: an old delivered one goes with its event; an
	// old pending one (a receiver down for days) stays, with its event.
	sub := uuid.New()
	exec(`INSERT INTO notify_subscription (id, url, event_types, secret) VALUES ($1, 'http://127.0.0.1:9/', '{*}', '{}')`, sub)
	hookEvent := func(status string) {
		t.Helper()
		ev := uuid.New()
		exec(`INSERT INTO notify_event (id, type, subject, data, created_at) VALUES ($1, 'flow.task.completed', 'site', '{}', now() - interval '3 days')`, ev)
		exec(`INSERT INTO notify_delivery (event_id, subscription_id, subject, status, delivered_at, next_attempt_at, created_at)
			VALUES ($1, $2, 'site', $3, CASE WHEN $3 = 'delivered' THEN now() - interval '2 days' END, now() + interval '1 day', now() - interval '3 days')`, ev, sub, status)
	}
	hookEvent("delivered")
	hookEvent("pending")

	require.NoError(t, e.srv.system.jobs[PruneJob].Run(ctx))
	require.Equal(t, []string{"pending"}, stringsOf(t, pool, `SELECT status FROM notify_delivery`))
	require.Len(t, idsOf(t, pool, `SELECT id FROM notify_event`), 1, "the pending delivery's event stays")
	var cellChanges int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM rack_cell_change WHERE at < now() - interval '50 minutes'`).Scan(&cellChanges))
	require.Equal(t, 1, cellChanges, "the log of changed racks keeps its last hour")

	var left []uuid.UUID
	rows, err := pool.Query(ctx, `SELECT id FROM task WHERE id = ANY($1) ORDER BY created_at`, ids)
	require.NoError(t, err)
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		left = append(left, id)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, ids[2:], left, "only the two old free tasks go")
	var orphanRuns, orphanSteps int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM engine_run r WHERE NOT EXISTS (SELECT 1 FROM task t WHERE t.run_id = r.id)`).Scan(&orphanRuns))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM engine_step s WHERE NOT EXISTS (SELECT 1 FROM task t WHERE t.run_id = s.run_id)`).Scan(&orphanSteps))
	require.Zero(t, orphanRuns, "a pruned task's engine run goes with it")
	require.Zero(t, orphanSteps)

	require.ElementsMatch(t, []uuid.UUID{activeRun, recentRun}, idsOf(t, pool, `SELECT id FROM operation_run`))
	require.Len(t, idsOf(t, pool, `SELECT id FROM operation_run_target`), 1, "the done run's target went with it")
	require.ElementsMatch(t, []uuid.UUID{openEvent}, idsOf(t, pool, `SELECT id FROM event`))
	_ = doneEvent

	stats, err := db.ReadPruneStats(ctx, pool)
	require.NoError(t, err)
	got := map[string]int64{}
	for _, s := range stats {
		got[s.Name] = s.RowsPruned
	}
	require.Equal(t, int64(2), got["task"])
	require.Equal(t, int64(2), got["engine_run"])
	require.Equal(t, int64(steps0), got["engine_step"])
	require.Equal(t, int64(1), got["operation_run"])
	require.Equal(t, int64(1), got["operation_run_target"])
	require.Equal(t, int64(1), got["event"])
	require.Equal(t, int64(1), got["event_action_execution"])
	require.Equal(t, int64(2), got["rack_cell_change"])
	require.Equal(t, int64(1), got["notify_delivery"])
	require.Equal(t, int64(1), got["notify_event"])

	// A second cycle finds nothing more to do.
	require.NoError(t, e.srv.system.jobs[PruneJob].Run(ctx))
	stats, err = db.ReadPruneStats(ctx, pool)
	require.NoError(t, err)
	for _, s := range stats {
		require.Equal(t, got[s.Name], s.RowsPruned, s.Name)
	}
	m := e.srv.tel.metrics
	require.NotNil(t, m)
	var mm dto.Metric
	require.NoError(t, m.PruneDeleted.WithLabelValues("task").(prometheus.Metric).Write(&mm))
	require.Equal(t, 2.0, mm.GetCounter().GetValue())

	// The sync and operation-run metrics: a cycle is counted, and the run
	// collector reports the runs kept by status.
	_, err = e.srv.syncer.Run(ctx, "manual")
	require.NoError(t, err)
	fams, err := m.Registry.Gather()
	require.NoError(t, err)
	seen := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			v := mt.GetGauge().GetValue() + mt.GetCounter().GetValue() + float64(mt.GetHistogram().GetSampleCount())
			for _, l := range mt.GetLabel() {
				if l.GetName() == "status" && f.GetName() == "flow_operation_runs" {
					seen[f.GetName()+"/"+l.GetValue()] = v
				}
			}
			seen[f.GetName()] += v
		}
	}
	require.Equal(t, 1.0, seen["flow_sync_cycles_total"], "one manual cycle")
	require.Positive(t, seen["flow_sync_last_success_timestamp_seconds"])
	require.Equal(t, 1.0, seen["flow_operation_runs/running"])
	require.Equal(t, 1.0, seen["flow_operation_runs/completed"], "the recent run; the old one was pruned")
	require.Equal(t, 1.0, seen["flow_operation_run_phase"]+1, "the running run is at phase 0")
	require.Equal(t, 1.0, seen["flow_operation_run_targets"])

	out := &syncBuffer{}
	require.NoError(t, runDB(ctx, "status", func(k string) string { return map[string]string{"DATABASE_URL": e.dbURL}[k] }, out))
	require.Contains(t, out.String(), "retention tasks 90d")
	require.Regexp(t, `pruned\s+task\s+2 rows`, out.String())
}

func idsOf(t *testing.T, pool *pgxpool.Pool, sql string) []uuid.UUID {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql)
	require.NoError(t, err)
	defer rows.Close()
	var out []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	return out
}

func stringsOf(t *testing.T, pool *pgxpool.Pool, sql string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}
