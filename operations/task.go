package operations

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
)

// TaskStatus is a task's lifecycle state (spec/execution.md §5).
type TaskStatus string

// Task statuses. Waiting, pending and running are unfinished ("active");
// completed, failed and terminated are final.
const (
	TaskWaiting    TaskStatus = "waiting"
	TaskPending    TaskStatus = "pending"
	TaskRunning    TaskStatus = "running"
	TaskCompleted  TaskStatus = "completed"
	TaskFailed     TaskStatus = "failed"
	TaskTerminated TaskStatus = "terminated"
)

// Finished reports whether s is final.
func (s TaskStatus) Finished() bool {
	return s == TaskCompleted || s == TaskFailed || s == TaskTerminated
}

// Task messages (spec §5).
const (
	msgPending   = "Pending"
	msgQueued    = "Queued: waiting for rack to become available"
	msgPromoted  = "Promoted: no conflicting active tasks"
	msgExpired   = "Expired: queue timeout reached"
	msgRunning   = "Running"
	msgSucceeded = "Succeeded"
	msgCancelled = "Cancelled by user"
)

// Queue limits.
const (
	// DefaultQueueTimeout is how long a queued task waits when the request
	// does not say.
	DefaultQueueTimeout = time.Hour
	// MaxWaitingPerRack bounds each rack's queue.
	MaxWaitingPerRack = 5
	// maxMessage bounds a task message (first line of an error).
	maxMessage = 512
)

// Errors of submitting and cancelling tasks. Each maps to one gRPC code in
// handler.go.
var (
	// ErrInvalidRequest wraps a bad request; the message names the field.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrTaskNotFound means no task has the given ID.
	ErrTaskNotFound = errors.New("task not found")
	// ErrConflict means a rack already has a conflicting active task and the
	// request asked to reject rather than queue.
	ErrConflict = errors.New("rack already has a conflicting task")
	// ErrQueueFull means a rack's waiting queue is full.
	ErrQueueFull = errors.New("rack waiting queue is full")
	// ErrNotApplicable means the request cannot run on what it targets: no
	// components, components unknown to the backends, a rule with no step
	// for the targeted types, or a backend lacking a capability.
	ErrNotApplicable = errors.New("operation not applicable to its targets")
	// ErrNotCancellable means the task already completed or failed.
	ErrNotCancellable = errors.New("task cannot be cancelled")
	// ErrRuleNotRunnable means the engine refuses the plan of the rule for
	// these targets (a rule stored before rules were checked for it, or a
	// rack with more components of a type than rules are checked for).
	ErrRuleNotRunnable = errors.New("operation rule cannot run on these targets")
	// ErrNoEncryptionKey means a request carries firmware credentials but no
	// data-encryption key is configured.
	ErrNoEncryptionKey = errors.New("data encryption cipher is not configured (set FLOW_DATA_ENCRYPTION_KEY_PATH)")
)

func invalidRequest(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidRequest, field, fmt.Sprintf(format, args...))
}

// Task is one unit of work on one rack.
type Task struct {
	ID             uuid.UUID
	OperationType  OperationType
	OperationCode  OperationCode
	RackID         uuid.UUID
	ComponentIDs   []uuid.UUID // every component in scope
	Description    string
	Status         TaskStatus
	Message        string
	AppliedRuleID  *uuid.UUID
	RuleName       string
	SubmittedBy    string // Request.SubmittedBy; "" before it was recorded
	RunID          *int64
	QueueExpiresAt *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	StartedAt      *time.Time
	FinishedAt     *time.Time
	// Report is the task report (spec §10) as JSON; live while the task
	// runs, final once it ends. Empty when not asked for.
	Report json.RawMessage
}

// Payload is a task's operation payload, stored as the task's information
// (spec §1). Operation is the integer enum of the operation family.
type Payload struct {
	Operation              int                `json:"operation,omitempty"`
	Forced                 bool               `json:"forced,omitempty"`
	RuleID                 string             `json:"rule_id,omitempty"`
	OverrideReadinessCheck bool               `json:"override_readiness_check,omitempty"`
	OverrideVersionCheck   bool               `json:"override_version_check,omitempty"`
	TargetVersion          string             `json:"target_version,omitempty"`
	StartTime              int64              `json:"start_time,omitempty"`
	EndTime                int64              `json:"end_time,omitempty"`
	SubTargets             []string           `json:"sub_targets,omitempty"`
	OpCode                 string             `json:"op_code,omitempty"`
	AuthenticationData     *firmware.Envelope `json:"authentication_data,omitempty"`
	// Leak marks a leak response (operations/leak.go).
	Leak *LeakTrigger `json:"leak,omitempty"`
}

// powerOperations numbers the power codes as the payload's integer enum.
var powerOperations = map[OperationCode]int{
	CodePowerOn: 1, CodeForcePowerOn: 2, CodePowerOff: 3, CodeForcePowerOff: 4,
	CodeRestart: 5, CodeForceRestart: 6, CodeWarmReset: 7, CodeColdReset: 8,
}

// firmwareOperations numbers the firmware codes.
var firmwareOperations = map[OperationCode]int{CodeUpgrade: 1, CodeDowngrade: 2, CodeRollback: 3}

// Request is an operation request: what to do, where, and how to behave on
// conflict. It becomes one task per targeted rack.
type Request struct {
	Type        OperationType
	Code        OperationCode
	Targets     inventory.TargetSpec
	Description string
	// Queue makes a conflicting request wait (WAITING) instead of failing.
	Queue        bool
	QueueTimeout time.Duration // ≤ 0: DefaultQueueTimeout
	// RuleID forces a rule; uuid.Nil resolves one (spec §7.4).
	RuleID  uuid.UUID
	Payload Payload
	// Auth is firmware download credentials, sealed before anything is
	// written.
	Auth firmware.AuthData
	// RequiredRackID, when set, requires the targets to resolve to exactly
	// this rack (schedules, operation runs).
	RequiredRackID uuid.UUID
	// IdempotencyKey returns the existing task for a repeated submission;
	// it requires RequiredRackID.
	IdempotencyKey string
	TriggerType    string
	TriggerID      string
	// SubmittedBy is who the tasks are recorded as submitted by
	// (docs/security.md): the handlers set caller.Identity(ctx); a
	// schedule, an operation run or an event rule firing sets the identity
	// that created it (stored when it was created), with TriggerType and
	// TriggerID saying which one fired.
	SubmittedBy string
	// Preempt admits the request as a leak response: it never waits behind
	// another task (call Tasks.Preempt first to stop the work on what it
	// covers). It requires Payload.Leak.
	Preempt bool

	// preview plans without the leak check's refusal (Tasks.Preview).
	preview bool
}

// typeTargets is how the backends know one type's components of a task.
type typeTargets struct {
	// ByMAC is set when some component of the type lacks a backend ID, so
	// the whole type is addressed by BMC MAC (spec §8.2).
	ByMAC bool     `json:"by_mac,omitempty"`
	IDs   []string `json:"ids"`
}

// firstLine returns the first line of s, at most maxMessage bytes.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > maxMessage {
		s = s[:maxMessage]
	}
	return s
}
