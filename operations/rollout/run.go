package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/rollout/internal/dbsqlc"
)

// TriggerOperationRun is the trigger type of a run's child tasks; their
// trigger ID is the run's ID.
const TriggerOperationRun = "operation_run"

// runState is the mutable part of a run row during a pass.
type runState struct {
	row     dbsqlc.OperationRun
	run     Run
	changed bool
	// from is the row as locked (OnRunChange compares it at save).
	from dbsqlc.OperationRun
}

func (s *runState) set(status RunStatus, reason RunReason, msg string) {
	now := time.Now()
	if status == RunRunning && s.row.StartedAt == nil {
		s.row.StartedAt = &now
	}
	if status.Terminal() && s.row.FinishedAt == nil {
		s.row.FinishedAt = &now
	}
	s.row.Status, s.row.StatusReason, s.row.StatusMessage = string(status), string(reason), msg
	s.changed = true
}

func (s *runState) status() RunStatus { return RunStatus(s.row.Status) }

// lock reads run id under its row lock.
func (r *Service) lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*runState, error) {
	row, err := r.q.OperationRunLock(ctx, tx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrRunNotFound, id)
	} else if err != nil {
		return nil, fmt.Errorf("lock operation run %s: %w", id, err)
	}
	st := &runState{row: row, from: row}
	st.run, err = runFromRow(row)
	if err != nil {
		// A configuration that no longer decodes can never run.
		st.set(RunFailed, ReasonNone, "invalid operation run configuration: "+operations.FirstLine(err.Error()))
	}
	return st, nil
}

func (r *Service) save(ctx context.Context, tx pgx.Tx, st *runState) error {
	if err := r.q.OperationRunUpdate(ctx, tx, dbsqlc.OperationRunUpdateParams{
		ID: st.row.ID, Status: st.row.Status, StatusReason: st.row.StatusReason, StatusMessage: st.row.StatusMessage,
		CurrentPhaseIndex: st.row.CurrentPhaseIndex, WakeAt: st.row.WakeAt, StartedAt: st.row.StartedAt, FinishedAt: st.row.FinishedAt,
	}); err != nil {
		return err
	}
	return r.changed(ctx, tx, st)
}

// tick locks run id and advances it as far as it can go now: it mirrors
// finished child tasks into targets, then (while pending or running)
// finishes the run, pauses it at a gate or the conflict timeout, opens the
// next phase, or claims targets up to the concurrency limit, writing their
// child tasks through tx. The caller commits.
func (r *Service) tick(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	st, err := r.lock(ctx, tx, id)
	if err != nil {
		return err
	}
	if err := r.pass(ctx, tx, st); err != nil {
		return err
	}
	return r.save(ctx, tx, st)
}

func (r *Service) pass(ctx context.Context, tx pgx.Tx, st *runState) error {
	for range int(st.row.TotalPhases) + 3 {
		phase := st.row.CurrentPhaseIndex
		targets, err := r.q.OperationRunTargetsOfPhaseForUpdate(ctx, tx, dbsqlc.OperationRunTargetsOfPhaseForUpdateParams{OperationRunID: st.row.ID, PhaseIndex: phase})
		if err != nil {
			return fmt.Errorf("lock phase targets: %w", err)
		}
		if err := r.reconcile(ctx, tx, targets); err != nil {
			return err
		}
		s := st.status()
		if s != RunPending && s != RunRunning {
			return nil
		}
		if s == RunPending {
			st.set(RunRunning, ReasonNone, "operation run started")
		}
		if st.row.TotalPhases == 0 || len(targets) == 0 {
			st.set(RunFailed, ReasonNone, fmt.Sprintf("phase %d has no targets", phase))
			return nil
		}
		counts, err := r.q.OperationRunTargetPhaseCounts(ctx, tx, st.row.ID)
		if err != nil {
			return fmt.Errorf("count targets: %w", err)
		}
		allDone := !slices.ContainsFunc(targets, func(t dbsqlc.OperationRunTargetsOfPhaseForUpdateRow) bool {
			return !TargetStatus(t.OperationRunTarget.Status).Terminal()
		})
		if allDone && phase == st.row.TotalPhases-1 {
			st.set(outcome(counts))
			return nil
		}
		if msg, ok := r.conflictTimeout(st.run, targets); ok {
			st.set(RunPaused, ReasonConflictRetryTimeout, msg)
			return nil
		}
		if msg, ok := gateTripped(st.run.Options.Gates, counts, int(phase)); ok {
			st.set(RunPaused, ReasonSafetyGate, msg)
			return nil
		}
		if allDone {
			if !st.run.Options.AutoAdvance {
				st.set(RunPaused, ReasonPhaseGate, fmt.Sprintf("phase %d finished; advance to start phase %d", phase, phase+1))
				return nil
			}
			st.row.CurrentPhaseIndex++
			st.set(RunRunning, ReasonNone, fmt.Sprintf("advanced to phase %d", st.row.CurrentPhaseIndex))
			continue
		}
		failedNow, err := r.claim(ctx, tx, st, targets)
		if err != nil {
			return err
		}
		if !failedNow {
			return nil
		}
		// A submission failed: gates and completion may have changed.
	}
	return nil
}

// outcome is the terminal status once the final phase is done (§2.4).
func outcome(counts []dbsqlc.OperationRunTargetPhaseCountsRow) (RunStatus, RunReason, string) {
	total, bad := 0, 0
	for _, c := range counts {
		total += int(c.N)
		if s := TargetStatus(c.Status); s == TargetFailed || s == TargetTerminated {
			bad += int(c.N)
		}
	}
	switch {
	case bad == 0:
		return RunCompleted, ReasonNone, fmt.Sprintf("all %d targets finished", total)
	case bad == total:
		return RunFailed, ReasonNone, fmt.Sprintf("all %d targets failed or were terminated", total)
	}
	return RunCompletedWithFailures, ReasonNone, fmt.Sprintf("%d of %d targets failed or were terminated", bad, total)
}

// gateTripped evaluates the safety gates (§2.7) over unacknowledged
// failures; the first gate that trips wins.
func gateTripped(gates []Gate, counts []dbsqlc.OperationRunTargetPhaseCountsRow, phase int) (string, bool) {
	for i, g := range gates {
		failed, selected := 0, 0
		for _, c := range counts {
			ph := int(c.PhaseIndex)
			if ph > phase || (g.Scope != GateScopeCumulativeRun && ph != phase) {
				continue
			}
			selected += int(c.N)
			if TargetStatus(c.Status) == TargetFailed {
				failed += int(c.Unacknowledged)
			}
		}
		scope := "phase " + fmt.Sprint(phase)
		if g.Scope == GateScopeCumulativeRun {
			scope = "the run so far"
		}
		switch g.Kind {
		case GateFailureRate:
			if failed > 0 && failed*100 >= g.Threshold*selected {
				return fmt.Sprintf("safety gate %d tripped: %d of %d targets failed in %s (threshold %d%%)", i, failed, selected, scope, g.Threshold), true
			}
		case GateFailureCount:
			if failed >= g.Threshold {
				return fmt.Sprintf("safety gate %d tripped: %s failed in %s (threshold %d)", i, plural(int(failed), "target"), scope, g.Threshold), true
			}
		}
	}
	return "", false
}

func (r *Service) conflictTimeout(run Run, targets []dbsqlc.OperationRunTargetsOfPhaseForUpdateRow) (string, bool) {
	for _, t := range targets {
		if TargetStatus(t.OperationRunTarget.Status) != TargetBlocked {
			continue
		}
		var rs retryState
		_ = json.Unmarshal(t.OperationRunTarget.RetryState, &rs)
		if rs.BlockedSince != nil && time.Since(*rs.BlockedSince) >= run.Options.Conflict.RetryTimeout {
			return fmt.Sprintf("target %d (rack %s) blocked by rack conflicts for %s (retry timeout %s)",
				t.OperationRunTarget.SequenceIndex, t.OperationRunTarget.RackID, time.Since(*rs.BlockedSince).Round(time.Second), run.Options.Conflict.RetryTimeout), true
		}
	}
	return "", false
}

// reconcile mirrors finished child tasks into their targets (§2.5).
func (r *Service) reconcile(ctx context.Context, tx pgx.Tx, targets []dbsqlc.OperationRunTargetsOfPhaseForUpdateRow) error {
	for i := range targets {
		t := &targets[i].OperationRunTarget
		if TargetStatus(t.Status) != TargetSubmitted {
			continue
		}
		next, msg := TargetSubmitted, t.Message
		switch {
		case t.TaskID == nil:
			next, msg = TargetFailed, "child task was deleted"
		case operations.TaskStatus(targets[i].TaskStatus).Finished():
			next, msg = TargetStatus(targets[i].TaskStatus), targets[i].TaskMessage
		default:
			continue
		}
		t.Status, t.Message = string(next), msg
		if err := r.q.OperationRunTargetUpdate(ctx, tx, dbsqlc.OperationRunTargetUpdateParams{
			ID: t.ID, Status: t.Status, Message: msg, TaskID: t.TaskID, RetryAfter: nil, RetryState: t.RetryState,
		}); err != nil {
			return fmt.Errorf("update target: %w", err)
		}
	}
	return nil
}

// claim submits child tasks for claimable targets of the current phase, in
// sequence order, until max_concurrent_targets are active (§2.6). It
// reports whether a submission failed a target.
func (r *Service) claim(ctx context.Context, tx pgx.Tx, st *runState, targets []dbsqlc.OperationRunTargetsOfPhaseForUpdateRow) (bool, error) {
	now := r.now()
	active := 0
	for _, t := range targets {
		if TargetStatus(t.OperationRunTarget.Status) == TargetSubmitted {
			active++
		}
	}
	failedNow := false
	var windows windowHolds
	var chosen []*dbsqlc.OperationRunTarget
	for i := range targets {
		t := &targets[i].OperationRunTarget
		if active+len(chosen) >= st.run.Options.MaxConcurrent {
			break
		}
		switch TargetStatus(t.Status) {
		case TargetPending, TargetClaimed:
		case TargetBlocked:
			if t.RetryAfter != nil && t.RetryAfter.After(now) {
				continue
			}
		default:
			continue
		}
		// Outside its rack's maintenance windows (or in a freeze) a target
		// stays unclaimed: the run waits between targets (docs/change-safety.md).
		if held, err := r.held(ctx, tx, st, t.RackID, now, &windows); err != nil {
			return false, err
		} else if held {
			continue
		}
		chosen = append(chosen, t)
	}
	// Child tasks lock their racks: take them in rack order, as every
	// multi-rack submission does, so concurrent passes cannot deadlock.
	slices.SortFunc(chosen, func(a, b *dbsqlc.OperationRunTarget) int {
		return strings.Compare(a.RackID.String(), b.RackID.String())
	})
	submitted, blocked := 0, 0
	for _, t := range chosen {
		taskID, err := r.submit(ctx, tx, st.run, t)
		var rs retryState
		_ = json.Unmarshal(t.RetryState, &rs)
		p := dbsqlc.OperationRunTargetUpdateParams{ID: t.ID, RetryState: t.RetryState}
		switch {
		case err == nil:
			p.Status, p.Message, p.TaskID = string(TargetSubmitted), "child task submitted", &taskID
			submitted++
		case errors.Is(err, operations.ErrConflict):
			if rs.BlockedSince == nil {
				rs.BlockedSince = &now
			}
			rs.Attempts++
			c := st.run.Options.Conflict
			delay := c.InitialDelay << min(rs.Attempts-1, 20)
			if delay > c.MaxDelay || delay <= 0 {
				delay = c.MaxDelay
			}
			rs.LastDelay = delay.Seconds()
			at := now.Add(delay)
			p.Status, p.Message, p.RetryAfter = string(TargetBlocked), operations.FirstLine(err.Error()), &at
			p.RetryState, _ = json.Marshal(rs)
			blocked++
		case ctx.Err() != nil:
			return false, err
		default:
			if !isRequestError(err) {
				return false, err
			}
			p.Status, p.Message = string(TargetFailed), operations.FirstLine(err.Error())
			failedNow = true
		}
		if TargetStatus(p.Status) != TargetBlocked {
			rs = retryState{}
			p.RetryState = []byte("{}")
		}
		t.Status, t.RetryAfter, t.RetryState = p.Status, p.RetryAfter, p.RetryState
		if err := r.q.OperationRunTargetUpdate(ctx, tx, p); err != nil {
			return false, fmt.Errorf("update target: %w", err)
		}
	}
	waiting, pending := 0, 0
	var wake *time.Time
	for _, row := range targets {
		t := row.OperationRunTarget
		switch TargetStatus(t.Status) {
		case TargetBlocked:
			waiting++
			wake = earliest(wake, t.RetryAfter)
			var rs retryState
			_ = json.Unmarshal(t.RetryState, &rs)
			if rs.BlockedSince != nil {
				end := rs.BlockedSince.Add(st.run.Options.Conflict.RetryTimeout)
				wake = earliest(wake, &end)
			}
		case TargetPending:
			pending++
		}
	}
	msg := fmt.Sprintf("phase %d: %s in flight", st.row.CurrentPhaseIndex, plural(int(active+submitted), "target"))
	if waiting > 0 {
		msg += fmt.Sprintf("; %d targets waiting on rack conflicts", waiting)
	}
	if pending > 0 {
		msg += fmt.Sprintf("; %d pending (max %d concurrent)", pending, st.run.Options.MaxConcurrent)
	}
	msg += windows.message()
	wake = earliest(earliest(wake, windows.next), windows.retry)
	if rel, err := r.releaseMessage(ctx, tx, st.row.ID); err != nil {
		return false, err
	} else {
		msg += rel
	}
	if msg != st.row.StatusMessage {
		st.row.StatusMessage, st.changed = msg, true
	}
	if wake != nil && r.wake != nil && (st.row.WakeAt == nil || st.row.WakeAt.After(*wake) || st.row.WakeAt.Before(now)) {
		if err := r.wake(ctx, tx, st.row.ID, *wake); err != nil {
			return false, fmt.Errorf("schedule wake-up: %w", err)
		}
		st.row.WakeAt = wake
	}
	return failedNow, nil
}

func earliest(a, b *time.Time) *time.Time {
	if b == nil || (a != nil && !b.Before(*a)) {
		return a
	}
	v := *b
	return &v
}

// isRequestError reports whether a submission error is the target's own
// (it can never run as planned) rather than a fault of the pass.
func isRequestError(err error) bool {
	for _, e := range []error{operations.ErrInvalidRequest, operations.ErrNotApplicable, operations.ErrLeakOpen, operations.ErrQueueFull, operations.ErrNoEncryptionKey, operations.ErrRuleNotFound, operations.ErrRuleMismatch, operations.ErrInvalidRule,
		inventory.ErrInvalidArgument, inventory.ErrRackNotFound, inventory.ErrComponentNotFound, inventory.ErrNoRack, inventory.ErrAmbiguous} {
		if errors.Is(err, e) {
			return true
		}
	}
	var pe *engine.PlanError
	return errors.As(err, &pe)
}

// submit writes target t's child task inside a savepoint of tx, so a
// rejected submission leaves the pass's other writes intact.
func (r *Service) submit(ctx context.Context, tx pgx.Tx, run Run, t *dbsqlc.OperationRunTarget) (uuid.UUID, error) {
	var comps map[operations.ComponentType][]uuid.UUID
	if err := json.Unmarshal(t.ComponentsByType, &comps); err != nil {
		return uuid.Nil, fmt.Errorf("%w: target components: %v", operations.ErrInvalidRequest, err)
	}
	spec, err := r.childTargets(ctx, tx, t.RackID, comps)
	if err != nil {
		return uuid.Nil, err
	}
	tm := run.Template
	req := operations.Request{
		Type: operations.OperationTypeFirmwareControl, Code: operations.CodeUpgrade, Targets: spec,
		Description:    tm.Description,
		RequiredRackID: t.RackID, IdempotencyKey: "operation-run-target:" + t.ID.String(),
		TriggerType: TriggerOperationRun, TriggerID: run.ID.String(),
		SubmittedBy: run.CreatedBy,
		Payload: operations.Payload{
			Operation: operations.PayloadOperation(operations.OperationTypeFirmwareControl, operations.CodeUpgrade), SubTargets: tm.SubTargets, StartTime: tm.StartTime, EndTime: tm.EndTime,
			OverrideReadinessCheck: tm.OverrideReadinessCheck, OverrideVersionCheck: tm.OverrideVersionCheck,
		},
	}
	if req.Description == "" {
		req.Description = fmt.Sprintf("operation run %s: target %d", run.Name, t.SequenceIndex)
	}
	if tm.TargetVersion != nil {
		req.Payload.TargetVersion = *tm.TargetVersion
	}
	if tm.RuleID != nil {
		req.RuleID = *tm.RuleID
	}
	if tm.Auth != nil {
		if r.keys == nil {
			return uuid.Nil, operations.ErrNoEncryptionKey
		}
		auth, err := r.keys.Open(tm.Auth)
		if err != nil {
			return uuid.Nil, fmt.Errorf("%w: open firmware credentials: %v", operations.ErrInvalidRequest, err)
		}
		req.Auth = auth
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return uuid.Nil, err
	}
	spCtx, hooks := db.WithCommitHooks(ctx)
	ids, err := r.tasks.Submit(spCtx, sp, req)
	if err == nil && len(ids) != 1 {
		err = fmt.Errorf("%w: submission returned %d tasks, want 1", operations.ErrInvalidRequest, len(ids))
	}
	if err != nil {
		if rerr := sp.Rollback(context.WithoutCancel(ctx)); rerr != nil {
			return uuid.Nil, rerr
		}
		return uuid.Nil, err
	}
	if err := sp.Commit(ctx); err != nil {
		return uuid.Nil, err
	}
	db.AfterCommit(ctx, hooks.Run) // released: its events go with the outer transaction
	return ids[0], nil
}

// childTargets is the target spec of a child task: exactly the frozen
// components. When they are still all of the rack's components of their
// types (the usual case), the spec names the rack with those types, which
// resolves in a few queries; otherwise it names each component.
func (r *Service) childTargets(ctx context.Context, tx pgx.Tx, rackID uuid.UUID, comps map[operations.ComponentType][]uuid.UUID) (inventory.TargetSpec, error) {
	types := slices.Sorted(mapKeys(comps))
	var want []uuid.UUID
	byRack := inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{ID: rackID}}}}
	for _, ct := range types {
		want = append(want, comps[ct]...)
		byRack.Racks[0].Types = append(byRack.Racks[0].Types, inventory.ComponentType(ct))
	}
	sels, err := r.inv.ResolveTargets(ctx, tx, byRack)
	if err == nil && len(sels) == 1 {
		var got []uuid.UUID
		for _, c := range sels[0].Components {
			got = append(got, c.ID)
		}
		if sameIDs(got, want) {
			return byRack, nil
		}
	}
	var spec inventory.TargetSpec
	for _, id := range want {
		spec.Components = append(spec.Components, inventory.ComponentRef{ID: id})
	}
	return spec, nil
}

func sameIDs(a, b []uuid.UUID) bool {
	if len(a) != len(b) {
		return false
	}
	cmp := func(x, y uuid.UUID) int { return strings.Compare(x.String(), y.String()) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TasksEnded is the end-of-task hook of operation runs (register it with
// operations.Tasks.OnTaskEnd): it runs in the ended tasks' last checkpoint
// transaction. A run with one of the tasks as a child advances now, once
// however many of its children ended (the freed slots are refilled before
// the checkpoint commits); a run with targets blocked on one of the tasks'
// racks has them retry now instead of at the end of their backoff. Runs
// are taken in ID order, so two checkpoints never wait on each other's.
func (r *Service) TasksEnded(ctx context.Context, tx pgx.Tx, taskIDs []uuid.UUID) error {
	runs, err := r.q.OperationRunTargetRunByTasks(ctx, tx, taskIDs)
	if err != nil {
		return fmt.Errorf("find runs of %d tasks: %w", len(taskIDs), err)
	}
	for _, id := range runs {
		if err := r.tick(ctx, tx, id); err != nil {
			return err
		}
	}
	waiting, err := r.q.OperationRunBlockedOnTaskRacks(ctx, tx, taskIDs)
	if err != nil {
		return fmt.Errorf("find blocked targets: %w", err)
	}
	locked := map[uuid.UUID]bool{}
	for i, w := range waiting {
		id := w.OperationRunID
		if slices.Contains(runs, id) {
			continue
		}
		if !locked[id] {
			// Whoever holds the run's lock is advancing it: skip rather
			// than wait (waiting here could close a lock cycle with that
			// pass).
			if got, err := r.q.OperationRunTryLock(ctx, tx, id); err != nil {
				return err
			} else if len(got) == 0 {
				continue
			}
			locked[id] = true
		}
		if err := r.q.OperationRunTargetRetryRack(ctx, tx, dbsqlc.OperationRunTargetRetryRackParams{OperationRunID: id, RackID: w.RackID}); err != nil {
			return err
		}
		// The run advances once, after its last blocked rack (rows come
		// in run order).
		if i+1 < len(waiting) && waiting[i+1].OperationRunID == id {
			continue
		}
		if err := r.tick(ctx, tx, id); err != nil {
			return err
		}
	}
	return nil
}

// Wake advances run id in its own transaction: the job a RunWaker
// schedules, and the sweep's per-run step.
func (r *Service) Wake(ctx context.Context, id uuid.UUID) error {
	err := db.BeginFunc(ctx, r.pool, func(ctx context.Context, tx pgx.Tx) error {
		st, err := r.lock(ctx, tx, id)
		if err != nil {
			return err
		}
		if st.row.WakeAt != nil && !st.row.WakeAt.After(r.now()) {
			st.row.WakeAt = nil
		}
		if err := r.pass(ctx, tx, st); err != nil {
			return err
		}
		return r.save(ctx, tx, st)
	})
	if errors.Is(err, ErrRunNotFound) {
		return nil // deleted meanwhile
	}
	return err
}

// Sweep advances every pending or running run: the safety net behind
// event-driven advancement (run at startup and periodically by the leader).
func (r *Service) Sweep(ctx context.Context) error {
	ids, err := r.q.OperationRunActiveIDs(ctx, r.pool, 1000)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := r.Wake(ctx, id); err != nil {
			return fmt.Errorf("sweep operation run %s: %w", id, err)
		}
	}
	return nil
}

// control runs fn on run id under its lock in a new transaction, saves the
// run and returns it as it now is.
func (r *Service) control(ctx context.Context, id uuid.UUID, fn func(tx pgx.Tx, st *runState) error) (Run, error) {
	err := db.BeginFunc(ctx, r.pool, func(ctx context.Context, tx pgx.Tx) error {
		st, err := r.lock(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := fn(tx, st); err != nil {
			return err
		}
		return r.save(ctx, tx, st)
	})
	if err != nil {
		return Run{}, err
	}
	return r.Run(ctx, r.pool, id)
}

func terminalError(st *runState, verb string) error {
	return fmt.Errorf("%w: cannot %s operation run %s: it is %s", ErrRunState, verb, st.row.ID, st.row.Status)
}

// Pause pauses a pending or running run (operator_paused); a paused run is
// returned unchanged, keeping its reason. Children keep running. A terminal
// run is ErrRunState.
func (r *Service) Pause(ctx context.Context, id uuid.UUID) (Run, error) {
	return r.control(ctx, id, func(_ pgx.Tx, st *runState) error {
		switch s := st.status(); {
		case s.Terminal():
			return terminalError(st, "pause")
		case s == RunPendingApproval:
			return fmt.Errorf("%w: operation run %s awaits approval (flow approval list); cancel it to withdraw it", ErrRunState, id)
		case s == RunPaused:
			return nil
		}
		st.set(RunPaused, ReasonOperatorPaused, "paused by operator")
		return nil
	})
}

// Resume resumes a paused run whose reason is not phase_gate (that one is
// advanced instead: ErrRunState says so). Resuming acknowledges the
// failures seen so far — they no longer feed the safety gates — and
// restarts the retry-timeout clock of blocked targets, so the run does not
// pause again at once for what the operator has just seen. The run then
// advances in the same transaction.
func (r *Service) Resume(ctx context.Context, id uuid.UUID) (Run, error) {
	return r.control(ctx, id, func(tx pgx.Tx, st *runState) error {
		switch s := st.status(); {
		case s.Terminal():
			return terminalError(st, "resume")
		case s != RunPaused:
			return fmt.Errorf("%w: operation run %s is %s, not paused", ErrRunState, id, s)
		case RunReason(st.row.StatusReason) == ReasonPhaseGate:
			return fmt.Errorf("%w: operation run %s is paused at a phase gate: advance it with AdvanceOperationRunPhase", ErrRunState, id)
		}
		if _, err := r.q.OperationRunTargetAcknowledge(ctx, tx, id); err != nil {
			return err
		}
		if _, err := r.q.OperationRunTargetRestartBlocked(ctx, tx, id); err != nil {
			return err
		}
		st.set(RunRunning, ReasonNone, "operation run resumed")
		return r.pass(ctx, tx, st)
	})
}

// Advance opens the next phase of a run paused at a phase gate; expected,
// when set, must be the index of that next phase. It is ErrRunState when
// the run is not at a phase gate or has no next phase, and a *RunError for
// a wrong expected index.
func (r *Service) Advance(ctx context.Context, id uuid.UUID, expected *int) (Run, error) {
	return r.control(ctx, id, func(tx pgx.Tx, st *runState) error {
		if s := st.status(); s.Terminal() {
			return terminalError(st, "advance")
		}
		if st.status() != RunPaused || RunReason(st.row.StatusReason) != ReasonPhaseGate {
			return fmt.Errorf("%w: operation run %s is %s/%s, not paused at a phase gate", ErrRunState, id, st.row.Status, st.row.StatusReason)
		}
		next := int(st.row.CurrentPhaseIndex) + 1
		if next >= int(st.row.TotalPhases) {
			return fmt.Errorf("%w: operation run %s has no phase after %d", ErrRunState, id, next-1)
		}
		if expected != nil && *expected != next {
			return runInvalid("expected_phase_index", "the next phase is %d, not %d", next, *expected)
		}
		st.row.CurrentPhaseIndex = int32(next)
		st.set(RunRunning, ReasonNone, fmt.Sprintf("advanced to phase %d", next))
		return r.pass(ctx, tx, st)
	})
}

// Cancel cancels a run: in one transaction the run becomes cancelled and
// the targets not yet submitted skipped; then each running child task is
// cancelled in its own transaction (its target becomes terminated as it
// ends). Cancelling a cancelled run returns it unchanged, cancelling any
// child still running; a completed or failed run is ErrRunState.
func (r *Service) Cancel(ctx context.Context, id uuid.UUID, reason string) (Run, error) {
	var children []uuid.UUID
	run, err := r.control(ctx, id, func(tx pgx.Tx, st *runState) error {
		switch s := st.status(); {
		case s == RunCancelled:
		case s.Terminal():
			return terminalError(st, "cancel")
		default:
			msg := "operation run cancelled"
			if reason = strings.TrimSpace(reason); reason != "" {
				msg += ": " + reason
			}
			st.set(RunCancelled, ReasonNone, msg)
			if _, err := r.q.OperationRunTargetSkipOpen(ctx, tx, dbsqlc.OperationRunTargetSkipOpenParams{OperationRunID: id, Message: msg}); err != nil {
				return err
			}
		}
		targets, err := r.q.OperationRunTargetsOfPhaseForUpdate(ctx, tx, dbsqlc.OperationRunTargetsOfPhaseForUpdateParams{OperationRunID: id, PhaseIndex: st.row.CurrentPhaseIndex})
		if err != nil {
			return err
		}
		if err := r.reconcile(ctx, tx, targets); err != nil {
			return err
		}
		for _, t := range targets {
			if TargetStatus(t.OperationRunTarget.Status) == TargetSubmitted && t.OperationRunTarget.TaskID != nil {
				children = append(children, *t.OperationRunTarget.TaskID)
			}
		}
		return nil
	})
	if err != nil {
		return Run{}, err
	}
	// Not under the run's lock: a child's end takes its task's locks, then
	// the run's (TasksEnded), and the cancel here takes them the other way.
	for _, child := range children {
		if _, err := r.tasks.Cancel(ctx, child); err != nil && !errors.Is(err, operations.ErrNotCancellable) && !errors.Is(err, operations.ErrTaskNotFound) {
			r.logger.WarnContext(ctx, "cannot cancel operation run child task; cancel the run again", "operation_run_id", id, "task_id", child, "error", err.Error())
		}
	}
	if len(children) == 0 {
		return run, nil
	}
	return r.Run(ctx, r.pool, id)
}
