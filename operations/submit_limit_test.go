package operations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
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

	hold, first := holdSlot(t, b, h)

	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := h.PowerOffRack(sctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(b.rack)})
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

// holdSlot has a power-on of b.rack hold h's one slot: its task insert (the
// foreign key check) waits, inside its transaction, for the rack row that
// hold locks. Committing hold lets it finish, with first its answer.
func holdSlot(t *testing.T, b *taskBundle, h *operations.TaskHandler) (hold pgx.Tx, first chan error) {
	t.Helper()
	ctx := context.Background()
	hold, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Rollback(ctx) })
	_, err = hold.Exec(ctx, `SELECT 1 FROM rack WHERE id = $1 FOR UPDATE`, b.rack.ID)
	require.NoError(t, err)
	first = make(chan error, 1)
	go func() {
		_, err := h.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(b.rack)})
		first <- err
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%TaskInsert%')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 10*time.Millisecond, "the first submission never reached its task insert")
	return hold, first
}

// TestConcurrentSubmitsOnOneRack: submissions racing for one rack are
// serialized by the rack lock across transactions, and by admission in
// arrival order within a batch: exactly one writes its task, every other
// is refused as a conflict with it (REJECT), whatever the interleaving.
func TestConcurrentSubmitsOnOneRack(t *testing.T) {
	for _, limit := range []int{0, 2} { // all race; batched, two at a time
		t.Run(fmt.Sprintf("Limit%d", limit), func(t *testing.T) {
			b := setupTasks(t, nil)
			ctx := context.Background()
			h := operations.NewTaskHandler(b.pool, b.tasks)
			h.LimitSubmits(limit)
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
		})
	}
}

// TestQueuedSubmitsAreWrittenTogether: the submissions that queue while the
// slot is busy are written by the next transaction, all in it; each gets
// its own answer (a conflict, an unknown rack), and the others' tasks are
// written.
func TestQueuedSubmitsAreWrittenTogether(t *testing.T) {
	b := setupTasks(t, nil)
	ctx := context.Background()
	inv := inventory.NewService()
	var racks []inventory.Rack
	for i := 2; i <= 5; i++ {
		r := inventory.DemoRack(i)
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
			r.ID, err = inv.CreateRack(ctx, tx, r)
			return err
		}))
		racks = append(racks, r)
	}
	h := operations.NewTaskHandler(b.pool, b.tasks)
	h.LimitSubmits(1)

	hold, first := holdSlot(t, b, h)

	type answer struct {
		rack string
		ids  int
		err  error
	}
	answers := make(chan answer, len(racks)+2)
	submit := func(name string, spec *flowv1.OperationTargetSpec) {
		go func() {
			res, err := h.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: spec})
			answers <- answer{name, len(res.GetTaskIds()), err}
		}()
	}
	for _, r := range racks {
		submit(r.Name, rackSpec(r))
	}
	submit("busy", rackSpec(b.rack))
	missing := rackSpec(b.rack)
	missing.GetRacks().GetTargets()[0].Identifier = &flowv1.RackTarget_Name{Name: "no-such-rack"}
	submit("missing", missing)
	require.Eventually(t, func() bool { return operations.QueuedSubmits(h) == len(racks)+2 }, 10*time.Second, time.Millisecond)

	require.NoError(t, hold.Commit(ctx))
	require.NoError(t, <-first)
	for range len(racks) + 2 {
		a := <-answers
		switch a.rack {
		case "busy":
			require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(a.err), "%v", a.err)
		case "missing":
			require.Equal(t, connect.CodeNotFound, connect.CodeOf(a.err), "%v", a.err)
		default:
			require.NoError(t, a.err, a.rack)
			require.Equal(t, 1, a.ids, a.rack)
		}
	}
	var tasks, txs int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT xmin::text) FROM task WHERE rack_id <> $1`, b.rack.ID).Scan(&tasks, &txs))
	require.Equal(t, len(racks), tasks)
	require.Equal(t, 1, txs, "the queued submissions were written in one transaction")
	require.Equal(t, len(racks)+1, b.count())
}
