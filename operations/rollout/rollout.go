package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/operations"
)

// Errors of operation runs. handler code maps them: ErrRunInvalid →
// InvalidArgument, ErrRunNotFound → NotFound, ErrRunState →
// FailedPrecondition.
var (
	// ErrRunInvalid is matched by every *RunError: a bad create or control
	// request.
	ErrRunInvalid = errors.New("invalid operation run request")
	// ErrRunNotFound means no operation run has the given ID (also for an
	// unknown excluded run; the message names the field).
	ErrRunNotFound = errors.New("operation run not found")
	// ErrRunState means the control is not legal in the run's state.
	ErrRunState = errors.New("operation run state does not allow this")
)

// RunError is a rejected operation-run request; Field names the request
// field at fault. It matches ErrRunInvalid.
type RunError struct {
	Field string
	Msg   string
}

// Error returns "field: message".
func (e *RunError) Error() string { return e.Field + ": " + e.Msg }

// Is reports whether target is ErrRunInvalid.
func (e *RunError) Is(target error) bool { return target == ErrRunInvalid }

func runInvalid(field, format string, args ...any) error {
	return &RunError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// RunStatus is an operation run's status (spec/orchestration.md §2.4).
type RunStatus string

// Run statuses.
const (
	RunPending               RunStatus = "pending"
	RunRunning               RunStatus = "running"
	RunPaused                RunStatus = "paused"
	RunCompleted             RunStatus = "completed"
	RunCompletedWithFailures RunStatus = "completed_with_failures"
	RunCancelled             RunStatus = "cancelled"
	RunFailed                RunStatus = "failed"
)

// Terminal reports whether s is final.
func (s RunStatus) Terminal() bool {
	switch s {
	case RunCompleted, RunCompletedWithFailures, RunCancelled, RunFailed:
		return true
	}
	return false
}

// RunReason explains a run's status, mainly a pause.
type RunReason string

// Run status reasons.
const (
	ReasonNone                 RunReason = "none"
	ReasonOperatorPaused       RunReason = "operator_paused"
	ReasonPhaseGate            RunReason = "phase_gate"
	ReasonSafetyGate           RunReason = "safety_gate"
	ReasonConflictRetryTimeout RunReason = "conflict_retry_timeout"
)

// TargetStatus is a run target's status (§2.5).
type TargetStatus string

// Target statuses. Claimed is never committed: a target is claimed and its
// child task written in one transaction, so it is seen submitted, blocked
// or failed.
const (
	TargetPending    TargetStatus = "pending"
	TargetClaimed    TargetStatus = "claimed"
	TargetBlocked    TargetStatus = "blocked"
	TargetSubmitted  TargetStatus = "submitted"
	TargetCompleted  TargetStatus = "completed"
	TargetFailed     TargetStatus = "failed"
	TargetTerminated TargetStatus = "terminated"
	TargetSkipped    TargetStatus = "skipped"
)

// Terminal reports whether s is final.
func (s TargetStatus) Terminal() bool {
	switch s {
	case TargetCompleted, TargetFailed, TargetTerminated, TargetSkipped:
		return true
	}
	return false
}

// Selector picks the share of the candidate scope a run targets.
type Selector struct {
	Percentage int    `json:"percentage"`
	Seed       string `json:"seed"`
}

// Gate scopes and kinds.
const (
	GateScopeCurrentPhase  = "current_phase"
	GateScopeCumulativeRun = "cumulative_run"
	GateFailureRate        = "failure_rate"
	GateFailureCount       = "failure_count"
)

// Gate is one safety gate: a failure rate (Threshold in percent of the
// planned targets in scope) or a failure count.
type Gate struct {
	Kind      string `json:"kind"`
	Scope     string `json:"scope"`
	Threshold int    `json:"threshold"`
}

// ConflictRetry is the rack-conflict retry policy (§2.8).
type ConflictRetry struct {
	RetryTimeout time.Duration `json:"retry_timeout"`
	InitialDelay time.Duration `json:"initial_retry_delay"`
	MaxDelay     time.Duration `json:"max_retry_delay"`
}

// Conflict-retry defaults (§2.2).
const (
	DefaultRetryTimeout = time.Hour
	DefaultInitialDelay = 30 * time.Second
	DefaultMaxDelay     = 5 * time.Minute
)

// Ordering kinds and physical-location strategies.
const (
	OrderingRandom              = "random"
	OrderingPhysicalLocation    = "physical_location"
	StrategyRowByRow            = "row_by_row"
	StrategyOnePerRowRoundRobin = "one_per_row_round_robin"
)

// Ordering is the order targets run in.
type Ordering struct {
	Kind     string `json:"kind"`
	Seed     string `json:"seed,omitempty"`
	Strategy string `json:"strategy,omitempty"`
}

// Phase plan kinds.
const (
	PhasesEqual      = "equal"
	PhasesPercentage = "percentage"
	PhasesCount      = "count"
)

// PhasePlan is how targets are split into phases.
type PhasePlan struct {
	Kind        string `json:"kind"`
	Count       int    `json:"phase_count,omitempty"`
	Percentages []int  `json:"percentages,omitempty"`
	Counts      []int  `json:"counts,omitempty"`
}

// RunOptions are a run's execution options, fully defaulted.
type RunOptions struct {
	MaxConcurrent int           `json:"max_concurrent_targets"`
	Gates         []Gate        `json:"gates"`
	Conflict      ConflictRetry `json:"conflict_retry"`
	Ordering      Ordering      `json:"ordering"`
	Phases        PhasePlan     `json:"phases"`
	AutoAdvance   bool          `json:"auto_advance"`
}

// RunTemplate is the operation each target's child task runs (a firmware
// upgrade), and the candidate scope. TargetSpec and ComponentFilter are
// kept as the wire JSON (echoed back on reads); Auth is the sealed
// credentials, never plaintext.
type RunTemplate struct {
	TargetSpec             json.RawMessage    `json:"target_spec,omitempty"`
	ComponentFilter        json.RawMessage    `json:"default_scope_component_filter,omitempty"`
	ExcludeRunIDs          []uuid.UUID        `json:"exclude_operation_run_ids,omitempty"`
	TargetVersion          *string            `json:"target_version,omitempty"`
	StartTime              int64              `json:"start_time,omitempty"`
	EndTime                int64              `json:"end_time,omitempty"`
	Description            string             `json:"description,omitempty"`
	QueueOptions           json.RawMessage    `json:"queue_options,omitempty"`
	RuleID                 *uuid.UUID         `json:"rule_id,omitempty"`
	SubTargets             []string           `json:"sub_targets,omitempty"`
	OverrideReadinessCheck bool               `json:"override_readiness_check,omitempty"`
	OverrideVersionCheck   bool               `json:"override_version_check,omitempty"`
	Auth                   *firmware.Envelope `json:"authentication_data,omitempty"`
}

// Run is an operation run.
type Run struct {
	ID                uuid.UUID
	Name, Description string
	Status            RunStatus
	Reason            RunReason
	Message           string
	Selector          Selector
	Options           RunOptions
	Template          RunTemplate
	Type              operations.OperationType
	Code              operations.OperationCode
	CurrentPhase      int
	TotalPhases       int
	CreatedAt         time.Time
	UpdatedAt         time.Time
	StartedAt         *time.Time
	FinishedAt        *time.Time
	Stats             *RunStats // only when asked for
	// CreatedBy is the identity that created the run; its child tasks are
	// submitted as it (operations.Request.SubmittedBy). "" for runs created before
	// Flow recorded it.
	CreatedBy string
}

// PhaseStats counts a set of phases' targets.
type PhaseStats struct {
	Phase                                  int
	Selected                               int
	Completed, Failed, Terminated, Skipped int
}

// RunStats are a run's derived counts: its current phase, and every phase
// up to and including it.
type RunStats struct {
	Current, Cumulative PhaseStats
}

// Target is one materialized rack target of a run.
type Target struct {
	ID             uuid.UUID
	RunID          uuid.UUID
	RackID         uuid.UUID
	RackExternalID string
	Sequence       int
	Phase          int
	TaskID         *uuid.UUID
	Status         TargetStatus
	Message        string
	Components     map[operations.ComponentType][]uuid.UUID
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// retryState is a target's conflict-retry bookkeeping (§2.8).
type retryState struct {
	BlockedSince *time.Time `json:"blocked_since,omitempty"`
	Attempts     int        `json:"attempts,omitempty"`
	LastDelay    float64    `json:"last_retry_delay_seconds,omitempty"`
}
