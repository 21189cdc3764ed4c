package app

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// benchEnvInt reads a positive integer setting of a benchmark, or def.
func benchEnvInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkYearOfHistory measures Flow's reads and its submit → first call
// on two servers side by side, one on an empty database and one with a year
// of a site's finished history loaded (FLOW_BENCH_HISTORY_RACKS racks,
// default 1,000; FLOW_BENCH_HISTORY_TASKS finished tasks spread over 365
// days, default 1,000,000, each with its engine run and 3 steps; one
// finished operation run a day over every rack), and reports each read's
// median with history against empty (ratio_* metrics; the target is at most
// 1.3). The two are measured alternately, call for call, so that a machine
// whose load changes over the minutes of the run slows both alike (measured
// one after the other, 10 minutes apart on a shared machine, the same reads
// differed by 5×). It then runs the prune job (FLOW_TASK_RETENTION 90d) and
// reports the tables' and indexes' sizes before and after. docs/bench.md
// has figures. Not part of make test: run it with
//
//	go test -v -run '^$' -bench BenchmarkYearOfHistory -benchtime 1x -timeout 2h ./app/
func BenchmarkYearOfHistory(b *testing.B) {
	racks := benchEnvInt("FLOW_BENCH_HISTORY_RACKS", 1000)
	tasks := benchEnvInt("FLOW_BENCH_HISTORY_TASKS", 1_000_000)
	ctx := context.Background()
	empty, full := newHistorySite(b), newHistorySite(b)
	empty.waitRun(b) // their template runs went on side by side
	full.waitRun(b)

	start := time.Now()
	loadHistory(b, full.pool, racks, tasks)
	b.Logf("loaded %d racks' year of history (%d tasks) in %s", racks, tasks, time.Since(start).Round(time.Second))
	before := historySizes(b, full.pool)

	for _, name := range historyReads {
		// A read takes under 2 ms: 101 of each keep one slow call from
		// moving the median; a submit waits for its task, 21 of them.
		rounds := 101
		if name == "submit_first_call" {
			rounds = 21
		}
		var de, df []time.Duration
		for i := range rounds {
			// Alternate which goes first, so neither always runs
			// just after the other's work.
			if i%2 == 0 {
				de, df = append(de, empty.read(b, name)), append(df, full.read(b, name))
			} else {
				df, de = append(df, full.read(b, name)), append(de, empty.read(b, name))
			}
		}
		me, mf := median(de), median(df)
		ratio := float64(mf) / float64(me)
		b.Logf("%-22s empty %8.2f ms   with history %8.2f ms   ×%.2f", name, ms(me), ms(mf), ratio)
		b.ReportMetric(ms(mf), name+"_ms")
		b.ReportMetric(ratio, "ratio_"+name)
	}

	start = time.Now()
	require.NoError(b, full.e.srv.system.jobs[PruneJob].Run(ctx))
	b.Logf("pruned in %s", time.Since(start).Round(time.Second))
	// VACUUM FULL gives the space back, so the sizes show what is kept
	// (autovacuum alone would leave it for reuse).
	_, err := full.pool.Exec(ctx, `VACUUM FULL ANALYZE task, engine_run, engine_step, operation_run, operation_run_target`)
	require.NoError(b, err)
	after := historySizes(b, full.pool)
	for _, t := range historyTables {
		b.Logf("%-22s %9d rows %8.1f MiB (indexes %7.1f MiB)  →  %9d rows %8.1f MiB (indexes %7.1f MiB)", t,
			before[t].rows, mib(before[t].table), mib(before[t].index), after[t].rows, mib(after[t].table), mib(after[t].index))
	}
	var oldest time.Time
	require.NoError(b, full.pool.QueryRow(ctx, `SELECT min(finished_at) FROM task WHERE status <> 'running'`).Scan(&oldest))
	b.Logf("oldest finished task kept: %s ago", time.Since(oldest).Round(time.Hour))
	require.Less(b, time.Since(oldest), 91*24*time.Hour, "pruning kept a task past its retention")
}

// historyReads are what BenchmarkYearOfHistory measures (historySite.read).
var historyReads = []string{"submit_first_call", "list_tasks_rack", "list_tasks_active", "rack_info_task_stats", "operation_run_stats"}

// historySite is one server of BenchmarkYearOfHistory, with a rack that ran
// one real power-on and one real operation run: the templates of the
// synthetic history, and what the reads ask for.
type historySite struct {
	e      *e2e
	pool   *pgxpool.Pool
	rackID *flowv1.UUID
	rack   string
	runID  *flowv1.UUID
}

func newHistorySite(b *testing.B) *historySite {
	e := startE2E(b, time.Millisecond, func(env map[string]string) {
		env["FLOW_LOG_LEVEL"] = "warn"
		env["FLOW_PRUNE_INTERVAL"] = "24h" // run by hand
		env["FLOW_OPERATION_RUN_MAX_CANDIDATES"] = "5000"
	})
	rack := e.addRack(b, 0, true)
	s := &historySite{e: e, pool: openPool(b, e.dbURL), rackID: &flowv1.UUID{Id: rack.ID.String()}, rack: rack.Name}
	s.read(b, "submit_first_call")
	s.runID = createRun(b, e.client, rolloutRequest("history template", rolloutOpts{concurrency: 1}))
	return s
}

// waitRun waits for the site's template operation run to finish.
func (s *historySite) waitRun(b *testing.B) {
	waitRun(b, s.e.client, s.runID, 5*time.Minute, func(r *flowv1.OperationRun) bool { return r.GetSummary().GetFinishedAt() != nil })
}

// read does one of historyReads and returns its time: a power-on's
// started_at − created_at for submit_first_call, a call's round trip for
// the others (a page of 10: the rack holds at least that many tasks on the
// empty database too, so both return as many rows).
func (s *historySite) read(b *testing.B, name string) time.Duration {
	ctx := context.Background()
	page := &flowv1.Pagination{Limit: 10}
	var call func() error
	switch name {
	case "submit_first_call":
		res, err := s.e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(s.rack)})
		require.NoError(b, err)
		id := res.GetTaskIds()[0]
		waitTaskDone(b, s.e, id)
		var d time.Duration
		require.NoError(b, s.pool.QueryRow(ctx, `SELECT started_at - created_at FROM task WHERE id = $1`, id.GetId()).Scan(&d))
		return d
	case "list_tasks_rack":
		call = func() error {
			_, err := s.e.client.ListTasks(ctx, &flowv1.ListTasksRequest{RackId: s.rackID, Pagination: page})
			return err
		}
	case "list_tasks_active":
		call = func() error {
			_, err := s.e.client.ListTasks(ctx, &flowv1.ListTasksRequest{ActiveOnly: true, Pagination: page})
			return err
		}
	case "rack_info_task_stats":
		call = func() error {
			_, err := s.e.client.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{Id: s.rackID})
			return err
		}
	case "operation_run_stats":
		call = func() error {
			_, err := s.e.client.GetOperationRun(ctx, &flowv1.GetOperationRunRequest{Id: s.runID, IncludeStats: true})
			return err
		}
	default:
		b.Fatalf("unknown read %q", name)
	}
	start := time.Now()
	require.NoError(b, call(), name)
	return time.Since(start)
}

func median(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func mib(n int64) float64        { return float64(n) / (1 << 20) }

// waitTaskDone polls task id until it has ended.
func waitTaskDone(tb testing.TB, e *e2e, id *flowv1.UUID) {
	tb.Helper()
	require.Eventually(tb, func() bool {
		res, err := e.client.GetTasksByIDs(context.Background(), &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{id}})
		require.NoError(tb, err)
		switch res.GetTasks()[0].GetStatus() {
		case flowv1.TaskStatus_TASK_STATUS_COMPLETED, flowv1.TaskStatus_TASK_STATUS_FAILED, flowv1.TaskStatus_TASK_STATUS_TERMINATED:
			return true
		}
		return false
	}, 2*time.Minute, 5*time.Millisecond)
}

var historyTables = []string{"task", "engine_run", "engine_step", "operation_run", "operation_run_target"}

type tableSize struct{ rows, table, index int64 }

func historySizes(tb testing.TB, pool *pgxpool.Pool) map[string]tableSize {
	tb.Helper()
	out := map[string]tableSize{}
	for _, t := range historyTables {
		var s tableSize
		require.NoError(tb, pool.QueryRow(context.Background(), fmt.Sprintf(
			`SELECT (SELECT count(*) FROM %[1]s), pg_table_size('%[1]s'), pg_indexes_size('%[1]s')`, t)).Scan(&s.rows, &s.table, &s.index))
		out[t] = s
	}
	return out
}

// loadHistory writes, server-side in batches (INSERT … SELECT over
// generate_series, copying the one real task's, run's and steps' JSON), a
// year of finished history: racks-1 more racks, tasks finished tasks over
// all racks spread evenly over the last 365 days, each with its engine
// run and 3 steps, and one finished operation run a day with a target per
// rack. Then it analyzes the tables.
func loadHistory(tb testing.TB, pool *pgxpool.Pool, racks, tasks int) {
	tb.Helper()
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		tb.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(tb, err)
	}
	exec(`INSERT INTO rack (id, name, manufacturer, serial_number)
		SELECT gen_random_uuid(), 'history-' || g, 'NVIDIA', 'HIST-' || g FROM generate_series(1, $1::int) g`, racks-1)
	const batch = 100_000
	for from := 0; from < tasks; from += batch {
		n := min(batch, tasks-from)
		exec(`WITH tmpl AS (SELECT t.*, r.stage_count FROM task t JOIN engine_run r ON r.id = t.run_id WHERE t.status = 'completed' ORDER BY t.created_at LIMIT 1),
			racks AS (SELECT array_agg(id ORDER BY id) AS ids, count(*) AS n FROM rack),
			g AS (SELECT i, now() - interval '1 hour' - (i::float8 / $3::float8) * interval '365 days' AS at
				FROM generate_series($1::bigint, $1::bigint + $2::bigint - 1) i),
			runs AS (
				INSERT INTO engine_run (id, owner, state, stage_count, created_at, ended_at)
				SELECT 1000000000 + g.i, '', 'completed', tmpl.stage_count, g.at, g.at + interval '2 minutes' FROM g, tmpl
				RETURNING id, created_at)
			INSERT INTO task (operation_type, operation_code, information, description, rack_id, components, component_ids, targets, rule, rule_name,
				status, message, report, run_id, created_at, updated_at, started_at, finished_at, not_targeted, submitted_by)
			SELECT tmpl.operation_type, tmpl.operation_code, tmpl.information, 'history', racks.ids[1 + (runs.id % racks.n)], tmpl.components, tmpl.component_ids,
				tmpl.targets, tmpl.rule, tmpl.rule_name, 'completed', tmpl.message, tmpl.report, runs.id, runs.created_at, runs.created_at + interval '2 minutes',
				runs.created_at + interval '1 second', runs.created_at + interval '2 minutes', tmpl.not_targeted, tmpl.submitted_by
			FROM runs, tmpl, racks`, from, n, tasks)
		exec(`INSERT INTO engine_step (run_id, stage_index, step_index, spec, budget_ms, state, started_at, ended_at)
			SELECT r.id, s.stage_index, s.step_index, s.spec, s.budget_ms, 'completed', r.created_at, r.ended_at
			FROM engine_run r, LATERAL (SELECT * FROM engine_step WHERE run_id = (SELECT min(id) FROM engine_run) ORDER BY stage_index, step_index LIMIT 3) s
			WHERE r.id >= 1000000000 + $1::bigint AND r.id < 1000000000 + $1::bigint + $2::bigint`, from, n)
	}
	exec(`WITH tmpl AS (SELECT * FROM operation_run ORDER BY created_at LIMIT 1),
		days AS (SELECT d, now() - d * interval '1 day' AS at FROM generate_series(1, 365) d),
		runs AS (
			INSERT INTO operation_run (name, description, selector, options, operation_template, operation_type, operation_code, status,
				current_phase_index, total_phases, created_at, updated_at, started_at, finished_at)
			SELECT 'history ' || days.d, '', tmpl.selector, tmpl.options, tmpl.operation_template, tmpl.operation_type, tmpl.operation_code, 'completed',
				tmpl.current_phase_index, tmpl.total_phases, days.at, days.at, days.at, days.at + interval '1 hour'
			FROM days, tmpl RETURNING id, created_at)
		INSERT INTO operation_run_target (operation_run_id, rack_id, sequence_index, phase_index, components_by_type, status)
		SELECT runs.id, r.id, row_number() OVER (PARTITION BY runs.id ORDER BY r.id) - 1, 0, '{}', 'completed'
		FROM runs, rack r`)
	// A year-old history is long since vacuumed (all-visible), as
	// autovacuum leaves it: index-only scans need no heap visit.
	exec(`VACUUM ANALYZE task, engine_run, engine_step, operation_run, operation_run_target, rack`)
}
