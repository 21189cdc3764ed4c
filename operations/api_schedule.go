package operations

import (
	"context"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/firmware"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// This file is the task manager's API for operations/schedule beyond
// Submit: what a schedule needs to check, convert and map as a direct
// submission would, and the one read of task states its overlap policy
// makes. The task manager imports nothing of schedule.

// ValidateRequest checks req as Submit does before it resolves anything:
// the operation type and code, an idempotency key's required rack and the
// queue timeout. Errors are ErrInvalidRequest naming the field.
func ValidateRequest(req Request) error { return validateRequest(req) }

// PayloadOperation is the payload's integer enum of a power or firmware
// operation code (Payload.Operation): 0 for the other codes.
func PayloadOperation(code OperationCode) int {
	if n, ok := powerOperations[code]; ok {
		return n
	}
	return firmwareOperations[code]
}

// AuthFromProto converts wire firmware credentials as UpgradeFirmware does
// (spec §12): absent, an empty shared value or per-component values that
// are all empty mean none. Errors are InvalidArgument connect errors.
func AuthFromProto(d *flowv1.FirmwareAuthenticationData, subTargets []string) (firmware.AuthData, error) {
	return authFromProto(d, subTargets)
}

// TaskError maps the task manager's errors (task, rule, inventory and
// backend errors) to connect errors, as the task methods answer them; an
// error it does not know passes through for app's interceptor to log and
// hide.
func TaskError(err error) error { return taskError(err) }

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
