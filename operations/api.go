package operations

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// This file is the task manager's API for its feature packages
// (operations/schedule, operations/rollout, operations/eventrule), beside
// Submit, Cancel and the task reads: what they need to check, convert and
// map as a direct request would, the end-of-task hook, and the reads of
// task state they make. The task manager imports none of them.

// ValidateRequest checks req as Submit does before it resolves anything:
// the operation type and code, an idempotency key's required rack and the
// queue timeout. Errors are ErrInvalidRequest naming the field.
func ValidateRequest(req Request) error { return validateRequest(req) }

// PayloadOperation returns the integer enum of code within its operation
// family t, as Payload.Operation carries it (power on 1 … cold reset 8;
// upgrade 1, downgrade 2, rollback 3): 0 for a code t does not have.
func PayloadOperation(t OperationType, code OperationCode) int {
	switch t {
	case OperationTypePowerControl:
		return powerOperations[code]
	case OperationTypeFirmwareControl:
		return firmwareOperations[code]
	}
	return 0
}

// AuthFromProto converts wire firmware credentials as the firmware methods
// do (spec §12): absent, an empty shared value or per-component values that
// are all empty mean none; a malformed value, or credentials for a dpu-only
// update, is a Connect InvalidArgument error.
func AuthFromProto(d *flowv1.FirmwareAuthenticationData, subTargets []string) (firmware.AuthData, error) {
	return authFromProto(d, subTargets)
}

// ParseUUID reads a required UUID field of a request, answering a Connect
// InvalidArgument error that names the field when it is empty or malformed.
func ParseUUID(field string, u *flowv1.UUID) (uuid.UUID, error) { return parseUUID(field, u) }

// OperationTypeFromProto reads a wire operation type as the rule methods
// do: power or firmware control, otherwise a Connect InvalidArgument error
// that names field.
func OperationTypeFromProto(field string, t flowv1.OperationType) (OperationType, error) {
	return operationTypeFromProto(field, t)
}

// OperationTypeToProto maps a type to the wire enum; types the enum lacks
// (bring_up, decommission, inject_expectation) become UNKNOWN.
func OperationTypeToProto(t OperationType) flowv1.OperationType { return operationTypeToProto(t) }

// Timestamp converts an optional time to its wire form (nil stays nil).
func Timestamp(t *time.Time) *timestamppb.Timestamp { return ts(t) }

// FirstLine returns the first line of s, at most 512 bytes: how task,
// run and execution messages are kept.
func FirstLine(s string) string { return firstLine(s) }

// TaskError maps the task manager's errors (task, rule, inventory and
// backend errors) to connect errors, as the task methods answer them; an
// error it does not know passes through for app's interceptor to log and
// hide.
func TaskError(err error) error { return taskError(err) }

// TaskEndFunc is an end-of-task hook: it is called with the IDs of the
// tasks that ended inside the transaction of their last checkpoint (one
// checkpoint can end many), after their ends are recorded and their racks'
// waiting tasks are promoted. An error rolls the whole checkpoint back.
type TaskEndFunc func(ctx context.Context, tx pgx.Tx, taskIDs []uuid.UUID) error

// OnTaskEnd registers fn as an end-of-task hook, called by RunsEnded after
// the hooks registered before it. Register before the engine starts; it is
// not safe to call concurrently with RunsEnded.
func (t *Tasks) OnTaskEnd(fn TaskEndFunc) {
	t.endHooks = append(t.endHooks, fn)
}

// WaitingEnd is a task that ended before it started: cancelled, expired
// in its queue or its approval, refused by an open leak, pre-empted, or
// unable to start.
type WaitingEnd struct {
	TaskID, RackID uuid.UUID
	Type           OperationType
	Code           OperationCode
	Status         TaskStatus
	Message        string
	SubmittedBy    string
	SubmittedAt    time.Time
}

// WaitingEndFunc is told of a task that ended before it started, through
// tx, the transaction that ends it.
type WaitingEndFunc func(ctx context.Context, tx pgx.Tx, ended WaitingEnd) error

// OnWaitingEnd adds fn to the hooks told of every task that ends before it
// started (no engine run ends it, so OnTaskEnd does not hear of it). Call
// it before serving.
func (t *Tasks) OnWaitingEnd(fn WaitingEndFunc) { t.waitingHooks = append(t.waitingHooks, fn) }

// Statuses returns the status of each task of ids that exists, read
// through dbtx; unknown IDs are left out. A query error is returned
// unwrapped.
func (t *Tasks) Statuses(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]TaskStatus, error) {
	rows, err := t.q.TaskStatusesByIDs(ctx, dbtx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]TaskStatus, len(rows))
	for _, r := range rows {
		out[r.ID] = TaskStatus(r.Status)
	}
	return out, nil
}

// TriggeredTask is one task a trigger submitted, as seen from one component
// in its scope.
type TriggeredTask struct {
	ComponentID uuid.UUID
	TriggerID   string // Request.TriggerID
	Status      TaskStatus
}

// TriggeredTasks lists, for each of componentIDs, the tasks submitted with
// triggerType and code whose scope covers it: grouped by component (in
// ascending ID order), each group newest first (created_at, then task ID,
// descending). It reads through dbtx and writes nothing.
func (t *Tasks) TriggeredTasks(ctx context.Context, dbtx db.DBTX, triggerType string, code OperationCode, componentIDs []uuid.UUID) ([]TriggeredTask, error) {
	if len(componentIDs) == 0 {
		return nil, nil
	}
	rows, err := t.q.TaskTriggeredCovering(ctx, dbtx, dbsqlc.TaskTriggeredCoveringParams{
		TriggerType: triggerType, OperationCode: string(code), IDs: componentIDs,
	})
	if err != nil {
		return nil, err
	}
	out := make([]TriggeredTask, len(rows))
	for i, r := range rows {
		out[i] = TriggeredTask{ComponentID: r.ComponentID, TriggerID: r.TriggerID, Status: TaskStatus(r.Status)}
	}
	return out, nil
}
