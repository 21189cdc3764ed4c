package operations

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/firmware"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// The task manager's API for operation runs (operations/rollout), beside
// Submit, Cancel and the task reads.

// TaskEndFunc is an end-of-task hook: it is called with the ended task's ID
// inside the transaction of the task's last checkpoint, after the task's
// end is recorded and its rack's waiting tasks are promoted. An error rolls
// the whole checkpoint back.
type TaskEndFunc func(ctx context.Context, tx pgx.Tx, taskID uuid.UUID) error

// OnTaskEnd registers fn as an end-of-task hook, called by RunEnded after
// the hooks registered before it. Register before the engine starts; it is
// not safe to call concurrently with RunEnded.
func (t *Tasks) OnTaskEnd(fn TaskEndFunc) {
	t.endHooks = append(t.endHooks, fn)
}

// FirmwareOperation returns the payload's integer for firmware code c
// (Payload.Operation: upgrade 1, downgrade 2, rollback 3), 0 for any other
// code.
func FirmwareOperation(c OperationCode) int { return firmwareOperations[c] }

// ConnectError maps an error of the task manager (tasks, rules, inventory,
// backends) to the Connect error the task methods answer with; other errors
// are returned unchanged.
func ConnectError(err error) error { return taskError(err) }

// AuthFromProto converts firmware credentials as the firmware methods do
// (spec §12): absent, an empty shared value or per-component values that
// are all empty mean none; a malformed value, or credentials for a dpu-only
// update, is a Connect InvalidArgument error.
func AuthFromProto(d *flowv1.FirmwareAuthenticationData, subTargets []string) (firmware.AuthData, error) {
	return authFromProto(d, subTargets)
}
