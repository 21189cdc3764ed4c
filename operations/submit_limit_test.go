package operations_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// TestSubmitsWaitForASlot: with LimitSubmits(1), a second submission waits
// while the first holds the slot, gives up at its deadline with
// deadline_exceeded naming the setting, and writes nothing; the first
// completes once it can.
func TestSubmitsWaitForASlot(t *testing.T) {
	b := setupTasks(t, nil)
	ctx := context.Background()
	h := operations.NewTaskHandler(b.pool, b.tasks)
	h.LimitSubmits(1)

	// Hold the rack row: the first submission's task insert (its foreign
	// key check) waits for it, inside its transaction, holding the slot.
	hold, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer hold.Rollback(ctx)
	_, err = hold.Exec(ctx, `SELECT 1 FROM rack WHERE id = $1 FOR UPDATE`, b.rack.ID)
	require.NoError(t, err)

	first := make(chan error, 1)
	go func() {
		_, err := h.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(b.rack)})
		first <- err
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%TaskInsert%')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 10*time.Millisecond, "the first submission never reached its task insert")

	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = h.PowerOffRack(sctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(b.rack)})
	require.Equal(t, connect.CodeDeadlineExceeded, connect.CodeOf(err), "%v", err)
	require.Contains(t, err.Error(), "FLOW_MAX_CONCURRENT_SUBMITS")
	require.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond, "the second submission did not wait for the slot")

	require.NoError(t, hold.Commit(ctx))
	require.NoError(t, <-first)
	require.Equal(t, 1, b.count(), "the submission that gave up wrote a task")

	// The slot is free again.
	_, err = h.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(b.rack), QueueOptions: &flowv1.QueueOptions{ConflictStrategy: flowv1.ConflictStrategy_CONFLICT_STRATEGY_QUEUE}})
	require.NoError(t, err)
	require.Equal(t, 2, b.count())
}

// TestConcurrentSubmitsOnOneRack: submissions racing for one rack are
// serialized by the rack lock: exactly one writes its task, every other is
// refused as a conflict with it (REJECT), whatever the interleaving.
func TestConcurrentSubmitsOnOneRack(t *testing.T) {
	b := setupTasks(t, nil)
	ctx := context.Background()
	h := operations.NewTaskHandler(b.pool, b.tasks) // no slot limit: all race
	const n = 8
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		go func() {
			<-start
			_, err := h.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(b.rack)})
			errs <- err
		}()
	}
	close(start)
	ok := 0
	for range n {
		if err := <-errs; err == nil {
			ok++
		} else {
			require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
		}
	}
	require.Equal(t, 1, ok)
	require.Equal(t, 1, b.count())
}
