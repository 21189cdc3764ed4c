package eventrule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/operations/eventrule/internal/dbsqlc"
)

// PruneEvents deletes up to batch events last reported before before whose
// every execution has ended (skipped, completed or failed), oldest first,
// with their executions; an event with an execution pending, running or
// deferred is never touched. It returns how many events and executions
// went.
func (s *Service) PruneEvents(ctx context.Context, before time.Time, batch int) (events, executions int64, err error) {
	row, err := s.q.EventPruneBatch(ctx, s.pool, dbsqlc.EventPruneBatchParams{Before: before, RowLimit: int32(batch)})
	if err != nil {
		return 0, 0, fmt.Errorf("prune events: %w", err)
	}
	return row.Events, row.Executions, nil
}

// PinnedTasks returns the tasks of executions not ended: task pruning
// keeps them.
func (s *Service) PinnedTasks(ctx context.Context) ([]uuid.UUID, error) {
	ids, err := s.q.ExecutionPinnedTasks(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("tasks of open event executions: %w", err)
	}
	return ids, nil
}

// OldestEvent returns when the least recently reported event kept was last
// reported (ok false: none).
func (s *Service) OldestEvent(ctx context.Context) (time.Time, bool, error) {
	at, err := s.q.EventOldestObserved(ctx, s.pool)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("oldest event: %w", err)
	}
	return at, true, nil
}
