package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/sim"
)

// addRackWithToR stores demo rack i plus two ToR switches (no BMC, no
// backend ID, as in examples/rack-g10.json: no backend models them) and
// seeds the simulators with the rack's other devices.
func (e *e2e) addRackWithToR(t *testing.T, i int, off bool) inventory.Rack {
	t.Helper()
	r := inventory.DemoRack(i)
	for k := range 2 {
		r.Components = append(r.Components, inventory.Component{
			Type: inventory.ComponentTypeToRSwitch, Name: fmt.Sprintf("%s-tor-%d", r.Name, k),
			Manufacturer: "NVIDIA", SerialNumber: fmt.Sprintf("TOR%05d%d", i, k),
			Position: inventory.Position{SlotID: int32(60 + k)},
		})
	}
	r = e.storeRack(t, r, off)
	pool, err := db.Open(context.Background(), e.dbURL, db.PoolConfig{MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	got, err := e.inv.Rack(context.Background(), pool, r.ID, true) // with the components' IDs
	require.NoError(t, err)
	return got
}

func reportOfTask(t *testing.T, task *flowv1.Task) operations.Report {
	t.Helper()
	var rep operations.Report
	require.NoError(t, json.Unmarshal([]byte(task.GetReport()), &rep), task.GetReport())
	return rep
}

// TestWholeRackOperationsLeaveOutToRSwitches: upstream runs whole-rack
// operations on racks holding ToR switches; Flow leaves the switches out
// (no rule step drives them, no backend models them) and names them.
func TestWholeRackOperationsLeaveOutToRSwitches(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond)
	rack := e.addRackWithToR(t, 31, true)
	ctx := context.Background()
	tors := map[string]string{}
	for _, c := range rack.Components {
		if c.Type == inventory.ComponentTypeToRSwitch {
			tors[c.ID.String()] = c.Name
		}
	}
	require.Len(t, tors, 2)

	res, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	task := e.wait(t, res.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
	require.Len(t, task.GetComponentUuids(), 35, "the ToR switches are not part of the task")
	for _, id := range task.GetComponentUuids() {
		require.NotContains(t, tors, id.GetId())
	}
	rep := reportOfTask(t, task)
	require.Equal(t, 35, rep.ComponentsTargeted)
	require.Len(t, rep.NotTargeted, 2)
	for _, n := range rep.NotTargeted {
		require.Equal(t, tors[n.ComponentID.String()], n.Name)
		require.Equal(t, operations.ComponentTypeToRSwitch, n.Type)
		require.Equal(t, `operation rule "Hardcoded Default Power On" has no step for ToRSwitch`, n.Reason)
	}
	require.Equal(t, "on", e.power(t, macOf(rack, inventory.ComponentTypeCompute, 17)))

	// The same for power off, and for bring-up and ingestion, which were
	// refused as "not linked to actual inventory".
	off, err := e.client.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	task = e.wait(t, off.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
	require.Len(t, reportOfTask(t, task).NotTargeted, 2)
	for _, submit := range []func() (*flowv1.SubmitTaskResponse, error){
		func() (*flowv1.SubmitTaskResponse, error) {
			return e.client.BringUpRack(ctx, &flowv1.BringUpRackRequest{TargetSpec: rackSpec(rack.Name)})
		},
		func() (*flowv1.SubmitTaskResponse, error) {
			return e.client.IngestRack(ctx, &flowv1.IngestRackRequest{TargetSpec: rackSpec(rack.Name)})
		},
	} {
		res, err := submit()
		require.NoError(t, err)
		got, err := e.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: res.GetTaskIds()})
		require.NoError(t, err)
		left := map[string]bool{}
		for _, n := range reportOfTask(t, got.GetTasks()[0]).NotTargeted {
			left[n.ComponentID.String()] = true
		}
		for id := range tors {
			require.True(t, left[id], "ToR switch %s named as not targeted", id)
		}
		// Out of the next submission's way; on an idle machine the task
		// may have completed already (seen), which is as good.
		_, err = e.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: res.GetTaskIds()[0]})
		if err != nil {
			require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
			require.Contains(t, err.Error(), "has status completed")
		}
	}

	// Targeting only the ToR switches still fails: the rule drives nothing.
	_, err = e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: &flowv1.OperationTargetSpec{
		Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: []*flowv1.RackTarget{{
			Identifier:     &flowv1.RackTarget_Name{Name: rack.Name},
			ComponentTypes: []flowv1.ComponentType{flowv1.ComponentType_COMPONENT_TYPE_TORSWITCH},
		}}}},
	}})
	require.ErrorContains(t, err, "has no step applicable to targeted component types [ToRSwitch]")
}

// TestReportTellsTheTruthDuringAPartialFailure: during a power-on whose
// call fails for 1 of the 9 NVLink switches, the report says 8 completed and
// 1 failed for that stage while it runs and after; no counter ever
// decreases or exceeds its targets; the current action is named during the
// step's sleep.
func TestReportTellsTheTruthDuringAPartialFailure(t *testing.T) {
	t.Parallel()
	e := startE2E(t, 50*time.Millisecond)
	rack := e.addRack(t, 32, true)
	ctx := context.Background()
	bad := macOf(rack, inventory.ComponentTypeNVSwitch, 6)
	_, err := e.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultItem, Method: "ComponentPowerControl", Device: bad, Status: "internal_error", Message: "switch 6 PSU fault"})
	require.NoError(t, err)

	retry := `"retry":{"max_attempts":2,"initial_interval":"100ms","backoff_coefficient":2}`
	verify := `{"name":"VerifyPowerStatus","timeout":"20s","poll_interval":"100ms","parameters":{"expected_status":"on"}}`
	rule, err := e.client.CreateOperationRule(ctx, &flowv1.CreateOperationRuleRequest{
		Name: "power on, switches settle", OperationType: flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL, OperationCode: "power_on",
		RuleDefinitionJson: `{"steps":[
			{"component_type":"PowerShelf","stage":1,` + retry + `,"main_operation":{"name":"PowerControl"},"post_operation":[` + verify + `]},
			{"component_type":"NVSwitch","stage":2,` + retry + `,"main_operation":{"name":"PowerControl"},"post_operation":[` + verify + `,
				{"name":"Sleep","parameters":{"duration":"3s"}}]},
			{"component_type":"Compute","stage":3,` + retry + `,"main_operation":{"name":"PowerControl"},"post_operation":[` + verify + `]}]}`,
	})
	require.NoError(t, err)
	submitted := time.Now()
	res, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name), RuleId: rule.GetId()})
	require.NoError(t, err)
	id := res.GetTaskIds()[0]

	// Sample the report until the task ends.
	var (
		last       *operations.Report
		samples    int
		sawRunning bool // 8 completed, 1 failed while the stage runs
		sawSleep   bool
		task       *flowv1.Task
	)
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := e.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{id}})
		require.NoError(t, err)
		task = got.GetTasks()[0]
		rep := reportOfTask(t, task)
		samples++
		require.Equal(t, 35, rep.ComponentsTargeted)
		require.Len(t, rep.Stages, 3)
		for i, st := range rep.Stages {
			require.Equal(t, []int{8, 9, 18}[i], st.Targets, "stage %d targets", st.Number)
			require.LessOrEqual(t, st.Completed+st.Failed+st.Running, st.Targets, "stage %d: %+v", st.Number, st)
			if last != nil {
				prev := last.Stages[i]
				require.GreaterOrEqual(t, st.Completed, prev.Completed, "stage %d completed went back: %+v after %+v", st.Number, st, prev)
				require.GreaterOrEqual(t, st.Failed, prev.Failed, "stage %d failed went back: %+v after %+v", st.Number, st, prev)
			}
		}
		switches := rep.Stages[1]
		if task.GetStatus() == flowv1.TaskStatus_TASK_STATUS_RUNNING && switches.Status == "running" {
			if switches.Completed == 8 && switches.Failed == 1 {
				sawRunning = true
				require.Zero(t, switches.Running)
			}
			if ca := switches.Steps[0].CurrentAction; ca != nil && ca.Action == "Sleep" && ca.Until != "" {
				// (Before its timer is set, in the moment its job starts,
				// the sleep reads "sleeping 3s".)
				sawSleep = true
				require.Regexp(t, `^sleeping 3s, until \d\d:\d\d:\d\d$`, ca.Detail)
				until, err := time.Parse(time.RFC3339, ca.Until)
				require.NoError(t, err)
				// The 3 s timer started after the submission and before
				// this answer (until is in whole seconds). Not "about 3 s
				// from now": on a loaded machine the report may show the
				// sleep a few seconds after its timer fired, until its job
				// ends.
				require.False(t, until.Before(submitted.Add(2*time.Second)), "until %s, submitted at %s", until, submitted)
				require.False(t, until.After(time.Now().Add(3*time.Second)), "until %s is over 3 s from now", until)
			}
		}
		last = &rep
		if task.GetStatus() != flowv1.TaskStatus_TASK_STATUS_RUNNING && task.GetStatus() != flowv1.TaskStatus_TASK_STATUS_PENDING {
			break
		}
		require.True(t, time.Now().Before(deadline), "task still %s", task.GetStatus())
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d report samples", samples)
	require.True(t, sawRunning, "8 completed, 1 failed while the switches' stage ran")
	require.True(t, sawSleep, "the sleep was named while it ran")

	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_FAILED, task.GetStatus())
	require.Contains(t, task.GetMessage(), "stage 2 failed: component type NVSwitch failed: PowerControl: 1 of 9 component(s) failed: ")
	require.Equal(t, 1, strings.Count(task.GetMessage(), bad), "the faulty switch, named once: %s", task.GetMessage())
	require.Equal(t, task.GetMessage(), "stage 2 failed: component type NVSwitch failed: "+last.Stages[1].Steps[0].Error, "the step names the action that failed")
	require.Contains(t, task.GetMessage(), "switch 6 PSU fault")
	rep := *last
	require.Equal(t, []string{"completed", "failed", "pending"}, []string{rep.Stages[0].Status, rep.Stages[1].Status, rep.Stages[2].Status})
	switches := rep.Stages[1]
	require.Equal(t, 8, switches.Completed)
	require.Equal(t, 1, switches.Failed)
	require.Zero(t, switches.Running)
	require.Equal(t, 8, switches.Steps[0].CompletedComponents)
	require.Equal(t, 1, switches.Steps[0].FailedComponents)
	require.Nil(t, switches.Steps[0].CurrentAction)

	// The simulator agrees: 8 switches on, the faulty one off.
	on := 0
	for k := range 9 {
		if e.power(t, macOf(rack, inventory.ComponentTypeNVSwitch, k)) == "on" {
			on++
		}
	}
	require.Equal(t, 8, on)
	require.Equal(t, "off", e.power(t, bad))
}
