package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
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

// testParams drive the recording test action.
type testParams struct {
	Block     time.Duration `json:"block,omitempty"`      // work this long (honouring ctx)
	Hang      bool          `json:"hang,omitempty"`       // work until ctx is done
	FailTimes int           `json:"fail_times,omitempty"` // fail the first N attempts of each batch
	PanicOnce bool          `json:"panic_once,omitempty"` // panic on the first attempt
	Permanent bool          `json:"permanent,omitempty"`  // failures are permanent
	PollTimes int           `json:"poll_times,omitempty"` // answer PollAfter N times per batch (counted in the checkpoint)
	PollAfter time.Duration `json:"poll_after,omitempty"`
	Sleep     time.Duration `json:"sleep,omitempty"`   // answer Sleep
	Barrier   int           `json:"barrier,omitempty"` // wait until this many calls of the run have arrived
	// FailTargets are failed for good (Result.Failed) when a call names them.
	FailTargets []string `json:"fail_targets,omitempty"`
}

// pollState is the test action's checkpoint.
type pollState struct {
	Polls int `json:"polls"`
}

const callTableSQL = `
CREATE TABLE test_call (
    id         bigserial PRIMARY KEY,
    run_id     bigint NOT NULL,
    step_id    bigint NOT NULL,
    step       text NOT NULL,
    stage      integer NOT NULL,
    batch      integer NOT NULL,
    attempt    integer NOT NULL,
    targets    text[] NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at   timestamptz,
    outcome    text NOT NULL DEFAULT 'running',
    -- the engine process (lease name) that made the call
    process    text NOT NULL DEFAULT ''
);
CREATE TABLE test_run_end (
    run_id bigint PRIMARY KEY,
    owner  text NOT NULL,
    state  text NOT NULL,
    error  text NOT NULL
);`

var barriers sync.Map // "database/runID" → *barrier

type barrier struct {
	mu      sync.Mutex
	arrived int
	ch      chan struct{}
}

func arrive(key string, n int) <-chan struct{} {
	v, _ := barriers.LoadOrStore(key, &barrier{ch: make(chan struct{})})
	b := v.(*barrier)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.arrived++
	if b.arrived == n {
		close(b.ch)
	}
	return b.ch
}

// newEngine builds an engine on pool with the test actions registered:
// "test.record" records every call in test_call and behaves as its params say.
func newEngine(pool *pgxpool.Pool, cfg engine.Config) *engine.Engine {
	return newEngineRec(pool, pool, cfg)
}

// newEngineRec is newEngine with the calls recorded through rec (a pool
// that stays connected when the engine's is cut off).
func newEngineRec(pool, rec *pgxpool.Pool, cfg engine.Config) *engine.Engine {
	if cfg.CancelPollInterval == 0 {
		cfg.CancelPollInterval = 100 * time.Millisecond
	}
	if cfg.FetchPollInterval == 0 {
		cfg.FetchPollInterval = 50 * time.Millisecond
	}
	if cfg.OnRunEnd == nil {
		cfg.OnRunEnd = eachRun(func(ctx context.Context, tx pgx.Tx, run engine.RunSummary) error {
			_, err := tx.Exec(ctx, `INSERT INTO test_run_end (run_id, owner, state, error) VALUES ($1, $2, $3, $4)`,
				run.ID, run.Owner, run.State, run.Error)
			return err
		})
	}
	e := engine.New(pool, cfg)
	engine.Register(e, "test.record", func(ctx context.Context, call engine.Call[testParams]) (engine.Result, error) {
		var id int64
		// Recorded outside the call's deadline: the record is the test's,
		// not the call's work (at load 20 a 100 ms call timeout once
		// expired in this INSERT, and the call went unrecorded).
		if err := rec.QueryRow(context.WithoutCancel(ctx), `INSERT INTO test_call (run_id, step_id, step, stage, batch, attempt, targets, process)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
			call.RunID, call.StepID, call.Step, call.Stage, call.Batch, call.Attempt, call.Targets, e.ProcessName()).Scan(&id); err != nil {
			return engine.Result{}, err
		}
		// Run IDs repeat across the tests' databases: the barrier key names
		// the database too.
		res, err := testAction(ctx, rec.Config().ConnConfig.Database+"/"+fmt.Sprint(call.RunID), call)
		outcome := "ok"
		switch {
		case ctx.Err() != nil:
			outcome = "ctx_done"
		case err != nil:
			outcome = "error"
		case res.PollAfter > 0:
			outcome = "poll"
		case res.Sleep > 0:
			outcome = "sleep"
		}
		_, _ = rec.Exec(context.WithoutCancel(ctx), `UPDATE test_call SET ended_at = clock_timestamp(), outcome = $2 WHERE id = $1`, id, outcome)
		return res, err
	})
	engine.Register(e, "test.noop", func(ctx context.Context, call engine.Call[struct{}]) (engine.Result, error) {
		return engine.Result{}, nil
	})
	return e
}

var errTest = errors.New("test failure")

func testAction(ctx context.Context, barrierKey string, call engine.Call[testParams]) (engine.Result, error) {
	p := call.Params
	if p.Barrier > 0 {
		select {
		case <-arrive(barrierKey, p.Barrier):
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
	}
	if p.Hang {
		<-ctx.Done()
		return engine.Result{}, ctx.Err()
	}
	if p.Block > 0 {
		select {
		case <-time.After(p.Block):
		case <-ctx.Done():
			return engine.Result{}, ctx.Err()
		}
	}
	if p.PanicOnce && call.Attempt == 1 {
		panic("test panic")
	}
	if call.Attempt <= p.FailTimes {
		if p.Permanent {
			return engine.Result{}, engine.Permanent(errTest)
		}
		return engine.Result{}, errTest
	}
	if p.PollTimes > 0 {
		var st pollState
		if _, err := call.Checkpoint(&st); err != nil {
			return engine.Result{}, err
		}
		if st.Polls < p.PollTimes {
			st.Polls++
			if err := call.SaveCheckpoint(ctx, st); err != nil {
				return engine.Result{}, err
			}
			if err := call.ReportProgress(ctx, engine.Progress{Completed: st.Polls, Message: "polling"}); err != nil {
				return engine.Result{}, err
			}
			return engine.Result{PollAfter: p.PollAfter}, nil
		}
	}
	res := engine.Result{Sleep: p.Sleep}
	for _, t := range call.Targets {
		if slices.Contains(p.FailTargets, t) {
			if res.Failed == nil {
				res.Failed = map[string]string{}
			}
			res.Failed[t] = "no answer"
		}
	}
	return res, nil
}

// testBundle is one test's database, engine and running River client.
type testBundle struct {
	url    string
	pool   *pgxpool.Pool
	engine *engine.Engine
	client *river.Client[pgx.Tx]
}

// setup gives a test a fresh database, an engine and a started River client.
func setup(t testing.TB, cfg engine.Config) *testBundle {
	t.Helper()
	url := dbtest.NewDB(t)
	pool := openPool(t, url, 30)
	_, err := pool.Exec(context.Background(), callTableSQL)
	require.NoError(t, err)
	b := &testBundle{url: url, pool: pool}
	b.engine, b.client = startEngine(t, pool, cfg)
	return b
}

func openPool(t testing.TB, url string, conns int32) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	pc.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// startWithLease gives e a River client on pool, takes its lease and
// starts the client; both stop when the test ends. River logs through the
// engine's logger (RiverConfig's), unlike newClient's.
func startWithLease(t testing.TB, pool *pgxpool.Pool, e *engine.Engine) {
	t.Helper()
	ctx := context.Background()
	rc := e.RiverConfig()
	rc.TestOnly = true
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	require.NoError(t, err)
	e.SetClient(client)
	require.NoError(t, e.StartLease(ctx))
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.StopAndCancel(ctx)
		_ = e.Stop(ctx)
	})
}

// startEngine builds an engine and its River client on pool and starts it;
// the client stops when the test ends.
func startEngine(t testing.TB, pool *pgxpool.Pool, cfg engine.Config) (*engine.Engine, *river.Client[pgx.Tx]) {
	t.Helper()
	e := newEngine(pool, cfg)
	client := newClient(t, pool, e)
	require.NoError(t, e.StartLease(context.Background()))
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.StopAndCancel(ctx)
		_ = e.Stop(ctx)
	})
	return e, client
}

func newClient(t testing.TB, pool *pgxpool.Pool, e *engine.Engine) *river.Client[pgx.Tx] {
	rc := e.RiverConfig()
	rc.TestOnly = true
	rc.Logger = slog.New(slog.DiscardHandler)
	if os.Getenv("FLOW_ENGINE_TEST_LOG") != "" {
		rc.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if t != nil {
		require.NoError(t, err)
	} else if err != nil {
		panic(err)
	}
	e.SetClient(client)
	return client
}

// start starts plan in its own transaction.
func (b *testBundle) start(t testing.TB, plan engine.Plan) engine.RunID {
	t.Helper()
	var id engine.RunID
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		id, err = b.engine.Start(context.Background(), tx, plan)
		return err
	})
	require.NoError(t, err)
	return id
}

// wait polls the run until it has ended and returns its report.
func (b *testBundle) wait(t testing.TB, id engine.RunID) engine.RunReport {
	t.Helper()
	return waitRun(t, b.pool, b.engine, id, time.Minute)
}

func waitRun(t testing.TB, pool *pgxpool.Pool, e *engine.Engine, id engine.RunID, within time.Duration) engine.RunReport {
	t.Helper()
	end := time.Now().Add(within)
	for {
		rep, err := e.Run(context.Background(), pool, id)
		require.NoError(t, err)
		if rep.State != engine.StateRunning {
			return rep
		}
		if time.Now().After(end) {
			rows, _ := pool.Query(context.Background(), `SELECT j.id, j.state, j.attempt, j.attempted_at, j.scheduled_at, j.errors::text, j.metadata::text
				FROM river_job j JOIN engine_step s ON s.job_id = j.id WHERE s.run_id = $1 AND s.state = 'running'`, id)
			jobs, _ := pgx.CollectRows(rows, pgx.RowToMap)
			t.Fatalf("run %d still running after %s: %+v\nopen jobs: %v", id, within, rep, jobs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// call is one row of test_call.
type call struct {
	Process   string
	StepID    int64
	Step      string
	Stage     int
	Batch     int
	Attempt   int
	Targets   []string
	StartedAt time.Time
	EndedAt   *time.Time
	Outcome   string
}

func (b *testBundle) calls(t testing.TB, id engine.RunID) []call {
	t.Helper()
	return listCalls(t, b.pool, id)
}

func listCalls(t testing.TB, pool *pgxpool.Pool, id engine.RunID) []call {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT step_id, step, stage, batch, attempt, targets, started_at, ended_at, outcome, process
		FROM test_call WHERE run_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (c call, err error) {
		err = r.Scan(&c.StepID, &c.Step, &c.Stage, &c.Batch, &c.Attempt, &c.Targets, &c.StartedAt, &c.EndedAt, &c.Outcome, &c.Process)
		return c, err
	})
	require.NoError(t, err)
	return out
}

// step returns a test.record step.
func step(name string, p testParams, targets ...string) engine.Step {
	return engine.Step{Name: name, Action: "test.record", Params: p, Targets: targets}
}

// eachRun is an end-of-run hook calling fn for each ended run in turn.
func eachRun(fn func(ctx context.Context, tx pgx.Tx, run engine.RunSummary) error) engine.RunEndFunc {
	return func(ctx context.Context, tx pgx.Tx, runs []engine.RunSummary) error {
		for _, run := range runs {
			if err := fn(ctx, tx, run); err != nil {
				return err
			}
		}
		return nil
	}
}

// waitCalledOnce waits for run id to complete and requires each of its
// steps to have been called exactly once.
func (b *testBundle) waitCalledOnce(t testing.TB, id engine.RunID) engine.RunReport {
	t.Helper()
	rep := b.wait(t, id)
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
	seen := map[int64]int{}
	for _, c := range b.calls(t, id) {
		seen[c.StepID]++
	}
	for _, st := range rep.Stages {
		for _, s := range st.Steps {
			require.Equal(t, 1, seen[int64(s.ID)], "step %d (%s) called once", s.ID, s.Name)
		}
	}
	return rep
}
