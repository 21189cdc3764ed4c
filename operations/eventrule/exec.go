package eventrule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule/internal/dbsqlc"
)

// Executions (spec/orchestration.md §4.6) run as River jobs, one per
// execution: the job's attempt, lock and rescue are the claim upstream
// keeps in claim_token/owner/expiry. A submit_task execution submits its
// tasks, records its outcome and completes its job in one transaction, so
// it never ends half done.

// Queue is the River queue executions run on.
const Queue = "event_rule"

// TriggerExecution is the trigger type of the tasks an execution
// submits (task.trigger_type; trigger_id is the execution's ID).
const TriggerExecution = "event_rule_execution"

// Execution retry policy (§4.6): 4 attempts; 10 s backoff doubling to at
// most 1 min between them.
const (
	ExecutionMaxAttempts = 4
	executionBackoff     = 10 * time.Second
	executionMaxBackoff  = time.Minute
	// interruptedRetry is how soon an execution cut short by a shutdown is
	// picked up again (by whichever process runs then).
	interruptedRetry = time.Second
)

// ExecutionBackoff is the wait after failed attempt n (1-based): 10 s,
// 20 s, 40 s, then 1 min.
func ExecutionBackoff(n int) time.Duration {
	d := executionBackoff << max(n-1, 0)
	if d <= 0 || d > executionMaxBackoff {
		return executionMaxBackoff
	}
	return d
}

// ExecutionArgs is the job of one execution. It holds the ID only.
type ExecutionArgs struct {
	ExecutionID uuid.UUID `json:"execution_id"`
}

// Kind returns the job kind. It keeps the name it had when executions
// lived in operations, so jobs already queued still run.
func (ExecutionArgs) Kind() string { return "operations.event_rule_execution" }

// InsertOpts puts the job on Queue with ExecutionMaxAttempts.
func (ExecutionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: ExecutionMaxAttempts}
}

// RiverExecutionEnqueuer returns the ExecutionEnqueuer that inserts
// ExecutionArgs jobs with client through the caller's transaction.
func RiverExecutionEnqueuer(client *river.Client[pgx.Tx]) ExecutionEnqueuer {
	return func(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) error {
		params := make([]river.InsertManyParams, len(ids))
		for i, id := range ids {
			params[i] = river.InsertManyParams{Args: ExecutionArgs{ExecutionID: id}}
		}
		_, err := client.InsertManyTx(ctx, tx, params)
		return err
	}
}

// ExecutionWorker works ExecutionArgs jobs. Set Rules before the
// River client starts.
type ExecutionWorker struct {
	river.WorkerDefaults[ExecutionArgs]
	Rules *Service
}

// NextRetry applies the execution backoff.
func (w *ExecutionWorker) NextRetry(job *river.Job[ExecutionArgs]) time.Time {
	return time.Now().Add(ExecutionBackoff(job.Attempt))
}

// errPermanent marks an execution failure no retry can fix.
var errPermanent = errors.New("permanent")

// Work runs the execution once. A submission error is retried (deferred,
// attempt_failed) until the attempts are spent (failed); a broken plan
// fails at once; a shutdown mid-attempt defers it (attempt_interrupted)
// and refunds the attempt.
func (w *ExecutionWorker) Work(ctx context.Context, job *river.Job[ExecutionArgs]) error {
	s := w.Rules
	id := job.Args.ExecutionID
	// A leak response pre-empts the work on its racks in transactions of
	// its own, committed before its submission: the pre-empted runs' rows
	// stay locked for the pre-emption only, never through the submission,
	// so the engine's checkpoints of other runs never wait for it.
	lr, err := s.preemptFor(ctx, id)
	if err == nil {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.complete(ctx, tx, job, lr) })
	}
	if err == nil {
		return nil
	}
	return s.attemptFailed(ctx, job, err)
}

// complete is the execution's transaction: it locks the execution, does
// its work (a leak response's pre-emption is already done, lr), records
// the outcome and completes job.
func (s *Service) complete(ctx context.Context, tx pgx.Tx, job *river.Job[ExecutionArgs], lr *leakResponse) error {
	id := job.Args.ExecutionID
	row, err := s.q.ExecutionGetForUpdate(ctx, tx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		// Its event was purged with its rack: nothing left to do.
		_, err = river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	} else if err != nil {
		return err
	}
	switch row.Status {
	case execCompleted, execFailed, execSkipped:
		_, err = river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	}
	taskIDs, msg, err := s.execute(ctx, tx, row, lr)
	if err != nil {
		return err
	}
	if err := s.q.ExecutionUpdate(ctx, tx, dbsqlc.ExecutionUpdateParams{
		ID: id, Status: execCompleted, Attempts: int32(job.Attempt), StatusMessage: msg, TaskIds: taskIDs,
	}); err != nil {
		return err
	}
	_, err = river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
	return err
}

// attemptFailed records a failed attempt of job's execution and returns
// what River is to do with the job.
func (s *Service) attemptFailed(ctx context.Context, job *river.Job[ExecutionArgs], err error) error {
	id := job.Args.ExecutionID
	// Record the outcome even when ctx is ending, within a short bound.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	upd := dbsqlc.ExecutionUpdateParams{ID: id, Attempts: int32(job.Attempt), StatusMessage: operations.FirstLine(err.Error()), TaskIds: []uuid.UUID{}}
	var ret error
	switch {
	case ctx.Err() != nil:
		next := time.Now().Add(interruptedRetry)
		upd.Status, upd.Reason, upd.NextAttemptAt = execDeferred, strPtr(reasonAttemptInterrupted), &next
		upd.Attempts = int32(job.Attempt - 1)
		ret = river.JobSnooze(interruptedRetry)
	case errors.Is(err, errPermanent):
		upd.Status = execFailed
		ret = river.JobCancel(err)
	case job.Attempt >= job.MaxAttempts:
		upd.Status = execFailed
		ret = river.JobCancel(err)
	default:
		next := time.Now().Add(ExecutionBackoff(job.Attempt))
		upd.Status, upd.Reason, upd.NextAttemptAt = execDeferred, strPtr(reasonAttemptFailed), &next
		ret = err
	}
	if uerr := s.q.ExecutionUpdate(rctx, s.pool, upd); uerr != nil {
		s.logger.ErrorContext(ctx, "record event rule execution", "execution_id", id, "error", uerr.Error())
	}
	s.logger.WarnContext(ctx, "event rule execution attempt failed", "execution_id", id, "attempt", job.Attempt, "status", upd.Status, "error", err.Error())
	return ret
}

func strPtr(s string) *string { return &s }

// leakResponse is an execution that answers a leak (a power-off whose
// rule does not REJECT, for a leak event), as preemptFor found it: the
// leak, and per rack the tasks its pre-emption terminated and how long
// that transaction took.
type leakResponse struct {
	trigger   *operations.LeakTrigger
	reason    string
	preempted map[uuid.UUID][]uuid.UUID
	took      map[uuid.UUID]time.Duration
}

// preemptFor pre-empts, when execution id is a leak response, the work on
// each of its racks that covers the response's components
// (operations.Tasks.Preempt), each rack in a short transaction of its own
// that first locks the execution (a second job of the same execution
// waits, then finds it ended) and commits before the response is
// submitted. It returns nil for any other execution, one that has ended
// or is gone; a plan it cannot decode is left to execute to report.
//
// Committed apart from the submission, a pre-emption holds the pre-empted
// runs' rows for its own few statements only, never through the
// submission (seconds on a loaded database), during which the engine's
// checkpoints of those runs would wait. Between the two, nothing can put
// power on the covered components: their leak is open in the inventory
// before the event exists, so such a submission or promotion is refused
// (checkLeaks, leakHold). A failure after the pre-emption retries the
// execution, whose pre-emption then finds nothing left to do.
func (s *Service) preemptFor(ctx context.Context, id uuid.UUID) (*leakResponse, error) {
	var lr *leakResponse
	var racks []rackTargets
	for i := 0; i == 0 || i < len(racks); i++ {
		began := time.Now()
		stop := false
		var got []uuid.UUID
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			row, err := s.q.ExecutionGetForUpdate(ctx, tx, id)
			if errors.Is(err, pgx.ErrNoRows) {
				stop = true
				return nil
			} else if err != nil {
				return err
			}
			switch row.Status {
			case execCompleted, execFailed, execSkipped:
				stop = true
				return nil
			}
			if i == 0 {
				if lr, racks, err = s.leakOf(ctx, tx, row); err != nil || lr == nil || len(racks) == 0 {
					stop = true
					return err
				}
			}
			r := racks[i]
			if got, err = s.tasks.Preempt(ctx, tx, r.RackID, r.ComponentIDs, lr.reason); err != nil {
				return fmt.Errorf("pre-empt the work on rack %s: %w", r.RackID, err)
			}
			return nil
		})
		if err != nil {
			return nil, err
		} else if stop {
			return lr, nil
		}
		lr.preempted[racks[i].RackID], lr.took[racks[i].RackID] = got, time.Since(began)
	}
	return lr, nil
}

// leakOf returns execution row as a leak response with its racks, nil if
// it is none: a leak's power-off (FORCE_POWER_OFF or POWER_OFF) whose rule
// did not choose REJECT (fail and retry while the rack is busy: that
// author's quieter behaviour stays). A plan it cannot decode is none here
// (execute reports it).
func (s *Service) leakOf(ctx context.Context, tx pgx.Tx, row dbsqlc.EventActionExecution) (*leakResponse, []rackTargets, error) {
	var p executionPlan
	if ActionType(row.ActionType) != ActionSubmitTask || json.Unmarshal(row.Plan, &p) != nil || p.Version != executionPlanVersion || p.Operation == nil {
		return nil, nil, nil
	}
	op := p.Operation
	if op.Type != operations.OperationTypePowerControl || (op.Code != operations.CodeForcePowerOff && op.Code != operations.CodePowerOff) || p.ConflictStrategy == ConflictReject {
		return nil, nil, nil
	}
	ev, err := s.q.EventGetByID(ctx, tx, row.EventID)
	if err != nil {
		return nil, nil, fmt.Errorf("read event %s: %w", row.EventID, err)
	}
	if ev.EventType != EventTypeLeakDetected {
		return nil, nil, nil
	}
	return &leakResponse{
		trigger:   &operations.LeakTrigger{EventID: ev.ID.String(), ObservedAt: ev.ObservedAt.UnixNano()},
		reason:    fmt.Sprintf("Terminated: pre-empted by the leak response to event %s (%s)", ev.ID, ev.Summary),
		preempted: map[uuid.UUID][]uuid.UUID{}, took: map[uuid.UUID]time.Duration{},
	}, p.Racks, nil
}

// execute does the execution's work in tx and returns the tasks it
// submitted and a status message. lr is the leak response the execution
// is (preemptFor pre-empted its racks' work), nil if it is none.
func (s *Service) execute(ctx context.Context, tx pgx.Tx, row dbsqlc.EventActionExecution, lr *leakResponse) ([]uuid.UUID, string, error) {
	var p executionPlan
	if err := json.Unmarshal(row.Plan, &p); err != nil {
		return nil, "", fmt.Errorf("%w: decode plan: %v", errPermanent, err)
	}
	if p.Version != executionPlanVersion {
		return nil, "", fmt.Errorf("%w: plan version %d is not %d", errPermanent, p.Version, executionPlanVersion)
	}
	switch ActionType(row.ActionType) {
	case ActionNoop:
		return []uuid.UUID{}, "", nil
	case ActionSendAlert:
		if s.alert == nil || p.Alert == nil {
			return nil, "", fmt.Errorf("%w: no alert sender is configured", errPermanent)
		}
		ev, err := s.q.EventGetByID(ctx, tx, row.EventID)
		if err != nil {
			return nil, "", fmt.Errorf("read event %s: %w", row.EventID, err)
		}
		a := Alert{ExecutionID: row.ID, EventID: ev.ID, EventType: ev.EventType, SourceKey: ev.SourceKey, Summary: ev.Summary,
			RackID: ev.RackID, ResourceKind: ev.ResourceKind, ResourceID: ev.ResourceID, RuleID: ev.AppliedRuleID,
			ActionName: row.ActionName, Severity: p.Alert.Severity, Message: p.Alert.Message}
		if ev.ComponentType != nil {
			a.ComponentType = *ev.ComponentType
		}
		if err := s.alert(ctx, tx, a); err != nil {
			return nil, "", fmt.Errorf("send alert: %w", err)
		}
		return []uuid.UUID{}, "alert sent to Alertmanager", nil
	case ActionSubmitTask:
	default:
		return nil, "", fmt.Errorf("%w: unknown action type %q", errPermanent, row.ActionType)
	}
	if p.Operation == nil || s.tasks == nil {
		return nil, "", fmt.Errorf("%w: no operation or no task manager", errPermanent)
	}
	op := *p.Operation
	ids := []uuid.UUID{}
	for _, r := range p.Racks {
		req := operations.Request{
			Type: op.Type, Code: op.Code, Description: p.Description,
			Queue:          p.ConflictStrategy == ConflictQueue,
			RequiredRackID: r.RackID,
			IdempotencyKey: fmt.Sprintf("event-rule-execution:%s:rack:%s", row.ID, r.RackID),
			TriggerType:    TriggerExecution, TriggerID: row.ID.String(),
			SubmittedBy: p.SubmittedBy,
			Payload:     operations.Payload{OverrideReadinessCheck: op.OverrideReadinessCheck},
		}
		for _, c := range r.ComponentIDs {
			req.Targets.Components = append(req.Targets.Components, inventory.ComponentRef{ID: c})
		}
		switch op.Type {
		case operations.OperationTypePowerControl:
			req.Payload.Operation = operations.PayloadOperation(op.Type, op.Code)
			req.Payload.Forced = op.Code == operations.CodeForcePowerOff || op.Code == operations.CodeForcePowerOn || op.Code == operations.CodeForceRestart
		case operations.OperationTypeFirmwareControl:
			req.Payload.Operation = operations.PayloadOperation(op.Type, op.Code)
			req.Payload.SubTargets, req.Payload.StartTime, req.Payload.EndTime = op.SubTargets, op.StartTime, op.EndTime
			req.Payload.OverrideVersionCheck = op.OverrideVersionCheck
			if op.TargetVersion != nil {
				req.Payload.TargetVersion = *op.TargetVersion
			}
		}
		if lr != nil {
			// A leak response waits behind nothing (its pre-emption is
			// done) and skips the readiness gate.
			req.Preempt, req.Payload.Leak, req.Payload.OverrideReadinessCheck = true, lr.trigger, true
		}
		submitAt := time.Now()
		got, err := s.tasks.Submit(ctx, tx, req)
		if err != nil {
			return nil, "", fmt.Errorf("submit task on rack %s: %w", r.RackID, err)
		}
		ids = append(ids, got...)
		if lr != nil {
			// How long the response spent pre-empting (its own
			// transactions, committed) and submitting (docs/bench.md
			// "Where a leak's response time goes"); the submission's
			// commit follows.
			s.logger.InfoContext(ctx, "leak response submitted", "execution_id", row.ID, "rack_id", r.RackID, "task_ids", got,
				"preempted", len(lr.preempted[r.RackID]), "preempt_ms", lr.took[r.RackID].Milliseconds(), "submit_ms", time.Since(submitAt).Milliseconds())
		}
	}
	return ids, fmt.Sprintf("%d task(s) submitted", len(ids)), nil
}

// StaleExecutionAge is how long past due an execution must be before
// RescueStale runs it again: well above a healthy execution's milliseconds,
// far below River's rescue window (FLOW_ENGINE_RESCUE_AFTER, 30 min), which
// a leak's power-off must not wait for.
const StaleExecutionAge = 30 * time.Second

// RescueStale inserts a fresh job for each execution (at most limit) still
// pending StaleExecutionAge after it was planned, or deferred that long
// past its retry time: its job died with a killed process, and River would
// rescue it only after its rescue window. A duplicate job is harmless: the
// execution's row lock and status, and the tasks' idempotency keys, make a
// second run a no-op. A rescued execution gets a fresh attempt budget. It
// returns how many it rescued.
func (s *Service) RescueStale(ctx context.Context, limit int) (int, error) {
	var ids []uuid.UUID
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		ids, err = s.q.ExecutionStale(ctx, tx, dbsqlc.ExecutionStaleParams{
			Age: pgtype.Interval{Microseconds: StaleExecutionAge.Microseconds(), Valid: true}, RowLimit: int32(limit),
		})
		if err != nil || len(ids) == 0 {
			return err
		}
		if s.enqueue == nil {
			return errors.New("event rules: no execution enqueuer configured")
		}
		if err := s.enqueue(ctx, tx, ids); err != nil {
			return err
		}
		return s.q.ExecutionRequeue(ctx, tx, ids)
	})
	if err != nil {
		return 0, fmt.Errorf("rescue executions: %w", err)
	}
	if len(ids) > 0 {
		s.logger.WarnContext(ctx, "event rule executions rescued", "count", len(ids))
	}
	return len(ids), nil
}
