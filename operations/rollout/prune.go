package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/operations/rollout/internal/dbsqlc"
)

// PruneFinished deletes up to batch operation runs that finished
// (completed, with failures, cancelled or failed) before before, oldest
// first, with their targets; a pending, running or paused run is never
// touched. It returns how many runs and targets went.
func (s *Service) PruneFinished(ctx context.Context, before time.Time, batch int) (runs, targets int64, err error) {
	row, err := s.q.OperationRunPruneBatch(ctx, s.pool, dbsqlc.OperationRunPruneBatchParams{Before: before, RowLimit: int32(batch)})
	if err != nil {
		return 0, 0, fmt.Errorf("prune operation runs: %w", err)
	}
	return row.Runs, row.Targets, nil
}

// PinnedTasks returns the tasks of the targets of runs not finished: task
// pruning keeps them.
func (s *Service) PinnedTasks(ctx context.Context) ([]uuid.UUID, error) {
	ids, err := s.q.OperationRunPinnedTasks(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("tasks of active operation runs: %w", err)
	}
	return ids, nil
}

// OldestRun returns the creation time of the oldest operation run kept
// (ok false: none).
func (s *Service) OldestRun(ctx context.Context) (time.Time, bool, error) {
	at, err := s.q.OperationRunOldestCreated(ctx, s.pool)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("oldest operation run: %w", err)
	}
	return at, true, nil
}

// RunCounts is what the metrics read of operation runs at a scrape.
type RunCounts struct {
	Runs    map[string]int64 // every run kept, by status
	Targets map[string]int64 // targets of unfinished runs, by status
	Phases  []RunPhase       // unfinished runs (at most 100, oldest first)
}

// RunPhase is an unfinished run's current phase.
type RunPhase struct {
	ID    uuid.UUID
	Name  string
	Phase int
}

// Counts returns the runs by status, the targets of unfinished runs by
// status and the unfinished runs' phases.
func (s *Service) Counts(ctx context.Context) (RunCounts, error) {
	// Every status is present, at zero when no run has it, so the gauges
	// have their series from the first scrape.
	st := RunCounts{Runs: map[string]int64{}, Targets: map[string]int64{}}
	for _, r := range []RunStatus{RunPending, RunRunning, RunPaused, RunCompleted, RunCompletedWithFailures, RunCancelled, RunFailed} {
		st.Runs[string(r)] = 0
	}
	for _, t := range []TargetStatus{TargetPending, TargetClaimed, TargetBlocked, TargetSubmitted, TargetCompleted, TargetFailed, TargetTerminated, TargetSkipped} {
		st.Targets[string(t)] = 0
	}
	runs, err := s.q.OperationRunCountByStatus(ctx, s.pool)
	if err != nil {
		return st, fmt.Errorf("count operation runs: %w", err)
	}
	for _, r := range runs {
		st.Runs[r.Status] = r.N
	}
	targets, err := s.q.OperationRunActiveTargetCountByStatus(ctx, s.pool)
	if err != nil {
		return st, fmt.Errorf("count operation run targets: %w", err)
	}
	for _, r := range targets {
		st.Targets[r.Status] = r.N
	}
	phases, err := s.q.OperationRunActivePhases(ctx, s.pool)
	if err != nil {
		return st, fmt.Errorf("operation run phases: %w", err)
	}
	for _, p := range phases {
		st.Phases = append(st.Phases, RunPhase{ID: p.ID, Name: p.Name, Phase: int(p.CurrentPhaseIndex)})
	}
	return st, nil
}
