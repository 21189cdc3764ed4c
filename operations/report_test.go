package operations_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/operations"
)

// TestReportCounts builds reports from engine runs in the states a rule
// step goes through: a component counts completed only once every action
// of its step (verification included) is done for it, failed once its own
// call failed, and the running action is named.
func TestReportCounts(t *testing.T) {
	t.Parallel()
	var rule ruledef.Definition
	require.NoError(t, json.Unmarshal([]byte(`{"version":"v1","steps":[{"component_type":"NVSwitch","stage":1,
		"main_operation":{"name":"PowerControl"},
		"post_operation":[{"name":"VerifyPowerStatus","timeout":"5m","poll_interval":"10s","parameters":{"expected_status":"on"}},
			{"name":"Sleep","parameters":{"duration":"30s"}}]}]}`), &rule))
	var ids []string
	for i := range 9 {
		ids = append(ids, fmt.Sprintf("s%d", i))
	}
	components := map[operations.ComponentType][]string{operations.ComponentTypeNVSwitch: ids}
	now := time.Date(2026, 12, 1, 10, 42, 0, 0, time.UTC)
	wake := now.Add(17 * time.Second)
	outcomes := func(state engine.State, except map[string]engine.State) []engine.TargetOutcome {
		var out []engine.TargetOutcome
		for _, id := range ids {
			s := state
			if e, ok := except[id]; ok {
				s = e
			}
			out = append(out, engine.TargetOutcome{Target: id, State: s})
		}
		return out
	}
	step := func(pos int, action string, state engine.State, targets []engine.TargetOutcome) engine.StepReport {
		kind := map[string]string{"PowerControl": "flow.power_control", "VerifyPowerStatus": "flow.verify_power_status", "Sleep": "flow.sleep"}[action]
		return engine.StepReport{Name: fmt.Sprintf("1/NVSwitch/%d/%s", pos, action), Action: kind, State: state, StartedAt: &now, Targets: targets, Batches: 1, MaxAttempts: 3}
	}
	pending := func(pos int, action string, targets bool) engine.StepReport {
		s := step(pos, action, engine.StatePending, nil)
		s.StartedAt = nil
		if targets {
			s.Targets = outcomes(engine.StatePending, nil)
		}
		return s
	}
	failedS6 := map[string]engine.State{"s6": engine.StateFailed}
	power := step(0, "PowerControl", engine.StateCompleted, outcomes(engine.StateCompleted, failedS6))
	power.FailedTargets = map[string]string{"s6": "PSU fault"}
	verifying := step(1, "VerifyPowerStatus", engine.StateRunning, outcomes(engine.StateRunning, map[string]engine.State{
		"s0": engine.StateCompleted, "s1": engine.StateCompleted, "s2": engine.StateCompleted, "s3": engine.StateCompleted, "s6": engine.StateSkipped,
	}))
	until := now.Add(5 * time.Minute)
	verifying.Progress = &engine.Progress{Message: "verifying power on, poll 3 of 31, 4 of 8 verified", Until: until, Done: []string{"s0", "s1", "s2", "s3"}}
	verified := step(1, "VerifyPowerStatus", engine.StateCompleted, outcomes(engine.StateCompleted, map[string]engine.State{"s6": engine.StateSkipped}))
	sleeping := step(2, "Sleep", engine.StateRunning, nil)
	sleeping.WakeAt = &wake
	retrying := step(0, "PowerControl", engine.StateRunning, outcomes(engine.StateRunning, nil))
	retrying.Attempt, retrying.LastError = 1, "NVSwitch power_on: unavailable"

	for _, tt := range []struct {
		name                       string
		steps                      []engine.StepReport
		completed, failed, running int
		action                     *operations.CurrentAction
	}{
		{name: "Pending", steps: []engine.StepReport{pending(0, "PowerControl", true), pending(1, "VerifyPowerStatus", true), pending(2, "Sleep", false)}},
		{name: "Retrying", steps: []engine.StepReport{retrying, pending(1, "VerifyPowerStatus", true), pending(2, "Sleep", false)},
			running: 9, action: &operations.CurrentAction{Action: "PowerControl", Detail: "attempt 1 of 3 failed, retrying: NVSwitch power_on: unavailable"}},
		// The power call is done for 8: none is completed before its verification.
		{name: "Verifying", steps: []engine.StepReport{power, verifying, pending(2, "Sleep", false)},
			completed: 4, failed: 1, running: 4, action: &operations.CurrentAction{Action: "VerifyPowerStatus", Detail: "verifying power on, poll 3 of 31, 4 of 8 verified", Until: "2026-12-01T10:47:00Z"}},
		{name: "Sleeping", steps: []engine.StepReport{power, verified, sleeping},
			completed: 8, failed: 1, action: &operations.CurrentAction{Action: "Sleep", Detail: "sleeping 30s, until 10:42:17", Until: "2026-12-01T10:42:17Z"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := &engine.RunReport{State: engine.StateRunning, Stages: []engine.StageReport{{Steps: tt.steps}}}
			rep := operations.BuildReport(rule, components, run)
			require.Equal(t, 9, rep.ComponentsTargeted)
			st := rep.Stages[0]
			require.Equal(t, 9, st.Targets)
			require.Equal(t, []int{tt.completed, tt.failed, tt.running}, []int{st.Completed, st.Failed, st.Running})
			require.Equal(t, tt.completed, st.Steps[0].CompletedComponents)
			require.Equal(t, tt.failed, st.Steps[0].FailedComponents)
			require.Equal(t, tt.action, st.Steps[0].CurrentAction)
		})
	}
}

// TestReportCountsFirmwareJobs: a firmware step that reports counts and the
// components done keeps them when its batch fails: the job that failed is
// the one failed component, not the whole batch.
func TestReportCountsFirmwareJobs(t *testing.T) {
	t.Parallel()
	var rule ruledef.Definition
	require.NoError(t, json.Unmarshal([]byte(`{"version":"v1","steps":[{"component_type":"Compute","stage":1,
		"main_operation":{"name":"FirmwareControl"}}]}`), &rule))
	var ids, done []string
	var targets []engine.TargetOutcome
	for i := range 18 {
		id := fmt.Sprintf("t%d", i)
		ids = append(ids, id)
		state := engine.StateFailed
		if i != 4 {
			done = append(done, id)
			state = engine.StateCompleted // reported done: it stays done
		}
		targets = append(targets, engine.TargetOutcome{Target: id, State: state})
	}
	now := time.Now()
	run := &engine.RunReport{State: engine.StateFailed, Error: "stage 1 failed", Stages: []engine.StageReport{{Steps: []engine.StepReport{{
		Name: "1/Compute/0/FirmwareControl", Action: "flow.firmware_control", State: engine.StateFailed, Error: "firmware update failed for components: [t4]",
		StartedAt: &now, EndedAt: &now, Targets: targets, Batches: 1,
		Progress: &engine.Progress{Completed: 17, Failed: 1, Done: done},
	}}}}}
	rep := operations.BuildReport(rule, map[operations.ComponentType][]string{operations.ComponentTypeCompute: ids}, run)
	st := rep.Stages[0]
	require.Equal(t, "failed", st.Status)
	require.Equal(t, []int{18, 17, 1, 0}, []int{st.Targets, st.Completed, st.Failed, st.Running})
	require.Contains(t, rep.Error, "stage 1 failed: component type Compute failed: FirmwareControl: firmware update failed for components: [t4]")
}
