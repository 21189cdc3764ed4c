package app

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// coolingSite is a server with leak detection every second and five demo
// racks: the leaking one, and two more, on coolant loop cdu-a; two on
// cdu-b. env adds or replaces settings (FLOW_LEAK_COOLING_HOLD).
type coolingSite struct {
	*e2e
	s                     *restartableServer
	flow                  flowv1connect.FlowClient
	leaking, loop1, loop2 inventory.Rack
	other1, other2        inventory.Rack
	tray                  inventory.Component
}

func startCoolingSite(t *testing.T, env map[string]string) *coolingSite {
	t.Helper()
	ctx := context.Background()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: 10 * time.Millisecond, firmwarePhase: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	s := &restartableServer{env: map[string]string{
		"DATABASE_URL": dbtest.NewDB(t), "FLOW_LISTEN_ADDR": "127.0.0.1:0",
		"NICO_CORE_API_URL": sims.nicoSrv.URL(), "PSM_API_URL": sims.psmSrv.URL(),
		"FLOW_SHUTDOWN_TIMEOUT": "5s", "ALLOW_INSECURE_GRPC": "true", "FLOW_ADMIN_LISTEN": "off",
		"FLOW_CONFIG_FILE": leakConfig(t), "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "true",
		"FLOW_DATA_ENCRYPTION_KEY_PATH": newKeyFile(t), "FLOW_FIRMWARE_POLL_INTERVAL": "100ms",
		// Every rollout here is over most of a small site: no second
		// person's approval (docs/change-safety.md), not what is tested.
		"FLOW_APPROVAL_THRESHOLD": "0",
	}}
	for k, v := range env {
		s.env[k] = v
	}
	s.start(t)
	t.Cleanup(func() { s.stop(t) })
	c := &coolingSite{
		e2e:  &e2e{client: flowv1connect.NewFlowClient(http.DefaultClient, s.url), sims: sims, url: s.url, inv: inventory.NewService(), dbURL: s.env["DATABASE_URL"]},
		s:    s,
		flow: flowv1connect.NewFlowClient(http.DefaultClient, s.url),
	}
	c.leaking, c.loop1, c.loop2 = c.addRack(t, 31, false), c.addRack(t, 32, false), c.addRack(t, 33, false)
	c.other1, c.other2 = c.addRack(t, 34, false), c.addRack(t, 35, false)
	runSync(t, s.url)
	pool := openPool(t, c.dbURL)
	_, err = pool.Exec(ctx, `UPDATE rack SET coolant_loop = 'cdu-a' WHERE id = ANY($1)`, []uuid.UUID{c.leaking.ID, c.loop1.ID, c.loop2.ID})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE rack SET coolant_loop = 'cdu-b' WHERE id = ANY($1)`, []uuid.UUID{c.other1.ID, c.other2.ID})
	require.NoError(t, err)
	c.tray = readRack(t, pool, c.leaking.ID).component(t, inventory.ComponentTypeCompute, 10)
	waitPolled(t, c.client, c.tray.ID)
	return c
}

// leak raises (or, open false, ends) the leak on the leaking rack's tray
// in the simulator and waits until Flow sees it so.
func (c *coolingSite) leak(t *testing.T, open bool) {
	t.Helper()
	require.NoError(t, c.sims.nico.SetLeak(c.tray.ExternalID, open))
	want := flowv1.LeakStatus_LEAK_STATUS_NOT_DETECTED
	if open {
		want = flowv1.LeakStatus_LEAK_STATUS_DETECTED
	}
	require.Eventually(t, func() bool { return componentInfo(t, c.flow, c.tray.ID).GetLeakStatus() == want }, 15*time.Second, 20*time.Millisecond, "leak detected: %v", open)
}

// TestCoolingHoldPausesRolloutTargets (issue 45, docs/event-rules.md
// "Cooling awareness"): a firmware rollout whose one phase has two racks
// on a coolant loop with an open leak (on a third rack of the loop, not a
// target) and two on another loop runs the other loop's racks at once and
// leaves the loop's racks unclaimed, the run saying why; once the leak is
// handled (Core no longer reports it) the run claims them and completes.
func TestCoolingHoldPausesRolloutTargets(t *testing.T) {
	t.Parallel()
	c := startCoolingSite(t, nil)
	c.leak(t, true)

	req := rolloutRequest("cooling", rolloutOpts{concurrency: 4})
	req.Configuration.Operation.GetUpgradeFirmware().TargetSpec = rackSpec(c.loop1.Name, c.loop2.Name, c.other1.Name, c.other2.Name)
	id := createRun(t, c.flow, req)
	held := map[string]bool{c.loop1.ID.String(): true, c.loop2.ID.String(): true}
	// The other loop's racks complete; the run says the loop's are held.
	run := waitRun(t, c.flow, id, time.Minute, func(r *flowv1.OperationRun) bool {
		done := 0
		for _, tg := range allTargets(t, c.flow, id) {
			if !held[tg.GetRackId().GetId()] && tg.GetStatus() == flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_COMPLETED {
				done++
			}
		}
		return done == 2
	})
	run = waitRun(t, c.flow, id, 30*time.Second, func(r *flowv1.OperationRun) bool {
		return r.GetSummary().GetStatusMessage() != ""
	})
	require.Contains(t, run.GetSummary().GetStatusMessage(), "2 targets held (coolant loop cdu-a has an open leak on rack "+c.leaking.Name+")")
	require.Nil(t, run.GetSummary().GetFinishedAt())
	for _, tg := range allTargets(t, c.flow, id) {
		if held[tg.GetRackId().GetId()] {
			require.Empty(t, tg.GetTaskId().GetId(), "a target on the leaking loop is not claimed: %s", tg.GetMessage())
			require.NotEqual(t, flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_COMPLETED, tg.GetStatus())
		}
	}
	for _, r := range []inventory.Rack{c.loop1, c.loop2} {
		require.Empty(t, leakTasks(t, c.client, r.ID), "no task on %s while its loop leaks", r.Name)
	}

	// Handled: the run claims the loop's racks and completes.
	c.leak(t, false)
	run = waitRun(t, c.flow, id, 90*time.Second, func(r *flowv1.OperationRun) bool { return r.GetSummary().GetFinishedAt() != nil })
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED, run.GetSummary().GetState().GetStatus(), run.GetSummary().GetStatusMessage())
	targets := allTargets(t, c.flow, id)
	require.Len(t, targets, 4)
	for _, tg := range targets {
		require.Equal(t, flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_COMPLETED, tg.GetStatus(), tg.GetMessage())
		require.NotEmpty(t, tg.GetTaskId().GetId())
	}
}

// TestCoolingHoldOff (issue 45): with FLOW_LEAK_COOLING_HOLD=false a
// power-cycle queued on a rack whose coolant loop has an open leak is not
// held: it starts and completes.
func TestCoolingHoldOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := startCoolingSite(t, map[string]string{"FLOW_LEAK_COOLING_HOLD": "false"})
	c.leak(t, true)
	require.Eventually(t, func() bool { return len(leakTasks(t, c.client, c.leaking.ID)) == 1 }, 15*time.Second, 20*time.Millisecond, "the tray-level response")

	cycle, err := c.flow.PowerResetRack(ctx, &flowv1.PowerResetRackRequest{TargetSpec: rackSpec(c.loop1.Name), Description: "queued power-cycle"})
	require.NoError(t, err)
	task := getTask(t, c.client, cycle.GetTaskIds()[0])
	require.NotEqual(t, flowv1.TaskStatus_TASK_STATUS_WAITING, task.GetStatus(), "not held: %s", task.GetMessage())
	require.NotContains(t, task.GetMessage(), "Held")
	done := waitEnd(t, c.flow, cycle.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, done.GetStatus(), done.GetMessage())
	require.Equal(t, flowv1.LeakStatus_LEAK_STATUS_DETECTED, componentInfo(t, c.flow, c.tray.ID).GetLeakStatus(), "the leak was open all along")
}
