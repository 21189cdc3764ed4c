package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/engine"
)

// benchPoolConns is the pool size of the benchmarks: app's default
// FLOW_DB_MAX_CONNS.
const benchPoolConns = 40

// measureCeiling runs n transactions that each update one row and insert one
// row, from as many goroutines as the pool has connections, and returns
// commits per second.
func measureCeiling(tb testing.TB, pool *pgxpool.Pool, n int) float64 {
	tb.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS bench_row (id integer PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
		CREATE TABLE IF NOT EXISTS bench_log (id bigserial PRIMARY KEY, row_id integer NOT NULL, at timestamptz NOT NULL DEFAULT now());
		INSERT INTO bench_row (id) SELECT generate_series(1, 10000) ON CONFLICT DO NOTHING;`)
	require.NoError(tb, err)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range int(pool.Config().MaxConns) {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				id := rand.IntN(10000) + 1
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `UPDATE bench_row SET n = n + 1 WHERE id = $1`, id); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `INSERT INTO bench_log (row_id) VALUES ($1)`, id)
					return err
				})
				if err != nil {
					panic(err)
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkCeilingTx is the machine's ceiling: commits per second of one
// transaction updating one row and inserting one row, on the engine's pool.
func BenchmarkCeilingTx(b *testing.B) {
	pool := openPool(b, dbtest.NewDB(b), benchPoolConns)
	b.ResetTimer()
	rate := measureCeiling(b, pool, max(b.N, 1000))
	b.ReportMetric(rate, "commits/s")
}

type trivialArgs struct{}

func (trivialArgs) Kind() string { return "bench.trivial" }

type trivialWorker struct {
	river.WorkerDefaults[trivialArgs]
	done chan struct{}
}

func (w *trivialWorker) Work(context.Context, *river.Job[trivialArgs]) error {
	w.done <- struct{}{}
	return nil
}

// BenchmarkCeilingRiverJobs is River's ceiling with the engine's client
// settings: trivial jobs worked per second.
func BenchmarkCeilingRiverJobs(b *testing.B) {
	ctx := context.Background()
	pool := openPool(b, dbtest.NewDB(b), benchPoolConns)
	e := engine.New(pool, engine.Config{})
	cfg := e.RiverConfig()
	cfg.TestOnly = true
	w := &trivialWorker{done: make(chan struct{}, 1024)}
	river.AddWorker(cfg.Workers, w)
	cfg.Queues[river.QueueDefault] = cfg.Queues[engine.QueueName]
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(b, err)
	n := max(b.N, 5000)
	for lo := 0; lo < n; lo += 1000 {
		params := make([]river.InsertManyParams, min(1000, n-lo))
		for i := range params {
			params[i] = river.InsertManyParams{Args: trivialArgs{}}
		}
		_, err := client.InsertMany(ctx, params)
		require.NoError(b, err)
	}
	b.ResetTimer()
	start := time.Now()
	require.NoError(b, client.Start(ctx))
	for range n {
		<-w.done
	}
	rate := float64(n) / time.Since(start).Seconds()
	b.StopTimer()
	require.NoError(b, client.Stop(ctx))
	b.ReportMetric(rate, "jobs/s")
}

// BenchmarkEngineThroughput runs 1,000 runs of 3 stages × 3 steps of a no-op
// action and reports steps per second and their ratio to the single-tx
// ceiling measured on the same pool just before.
func BenchmarkEngineThroughput(b *testing.B) {
	const runs, stages, steps = 1000, 3, 3
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		pool := openPool(b, dbtest.NewDB(b), benchPoolConns)
		ceiling := measureCeiling(b, pool, 10000)
		var total atomic.Int64
		allDone := make(chan struct{})
		e := newEngine(pool, engine.Config{OnRunEnd: func(_ context.Context, _ pgx.Tx, ended []engine.RunSummary) error {
			if total.Add(int64(len(ended))) == runs {
				close(allDone)
			}
			return nil
		}})
		client := newClient(b, pool, e)
		plan := engine.Plan{}
		for range stages {
			st := engine.Stage{}
			for range steps {
				st.Steps = append(st.Steps, engine.Step{Name: "noop", Action: "test.noop", Targets: []string{"t"}})
			}
			plan.Stages = append(plan.Stages, st)
		}
		for lo := 0; lo < runs; lo += 100 {
			require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for range 100 {
					if _, err := e.Start(ctx, tx, plan); err != nil {
						return err
					}
				}
				return nil
			}))
		}
		// Plan on statistics, as autovacuum keeps them on a live database:
		// a fresh database's tables look empty to the planner.
		_, err := pool.Exec(ctx, "ANALYZE")
		require.NoError(b, err)
		b.StartTimer()
		start := time.Now()
		require.NoError(b, client.Start(ctx))
		<-allDone
		elapsed := time.Since(start)
		b.StopTimer()
		require.NoError(b, client.Stop(ctx))
		var completed int
		require.NoError(b, pool.QueryRow(ctx, `SELECT count(*) FROM engine_run WHERE state = 'completed'`).Scan(&completed))
		require.Equal(b, runs, completed)
		rate := float64(runs*stages*steps) / elapsed.Seconds()
		b.ReportMetric(rate, "steps/s")
		b.ReportMetric(ceiling, "ceiling_commits/s")
		b.ReportMetric(rate/ceiling, "ratio")
	}
}

// BenchmarkStartLatency measures the time from the commit that starts a run
// to the first call of its action, one run at a time on an idle engine.
func BenchmarkStartLatency(b *testing.B) {
	ctx := context.Background()
	pool := openPool(b, dbtest.NewDB(b), benchPoolConns)
	called := make(chan time.Time, 1)
	e := engine.New(pool, engine.Config{})
	engine.Register(e, "bench.first", func(context.Context, engine.Call[struct{}]) (engine.Result, error) {
		called <- time.Now()
		return engine.Result{}, nil
	})
	client := newClient(b, pool, e)
	require.NoError(b, client.Start(ctx))
	b.Cleanup(func() { _ = client.Stop(context.WithoutCancel(ctx)) })
	plan := engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{{Name: "first", Action: "bench.first"}}}}}
	n := max(b.N, 200)
	lat := make([]time.Duration, 0, n)
	b.ResetTimer()
	for range n {
		tx, err := pool.Begin(ctx)
		require.NoError(b, err)
		_, err = e.Start(ctx, tx, plan)
		require.NoError(b, err)
		committed := time.Now()
		require.NoError(b, tx.Commit(ctx))
		lat = append(lat, (<-called).Sub(committed))
		time.Sleep(5 * time.Millisecond) // let the previous run's checkpoint settle
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99_ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkStartLatencyBurst: 50 runs submitted at once (each its own
// transaction, as 50 racks' submits in a burst), commit → first call of
// each, p50/p99 in ms: River's fetch (notifications, cooldown, poll) and
// the engine's claim under a burst.
func BenchmarkStartLatencyBurst(b *testing.B) {
	ctx := context.Background()
	pool := openPool(b, dbtest.NewDB(b), benchPoolConns)
	var mu sync.Mutex
	calledAt := map[engine.RunID]time.Time{}
	e := engine.New(pool, engine.Config{})
	engine.Register(e, "bench.first", func(_ context.Context, call engine.Call[struct{}]) (engine.Result, error) {
		mu.Lock()
		calledAt[call.RunID] = time.Now()
		mu.Unlock()
		return engine.Result{}, nil
	})
	client := newClient(b, pool, e)
	require.NoError(b, e.StartLease(ctx))
	require.NoError(b, client.Start(ctx))
	b.Cleanup(func() { _ = client.Stop(context.WithoutCancel(ctx)) })
	plan := engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{{Name: "first", Action: "bench.first"}}}}}
	var lat []time.Duration
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ResetTimer()
	for range max(b.N, 4) {
		committed := make([]time.Time, 50)
		ids := make([]engine.RunID, 50)
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				tx, err := pool.Begin(ctx)
				if err != nil {
					panic(err)
				}
				if ids[i], err = e.Start(ctx, tx, plan); err != nil {
					panic(err)
				}
				if err := tx.Commit(ctx); err != nil {
					panic(err)
				}
				committed[i] = time.Now()
			})
		}
		wg.Wait()
		require.Eventually(b, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				if _, ok := calledAt[id]; !ok {
					return false
				}
			}
			return true
		}, time.Minute, time.Millisecond)
		mu.Lock()
		for i, id := range ids {
			lat = append(lat, max(calledAt[id].Sub(committed[i]), 0))
			if os.Getenv("FLOW_BENCH_DIAG") != "" {
				var att, claimed time.Time
				_ = pool.QueryRow(ctx, `SELECT j.attempted_at, s.claimed_at FROM engine_step s JOIN river_job j ON j.id = s.job_id WHERE s.run_id = $1`, id).Scan(&att, &claimed)
				fmt.Printf("diag commit→fetch %6.1f fetch→claim %6.1f claim→call %6.1f\n", ms(att.Sub(committed[i])), ms(claimed.Sub(att)), ms(calledAt[id].Sub(claimed)))
			}
		}
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99_ms")
	b.ReportMetric(0, "ns/op")
}
