package operations_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/opstest"
)

// TestRunsEndedTogether: runs ending in one transaction (a grouped
// checkpoint) finish their tasks, each with its own status and report,
// and promote the tasks queued on each of their racks; a run that is not
// a task's is ignored, and the end-of-task hooks see every task at once.
func TestRunsEndedTogether(t *testing.T) {
	t.Parallel()
	b := setupTasks(t, nil)
	ctx := context.Background()
	racks := []uuid.UUID{b.rack.ID, b.m.AddRack(t, 2).ID}
	var running, queued []uuid.UUID
	for _, rack := range racks {
		req := opstest.PowerOn(b.rack)
		req.Targets.Racks[0].Rack.ID = rack
		ids, err := b.submit(t, req)
		require.NoError(t, err)
		running = append(running, ids...)
		req.Queue = true
		ids, err = b.submit(t, req)
		require.NoError(t, err)
		queued = append(queued, ids...)
	}
	tasks, err := b.tasks.Get(ctx, append(running, queued...))
	require.NoError(t, err)
	byID := map[uuid.UUID]operations.Task{}
	for _, task := range tasks {
		byID[task.ID] = task
	}
	for _, id := range queued {
		require.Equal(t, operations.TaskWaiting, byID[id].Status)
	}

	var hooked []uuid.UUID
	b.tasks.OnTaskEnd(func(_ context.Context, _ pgx.Tx, ids []uuid.UUID) error {
		hooked = append(hooked, ids...)
		return nil
	})
	runs := []engine.RunSummary{
		{ID: engine.RunID(*byID[running[0]].RunID), Owner: running[0].String(), State: engine.StateTerminated, Error: "cancelled"},
		{ID: engine.RunID(*byID[running[1]].RunID), Owner: running[1].String(), State: engine.StateFailed, Error: "power shelf unreachable"},
		{ID: 1 << 40, Owner: "not-a-task", State: engine.StateCompleted},
	}
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return b.tasks.RunsEnded(ctx, tx, runs)
	}))
	require.ElementsMatch(t, running, hooked, "the hooks see both tasks, in one call")

	tasks, err = b.tasks.Get(ctx, append(running, queued...))
	require.NoError(t, err)
	for _, task := range tasks {
		byID[task.ID] = task
	}
	require.Equal(t, operations.TaskTerminated, byID[running[0]].Status)
	require.Equal(t, "Cancelled by user", byID[running[0]].Message)
	require.Equal(t, operations.TaskFailed, byID[running[1]].Status)
	require.Equal(t, "power shelf unreachable", byID[running[1]].Message)
	for _, id := range running {
		require.NotEmpty(t, byID[id].Report, "task %s has its final report", id)
	}
	for _, id := range queued {
		require.Equal(t, operations.TaskPending, byID[id].Status, "the task queued on each rack is promoted")
		require.NotNil(t, byID[id].RunID)
	}

	// Ending them again changes nothing: the tasks are finished.
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return b.tasks.RunsEnded(ctx, tx, runs[:2])
	}))
	tasks, err = b.tasks.Get(ctx, running)
	require.NoError(t, err)
	for _, task := range tasks {
		require.Equal(t, byID[task.ID].Status, task.Status)
		require.Equal(t, byID[task.ID].Message, task.Message)
	}
}
