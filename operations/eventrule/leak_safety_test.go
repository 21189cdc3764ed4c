package eventrule_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/logtest"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule"
	"github.com/nicoflow/flow/operations/opstest"
)

// setupEndingPipeline is setupPipeline on a task manager whose engine
// records a run's end on its task (opstest RunEnded): a terminated run
// terminates its task.
func setupEndingPipeline(t *testing.T) *pipelineBundle {
	t.Helper()
	m := opstest.NewTasks(t, opstest.Config{RunEnded: true})
	tb := &taskBundle{pool: m.Pool, tasks: m.Tasks, rack: m.AddRack(t, 1), m: m, count: func() int { return m.TaskCount(t) }}
	rack, err := inventory.NewService().Rack(context.Background(), tb.pool, tb.rack.ID, true)
	require.NoError(t, err)
	return &pipelineBundle{taskBundle: tb, jobs: &recorder{}, comps: rack.Components}
}

func (b *pipelineBundle) task(t *testing.T, id uuid.UUID) (status, message string, info map[string]any) {
	t.Helper()
	var raw []byte
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status, message, information FROM task WHERE id = $1`, id).Scan(&status, &message, &raw))
	require.NoError(t, json.Unmarshal(raw, &info))
	return status, message, info
}

// TestLeakResponsePreempts: a leak response waits behind nothing. The
// tasks pending (its run started) and waiting on the covered components are
// terminated with a message naming the leak event; the response is admitted
// pending at once, skips the readiness gate and is marked a leak response;
// a second leak's response does not terminate the first.
func TestLeakResponsePreempts(t *testing.T) {
	t.Parallel()
	b := setupEndingPipeline(t)
	ctx := context.Background()
	rules, _ := b.startExecutions(t)

	busy, err := b.submit(t, opstest.PowerOn(b.rack))
	require.NoError(t, err)
	queued := opstest.PowerOn(b.rack)
	queued.Queue = true
	waiting, err := b.submit(t, queued)
	require.NoError(t, err)
	st, _, _ := b.task(t, waiting[0])
	require.Equal(t, "waiting", st)

	res, err := rules.Ingest(ctx, "nico_core_leakage", leakOn("leak-1", b.at(t, inventory.ComponentTypeCompute, 10).ID))
	require.NoError(t, err)
	var execStatus string
	var taskIDs []uuid.UUID
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT status, task_ids FROM event_action_execution WHERE id = $1`, res.Executions[0]).Scan(&execStatus, &taskIDs))
		return execStatus == "completed"
	}, 30*time.Second, 20*time.Millisecond)
	require.Len(t, taskIDs, 1)
	for _, id := range []uuid.UUID{busy[0], waiting[0]} {
		st, msg, _ := b.task(t, id)
		require.Equal(t, "terminated", st, "task %s", id)
		require.Contains(t, msg, "leak response to event "+res.EventID.String())
	}
	st, _, info := b.task(t, taskIDs[0])
	require.Equal(t, "pending", st, "the response waits behind nothing")
	require.Equal(t, true, info["override_readiness_check"], "a leak response skips the readiness gate")
	require.Equal(t, res.EventID.String(), info["leak"].(map[string]any)["event_id"])
	// Its steps are fetched before any other waiting step (River
	// priority 1; the power-on's were 2).
	priorities := func(task uuid.UUID) []int {
		rows, err := b.pool.Query(ctx, `SELECT j.priority FROM river_job j
			JOIN engine_step s ON s.id = (j.args->>'step_id')::bigint
			JOIN task t ON t.run_id = s.run_id
			WHERE t.id = $1 AND j.kind = 'engine.run_step'`, task)
		require.NoError(t, err)
		var out []int
		for rows.Next() {
			var p int
			require.NoError(t, rows.Scan(&p))
			out = append(out, p)
		}
		require.NoError(t, rows.Err())
		return out
	}
	require.NotEmpty(t, priorities(taskIDs[0]))
	for _, p := range priorities(taskIDs[0]) {
		require.Equal(t, 1, p, "a leak response's steps are urgent")
	}
	for _, p := range priorities(busy[0]) {
		require.Equal(t, 2, p)
	}

	// A second leak below: its response runs beside the first.
	res2, err := rules.Ingest(ctx, "nico_core_leakage", leakOn("leak-2", b.at(t, inventory.ComponentTypeCompute, 5).ID))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT status FROM event_action_execution WHERE id = $1`, res2.Executions[0]).Scan(&execStatus))
		return execStatus == "completed"
	}, 30*time.Second, 20*time.Millisecond)
	st, _, _ = b.task(t, taskIDs[0])
	require.Equal(t, "pending", st, "a leak response never pre-empts another")
}

// TestLeakingTrayStaysOff: while Core reports a tray's leak, an operation
// that would energise it is refused (ErrLeakOpen, naming the component and
// the leak) and writes nothing, a queued one is not started, and one that
// does not energise it is accepted; an admin override lets it through for
// that leak only; the leak's end lifts the guard.
func TestLeakingTrayStaysOff(t *testing.T) {
	t.Parallel()
	b := setupEndingPipeline(t)
	ctx := context.Background()
	tray := b.linked(t)
	src := &leakSource{}
	d := b.detector(src, false)
	// A queued power-on behind a busy rack, before the leak.
	off := operations.Request{Type: operations.OperationTypePowerControl, Code: operations.CodePowerOff,
		Targets: inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{ID: b.rack.ID}}}}}
	first, err := b.submit(t, off)
	require.NoError(t, err)
	queued := opstest.PowerOn(b.rack)
	queued.Queue = true
	waiting, err := b.submit(t, queued)
	require.NoError(t, err)
	// And a queued power-off of the tray, as the legacy leak path submits.
	queuedOff := operations.Request{Type: operations.OperationTypePowerControl, Code: operations.CodeForcePowerOff, Queue: true,
		Targets: inventory.TargetSpec{Components: []inventory.ComponentRef{{ID: tray.ID}}}}
	waitingOff, err := b.submit(t, queuedOff)
	require.NoError(t, err)

	// Core reports the leak (the legacy path is off here: only the status).
	src.set("machine-10")
	require.NoError(t, d.Run(ctx))
	require.Equal(t, inventory.LeakDetected, b.leakStatus(t, tray.ID))

	before := b.count()
	for _, code := range []operations.OperationCode{operations.CodePowerOn, operations.CodeForceRestart, operations.CodeColdReset} {
		req := opstest.PowerOn(b.rack)
		req.Code = code
		_, err = b.submit(t, req)
		require.ErrorIs(t, err, operations.ErrLeakOpen, "%s", code)
		require.Contains(t, err.Error(), tray.Name)
		require.Contains(t, err.Error(), "machine-10")
	}
	require.Equal(t, before, b.count(), "nothing written on refusal")

	// The queued power-on does not start when the rack frees up.
	_, err = b.tasks.Cancel(ctx, first[0])
	require.NoError(t, err)
	st, msg, _ := b.task(t, waiting[0])
	require.Equal(t, "terminated", st)
	require.Contains(t, msg, "open coolant leak")
	st, _, _ = b.task(t, waitingOff[0])
	require.Equal(t, "pending", st, "a queued power-off still starts")

	// Powering off is fine.
	queuedRackOff := off
	queuedRackOff.Queue = true
	_, err = b.submit(t, queuedRackOff)
	require.NoError(t, err)

	// An override for this leak lets a power-on through.
	_, err = inventory.NewService().OverrideLeak(ctx, b.pool, tray.ID, "admin@example", "dry, sensor fault")
	require.NoError(t, err)
	accept := opstest.PowerOn(b.rack)
	accept.Queue = true
	_, err = b.submit(t, accept)
	require.NoError(t, err)

	// The leak ends, then comes back: the override went with the old leak.
	src.set()
	require.NoError(t, d.Run(ctx))
	_, err = inventory.NewService().OverrideLeak(ctx, b.pool, tray.ID, "admin@example", "again")
	require.True(t, errors.Is(err, inventory.ErrNoOpenLeak))
	src.set("machine-10")
	require.NoError(t, d.Run(ctx))
	_, err = b.submit(t, accept)
	require.ErrorIs(t, err, operations.ErrLeakOpen)
	src.set()
	require.NoError(t, d.Run(ctx))
	_, err = b.submit(t, accept)
	require.NoError(t, err, "accepted once Core stops reporting the leak")
}

// TestLeakOnUnknownDeviceAnswered: a leak Core reports on a device Flow does not
// hold is recorded as an occurrence with its Core ID, logged, counted and
// answered with a forced power-off through Core by that ID, once per
// occurrence however many cycles see it; a new occurrence is answered
// again.
func TestLeakOnUnknownDeviceAnswered(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	var logs logtest.Buffer
	var mu sync.Mutex
	var calls, outcomes []string
	src := &leakSource{}
	d := eventrule.NewLeakDetector(eventrule.LeakDetectorConfig{
		Pool: b.pool, Inv: inventory.NewService(), Rules: b.rules, Tasks: b.tasks, Source: src, EventRules: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		PowerOff: func(_ context.Context, kind, id string) error {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, kind+"/"+id)
			return nil
		},
		OnUnknown: func(kind, outcome string) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, kind+":"+outcome)
		},
	})
	src.set("ghost-dpu-1")
	for range 3 {
		require.NoError(t, d.Run(ctx))
	}
	require.Equal(t, []string{"compute/ghost-dpu-1"}, calls)
	require.Equal(t, []string{"compute:power_off_sent"}, outcomes)
	require.Equal(t, 1, strings.Count(logs.String(), "leak on a device flow does not hold"), "logged once per occurrence")
	require.Zero(t, b.eventCount(t), "nothing to plan for a device flow does not hold")
	occ, err := d.Occurrences(ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, occ, 1)
	require.Equal(t, "ghost-dpu-1", occ[0].ExternalID)
	require.Equal(t, "power_off_sent", occ[0].UnknownOutcome)

	// Cleared and raised again: a new occurrence, answered again.
	src.set()
	require.NoError(t, d.Run(ctx))
	src.set("ghost-dpu-1")
	require.NoError(t, d.Run(ctx))
	require.Len(t, calls, 2)
}

// TestLeakPreemptionCommitsBeforeSubmission: a leak response's pre-emption
// is committed in a transaction of its own, before the response is
// submitted: when the submission fails (here one of the components it
// covers was deleted after the event was planned), the pre-empted work
// stays terminated, the execution is deferred for a retry, and nothing of
// the response is written.
func TestLeakPreemptionCommitsBeforeSubmission(t *testing.T) {
	t.Parallel()
	b := setupEndingPipeline(t)
	ctx := context.Background()
	rules, _ := b.startExecutions(t)
	busy, err := b.submit(t, opstest.PowerOn(b.rack))
	require.NoError(t, err)
	before := b.count()
	// Planned without a job (the recorder enqueues none), then run by the
	// rescue once the covered slot-5 tray is gone.
	planner := eventrule.NewService(eventrule.Config{Pool: b.pool, Inv: inventory.NewService(), Tasks: b.tasks, Enqueue: b.jobs.enqueue})
	res, err := planner.Ingest(ctx, eventrule.LeakEventSource, leakOn("leak-1", b.at(t, inventory.ComponentTypeCompute, 10).ID))
	require.NoError(t, err)
	exec := res.Executions[0]
	_, err = b.pool.Exec(ctx, `UPDATE component SET deleted_at = now() WHERE id = $1`, b.at(t, inventory.ComponentTypeCompute, 5).ID)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE event_action_execution SET updated_at = now() - interval '1 minute' WHERE id = $1`, exec)
	require.NoError(t, err)
	n, err := rules.RescueStale(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var status, reason, msg string
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT status, coalesce(reason, ''), status_message FROM event_action_execution WHERE id = $1`, exec).Scan(&status, &reason, &msg))
		return status != "pending"
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, "deferred", status, msg)
	require.Equal(t, "attempt_failed", reason)
	require.Contains(t, msg, "submit task on rack")
	st, tmsg, _ := b.task(t, busy[0])
	require.Equal(t, "terminated", st, "the pre-emption was committed on its own")
	require.Contains(t, tmsg, "pre-empted by the leak response")
	require.Equal(t, before, b.count(), "nothing of the response was written")
}
