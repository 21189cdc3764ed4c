package operations

import (
	"context"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// The task manager's API for event rules (operations/eventrule), which
// reach it only through exported names.

// PayloadOperation returns the integer enum of code within its operation
// family t, as Payload.Operation carries it: 0 for a code t does not have.
func PayloadOperation(t OperationType, code OperationCode) int {
	switch t {
	case OperationTypePowerControl:
		return powerOperations[code]
	case OperationTypeFirmwareControl:
		return firmwareOperations[code]
	}
	return 0
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
