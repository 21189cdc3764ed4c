package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine/internal/dbsqlc"
)

// RunStepArgs is the River job that works one step, from its first call to
// its checkpoint. It holds the step's ID only.
type RunStepArgs struct {
	StepID StepID `json:"step_id"`
}

// Kind returns "engine.run_step".
func (RunStepArgs) Kind() string { return "engine.run_step" }

// InsertOpts puts the job on the engine queue.
func (RunStepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueName, MaxAttempts: maxJobAttempts}
}

// RunTimeoutArgs is the River job, scheduled at a run's timeout, that fails
// the run if it is still going. It holds the run's ID only.
type RunTimeoutArgs struct {
	RunID RunID `json:"run_id"`
}

// Kind returns "engine.run_timeout".
func (RunTimeoutArgs) Kind() string { return "engine.run_timeout" }

// InsertOpts puts the job on the engine queue.
func (RunTimeoutArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueName, MaxAttempts: maxJobAttempts}
}

// Start validates plan, records the run with all its steps and enqueues the
// first stage's jobs, writing only through tx: the run exists, and starts,
// only if the caller commits. A bad plan returns a *PlanError wrapping one of
// ErrEmptyPlan, ErrEmptyStage, ErrUnknownAction, ErrInvalidParams,
// ErrInvalidMaxParallel, ErrInvalidTimeout, ErrInvalidRetry or
// ErrInvalidMetadata, and nothing is written.
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		runID, err := e.Start(ctx, tx, plan)
//		if err != nil {
//			return err
//		}
//		return tasks.SetRun(ctx, tx, taskID, runID)
//	})
func (e *Engine) Start(ctx context.Context, tx pgx.Tx, plan Plan) (RunID, error) {
	ids, err := e.StartMany(ctx, tx, []Plan{plan})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// StartMany starts plans as Start starts each, in a few statements
// whatever their number: the runs and all their steps in one, their first
// stages' jobs in one River insert and the stages' start in one more. A
// burst of submissions starts its runs together this way. It returns the
// runs' IDs in plans' order. A bad plan returns the *PlanError Start would,
// its Plan field the plan's index, and nothing is written.
func (e *Engine) StartMany(ctx context.Context, tx pgx.Tx, plans []Plan) ([]RunID, error) {
	if e.client == nil {
		return nil, ErrNoClient
	}
	var p dbsqlc.RunInsertManyParams
	specs := map[planStep]*stepSpec{}
	plans = slices.Clone(plans)
	for n := range plans {
		if plans[n].Urgent {
			labels := maps.Clone(plans[n].Labels)
			if labels == nil {
				labels = map[string]string{}
			}
			labels[LabelPriority] = PriorityUrgent
			plans[n].Labels = labels
		}
	}
	for n, plan := range plans {
		meta, err := e.compilePlan(plan, int32(n), &p, specs)
		if err != nil {
			var pe *PlanError
			if errors.As(err, &pe) {
				pe.Plan = n
			}
			return nil, err
		}
		p.Owners, p.Metadatas = append(p.Owners, plan.Owner), append(p.Metadatas, meta)
		p.StageCounts, p.OpenSteps = append(p.StageCounts, int32(len(plan.Stages))), append(p.OpenSteps, int32(len(plan.Stages[0].Steps)))
		p.TimeoutsMs = append(p.TimeoutsMs, plan.Timeout.Milliseconds())
	}
	steps, err := e.q.RunInsertMany(ctx, tx, p)
	if err != nil {
		return nil, fmt.Errorf("insert run: %w", err)
	}
	if len(steps) != len(p.Specs) {
		return nil, fmt.Errorf("insert run: %d steps written for %d planned", len(steps), len(p.Specs))
	}
	ids := make([]RunID, len(plans))
	firsts := make([]stageStart, len(plans))
	timeouts := map[RunID]time.Time{}
	for _, st := range steps {
		n := st.RunN - 1
		if n < 0 || int(n) >= len(plans) {
			return nil, fmt.Errorf("insert run: step %d of unknown run position %d", st.ID, st.RunN)
		}
		run := RunID(st.RunID)
		ids[n] = run
		first := &firsts[n]
		if first.specs == nil {
			*first = stageStart{stageRef: stageRef{run: run}, labels: plans[n].Labels, trace: plans[n].Trace, specs: map[int64]*stepSpec{}}
		}
		if st.TimeoutAt.Valid {
			timeouts[run] = st.TimeoutAt.Time
		}
		if st.StageIndex == 0 {
			first.steps = append(first.steps, st.ID)
			first.specs[st.ID] = specs[planStep{int32(n), st.StageIndex, st.StepIndex}]
		}
	}
	for i := range firsts {
		if firsts[i].specs == nil {
			return nil, fmt.Errorf("insert run: no step written for plan %d", i)
		}
		slices.Sort(firsts[i].steps)
	}
	if err := e.startStages(ctx, tx, firsts, timeouts); err != nil {
		return nil, err
	}
	return ids, nil
}

// planStep names a step of the n-th plan of a StartMany.
type planStep struct{ plan, stage, step int32 }

// compilePlan checks plan, the n-th of a StartMany, and appends its steps
// to p (specs keyed by plan, stage and step); it returns the run's
// metadata.
func (e *Engine) compilePlan(plan Plan, n int32, p *dbsqlc.RunInsertManyParams, specs map[planStep]*stepSpec) ([]byte, error) {
	if len(plan.Stages) == 0 {
		return nil, &PlanError{Stage: -1, Step: -1, Err: ErrEmptyPlan}
	}
	if plan.Timeout < 0 {
		return nil, &PlanError{Stage: -1, Step: -1, Err: fmt.Errorf("%w: negative run timeout", ErrInvalidTimeout)}
	}
	meta := []byte(plan.Metadata)
	if len(meta) == 0 {
		meta = []byte("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(meta, &obj); err != nil || obj == nil {
		return nil, &PlanError{Stage: -1, Step: -1, Err: ErrInvalidMetadata}
	}
	if len(plan.Labels) > 0 {
		obj[metaLabels], _ = json.Marshal(plan.Labels)
		meta, _ = json.Marshal(obj)
	}
	var compiled []*stepSpec
	chainEnd := map[string]*stepSpec{} // chain → its last step
	for i, stage := range plan.Stages {
		if len(stage.Steps) == 0 {
			return nil, &PlanError{Stage: i, Step: -1, Err: ErrEmptyStage}
		}
		for j, st := range stage.Steps {
			spec, budget, err := e.compileStep(stage, st)
			if err != nil {
				return nil, &PlanError{Stage: i, Step: j, Err: err}
			}
			sp := &spec
			if spec.Chain != "" {
				chainEnd[spec.Chain] = sp
			}
			compiled = append(compiled, sp)
			specs[planStep{n, int32(i), int32(j)}] = sp
			p.StepRuns = append(p.StepRuns, int64(n)+1)
			p.StageIndexes = append(p.StageIndexes, int32(i))
			p.StepIndexes = append(p.StepIndexes, int32(j))
			p.BudgetsMs = append(p.BudgetsMs, budget.Milliseconds())
		}
	}
	for _, sp := range chainEnd {
		sp.ChainEnd = true
	}
	for _, sp := range compiled {
		b, err := json.Marshal(sp)
		if err != nil {
			return nil, fmt.Errorf("marshal step: %w", err)
		}
		p.Specs = append(p.Specs, b)
	}
	return meta, nil
}

// stageRef names a stage of a run.
type stageRef struct {
	run   RunID
	stage int32
}

// stageStart is a stage to start, with its steps, its run's labels and,
// when the caller has them, the steps' specs (else they are read).
type stageStart struct {
	stageRef
	steps  []int64
	labels map[string]string
	trace  map[string]string // the W3C trace context its jobs carry, if set
	specs  map[int64]*stepSpec
	ended  string // the name of the stage that ended, for the observer
	// job, when set, is the running job of a step of the run that ended
	// here, to go on with a step of this stage (see "Chained steps");
	// startStages sets chained to that step.
	job     int64
	chained int64
}

// startStages makes stages their runs' current ones: one River job per step
// is enqueued (but for the step a stage's job goes on with: see "Chained
// steps"), then the steps become running (deadlines fixed, jobs recorded).
// timeouts, for runs' first stages, schedules each listed run's timeout job.
func (e *Engine) startStages(ctx context.Context, tx pgx.Tx, stages []stageStart, timeouts map[RunID]time.Time) error {
	if len(stages) == 0 {
		return nil
	}
	specs, err := e.stageSpecs(ctx, tx, stages)
	if err != nil {
		return err
	}
	var p dbsqlc.StageStartManyParams
	var params []river.InsertManyParams
	var handed handOn
	// newJob[k] is the position in p.IDs of the step params[k] enqueues.
	var newJob []int
	for i := range stages {
		st := &stages[i]
		p.RunIDs = append(p.RunIDs, int64(st.run))
		p.StageIndexes = append(p.StageIndexes, st.stage)
		if st.stage > 0 && len(st.steps) > 0 && specs[st.steps[0]] != nil {
			ev := StageEvent{Labels: st.labels, RunID: st.run, Stage: int(st.stage), StageName: specs[st.steps[0]].StageName, Ended: st.ended}
			db.AfterCommit(ctx, func() { e.obs.StageStarted(ctx, ev) })
		}
		st.chained = 0
		for _, id := range st.steps {
			p.IDs = append(p.IDs, id)
			spec := specs[id]
			if spec == nil {
				spec = &stepSpec{}
			}
			opts := jobOpts(st.labels, st.run, StepID(id), spec.StageName, spec.Name, spec.Action)
			p.JobIDs = append(p.JobIDs, 0)
			if st.job != 0 && st.chained == 0 && e.actions[spec.Action] != nil {
				st.chained = id
				if err := handed.add(st.job, id, len(p.IDs)-1, withTrace(opts, st.trace)); err != nil {
					return err
				}
				continue
			}
			newJob = append(newJob, len(p.IDs)-1)
			params = append(params, river.InsertManyParams{Args: RunStepArgs{StepID: StepID(id)}, InsertOpts: withTrace(opts, st.trace)})
		}
	}
	running, err := handed.exec(ctx, tx)
	if err != nil {
		return err
	}
	for k, job := range handed.jobs {
		i := handed.pos[k]
		if running[job] {
			p.JobIDs[i] = job
			continue
		}
		// Not running any more (the sweep ended it: this process's lease
		// expired): the step gets a job of its own.
		for j := range stages {
			if stages[j].job == job {
				stages[j].chained = 0
			}
		}
		newJob = append(newJob, i)
		params = append(params, river.InsertManyParams{Args: RunStepArgs{StepID: StepID(p.IDs[i])}, InsertOpts: handed.opts[k]})
	}
	stepJobs := len(params)
	for _, st := range stages {
		at, ok := timeouts[st.run]
		if !ok {
			continue
		}
		opts := withTrace(jobOpts(st.labels, st.run, 0, "", "", "run timeout"), st.trace)
		opts.ScheduledAt = at
		params = append(params, river.InsertManyParams{Args: RunTimeoutArgs{RunID: st.run}, InsertOpts: opts})
		p.TimeoutRunIds = append(p.TimeoutRunIds, int64(st.run))
	}
	var res []*rivertype.JobInsertResult
	if len(params) > 0 { // none when every stage goes on in a handed-on job
		if res, err = e.client.InsertManyTx(ctx, tx, params); err != nil {
			return fmt.Errorf("enqueue steps: %w", err)
		}
	}
	for i := range p.TimeoutRunIds {
		p.TimeoutJobIds = append(p.TimeoutJobIds, res[stepJobs+i].Job.ID)
	}
	for k, i := range newJob {
		p.JobIDs[i] = res[k].Job.ID
	}
	if err := e.q.StageStartMany(ctx, tx, p); err != nil {
		return fmt.Errorf("start stages: %w", err)
	}
	return nil
}

// handOn hands running step jobs on to steps of their runs' next stages:
// each job's args name its new step, and its metadata and tags the step's
// stage, name and action, as the job's insert would have (jobOpts).
type handOn struct {
	jobs       []int64
	pos        []int // the step's position in StageStartMany's lists
	opts       []*river.InsertOpts
	args, meta [][]byte
	tags       [][]byte
}

func (h *handOn) add(job, step int64, pos int, opts *river.InsertOpts) error {
	args, err := json.Marshal(RunStepArgs{StepID: StepID(step)})
	if err != nil {
		return err
	}
	tags, err := json.Marshal(opts.Tags)
	if err != nil {
		return err
	}
	h.jobs, h.pos, h.opts = append(h.jobs, job), append(h.pos, pos), append(h.opts, opts)
	h.args, h.meta, h.tags = append(h.args, args), append(h.meta, opts.Metadata), append(h.tags, tags)
	return nil
}

// handOnSQL updates the running jobs ($1) in place: args, metadata merged
// (River's own keys stay), tags. It returns the jobs it updated.
const handOnSQL = `
UPDATE river_job j
SET args = i.args, metadata = j.metadata || i.meta,
    tags = ARRAY(SELECT jsonb_array_elements_text(i.tags))::varchar(255)[]
FROM unnest($1::bigint[], $2::jsonb[], $3::jsonb[], $4::jsonb[]) AS i(id, args, meta, tags)
WHERE j.id = i.id AND j.state = 'running'
RETURNING j.id`

// exec hands the jobs on, and returns those that were still running.
func (h *handOn) exec(ctx context.Context, tx pgx.Tx) (map[int64]bool, error) {
	if len(h.jobs) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, handOnSQL, h.jobs, h.args, h.meta, h.tags)
	if err != nil {
		return nil, fmt.Errorf("hand step jobs on: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("hand step jobs on: %w", err)
	}
	running := make(map[int64]bool, len(ids))
	for _, id := range ids {
		running[id] = true
	}
	return running, nil
}

// stageSpecs returns the specs of the stages' steps: those the callers
// gave, and the others read through tx in one query.
func (e *Engine) stageSpecs(ctx context.Context, tx pgx.Tx, stages []stageStart) (map[int64]*stepSpec, error) {
	specs := map[int64]*stepSpec{}
	var missing []int64
	for _, st := range stages {
		for _, id := range st.steps {
			if s := st.specs[id]; s != nil {
				specs[id] = s
			} else {
				missing = append(missing, id)
			}
		}
	}
	if len(missing) == 0 {
		return specs, nil
	}
	rows, err := e.q.StepSpecMany(ctx, tx, missing)
	if err != nil {
		return nil, fmt.Errorf("read step specs: %w", err)
	}
	for _, r := range rows {
		var s stepSpec
		if err := json.Unmarshal(r.Spec, &s); err == nil {
			specs[r.ID] = &s
		}
	}
	return specs, nil
}

// Cancel terminates a running run through tx: its open steps become
// cancelled, their River jobs are cancelled (running calls see their context
// cancelled once the caller commits), the run ends terminated and the
// end-of-run hook runs in tx. Nothing is rolled back. Cancelling a run that
// has already ended is a no-op; an unknown run returns ErrRunNotFound.
func (e *Engine) Cancel(ctx context.Context, tx pgx.Tx, runID RunID) error {
	return e.CancelWithReason(ctx, tx, runID, "cancelled")
}

// CancelWithReason is Cancel with the run's error (RunSummary.Error) set to
// reason instead of "cancelled": a run pre-empted by other work says by
// what.
func (e *Engine) CancelWithReason(ctx context.Context, tx pgx.Tx, runID RunID, reason string) error {
	if e.client == nil {
		return ErrNoClient
	}
	run, err := e.q.RunLock(ctx, tx, int64(runID))
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrRunNotFound
	} else if err != nil {
		return fmt.Errorf("lock run %d: %w", runID, err)
	}
	if run.State != string(StateRunning) {
		return nil
	}
	return e.endRuns(ctx, tx, []runEnding{{runID, StateTerminated, reason}}, nil)
}

// Lock locks run runID through tx until tx ends, as Cancel and every
// checkpoint that ends the run do first: a caller that also locks its own
// rows for the run (its task) takes the run's lock first, in the order the
// end-of-run hook sees them. An unknown run returns ErrRunNotFound.
func (e *Engine) Lock(ctx context.Context, tx pgx.Tx, runID RunID) error {
	_, err := e.q.RunLock(ctx, tx, int64(runID))
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrRunNotFound
	} else if err != nil {
		return fmt.Errorf("engine: lock run %d: %w", runID, err)
	}
	return nil
}

// runEnding is how a run ends.
type runEnding struct {
	run   RunID
	state State
	msg   string
}

// endRuns ends running runs (their rows must be locked by tx, each run once):
// open steps are cancelled with their jobs (except ownJobs, which the caller
// completes), the runs get their final states and the hook runs for each,
// in the order given. Runs that had already ended are skipped.
func (e *Engine) endRuns(ctx context.Context, tx pgx.Tx, ends []runEnding, ownJobs []int64) error {
	if len(ends) == 0 {
		return nil
	}
	var p dbsqlc.RunEndManyParams
	var cancel dbsqlc.StepCancelOpenParams
	for _, end := range ends {
		p.IDs = append(p.IDs, int64(end.run))
		p.States = append(p.States, string(end.state))
		p.Errors = append(p.Errors, end.msg)
		switch end.state {
		case StateCompleted: // no open steps
		case StateTerminated:
			cancel.RunIDs = append(cancel.RunIDs, int64(end.run))
			cancel.Errors = append(cancel.Errors, "run cancelled")
		default:
			cancel.RunIDs = append(cancel.RunIDs, int64(end.run))
			cancel.Errors = append(cancel.Errors, "run "+string(end.state))
		}
	}
	rows, err := e.q.RunEndMany(ctx, tx, p)
	if err != nil {
		return fmt.Errorf("end runs: %w", err)
	}
	if err := e.releaseHolds(ctx, tx, p.IDs); err != nil {
		return err
	}
	// The runs' pending timeout jobs go with them (unless one is the job
	// ending its run), deleted in one statement: a timer with nothing left
	// to time. One that is running or locked right now is left alone; it
	// finds its run ended and completes.
	var timeouts []int64
	for _, row := range rows {
		if id := row.TimeoutJobID; id != nil && !slices.Contains(ownJobs, *id) {
			timeouts = append(timeouts, *id)
		}
	}
	for chunk := range slices.Chunk(timeouts, 10_000) {
		if _, err := e.client.JobDeleteManyTx(ctx, tx, river.NewJobDeleteManyParams().IDs(chunk...).First(len(chunk))); err != nil {
			return fmt.Errorf("delete timeout jobs: %w", err)
		}
	}
	if len(cancel.RunIDs) > 0 {
		jobs, err := e.q.StepCancelOpen(ctx, tx, cancel)
		if err != nil {
			return fmt.Errorf("cancel open steps: %w", err)
		}
		for _, id := range jobs {
			if id == nil || slices.Contains(ownJobs, *id) {
				continue
			}
			if _, err := e.client.JobCancelTx(ctx, tx, *id); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
				return fmt.Errorf("cancel job %d: %w", *id, err)
			}
		}
	}
	byID := make(map[int64]dbsqlc.RunEndManyRow, len(rows))
	for _, row := range rows {
		byID[row.ID] = row
	}
	sums := make([]RunSummary, 0, len(ends))
	for _, end := range ends {
		row, ok := byID[int64(end.run)]
		if !ok {
			continue // had already ended
		}
		sum := RunSummary{
			ID:        end.run,
			Owner:     row.Owner,
			Metadata:  row.Metadata,
			Labels:    runLabels(row.Metadata),
			State:     State(row.State),
			Error:     row.Error,
			CreatedAt: row.CreatedAt.Time,
			EndedAt:   row.EndedAt.Time,
		}
		db.AfterCommit(ctx, func() { e.obs.RunEnded(ctx, sum) })
		sums = append(sums, sum)
	}
	if e.cfg.OnRunEnd == nil || len(sums) == 0 {
		return nil
	}
	if err := e.cfg.OnRunEnd(ctx, tx, sums); err != nil {
		return fmt.Errorf("end-of-run hook for %d runs: %w", len(sums), err)
	}
	return nil
}

// RunReport is a run as Run reads it: state, error, timings, and each stage
// with its steps, their cursor, attempts, errors, progress and per-target
// outcomes.
type RunReport struct {
	ID        RunID
	Owner     string
	Metadata  json.RawMessage
	State     State
	Error     string
	Stage     int // index of the current (or last) stage
	CreatedAt time.Time
	EndedAt   *time.Time
	TimeoutAt *time.Time
	Stages    []StageReport
	// Progress sums the targets of all steps: finished batches count as
	// completed, a failed batch as failed.
	Progress Progress
}

// StageReport is one stage of a RunReport. Its state is derived from its
// steps: pending, running, completed, failed or cancelled.
type StageReport struct {
	Index   int
	Name    string
	WaitAll bool
	State   State
	Steps   []StepReport
}

// StepReport is one step of a RunReport.
type StepReport struct {
	ID          StepID
	Name        string
	Action      string
	State       State
	Error       string // why the step failed or was cancelled
	LastError   string // the last failed call of the current batch
	Batch       int    // current batch (0-based); = Batches once all are done
	Batches     int
	Attempt     int // failed calls of the current batch
	MaxAttempts int // calls per batch the retry policy allows
	Polls       int // PollAfter answers so far
	MaxParallel int
	Progress    *Progress // as last reported by the action in this batch
	// FailedTargets are the targets the step's calls failed for good while
	// the rest of their batch went on (Result.Failed), with why.
	FailedTargets map[string]string
	// Chain is the step's Step.Chain.
	Chain      string
	Targets    []TargetOutcome
	StartedAt  *time.Time
	EndedAt    *time.Time
	DeadlineAt *time.Time
	WakeAt     *time.Time // end of a Sleep in progress
	// UnknownOutcomes are the calls of the step whose outcome was never
	// recorded: the call may or may not have reached the backend, and its
	// batch was called again (Call.OutcomeUnknown). Empty in the normal
	// case, a database blip included (the outcome is kept and recorded once
	// the database is back).
	UnknownOutcomes []UnknownOutcome
}

// UnknownOutcome is a call whose outcome was never recorded, found by the
// execution or sweep that took its step over.
type UnknownOutcome struct {
	Batch     int       `json:"batch"`   // 0-based batch of the call
	Attempt   int       `json:"attempt"` // its 1-based attempt
	Targets   []string  `json:"-"`       // the batch's targets
	BeganAt   time.Time `json:"began_at"`
	ProcessID int64     `json:"process_id,omitempty"` // the engine_process lease it ran under
	FoundAt   time.Time `json:"found_at"`
	Why       string    `json:"why"`
}

// TargetOutcome is the outcome of one target of a step: completed, failed
// (its own failure, or its batch's), skipped (an earlier step of the chain
// failed it), running (its batch is being called and the action has not
// reported it done) or pending; the calls its batch took, and the error if
// it failed.
type TargetOutcome struct {
	Target   string
	Batch    int
	State    State
	Attempts int
	Error    string
}

// Run reads a run and its steps through dbtx. It returns ErrRunNotFound for
// an unknown run.
func (e *Engine) Run(ctx context.Context, dbtx db.DBTX, runID RunID) (RunReport, error) {
	reps, err := e.Runs(ctx, dbtx, []RunID{runID})
	if err != nil {
		return RunReport{}, err
	}
	rep, ok := reps[runID]
	if !ok {
		return RunReport{}, ErrRunNotFound
	}
	return rep, nil
}

// Runs reads runs and their steps through dbtx in two statements, whatever
// their number: the reports of the runs found, by ID (an unknown ID is left
// out).
func (e *Engine) Runs(ctx context.Context, dbtx db.DBTX, ids []RunID) (map[RunID]RunReport, error) {
	if len(ids) == 0 {
		return map[RunID]RunReport{}, nil
	}
	raw := make([]int64, len(ids))
	for i, id := range ids {
		raw[i] = int64(id)
	}
	runs, err := e.q.RunGetByIDs(ctx, dbtx, raw)
	if err != nil {
		return nil, fmt.Errorf("get runs: %w", err)
	}
	steps, err := e.q.StepListByRuns(ctx, dbtx, raw)
	if err != nil {
		return nil, fmt.Errorf("list steps of runs: %w", err)
	}
	byRun := make(map[int64][]dbsqlc.StepListByRunsRow, len(runs))
	for _, s := range steps {
		byRun[s.RunID] = append(byRun[s.RunID], s)
	}
	reps := make(map[RunID]RunReport, len(runs))
	for _, r := range runs {
		rep, err := runReport(r, byRun[r.ID])
		if err != nil {
			return nil, err
		}
		reps[RunID(r.ID)] = rep
	}
	return reps, nil
}

// runReport builds run r's report from its steps, in stage and step order.
func runReport(r dbsqlc.RunGetByIDsRow, steps []dbsqlc.StepListByRunsRow) (RunReport, error) {
	rep := RunReport{
		ID:        RunID(r.ID),
		Owner:     r.Owner,
		Metadata:  r.Metadata,
		State:     State(r.State),
		Error:     r.Error,
		Stage:     int(r.StageIndex),
		CreatedAt: r.CreatedAt.Time,
		EndedAt:   timePtr(r.EndedAt),
		TimeoutAt: timePtr(r.TimeoutAt),
	}
	chainFailed := map[string]map[string]bool{} // chain → targets failed by steps of earlier stages
	var stageFailed map[string]map[string]bool  // the same, from steps of the current stage
	stageIndex := int32(-1)
	for _, s := range steps {
		var spec stepSpec
		if err := json.Unmarshal(s.Spec, &spec); err != nil {
			return RunReport{}, fmt.Errorf("decode step %d: %w", s.ID, err)
		}
		if s.StageIndex != stageIndex {
			for c, ts := range stageFailed {
				if chainFailed[c] == nil {
					chainFailed[c] = map[string]bool{}
				}
				maps.Copy(chainFailed[c], ts)
			}
			stageFailed, stageIndex = map[string]map[string]bool{}, s.StageIndex
		}
		var failedTargets map[string]string
		if !emptyJSON(s.FailedTargets) {
			if err := json.Unmarshal(s.FailedTargets, &failedTargets); err != nil {
				return RunReport{}, fmt.Errorf("decode failed targets of step %d: %w", s.ID, err)
			}
			if spec.Chain != "" {
				if stageFailed[spec.Chain] == nil {
					stageFailed[spec.Chain] = map[string]bool{}
				}
				for t := range failedTargets {
					stageFailed[spec.Chain][t] = true
				}
			}
		}
		skipped := chainFailed[spec.Chain]
		if spec.Chain == "" {
			skipped = nil
		}
		for len(rep.Stages) <= int(s.StageIndex) {
			rep.Stages = append(rep.Stages, StageReport{Index: len(rep.Stages)})
		}
		stage := &rep.Stages[s.StageIndex]
		stage.Name, stage.WaitAll = spec.StageName, spec.WaitAll
		sr := StepReport{
			ID:          StepID(s.ID),
			Name:        spec.Name,
			Action:      spec.Action,
			State:       State(s.State),
			Error:       s.Error,
			LastError:   s.LastError,
			Batch:       int(s.BatchIndex),
			Batches:     spec.batches(),
			Attempt:     int(s.Attempt),
			MaxAttempts: spec.MaxAttempts,
			Polls:       int(s.Polls),
			MaxParallel: spec.MaxParallel,
			StartedAt:   timePtr(s.StartedAt),
			EndedAt:     timePtr(s.EndedAt),
			DeadlineAt:  timePtr(s.DeadlineAt),
			WakeAt:      timePtr(s.WakeAt),
			Chain:       spec.Chain,

			FailedTargets: failedTargets,
		}
		if len(s.UnknownOutcomes) > 0 && string(s.UnknownOutcomes) != "[]" {
			if err := json.Unmarshal(s.UnknownOutcomes, &sr.UnknownOutcomes); err != nil {
				return RunReport{}, fmt.Errorf("decode unknown outcomes of step %d: %w", s.ID, err)
			}
			for i := range sr.UnknownOutcomes {
				u := &sr.UnknownOutcomes[i]
				u.Targets = spec.batch(u.Batch)
			}
		}
		var done map[string]bool
		if len(s.Progress) > 0 {
			var p Progress
			if err := json.Unmarshal(s.Progress, &p); err == nil {
				sr.Progress = &p
				done = make(map[string]bool, len(p.Done))
				for _, t := range p.Done {
					done[t] = true
				}
			}
		}
		for b := range sr.Batches {
			to := TargetOutcome{Batch: b, State: StatePending}
			switch {
			case b < int(s.BatchIndex) || sr.State == StateCompleted:
				to.State = StateCompleted
			case b == int(s.BatchIndex) && sr.State == StateFailed:
				to.State, to.Error = StateFailed, s.Error
			case b == int(s.BatchIndex) && sr.State == StateRunning:
				to.State = StateRunning
			case sr.State == StateCancelled || sr.State == StateFailed:
				to.State = StateCancelled
			}
			switch {
			case b < len(s.BatchAttempts):
				to.Attempts = int(s.BatchAttempts[b])
			case b == int(s.BatchIndex):
				to.Attempts = int(s.Attempt)
			}
			for _, t := range spec.batch(b) {
				to := to
				to.Target = t
				switch msg, failed := failedTargets[t]; {
				case failed:
					to.State, to.Error = StateFailed, msg
				case skipped[t]:
					to.State = StateSkipped
				case b == int(s.BatchIndex) && done[t]:
					// Reported done: it stays done whatever happens to the
					// rest of its batch.
					to.State, to.Error = StateCompleted, ""
				}
				sr.Targets = append(sr.Targets, to)
				switch to.State {
				case StateCompleted:
					rep.Progress.Completed++
				case StateFailed:
					rep.Progress.Failed++
				}
			}
		}
		stage.Steps = append(stage.Steps, sr)
	}
	for i := range rep.Stages {
		rep.Stages[i].State = stageState(rep.Stages[i].Steps)
	}
	return rep, nil
}

// stageState derives a stage's state from its steps.
func stageState(steps []StepReport) State {
	var n = map[State]int{}
	for _, s := range steps {
		n[s.State]++
	}
	switch {
	case n[StateFailed] > 0:
		return StateFailed
	case n[StateRunning] > 0:
		return StateRunning
	case n[StateCompleted] == len(steps):
		return StateCompleted
	case n[StateCancelled] > 0:
		return StateCancelled
	}
	return StatePending
}

func timePtr(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}
