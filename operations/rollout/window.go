package rollout

import (
	"context"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/operations"
)

// WindowGate decides whether a run may claim a target on a rack now
// (maintenance windows and freezes, docs/change-safety.md): the zero
// GateHold lets it; else the target stays unclaimed, the run says why and
// wakes at Next. Runs an admin released from windows are never held. The
// operations/window package implements it; app sets it (SetWindowGate).
type WindowGate interface {
	HoldTarget(ctx context.Context, dbtx db.DBTX, runID, rackID uuid.UUID, at time.Time) (operations.GateHold, error)
	// RunRelease returns who released run runID from windows and why;
	// false when nobody did.
	RunRelease(ctx context.Context, dbtx db.DBTX, runID uuid.UUID) (by, reason string, ok bool, err error)
}

// SetWindowGate makes every later pass ask g before claiming a target
// (nil: none). Call it before serving.
func (r *Service) SetWindowGate(g WindowGate) { r.windows = g }

// SetClock makes runs read the time from now when they claim targets
// (tests drive a fake clock); nil is time.Now. Call it before serving.
func (r *Service) SetClock(now func() time.Time) { r.nowFunc = now }

func (r *Service) now() time.Time {
	if r.nowFunc != nil {
		return r.nowFunc()
	}
	return time.Now()
}

// windowHolds is what a pass left unclaimed for the windows.
type windowHolds struct {
	n      int
	reason string
	next   *time.Time
	// retry is when a hold that names no window opening (a coolant
	// loop's open leak) is looked at again.
	retry *time.Time
}

// held reports whether the windows hold target t of run st now, noting it
// in w.
func (r *Service) held(ctx context.Context, dbtx db.DBTX, st *runState, rackID uuid.UUID, at time.Time, w *windowHolds) (bool, error) {
	if r.windows == nil {
		return false, nil
	}
	h, err := r.windows.HoldTarget(ctx, dbtx, st.row.ID, rackID, at)
	if err != nil || !h.Held() {
		return false, err
	}
	w.n++
	if w.reason == "" {
		w.reason = h.Reason
	}
	if !h.Next.IsZero() {
		w.next = earliest(w.next, &h.Next)
	} else if !h.Retry.IsZero() {
		w.retry = earliest(w.retry, &h.Retry)
	}
	return true, nil
}

// message is the run message's part about held targets.
func (w windowHolds) message() string {
	if w.n == 0 {
		return ""
	}
	what := " held by maintenance windows ("
	if w.next == nil && w.retry != nil {
		what = " held (" // by a coolant loop's open leak
	}
	s := "; " + plural(w.n, "target") + what + w.reason + ")"
	if w.next != nil {
		s += "; next window opens at " + w.next.UTC().Format(time.RFC3339)
	}
	return s
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// releaseMessage is the run message's part about an admin's release from
// windows.
func (r *Service) releaseMessage(ctx context.Context, dbtx db.DBTX, runID uuid.UUID) (string, error) {
	if r.windows == nil {
		return "", nil
	}
	by, reason, ok, err := r.windows.RunRelease(ctx, dbtx, runID)
	if err != nil || !ok {
		return "", err
	}
	if by == "" {
		by = "an admin"
	}
	return "; released from maintenance windows by " + by + ": " + reason, nil
}
