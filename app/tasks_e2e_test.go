package app

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/sim"
)

func macOf(r inventory.Rack, t inventory.ComponentType, n int) string {
	for _, c := range r.Components {
		if c.Type == t {
			if n == 0 {
				return c.BMCs[0].MAC.String()
			}
			n--
		}
	}
	panic("no such component")
}

func (e *e2e) power(t *testing.T, mac string) string {
	t.Helper()
	st, ok := e.sims.nico.State(mac)
	require.True(t, ok, mac)
	return st.Power
}

func TestBackendFaultFailsTaskAtItsStage(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	rack := e.addRack(t, 3, true)
	tray := macOf(rack, inventory.ComponentTypeCompute, 4)
	_, err := e.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultItem, Method: "ComponentPowerControl", Device: tray, Status: "internal_error", Message: "tray 4 PSU fault"})
	require.NoError(t, err)

	res, err := e.client.PowerOnRack(context.Background(), &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	task := e.wait(t, res.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_FAILED, task.GetStatus())
	require.Contains(t, task.GetMessage(), "stage 3 failed: component type Compute failed: PowerControl")
	require.Contains(t, task.GetMessage(), "tray 4 PSU fault")
	// The tray is named as the operator knows it, its backend identifier
	// (Core ID or BMC MAC) beside it.
	var name, ext string
	for _, c := range rack.Components {
		if strings.EqualFold(c.BMCs[0].MAC.String(), tray) {
			name, ext = c.Name, c.ExternalID
		}
	}
	require.NotEmpty(t, name)
	require.Regexp(t, regexp.QuoteMeta(name)+` \((`+regexp.QuoteMeta(ext)+`|(?i:`+regexp.QuoteMeta(tray)+`))\): `, task.GetMessage())

	var rep operations.Report
	require.NoError(t, json.Unmarshal([]byte(task.GetReport()), &rep))
	require.Equal(t, []string{"completed", "completed", "failed"}, []string{rep.Stages[0].Status, rep.Stages[1].Status, rep.Stages[2].Status})
	require.Contains(t, rep.Error, "stage 3 failed")

	// Earlier stages stand: nothing is rolled back.
	require.Equal(t, "on", e.power(t, macOf(rack, inventory.ComponentTypePowerShelf, 0)))
	require.Equal(t, "on", e.power(t, macOf(rack, inventory.ComponentTypeNVSwitch, 0)))
	// The retry policy re-sent the failing call (3 attempts for compute).
	calls := 0
	for _, c := range e.sims.nico.Journal().Calls("ComponentPowerControl") {
		for _, d := range c.Devices {
			if strings.EqualFold(d, tray) {
				calls++
			}
		}
	}
	require.Equal(t, 3, calls)
}

func TestConflictsRejectOrQueueAndPromote(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	rack := e.addRack(t, 4, true)
	ctx := context.Background()
	// A slow first power call keeps the first task running a while.
	_, err := e.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLatency, Method: "ComponentPowerControl", Latency: sim.Duration(time.Second), Times: 1})
	require.NoError(t, err)
	first, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)

	// REJECT (the default): the whole request fails, naming rack and task.
	_, err = e.client.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	require.Contains(t, err.Error(), first.GetTaskIds()[0].GetId())

	// QUEUE: the task waits, then runs once the rack frees up, FIFO.
	queue := &flowv1.QueueOptions{ConflictStrategy: flowv1.ConflictStrategy_CONFLICT_STRATEGY_QUEUE}
	second, err := e.client.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(rack.Name), QueueOptions: queue})
	require.NoError(t, err)
	third, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name), QueueOptions: queue})
	require.NoError(t, err)
	got, err := e.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{second.GetTaskIds()[0], third.GetTaskIds()[0]}})
	require.NoError(t, err)
	for _, task := range got.GetTasks() {
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_WAITING, task.GetStatus())
		require.Equal(t, "Queued: waiting for rack to become available", task.GetMessage())
		require.NotNil(t, task.GetQueueExpiresAt())
	}
	stats, err := e.client.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{Id: &flowv1.UUID{Id: rack.ID.String()}})
	require.NoError(t, err)
	require.EqualValues(t, 2, stats.GetRack().GetTaskStats().GetWaitingTaskCount())

	t1 := e.wait(t, first.GetTaskIds()[0])
	t2 := e.wait(t, second.GetTaskIds()[0])
	t3 := e.wait(t, third.GetTaskIds()[0])
	for _, task := range []*flowv1.Task{t1, t2, t3} {
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
	}
	// Strict FIFO: each started after the one before it finished.
	require.False(t, t2.GetStartedAt().AsTime().Before(t1.GetFinishedAt().AsTime()))
	require.False(t, t3.GetStartedAt().AsTime().Before(t2.GetFinishedAt().AsTime()))
	require.Equal(t, "on", e.power(t, macOf(rack, inventory.ComponentTypeCompute, 0)))

	// At most 5 wait per rack (behind a task held running by a hung call).
	_, err = e.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLatency, Method: "ComponentPowerControl", Latency: sim.Duration(time.Minute), Times: 1})
	require.NoError(t, err)
	blocker, err := e.client.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	for range 5 {
		_, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name), QueueOptions: queue})
		require.NoError(t, err)
	}
	_, err = e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name), QueueOptions: queue})
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err))
	require.Contains(t, err.Error(), "waiting queue is full (5/5 tasks)")
	_, err = e.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: blocker.GetTaskIds()[0]})
	require.NoError(t, err)
}

func TestQueuedTaskExpires(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	rack := e.addRack(t, 5, true)
	ctx := context.Background()
	// The first task is held running by a hung call, so the queued one can
	// only end by expiring, never by promotion.
	_, err := e.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLatency, Method: "ComponentPowerControl", Latency: sim.Duration(time.Minute), Times: 1})
	require.NoError(t, err)
	first, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	queued, err := e.client.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(rack.Name),
		QueueOptions: &flowv1.QueueOptions{ConflictStrategy: flowv1.ConflictStrategy_CONFLICT_STRATEGY_QUEUE, QueueTimeoutSeconds: 3}})
	require.NoError(t, err)
	// Its expiry is scheduled with it, at its deadline: it ends within
	// River's scheduling interval (5 s) of it, not at the next 30 s sweep.
	pool, err := pgxpool.New(ctx, e.dbURL)
	require.NoError(t, err)
	defer pool.Close()
	var scheduled int
	// (Scheduled at the deadline, 3 s after it was written; not "after
	// now": on a loaded machine this read may come after the deadline.)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'operations.queue_expiry'
		AND args->>'rack_id' = $1 AND scheduled_at >= created_at + interval '2 seconds'`, rack.ID.String()).Scan(&scheduled))
	require.Equal(t, 1, scheduled)
	task := e.wait(t, queued.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_TERMINATED, task.GetStatus())
	require.Equal(t, "Expired: queue timeout reached", task.GetMessage())
	require.Nil(t, task.GetQueueExpiresAt())
	waited := task.GetFinishedAt().AsTime().Sub(task.GetCreatedAt().AsTime())
	require.GreaterOrEqual(t, waited, 3*time.Second)
	require.Less(t, waited, 12*time.Second)
	_, err = e.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: first.GetTaskIds()[0]})
	require.NoError(t, err)
}

func TestCancelStopsARunningTaskMidStage(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	rack := e.addRack(t, 6, true)
	ctx := context.Background()
	// The shelves' power call hangs, so the task is inside stage 1 when it
	// is cancelled.
	_, err := e.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLatency, Method: "ComponentPowerControl", Latency: sim.Duration(time.Minute), Times: 1})
	require.NoError(t, err)
	res, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	id := res.GetTaskIds()[0]
	require.Eventually(t, func() bool {
		got, err := e.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{id}})
		require.NoError(t, err)
		return got.GetTasks()[0].GetStatus() == flowv1.TaskStatus_TASK_STATUS_RUNNING
	}, 10*time.Second, 10*time.Millisecond)

	out, err := e.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: id})
	require.NoError(t, err)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_TERMINATED, out.GetTask().GetStatus())
	require.Equal(t, "Cancelled by user", out.GetTask().GetMessage())
	require.NotEmpty(t, out.GetTask().GetReport())

	// Idempotent.
	again, err := e.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: id})
	require.NoError(t, err)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_TERMINATED, again.GetTask().GetStatus())

	// Nothing after stage 1 ever runs.
	time.Sleep(2 * time.Second) // ample for stage 2 to start, had the run gone on
	for _, c := range e.sims.nico.Journal().Calls("ComponentPowerControl") {
		require.NotEqual(t, strings.ToLower(macOf(rack, inventory.ComponentTypeNVSwitch, 0)), strings.ToLower(c.Devices[0]))
	}
	// A completed task cannot be cancelled.
	other := e.addRack(t, 8, false)
	done, err := e.client.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(other.Name)})
	require.NoError(t, err)
	e.wait(t, done.GetTaskIds()[0])
	_, err = e.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: done.GetTaskIds()[0]})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
}

func TestRulesDecideWhatRuns(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	rack := e.addRack(t, 9, true)
	ctx := context.Background()
	onlyType := func(name, ct string) *flowv1.UUID {
		def := `{"steps":[{"component_type":"` + ct + `","stage":1,"timeout":"1m",
			"main_operation":{"name":"PowerControl"},
			"post_operation":[{"name":"VerifyPowerStatus","timeout":"30s","poll_interval":"100ms","parameters":{"expected_status":"on"}}]}]}`
		res, err := e.client.CreateOperationRule(ctx, &flowv1.CreateOperationRuleRequest{
			Name: name, OperationType: flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL, OperationCode: "power_on", RuleDefinitionJson: def,
		})
		require.NoError(t, err)
		return res.GetId()
	}
	computeOnly, switchOnly, shelfOnly := onlyType("compute only", "Compute"), onlyType("switches only", "nvswitch"), onlyType("shelves only", "PowerShelf")
	run := func(ruleID *flowv1.UUID) (*flowv1.Task, []string) {
		before := len(e.sims.nico.Journal().Calls("ComponentPowerControl"))
		res, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name), RuleId: ruleID})
		require.NoError(t, err)
		task := e.wait(t, res.GetTaskIds()[0])
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
		return task, e.kindOrder(t, rack)[before:]
	}

	_, order := run(nil)
	require.Equal(t, []string{"PowerShelf", "NVSwitch", "Compute"}, order, "built-in rule")

	_, err := e.client.SetRuleAsDefault(ctx, &flowv1.SetRuleAsDefaultRequest{RuleId: computeOnly})
	require.NoError(t, err)
	task, order := run(nil)
	require.Equal(t, []string{"Compute"}, order, "default rule")
	require.Equal(t, computeOnly.GetId(), task.GetAppliedRuleId().GetId())

	_, err = e.client.AssociateRuleWithRack(ctx, &flowv1.AssociateRuleWithRackRequest{RackId: &flowv1.UUID{Id: rack.ID.String()}, RuleId: switchOnly})
	require.NoError(t, err)
	task, order = run(nil)
	require.Equal(t, []string{"NVSwitch"}, order, "rack association beats the default")
	require.Equal(t, switchOnly.GetId(), task.GetAppliedRuleId().GetId())

	task, order = run(shelfOnly)
	require.Equal(t, []string{"PowerShelf"}, order, "explicit rule beats the association")
	require.Equal(t, shelfOnly.GetId(), task.GetAppliedRuleId().GetId())

	// A rule of another operation is refused, not silently run (upstream hazard).
	fw, err := e.client.CreateOperationRule(ctx, &flowv1.CreateOperationRuleRequest{
		Name: "fw", OperationType: flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL, OperationCode: "upgrade", RuleDefinitionJson: `{"steps":[]}`,
	})
	require.NoError(t, err)
	_, err = e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name), RuleId: fw.GetId()})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))

	// A rule with no step for the targeted types fails the request whole.
	_, err = e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{RuleId: switchOnly, TargetSpec: &flowv1.OperationTargetSpec{
		Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: []*flowv1.RackTarget{{
			Identifier: &flowv1.RackTarget_Name{Name: rack.Name}, ComponentTypes: []flowv1.ComponentType{flowv1.ComponentType_COMPONENT_TYPE_COMPUTE},
		}}}},
	}})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	require.Contains(t, err.Error(), "has no step applicable to targeted component types [Compute]")

	// The rule is frozen at submission: editing it later changes nothing
	// for tasks already submitted, and a task's report mirrors its own rule.
	var rep operations.Report
	require.NoError(t, json.Unmarshal([]byte(task.GetReport()), &rep))
	require.Len(t, rep.Stages, 1)
	require.Equal(t, operations.ComponentType("PowerShelf"), rep.Stages[0].Steps[0].ComponentType)
}

func TestBadPowerRequests(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		req  *flowv1.PowerOnRackRequest
		code connect.Code
		msg  string
	}{
		{"NoTargetSpec", &flowv1.PowerOnRackRequest{}, connect.CodeInvalidArgument, "target_spec"},
		{"EmptyTargetSpec", &flowv1.PowerOnRackRequest{TargetSpec: &flowv1.OperationTargetSpec{}}, connect.CodeInvalidArgument, "target_spec"},
		{"UnknownRack", &flowv1.PowerOnRackRequest{TargetSpec: rackSpec("nope")}, connect.CodeNotFound, "nope"},
		{"BadRuleID", &flowv1.PowerOnRackRequest{TargetSpec: rackSpec("nope"), RuleId: &flowv1.UUID{Id: "x"}}, connect.CodeInvalidArgument, "rule_id"},
		{"BadStrategy", &flowv1.PowerOnRackRequest{TargetSpec: rackSpec("nope"), QueueOptions: &flowv1.QueueOptions{ConflictStrategy: 9}}, connect.CodeInvalidArgument, "queue_options.conflict_strategy"},
		{"NegativeTimeout", &flowv1.PowerOnRackRequest{TargetSpec: rackSpec("nope"), QueueOptions: &flowv1.QueueOptions{QueueTimeoutSeconds: -1}}, connect.CodeInvalidArgument, "queue_timeout_seconds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := e.client.PowerOnRack(ctx, tt.req)
			require.Equal(t, tt.code, connect.CodeOf(err), "%v", err)
			require.Contains(t, err.Error(), tt.msg)
		})
	}
	list, err := e.client.ListTasks(ctx, &flowv1.ListTasksRequest{})
	require.NoError(t, err)
	require.Zero(t, list.GetTotal(), "failed calls created nothing")

	_, err = e.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{{Id: "6f1c2f1e-0000-4000-8000-000000000000"}}})
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
	_, err = e.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: &flowv1.UUID{Id: "bad"}})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
}

func TestListTasksFiltersAndStats(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	a, b := e.addRack(t, 11, true), e.addRack(t, 12, true)
	ctx := context.Background()
	// Rack a: one finished task; rack b: one task held running by a slow call.
	done, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(a.Name)})
	require.NoError(t, err)
	e.wait(t, done.GetTaskIds()[0])
	_, err = e.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLatency, Method: "ComponentPowerControl", Latency: sim.Duration(time.Minute), Times: 1})
	require.NoError(t, err)
	busy, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(b.Name)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := e.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: busy.GetTaskIds()})
		require.NoError(t, err)
		return r.GetTasks()[0].GetStatus() == flowv1.TaskStatus_TASK_STATUS_RUNNING
	}, 10*time.Second, 10*time.Millisecond)

	all, err := e.client.ListTasks(ctx, &flowv1.ListTasksRequest{})
	require.NoError(t, err)
	require.EqualValues(t, 2, all.GetTotal())
	require.Equal(t, busy.GetTaskIds()[0].GetId(), all.GetTasks()[0].GetId().GetId(), "newest first")
	require.Empty(t, all.GetTasks()[0].GetReport(), "no report unless asked")

	active, err := e.client.ListTasks(ctx, &flowv1.ListTasksRequest{ActiveOnly: true, WithReport: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, active.GetTotal())
	require.Contains(t, active.GetTasks()[0].GetReport(), `"status":"running"`)

	onA, err := e.client.ListTasks(ctx, &flowv1.ListTasksRequest{RackId: &flowv1.UUID{Id: a.ID.String()}, WithReport: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, onA.GetTotal())
	require.Len(t, onA.GetTasks(), 1)
	require.Equal(t, done.GetTaskIds()[0].GetId(), onA.GetTasks()[0].GetId().GetId())
	require.Contains(t, onA.GetTasks()[0].GetReport(), `"status":"completed"`)
	pastA, err := e.client.ListTasks(ctx, &flowv1.ListTasksRequest{RackId: &flowv1.UUID{Id: a.ID.String()}, Pagination: &flowv1.Pagination{Offset: 1, Limit: 5}})
	require.NoError(t, err)
	require.EqualValues(t, 1, pastA.GetTotal(), "the total counts the rack's tasks, whatever the page")
	require.Empty(t, pastA.GetTasks())
	activeOnA, err := e.client.ListTasks(ctx, &flowv1.ListTasksRequest{RackId: &flowv1.UUID{Id: a.ID.String()}, ActiveOnly: true})
	require.NoError(t, err)
	require.Zero(t, activeOnA.GetTotal())
	none, err := e.client.ListTasks(ctx, &flowv1.ListTasksRequest{RackId: &flowv1.UUID{Id: uuid.NewString()}})
	require.NoError(t, err)
	require.Zero(t, none.GetTotal(), "an unknown rack has no tasks")

	tray := b.Components[5].ID
	byComp, err := e.client.ListTasks(ctx, &flowv1.ListTasksRequest{ComponentId: &flowv1.UUID{Id: tray.String()}})
	require.NoError(t, err)
	require.EqualValues(t, 1, byComp.GetTotal())
	mixed, err := e.client.ListTasks(ctx, &flowv1.ListTasksRequest{ComponentId: &flowv1.UUID{Id: tray.String()}, RackId: &flowv1.UUID{Id: a.ID.String()}})
	require.NoError(t, err)
	require.Zero(t, mixed.GetTotal(), "a rack that does not own the component yields nothing, not an error")

	page, err := e.client.ListTasks(ctx, &flowv1.ListTasksRequest{Pagination: &flowv1.Pagination{Offset: 1, Limit: 1}})
	require.NoError(t, err)
	require.EqualValues(t, 2, page.GetTotal())
	require.Len(t, page.GetTasks(), 1)
	require.Equal(t, done.GetTaskIds()[0].GetId(), page.GetTasks()[0].GetId().GetId())
	_, err = e.client.ListTasks(ctx, &flowv1.ListTasksRequest{Pagination: &flowv1.Pagination{Offset: -1}})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))

	// task_stats: racks count their active tasks, components the tasks
	// whose scope includes them.
	rb, err := e.client.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{Id: &flowv1.UUID{Id: b.ID.String()}})
	require.NoError(t, err)
	require.EqualValues(t, 1, rb.GetRack().GetTaskStats().GetRunningTaskCount())
	ra, err := e.client.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{Id: &flowv1.UUID{Id: a.ID.String()}})
	require.NoError(t, err)
	require.Zero(t, ra.GetRack().GetTaskStats().GetRunningTaskCount())
	comp, err := e.client.GetComponentInfoByID(ctx, &flowv1.GetComponentInfoByIDRequest{Id: &flowv1.UUID{Id: tray.String()}})
	require.NoError(t, err)
	require.EqualValues(t, 1, comp.GetComponent().GetTaskStats().GetRunningTaskCount())

	_, err = e.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: busy.GetTaskIds()[0]})
	require.NoError(t, err)
}

func TestReadinessGate(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	rack := e.addRack(t, 13, true)
	ctx := context.Background()
	pool, err := db.Open(ctx, e.dbURL, db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	var tray inventory.Component
	for _, c := range rack.Components {
		if c.Type == inventory.ComponentTypeCompute {
			tray = c
			break
		}
	}
	setStatus := func(st inventory.OperationStatus) {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return e.inv.SetOperationStatus(ctx, tx, tray.ID, st) }))
	}
	setStatus(inventory.OperationStatus{Phase: "in_use", Reason: "tenant workload", Blocked: []string{"power_control"}})
	comp, err := e.client.GetComponentInfoByID(ctx, &flowv1.GetComponentInfoByIDRequest{Id: &flowv1.UUID{Id: tray.ID.String()}})
	require.NoError(t, err)
	require.Equal(t, flowv1.Phase_PHASE_IN_USE, comp.GetComponent().GetStatus().GetPhase())
	require.Equal(t, []flowv1.OperationType{flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL}, comp.GetComponent().GetStatus().GetBlockedOperations())

	// The blocked tray holds the whole rack: shelves and switches wait for
	// their rack's hosts.
	res, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond)
	got, err := e.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: res.GetTaskIds()})
	require.NoError(t, err)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_RUNNING, got.GetTasks()[0].GetStatus())
	require.Empty(t, e.sims.nico.Journal().Calls("ComponentPowerControl"), "no power call while the gate is closed")

	// The status clears: the gate opens and the task completes.
	setStatus(inventory.OperationStatus{Phase: "ready"})
	task := e.wait(t, res.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())

	// With the override, a blocked rack is powered at once.
	setStatus(inventory.OperationStatus{Phase: "in_use", Blocked: []string{"power_control"}})
	res, err = e.client.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(rack.Name), OverrideReadinessCheck: true})
	require.NoError(t, err)
	task = e.wait(t, res.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
}
