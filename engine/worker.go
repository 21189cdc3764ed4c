package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine/internal/dbsqlc"
)

// stepWorker works RunStepArgs jobs: one call per batch, the cursor saved
// after each batch, the outcome checkpointed with the successors.
type stepWorker struct {
	river.WorkerDefaults[RunStepArgs]
	e *Engine
}

func (w *stepWorker) Work(ctx context.Context, job *river.Job[RunStepArgs]) error {
	defer w.e.working.begin(job.ID)() // not an orphan (orphan.go)
	co, _ := w.e.obs.(ChainObserver)
	stepCtx, end := ctx, func() {}
	for {
		err := w.e.workStep(stepCtx, job)
		end()
		var c *chainedStep
		if !errors.As(err, &c) {
			return err
		}
		// Handed on to a step of the next stage: go on with it, as the
		// job the checkpoint made it (args and metadata already say so).
		row := *job.JobRow
		row.CreatedAt = time.Now() // the step's start, for its duration
		job = &river.Job[RunStepArgs]{JobRow: &row, Args: RunStepArgs{StepID: c.step}}
		if co != nil {
			stepCtx, end = co.StepHandedOn(ctx, c.run, c.step)
		}
	}
}

// missingStepAttempts is how many attempts of a step job find its step
// missing before the job ends as the step's: the retries (1, 2, 4, 8 s
// apart) outlast a thawed old primary's demotion, and a step deleted with
// its rack (purge) ends its job after them.
const missingStepAttempts = 5

// stepMissing reports whether step id does not exist at all (false when
// the read fails: the caller then keeps its earlier reading).
func (e *Engine) stepMissing(ctx context.Context, id StepID) bool {
	ctx, cancel := bounded(ctx)
	defer cancel()
	var exists bool
	err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM engine_step WHERE id = $1)`, int64(id)).Scan(&exists)
	return err == nil && !exists
}

// Timeout is negative: River never times out nor rescues a step job. The
// engine bounds every call itself, and a dead process's steps are
// rescheduled through its lease (a hung one's after the rescue window).
func (w *stepWorker) Timeout(*river.Job[RunStepArgs]) time.Duration { return -1 }

// timeoutWorker fails a run still going at its timeout.
type timeoutWorker struct {
	river.WorkerDefaults[RunTimeoutArgs]
	e *Engine
}

func (w *timeoutWorker) Work(ctx context.Context, job *river.Job[RunTimeoutArgs]) error {
	var snooze time.Duration
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	ctx, hooks := db.WithCommitHooks(ctx)
	defer func() { hooks.Run() }()
	err := pgx.BeginFunc(ctx, w.e.pool, func(tx pgx.Tx) error {
		run, err := w.e.q.RunLock(ctx, tx, int64(job.Args.RunID))
		if errors.Is(err, pgx.ErrNoRows) {
			return completeJobs(ctx, tx, []int64{job.ID})
		} else if err != nil {
			return err
		}
		running := run.State == string(StateRunning) && run.TimeoutAt.Valid
		if left := run.TimeoutAt.Time.Sub(run.Now.Time); running && left > 0 {
			snooze = left // woken early (clock skew): wait for the stored deadline
			return nil
		}
		return w.e.endTimedOut(ctx, tx, job.Args.RunID, running, job.ID)
	})
	if err != nil {
		hooks = nil // rolled back: nothing to tell
		return err
	}
	if snooze > 0 {
		return river.JobSnooze(snooze)
	}
	return nil
}

// workStep runs the step of job from its cursor, as one execution (one
// token) over its batches until it snoozes, ends, or the process stops.
func (e *Engine) workStep(ctx context.Context, job *river.Job[RunStepArgs]) error {
	if e.lease.started.Load() && !e.lease.ok.Load() {
		// Fenced: this process's lease is not current, its claims would
		// be swept. River retries the job (here or elsewhere).
		return ErrLeaseLost
	}
	var token int64
	for {
		row, err := e.loadStep(ctx, job.Args.StepID, job.ID, token)
		if errors.Is(err, pgx.ErrNoRows) {
			if token == 0 && job.Attempt < missingStepAttempts && e.stepMissing(ctx, job.Args.StepID) {
				// A job exists only for a step committed with it, so a
				// step not there at all is a read from a server that has
				// not seen it: an old primary thawed after a failover,
				// until Patroni demotes it (issue 46). River retries the
				// job, on a connection to the new primary by then.
				return fmt.Errorf("step %d not found: read from a server that has not seen it (an old primary after a failover?); retried", job.Args.StepID)
			}
			// Deleted, ended, rescheduled as another job, or superseded.
			return nil
		} else if err != nil {
			return fmt.Errorf("load step %d: %w", job.Args.StepID, err)
		}
		token = row.ExecToken
		if row.RunState != string(StateRunning) || row.State != string(StateRunning) {
			return nil // ended elsewhere (cancelled, a sibling failed, a duplicate run)
		}
		var spec stepSpec
		if err := json.Unmarshal(row.Spec, &spec); err != nil {
			return e.finishStep(ctx, job, row, &spec, StateFailed, fmt.Sprintf("decode step: %v", err), nil, nil)
		}
		now := row.Now.Time
		if row.TimeoutAt.Valid && !now.Before(row.TimeoutAt.Time) {
			return e.failRunTimeout(ctx, job, RunID(row.RunID))
		}
		if row.WakeAt.Valid && now.Before(row.WakeAt.Time) {
			e.unclaim(ctx, row)
			return river.JobSnooze(row.WakeAt.Time.Sub(now)) // re-run during a sleep
		}
		if len(spec.Holds) > 0 {
			// Resources first: time waiting for them is not the step's.
			why, extended, err := e.admit(ctx, row, &spec)
			if err != nil {
				e.unclaim(ctx, row)
				return fmt.Errorf("admit step %d: %w", row.ID, err)
			}
			if why != "" {
				return e.waitForHolds(ctx, row, why)
			}
			if extended {
				continue // the deadline moved: read the step again
			}
		}
		fails, err := decodeFailures(row)
		if err != nil {
			return e.finishStep(ctx, job, row, &spec, StateFailed, err.Error(), nil, nil)
		}
		batches := spec.batches()
		batch := int(row.BatchIndex)
		if batch >= batches {
			return e.endStep(ctx, job, row, &spec, fails, nil, nil)
		}
		if !now.Before(row.DeadlineAt.Time) {
			return e.finishStep(ctx, job, row, &spec, StateFailed, fmt.Sprintf("step deadline exceeded (batch %d of %d)", batch+1, batches), &row.Attempt, nil)
		}

		if e.lease.stopping.Load() {
			e.unclaim(ctx, row)
			return river.JobSnooze(0) // fetched as the process stops: leave it to another
		}
		var res Result
		targets := fails.callable(spec.batch(batch))
		// A batch whose every target an earlier step of the chain failed
		// has nothing to call.
		if len(targets) > 0 || len(spec.Targets) == 0 {
			var callErr, stop error
			res, callErr, stop = e.call(ctx, job, row, &spec, batch, targets)
			if errors.Is(stop, ErrSuperseded) {
				return nil // rescheduled elsewhere; its orphaned job was ended
			} else if stop != nil {
				return stop
			}
			if callErr != nil {
				return e.callFailed(ctx, job, row, &spec, batch, callErr)
			}
		}
		if res.PollAfter > 0 {
			var n int64
			if _, err := e.keepOutcome(ctx, row, "poll", func(ctx context.Context) (err error) {
				n, err = e.q.StepRecordPoll(ctx, e.pool, dbsqlc.StepRecordPollParams{ID: row.ID, ExecToken: row.ExecToken})
				return err
			}); err != nil {
				return fmt.Errorf("record poll: %w", err)
			} else if n == 0 {
				return nil // ended or superseded meanwhile
			}
			return river.JobSnooze(res.PollAfter)
		}
		failed := batchFailures(res.Failed, targets)
		if batch+1 == batches && res.Sleep <= 0 {
			calls := row.Attempt + 1
			return e.endStep(ctx, job, row, &spec, fails, failed, &calls)
		}
		var wake pgtype.Timestamptz
		if res.Sleep > 0 {
			wake = pgtype.Timestamptz{Time: time.Now().Add(res.Sleep), Valid: true}
		}
		var n int64
		retried, err := e.keepOutcome(ctx, row, "batch advance", func(ctx context.Context) (err error) {
			n, err = e.q.StepAdvanceBatch(ctx, e.pool, dbsqlc.StepAdvanceBatchParams{ID: row.ID, BatchIndex: row.BatchIndex, WakeAt: wake, FailedTargets: failuresJSON(failed), ExecToken: row.ExecToken})
			return err
		})
		if err != nil {
			return fmt.Errorf("advance batch: %w", err)
		} else if n == 0 && retried {
			// An earlier attempt may have committed before its answer was
			// lost: go on from the step as stored, if this execution
			// still holds it (loadStep answers no rows otherwise).
			continue
		} else if n == 0 {
			return nil // ended or advanced elsewhere
		}
		if res.Sleep > 0 {
			return river.JobSnooze(res.Sleep)
		}
		if e.lease.stopping.Load() {
			// Stopping: the next batch goes back to the queue, for
			// another process.
			return river.JobSnooze(0)
		}
	}
}

// call runs the action on one batch. stop is non-nil when the job must
// return it as is (the run ended, the process is stopping).
func (e *Engine) call(ctx context.Context, job *river.Job[RunStepArgs], row stepRow, spec *stepSpec, batch int, targets []string) (res Result, callErr, stop error) {
	a, ok := e.actions[spec.Action]
	if !ok {
		// Registered when started, unknown to this process: a deploy without
		// the action. Leave the job to a process that knows it.
		e.unclaim(ctx, row)
		return Result{}, nil, fmt.Errorf("action %q is not registered in this process", spec.Action)
	}
	deadline := row.DeadlineAt.Time
	if row.TimeoutAt.Valid && row.TimeoutAt.Time.Before(deadline) {
		deadline = row.TimeoutAt.Time
	}
	// Durations from the database clock, deadlines on the local one.
	localDeadline := time.Now().Add(deadline.Sub(row.Now.Time))
	callDeadline := min(spec.timeout(), deadline.Sub(row.Now.Time))

	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	callCtx, cancelTimeout := context.WithTimeout(callCtx, callDeadline)
	defer cancelTimeout()

	defer e.watches.watch(RunID(row.RunID), row.ID, row.ExecToken, cancel)()

	st := &callState{
		checkpoint: row.Checkpoint,
		saveCheckpoint: func(ctx context.Context, b []byte) error {
			sctx, done := bounded(ctx)
			defer done()
			n, err := e.q.StepSaveCheckpoint(sctx, e.pool, dbsqlc.StepSaveCheckpointParams{ID: row.ID, BatchIndex: row.BatchIndex, Checkpoint: b, ExecToken: row.ExecToken})
			if err != nil {
				return fmt.Errorf("save checkpoint: %w", err)
			} else if n == 0 {
				return e.refused(ctx, row, cancel)
			}
			return nil
		},
		saveProgress: func(ctx context.Context, p Progress) error {
			b, _ := json.Marshal(p)
			sctx, done := bounded(ctx)
			defer done()
			n, err := e.q.StepSaveProgress(sctx, e.pool, dbsqlc.StepSaveProgressParams{ID: row.ID, Progress: b, ExecToken: row.ExecToken})
			if err != nil {
				return fmt.Errorf("save progress: %w", err)
			} else if n == 0 {
				return e.refused(ctx, row, cancel)
			}
			return nil
		},
	}
	labels := jobLabels(job.Metadata)
	info := callInfo{
		RunID: RunID(row.RunID), StepID: StepID(row.ID), Owner: row.Owner, Labels: labels, Stage: int(row.StageIndex), Step: spec.Name,
		Targets: targets, Batch: batch, Batches: spec.batches(), Attempt: int(row.Attempt) + 1,
		MaxAttempts: spec.MaxAttempts, Deadline: localDeadline, OutcomeUnknown: row.OutcomeUnknown, st: st,
	}
	callStart := time.Now()
	res, err := e.runAction(callCtx, a, row, spec, info)
	e.obs.CallEnded(ctx, CallEvent{
		StepInfo: stepInfo(labels, row, spec), Batch: batch, Batches: spec.batches(),
		Attempt: int(row.Attempt) + 1, MaxAttempts: spec.MaxAttempts, Duration: time.Since(callStart), Err: err,
	})
	switch cause := context.Cause(callCtx); {
	case errors.Is(cause, ErrRunEnded) || errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely):
		return Result{}, nil, river.JobCancel(ErrRunEnded)
	case errors.Is(cause, ErrSuperseded):
		return Result{}, nil, ErrSuperseded
	case errors.Is(cause, ErrLeaseLost) && err == nil && ctx.Err() == nil:
		// The lease lapsed during the call, but the action answered
		// anyway: its outcome is known, and recording it (fenced by the
		// token, kept through the outage that cost the lease) is what
		// spares a second call. If another process took the step over
		// meanwhile, the token refuses the write.
	case errors.Is(cause, ErrLeaseLost) || errors.Is(cause, ErrHandedOff):
		// Stopped by this process's lease; the step is (or will be)
		// rescheduled, and River retries this job if it still can.
		return Result{}, nil, cause
	}
	if ctx.Err() != nil {
		return Result{}, nil, ctx.Err() // the process is stopping; River retries the job
	}
	if err == nil && callCtx.Err() != nil && !errors.Is(context.Cause(callCtx), ErrLeaseLost) {
		err = callCtx.Err() // an answer after the deadline does not count
	}
	if err != nil && errors.Is(callCtx.Err(), context.DeadlineExceeded) {
		if callDeadline < spec.timeout() {
			if row.TimeoutAt.Valid && !row.TimeoutAt.Time.After(row.DeadlineAt.Time) {
				return Result{}, nil, e.failRunTimeout(ctx, job, RunID(row.RunID))
			}
			return Result{}, nil, e.finishStep(ctx, job, row, spec, StateFailed,
				fmt.Sprintf("step deadline exceeded (batch %d of %d): %v", batch+1, spec.batches(), err), ptr(row.Attempt+1), nil)
		}
		err = fmt.Errorf("call timed out after %s: %w", spec.timeout(), err)
	}
	return res, err, nil
}

// runAction runs a on one batch. A panic in the action is a failed call
// (retried under the step's policy, its attempt counted), not a River
// error: River would retry the job on its own schedule, without the
// engine's attempt count, until it discarded it with the step still
// running.
func (e *Engine) runAction(ctx context.Context, a *action, row stepRow, spec *stepSpec, info callInfo) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			e.logger.ErrorContext(ctx, "action panicked", append(stepInfo(info.Labels, row, spec).LogAttrs(), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))...)
			res, err = Result{}, fmt.Errorf("action %s panicked: %v", spec.Action, v)
		}
	}()
	return a.run(ctx, spec.Params, info)
}

// refused says why a guarded write of the execution of row changed
// nothing: ErrSuperseded (and the call is cancelled) when another execution
// took the step over, else ErrStepEnded.
func (e *Engine) refused(ctx context.Context, row stepRow, cancel context.CancelCauseFunc) error {
	sctx, scancel := bounded(context.WithoutCancel(ctx))
	defer scancel()
	st, err := e.q.StepExecState(sctx, e.pool, row.ID)
	if err == nil && st.State == string(StateRunning) && st.ExecToken != row.ExecToken {
		cancel(ErrSuperseded)
		return ErrSuperseded
	}
	return ErrStepEnded
}

// callFailed records a failed call and schedules the retry, or fails the
// step when the attempts are spent or the error is permanent.
func (e *Engine) callFailed(ctx context.Context, job *river.Job[RunStepArgs], row stepRow, spec *stepSpec, batch int, callErr error) error {
	failed := int(row.Attempt) + 1
	policy := spec.retry()
	if isPermanent(callErr) || failed >= policy.MaxAttempts {
		return e.finishStep(ctx, job, row, spec, StateFailed,
			fmt.Sprintf("batch %d of %d failed after %d attempt(s): %v", batch+1, spec.batches(), failed, callErr), ptr(int32(failed)), nil)
	}
	var n int64
	_, err := e.keepOutcome(ctx, row, "failed call", func(ctx context.Context) (err error) {
		n, err = e.q.StepRecordFailure(ctx, e.pool, dbsqlc.StepRecordFailureParams{ID: row.ID, BatchIndex: row.BatchIndex, LastError: callErr.Error(), ExecToken: row.ExecToken})
		return err
	})
	if err != nil {
		return fmt.Errorf("record failure: %w", err)
	} else if n == 0 {
		return nil
	}
	wait := policy.backoff(failed)
	e.logger.WarnContext(ctx, "retry scheduled", append(stepInfo(jobLabels(job.Metadata), row, spec).LogAttrs(),
		"attempt", failed, "max_attempts", policy.MaxAttempts, "retry_in", wait, "error", callErr.Error())...)
	return river.JobSnooze(wait)
}

// failRunTimeout fails the run for its timeout, in the checkpoint tx.
func (e *Engine) failRunTimeout(ctx context.Context, job *river.Job[RunStepArgs], runID RunID) error {
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	ctx, hooks := db.WithCommitHooks(ctx)
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		run, err := e.q.RunLock(ctx, tx, int64(runID))
		if err != nil {
			return fmt.Errorf("lock run %d: %w", runID, err)
		}
		return e.endTimedOut(ctx, tx, runID, run.State == string(StateRunning), job.ID)
	})
	if err == nil {
		hooks.Run()
	}
	return err
}

// endTimedOut fails runID for its timeout when it is still running, and
// completes the job that found it out, through tx (which holds the run's
// lock).
func (e *Engine) endTimedOut(ctx context.Context, tx pgx.Tx, runID RunID, running bool, jobID int64) error {
	if running {
		if err := e.endRuns(ctx, tx, []runEnding{{runID, StateFailed, "run timed out"}}, []int64{jobID}); err != nil {
			return err
		}
	}
	return completeJobs(ctx, tx, []int64{jobID})
}

func stageError(stage int, stageName, step, msg string) string {
	if stageName != "" {
		return fmt.Sprintf("stage %d (%s) failed: step %s failed: %s", stage+1, stageName, step, msg)
	}
	return fmt.Sprintf("stage %d failed: step %s failed: %s", stage+1, step, msg)
}

func ptr[T any](v T) *T { return &v }

// unclaim closes the claim of row's execution when it returns without a
// call, so the next execution does not take a call for in flight. Best
// effort: a claim left open only makes the next execution's record
// cautious.
func (e *Engine) unclaim(ctx context.Context, row stepRow) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_ = e.q.StepUnclaim(ctx, e.pool, dbsqlc.StepUnclaimParams{ID: row.ID, ExecToken: row.ExecToken})
}
