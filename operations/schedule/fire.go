package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/schedule/internal/dbsqlc"
)

// Queue is the River queue schedule firings run on, apart from the
// engine's so a backlog of steps does not delay them.
const Queue = "schedule"

// TriggerType marks the tasks a schedule submits (task.trigger_type;
// trigger_id is the schedule's ID).
const TriggerType = "task_schedule"

// FireArgs is the job that fires a schedule at At. It holds IDs and
// a time only; the job is unique per schedule, time and rescue number while
// it waits or runs.
type FireArgs struct {
	ScheduleID uuid.UUID `json:"schedule_id"`
	At         time.Time `json:"at"`
	// Rescue is 0 for the firing's own job; the safety net re-inserts an
	// overdue firing with a rising number (its job may be stuck in a dead
	// process until River rescues it).
	Rescue int `json:"rescue,omitempty"`
}

// Kind returns the job kind.
func (FireArgs) Kind() string { return "operations.schedule_fire" }

// InsertOpts puts the job on Queue, unique while waiting or running
// (a completed one does not block re-arming the same time after a resume).
func (FireArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	}}}
}

// Worker works FireArgs jobs. Set Service before the River
// client starts.
type Worker struct {
	river.WorkerDefaults[FireArgs]
	Service *Service
}

// Work fires the schedule if it is still due at the job's time, completing
// the job in the firing's transaction.
func (w *Worker) Work(ctx context.Context, job *river.Job[FireArgs]) error {
	return w.Service.Fire(ctx, job.Args.ScheduleID, job.Args.At, func(ctx context.Context, tx pgx.Tx) error {
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

// WakeChannel is the PostgreSQL NOTIFY channel RiverFireScheduler signals
// on, in the transaction that arms a firing: the leader's dispatcher
// (PromoteDueFirings), asleep until the next due firing it knows of, looks
// again when the arming commits.
const WakeChannel = "flow_schedule_wake"

// RiverFireScheduler returns the FireScheduler that inserts FireArgs
// jobs through client, scheduled at the firing time, and wakes the
// dispatcher (WakeChannel) when the transaction commits.
func RiverFireScheduler(client *river.Client[pgx.Tx]) FireScheduler {
	return func(ctx context.Context, tx pgx.Tx, id uuid.UUID, at time.Time, rescue int) error {
		if _, err := client.InsertTx(ctx, tx, FireArgs{ScheduleID: id, At: at.UTC(), Rescue: rescue}, &river.InsertOpts{ScheduledAt: at}); err != nil {
			return err
		}
		return dbsqlc.New().FiringWake(ctx, tx, at.UTC().Format(time.RFC3339Nano))
	}
}

// PromoteDueFirings makes the waiting firing jobs whose time has come
// runnable now (at most limit of them), rather than at River's next
// scheduler pass, which runs every few seconds. The leader runs it at the
// time NextFiring gives, so firings start within moments of their time
// without a job row or a query every second. A job promoted twice, or one
// already running, is harmless.
func PromoteDueFirings(ctx context.Context, client *river.Client[pgx.Tx], limit int) (int, error) {
	params := river.NewJobListParams().Kinds(FireArgs{}.Kind()).States(rivertype.JobStateScheduled).
		Where("scheduled_at <= now()").OrderBy(river.JobListOrderByScheduledAt, river.SortOrderAsc).First(limit)
	res, err := client.JobList(ctx, params)
	if err != nil {
		return 0, fmt.Errorf("list due firings: %w", err)
	}
	n := 0
	for _, j := range res.Jobs {
		if _, err := client.JobRetry(ctx, j.ID); err != nil {
			return n, fmt.Errorf("promote firing job %d: %w", j.ID, err)
		}
		n++
	}
	return n, nil
}

// NextFiring returns the time of the earliest firing job still waiting for
// its time (ok false: none waits).
func NextFiring(ctx context.Context, client *river.Client[pgx.Tx]) (at time.Time, ok bool, err error) {
	params := river.NewJobListParams().Kinds(FireArgs{}.Kind()).States(rivertype.JobStateScheduled).
		OrderBy(river.JobListOrderByScheduledAt, river.SortOrderAsc).First(1)
	res, err := client.JobList(ctx, params)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next firing: %w", err)
	}
	if len(res.Jobs) == 0 {
		return time.Time{}, false, nil
	}
	return res.Jobs[0].ScheduledAt, true, nil
}

// RescueGrace is how overdue a firing must be before RescueOverdue
// re-inserts its job.
const RescueGrace = time.Minute

// RescueOverdue re-inserts the firing job of every enabled schedule overdue
// by more than RescueGrace (at most limit of them): the safety net for a
// job stuck in a process that died, which River would only rescue after its
// rescue window. A duplicate job is harmless: only the first to commit
// finds the schedule still due. It returns how many it re-inserted.
func (s *Service) RescueOverdue(ctx context.Context, limit int) (int, error) {
	now := s.now()
	n := 0
	err := db.BeginFunc(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		before := now.Add(-RescueGrace)
		rows, err := s.q.ScheduleDue(ctx, tx, dbsqlc.ScheduleDueParams{Before: &before, RowLimit: int32(limit)})
		if err != nil {
			return err
		}
		for _, r := range rows {
			rescue := int(now.Sub(*r.NextRunAt) / RescueGrace)
			if err := s.fire(ctx, tx, r.ID, *r.NextRunAt, rescue); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// Fire fires schedule id's firing due at at, in one transaction: if the
// schedule is still enabled and due at exactly at (otherwise it is a no-op:
// the firing happened, or the schedule was paused, changed or deleted), it
// submits each eligible scope entry's task, records last_task_id, advances
// the schedule and arranges the next firing. complete, if set, runs in the
// same transaction (the River job's completion). A scope entry whose
// submission is refused is logged and left out; the others still fire.
func (s *Service) Fire(ctx context.Context, id uuid.UUID, at time.Time, complete func(context.Context, pgx.Tx) error) error {
	outcome, lag := FireNotDue, time.Duration(-1)
	err := db.BeginFunc(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		row, err := s.q.ScheduleGetByIDForUpdate(ctx, tx, id)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("lock schedule %s: %w", id, err)
		case row.Enabled && row.NextRunAt != nil && row.NextRunAt.Equal(at):
			lag = max(s.now().Sub(at), 0)
			res, err := s.fireLocked(ctx, tx, row, at, false)
			if err != nil {
				return err
			}
			switch {
			case len(res.ids) > 0:
				outcome = FireSubmitted
			case len(res.refused) > 0:
				outcome = FireRefused
			default:
				outcome = FireNoneEligible
			}
		}
		if complete != nil {
			return complete(ctx, tx)
		}
		return nil
	})
	if err != nil {
		outcome = FireError
	}
	if s.observe != nil {
		s.observe(outcome, lag)
	}
	return err
}

// The outcomes of a firing (Config.Observe): at least one task submitted;
// every scope entry busy under the overlap policy; every submission
// refused; not due (paused, changed, deleted or already fired); an error
// (the job retries).
const (
	FireSubmitted    = "submitted"
	FireNoneEligible = "none_eligible"
	FireRefused      = "refused"
	FireNotDue       = "not_due"
	FireError        = "error"
)

// Trigger fires schedule id now, whatever its enabled flag and next_run_at
// say, submitting every scope entry (the overlap policy is ignored, though
// child tasks still reject or queue by it), and applies the after-fire
// update. It returns the submitted task IDs. Errors: ErrNotFound,
// ErrConsumed, ErrFireFailed when every scope was refused
// (then nothing changes, the schedule included).
func (s *Service) Trigger(ctx context.Context, id uuid.UUID) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	var refused []string
	err := db.BeginFunc(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		row, err := s.lock(ctx, tx, id)
		if err != nil {
			return err
		}
		if row.SpecType == string(SpecOneTime) && row.NextRunAt == nil {
			return fmt.Errorf("%w: schedule %s", ErrConsumed, id)
		}
		res, err := s.fireLocked(ctx, tx, row, s.now(), true)
		if err != nil {
			return err
		}
		ids, refused = res.ids, res.refused
		if len(ids) == 0 && len(refused) > 0 {
			// Nothing was submitted: roll the advance back too, so the
			// refused call changes nothing.
			return fmt.Errorf("%w: %s", ErrFireFailed, strings.Join(refused, "; "))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

type fireResult struct {
	ids     []uuid.UUID
	refused []string
}

// fireLocked fires the locked schedule row for the firing time at.
// manual (Trigger) submits every scope entry and advances from now.
func (s *Service) fireLocked(ctx context.Context, tx pgx.Tx, row dbsqlc.TaskSchedule, at time.Time, manual bool) (fireResult, error) {
	var res fireResult
	sched, err := scheduleFromRow(row)
	if err != nil {
		return res, err
	}
	now := s.now()
	rows, err := s.q.ScopeListBySchedule(ctx, tx, row.ID)
	if err != nil {
		return res, fmt.Errorf("list scopes: %w", err)
	}
	scopes, err := scopesFromRows(rows)
	if err != nil {
		return res, err
	}
	eligible := scopes
	if !manual && sched.Overlap != OverlapQueue {
		if eligible, err = s.notBusy(ctx, tx, scopes); err != nil {
			return res, err
		}
	}
	// A fixed rack order keeps two firings that share racks from taking
	// the racks' locks in opposite orders.
	slices.SortFunc(eligible, func(a, b Scope) int { return strings.Compare(a.RackID.String(), b.RackID.String()) })
	var auth firmware.AuthData
	if env := sched.Template.Information.AuthenticationData; env != nil {
		if auth, err = s.keys.Open(env); err != nil {
			// Nothing can be submitted; the firing is spent like one whose
			// scopes were all refused.
			s.logger.ErrorContext(ctx, "schedule credentials cannot be opened", "schedule_id", row.ID, "schedule", row.Name, "error", err.Error())
			eligible = nil
			res.refused = append(res.refused, "credentials cannot be opened: "+err.Error())
			if err := s.tellRefused(ctx, tx, Refusal{ScheduleID: sched.ID, Name: sched.Name, At: at, Manual: manual,
				Reason: "credentials cannot be opened: " + err.Error()}); err != nil {
				return res, err
			}
		}
	}
	desc := fmt.Sprintf("%s — %s", sched.Name, at.UTC().Format(time.RFC3339))
	for _, sc := range eligible {
		req := s.scopeRequest(sched, sc, auth, desc)
		if !manual {
			req.IdempotencyKey = fmt.Sprintf("task-schedule:%s:%s:rack:%s", sched.ID, at.UTC().Format(time.RFC3339Nano), sc.RackID)
		}
		taskID, err := s.submitScope(ctx, tx, req)
		if err != nil {
			s.logger.WarnContext(ctx, "schedule scope not submitted", "schedule_id", sched.ID, "schedule", sched.Name, "rack_id", sc.RackID, "error", err.Error())
			res.refused = append(res.refused, fmt.Sprintf("rack %s: %v", sc.RackID, err))
			rack := sc.RackID
			if err := s.tellRefused(ctx, tx, Refusal{ScheduleID: sched.ID, Name: sched.Name, At: at, Manual: manual, RackID: &rack,
				Reason: operations.FirstLine(err.Error())}); err != nil {
				return res, err
			}
			continue
		}
		if err := s.q.ScopeSetLastTask(ctx, tx, dbsqlc.ScopeSetLastTaskParams{ID: sc.ID, LastTaskID: &taskID}); err != nil {
			return res, fmt.Errorf("record last task: %w", err)
		}
		res.ids = append(res.ids, taskID)
	}
	p := updateParams(row)
	if len(eligible) > 0 || sched.Spec.Type == SpecOneTime {
		p.LastRunAt = &now
	}
	parsed, err := parseSpec(sched.Spec, "schedule.spec")
	if err != nil {
		return res, fmt.Errorf("stored spec of schedule %s: %v", row.ID, err) //nolint:errorlint // internal
	}
	base := at
	if manual {
		base = now
	}
	if next, ok := parsed.after(base, now); ok {
		p.NextRunAt = &next
		if p.Enabled {
			if err := s.arm(ctx, tx, row.ID, next); err != nil {
				return res, err
			}
		}
	} else {
		p.NextRunAt, p.Enabled = nil, false
	}
	if len(res.ids) > 0 {
		p.Fired = 1
	}
	if _, err := s.q.ScheduleUpdate(ctx, tx, p); err != nil {
		return res, fmt.Errorf("advance schedule %s: %w", row.ID, err)
	}
	s.logger.InfoContext(ctx, "schedule fired", "schedule_id", sched.ID, "schedule", sched.Name, "fire_time", at.UTC(),
		"manual", manual, "scopes", len(scopes), "submitted", len(res.ids), "refused", len(res.refused), "next_run_at", p.NextRunAt)
	return res, nil
}

// notBusy leaves out scope entries whose last task is still waiting,
// pending or running (overlap policy skip).
func (s *Service) notBusy(ctx context.Context, tx pgx.Tx, scopes []Scope) ([]Scope, error) {
	var last []uuid.UUID
	for _, sc := range scopes {
		if sc.LastTaskID != nil {
			last = append(last, *sc.LastTaskID)
		}
	}
	if len(last) == 0 {
		return scopes, nil
	}
	statuses, err := s.tasks.Statuses(ctx, tx, last)
	if err != nil {
		return nil, fmt.Errorf("last tasks: %w", err)
	}
	busy := map[uuid.UUID]bool{}
	for id, st := range statuses {
		if !st.Finished() {
			busy[id] = true
		}
	}
	out := make([]Scope, 0, len(scopes))
	for _, sc := range scopes {
		if sc.LastTaskID != nil && busy[*sc.LastTaskID] {
			continue
		}
		out = append(out, sc)
	}
	return out, nil
}

// scopeRequest is the task request of one scope entry's firing.
func (s *Service) scopeRequest(sched Schedule, sc Scope, auth firmware.AuthData, desc string) operations.Request {
	t := sched.Template
	payload := t.Information
	payload.AuthenticationData = nil
	req := operations.Request{
		Type: t.Type, Code: t.Code, Description: desc, Payload: payload, Auth: auth,
		Queue: sched.Overlap == OverlapQueue, QueueTimeout: time.Duration(t.QueueTimeoutSecs) * time.Second,
		RequiredRackID: sc.RackID, TriggerType: TriggerType, TriggerID: sched.ID.String(),
		SubmittedBy: sched.CreatedBy,
	}
	if t.RuleID != nil {
		req.RuleID = *t.RuleID
	}
	switch {
	case sc.Filter == nil:
		req.Targets.Racks = []inventory.RackTarget{{Rack: inventory.RackRef{ID: sc.RackID}}}
	case sc.Filter.Kind == filterTypes:
		types := make([]inventory.ComponentType, len(sc.Filter.Types))
		for i, ct := range sc.Filter.Types {
			types[i] = inventory.ComponentType(ct)
		}
		req.Targets.Racks = []inventory.RackTarget{{Rack: inventory.RackRef{ID: sc.RackID}, Types: types}}
	default:
		for _, id := range sc.Filter.Components {
			req.Targets.Components = append(req.Targets.Components, inventory.ComponentRef{ID: id})
		}
	}
	return req
}

// submitScope submits one scope entry's task inside a savepoint, so a
// refusal rolls back that entry alone.
func (s *Service) submitScope(ctx context.Context, tx pgx.Tx, req operations.Request) (uuid.UUID, error) {
	var id uuid.UUID
	// The savepoint's events reach the outer transaction's only if it is
	// released.
	spCtx, hooks := db.WithCommitHooks(ctx)
	defer func() {
		if id != uuid.Nil {
			db.AfterCommit(ctx, hooks.Run)
		}
	}()
	err := pgx.BeginFunc(spCtx, tx, func(sp pgx.Tx) error {
		ids, err := s.tasks.Submit(spCtx, sp, req)
		if err != nil {
			return err
		}
		if len(ids) != 1 {
			return fmt.Errorf("submission wrote %d tasks, want 1", len(ids))
		}
		id = ids[0]
		return nil
	})
	return id, err
}

func (s *Service) tellRefused(ctx context.Context, tx pgx.Tx, r Refusal) error {
	if s.refused == nil {
		return nil
	}
	return s.refused(ctx, tx, r)
}
