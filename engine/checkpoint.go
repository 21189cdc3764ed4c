package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/nicoflow/flow/engine/internal/dbsqlc"
)

// Group commit of checkpoints.
//
// A checkpoint is a short transaction whose cost is mostly fixed: BEGIN, a
// lock, River's completion statement, COMMIT. Steps that end while another
// checkpoint is committing queue up and are committed together, in one
// transaction, by the next one (see grouper): each keeps its own outcome,
// successors and hook, the stages they start are started together, and all
// their jobs complete in one River statement. Queues are sharded by run, so
// steps of one run always share a shard and concurrent checkpoint
// transactions never wait for each other's run locks.
const (
	// committerShards is how many checkpoint transactions a process runs
	// at once, each for its own share of the runs.
	committerShards = 4
	// maxCheckpointBatch bounds the steps of one checkpoint transaction, so
	// a failure retried step by step stays cheap.
	maxCheckpointBatch = 100
	// checkpointTimeout bounds a checkpoint transaction. It is detached from
	// the jobs' contexts: a stopping process still records what it finished.
	checkpointTimeout = time.Minute
)

// checkpointReq is a step's outcome waiting to be committed.
type checkpointReq struct {
	ctx   context.Context
	job   *river.Job[RunStepArgs]
	row   stepRow
	spec  *stepSpec
	state State
	msg   string
	calls *int32
	done  chan error
}

// finishStep is a step's checkpoint: it records the outcome with what comes
// next and completes the job, in a transaction it may share with other
// steps' checkpoints. It waits for the commit even when ctx is cancelled: the
// outcome is decided, and a job that returned early would run again while
// its checkpoint commits.
//
// calls is how many calls the current batch took, when the step ends on a
// batch that is not yet counted (nil after a sleep or without a call).
func (e *Engine) finishStep(ctx context.Context, job *river.Job[RunStepArgs], row stepRow, spec *stepSpec, state State, msg string, calls *int32) error {
	req := &checkpointReq{ctx: ctx, job: job, row: row, spec: spec, state: state, msg: msg, calls: calls, done: make(chan error, 1)}
	e.checkpoints.add(row.RunID, req)
	return <-req.done
}

// commitBatch commits reqs in one transaction and answers each. If the group
// fails (one member's hook, say), each member is committed alone, so one
// step's error never fails another.
func (e *Engine) commitBatch(reqs []*checkpointReq) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(reqs[0].ctx), checkpointTimeout)
	defer cancel()
	err := e.checkpointTx(ctx, reqs)
	if err == nil || len(reqs) == 1 {
		for _, r := range reqs {
			r.done <- err
		}
		return
	}
	for _, r := range reqs {
		r.done <- e.checkpointTx(ctx, []*checkpointReq{r})
	}
}

// checkpointTx is the checkpoint transaction of reqs: it locks their runs in
// ID order; for each step records its outcome and, when it was its stage's
// last open step, ends the run (with the hook) or notes the next stage to
// start; starts the noted stages; and completes all the steps' jobs.
//
// Locks are taken run rows first, then River jobs (these, and the siblings a
// failure cancels), the order Cancel and the timeout use.
func (e *Engine) checkpointTx(ctx context.Context, reqs []*checkpointReq) error {
	runIDs := make([]int64, 0, len(reqs))
	jobIDs := make([]int64, 0, len(reqs))
	for _, r := range reqs {
		runIDs = append(runIDs, r.row.RunID)
		jobIDs = append(jobIDs, r.job.ID)
	}
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if err := e.q.RunLockMany(ctx, tx, runIDs); err != nil {
			return fmt.Errorf("engine: lock runs: %w", err)
		}
		var next []stageRef
		for _, r := range reqs {
			start, err := e.checkpoint(ctx, tx, r, jobIDs)
			if err != nil {
				return err
			}
			if start {
				next = append(next, stageRef{run: RunID(r.row.RunID), stage: r.row.StageIndex + 1})
			}
		}
		if err := e.startStages(ctx, tx, next, nil); err != nil {
			return err
		}
		return completeJobs(ctx, tx, jobIDs)
	})
}

// checkpoint records one step's outcome in tx, which holds its run's lock,
// and ends the run when the step ends it. startNext reports that the step
// ended its stage and the next one must start. ownJobs are the jobs tx
// completes: ending the run does not cancel them.
func (e *Engine) checkpoint(ctx context.Context, tx pgx.Tx, r *checkpointReq, ownJobs []int64) (startNext bool, err error) {
	runID := RunID(r.row.RunID)
	failure := ""
	if r.state == StateFailed {
		failure = stageError(int(r.row.StageIndex), r.spec.StageName, r.spec.Name, r.msg)
	}
	run, err := e.q.StepEnd(ctx, tx, dbsqlc.StepEndParams{
		RunID: r.row.RunID, StageIndex: r.row.StageIndex, Failed: r.state == StateFailed, Failure: failure,
		ID: r.row.ID, State: string(r.state), Error: r.msg, Calls: r.calls,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // ended elsewhere (a duplicate execution, a cancel that won the race)
	} else if err != nil {
		return false, fmt.Errorf("engine: end step %d: %w", r.row.ID, err)
	}
	switch {
	case r.state == StateFailed && !r.spec.WaitAll:
		return false, e.endRun(ctx, tx, runID, StateFailed, failure, ownJobs)
	case run.OpenSteps > 0:
		return false, nil
	case run.FailedSteps > 0:
		return false, e.endRun(ctx, tx, runID, StateFailed, run.FirstFailure, ownJobs)
	case r.row.StageIndex+1 < run.StageCount:
		return true, nil
	}
	return false, e.endRun(ctx, tx, runID, StateCompleted, "", ownJobs)
}

// completeJobs completes running jobs in tx with River's completion
// statement, the one JobCompleteTx runs for a single job.
//
// The statement is built for batches: re-planning it for every checkpoint
// cost as much as running it (0.76 ms of each, measured with
// pg_stat_statements), so for the rest of the transaction, which ends with
// it, it runs on its generic plan (by job ID, which the generic plan serves
// from the primary key like the custom one).
func completeJobs(ctx context.Context, tx pgx.Tx, ids []int64) error {
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		return fmt.Errorf("engine: plan mode: %w", err)
	}
	n := len(ids)
	now := time.Now()
	p := &riverdriver.JobSetStateIfRunningManyParams{
		ID:              ids,
		Attempt:         make([]*int, n),
		ErrData:         make([][]byte, n),
		FinalizedAt:     make([]*time.Time, n),
		MetadataDoMerge: make([]bool, n),
		MetadataUpdates: make([][]byte, n),
		ScheduledAt:     make([]*time.Time, n),
		State:           make([]rivertype.JobState, n),
	}
	for i := range ids {
		p.FinalizedAt[i] = &now
		p.State[i] = rivertype.JobStateCompleted
	}
	if _, err := riverpgxv5.New(nil).UnwrapExecutor(tx).JobSetStateIfRunningMany(ctx, p); err != nil {
		return fmt.Errorf("engine: complete jobs: %w", err)
	}
	return nil
}
