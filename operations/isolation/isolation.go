// Package isolation holds the leak tiers beyond the tray (docs/event-rules.md
// "Leak tiers", issue 45): a rack whose open leaks reach a threshold
// (severe), or every rack of a coolant loop the BMS reports leaking
// (critical), is powered off as a leak response, and the facility is asked
// to isolate it (AC breaker, coolant valves) through a
// flow.rack.isolation_requested event, re-sent until it is acknowledged.
// The rack, and the racks on its coolant loop, stay refused for power-on
// until an operator clears the isolation (or an admin overrides it for one
// rack). While a loop has an open leak, disruptive work that has not
// started on its racks waits (cooling awareness).
//
// Its tables (db/migrations/0310_rack_isolation.up.sql) are rack_isolation,
// rack_isolation_override and facility_leak_report; its queries touch no
// other. It reaches the task manager through operations' exported API
// (Tasks.Preempt and Tasks.Submit with Payload.Leak, Tasks.PromoteRack), the
// inventory through inventory.Service and app's placement functions. It
// implements operations.EnergiseGuard and, for cooling awareness,
// operations.StartGate's Hold; app wires it.
package isolation

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/operations/isolation/internal/dbsqlc"
)

// Tier is how an isolation came about.
type Tier string

// Tiers.
const (
	// TierSevere: the open leaks on one rack reached the threshold.
	TierSevere Tier = "severe"
	// TierCritical: the BMS reported a leak on the rack's coolant loop
	// (or on the rack).
	TierCritical Tier = "critical"
)

// Errors of isolation; handler.go maps each to one Connect code.
var (
	// ErrInvalid marks bad input (InvalidArgument); *FieldError wraps it.
	ErrInvalid = errors.New("isolation: invalid argument")
	// ErrNotPending: the rack has no isolation request waiting for an
	// acknowledgement (FailedPrecondition).
	ErrNotPending = errors.New("isolation: no isolation request is pending on the rack")
	// ErrNotIsolated: the rack has no open isolation (FailedPrecondition).
	ErrNotIsolated = errors.New("isolation: the rack is not isolated")
	// ErrUnknownLoop: no live rack is on the coolant loop (NotFound).
	ErrUnknownLoop = errors.New("isolation: unknown coolant loop")
)

// FieldError is bad input in one request field; it matches ErrInvalid.
type FieldError struct{ Field, Reason string }

// Error returns "field: reason".
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Is reports whether target is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Isolation is one rack's isolation: requested by Flow, acknowledged by the
// facility, cleared by an operator.
type Isolation struct {
	ID           uuid.UUID
	RackID       uuid.UUID
	Tier         Tier
	Reason       string
	ComponentIDs []uuid.UUID // the leaking components (severe)
	ReportID     *uuid.UUID  // the BMS report (critical)
	ObservedAt   time.Time   // when the leak that triggered it was seen
	RequestedAt  time.Time
	// Sends is how many facility requests were sent; NextSendAt when the
	// next is due while neither acknowledged nor cleared.
	Sends          int
	LastSentAt     *time.Time
	NextSendAt     time.Time
	AcknowledgedAt *time.Time
	AcknowledgedBy string
	AckNote        string
	ClearedAt      *time.Time
	ClearedBy      string
	ClearReason    string
}

// Open reports whether the isolation is not cleared.
func (i Isolation) Open() bool { return i.ClearedAt == nil }

func fromRow(r dbsqlc.RackIsolation) Isolation {
	return Isolation{ID: r.ID, RackID: r.RackID, Tier: Tier(r.Tier), Reason: r.Reason, ComponentIDs: r.ComponentIDs, ReportID: r.ReportID,
		ObservedAt: r.ObservedAt, RequestedAt: r.RequestedAt, Sends: int(r.Sends), LastSentAt: r.LastSentAt, NextSendAt: r.NextSendAt,
		AcknowledgedAt: r.AcknowledgedAt, AcknowledgedBy: deref(r.AcknowledgedBy), AckNote: deref(r.AckNote),
		ClearedAt: r.ClearedAt, ClearedBy: deref(r.ClearedBy), ClearReason: deref(r.ClearReason)}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Placement is where a rack sits: its name, power feed and coolant loop
// ("" when not known).
type Placement struct {
	Name, Feed, Loop string
}

// Request is one facility request for an isolation (the payload of
// flow.rack.isolation_requested): Send counts the requests of this
// isolation, 1 for the first.
type Request struct {
	Isolation Isolation
	Rack      Placement
	Send      int
}

// Report is a leak the BMS reported (ReportFacilityLeak).
type Report struct {
	ID         uuid.UUID
	ReportedBy string
	Loop       string
	RackID     *uuid.UUID
	Summary    string
	RackIDs    []uuid.UUID // the racks Flow isolated for it
	ReportedAt time.Time
}

func reportFromRow(r dbsqlc.FacilityLeakReport) Report {
	return Report{ID: r.ID, ReportedBy: r.ReportedBy, Loop: deref(r.CoolantLoop), RackID: r.RackID, Summary: r.Summary, RackIDs: r.RackIDs, ReportedAt: r.ReportedAt}
}
