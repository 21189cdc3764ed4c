package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/engine"
)

// privateCluster starts a PostgreSQL cluster of the test's own (one it can
// stop and start), migrated, and returns it with its database URL.
func privateCluster(t *testing.T) (*pglocal.Cluster, string) {
	t.Helper()
	return dbtest.StartCluster(t, dbtest.RestartableSettings(100))
}

// resetLog records, in memory (the database restarts under it), every
// call of the test's reset action: per target, each call and whether its
// outcome reached the engine.
type resetLog struct {
	mu    sync.Mutex
	calls map[string][]resetCall
}

type resetCall struct {
	began, ended   time.Time
	answered       bool // the action returned its outcome to the engine
	outcomeUnknown bool // Call.OutcomeUnknown
}

func (l *resetLog) begin(target string, unknown bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[target] = append(l.calls[target], resetCall{began: time.Now(), outcomeUnknown: unknown})
	return len(l.calls[target]) - 1
}

func (l *resetLog) end(target string, i int, answered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[target][i].ended, l.calls[target][i].answered = time.Now(), answered
}

func (l *resetLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		n += len(c)
	}
	return n
}

// TestPostgresRestartDuringResets restarts PostgreSQL (about a second
// down) while 50 runs' reset calls are in flight: the calls end while the
// database is down, their checkpoints cannot commit, and the engine must
// keep their outcomes and commit them once it is back, not call again
// (issue 28's D2). A target is reset twice only when the first call's
// outcome never reached the engine, and the step records each such case.
// 2 rounds; 5 under FLOW_SOAK (make soak).
func TestPostgresRestartDuringResets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, url := privateCluster(t)
	pool := openPool(t, url, 30)
	_, err := pool.Exec(ctx, callTableSQL)
	require.NoError(t, err)

	log := &resetLog{calls: map[string][]resetCall{}}
	const latency = time.Second
	e := newEngine(pool, engine.Config{Logger: slog.New(slog.DiscardHandler)})
	engine.Register(e, "test.reset", func(ctx context.Context, call engine.Call[struct{}]) (engine.Result, error) {
		var idx []int
		for _, tg := range call.Targets {
			idx = append(idx, log.begin(tg, call.OutcomeUnknown))
		}
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			for i, tg := range call.Targets {
				log.end(tg, idx[i], false)
			}
			return engine.Result{}, ctx.Err()
		}
		for i, tg := range call.Targets {
			log.end(tg, idx[i], true)
		}
		return engine.Result{}, nil
	})
	startWithLease(t, pool, e)

	rounds := 2
	if soak() {
		rounds = 5
	}
	const racks = 50
	for round := range rounds {
		var runs []engine.RunID
		for i := range racks {
			target := fmt.Sprintf("r%d-rack%02d", round, i)
			plan := engine.Plan{Owner: target, Stages: []engine.Stage{
				{Name: "reset", Steps: []engine.Step{{Name: "reset", Action: "test.reset", Targets: []string{target},
					Timeout: 30 * time.Second, Retry: engine.RetryPolicy{InitialInterval: 100 * time.Millisecond}}}},
				{Name: "after", Steps: []engine.Step{{Name: "after", Action: "test.noop"}}},
			}}
			require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				id, err := e.Start(ctx, tx, plan)
				runs = append(runs, id)
				return err
			}))
		}
		// Stop the server once every reset is in flight: the calls end
		// while it is down.
		want := (round + 1) * racks
		require.Eventually(t, func() bool { return log.count() >= want }, 60*time.Second, 5*time.Millisecond)
		require.NoError(t, cluster.Stop(ctx))
		time.Sleep(time.Second)
		require.NoError(t, cluster.Start(ctx))

		for _, id := range runs {
			rep := waitRunThroughOutage(t, pool, e, id, 2*time.Minute)
			require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
			s := rep.Stages[0].Steps[0]
			target := s.Targets[0].Target
			log.mu.Lock()
			calls := append([]resetCall(nil), log.calls[target]...)
			log.mu.Unlock()
			require.NotEmpty(t, calls, target)
			for i, c := range calls[1:] {
				prev := calls[i]
				// A second reset only after a call whose outcome never
				// reached the engine, recorded in the step and told to
				// the action.
				require.False(t, prev.answered, "%s reset again though its call %d's outcome reached the engine", target, i+1)
				require.True(t, c.outcomeUnknown, "%s: call %d not told the last outcome is unknown", target, i+2)
			}
			require.Len(t, s.UnknownOutcomes, len(calls)-1, "%s: %d calls, unknown outcomes recorded: %+v", target, len(calls), s.UnknownOutcomes)
		}
		kept, committed := engine.KeptOutcomes(e)
		t.Logf("round %d: %d resets for %d racks; outcomes kept through the outage so far: %d, recorded %d", round+1, log.count()-round*racks, racks, kept, committed)
	}
	kept, committed := engine.KeptOutcomes(e)
	require.Positive(t, kept, "no checkpoint met the outage: the test did not test anything")
	require.Equal(t, kept, committed)
}

// TestOutageLongerThanLease: PostgreSQL is down for several times the
// lease (a slow restart on a loaded machine) while 10 runs' reset calls
// end. The lone process loses its lease, keeps the calls' outcomes, takes
// a new lease when the database is back and records them: no tray is
// reset twice and no outcome is unknown. (Before, the process gave its
// kept outcomes up when its lease lapsed, and its own sweep then
// rescheduled its steps as a dead process's: every tray reset again.)
func TestOutageLongerThanLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, url := privateCluster(t)
	pool := openPool(t, url, 20)
	_, err := pool.Exec(ctx, callTableSQL)
	require.NoError(t, err)

	log := &resetLog{calls: map[string][]resetCall{}}
	const (
		latency   = time.Second
		heartbeat = 100 * time.Millisecond
		expiry    = 300 * time.Millisecond
	)
	e := newEngine(pool, engine.Config{Logger: slog.New(slog.DiscardHandler), LeaseHeartbeat: heartbeat, LeaseExpiry: expiry})
	engine.Register(e, "test.reset", func(ctx context.Context, call engine.Call[struct{}]) (engine.Result, error) {
		var idx []int
		for _, tg := range call.Targets {
			idx = append(idx, log.begin(tg, call.OutcomeUnknown))
		}
		// The backend finishes what it began, whatever the lease: the
		// outcome is what the engine must not lose.
		time.Sleep(latency)
		for i, tg := range call.Targets {
			log.end(tg, idx[i], true)
		}
		return engine.Result{}, nil
	})
	startWithLease(t, pool, e)

	const racks = 10
	var runs []engine.RunID
	for i := range racks {
		target := fmt.Sprintf("rack%02d", i)
		plan := engine.Plan{Owner: target, Stages: []engine.Stage{
			{Name: "reset", Steps: []engine.Step{{Name: "reset", Action: "test.reset", Targets: []string{target},
				Timeout: time.Minute, Retry: engine.RetryPolicy{InitialInterval: 100 * time.Millisecond}}}},
			{Name: "after", Steps: []engine.Step{{Name: "after", Action: "test.noop"}}},
		}}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id, err := e.Start(ctx, tx, plan)
			runs = append(runs, id)
			return err
		}))
	}
	require.Eventually(t, func() bool { return log.count() >= racks }, 60*time.Second, 5*time.Millisecond)
	require.NoError(t, cluster.Stop(ctx))
	time.Sleep(10 * expiry) // every call ends, and the lease lapses, while it is down
	require.NoError(t, cluster.Start(ctx))

	for _, id := range runs {
		rep := waitRunThroughOutage(t, pool, e, id, 2*time.Minute)
		require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
		s := rep.Stages[0].Steps[0]
		target := s.Targets[0].Target
		log.mu.Lock()
		calls := append([]resetCall(nil), log.calls[target]...)
		log.mu.Unlock()
		require.Len(t, calls, 1, "%s reset again after an outage longer than the lease: %+v", target, calls)
		require.Empty(t, s.UnknownOutcomes, target)
	}
	kept, committed := engine.KeptOutcomes(e)
	// The lease cannot outlive 3 s without a renewal; a call that ended
	// before the stop (a loaded machine is slow to stop) is recorded at once.
	require.Positive(t, kept, "no call's outcome met the outage: the test did not test anything")
	require.Equal(t, kept, committed)
}

// waitRunThroughOutage waits for run id to end, tolerating the errors of
// a database that is coming back.
func waitRunThroughOutage(t *testing.T, pool *pgxpool.Pool, e *engine.Engine, id engine.RunID, within time.Duration) engine.RunReport {
	t.Helper()
	var rep engine.RunReport
	require.Eventually(t, func() bool {
		r, err := e.Run(context.Background(), pool, id)
		if err != nil {
			return false
		}
		rep = r
		return r.State != engine.StateRunning
	}, within, 50*time.Millisecond, "run %d did not end", id)
	return rep
}

// TestCheckpointAnswerLost: checkpoints that commit but whose answer the
// engine never gets (the connection drops before the commit's reply) are
// retried; the retry finds its step ended and its job handed on to the
// next stage's step, and goes on with it. Every step is called once, the
// run completes in the one job its stages were handed along, and that job
// ends completed.
func TestCheckpointAnswerLost(t *testing.T) {
	t.Parallel()
	// The first step's answer is lost, and once it is recorded, the
	// second's (in the job handed on to it).
	obs := &rearm{recorder: &recorder{}}
	b := setup(t, engine.Config{Observer: obs})
	obs.e = b.engine
	engine.LoseCheckpointAnswers(b.engine, 1)
	id := b.start(t, engine.Plan{Stages: []engine.Stage{
		{Name: "one", Steps: []engine.Step{step("a", testParams{}, "t1")}},
		{Name: "two", Steps: []engine.Step{step("b", testParams{}, "t1")}},
		{Name: "three", Steps: []engine.Step{step("c", testParams{}, "t1")}},
	}})
	b.waitCalledOnce(t, id)
	kept, committed := engine.KeptOutcomes(b.engine)
	require.Equal(t, int64(2), kept, "two answers lost, each outcome kept")
	require.Equal(t, int64(2), committed)
	var states []string
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(context.Background(), `SELECT state::text FROM river_job WHERE kind = 'engine.run_step'
			AND (metadata->>'run_id')::bigint = $1`, id)
		if err != nil {
			return err
		}
		states, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}))
	require.Equal(t, []string{"completed"}, states, "one job for the run's three stages, completed")
}

// rearm is an observer that loses the answer of the checkpoint after step
// "a"'s.
type rearm struct {
	*recorder
	e *engine.Engine
}

func (r *rearm) StepEnded(ctx context.Context, ev engine.StepEvent) {
	if ev.Step == "a" {
		engine.LoseCheckpointAnswers(r.e, 1)
	}
	r.recorder.StepEnded(ctx, ev)
}
