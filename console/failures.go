package console

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailedTask is one task that failed, with its rack and its error (the
// first line of what failed it, components named).
type FailedTask struct {
	ID, RackID, RackName, Operation, Error string
	FinishedAt                             time.Time
}

// failedWindow is how far back the overview looks for failed tasks.
const failedWindow = 24 * time.Hour

// failedShown is how many failed tasks the overview lists.
const failedShown = 20

// failures is the overview's failed tasks: how many failed in the last
// failedWindow, by operation, and the newest failedShown of them.
type failures struct {
	Count       int
	ByOperation []count
	Tasks       []FailedTask
}

// failedTasks reads the tasks that failed in the last failedWindow,
// newest first (task_finished_at).
func (c *Console) failedTasks(ctx context.Context) (failures, error) {
	var f failures
	rows, err := c.pool.Query(ctx, `SELECT operation_code, count(*) FROM task
		WHERE status = 'failed' AND finished_at > now() - $1::interval GROUP BY 1 ORDER BY 2 DESC, 1`, failedWindow.String())
	if err != nil {
		return f, fmt.Errorf("count failed tasks: %w", err)
	}
	f.ByOperation, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (count, error) {
		var n count
		err := row.Scan(&n.Name, &n.N)
		return n, err
	})
	if err != nil {
		return f, fmt.Errorf("count failed tasks: %w", err)
	}
	for _, n := range f.ByOperation {
		f.Count += n.N
	}
	if f.Count == 0 {
		return f, nil
	}
	rows, err = c.pool.Query(ctx, `
		SELECT t.id::text, t.rack_id::text, coalesce(r.name, ''), t.operation_code, t.message, t.finished_at
		FROM task t LEFT JOIN rack r ON r.id = t.rack_id
		WHERE t.status = 'failed' AND t.finished_at > now() - $1::interval
		ORDER BY t.finished_at DESC, t.id DESC LIMIT $2`, failedWindow.String(), failedShown)
	if err != nil {
		return f, fmt.Errorf("read failed tasks: %w", err)
	}
	f.Tasks, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailedTask, error) {
		var t FailedTask
		err := row.Scan(&t.ID, &t.RackID, &t.RackName, &t.Operation, &t.Error, &t.FinishedAt)
		return t, err
	})
	if err != nil {
		return f, fmt.Errorf("read failed tasks: %w", err)
	}
	return f, nil
}
