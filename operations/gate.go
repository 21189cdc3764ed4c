package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// StartGate decides at admission whether a task may start on its rack now
// (maintenance windows and freezes, docs/change-safety.md). The task
// manager asks it before a task would become PENDING, at submission and at
// each promotion; it imports no feature, app sets the gate
// (Tasks.SetStartGate).
type StartGate interface {
	// Hold returns the zero GateHold when s may start at s.At, else why not
	// and when it may (the next opening). It reads through dbtx only.
	Hold(ctx context.Context, dbtx db.DBTX, s GateSubject) (GateHold, error)
}

// GateSubject is what a StartGate decides on: one task's rack and
// operation, its trigger (an operation run's child tasks carry the run's
// ID), at a time.
type GateSubject struct {
	RackID      uuid.UUID
	Type        OperationType
	Code        OperationCode
	TriggerType string
	TriggerID   string
	At          time.Time
}

// GateHold is a StartGate's answer. Reason "" lets the task start; else the
// task waits, with Reason in its message, until Next (the next opening;
// zero when the gate knows none: the task is looked at again by the next
// sweep).
type GateHold struct {
	Reason string
	Next   time.Time
	// OpenFrom and OpenUntil, when the task may start, are the maintenance
	// window it starts in (zero when none covers its rack). A firmware
	// task passes it to Core, which enforces it too.
	OpenFrom, OpenUntil time.Time
	// Retry, when Next is zero, is when to look again (a hold that knows
	// no opening, such as a coolant loop's open leak).
	Retry time.Time
}

// withWindow returns a firmware task's payload info with its time window
// (start_time, end_time) narrowed to the maintenance window h it starts
// in; info unchanged when h names none or the two do not overlap.
func withWindow(info []byte, h GateHold) ([]byte, error) {
	if h.OpenUntil.IsZero() {
		return info, nil
	}
	var p Payload
	if err := json.Unmarshal(info, &p); err != nil {
		return nil, fmt.Errorf("decode task payload: %w", err)
	}
	start, end := h.OpenFrom.Unix(), h.OpenUntil.Unix()
	if p.StartTime > start {
		start = p.StartTime
	}
	if p.EndTime != 0 && p.EndTime < end {
		end = p.EndTime
	}
	if end <= start {
		return info, nil
	}
	p.StartTime, p.EndTime = start, end
	return json.Marshal(p)
}

// Held reports whether h keeps the task waiting.
func (h GateHold) Held() bool { return h.Reason != "" }

// ErrNotWaiting means a release named a task that is not waiting.
var ErrNotWaiting = errors.New("task is not waiting")

// SetStartGate makes every later admission ask g (nil: none, every task
// starts as soon as its rack allows). Call it before serving.
func (t *Tasks) SetStartGate(g StartGate) { t.gate = g }

// TransitionHolds names what a power transition (ruledef.PowerTransition)
// on a rack of feed takes, by the compute trays and power shelves it
// targets: its feed's power budget (operations/powerbudget). A leak
// response never holds.
type TransitionHolds func(feed string, trays, shelves int) []engine.Hold

// SetTransitionHolds sets the holds of power transitions, before serving.
func (t *Tasks) SetTransitionHolds(h TransitionHolds) { t.holds = h }

// SetClock makes the task manager read the time from now (tests drive a
// fake clock); nil is time.Now. Call it before serving.
func (t *Tasks) SetClock(now func() time.Time) { t.nowFunc = now }

func (t *Tasks) now() time.Time {
	if t.nowFunc != nil {
		return t.nowFunc()
	}
	return time.Now()
}

// heldMessage is the message of a task a gate holds.
func heldMessage(h GateHold) string {
	msg := "Held: " + h.Reason
	if !h.Next.IsZero() {
		msg += "; next window opens at " + h.Next.UTC().Format(time.RFC3339)
	}
	return firstLine(msg)
}

// holdNext is when a held task is looked at again: the gate's next
// opening, else in a minute (the sweep looks sooner).
func (t *Tasks) holdNext(h GateHold) time.Time {
	if h.Next.IsZero() || !h.Next.After(t.now()) {
		if h.Retry.After(t.now()) {
			return h.Retry
		}
		return t.now().Add(time.Minute)
	}
	return h.Next
}

// gateHold asks the gate about one task to start now; a leak response and a
// released task are never held.
func (t *Tasks) gateHold(ctx context.Context, dbtx db.DBTX, s GateSubject, leak, released bool) (GateHold, error) {
	if t.gate == nil || leak || released {
		return GateHold{}, nil
	}
	s.At = t.now()
	h, err := t.gate.Hold(ctx, dbtx, s)
	if err != nil {
		return GateHold{}, fmt.Errorf("maintenance windows: %w", err)
	}
	return h, nil
}

// holdRow keeps waiting task row, which the gate holds (h), waiting: when
// the next opening moved, its message, its deadline (the next opening plus
// the task's queue timeout: a held task does not expire by its queue
// timeout while it waits for a window) and a wake at that opening.
func (t *Tasks) holdRow(ctx context.Context, tx pgx.Tx, row dbsqlc.Task, h GateHold) error {
	next := t.holdNext(h)
	if row.WindowHeldUntil != nil && row.WindowHeldUntil.Equal(next) && row.Message == heldMessage(h) {
		return nil
	}
	timeout := DefaultQueueTimeout
	if row.QueueExpiresAt != nil {
		from := row.CreatedAt
		if row.WindowHeldUntil != nil {
			from = *row.WindowHeldUntil
		}
		if d := row.QueueExpiresAt.Sub(from); d > 0 {
			timeout = d
		}
	}
	expires := next.Add(timeout)
	if err := t.q.TaskHold(ctx, tx, dbsqlc.TaskHoldParams{ID: row.ID, Message: heldMessage(h), WindowHeldUntil: &next, QueueExpiresAt: &expires}); err != nil {
		return fmt.Errorf("hold task %s: %w", row.ID, err)
	}
	if t.expiry != nil {
		if err := t.expiry(ctx, tx, row.RackID, next); err != nil {
			return fmt.Errorf("schedule window wake: %w", err)
		}
	}
	return nil
}

// rowGate asks the gate about waiting task row.
func (t *Tasks) rowGate(ctx context.Context, tx pgx.Tx, row dbsqlc.Task) (GateHold, error) {
	if t.gate == nil {
		return GateHold{}, nil
	}
	var p Payload
	_ = json.Unmarshal(row.Information, &p)
	return t.gateHold(ctx, tx, GateSubject{
		RackID: row.RackID, Type: OperationType(row.OperationType), Code: OperationCode(row.OperationCode),
		TriggerType: row.TriggerType, TriggerID: row.TriggerID,
	}, p.Leak != nil, row.WindowRelease != nil)
}

// Release lets waiting task id start whatever the maintenance windows and
// freezes (an admin's override, docs/change-safety.md): by and reason are
// recorded on the task and in its message, and the task starts now unless
// a conflict on its rack still holds it. ErrTaskNotFound, ErrNotWaiting
// when the task is not waiting, ErrInvalidRequest without a reason.
func (t *Tasks) Release(ctx context.Context, id uuid.UUID, by, reason string) (Task, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return Task{}, invalidRequest("reason", "is required")
	}
	ctx, hooks := db.WithCommitHooks(ctx)
	err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		row, err := t.lockTask(ctx, tx, id)
		if err != nil {
			return err
		}
		if TaskStatus(row.Status) != TaskWaiting {
			return fmt.Errorf("%w: task %s is %s", ErrNotWaiting, id, row.Status)
		}
		who := by
		if who == "" {
			who = "an admin"
		}
		release := who + ": " + reason
		if err := t.q.TaskWindowRelease(ctx, tx, dbsqlc.TaskWindowReleaseParams{ID: id, WindowRelease: &release,
			Message: firstLine("Released from maintenance windows by " + release)}); err != nil {
			return err
		}
		return t.promote(ctx, tx, row.RackID)
	})
	if err != nil {
		return Task{}, err
	}
	hooks.Run()
	tasks, err := t.Get(ctx, []uuid.UUID{id})
	if err != nil {
		return Task{}, err
	}
	return tasks[0], nil
}

// lockTask takes task id's rack lock, then locks and reads the task (the
// order promotion takes them); ErrTaskNotFound when there is none.
func (t *Tasks) lockTask(ctx context.Context, tx pgx.Tx, id uuid.UUID) (dbsqlc.Task, error) {
	row, err := t.q.TaskGetByID(ctx, tx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, fmt.Errorf("%w: %s", ErrTaskNotFound, id)
	} else if err != nil {
		return row, fmt.Errorf("read task %s: %w", id, err)
	}
	if err := t.q.TaskLockRack(ctx, tx, row.RackID.String()); err != nil {
		return row, err
	}
	if row, err = t.q.TaskGetByIDForUpdate(ctx, tx, id); err != nil {
		return row, fmt.Errorf("read task %s: %w", id, err)
	}
	return row, nil
}

// gateMany turns those of s's decided tasks that would start now but that
// the gate holds (outside their maintenance windows, or in a freeze) into
// waiting ones, not refused, until the next opening; a full waiting queue
// is ErrQueueFull as for a queued request.
func (t *Tasks) gateMany(ctx context.Context, tx pgx.Tx, s *Submission, tasks []admittedTask, active map[uuid.UUID][]activeTask) error {
	req := s.Req
	for i := range tasks {
		a := &tasks[i]
		if a.plan == nil {
			continue
		}
		h, err := t.gateHold(ctx, tx, GateSubject{RackID: a.rack.ID, Type: req.Type, Code: req.Code, TriggerType: req.TriggerType, TriggerID: req.TriggerID},
			req.Preempt || req.Payload.Leak != nil, false)
		if err != nil {
			return err
		}
		if !h.Held() {
			if req.Type == OperationTypeFirmwareControl {
				if a.row.Information, err = withWindow(a.row.Information, h); err != nil {
					return err
				}
			}
			continue
		}
		waiting := 0
		for _, o := range active[a.rack.ID] {
			if o.status == TaskWaiting {
				waiting++
			}
		}
		if waiting >= MaxWaitingPerRack {
			return fmt.Errorf("%w: rack %s waiting queue is full (%d/%d tasks)", ErrQueueFull, rackLabel(a.rack), waiting, MaxWaitingPerRack)
		}
		timeout := req.QueueTimeout
		if timeout <= 0 {
			timeout = DefaultQueueTimeout
		}
		next := t.holdNext(h)
		a.plan, a.wake, a.expires = nil, next, next.Add(timeout)
		a.row.Status, a.row.Message, a.row.QueueExpiresAt, a.row.WindowHeldUntil = string(TaskWaiting), heldMessage(h), &a.expires, &next
	}
	return nil
}
