package app

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/sim/nicosim"
)

// TestLeakPreemptsBusyRack is the leak-safety scenario of
// docs/event-rules.md with default leak settings (detection every 3 s):
// a firmware upgrade runs on the rack (each simulator firmware phase
// lasts a minute), the tray below the leaking one is in ERROR
// (Failed/HostFailure), and a leak is raised on the compute tray in slot
// 10. The leaking tray and those below it get their forced power-off call
// (the readiness gate is skipped), the firmware task ends terminated with
// the leak event as its reason, and the response completes. While the leak
// is open PowerOnRack is refused with FailedPrecondition naming the tray
// and writes nothing; once the simulator clears it, it is accepted.
func TestLeakPreemptsBusyRack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newFWBench(t, time.Minute)
	r := b.addRack(t, 41, true)
	cfg := writeFile(t, "flowconfig.yaml", "inventory_run_frequency: 1h\n")
	srv := b.serve(t, map[string]string{"FLOW_CONFIG_FILE": cfg, "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "true"}, nil)
	pool := openPool(t, b.dbURL)
	rack := readRack(t, pool, r.ID)
	tray := rack.component(t, inventory.ComponentTypeCompute, 10)
	neighbour := rack.component(t, inventory.ComponentTypeCompute, 9)

	// The tray below the leak is in ERROR.
	failed := "Failed/HostFailure"
	require.NoError(t, b.sims.nico.Update(neighbour.BMCs[0].MAC.String(), nicosim.DevicePatch{State: &failed}))
	runSync(t, srv.url)
	require.Eventually(t, func() bool {
		return componentInfo(t, srv.client, neighbour.ID).GetStatus().GetPhase() == flowv1.Phase_PHASE_ERROR
	}, 30*time.Second, 100*time.Millisecond)

	// A firmware upgrade runs on the rack.
	fw, err := srv.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), TargetVersion: ptr(`{"compute":"2.0","nvswitch":"3.0"}`)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		res, err := srv.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: fw.GetTaskIds()})
		require.NoError(t, err)
		return res.GetTasks()[0].GetStatus() == flowv1.TaskStatus_TASK_STATUS_RUNNING
	}, 30*time.Second, 50*time.Millisecond)
	waitPolled(t, srv.client, tray.ID)

	// The leak.
	b.sims.nico.Journal().Reset()
	set := time.Now()
	require.NoError(t, b.sims.nico.SetLeak(tray.ExternalID, true))
	computeBelow := []string{}
	for _, c := range rack.Components {
		if c.Type == inventory.ComponentTypeCompute && c.Position.SlotID <= 10 {
			computeBelow = append(computeBelow, c.ExternalID)
		}
	}
	var reached time.Duration
	require.Eventually(t, func() bool {
		off := map[string]bool{}
		for _, c := range b.sims.nico.Journal().Calls("ComponentPowerControl") {
			for _, d := range c.Devices {
				off[d] = true
			}
			reached = c.Time.Sub(set)
		}
		for _, id := range computeBelow {
			if !off[id] {
				return false
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond, "the leaking tray and the trays below it, the one in ERROR included, get their power-off call")
	t.Logf("leak → forced power-off of the %d trays in slots ≤ 10: %s (target: within 10 s with default settings; BenchmarkLeakResponse measures it)",
		len(computeBelow), reached.Round(time.Millisecond))

	// The firmware task is terminated, naming the leak event.
	fwTask := waitTask(t, srv.client, fw.GetTaskIds()[0], 60*time.Second)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_TERMINATED, fwTask.GetStatus())
	require.Contains(t, fwTask.GetMessage(), "pre-empted by the leak response to event")
	var eventID string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM event`).Scan(&eventID))
	require.Contains(t, fwTask.GetMessage(), eventID)

	// The response completes.
	var response *flowv1.Task
	for _, task := range leakTasks(t, srv.client, rack.ID) {
		if task.GetOperation() == "force_power_off" {
			response = task
		}
	}
	require.NotNil(t, response)
	done := waitTask(t, srv.client, response.GetId(), 2*time.Minute)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, done.GetStatus(), done.GetMessage())

	// While the leak is open, nothing powers the rack on.
	before := len(leakTasks(t, srv.client, rack.ID))
	_, err = srv.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(r.Name)})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.Contains(t, err.Error(), tray.Name)
	require.Contains(t, err.Error(), "open coolant leak")
	require.Len(t, leakTasks(t, srv.client, rack.ID), before, "nothing written")

	// Cleared: accepted.
	require.NoError(t, b.sims.nico.SetLeak(tray.ExternalID, false))
	require.Eventually(t, func() bool {
		return componentInfo(t, srv.client, tray.ID).GetLeakStatus() == flowv1.LeakStatus_LEAK_STATUS_NOT_DETECTED
	}, 30*time.Second, 50*time.Millisecond)
	on, err := srv.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(r.Name)})
	require.NoError(t, err)
	require.Len(t, on.GetTaskIds(), 1)
}

// TestLeakGuardsEverywhere: while a tray's leak is open, a schedule firing
// and an operation-run target that would energise it are refused with
// the leak as the reason, and accepted once the simulator clears it; a
// tray in slot 0 is answered like any other; a leak on a device Flow does
// not hold is listed by its Core ID and answered with a forced power-off
// through Core.
func TestLeakGuardsEverywhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startLeakE2E(t)
	pool := openPool(t, e.dbURL)
	a, z := e.addRack(t, 52, false), e.addRack(t, 53, false)
	runSync(t, e.url)
	rackA, rackZ := readRack(t, pool, a.ID), readRack(t, pool, z.ID)
	tray := rackA.component(t, inventory.ComponentTypeCompute, 10)
	// Rack z's lowest compute tray sits in slot 0.
	slot0 := rackZ.component(t, inventory.ComponentTypeCompute, 5)
	_, err := pool.Exec(ctx, `UPDATE component SET slot_id = 0 WHERE id = $1`, slot0.ID)
	require.NoError(t, err)
	waitPolled(t, e.client, tray.ID)

	sched, err := e.client.CreateTaskSchedule(ctx, scheduleReq("guarded", "interval", "24h", 0, a.Name))
	require.NoError(t, err)

	require.NoError(t, e.sims.nico.SetLeak(tray.ExternalID, true))
	require.NoError(t, e.sims.nico.SetLeak(slot0.ExternalID, true))
	require.Eventually(t, func() bool {
		return componentInfo(t, e.client, tray.ID).GetLeakStatus() == flowv1.LeakStatus_LEAK_STATUS_DETECTED
	}, 30*time.Second, 50*time.Millisecond)

	// Slot 0 is a slot: its leak powers it off.
	require.Eventually(t, func() bool {
		for _, task := range leakTasks(t, e.client, z.ID) {
			if task.GetOperation() == "force_power_off" && slices.Contains(taskComponentIDs(task), slot0.ID) {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the slot-0 tray's leak is answered")

	// A schedule firing is refused, naming the leak.
	_, err = e.client.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: sched.GetId()})
	require.Error(t, err)
	require.Contains(t, err.Error(), "open coolant leak")
	require.Contains(t, err.Error(), tray.Name)

	// An operation-run target fails with that reason.
	run, err := e.client.CreateOperationRun(ctx, rolloutRequest("guarded", rolloutOpts{concurrency: 2}))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		res, err := e.client.ListOperationRunTargets(ctx, &flowv1.ListOperationRunTargetsRequest{OperationRunId: run.GetId(), PhaseScope: flowv1.OperationRunTargetPhaseScope_OPERATION_RUN_TARGET_PHASE_SCOPE_CURRENT_AND_COMPLETED_PHASES})
		require.NoError(t, err)
		for _, tg := range res.GetTargets() {
			if tg.GetRackId().GetId() == a.ID.String() {
				return tg.GetStatus() == flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_FAILED &&
					strings.Contains(tg.GetMessage(), "open coolant leak")
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the leaking rack's target fails with the leak as its reason")

	// A leak on a device Flow does not hold.
	require.NoError(t, e.sims.Seed([]nicosim.Device{{Kind: "compute", ID: "ghost-tray-1", Name: "ghost", Serial: "GHOST1", BMCMAC: "02:ee:00:00:00:01"}}))
	require.NoError(t, e.sims.nico.SetLeak("ghost-tray-1", true))
	admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, e.url)
	require.Eventually(t, func() bool {
		res, err := admin.ListLeakOccurrences(ctx, &adminv1.ListLeakOccurrencesRequest{})
		require.NoError(t, err)
		for _, o := range res.GetOccurrences() {
			if o.GetExternalId() == "ghost-tray-1" {
				return o.GetComponentId() == "" && o.GetUnknownOutcome() == "power_off_sent"
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "listed by its Core ID and answered")
	offCalls := 0
	for _, c := range e.sims.nico.Journal().Calls("ComponentPowerControl") {
		if slices.Contains(c.Devices, "ghost-tray-1") {
			offCalls++
		}
	}
	require.Equal(t, 1, offCalls, "one forced power-off through Core")
	require.Eventually(t, func() bool { return e.power(t, "02:ee:00:00:00:01") == "off" }, 30*time.Second, 20*time.Millisecond)

	// Cleared: the schedule fires.
	require.NoError(t, e.sims.nico.SetLeak(tray.ExternalID, false))
	require.Eventually(t, func() bool {
		return componentInfo(t, e.client, tray.ID).GetLeakStatus() == flowv1.LeakStatus_LEAK_STATUS_NOT_DETECTED
	}, 30*time.Second, 50*time.Millisecond)
	for _, task := range leakTasks(t, e.client, a.ID) {
		e.wait(t, task.GetId()) // the leak response ends first (it conflicts with a power-on)
	}
	fired, err := e.client.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: sched.GetId()})
	require.NoError(t, err)
	require.Len(t, fired.GetTaskIds(), 1)
}
