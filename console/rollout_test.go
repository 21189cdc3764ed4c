package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

func run(status flowv1.OperationRunStatus, reason flowv1.OperationRunStatusReason, phases int32, version string) *flowv1.OperationRun {
	fw := &flowv1.UpgradeFirmwareRequest{}
	if version != "" {
		fw.TargetVersion = &version
	}
	return &flowv1.OperationRun{
		Summary: &flowv1.OperationRunSummary{Name: "r", TotalPhases: phases, State: &flowv1.OperationRunState{Status: status, Reason: reason}},
		Configuration: &flowv1.OperationRunConfiguration{
			Operation: &flowv1.OperationRunOperation{Operation: &flowv1.OperationRunOperation_UpgradeFirmware{UpgradeFirmware: fw}},
			Options: &flowv1.OperationRunOptions{MaxConcurrentTargets: 2, SafetyPolicy: &flowv1.OperationRunSafetyPolicy{Gates: []*flowv1.OperationRunSafetyGate{
				{Gate: &flowv1.OperationRunSafetyGate_FailureRate{FailureRate: &flowv1.OperationRunFailureRateGate{FailureThresholdPercent: 20,
					Scope: flowv1.OperationRunSafetyGateScope_OPERATION_RUN_SAFETY_GATE_SCOPE_CUMULATIVE_RUN}}},
			}}},
		},
	}
}

func targets(statuses ...[]string) []targetRow {
	var out []targetRow
	seq := 0
	for phase, ss := range statuses {
		for _, s := range ss {
			out = append(out, targetRow{Seq: seq, Phase: phase, Status: s, Outcome: targetOutcome(s)})
			seq++
		}
	}
	return out
}

func states(d rolloutData) []string {
	var out []string
	for _, p := range d.Phases {
		out = append(out, p.State)
	}
	return out
}

func TestRolloutViewWholeRun(t *testing.T) {
	t.Parallel()
	paused := flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED
	gate := flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_PHASE_GATE

	// At a phase gate: phase 0 done, phase 1 waits for Advance, phase 2
	// waits; the total planned counts every phase.
	d := rolloutView(run(paused, gate, 3, "2.0"), targets([]string{"completed", "failed"}, []string{"pending", "pending"}, []string{"pending"}))
	require.Equal(t, 5, d.Planned)
	require.Equal(t, []string{"done", "waiting for Advance", "waiting"}, states(d))
	require.True(t, d.AtPhaseGate)
	require.Equal(t, 1, d.Next.Index)
	require.Nil(t, d.Current)
	require.Equal(t, "firmware upgrade to version 2.0", d.Operation)
	require.Equal(t, "Paused at the phase gate: the phase before has finished; phase 1 (2 racks) waits for Advance.", d.Status)
	require.Equal(t, []string{
		"Safety gate: pauses the run when 20% of the planned targets failed (counted over the whole run so far).",
		"Phase gates: after each phase the run pauses until an operator advances it to the next.",
		"At most 2 racks at once.",
	}, d.Gates)
	require.Equal(t, 1, d.Phases[0].Done)
	require.Equal(t, 1, d.Phases[0].Failed)

	// Paused by an operator in phase 1: it is the current phase.
	d = rolloutView(run(paused, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_OPERATOR_PAUSED, 3, ""),
		targets([]string{"completed"}, []string{"submitted", "blocked"}, []string{"pending"}))
	require.Equal(t, []string{"done", "paused", "waiting"}, states(d))
	require.Equal(t, 1, d.Current.Index)
	require.Equal(t, 1, d.Phases[1].Running)
	require.Equal(t, 1, d.Phases[1].Waiting, "a blocked target is waiting")
	require.Equal(t, "firmware upgrade to the bundle's default version", d.Operation)

	// Cancelled: the targets never started are skipped.
	d = rolloutView(run(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_CANCELLED, 0, 2, ""), targets([]string{"completed", "terminated"}, []string{"skipped"}))
	require.Equal(t, []string{"done", "skipped"}, states(d))
	require.Equal(t, 1, d.Phases[0].Other)

	// A baseline's run: its per-type versions, one line each.
	op, versions := runOperation(run(paused, gate, 1, `{"nvswitch":{"nvos":"25.02","bmc":"1.3"},"compute":{"bmc":"2.0"}}`).GetConfiguration())
	require.Equal(t, "firmware upgrade to the versions below", op)
	require.Equal(t, []string{"compute: bmc 2.0", "nvswitch: bmc 1.3, nvos 25.02"}, versions)
}

func TestScheduleTimes(t *testing.T) {
	t.Parallel()
	when, zone := scheduleWhen(&flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, Spec: "0 2 * * *", Timezone: "Europe/Paris"})
	require.Equal(t, "cron 0 2 * * * in Europe/Paris", when)
	at := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	local, utc := inZone(at, zone)
	require.Equal(t, "2026-12-07 02:00 CET (Europe/Paris)", local)
	require.Equal(t, "2026-12-07 01:00 UTC", utc)
	local, _ = inZone(time.Date(2026, 7, 7, 0, 0, 0, 0, time.UTC), zone)
	require.Equal(t, "2026-07-07 02:00 CEST (Europe/Paris)", local, "summer time")
	when, zone = scheduleWhen(&flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON, Spec: "*/5 * * * *"})
	require.Equal(t, "cron */5 * * * * in UTC", when)
	local, _ = inZone(at, zone)
	require.Empty(t, local, "a UTC schedule says its time once")
	require.Equal(t, "2 completed, 1 failed", statusCounts(map[string]int{"failed": 1, "completed": 2}))
}

func TestWorkForms(t *testing.T) {
	t.Parallel()
	_, err := workForm{Kind: "upgrade"}.preview()
	require.EqualError(t, err, "racks: name at least one rack")
	req, err := workForm{Kind: "upgrade", Racks: "demo-0001, demo-0002\ndemo-0001 3f2a9c01-0000-4000-8000-000000000001", Types: []string{"compute"}, Version: "2.0"}.preview()
	require.NoError(t, err)
	fw := req.GetUpgradeFirmware()
	require.Equal(t, "2.0", fw.GetTargetVersion())
	ts := fw.GetTargetSpec().GetRacks().GetTargets()
	require.Len(t, ts, 3, "each rack once")
	require.Equal(t, "demo-0001", ts[0].GetName())
	require.Equal(t, "3f2a9c01-0000-4000-8000-000000000001", ts[2].GetId().GetId())
	require.Equal(t, []flowv1.ComponentType{flowv1.ComponentType_COMPONENT_TYPE_COMPUTE}, ts[0].GetComponentTypes())
	_, err = workForm{Kind: "power", Op: "on"}.preview()
	require.EqualError(t, err, "component: tick at least one component")
	_, err = workForm{Kind: "power", Op: "explode", Components: []string{"x"}}.preview()
	require.EqualError(t, err, `op: want on, off or reset, not "explode"`)
	req, err = workForm{Kind: "power", Op: "off", Components: []string{"a", "b"}}.preview()
	require.NoError(t, err)
	require.Len(t, req.GetPowerOff().GetTargetSpec().GetComponents().GetTargets(), 2)
	require.Equal(t, "Power off 2 components", workForm{Kind: "power", Op: "off", Components: []string{"a", "b"}}.What())

	_, err = runForm{Name: "x", Percent: "0", Phases: "2", MaxConcurrent: "1", MaxFailures: "1"}.request()
	require.EqualError(t, err, `share of the racks (percent): give a whole number from 1 to 100, not "0"`)
	_, err = runForm{Percent: "100", Phases: "2", MaxConcurrent: "1", MaxFailures: "1"}.request()
	require.EqualError(t, err, "name: give the rollout a name")
	r, err := runForm{Name: "x", Version: "2.0", Percent: "50", Phases: "3", MaxConcurrent: "4", MaxFailures: "2", AutoAdvance: true, SelectorSeed: "s", OrderingSeed: "o"}.request()
	require.NoError(t, err)
	cfg := r.GetConfiguration()
	require.Equal(t, int32(50), cfg.GetSelector().GetPercentage().GetPercentage())
	require.Equal(t, "s", cfg.GetSelector().GetPercentage().GetSeed())
	require.Equal(t, "o", cfg.GetOptions().GetOrderingPolicy().GetRandom().GetSeed())
	require.Equal(t, int32(3), cfg.GetOptions().GetPhasePolicy().GetEqual().GetPhaseCount())
	require.True(t, cfg.GetOptions().GetPhasePolicy().GetAdvancePolicy().GetAutoAdvance())
	require.Equal(t, int32(2), cfg.GetOptions().GetSafetyPolicy().GetGates()[0].GetFailureCount().GetFailureThresholdCount())
	require.Nil(t, cfg.GetOperation().GetUpgradeFirmware().GetTargetSpec(), "no racks: every rack")
}
