package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/schedule"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim"
)

// fastPowerOnRule makes a default power-on rule whose steps time out and
// poll quickly.
func fastPowerOnRule(t *testing.T, client flowv1connect.FlowClient) {
	t.Helper()
	step := func(ct string, stage int) string {
		return `{"component_type":"` + ct + `","stage":` + itoa(stage) + `,"timeout":"5s","retry":{"max_attempts":3,"initial_interval":"100ms","backoff_coefficient":2},
			"main_operation":{"name":"PowerControl"},
			"post_operation":[{"name":"VerifyPowerStatus","timeout":"30s","poll_interval":"200ms","parameters":{"expected_status":"on"}}]}`
	}
	_, err := client.CreateOperationRule(context.Background(), &flowv1.CreateOperationRuleRequest{
		Name: "fast power on", OperationType: flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL, OperationCode: "power_on", IsDefault: true,
		RuleDefinitionJson: `{"steps":[` + step("PowerShelf", 1) + `,` + step("NVSwitch", 2) + `,` + step("Compute", 3) + `]}`,
	})
	require.NoError(t, err)
}

func scheduleReq(name, typ, spec string, overlap flowv1.OverlapPolicy, racks ...string) *flowv1.CreateTaskScheduleRequest {
	t := map[string]flowv1.ScheduleSpecType{"interval": 1, "cron": 2, "one-time": 3}[typ]
	return &flowv1.CreateTaskScheduleRequest{
		Schedule:  &flowv1.ScheduleConfig{Name: name, OverlapPolicy: overlap, Spec: &flowv1.ScheduleSpec{Type: t, Spec: spec}},
		Operation: &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_PowerOn{PowerOn: &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(racks...)}}},
	}
}

// scheduleTasks lists the tasks whose description starts with the
// schedule's name.
func scheduleTasks(t *testing.T, client flowv1connect.FlowClient, name string) []*flowv1.Task {
	t.Helper()
	res, err := client.ListTasks(context.Background(), &flowv1.ListTasksRequest{Pagination: &flowv1.Pagination{Limit: 1000}})
	require.NoError(t, err)
	var out []*flowv1.Task
	for _, task := range res.GetTasks() {
		if strings.HasPrefix(task.GetDescription(), name+" — ") {
			out = append(out, task)
		}
	}
	return out
}

// TestScheduleE2E runs schedules against the simulators through a real
// server: an interval schedule over two racks fires power-on tasks that
// complete, again and again; pause stops it, resume restarts it without an
// instant firing; skip leaves out a rack whose last task still runs; a
// one-time schedule fires once; trigger fires now.
func TestScheduleE2E(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	ctx := context.Background()
	r1, r2, r3 := e.addRack(t, 301, true), e.addRack(t, 302, true), e.addRack(t, 303, true)
	fastPowerOnRule(t, e.client)

	s, err := e.client.CreateTaskSchedule(ctx, scheduleReq("pair", "interval", "2s", 0, r1.Name, r2.Name))
	require.NoError(t, err)
	require.Empty(t, scheduleTasks(t, e.client, "pair"), "creation does not fire")
	completed := func(name string) int {
		n := 0
		for _, task := range scheduleTasks(t, e.client, name) {
			if task.GetStatus() == flowv1.TaskStatus_TASK_STATUS_COMPLETED {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return completed("pair") >= 6 }, 60*time.Second, 100*time.Millisecond, "three firings over two racks complete")
	// Each firing is counted, with its lag behind its due time.
	if m := e.srv.tel.metrics; m != nil {
		var mm dto.Metric
		require.NoError(t, m.ScheduleFirings.WithLabelValues(schedule.FireSubmitted).(prometheus.Metric).Write(&mm))
		require.GreaterOrEqual(t, mm.GetCounter().GetValue(), 3.0)
		require.NoError(t, m.ScheduleFiringLag.WithLabelValues().(prometheus.Metric).Write(&mm))
		require.GreaterOrEqual(t, mm.GetHistogram().GetSampleCount(), uint64(3))
	}

	// Pause: nothing more fires.
	_, err = e.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)
	time.Sleep(time.Second) // a firing already running when the pause landed may still commit
	paused := len(scheduleTasks(t, e.client, "pair"))
	time.Sleep(7 * time.Second)
	require.Len(t, scheduleTasks(t, e.client, "pair"), paused, "a paused schedule does not fire")

	// Resume: the next firing is an interval away, not now.
	resumedAt := time.Now()
	res, err := e.client.ResumeTaskSchedule(ctx, &flowv1.ResumeTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)
	require.WithinDuration(t, resumedAt.Add(2*time.Second), res.GetNextRunAt().AsTime(), 1500*time.Millisecond)
	require.Len(t, scheduleTasks(t, e.client, "pair"), paused, "no instant firing")
	require.Eventually(t, func() bool { return len(scheduleTasks(t, e.client, "pair")) >= paused+2 }, 30*time.Second, 100*time.Millisecond)
	_, err = e.client.DeleteTaskSchedule(ctx, &flowv1.DeleteTaskScheduleRequest{Id: s.GetId()})
	require.NoError(t, err)

	// Trigger fires now.
	trig, err := e.client.CreateTaskSchedule(ctx, scheduleReq("manual", "interval", "24h", 0, r3.Name))
	require.NoError(t, err)
	fired, err := e.client.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: trig.GetId()})
	require.NoError(t, err)
	require.Len(t, fired.GetTaskIds(), 1)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, e.wait(t, fired.GetTaskIds()[0]).GetStatus())

	// A one-time schedule fires once and is consumed.
	at := time.Now().Add(2 * time.Second).UTC().Truncate(time.Second).Format(time.RFC3339)
	once, err := e.client.CreateTaskSchedule(ctx, scheduleReq("once", "one-time", at, 0, r3.Name))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return completed("once") == 1 }, 30*time.Second, 100*time.Millisecond)
	got, err := e.client.GetTaskSchedule(ctx, &flowv1.GetTaskScheduleRequest{Id: once.GetId()})
	require.NoError(t, err)
	require.False(t, got.GetEnabled())
	require.Nil(t, got.GetNextRunAt())
	require.Equal(t, "once — "+at, scheduleTasks(t, e.client, "once")[0].GetDescription())

	// Skip: while r3's power calls hang, its running task keeps later
	// firings out; queue would park them instead.
	_, err = e.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLatency, Method: "ComponentPowerControl", Latency: sim.Duration(20 * time.Second)})
	require.NoError(t, err)
	skip, err := e.client.CreateTaskSchedule(ctx, scheduleReq("skip", "interval", "1s", 0, r3.Name))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(scheduleTasks(t, e.client, "skip")) == 1 }, 30*time.Second, 100*time.Millisecond)
	first := scheduleTasks(t, e.client, "skip")[0]
	got, err = e.client.GetTaskSchedule(ctx, &flowv1.GetTaskScheduleRequest{Id: skip.GetId()})
	require.NoError(t, err)
	next := got.GetNextRunAt().AsTime()
	require.Eventually(t, func() bool {
		g, err := e.client.GetTaskSchedule(ctx, &flowv1.GetTaskScheduleRequest{Id: skip.GetId()})
		require.NoError(t, err)
		return g.GetNextRunAt().AsTime().After(next.Add(time.Second))
	}, 30*time.Second, 100*time.Millisecond, "the schedule keeps advancing")
	tasks := scheduleTasks(t, e.client, "skip")
	require.Len(t, tasks, 1, "the rack with a running task is skipped")
	require.Equal(t, first.GetId().GetId(), tasks[0].GetId().GetId())
	_, err = e.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: skip.GetId(),
		Schedule: &flowv1.ScheduleConfig{OverlapPolicy: flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"schedule.overlap_policy"}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, task := range scheduleTasks(t, e.client, "skip") {
			if task.GetStatus() == flowv1.TaskStatus_TASK_STATUS_WAITING {
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "queue parks the next task behind the running one")
	_, err = e.client.DeleteTaskSchedule(ctx, &flowv1.DeleteTaskScheduleRequest{Id: skip.GetId()})
	require.NoError(t, err)
}

// TestScheduleKillLoop kills -9 `flow serve` over and over while 100
// schedules fire every 2s, with a second server on the same database the
// whole time. After the last restart every schedule fires again, and every
// firing that submitted produced exactly one task per scope:
// no (schedule, firing time, rack) has two tasks, and each schedule's
// fire_count (incremented in the firing's transaction) equals the number of
// firing times its tasks carry, so no firing advanced without its tasks.
// 100 schedules and 10 kills; it runs under make soak only.
func TestScheduleKillLoop(t *testing.T) {
	soakOnly(t)
	t.Parallel()
	ctx := context.Background()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: time.Millisecond, firmwarePhase: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	dbURL := dbtest.NewDB(t)
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 4})
	require.NoError(t, err)
	defer pool.Close()
	inv := inventory.NewService()
	const schedules, kills = 100, 10
	names, _ := storeDemoRacks(t, pool, inv, sims, 400, schedules, seedOff)
	env := func(port int) []string {
		return []string{
			"DATABASE_URL=" + dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port),
			"NICO_CORE_API_URL=" + sims.nicoSrv.URL(), "PSM_API_URL=" + sims.psmSrv.URL(),
			"FLOW_LOG_LEVEL=error",
		}
	}
	portA, err := pglocal.FreePort()
	require.NoError(t, err)
	portB, err := pglocal.FreePort()
	require.NoError(t, err)
	urlA, urlB := "http://127.0.0.1:"+itoa(portA), "http://127.0.0.1:"+itoa(portB)
	a := startServerProcess(t, env(portA))
	startServerProcess(t, env(portB))
	waitHealthy(t, urlA)
	waitHealthy(t, urlB)
	client := flowv1connect.NewFlowClient(http.DefaultClient, urlB)
	fastPowerOnRule(t, client)
	for i, name := range names {
		_, err := client.CreateTaskSchedule(ctx, scheduleReq(fmt.Sprintf("kill-%03d", i), "interval", "2s", flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE, name))
		require.NoError(t, err)
	}
	for range kills {
		time.Sleep(2500 * time.Millisecond)
		a.kill(t)
		a = startServerProcess(t, env(portA))
		waitHealthy(t, urlA)
	}
	// After the last restart every schedule fires again (River's leader,
	// which runs the firing tick and the scheduler, changes hands at kills,
	// and firings caught in a killed process wait for their rescue, so
	// firings lag while the kills go on; a rack whose queue is full refuses
	// a firing's task, which last_run_at still records).
	restarted := time.Now()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_schedule WHERE last_run_at > $1`, restarted).Scan(&n))
		return n == schedules
	}, 150*time.Second, 200*time.Millisecond)
	_, err = pool.Exec(ctx, `UPDATE task_schedule SET enabled = false`) // stop firing before counting
	require.NoError(t, err)
	time.Sleep(2 * time.Second) // a firing in flight commits or rolls back

	var hist string
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(string_agg(status || '=' || n, ' '), '') FROM (SELECT status, count(*) n FROM task GROUP BY 1) h`).Scan(&hist))
	t.Logf("tasks by status: %s", hist)
	var k0 string
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(string_agg(description || ' ' || status || ' ' || created_at::text || ' ' || coalesce(finished_at::text, '-'), E'\n' ORDER BY created_at), '') FROM task WHERE description LIKE 'kill-000 %'`).Scan(&k0))
	t.Logf("kill-000 tasks:\n%s", k0)
	var dups int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT description, rack_id FROM task
		WHERE trigger_type = 'task_schedule' GROUP BY 1, 2 HAVING count(*) > 1) d`).Scan(&dups))
	require.Zero(t, dups, "no firing submitted twice")
	rows, err := pool.Query(ctx, `SELECT s.name, s.fire_count, (SELECT count(DISTINCT t.description) FROM task t WHERE t.trigger_id = s.id::text)
		FROM task_schedule s ORDER BY s.name`)
	require.NoError(t, err)
	type counts struct {
		name          string
		fires, firing int
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (counts, error) {
		var c counts
		err := r.Scan(&c.name, &c.fires, &c.firing)
		return c, err
	})
	require.NoError(t, err)
	require.Len(t, all, schedules)
	total := 0
	for _, c := range all {
		require.Equal(t, c.fires, c.firing, "%s: every firing has its task and no task lacks its firing", c.name)
		require.GreaterOrEqual(t, c.fires, 1, c.name)
		total += c.fires
	}
	t.Logf("%d kills; %d firings over %d schedules, each exactly once", kills, total, schedules)
}
