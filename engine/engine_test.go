package engine_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/engine"
)

func TestStartRejectsBadPlans(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{RescueStuckJobsAfter: time.Hour})
	ok := step("ok", testParams{})
	for _, tt := range []struct {
		name string
		plan engine.Plan
		want error
	}{
		{"NoStages", engine.Plan{}, engine.ErrEmptyPlan},
		{"EmptyStage", engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{ok}}, {}}}, engine.ErrEmptyStage},
		{"UnknownAction", engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{{Name: "x", Action: "nope"}}}}}, engine.ErrUnknownAction},
		{"NegativeMaxParallel", engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{{Name: "x", Action: "test.record", MaxParallel: -1}}}}}, engine.ErrInvalidMaxParallel},
		{"BadParamsJSON", engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{{Name: "x", Action: "test.record", Params: json.RawMessage(`{"block":`)}}}}}, engine.ErrInvalidParams},
		{"UnknownParamField", engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{{Name: "x", Action: "test.record", Params: json.RawMessage(`{"nope":1}`)}}}}}, engine.ErrInvalidParams},
		{"ParamsOfWrongType", engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{{Name: "x", Action: "test.record", Params: map[string]string{"block": "soon"}}}}}}, engine.ErrInvalidParams},
		{"RetryBudgetOverflows", engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{{Name: "x", Action: "test.record", Timeout: 1000 * time.Hour, Retry: engine.RetryPolicy{MaxAttempts: 1 << 40}}}}}}, engine.ErrInvalidTimeout},
		{"NegativeRunTimeout", engine.Plan{Timeout: -time.Second, Stages: []engine.Stage{{Steps: []engine.Step{ok}}}}, engine.ErrInvalidTimeout},
		{"BadRetry", engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{{Name: "x", Action: "test.record", Retry: engine.RetryPolicy{BackoffCoefficient: 0.5}}}}}}, engine.ErrInvalidRetry},
		{"MetadataNotObject", engine.Plan{Metadata: json.RawMessage(`[1]`), Stages: []engine.Stage{{Steps: []engine.Step{ok}}}}, engine.ErrInvalidMetadata},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
			_, err = b.engine.Start(ctx, tx, tt.plan)
			require.ErrorIs(t, err, tt.want)
			var pe *engine.PlanError
			require.ErrorAs(t, err, &pe)
			var runs, jobs int
			require.NoError(t, tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM engine_run), (SELECT count(*) FROM river_job)`).Scan(&runs, &jobs))
			require.Zero(t, runs)
			require.Zero(t, jobs)
		})
	}
}

func TestStagesRunInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	var stages []engine.Stage
	for s := range 3 {
		stages = append(stages, engine.Stage{Name: "s", Steps: []engine.Step{
			step("a", testParams{Block: 20 * time.Millisecond}, "t1"),
			step("b", testParams{Block: 40 * time.Millisecond}, "t2"),
		}})
		_ = s
	}
	id := b.start(t, engine.Plan{Owner: "task-1", Metadata: json.RawMessage(`{"rack":"r1"}`), Stages: stages})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
	require.Equal(t, "task-1", rep.Owner)
	require.Len(t, rep.Stages, 3)
	for _, st := range rep.Stages {
		require.Equal(t, engine.StateCompleted, st.State)
		for _, s := range st.Steps {
			require.Equal(t, engine.StateCompleted, s.State)
			require.Equal(t, []engine.TargetOutcome{{Target: s.Targets[0].Target, State: engine.StateCompleted, Attempts: 1}}, s.Targets)
		}
	}
	calls := b.calls(t, id)
	require.Len(t, calls, 6)
	for _, c := range calls {
		for _, prev := range calls {
			if prev.Stage < c.Stage {
				require.NotNil(t, prev.EndedAt)
				require.True(t, prev.EndedAt.Before(c.StartedAt), "stage %d call started before stage %d ended", c.Stage, prev.Stage)
			}
		}
	}
	var hook struct{ owner, state string }
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT owner, state FROM test_run_end WHERE run_id = $1`, id).Scan(&hook.owner, &hook.state))
	require.Equal(t, "task-1", hook.owner)
	require.Equal(t, "completed", hook.state)
}

func TestStepsOfAStageRunInParallel(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	// Each call waits until all four have arrived: run one at a time, they
	// would wait forever (and fail at the call timeout).
	p := testParams{Barrier: 4}
	st := engine.Stage{Steps: []engine.Step{step("a", p), step("b", p), step("c", p), step("d", p)}}
	for i := range st.Steps {
		st.Steps[i].Timeout = 30 * time.Second
		st.Steps[i].Retry.MaxAttempts = 1
	}
	id := b.start(t, engine.Plan{Stages: []engine.Stage{st}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
	require.Len(t, b.calls(t, id), 4)
}

func TestBatchesRunInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	batched := step("batched", testParams{Block: 10 * time.Millisecond}, "a", "b", "c", "d", "e")
	batched.MaxParallel = 2
	whole := step("whole", testParams{}, "a", "b", "c")
	id := b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{batched, whole}}}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
	var got [][]string
	var last *call
	for _, c := range b.calls(t, id) {
		if c.Step != "batched" {
			require.Equal(t, []string{"a", "b", "c"}, c.Targets)
			continue
		}
		require.Equal(t, len(got), c.Batch)
		if last != nil {
			require.True(t, last.EndedAt.Before(c.StartedAt), "batch %d started before batch %d ended", c.Batch, last.Batch)
		}
		got = append(got, c.Targets)
		last = &c
	}
	require.Equal(t, [][]string{{"a", "b"}, {"c", "d"}, {"e"}}, got)
	s := rep.Stages[0].Steps[0]
	require.Equal(t, 3, s.Batches)
	require.Len(t, s.Targets, 5)
	require.Equal(t, 8, rep.Progress.Completed)
}

func TestRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	st := step("flaky", testParams{FailTimes: 2}, "t1")
	st.Retry = engine.RetryPolicy{MaxAttempts: 3, InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 3}
	id := b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{st}}}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
	calls := b.calls(t, id)
	require.Len(t, calls, 3)
	for i, c := range calls {
		require.Equal(t, i+1, c.Attempt)
	}
	require.GreaterOrEqual(t, calls[1].StartedAt.Sub(*calls[0].EndedAt), 100*time.Millisecond)
	require.GreaterOrEqual(t, calls[2].StartedAt.Sub(*calls[1].EndedAt), 300*time.Millisecond)
	require.Equal(t, 3, rep.Stages[0].Steps[0].Targets[0].Attempts)

	t.Run("Exhausted", func(t *testing.T) {
		t.Parallel()
		st := step("broken", testParams{FailTimes: 10}, "t1")
		st.Retry = engine.RetryPolicy{MaxAttempts: 2, InitialInterval: 10 * time.Millisecond}
		id := b.start(t, engine.Plan{Stages: []engine.Stage{{Name: "power", Steps: []engine.Step{st}}, {Steps: []engine.Step{step("never", testParams{})}}}})
		rep := b.wait(t, id)
		require.Equal(t, engine.StateFailed, rep.State)
		require.Equal(t, "stage 1 (power) failed: step broken failed: batch 1 of 1 failed after 2 attempt(s): test failure", rep.Error)
		require.Len(t, b.calls(t, id), 2)
		require.Equal(t, engine.StateCancelled, rep.Stages[1].State)
		require.Equal(t, engine.StateFailed, rep.Stages[0].Steps[0].Targets[0].State)
	})
	t.Run("Permanent", func(t *testing.T) {
		t.Parallel()
		st := step("fatal", testParams{FailTimes: 10, Permanent: true}, "t1")
		id := b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{st}}}})
		rep := b.wait(t, id)
		require.Equal(t, engine.StateFailed, rep.State)
		require.Len(t, b.calls(t, id), 1)
	})
}

func TestCallTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	st := step("slow", testParams{Hang: true}, "t1")
	st.Timeout = 100 * time.Millisecond
	st.Retry = engine.RetryPolicy{MaxAttempts: 2, InitialInterval: 10 * time.Millisecond}
	id := b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{st}}}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateFailed, rep.State)
	require.Contains(t, rep.Error, "call timed out after 100ms")
	// The test action writes its outcome through the recorder's own pool,
	// outside the engine's transactions; once, in a loaded CI run, a call
	// still read "running" right after the run had ended. Wait for both.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		calls := b.calls(t, id)
		require.Len(c, calls, 2)
		for _, call := range calls {
			require.Equal(c, "ctx_done", call.Outcome)
		}
	}, 10*time.Second, 20*time.Millisecond)
}

func TestPollAfterSnoozesWithoutUsingAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	st := step("poll", testParams{PollTimes: 4, PollAfter: 50 * time.Millisecond}, "t1")
	st.Retry.MaxAttempts = 1
	id := b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{st}}}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
	calls := b.calls(t, id)
	require.Len(t, calls, 5)
	for i, c := range calls {
		require.Equal(t, 1, c.Attempt, "poll %d used an attempt", i)
		if i > 0 {
			require.GreaterOrEqual(t, c.StartedAt.Sub(*calls[i-1].EndedAt), 50*time.Millisecond)
		}
	}
	s := rep.Stages[0].Steps[0]
	require.Equal(t, 4, s.Polls)
	require.Equal(t, &engine.Progress{Completed: 4, Message: "polling"}, s.Progress)
}

func TestSleepIsDurable(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	st := step("nap", testParams{Sleep: 300 * time.Millisecond}, "a", "b")
	st.MaxParallel = 1
	id := b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{st}}}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
	calls := b.calls(t, id)
	require.Len(t, calls, 2)
	require.GreaterOrEqual(t, calls[1].StartedAt.Sub(*calls[0].EndedAt), 300*time.Millisecond)
	require.GreaterOrEqual(t, rep.Stages[0].Steps[0].EndedAt.Sub(*calls[1].EndedAt), 300*time.Millisecond)
}

func TestStepDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	st := step("forever", testParams{PollTimes: 1 << 20, PollAfter: 20 * time.Millisecond}, "t1")
	st.Deadline = 300 * time.Millisecond
	id := b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{st}}}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateFailed, rep.State)
	require.Contains(t, rep.Error, "step deadline exceeded")
	s := rep.Stages[0].Steps[0]
	require.GreaterOrEqual(t, s.EndedAt.Sub(*s.StartedAt), 300*time.Millisecond)
	require.Equal(t, s.StartedAt.Add(300*time.Millisecond), *s.DeadlineAt)
}

func TestDeadlinesSurviveRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewDB(t)
	pool := openPool(t, url, 20)
	_, err := pool.Exec(ctx, callTableSQL)
	require.NoError(t, err)
	e1, c1 := startEngine(t, pool, engine.Config{})
	b := &testBundle{url: url, pool: pool, engine: e1, client: c1}
	st := step("forever", testParams{PollTimes: 1 << 20, PollAfter: 50 * time.Millisecond}, "t1")
	// The deadline leaves the first process time for two calls on a loaded
	// machine: at 1.5 s, a step whose calls were held up past it (load 20+,
	// the whole suite running) failed in the first process, with one call.
	st.Deadline = 4 * time.Second
	id := b.start(t, engine.Plan{Timeout: time.Hour, Stages: []engine.Stage{{Steps: []engine.Step{st}}}})
	require.Eventually(t, func() bool { return len(b.calls(t, id)) >= 2 }, 10*time.Second, 10*time.Millisecond)
	before, err := e1.Run(ctx, pool, id)
	require.NoError(t, err)
	require.NoError(t, c1.Stop(ctx))

	// A new process: the deadlines it honours are the stored ones.
	time.Sleep(300 * time.Millisecond)
	e2, _ := startEngine(t, pool, engine.Config{})
	rep := waitRun(t, pool, e2, id, time.Minute)
	require.Equal(t, engine.StateFailed, rep.State)
	require.Contains(t, rep.Error, "step deadline exceeded")
	s := rep.Stages[0].Steps[0]
	require.Equal(t, *before.Stages[0].Steps[0].DeadlineAt, *s.DeadlineAt)
	require.Equal(t, *before.TimeoutAt, *rep.TimeoutAt)
	require.False(t, s.EndedAt.Before(*s.DeadlineAt))
}

func TestRunTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	id := b.start(t, engine.Plan{Timeout: 300 * time.Millisecond, Stages: []engine.Stage{{Steps: []engine.Step{step("hang", testParams{Hang: true}, "t1")}}}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateFailed, rep.State)
	require.Equal(t, "run timed out", rep.Error)
	require.Equal(t, rep.CreatedAt.Add(300*time.Millisecond).Truncate(time.Millisecond), rep.TimeoutAt.Truncate(time.Millisecond))
	// The hanging call (if it started before the timeout) saw its context end.
	require.Eventually(t, func() bool {
		for _, c := range b.calls(t, id) {
			if c.Outcome == "running" {
				return false
			}
			require.Equal(t, "ctx_done", c.Outcome)
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
	require.LessOrEqual(t, len(b.calls(t, id)), 1)
	t.Run("WhileSleeping", func(t *testing.T) {
		t.Parallel()
		// The step's job is snoozed for an hour: only the run's own timeout
		// job can end the run. 2 s leaves the step time to start and go to
		// sleep on a loaded machine: a step that first runs after the
		// timeout ends the run itself, and the timeout job is cancelled.
		id := b.start(t, engine.Plan{Timeout: 2 * time.Second, Stages: []engine.Stage{{Steps: []engine.Step{step("nap", testParams{Sleep: time.Hour}, "t1")}}}})
		rep := b.wait(t, id)
		require.Equal(t, engine.StateFailed, rep.State)
		require.Equal(t, "run timed out", rep.Error)
		require.Equal(t, engine.StateCancelled, rep.Stages[0].Steps[0].State)
		var state string
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT state FROM river_job WHERE kind = 'engine.run_timeout' AND (args->>'run_id')::bigint = $1`, id).Scan(&state))
		require.Equal(t, "completed", state)
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	id := b.start(t, engine.Plan{Owner: "task-9", Stages: []engine.Stage{
		{Steps: []engine.Step{step("hang", testParams{Hang: true}, "t1"), step("quick", testParams{}, "t2")}},
		{Steps: []engine.Step{step("never", testParams{})}},
	}})
	ctx := context.Background()
	require.Eventually(t, func() bool { return len(b.calls(t, id)) == 2 }, 10*time.Second, 10*time.Millisecond)
	cancel := func() error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return b.engine.Cancel(ctx, tx, id) })
	}
	require.NoError(t, cancel())
	rep, err := b.engine.Run(ctx, b.pool, id)
	require.NoError(t, err)
	require.Equal(t, engine.StateTerminated, rep.State)
	require.Equal(t, engine.StateCancelled, rep.Stages[1].Steps[0].State)
	// The running call sees its context cancelled.
	require.Eventually(t, func() bool {
		for _, c := range b.calls(t, id) {
			if c.Step == "hang" {
				return c.Outcome == "ctx_done"
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	// Cancelling again is a no-op; the hook ran once.
	require.NoError(t, cancel())
	var hooks int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM test_run_end WHERE run_id = $1 AND state = 'terminated'`, id).Scan(&hooks))
	require.Equal(t, 1, hooks)
	require.ErrorIs(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return b.engine.Cancel(ctx, tx, 999999) }), engine.ErrRunNotFound)
	// No job of the run is left to work, and the later stage never ran.
	require.Eventually(t, func() bool {
		var open int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'engine.run_step' AND state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&open))
		return open == 0
	}, 10*time.Second, 10*time.Millisecond)
	for _, c := range b.calls(t, id) {
		require.NotEqual(t, "never", c.Step)
	}
}

// TestEndedRunCancelsCallsWithoutNotification ends runs behind River's back
// (no cancel notification reaches the workers): the engine's poll of the
// running calls' runs still cancels every hanging call.
func TestEndedRunCancelsCallsWithoutNotification(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{CancelPollInterval: 100 * time.Millisecond})
	ctx := context.Background()
	var ids []engine.RunID
	for range 3 {
		ids = append(ids, b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{
			step("hang", testParams{Hang: true}, "a"), step("hang2", testParams{Hang: true}, "b")}}}}))
	}
	for _, id := range ids {
		require.Eventually(t, func() bool { return len(b.calls(t, id)) == 2 }, 10*time.Second, 10*time.Millisecond)
	}
	// End two of the runs as a process that missed the notification would
	// see it: only the rows change.
	_, err := b.pool.Exec(ctx, `UPDATE engine_run SET state = 'terminated', ended_at = now() WHERE id = ANY($1)`, []int64{int64(ids[0]), int64(ids[1])})
	require.NoError(t, err)
	done := func(id engine.RunID) bool {
		for _, c := range b.calls(t, id) {
			if c.Outcome != "ctx_done" {
				return false
			}
		}
		return true
	}
	require.Eventually(t, func() bool { return done(ids[0]) && done(ids[1]) }, 5*time.Second, 20*time.Millisecond)
	require.False(t, done(ids[2]), "a running run's calls were cancelled")
	for _, c := range b.calls(t, ids[2]) {
		require.Equal(t, "running", c.Outcome)
	}
}

func TestStageStopsAtFirstFailedStep(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	// The failing step waits for the slow one's call (a barrier of two), so
	// the slow step is always running when the stage fails: otherwise the
	// stage may fail first and cancel the slow step before it calls at all.
	fail := step("fail", testParams{Barrier: 2, FailTimes: 1, Permanent: true}, "t1")
	id := b.start(t, engine.Plan{Stages: []engine.Stage{
		{Name: "power", Steps: []engine.Step{fail, step("slow", testParams{Barrier: 2, Hang: true}, "t2")}},
		{Steps: []engine.Step{step("never", testParams{})}},
	}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateFailed, rep.State)
	require.Equal(t, "stage 1 (power) failed: step fail failed: batch 1 of 1 failed after 1 attempt(s): test failure", rep.Error)
	require.Equal(t, engine.StateCancelled, rep.Stages[0].Steps[1].State)
	require.Eventually(t, func() bool {
		for _, c := range b.calls(t, id) {
			if c.Step == "slow" {
				return c.Outcome == "ctx_done"
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
}

// TestActionPanicIsAFailedCall: a panicking action is a failed call,
// retried under the step's policy with its attempt counted; the engine,
// not River, schedules the retry.
func TestActionPanicIsAFailedCall(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	s := step("panics", testParams{PanicOnce: true}, "t1")
	s.Retry = engine.RetryPolicy{MaxAttempts: 2, InitialInterval: 10 * time.Millisecond}
	id := b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{s}}}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
	calls := b.calls(t, id)
	require.Len(t, calls, 2)
	require.Equal(t, []int{1, 2}, []int{calls[0].Attempt, calls[1].Attempt})
	require.Equal(t, 1, rep.Stages[0].Steps[0].Attempt, "the panic counted as a failed call")

	// Out of attempts, the panic fails the step with its message.
	s.Retry.MaxAttempts = 1
	id = b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{s}}}})
	rep = b.wait(t, id)
	require.Equal(t, engine.StateFailed, rep.State)
	require.Contains(t, rep.Error, "action test.record panicked: test panic")
}

func TestStageWaitsForAllSteps(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	fail := step("fail", testParams{FailTimes: 1, Permanent: true}, "t1")
	id := b.start(t, engine.Plan{Stages: []engine.Stage{
		{Name: "firmware", WaitAll: true, Steps: []engine.Step{fail, step("slow", testParams{Block: 300 * time.Millisecond}, "t2")}},
		{Steps: []engine.Step{step("never", testParams{})}},
	}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateFailed, rep.State)
	require.Equal(t, "stage 1 (firmware) failed: step fail failed: batch 1 of 1 failed after 1 attempt(s): test failure", rep.Error)
	require.Equal(t, engine.StateCompleted, rep.Stages[0].Steps[1].State)
	require.Equal(t, engine.StateCancelled, rep.Stages[1].Steps[0].State)
	for _, c := range b.calls(t, id) {
		require.NotEqual(t, "never", c.Step)
		if c.Step == "slow" {
			require.Equal(t, "ok", c.Outcome)
		}
	}
}

func TestHookErrorRollsBackCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, engine.Config{OnRunEnd: eachRun(func(ctx context.Context, tx pgx.Tx, run engine.RunSummary) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM test_call WHERE run_id = $1`, run.ID).Scan(&n); err != nil {
			return err
		}
		if n < 2 {
			// Fails the first checkpoint: the run must stay running and the
			// step must run again.
			_, err := tx.Exec(ctx, `INSERT INTO test_run_end VALUES ($1, 'x', 'x', 'x')`, run.ID)
			if err != nil {
				return err
			}
			return errTest
		}
		_, err := tx.Exec(ctx, `INSERT INTO test_run_end (run_id, owner, state, error) VALUES ($1, $2, $3, $4)`, run.ID, run.Owner, run.State, run.Error)
		return err
	})})
	id := b.start(t, engine.Plan{Owner: "o", Stages: []engine.Stage{{Steps: []engine.Step{step("a", testParams{})}}}})
	rep := waitRun(t, b.pool, b.engine, id, time.Minute)
	require.Equal(t, engine.StateCompleted, rep.State)
	var state string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT state FROM test_run_end WHERE run_id = $1`, id).Scan(&state))
	require.Equal(t, "completed", state)
	require.Len(t, b.calls(t, id), 2)
}

// TestHookPanicFailsOnlyItsCheckpoint: a hook that panics rolls its
// checkpoint back like an error (the step runs again), and the process
// survives it.
func TestHookPanicFailsOnlyItsCheckpoint(t *testing.T) {
	t.Parallel()
	var panicked sync.Once
	b := setup(t, engine.Config{OnRunEnd: eachRun(func(ctx context.Context, tx pgx.Tx, run engine.RunSummary) error {
		panicked.Do(func() { panic("hook bug") })
		_, err := tx.Exec(ctx, `INSERT INTO test_run_end (run_id, owner, state, error) VALUES ($1, $2, $3, $4)`,
			run.ID, run.Owner, run.State, run.Error)
		return err
	})})
	id := b.start(t, engine.Plan{Owner: "o", Stages: []engine.Stage{{Steps: []engine.Step{step("a", testParams{})}}}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateCompleted, rep.State)
	require.Len(t, b.calls(t, id), 2)
}

// TestGroupedCheckpoints holds both checkpoint committers behind a slow hook
// while forty steps end, so their checkpoints queue and commit in groups.
// With every fifth run's hook failing once, a failed group must be committed
// step by step, so no other step runs again.
func TestGroupedCheckpoints(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		badEvery int
	}{
		{"all succeed", 0},
		{"some hooks fail once", 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testGroupedCheckpoints(t, tt.badEvery)
		})
	}
}

func testGroupedCheckpoints(t *testing.T, badEvery int) {
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[engine.RunID]int{}
	b := setup(t, engine.Config{OnRunEnd: eachRun(func(ctx context.Context, tx pgx.Tx, run engine.RunSummary) error {
		mu.Lock()
		seen[run.ID]++
		first := seen[run.ID] == 1
		mu.Unlock()
		switch {
		case first && run.Owner == "slow":
			time.Sleep(500 * time.Millisecond)
		case first && run.Owner == "bad":
			return errTest
		}
		_, err := tx.Exec(ctx, `INSERT INTO test_run_end (run_id, owner, state, error) VALUES ($1, $2, $3, $4)`,
			run.ID, run.Owner, run.State, run.Error)
		return err
	})})
	owners := map[engine.RunID]string{}
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		// Two consecutive runs: one on each committer's share.
		for range 2 {
			id, err := b.engine.Start(ctx, tx, engine.Plan{Owner: "slow", Stages: []engine.Stage{{Steps: []engine.Step{step("a", testParams{})}}}})
			if err != nil {
				return err
			}
			owners[id] = "slow"
		}
		for i := range 40 {
			owner := "good"
			if badEvery > 0 && i%badEvery == 0 {
				owner = "bad"
			}
			id, err := b.engine.Start(ctx, tx, engine.Plan{Owner: owner, Stages: []engine.Stage{{Steps: []engine.Step{
				step("a", testParams{Block: 150 * time.Millisecond})}}}})
			if err != nil {
				return err
			}
			owners[id] = owner
		}
		return nil
	}))
	for id, owner := range owners {
		rep := b.wait(t, id)
		require.Equal(t, engine.StateCompleted, rep.State, "run %d (%s): %s", id, owner, rep.Error)
		// A failed hook rolls back only its own step's checkpoint: no other
		// run's step runs again. A bad run's step runs again only if its
		// failing hook call was not part of a group (then its job retries).
		calls := len(b.calls(t, id))
		if owner == "bad" {
			require.Contains(t, []int{1, 2}, calls, "run %d (%s)", id, owner)
		} else {
			require.Equal(t, 1, calls, "run %d (%s) ran its step again", id, owner)
		}
	}
	steps, grouped, split := engine.CheckpointStats(b.engine)
	require.EqualValues(t, len(owners), steps)
	if badEvery == 0 {
		require.GreaterOrEqual(t, grouped, int64(20), "checkpoints were not grouped")
		require.Zero(t, split)
	} else {
		require.GreaterOrEqual(t, split, int64(1), "no group of several checkpoints failed")
	}
}

// TestGroupedCheckpointSkipsHeldRun: while another transaction holds one
// run's row (a leak response pre-empting it, say) and that run's step ends
// with twenty others, queued behind slow hooks so that they are committed
// in groups, the group leaves the held run's step out: the twenty runs
// complete while the lock is held, and the held run's step is committed
// alone once it is released.
func TestGroupedCheckpointSkipsHeldRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[engine.RunID]int{}
	b := setup(t, engine.Config{OnRunEnd: eachRun(func(ctx context.Context, tx pgx.Tx, run engine.RunSummary) error {
		mu.Lock()
		seen[run.ID]++
		first := seen[run.ID] == 1
		mu.Unlock()
		if first && run.Owner == "slow" {
			time.Sleep(500 * time.Millisecond)
		}
		return nil
	})})
	var slow, good []engine.RunID
	var held engine.RunID
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		for range 2 { // one on each committer's share
			id, err := b.engine.Start(ctx, tx, engine.Plan{Owner: "slow", Stages: []engine.Stage{{Steps: []engine.Step{step("a", testParams{})}}}})
			if err != nil {
				return err
			}
			slow = append(slow, id)
		}
		for i := range 21 {
			id, err := b.engine.Start(ctx, tx, engine.Plan{Owner: "good", Stages: []engine.Stage{{Steps: []engine.Step{
				step("a", testParams{Block: 150 * time.Millisecond})}}}})
			if err != nil {
				return err
			}
			if i == 10 {
				held = id
			} else {
				good = append(good, id)
			}
		}
		return nil
	}))
	hold, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(ctx) }()
	_, err = hold.Exec(ctx, `SELECT id FROM engine_run WHERE id = $1 FOR UPDATE`, held)
	require.NoError(t, err)
	for _, id := range append(slow, good...) {
		// Well below the group's own timeout (a minute), which a group
		// waiting for the held run would need to give up.
		rep := waitRun(t, b.pool, b.engine, id, 20*time.Second)
		require.Equal(t, engine.StateCompleted, rep.State, "run %d", id)
	}
	rep, err := b.engine.Run(ctx, b.pool, held)
	require.NoError(t, err)
	require.Equal(t, engine.StateRunning, rep.State, "its checkpoint waits for the lock")
	require.GreaterOrEqual(t, engine.BusyCheckpoints(b.engine), int64(1), "a group left the held run's step out")
	require.NoError(t, hold.Rollback(ctx))
	require.Equal(t, engine.StateCompleted, b.wait(t, held).State)
	require.Len(t, b.calls(t, held), 1, "its step ran once")
}

// TestLoneCheckpointOfHeldRunDoesNotStallItsCommitter: a step whose run
// another transaction holds, alone in its group, is committed apart (it
// waits for the run on a goroutine of its own), so the steps of other runs
// on the same committer are committed meanwhile.
func TestLoneCheckpointOfHeldRunDoesNotStallItsCommitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, engine.Config{})
	one := engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{step("a", testParams{Block: 300 * time.Millisecond})}}}}
	held := b.start(t, one)
	hold, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(ctx) }()
	_, err = hold.Exec(ctx, `SELECT id FROM engine_run WHERE id = $1 FOR UPDATE`, held)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return engine.BusyCheckpoints(b.engine) >= 1 }, 30*time.Second, 10*time.Millisecond,
		"the held run's step was left out by its committer")
	// Two runs: one of them shares the held run's committer.
	quick := engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{step("a", testParams{})}}}}
	for _, id := range []engine.RunID{b.start(t, quick), b.start(t, quick)} {
		rep := waitRun(t, b.pool, b.engine, id, 20*time.Second)
		require.Equal(t, engine.StateCompleted, rep.State, "run %d", id)
	}
	rep, err := b.engine.Run(ctx, b.pool, held)
	require.NoError(t, err)
	require.Equal(t, engine.StateRunning, rep.State)
	require.NoError(t, hold.Rollback(ctx))
	require.Equal(t, engine.StateCompleted, b.wait(t, held).State)
}

func TestTargetFailuresSkipLaterStepsOfTheChain(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	targets := []string{"a", "b", "c", "d", "e"}
	power := step("power", testParams{FailTargets: []string{"b", "d"}}, targets...)
	power.MaxParallel, power.Chain = 2, "rack/switches"
	other := step("other", testParams{}, "x")
	verify := step("verify", testParams{}, targets...)
	verify.MaxParallel, verify.Chain = 2, "rack/switches"
	after := step("after", testParams{}, "y")
	id := b.start(t, engine.Plan{Stages: []engine.Stage{
		{Steps: []engine.Step{power, other}}, {Steps: []engine.Step{verify}}, {Steps: []engine.Step{after}},
	}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateFailed, rep.State)
	require.Contains(t, rep.Error, "step verify failed: 2 target(s) failed in step power: b: no answer, d: no answer")

	var verified [][]string
	for _, c := range b.calls(t, id) {
		require.NotEqual(t, "after", c.Step, "nothing runs after the failed stage")
		if c.Step == "verify" {
			verified = append(verified, c.Targets)
		}
	}
	require.Equal(t, [][]string{{"a"}, {"c"}, {"e"}}, verified, "the chain goes on without the failed targets")

	p := rep.Stages[0].Steps[0]
	require.Equal(t, engine.StateCompleted, p.State, "not the chain's end: the step completes")
	require.Equal(t, map[string]string{"b": "no answer", "d": "no answer"}, p.FailedTargets)
	v := rep.Stages[1].Steps[0]
	require.Equal(t, engine.StateFailed, v.State)
	outcome := func(s engine.StepReport) map[string]engine.State {
		m := map[string]engine.State{}
		for _, o := range s.Targets {
			m[o.Target] = o.State
		}
		return m
	}
	require.Equal(t, map[string]engine.State{"a": "completed", "b": "failed", "c": "completed", "d": "failed", "e": "completed"}, outcome(p))
	require.Equal(t, map[string]engine.State{"a": "completed", "b": "skipped", "c": "completed", "d": "skipped", "e": "completed"}, outcome(v))
	require.Equal(t, engine.Progress{Completed: 3 + 1 + 3, Failed: 2}, rep.Progress)
}

func TestTargetFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	for _, tt := range []struct {
		name    string
		chain   string
		fail    []string
		wantErr string
	}{
		// Every target failed: nothing is left for the chain, the step fails at once.
		{name: "AllFailed", chain: "c", fail: []string{"a", "b"}, wantErr: "step first failed: 2 of 2 target(s) failed: a: no answer, b: no answer"},
		// Without a chain the step is its own chain's end.
		{name: "NoChain", fail: []string{"b"}, wantErr: "step first failed: 1 of 2 target(s) failed: b: no answer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			first := step("first", testParams{FailTargets: tt.fail}, "a", "b")
			first.MaxParallel, first.Chain = 1, tt.chain
			second := step("second", testParams{}, "a", "b")
			second.Chain = tt.chain
			id := b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{first}}, {Steps: []engine.Step{second}}}})
			rep := b.wait(t, id)
			require.Equal(t, engine.StateFailed, rep.State)
			require.Contains(t, rep.Error, tt.wantErr)
			calls := b.calls(t, id)
			require.Len(t, calls, 2, "both batches of the first step are called")
			for _, c := range calls {
				require.Equal(t, "first", c.Step)
			}
		})
	}
}

// TestTimeoutsLongerThanTheRescueWindow: the rescue window no longer bounds
// call timeouts (leases rescue a dead process's steps), so a step whose
// call may take longer than the window starts and runs.
func TestTimeoutsLongerThanTheRescueWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{RescueStuckJobsAfter: time.Minute})
	st := step("long", testParams{Block: 10 * time.Millisecond})
	st.Timeout = 2 * time.Hour
	require.NoError(t, engine.CheckStep(st))
	rep := b.wait(t, b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{st}}}}))
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)

	// What can never run is refused by CheckStep as by Start.
	bad := st
	bad.Retry = engine.RetryPolicy{MaxAttempts: 1 << 40}
	require.ErrorIs(t, engine.CheckStep(bad), engine.ErrInvalidTimeout)
	bad = st
	bad.Retry = engine.RetryPolicy{BackoffCoefficient: 0.5}
	require.ErrorIs(t, engine.CheckStep(bad), engine.ErrInvalidRetry)
}
