package schedule

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
)

// Errors of task schedules. Each maps to one gRPC code in handler.go;
// invalid input is operations.ErrInvalidRequest naming the field.
var (
	// ErrNotFound means no schedule (or scope entry) has the ID.
	ErrNotFound = errors.New("task schedule not found")
	// ErrScopeNotFound means no scope entry has the ID.
	ErrScopeNotFound = errors.New("task schedule scope not found")
	// ErrExists means another schedule has the name.
	ErrExists = errors.New("a task schedule with this name already exists")
	// ErrConsumed means a one-time schedule has fired already and
	// cannot be paused, resumed, triggered or re-armed.
	ErrConsumed = errors.New("one-time schedule has already fired")
	// ErrLastScope means the scope entry is the schedule's last one; delete
	// the schedule instead.
	ErrLastScope = errors.New("cannot remove the last scope entry of a schedule (delete the schedule instead)")
	// ErrFireFailed means a triggered firing submitted no task: every
	// scope entry was refused.
	ErrFireFailed = errors.New("no scope entry of the schedule could be submitted")
)

// SpecType says how a schedule's spec is read.
type SpecType string

// Spec types, as stored.
const (
	SpecInterval SpecType = "interval"
	SpecCron     SpecType = "cron"
	SpecOneTime  SpecType = "one-time"
)

// OverlapPolicy says what a firing does for a scope entry whose previous
// task is still active.
type OverlapPolicy string

// Overlap policies, as stored.
const (
	// OverlapSkip leaves such scope entries out of the firing; child tasks
	// reject conflicts.
	OverlapSkip OverlapPolicy = "skip"
	// OverlapQueue submits them anyway with conflict strategy QUEUE.
	OverlapQueue OverlapPolicy = "queue"
)

// Spec is when a schedule fires.
type Spec struct {
	Type SpecType
	// Spec is a Go duration, a 5-field cron line (or descriptor such as
	// @daily) or an RFC 3339 time with an offset, according to Type.
	Spec string
	// Timezone is the IANA zone a cron spec is read in ("UTC" otherwise).
	Timezone string
}

// Template is the operation a schedule submits at every firing,
// without its targets (they come from the scope entries). Firmware
// credentials are only ever held sealed (Information.AuthenticationData).
type Template struct {
	Type             operations.OperationType `json:"type"`
	Code             operations.OperationCode `json:"code"`
	Information      operations.Payload       `json:"information"`
	QueueTimeoutSecs int32                    `json:"queue_timeout_secs,omitempty"`
	RuleID           *uuid.UUID               `json:"rule_id,omitempty"`
}

// Schedule is a task schedule.
type Schedule struct {
	ID        uuid.UUID
	Name      string
	Spec      Spec
	Overlap   OverlapPolicy
	Template  Template
	Enabled   bool
	NextRunAt *time.Time
	LastRunAt *time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
	// CreatedBy is the identity that created the schedule; every task it
	// fires is submitted by it (operations.Request.SubmittedBy). "" before
	// Flow
	// recorded it.
	CreatedBy string
}

// Consumed reports whether s is a one-time schedule that has fired.
func (s Schedule) Consumed() bool { return s.Spec.Type == SpecOneTime && s.NextRunAt == nil }

// ComponentFilter narrows a scope entry to some component types or to
// specific components; the zero value (both empty) means the whole rack.
type ComponentFilter struct {
	Kind       string                     `json:"kind"` // "types" or "components"
	Types      []operations.ComponentType `json:"types,omitempty"`
	Components []uuid.UUID                `json:"components,omitempty"`
}

// Filter kinds.
const (
	filterTypes      = "types"
	filterComponents = "components"
)

// Scope is one rack of a schedule: every firing submits one task
// for it. Filter nil means every component of the rack.
type Scope struct {
	ID         uuid.UUID
	ScheduleID uuid.UUID
	RackID     uuid.UUID
	Filter     *ComponentFilter
	LastTaskID *uuid.UUID
	CreatedAt  time.Time
}

// Input is a schedule to create: its config, the operation and the
// targets that become its initial scope.
type Input struct {
	Name     string
	Spec     Spec
	Overlap  OverlapPolicy // empty: skip
	Template Template
	// Auth is firmware credentials, sealed into the template before
	// anything is written.
	Auth    firmware.AuthData
	Targets inventory.TargetSpec
	// CreatedBy is the creating caller's identity (caller.Identity).
	CreatedBy string
}

// Change is an update of a schedule's config; nil fields stay.
// Spec sets type and spec string; Timezone sets the zone (stored for cron
// schedules only).
type Change struct {
	Name     *string
	Overlap  *OverlapPolicy
	Spec     *Spec
	Timezone *string
}

// Filter selects schedules for Service.List. Limit 0 means all.
type Filter struct {
	RackID      *uuid.UUID
	EnabledOnly bool
	Offset      int
	Limit       int
}

// ScopeChanges counts what ReconcileScopes did.
type ScopeChanges struct{ Added, Removed, Updated int }

// Tasks is what schedules need of the task manager: submitting a firing's
// tasks in the firing's transaction, and the status of a scope entry's
// last task (overlap policy skip). *operations.Tasks satisfies it.
type Tasks interface {
	Submit(ctx context.Context, tx pgx.Tx, req operations.Request) ([]uuid.UUID, error)
	Statuses(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]operations.TaskStatus, error)
}

// FireScheduler arranges, through tx, for the schedule's firing at at: a
// job that calls Service.Fire(scheduleID, at) at that time. rescue
// distinguishes the safety net's re-insertions from the regular one (0).
type FireScheduler func(ctx context.Context, tx pgx.Tx, scheduleID uuid.UUID, at time.Time, rescue int) error
