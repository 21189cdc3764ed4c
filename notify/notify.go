// Package notify tells people and systems what happened in Flow
// (docs/notifications.md): a fixed catalogue of event types with versioned
// JSON payloads, an outbox written in the transaction of the change an
// event reports (Emit), webhook subscriptions with signing secrets sealed
// by the data key, and River jobs that deliver each event to each matching
// subscription: at least once, ordered per subject (one rack), with
// exponential backoff, a per-request timeout and a dead letter after the
// last attempt or on a permanent 4xx.
//
// Feature packages emit (through app's wiring); only notify delivers.
package notify

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Type is an event type: a stable, documented string (CloudEvents "type").
type Type string

// The catalogue (docs/notifications.md lists each with an example
// payload). A type's payload is Data with the fields its row names; a
// payload changes only by adding fields, and a breaking change would be a
// new Version.
const (
	TaskCompleted  Type = "flow.task.completed"
	TaskFailed     Type = "flow.task.failed"
	TaskTerminated Type = "flow.task.terminated"

	RunPhaseStarted Type = "flow.run.phase_started"
	RunGateTripped  Type = "flow.run.gate_tripped"
	RunPaused       Type = "flow.run.paused"
	RunCompleted    Type = "flow.run.completed"
	RunFailed       Type = "flow.run.failed"

	LeakDetected   Type = "flow.leak.detected"
	LeakHandled    Type = "flow.leak.handled"
	LeakCleared    Type = "flow.leak.cleared"
	LeakOverridden Type = "flow.leak.overridden"

	ScheduleFiringRefused Type = "flow.schedule.firing_refused"

	SyncDriftFound   Type = "flow.sync.drift_found"
	SyncDriftCleared Type = "flow.sync.drift_cleared"

	ApprovalRequested Type = "flow.approval.requested"
	ApprovalDecided   Type = "flow.approval.decided"

	RackIsolationRequested Type = "flow.rack.isolation_requested"

	// WebhookTest is what `flow webhook test` sends; it is never emitted
	// by a change and no subscription needs to name it.
	WebhookTest Type = "flow.webhook.test"
)

// AllTypes is a subscription's "every type" ('*').
const AllTypes = "*"

// Types returns the catalogue, in its documented order (WebhookTest left
// out).
func Types() []Type {
	return []Type{
		TaskCompleted, TaskFailed, TaskTerminated,
		RunPhaseStarted, RunGateTripped, RunPaused, RunCompleted, RunFailed,
		LeakDetected, LeakHandled, LeakCleared, LeakOverridden,
		ScheduleFiringRefused, SyncDriftFound, SyncDriftCleared,
		ApprovalRequested, ApprovalDecided, RackIsolationRequested,
	}
}

// Valid reports whether t is in the catalogue.
func (t Type) Valid() bool { return slices.Contains(Types(), t) }

// Version is the payload version every type's Data carries today.
const Version = 1

// Ref names a thing by ID and by name.
type Ref struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// Data is an event's payload (the CloudEvent's "data"): the payload
// version, where it happened (the site, and the rack and component by ID
// and name when the event has them), and the type's own fields.
type Data struct {
	Version   int  `json:"version"`
	Site      Ref  `json:"site"`
	Rack      *Ref `json:"rack,omitempty"`
	Component *Ref `json:"component,omitempty"`

	// Task events.
	Task *TaskData `json:"task,omitempty"`
	// Operation-run events.
	Run *RunData `json:"run,omitempty"`
	// Leak events.
	Leak *LeakData `json:"leak,omitempty"`
	// Schedule events.
	Schedule *ScheduleData `json:"schedule,omitempty"`
	// Approval events.
	Approval *ApprovalData `json:"approval,omitempty"`
	// Drift events.
	Drift *DriftData `json:"drift,omitempty"`
	// Rack isolation requests.
	Isolation *IsolationData `json:"isolation,omitempty"`
	// Message says what happened, for people.
	Message string `json:"message,omitempty"`
}

// TaskData is a task event's own payload.
type TaskData struct {
	ID            string     `json:"id"`
	OperationType string     `json:"operation_type"`
	Operation     string     `json:"operation"`
	Status        string     `json:"status"`
	Message       string     `json:"message,omitempty"`
	SubmittedBy   string     `json:"submitted_by,omitempty"`
	SubmittedAt   *time.Time `json:"submitted_at,omitempty"`
}

// RunData is an operation-run event's own payload.
type RunData struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Status string `json:"status"`
	Phase  *int   `json:"phase,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// LeakData is a leak event's own payload.
type LeakData struct {
	OccurrenceID string     `json:"occurrence_id,omitempty"`
	Location     string     `json:"location,omitempty"`
	ObservedAt   *time.Time `json:"observed_at,omitempty"`
	By           string     `json:"by,omitempty"`
}

// ScheduleData is a schedule event's own payload.
type ScheduleData struct {
	ID       string     `json:"id"`
	Name     string     `json:"name,omitempty"`
	FireTime *time.Time `json:"fire_time,omitempty"`
	Reason   string     `json:"reason,omitempty"`
}

// ApprovalData is an approval event's own payload: the request, what
// waits on it (kind: operation_run or submission; subjects: the run or
// the submission's tasks) and, once decided, by whom and why.
type ApprovalData struct {
	ID          string     `json:"id"`
	Kind        string     `json:"kind"`
	Status      string     `json:"status"`
	Summary     string     `json:"summary"`
	Racks       int        `json:"racks"`
	PlanHash    string     `json:"plan_hash"`
	SubjectIDs  []string   `json:"subject_ids"`
	RequestedBy string     `json:"requested_by"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	DecidedBy   string     `json:"decided_by,omitempty"`
	Reason      string     `json:"reason,omitempty"`
}

// DriftData is a drift event's own payload: what the inventory sync found
// different between Flow and NICo Core for one device (kind:
// missing_in_actual, missing_in_expected or mismatch; fields: the
// mismatched fields), or no longer finds.
type DriftData struct {
	Kind          string    `json:"kind"`
	ComponentType string    `json:"component_type"`
	ExternalID    string    `json:"external_id,omitempty"`
	MAC           string    `json:"mac,omitempty"`
	Fields        []string  `json:"fields,omitempty"`
	CheckedAt     time.Time `json:"checked_at"`
}

// IsolationData is a rack isolation request's own payload
// (flow.rack.isolation_requested): the isolation, the rack's power feed and
// coolant loop, which request of the isolation this is (send: 1, then 2, 3
// … while it is not acknowledged; every send is a new event with the same
// isolation ID), and how to acknowledge it.
type IsolationData struct {
	ID           string    `json:"id"`
	Tier         string    `json:"tier"`
	Reason       string    `json:"reason"`
	PowerFeed    string    `json:"power_feed,omitempty"`
	CoolantLoop  string    `json:"coolant_loop,omitempty"`
	ComponentIDs []string  `json:"component_ids,omitempty"`
	ReportID     string    `json:"report_id,omitempty"`
	ObservedAt   time.Time `json:"observed_at"`
	RequestedAt  time.Time `json:"requested_at"`
	Send         int       `json:"send"`
	Acknowledge  string    `json:"acknowledge"`
}

// Event is one thing that happened, as Emit takes it.
type Event struct {
	// Type is a catalogue type.
	Type Type
	// RackID, when set, is the subject the event is ordered in ("rack/<id>")
	// and what scoped subscriptions match; nil: a site-wide event.
	RackID *uuid.UUID
	// DedupeKey, when set, makes one fact one event: a second Emit with
	// the same key (however many transactions) writes nothing.
	DedupeKey string
	// Data is the payload; Emit fills Version and Site.
	Data Data
	// Time is when it happened (zero: now).
	Time time.Time
}

// subject is the event's ordering key.
func (e Event) subject() string {
	if e.RackID == nil {
		return "site"
	}
	return "rack/" + e.RackID.String()
}

// Errors of notify; the handler maps each to one Connect code.
var (
	// ErrInvalid marks bad input; *FieldError wraps it.
	ErrInvalid = errors.New("notify: invalid argument")
	// ErrNotFound: no subscription (or delivery) has the ID.
	ErrNotFound = errors.New("notify: not found")
	// ErrNoKey: no data encryption key is configured, so no secret can
	// be sealed or opened.
	ErrNoKey = errors.New("notify: webhooks need a data encryption key (set FLOW_DATA_ENCRYPTION_KEY_PATH)")
	// ErrRefused: the target address is refused by the SSRF guard.
	ErrRefused = errors.New("notify: target refused")
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
