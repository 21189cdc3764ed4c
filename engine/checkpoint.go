package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/nicoflow/flow/db"
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
	committerShards = 2
	// maxCheckpointBatch bounds the steps of one checkpoint transaction, so
	// a failure retried step by step stays cheap.
	maxCheckpointBatch = 100
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
	// failed are the targets the step's last call failed (JSON object).
	failed []byte
	// chain: the step completed, and its job may go on with a step of the
	// next stage (see "Chained steps"). next is that step once the
	// checkpoint committed, else 0.
	chain bool
	next  int64
	// ended: the checkpoint that committed ended the step (else it had
	// ended before: an earlier commit whose answer was lost, a cancel).
	ended bool
	// busy: another transaction held the step's run when its group's
	// checkpoint locked the runs, so the group left the step out; it is
	// committed alone (commitBatch).
	busy bool
	done chan error
}

// Chained steps.
//
// A step's job does not end with its step when the checkpoint starts the
// next stage of the run: the checkpoint hands the job one of that stage's
// steps instead of enqueueing a fresh job for it (the first the process can
// run), in the same transaction, and the worker goes on with it. The job's
// args and metadata name the step it now works, so River UI, a retry of the
// job, the lease sweep and a handed-back job all see the step as if its own
// job had been enqueued. What a run's stages cost in River (a job's insert,
// fetch and completion, River's completion again after ours) is paid once
// per run instead of once per step. A step's other siblings get jobs of
// their own, as before.
//
// A checkpoint finalizes, in its transaction, the jobs of the steps it
// ended and did not chain. The job of a chainable step it did not end (a
// retry of a checkpoint whose answer was lost, which may have handed the
// job on in its first commit) is left to its worker: finishStep looks up
// what the job works now (handedOn) and goes on with it, or returns and
// River completes the job.

// chainedStep is what finishStep returns when its checkpoint handed the job
// on to step: the worker goes on with it (stepWorker.Work).
type chainedStep struct {
	run  RunID
	step StepID
}

func (c *chainedStep) Error() string {
	return fmt.Sprintf("step job handed on to step %d", c.step)
}

// handedOn returns the step the running job works now, if it is not step:
// an earlier commit of a checkpoint whose answer was lost handed it on.
func (e *Engine) handedOn(ctx context.Context, job int64, step int64) (StepID, bool, error) {
	var next *int64
	ctx, cancel := bounded(ctx)
	defer cancel()
	err := e.pool.QueryRow(ctx, `SELECT (args->>'step_id')::bigint FROM river_job WHERE id = $1 AND state = 'running'`, job).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, fmt.Errorf("read the step job %d works: %w", job, err)
	}
	if next == nil || *next == step {
		return 0, false, nil
	}
	return StepID(*next), true, nil
}

// finishStep is a step's checkpoint: it records the outcome with what comes
// next and completes the job, in a transaction it may share with other
// steps' checkpoints. It waits for the commit even when ctx is cancelled: the
// outcome is decided, and a job that returned early would run again while
// its checkpoint commits. While the database is unavailable it keeps the
// outcome and commits it again (keepOutcome): a retry of a checkpoint that
// had committed changes nothing (its step has ended, its job completed).
//
// calls is how many calls the current batch took, when the step ends on a
// batch that is not yet counted (nil after a sleep or without a call).
//
// failed are the targets the last call failed (Result.Failed), recorded
// with the step.
//
// When the checkpoint handed the job on to a step of the next stage, it
// returns *chainedStep.
func (e *Engine) finishStep(ctx context.Context, job *river.Job[RunStepArgs], row stepRow, spec *stepSpec, state State, msg string, calls *int32, failed map[string]string) error {
	var req *checkpointReq
	_, err := e.keepOutcome(ctx, row, "checkpoint", func(ctx context.Context) error {
		req = &checkpointReq{ctx: ctx, job: job, row: row, spec: spec, state: state, msg: msg, calls: calls, failed: failuresJSON(failed), chain: state == StateCompleted, done: make(chan error, 1)}
		e.checkpoints.add(row.RunID, req)
		return <-req.done
	})
	if err != nil {
		return err
	}
	if req.next != 0 {
		return &chainedStep{RunID(row.RunID), StepID(req.next)}
	}
	if req.chain && !req.ended {
		next, ok, err := e.handedOn(context.WithoutCancel(ctx), job.ID, row.ID)
		if err != nil {
			return err // River retries the job, which then works what it holds
		} else if ok {
			return &chainedStep{RunID(row.RunID), next}
		}
	}
	return nil
}

// commitBatch commits reqs in one transaction and answers each. It is the
// committers' work: it waits for no run another transaction holds (a leak
// response pre-empting it, a cancel); such a step, even alone in its
// group, is committed by commitAlone on a goroutine of its own while the
// shard goes on. If the group fails (one member's hook, say), each member
// is committed alone, so one step's error never fails another.
func (e *Engine) commitBatch(reqs []*checkpointReq) {
	ctx, cancel := groupContext(reqs[0].ctx)
	defer cancel()
	err := e.checkpointObserved(ctx, reqs, false)
	if err == nil {
		var done []*checkpointReq
		for _, r := range reqs {
			if !r.busy {
				done = append(done, r)
				continue
			}
			e.stats.busy.Add(1)
			go e.commitAlone(r)
		}
		reqs = done
	}
	if err == nil || len(reqs) == 1 {
		e.counted(err, len(reqs))
		for _, r := range reqs {
			r.done <- err
		}
		return
	}
	e.stats.split.Add(1)
	e.logger.DebugContext(ctx, "checkpoint group failed, committing its steps one by one", "steps", len(reqs), "error", err.Error())
	for _, r := range reqs {
		err := e.checkpointObserved(ctx, []*checkpointReq{r}, true)
		e.counted(err, 1)
		r.done <- err
	}
}

// maxAloneCheckpoints bounds the checkpoints committed alone at once, each
// holding a connection while it waits for its run: a transaction that
// holds many runs (a bulk cancel) cannot take the pool's connections.
const maxAloneCheckpoints = 4

// commitAlone commits r's checkpoint in a transaction of its own, waiting
// for its run's lock (at most maxAloneCheckpoints at once), and answers it.
func (e *Engine) commitAlone(r *checkpointReq) {
	e.alone <- struct{}{}
	defer func() { <-e.alone }()
	ctx, cancel := groupContext(r.ctx)
	defer cancel()
	err := e.checkpointObserved(ctx, []*checkpointReq{r}, true)
	e.counted(err, 1)
	r.done <- err
}

// checkpointObserved commits reqs' checkpoint, then tells the observer:
// the transaction's size and time, and what it recorded once it committed.
// With wait it waits for runs another transaction holds, else it leaves
// their steps out (checkpointGroup).
func (e *Engine) checkpointObserved(ctx context.Context, reqs []*checkpointReq, wait bool) error {
	hctx, hooks := db.WithCommitHooks(ctx)
	began := time.Now()
	err := e.checkpointTx(hctx, reqs, wait)
	if err == nil && e.loseAnswers.Load() > 0 && e.loseAnswers.Add(-1) >= 0 {
		// Committed, but this process is not to know (tests).
		return fmt.Errorf("checkpoint commit answer lost: %w", io.ErrUnexpectedEOF)
	}
	e.obs.CheckpointCommitted(len(reqs), time.Since(began), err)
	if err == nil {
		hooks.Run()
	}
	return err
}

// checkpointStats count committed checkpoints, for tests.
type checkpointStats struct {
	steps   atomic.Int64 // steps committed
	grouped atomic.Int64 // steps committed with others
	split   atomic.Int64 // failed groups retried step by step
	busy    atomic.Int64 // steps a group left out, their run held elsewhere
	// kept counts outcomes whose first write failed with the database
	// unavailable (keepOutcome), keptCommitted those it then recorded.
	kept, keptCommitted atomic.Int64
}

func (e *Engine) counted(err error, steps int) {
	if err == nil && steps > 0 {
		e.stats.steps.Add(int64(steps))
		if steps > 1 {
			e.stats.grouped.Add(int64(steps))
		}
	}
}

// checkpointTx commits reqs' checkpoint (see checkpointGroup). A panic in
// it (a hook's, say) becomes the checkpoint's error, as River would make it
// of a panic in a worker: it runs on a committer goroutine, where nothing
// else would recover it.
func (e *Engine) checkpointTx(ctx context.Context, reqs []*checkpointReq, wait bool) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("checkpoint panicked: %v", v)
			e.logger.ErrorContext(ctx, "checkpoint panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	return e.checkpointGroup(ctx, reqs, wait)
}

// checkpointGroup is the checkpoint transaction of reqs: it locks their
// runs in ID order, records the steps' outcomes and counts them on their
// runs, ends the runs whose stage failed or whose last stage ended (with
// the hook), starts the next stage of the others whose stage ended, and
// completes all the steps' jobs. Unless wait, it locks only the runs no
// other transaction holds and leaves the others' steps out (busy): one
// run held elsewhere (a leak response pre-empting it, a cancel) never
// stalls the group's other steps, nor its committer.
//
// Locks are taken run rows first, then River jobs (these, and the siblings a
// failure cancels), the order Cancel and the timeout use.
func (e *Engine) checkpointGroup(ctx context.Context, reqs []*checkpointReq, wait bool) error {
	return pgx.BeginTxFunc(ctx, e.pool, checkpointTxOptions, func(tx pgx.Tx) error {
		for _, r := range reqs {
			r.next, r.ended, r.busy = 0, false, false // an earlier, rolled back attempt's
		}
		runIDs := make([]int64, len(reqs))
		for i, r := range reqs {
			runIDs[i] = r.row.RunID
		}
		if wait {
			if err := e.q.RunLockMany(ctx, tx, runIDs); err != nil {
				return fmt.Errorf("lock runs: %w", err)
			}
			return e.checkpointLocked(ctx, tx, reqs)
		}
		free, err := e.q.RunLockManyFree(ctx, tx, runIDs)
		if err != nil {
			return fmt.Errorf("lock runs: %w", err)
		}
		locked := make(map[int64]bool, len(free))
		for _, id := range free {
			locked[id] = true
		}
		mine := make([]*checkpointReq, 0, len(reqs))
		for _, r := range reqs {
			if r.busy = !locked[r.row.RunID]; !r.busy {
				mine = append(mine, r)
			}
		}
		if len(mine) == 0 {
			return nil
		}
		return e.checkpointLocked(ctx, tx, mine)
	})
}

// checkpointLocked is the checkpoint of reqs in tx, which holds their
// runs' locks.
func (e *Engine) checkpointLocked(ctx context.Context, tx pgx.Tx, reqs []*checkpointReq) error {
	n := len(reqs)
	jobIDs := make([]int64, n)
	p := dbsqlc.StepEndManyParams{
		IDs: make([]int64, n), RunIDs: make([]int64, n), StageIndexes: make([]int32, n),
		States: make([]string, n), Errors: make([]string, n), Failures: make([]string, n), Calls: make([]int32, n),
		Ords: make([]int32, n), FailedTargets: make([][]byte, n), Tokens: make([]int64, n),
	}
	waitAll := make(map[stageRef]bool, n)
	stageNames := make(map[stageRef]string, n)
	failures := make([]string, n) // the failed steps' errors, for their jobs
	attempts := make([]int, n)
	labels := make(map[RunID]map[string]string, n)
	jl := make([]map[string]string, n) // each step's run's labels
	for i, r := range reqs {
		jobIDs[i] = r.job.ID
		p.IDs[i], p.RunIDs[i], p.StageIndexes[i] = r.row.ID, r.row.RunID, r.row.StageIndex
		p.States[i], p.Errors[i], p.Calls[i], p.Ords[i] = string(r.state), r.msg, -1, int32(i)
		p.FailedTargets[i] = r.failed
		p.Tokens[i] = r.row.ExecToken
		if r.state == StateFailed {
			p.Failures[i] = stageError(int(r.row.StageIndex), r.spec.StageName, r.spec.Name, r.msg)
		}
		if r.calls != nil {
			p.Calls[i] = *r.calls
		}
		waitAll[stageRef{RunID(r.row.RunID), r.row.StageIndex}] = r.spec.WaitAll
		stageNames[stageRef{RunID(r.row.RunID), r.row.StageIndex}] = r.spec.StageName
		if r.state == StateFailed {
			failures[i] = r.msg
		}
		attempts[i] = r.job.Attempt
		jl[i] = jobLabels(r.job.Metadata)
		labels[RunID(r.row.RunID)] = jl[i]
	}
	runs, err := e.q.StepEndMany(ctx, tx, p)
	if err != nil {
		return fmt.Errorf("end steps: %w", err)
	}
	slices.SortFunc(runs, func(a, b dbsqlc.StepEndManyRow) int { return cmp.Compare(a.ID, b.ID) })
	ended := make(map[int64]bool, n)
	for _, run := range runs {
		for _, id := range run.EndedStepIds {
			ended[id] = true
		}
	}
	for _, r := range reqs {
		r.ended = ended[r.row.ID]
	}
	// The job of a step ended here may go on with the next stage, if
	// this process is to start calls.
	chainable := make(map[RunID]*checkpointReq)
	if !e.lease.stopping.Load() && (!e.lease.started.Load() || e.lease.ok.Load()) {
		for _, r := range reqs {
			if r.chain && r.ended && r.ctx.Err() == nil && chainable[RunID(r.row.RunID)] == nil {
				chainable[RunID(r.row.RunID)] = r
			}
		}
	}
	var ends []runEnding
	var next []stageStart
	for _, run := range runs {
		stage := stageRef{RunID(run.ID), run.StageIndex}
		switch {
		case run.FailedSteps > 0 && (run.OpenSteps == 0 || !waitAll[stage]):
			ends = append(ends, runEnding{stage.run, StateFailed, run.FirstFailure})
		case run.OpenSteps > 0:
		case run.StageIndex+1 < run.StageCount:
			st := stageStart{stageRef: stageRef{stage.run, run.StageIndex + 1}, steps: run.NextStepIDs, labels: labels[stage.run], ended: stageNames[stage]}
			if r := chainable[stage.run]; r != nil {
				st.job = r.job.ID
			}
			next = append(next, st)
		default:
			ends = append(ends, runEnding{stage.run, StateCompleted, ""})
		}
	}
	// Observed first: the steps' ends come before their runs' ends.
	e.observeCheckpoint(ctx, reqs, jl)
	if err := e.endRuns(ctx, tx, ends, jobIDs); err != nil {
		return err
	}
	if err := e.startStages(ctx, tx, next, nil); err != nil {
		return err
	}
	for _, st := range next {
		if st.chained != 0 {
			chainable[st.run].next = st.chained
		}
	}
	// Finalize the jobs of the steps ended here that were not handed
	// on, and of the steps that could not have been (see "Chained
	// steps").
	var fin []int64
	var finFailures []string
	var finAttempts []int
	for i, r := range reqs {
		if r.next != 0 || (r.chain && !r.ended) {
			continue
		}
		fin = append(fin, jobIDs[i])
		finFailures = append(finFailures, failures[i])
		finAttempts = append(finAttempts, attempts[i])
	}
	if len(fin) == 0 {
		return nil
	}
	return endJobs(ctx, tx, fin, finFailures, finAttempts)
}

// observeCheckpoint tells the observer, once the checkpoint of reqs
// commits, of the steps that ended (startStages tells of the stages that
// start).
func (e *Engine) observeCheckpoint(ctx context.Context, reqs []*checkpointReq, labels []map[string]string) {
	now := time.Now()
	for i, r := range reqs {
		ev := StepEvent{StepInfo: stepInfo(labels[i], r.row, r.spec), State: r.state, Error: r.msg}
		if r.calls != nil {
			ev.Calls = int(*r.calls)
		}
		ev.Duration = now.Sub(r.job.CreatedAt) // the job is inserted as its stage starts
		db.AfterCommit(ctx, func() { e.obs.StepEnded(ctx, ev) })
	}
}

// checkpointTxOptions begin a checkpoint transaction. Every statement in it
// reaches a few rows by key from a short list (River's completion included),
// so it runs with db.GenericPlanSettings: planning each afresh cost as much
// as running it (StepEndMany: 0.6 ms of planning per group; River's
// completion: 0.76 ms per job before groups; pg_stat_statements). The
// settings ride in BEGIN's round trip.
var checkpointTxOptions = pgx.TxOptions{BeginQuery: "BEGIN; " + db.GenericPlanSettings}

// completeJobs completes running jobs in tx (see endJobs).
func completeJobs(ctx context.Context, tx pgx.Tx, ids []int64) error {
	return endJobs(ctx, tx, ids, nil, nil)
}

// endJobs finalizes running jobs in tx with River's completion statement,
// the one JobCompleteTx runs for a single job: completed, or, where
// failures holds an error, discarded with that error recorded as the
// attempt's (so River UI shows a failed step's job as failed, with why).
// River has no public call that finalizes several jobs in a caller's
// transaction, so this goes through its driver's executor as JobCompleteTx
// does (a River upgrade that changes that interface fails to compile here,
// it cannot drift).
func endJobs(ctx context.Context, tx pgx.Tx, ids []int64, failures []string, attempts []int) error {
	return finalizeJobs(ctx, tx, ids, func(i int) (rivertype.JobState, string, int) {
		if i < len(failures) && failures[i] != "" {
			return rivertype.JobStateDiscarded, failures[i], max(attempts[i], 1)
		}
		return rivertype.JobStateCompleted, "", 0
	})
}

// finalizeJobs ends running jobs in tx in one statement: job i in the state
// end(i) gives, with its message, when not empty, recorded as that
// attempt's error (River UI shows it).
func finalizeJobs(ctx context.Context, tx pgx.Tx, ids []int64, end func(i int) (state rivertype.JobState, msg string, attempt int)) error {
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
		state, msg, attempt := end(i)
		p.FinalizedAt[i] = &now
		p.State[i] = state
		if msg != "" {
			b, err := json.Marshal(rivertype.AttemptError{At: now, Attempt: attempt, Error: msg})
			if err != nil {
				return err
			}
			p.ErrData[i] = b
		}
	}
	if _, err := riverpgxv5.New(nil).UnwrapExecutor(tx).JobSetStateIfRunningMany(ctx, p); err != nil {
		return fmt.Errorf("finalize jobs: %w", err)
	}
	return nil
}
