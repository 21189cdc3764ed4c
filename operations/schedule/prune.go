package schedule

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// PinnedTasks returns the last task of every scope entry (the overlap
// policy reads it): task pruning keeps them.
func (s *Service) PinnedTasks(ctx context.Context) ([]uuid.UUID, error) {
	ids, err := s.q.SchedulePinnedTasks(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("last tasks of schedules: %w", err)
	}
	return ids, nil
}
