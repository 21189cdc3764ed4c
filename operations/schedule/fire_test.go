package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/opstest"
	"github.com/nicoflow/flow/operations/schedule"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// state reads a schedule as the service sees it.
func (b *schedBundle) state(t *testing.T, id uuid.UUID) schedule.Schedule {
	t.Helper()
	s, err := b.svc.Get(context.Background(), b.pool, id)
	require.NoError(t, err)
	return s
}

// fireDue fires the schedule's pending firing at its own time plus lag.
func (b *schedBundle) fireDue(t *testing.T, id uuid.UUID, lag time.Duration) time.Time {
	t.Helper()
	at := *b.state(t, id).NextRunAt
	b.clock.Set(at.Add(lag))
	require.NoError(t, b.svc.Fire(context.Background(), id, at, nil))
	return at
}

func desc(name string, at time.Time, rack uuid.UUID) string {
	return fmt.Sprintf("%s — %s @ %s", name, at.UTC().Format(time.RFC3339), rack)
}

func (b *schedBundle) finishAll(t *testing.T) {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT id FROM task WHERE status IN ('waiting', 'pending', 'running')`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	for _, id := range ids {
		_, err := b.tasks.Cancel(context.Background(), id)
		require.NoError(t, err)
	}
}

func TestScheduleFiresOnInterval(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	r0, r1 := b.racks[0], b.racks[1]
	id := sid(b.create(t, intervalReq("every10", "10m", powerOnOp(rackSpec(r0, r1)))))
	want := map[string]int{}
	for i := range 3 {
		at := b.fireDue(t, id, 2*time.Second)
		require.Equal(t, t0.Add(time.Duration(i+1)*10*time.Minute), at, "the cadence holds: at + interval, not dispatch + interval")
		want[desc("every10", at, r0.ID)]++
		want[desc("every10", at, r1.ID)]++
		require.Equal(t, want, b.childTasks(t, id), "one task per scope per firing, described by schedule name and fire time")
		s := b.state(t, id)
		require.Equal(t, at.Add(10*time.Minute), *s.NextRunAt)
		require.Equal(t, at.Add(2*time.Second), *s.LastRunAt, "last_run_at is the dispatch time")
		require.Contains(t, b.armed(t, id), at.Add(10*time.Minute), "the next firing is armed in the firing's transaction")
		scopes, err := b.svc.Scopes(context.Background(), b.pool, id)
		require.NoError(t, err)
		for _, sc := range scopes {
			require.NotNil(t, sc.LastTaskID)
		}
		b.finishAll(t) // so skip does not leave the racks out
	}

	// A stale job (an old time) is a no-op.
	require.NoError(t, b.svc.Fire(context.Background(), id, t0.Add(10*time.Minute), nil))
	require.Equal(t, want, b.childTasks(t, id))

	// No catch-up: five hours late fires once and restarts the cadence from
	// the dispatch time.
	at := *b.state(t, id).NextRunAt
	late := at.Add(5*time.Hour + 300*time.Millisecond)
	b.clock.Set(late)
	require.NoError(t, b.svc.Fire(context.Background(), id, at, nil))
	require.Len(t, b.childTasks(t, id), 8)
	require.Equal(t, late.Add(10*time.Minute).Truncate(time.Second).Add(time.Second), *b.state(t, id).NextRunAt, "from now, rounded up to a second")
}

func TestScheduleExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	r0, r1 := b.racks[0], b.racks[1]
	id := sid(b.create(t, intervalReq("once-each", "1h", powerOnOp(rackSpec(r0, r1)))))
	at := t0.Add(time.Hour)
	b.clock.Set(at)
	before := b.snapshot(t)

	// Crash before commit: the firing's transaction rolls back whole, tasks
	// and advance together; the job runs again and fires.
	crash := errors.New("process killed")
	err := b.svc.Fire(ctx, id, at, func(context.Context, pgx.Tx) error { return crash })
	require.ErrorIs(t, err, crash)
	require.Equal(t, before, b.snapshot(t), "nothing of the firing survives")

	// Two processes fire the same job at once: exactly one fires.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.svc.Fire(ctx, id, at, nil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	want := map[string]int{desc("once-each", at, r0.ID): 1, desc("once-each", at, r1.ID): 1}
	require.Equal(t, want, b.childTasks(t, id))

	// Crash after commit, before the job is marked complete: the job runs
	// again and finds the firing done.
	require.NoError(t, b.svc.Fire(ctx, id, at, nil))
	require.Equal(t, want, b.childTasks(t, id))
	require.Equal(t, at.Add(time.Hour), *b.state(t, id).NextRunAt)
	var fires int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT fire_count FROM task_schedule WHERE id = $1`, id).Scan(&fires))
	require.Equal(t, 1, fires)
}

func TestScheduleOverlap(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	r0, r1 := b.racks[0], b.racks[1]
	skip := sid(b.create(t, intervalReq("skip", "1h", powerOnOp(rackSpec(r0)))))
	first := b.fireDue(t, skip, 0)
	require.Len(t, b.childTasks(t, skip), 1)
	lastRun := *b.state(t, skip).LastRunAt

	// The last task is still pending: the scope is left out, the schedule
	// advances, last_run_at stays.
	second := b.fireDue(t, skip, 0)
	require.Len(t, b.childTasks(t, skip), 1)
	s := b.state(t, skip)
	require.Equal(t, second.Add(time.Hour), *s.NextRunAt)
	require.Equal(t, lastRun, *s.LastRunAt, "an all-skipped firing is no firing")
	require.Equal(t, first.Add(time.Hour), second)

	// Once it ends, the next firing submits again.
	b.finishAll(t)
	third := b.fireDue(t, skip, 0)
	require.Equal(t, 1, b.childTasks(t, skip)[desc("skip", third, r0.ID)])

	// queue parks the new task behind the active one.
	b.finishAll(t)
	queue := b.create(t, intervalReq("queue", "1h", powerOnOp(rackSpec(r1))))
	_, err := b.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: queue.GetId(),
		Schedule: &flowv1.ScheduleConfig{OverlapPolicy: flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE}, UpdateMask: mask("schedule.overlap_policy")})
	require.NoError(t, err)
	qid := sid(queue)
	b.fireDue(t, qid, 0)
	at := b.fireDue(t, qid, 0)
	var status string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT status FROM task WHERE description = $1`, fmt.Sprintf("queue — %s", at.Format(time.RFC3339))).Scan(&status))
	require.Equal(t, "waiting", status)
}

func TestScheduleRefusedScopeDoesNotStopOthers(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	r0, r1 := b.racks[0], b.racks[1]
	id := sid(b.create(t, intervalReq("partial", "1h", powerOnOp(rackSpec(r0, r1)))))
	// A power task on r0 outside the schedule: the schedule's REJECT child
	// task conflicts there.
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.tasks.Submit(ctx, tx, operations.Request{Type: operations.OperationTypePowerControl, Code: operations.CodePowerOff,
			Targets: inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{ID: r0.ID}}}}})
		return err
	}))
	at := b.fireDue(t, id, 0)
	require.Equal(t, map[string]int{desc("partial", at, r1.ID): 1}, b.childTasks(t, id))
	logs := b.logs.String()
	require.Contains(t, logs, "schedule scope not submitted")
	require.Contains(t, logs, "rack_id="+r0.ID.String())
	require.Contains(t, logs, "schedule=partial")
	require.Equal(t, at.Add(time.Hour), *b.state(t, id).NextRunAt)
	// OnRefused heard of the refused entry, in the firing's transaction.
	require.Len(t, b.refusals, 1)
	require.Equal(t, r0.ID, *b.refusals[0].RackID)
	require.Equal(t, "partial", b.refusals[0].Name)
	require.Equal(t, at, b.refusals[0].At)
	require.NotEmpty(t, b.refusals[0].Reason)
}

func TestScheduleTrigger(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	r0, r1 := b.racks[0], b.racks[1]
	s := b.create(t, intervalReq("trig", "1h", powerOnOp(rackSpec(r0, r1))))
	b.clock.Set(t0.Add(20 * time.Minute))
	res, err := b.client.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)
	require.Len(t, res.GetTaskIds(), 2)
	st := b.state(t, sid(s))
	require.Equal(t, t0.Add(80*time.Minute), *st.NextRunAt, "a trigger applies the after-fire update from now")
	require.Equal(t, t0.Add(20*time.Minute), *st.LastRunAt)

	// Triggering a paused schedule fires it and leaves it paused; with both
	// racks busy (skip => REJECT child tasks) every scope is refused.
	_, err = b.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)
	before := b.snapshot(t)
	_, err = b.client.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: s.GetId()})
	opstest.RequireCode(t, err, connect.CodeFailedPrecondition, "no scope entry")
	require.Equal(t, before, b.snapshot(t), "a trigger that submits nothing changes nothing")
	b.finishAll(t)
	res, err = b.client.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)
	require.Len(t, res.GetTaskIds(), 2, "the overlap policy is ignored and the enabled flag too")
	require.False(t, b.state(t, sid(s)).Enabled)

	_, err = b.client.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: pbID(uuid.New())})
	opstest.RequireCode(t, err, connect.CodeNotFound, "schedule")

	// A one-time schedule triggered is consumed; again is refused.
	b.finishAll(t)
	ot := b.create(t, &flowv1.CreateTaskScheduleRequest{
		Schedule:  &flowv1.ScheduleConfig{Name: "once", Spec: &flowv1.ScheduleSpec{Type: 3, Spec: "2027-01-01T00:00:00Z"}},
		Operation: powerOnOp(rackSpec(r0)),
	})
	_, err = b.client.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: ot.GetId()})
	require.NoError(t, err)
	got, err := b.client.GetTaskSchedule(ctx, &flowv1.GetTaskScheduleRequest{Id: ot.GetId()})
	require.NoError(t, err)
	require.False(t, got.GetEnabled())
	require.Nil(t, got.GetNextRunAt())
	_, err = b.client.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: ot.GetId()})
	opstest.RequireCode(t, err, connect.CodeFailedPrecondition, "already fired")
	// Its original job finds it consumed.
	require.NoError(t, b.svc.Fire(ctx, sid(ot), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), nil))
	require.Len(t, b.childTasks(t, sid(ot)), 1)
}

func TestScheduleOneTimeFiresOnce(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ot := b.create(t, &flowv1.CreateTaskScheduleRequest{
		Schedule:  &flowv1.ScheduleConfig{Name: "maint", Spec: &flowv1.ScheduleSpec{Type: 3, Spec: "2026-12-24T02:00:00+01:00"}},
		Operation: powerOnOp(rackSpec(b.racks[0])),
	})
	at := b.fireDue(t, sid(ot), time.Second)
	require.Equal(t, time.Date(2026, 12, 24, 1, 0, 0, 0, time.UTC), at)
	s := b.state(t, sid(ot))
	require.False(t, s.Enabled)
	require.Nil(t, s.NextRunAt)
	require.True(t, s.Consumed())
	require.NoError(t, b.svc.Fire(context.Background(), sid(ot), at, nil))
	require.Equal(t, map[string]int{desc("maint", at, b.racks[0].ID): 1}, b.childTasks(t, sid(ot)))
	require.Equal(t, []time.Time{at}, b.armed(t, sid(ot)), "nothing is armed but the spent job (no worker runs here)")
}

func TestScheduleCronDST(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	cronReq := func(name, spec string) *flowv1.CreateTaskScheduleRequest {
		return &flowv1.CreateTaskScheduleRequest{
			Schedule: &flowv1.ScheduleConfig{Name: name, OverlapPolicy: flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE,
				Spec: &flowv1.ScheduleSpec{Type: 2, Spec: spec, Timezone: "America/New_York"}},
			Operation: powerOnOp(rackSpec(b.racks[0])),
		}
	}
	run := func(id uuid.UUID, n int) []time.Time {
		var out []time.Time
		for range n {
			out = append(out, b.fireDue(t, id, 0))
			b.finishAll(t)
		}
		return out
	}
	utc := func(d, h, m int, month time.Month) time.Time { return time.Date(2026, month, d, h, m, 0, 0, time.UTC) }

	// 2026-03-08: New York skips 02:00–03:00. A 02:30 cron has no 02:30
	// that day and does not fire on it (robfig/cron's Next, pinned here).
	b.clock.Set(utc(6, 12, 0, time.March))
	spring := sid(b.create(t, cronReq("spring", "30 2 * * *")))
	require.Equal(t, []time.Time{utc(7, 7, 30, time.March), utc(9, 6, 30, time.March), utc(10, 6, 30, time.March)}, run(spring, 3))

	// 2026-11-01: New York repeats 01:00–02:00. A 01:30 cron fires at the
	// first 01:30 (EDT) only, not again an hour later at 01:30 EST.
	b.clock.Set(utc(30, 12, 0, time.October))
	fall := sid(b.create(t, cronReq("fall", "30 1 * * *")))
	require.Equal(t, []time.Time{utc(31, 5, 30, time.October), utc(1, 5, 30, time.November), utc(2, 6, 30, time.November)}, run(fall, 3))

	// Descriptors work, in the zone.
	b.clock.Set(utc(1, 12, 0, time.December))
	daily := b.create(t, cronReq("daily", "@daily"))
	require.Equal(t, utc(2, 5, 0, time.December), daily.GetNextRunAt().AsTime(), "midnight in New York")
	_ = ctx
}

// TestScheduleFiresOnRiver runs the firing jobs on River, in two "processes"
// (two River clients on one database) with a restart of one of them in the
// middle: every firing time produces exactly one task per scope.
func TestScheduleFiresOnRiver(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	b.clock.Set(time.Time{}) // real time: River schedules the jobs
	process := func() *river.Client[pgx.Tx] {
		rc := b.engine.RiverConfig()
		rc.Queues[schedule.Queue] = river.QueueConfig{MaxWorkers: 5}
		river.AddWorker(rc.Workers, &schedule.Worker{Service: b.svc})
		rc.FetchPollInterval, rc.FetchCooldown = 50*time.Millisecond, 10*time.Millisecond
		c, err := river.NewClient(riverpgxv5.New(b.pool), rc)
		require.NoError(t, err)
		require.NoError(t, c.Start(ctx))
		return c
	}
	var ids []uuid.UUID
	for i, r := range b.racks {
		req := intervalReq(fmt.Sprintf("river-%d", i), "1s", powerOnOp(rackSpec(r)))
		req.Schedule.OverlapPolicy = flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE
		ids = append(ids, sid(b.create(t, req)))
	}
	a, c := process(), process()
	fired := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(DISTINCT description) FROM task WHERE trigger_type = 'task_schedule'`).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return fired() >= 3 }, 30*time.Second, 100*time.Millisecond)
	// Restart one process hard, while the other keeps going.
	require.NoError(t, a.StopAndCancel(ctx))
	n := fired()
	require.Eventually(t, func() bool { return fired() >= n+3 }, 30*time.Second, 100*time.Millisecond)
	a = process()
	n = fired()
	require.Eventually(t, func() bool { return fired() >= n+3 }, 30*time.Second, 100*time.Millisecond)
	require.NoError(t, a.Stop(ctx))
	require.NoError(t, c.Stop(ctx))

	for _, id := range ids {
		got := b.childTasks(t, id)
		for d, count := range got {
			require.Equal(t, 1, count, "firing %s submitted twice", d)
		}
		// Firing times are whole seconds and strictly increasing.
		s := b.state(t, id)
		require.Zero(t, s.NextRunAt.Nanosecond())
	}
	var dups int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT description, rack_id FROM task GROUP BY 1, 2 HAVING count(*) > 1) d`).Scan(&dups))
	require.Zero(t, dups)
}

func TestScheduleRescueAndPromote(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t, nil)
	ctx := context.Background()
	id := sid(b.create(t, intervalReq("stuck", "1h", powerOnOp(rackSpec(b.racks[0])))))
	at := t0.Add(time.Hour)

	// Not yet overdue by the grace: nothing re-armed.
	b.clock.Set(at.Add(schedule.RescueGrace / 2))
	n, err := b.svc.RescueOverdue(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	// Overdue (its job stuck in a dead process, say): a second job for the
	// same firing time; firing it twice still fires once.
	b.clock.Set(at.Add(2*schedule.RescueGrace + time.Second))
	n, err = b.svc.RescueOverdue(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var jobs int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'operations.schedule_fire' AND (args->>'at')::timestamptz = $1`, at).Scan(&jobs))
	require.Equal(t, 2, jobs)
	n, err = b.svc.RescueOverdue(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'operations.schedule_fire' AND (args->>'at')::timestamptz = $1`, at).Scan(&jobs))
	require.Equal(t, 2, jobs, "the same rescue is not inserted twice while it waits")
	require.NoError(t, b.svc.Fire(ctx, id, at, nil))
	require.NoError(t, b.svc.Fire(ctx, id, at, nil))
	require.Len(t, b.childTasks(t, id), 1)

	// A due firing job waiting for River's scheduler is made runnable now.
	b.clock.Set(time.Time{})
	soon := sid(b.create(t, intervalReq("soon", "1s", powerOnOp(rackSpec(b.racks[1])))))
	var state string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE args->>'schedule_id' = $1`, soon.String()).Scan(&state))
	require.Equal(t, "scheduled", state)
	require.Eventually(t, func() bool {
		n, err := schedule.PromoteDueFirings(ctx, b.river, 100)
		require.NoError(t, err)
		return n == 1
	}, 10*time.Second, 100*time.Millisecond)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE args->>'schedule_id' = $1`, soon.String()).Scan(&state))
	require.Equal(t, "available", state)
}
