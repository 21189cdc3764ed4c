package operations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// PruneCount is what one pruning batch of tasks deleted.
type PruneCount struct {
	Tasks, Runs, Steps int64
}

// PruneFinished deletes, in one transaction, up to batch finished tasks
// (completed, failed or terminated) that ended before before, oldest first,
// with their engine runs, steps and reports (the report is the task's own
// column). It never touches an active task, nor a task in keep: the tasks
// a live schedule, operation run or event execution still points to. A
// task another transaction holds is skipped for this batch.
func (t *Tasks) PruneFinished(ctx context.Context, before time.Time, batch int, keep []uuid.UUID) (PruneCount, error) {
	var c PruneCount
	if keep == nil {
		keep = []uuid.UUID{}
	}
	err := db.BeginFunc(ctx, t.pool, func(ctx context.Context, tx pgx.Tx) error {
		runIDs, err := t.q.TaskPruneBatch(ctx, tx, dbsqlc.TaskPruneBatchParams{Before: &before, Keep: keep, RowLimit: int32(batch)})
		if err != nil {
			return fmt.Errorf("prune tasks: %w", err)
		}
		c.Tasks = int64(len(runIDs))
		ids := make([]int64, 0, len(runIDs))
		for _, id := range runIDs {
			if id != nil {
				ids = append(ids, *id)
			}
		}
		c.Runs, c.Steps, err = t.engine.DeleteEndedRuns(ctx, tx, ids)
		return err
	})
	if err != nil {
		return PruneCount{}, err
	}
	return c, nil
}

// OldestTask returns the creation time of the oldest task kept (ok false:
// none).
func (t *Tasks) OldestTask(ctx context.Context) (time.Time, bool, error) {
	at, err := t.q.TaskOldestCreated(ctx, t.pool)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("oldest task: %w", err)
	}
	return at, true, nil
}
