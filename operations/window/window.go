// Package window keeps maintenance windows and freezes
// (docs/change-safety.md) and answers the task manager's admission
// question, "may this disruptive operation start on this rack now?"
// (operations.StartGate), and the operation runs' ("may this run claim a
// target on this rack now?", rollout.WindowGate).
//
// A window or a freeze is a named period, a recurrence (a cron expression
// in an IANA time zone, plus a duration) or a one-off interval, over a
// scope of racks: the site, halls (the rack location's room), rows (read
// from the rack position, inventory.SplitPosition), NVLink domains, racks.
// A disruptive operation starts on a rack only inside a window covering it
// (when any window with an occurrence ahead covers it) and outside every
// freeze covering it: a freeze wins over windows. With no windows and no
// freezes nothing is ever held.
package window

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/robfig/cron/v3"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
)

// Kind is a window's kind.
type Kind string

// The kinds: a window lets disruptive work start; a freeze forbids it.
const (
	KindWindow Kind = "window"
	KindFreeze Kind = "freeze"
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k == KindWindow || k == KindFreeze }

// Errors of the window service. Each maps to one Connect code in
// handler.go.
var (
	// ErrInvalid marks bad input; *FieldError wraps it.
	ErrInvalid = errors.New("window: invalid argument")
	// ErrNotFound: no window or freeze has the name or ID.
	ErrNotFound = errors.New("window: not found")
	// ErrExists: a window (or freeze) already has the name.
	ErrExists = errors.New("window: already exists")
)

// FieldError is bad input in one request field; it matches ErrInvalid.
type FieldError struct {
	Field, Reason string
}

// Error returns "field: reason".
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Is reports whether target is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Scope is what a window covers: the whole site, or the union of the rest.
type Scope struct {
	Site         bool
	Halls        []string
	Rows         []string
	NVLDomainIDs []uuid.UUID
	RackIDs      []uuid.UUID
}

// Empty reports whether s names nothing.
func (s Scope) Empty() bool {
	return !s.Site && len(s.Halls) == 0 && len(s.Rows) == 0 && len(s.NVLDomainIDs) == 0 && len(s.RackIDs) == 0
}

// siteOnly reports whether s covers every rack (no rack needs reading).
func (s Scope) siteOnly() bool { return s.Site }

// Covers reports whether s covers rack r.
func (s Scope) Covers(r inventory.Rack) bool {
	if s.Site || slices.Contains(s.RackIDs, r.ID) {
		return true
	}
	if r.Location.Room != "" && slices.Contains(s.Halls, r.Location.Room) {
		return true
	}
	if row, _ := inventory.SplitPosition(r.Location.Position); row != "" && slices.ContainsFunc(s.Rows, func(x string) bool { return strings.EqualFold(inventory.RowName(x), row) }) {
		return true
	}
	return r.NVLDomainID != nil && slices.Contains(s.NVLDomainIDs, *r.NVLDomainID)
}

// Window is a maintenance window or a freeze.
type Window struct {
	ID          uuid.UUID
	Kind        Kind
	Name        string
	Description string
	// A recurrence: Cron in TimeZone, each occurrence lasting Duration.
	Cron     string
	TimeZone string
	Duration time.Duration
	// Or a one-off interval [StartsAt, EndsAt).
	StartsAt, EndsAt *time.Time
	Scope            Scope
	CreatedBy        string
	CreatedAt        time.Time

	sched cron.Schedule // parsed Cron
}

// parseCron parses a standard five-field cron expression (or a
// descriptor such as @daily) in the time zone tz.
func parseCron(expr, tz string) (cron.Schedule, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=") {
		return nil, invalid("cron", "give the time zone in time_zone, not in the expression")
	}
	if tz == "" {
		return nil, invalid("time_zone", "is required with cron (an IANA name such as Europe/Paris or UTC)")
	}
	loc, err := time.LoadLocation(tz)
	if err != nil || tz == "Local" {
		return nil, invalid("time_zone", "unknown time zone %q (an IANA name such as Europe/Paris or UTC)", tz)
	}
	sched, err := cron.ParseStandard(expr)
	if err != nil {
		return nil, invalid("cron", "invalid cron expression %q: %v", expr, err)
	}
	if s, ok := sched.(*cron.SpecSchedule); ok {
		s.Location = loc
	}
	return sched, nil
}

// Open reports whether w is open at t.
func (w Window) Open(t time.Time) bool {
	if w.sched == nil {
		return w.StartsAt != nil && !t.Before(*w.StartsAt) && t.Before(*w.EndsAt)
	}
	s := w.sched.Next(t.Add(-w.Duration))
	return !s.After(t)
}

// closes returns when w, open at t, closes (the end of the earliest
// occurrence covering t; a later overlapping occurrence is found by the
// caller looking again).
func (w Window) closes(t time.Time) time.Time {
	if w.sched == nil {
		return *w.EndsAt
	}
	return w.sched.Next(t.Add(-w.Duration)).Add(w.Duration)
}

// NextOpen returns when w next opens after t (w closed at t); false when
// it never does.
func (w Window) NextOpen(t time.Time) (time.Time, bool) {
	if w.sched == nil {
		if w.StartsAt != nil && w.StartsAt.After(t) {
			return *w.StartsAt, true
		}
		return time.Time{}, false
	}
	n := w.sched.Next(t)
	return n, !n.IsZero()
}

// opened returns when the occurrence of w open at t opened.
func (w Window) opened(t time.Time) time.Time {
	if w.sched == nil {
		return *w.StartsAt
	}
	return w.sched.Next(t.Add(-w.Duration))
}

// openWindow returns the maintenance window work starting at t runs in,
// among the windows covering its rack: from the opening of the open
// occurrence that closes last until its close, or the next freeze's
// start if that comes first. Zero when no window is open at t (none
// covers the rack).
func openWindow(windows, freezes []Window, t time.Time) (from, until time.Time) {
	for _, w := range windows {
		if w.Open(t) {
			if c := w.closes(t); c.After(until) {
				from, until = w.opened(t), c
			}
		}
	}
	if until.IsZero() {
		return time.Time{}, time.Time{}
	}
	for _, f := range freezes {
		if n, ok := f.NextOpen(t); ok && n.Before(until) {
			until = n
		}
	}
	return from, until
}

// ahead reports whether w is open at t or opens later.
func (w Window) ahead(t time.Time) bool {
	return w.sched != nil || (w.EndsAt != nil && w.EndsAt.After(t))
}

// horizon bounds the search for the next opening.
const horizon = 366 * 24 * time.Hour

// decision is when a rack may next start disruptive work, from t.
type decision struct {
	at     time.Time // == t: now; zero: not within the horizon
	freeze *Window   // the freeze open at t, if any
	until  time.Time // when that freeze's occurrence ends
	closed []string  // the windows covering the rack, all closed at t
}

// decide computes, for a rack covered by windows and freezes (each of its
// kind), the first time from t inside a window (or any time when no window
// with an occurrence ahead covers it) and outside every freeze.
func decide(windows, freezes []Window, t time.Time) decision {
	var live []Window
	for _, w := range windows {
		if w.ahead(t) {
			live = append(live, w)
		}
	}
	d := decision{}
	for _, f := range freezes {
		if f.Open(t) {
			d.freeze, d.until = &f, f.closes(t)
			break
		}
	}
	if d.freeze == nil && len(live) > 0 && !slices.ContainsFunc(live, func(w Window) bool { return w.Open(t) }) {
		for _, w := range live {
			d.closed = append(d.closed, w.Name)
		}
	}
	at := t
	for range 2000 {
		if at.After(t.Add(horizon)) {
			return d
		}
		moved := false
		for _, f := range freezes {
			if f.Open(at) {
				at, moved = f.closes(at), true
			}
		}
		if moved {
			continue
		}
		if len(live) == 0 || slices.ContainsFunc(live, func(w Window) bool { return w.Open(at) }) {
			d.at = at
			return d
		}
		var next time.Time
		for _, w := range live {
			if n, ok := w.NextOpen(at); ok && (next.IsZero() || n.Before(next)) {
				next = n
			}
		}
		if next.IsZero() {
			return d
		}
		at = next
	}
	return d
}

// reason is the task message's reason of a hold.
func (d decision) reason() string {
	switch {
	case d.freeze != nil:
		return fmt.Sprintf("in freeze %q until %s", d.freeze.Name, d.until.UTC().Format(time.RFC3339))
	case len(d.closed) > 0:
		s := "outside maintenance window"
		if len(d.closed) > 1 {
			s += "s"
		}
		q := make([]string, len(d.closed))
		for i, n := range d.closed {
			q[i] = fmt.Sprintf("%q", n)
		}
		return s + " " + strings.Join(q, ", ")
	}
	return "in a freeze"
}

// DefaultOperations are the operations windows and freezes hold when
// FLOW_WINDOW_OPERATIONS is unset: power off, power cycle and reset, AC
// power cycle, firmware, bring-up and decommission.
var DefaultOperations = []string{
	string(operations.CodePowerOff), string(operations.CodeForcePowerOff), string(operations.CodeRestart), string(operations.CodeForceRestart),
	string(operations.CodeWarmReset), string(operations.CodeColdReset),
	string(operations.CodeUpgrade), string(operations.CodeDowngrade), string(operations.CodeRollback),
	string(operations.CodeBringUp), string(operations.CodeDecommission),
}

// ParseOperations parses FLOW_WINDOW_OPERATIONS: a comma-separated list of
// operation codes (power_off, cold_reset, upgrade…) or operation types
// (firmware_control: all its codes); "" is DefaultOperations, "none" holds
// nothing.
func ParseOperations(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "":
		return slices.Clone(DefaultOperations), nil
	case "none":
		return []string{}, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		known := operations.OperationType(f).Valid()
		for _, typ := range operations.OperationTypes() {
			known = known || typ.HasCode(operations.OperationCode(f))
		}
		if !known {
			return nil, fmt.Errorf("unknown operation %q (an operation code such as power_off or cold_reset, or a type such as firmware_control)", f)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}
