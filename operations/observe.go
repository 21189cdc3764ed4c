package operations

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/db"
)

// TaskEventKind is a point of a task's life.
type TaskEventKind string

// Task lifecycle points, as TaskObserver hears of them.
const (
	TaskSubmitted TaskEventKind = "submitted" // written, pending or waiting
	TaskStarted   TaskEventKind = "started"   // its first backend call
	TaskEnded     TaskEventKind = "ended"     // completed, failed or terminated
)

// TaskEvent is one lifecycle point of a task, told once the transaction
// that recorded it has committed.
type TaskEvent struct {
	Kind      TaskEventKind
	TaskID    uuid.UUID
	Rack      string // the rack's name, else its ID
	Operation OperationCode
	Type      OperationType
	Status    TaskStatus // after the event
	Message   string
	// SubmittedAt is when the task was written; At when the event happened.
	SubmittedAt, At time.Time
	// LeakObservedAt is, for a leak response, when its leak was first
	// observed (zero otherwise): at TaskStarted (its first power-off call)
	// and TaskEnded.
	LeakObservedAt time.Time
}

// TaskObserver hears of task lifecycle points, for metrics and logs. It
// must return quickly.
type TaskObserver interface {
	TaskEvent(ctx context.Context, ev TaskEvent)
}

// observe tells the observer of ev once ctx's transaction commits (see
// db.AfterCommit).
func (t *Tasks) observe(ctx context.Context, ev TaskEvent) {
	if t.obs == nil {
		return
	}
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	db.AfterCommit(ctx, func() { t.obs.TaskEvent(ctx, ev) })
}

// runLabels are the labels of a task's engine run: River UI shows them on
// every job of the run, and logs and traces carry them.
func runLabels(taskID uuid.UUID, rack string, code OperationCode) map[string]string {
	return map[string]string{"task_id": taskID.String(), "rack": rack, "operation": string(code)}
}

// CountActive returns how many tasks are waiting, pending and running now.
func (t *Tasks) CountActive(ctx context.Context) (map[TaskStatus]int, error) {
	rows, err := t.q.TaskCountActive(ctx, t.pool)
	if err != nil {
		return nil, fmt.Errorf("count active tasks: %w", err)
	}
	n := map[TaskStatus]int{TaskWaiting: 0, TaskPending: 0, TaskRunning: 0}
	for _, r := range rows {
		n[TaskStatus(r.Status)] = int(r.N)
	}
	return n, nil
}
