package operations_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/operations"
)

// renderStep writes a step in the notation of spec/execution.md §7.5:
// "stage Type timeout retry: actions", retry as attempts/initial/backoff.
func renderStep(t *testing.T, s ruledef.Step) string {
	t.Helper()
	retry := "-"
	if s.Retry != nil {
		retry = fmt.Sprintf("%d/%v/%g", s.Retry.MaxAttempts, s.Retry.InitialInterval.Std(), s.Retry.BackoffCoefficient)
		require.Zero(t, s.Retry.MaxInterval, "built-in rules set no max_interval")
	}
	require.Zero(t, s.MaxParallel, "all built-in steps have max_parallel 0")
	require.Zero(t, s.DelayAfter)
	var acts []string
	for _, a := range s.PreOperation {
		acts = append(acts, "pre "+renderAction(t, a))
	}
	acts = append(acts, renderAction(t, s.MainOperation))
	for _, a := range s.PostOperation {
		acts = append(acts, "post "+renderAction(t, a))
	}
	return fmt.Sprintf("%d %s %v %s: %s", s.Stage, s.ComponentType, s.Timeout.Std(), retry, strings.Join(acts, ", "))
}

func renderAction(t *testing.T, a ruledef.Action) string {
	t.Helper()
	switch a.Name {
	case ruledef.ActionPowerControl:
		p, err := a.PowerControlParams()
		require.NoError(t, err)
		if p.Operation != "" {
			return "PowerControl " + string(p.Operation)
		}
		return "PowerControl"
	case ruledef.ActionVerifyPowerStatus:
		p, err := a.VerifyPowerStatusParams()
		require.NoError(t, err)
		return fmt.Sprintf("VPS %s %v/%v", p.Expected, p.Timeout, p.PollInterval)
	case ruledef.ActionSleep:
		p, err := a.SleepParams()
		require.NoError(t, err)
		return fmt.Sprintf("Sleep %v", p.Duration)
	case ruledef.ActionFirmwareControl:
		p, err := a.FirmwareControlParams()
		require.NoError(t, err)
		return fmt.Sprintf("FirmwareControl %v/%v", p.PollInterval, p.PollTimeout)
	case ruledef.ActionWaitDecommissioned:
		p, err := a.WaitParams()
		require.NoError(t, err)
		return fmt.Sprintf("WaitDecommissioned %v/%v", p.Timeout, p.PollInterval)
	}
	require.Zero(t, a.Timeout, a.Name)
	require.Zero(t, a.PollInterval, a.Name)
	return string(a.Name)
}

// TestBuiltinRules checks every built-in rule against the table of
// spec/execution.md §7.5.
func TestBuiltinRules(t *testing.T) {
	t.Parallel()
	require.NoError(t, operations.LoadBuiltinRules())
	fw := []string{
		"1 Compute 45m0s 2/30s/1.5: FirmwareControl 2m0s/45m0s",
		"2 NVSwitch 45m0s 2/30s/1.5: FirmwareControl 2m0s/45m0s",
	}
	want := map[string]struct {
		name  string
		steps []string
	}{
		"power_control.power_on": {"Hardcoded Default Power On", []string{
			"1 PowerShelf 15m0s 3/5s/2: PowerControl, post VPS On 5m0s/10s",
			"2 NVSwitch 15m0s 3/5s/2: PowerControl, post VPS On 5m0s/10s",
			"3 Compute 20m0s 3/1s/2: PowerControl, post VPS On 5m0s/10s",
		}},
		"power_control.power_off": {"Hardcoded Default Power Off", []string{
			"1 Compute 20m0s 3/1s/2: PowerControl, post VPS Off 5m0s/10s",
			"2 NVSwitch 15m0s 3/5s/2: PowerControl, post VPS Off 5m0s/10s",
			"3 PowerShelf 15m0s 3/5s/2: PowerControl, post VPS Off 5m0s/10s",
		}},
		"power_control.force_power_on": {"Hardcoded Default Force Power On", []string{
			"1 PowerShelf 15m0s 3/5s/2: PowerControl",
			"2 NVSwitch 15m0s 3/5s/2: PowerControl",
			"3 Compute 20m0s 3/1s/2: PowerControl, post Sleep 10s",
			"4 PowerShelf 20m0s 2/5s/1.5: VPS On 5m0s/5s",
			"4 NVSwitch 20m0s 2/5s/1.5: VPS On 5m0s/5s",
			"4 Compute 20m0s 2/5s/1.5: VPS On 5m0s/5s",
		}},
		"power_control.force_power_off": {"Hardcoded Default Force Power Off", []string{
			"1 Compute 20m0s 3/1s/2: PowerControl, post Sleep 10s",
			"2 NVSwitch 15m0s 3/5s/2: PowerControl, post Sleep 5s",
			"3 PowerShelf 15m0s 3/5s/2: PowerControl, post Sleep 5s",
			"4 PowerShelf 20m0s 2/5s/1.5: VPS Off 5m0s/5s",
			"4 NVSwitch 20m0s 2/5s/1.5: VPS Off 5m0s/5s",
			"4 Compute 20m0s 2/5s/1.5: VPS Off 5m0s/5s",
		}},
		"power_control.restart": {"Hardcoded Default Restart", []string{
			"1 Compute 20m0s 3/1s/2: PowerControl power_off, post VPS Off 10m0s/15s",
			"2 NVSwitch 15m0s 3/5s/2: PowerControl power_off, post VPS Off 10m0s/15s",
			"3 PowerShelf 15m0s 3/5s/2: PowerControl power_off, post VPS Off 10m0s/15s",
			"4 PowerShelf 15m0s 3/5s/2: PowerControl power_on, post VPS On 10m0s/15s",
			"5 NVSwitch 15m0s 3/5s/2: PowerControl power_on, post VPS On 10m0s/15s",
			"6 Compute 20m0s 3/1s/2: PowerControl power_on, post VPS On 10m0s/15s",
		}},
		"power_control.force_restart": {"Hardcoded Default Force Restart", []string{
			"1 Compute 20m0s 3/1s/2: PowerControl force_power_off, post Sleep 10s",
			"2 NVSwitch 15m0s 3/5s/2: PowerControl force_power_off, post Sleep 5s",
			"3 PowerShelf 15m0s 3/5s/2: PowerControl force_power_off, post Sleep 5s",
			"4 PowerShelf 20m0s 2/5s/1.5: VPS Off 5m0s/15s",
			"4 NVSwitch 20m0s 2/5s/1.5: VPS Off 5m0s/15s",
			"4 Compute 20m0s 2/5s/1.5: VPS Off 5m0s/15s",
			"5 PowerShelf 15m0s 3/5s/2: PowerControl force_power_on, post Sleep 10s",
			"6 NVSwitch 15m0s 3/5s/2: PowerControl force_power_on, post Sleep 15s",
			"7 Compute 20m0s 3/1s/2: PowerControl force_power_on, post Sleep 10s",
			"8 PowerShelf 20m0s 2/5s/1.5: VPS On 5m0s/5s",
			"8 NVSwitch 20m0s 2/5s/1.5: VPS On 5m0s/5s",
			"8 Compute 20m0s 2/5s/1.5: VPS On 5m0s/5s",
		}},
		"power_control.cold_reset": {"Hardcoded Default AC Power Cycle", []string{
			"1 Compute 20m0s -: PowerControl",
		}},
		"firmware_control.upgrade":   {"Hardcoded Default Firmware Upgrade", fw},
		"firmware_control.downgrade": {"Hardcoded Default Firmware Upgrade", fw},
		"firmware_control.rollback":  {"Hardcoded Default Firmware Upgrade", fw},
		"bring_up.bring_up": {"Hardcoded Default Bring Up", []string{
			"1 PowerShelf 15m0s 3/10s/2: PowerControl power_on, post VPS On 10m0s/15s",
			"2 Compute 15m0s 3/10s/2: PowerControl power_on, post VPS On 10m0s/15s",
			"3 Compute 1h0m0s 2/30s/2: FirmwareControl 2m0s/45m0s",
			"4 NVSwitch 15m0s 3/10s/2: PowerControl power_on, post VPS On 10m0s/15s",
			"5 NVSwitch 10m0s 2/10s/2: VerifyFirmwareConsistency",
			"6 Compute 20m0s 2/10s/2: pre PowerControl power_off, pre VPS Off 5m0s/15s, pre Sleep 30s, PowerControl power_on, post VPS On 10m0s/15s",
		}},
		"bring_up.ingest": {"Hardcoded Default Ingest", []string{
			"1 Compute 10m0s -: InjectExpectation",
			"1 NVSwitch 10m0s -: InjectExpectation",
		}},
		"decommission.decommission": {"Hardcoded Default Decommission", []string{
			"1 Compute 4h0m0s 3/30s/2: DecommissionControl, post WaitDecommissioned 4h0m0s/30s",
			"2 NVSwitch 4h0m0s 3/30s/2: DecommissionControl, post WaitDecommissioned 4h0m0s/30s",
			"3 PowerShelf 4h0m0s 3/30s/2: DecommissionControl, post WaitDecommissioned 4h0m0s/30s",
		}},
	}

	got := map[string]bool{}
	for _, r := range operations.BuiltinRules() {
		key := string(r.Type) + "." + string(r.Code)
		got[key] = true
		t.Run(key, func(t *testing.T) {
			w, ok := want[key]
			require.True(t, ok, "unexpected built-in rule %s", key)
			require.Equal(t, w.name, r.Name)
			require.Equal(t, uuid.Nil, r.ID)
			require.Equal(t, "v1", r.Definition.Version)
			var steps []string
			for _, s := range r.Definition.Steps {
				steps = append(steps, renderStep(t, s))
			}
			require.Equal(t, w.steps, steps)
		})
	}
	for key := range want {
		require.True(t, got[key], "missing built-in rule %s", key)
	}

	// warm_reset and inject_expectation have no built-in rule.
	_, ok := operations.BuiltinRule(operations.OperationTypePowerControl, operations.CodeWarmReset)
	require.False(t, ok)
	_, ok = operations.BuiltinRule(operations.OperationTypeInjectExpectation, operations.CodeInjectExpectation)
	require.False(t, ok)
}

// TestBuiltinRulesUseInternalActions shows why built-ins are validated with
// internal actions allowed: the same definitions fail as user rules.
func TestBuiltinRulesUseInternalActions(t *testing.T) {
	t.Parallel()
	bringUp, ok := operations.BuiltinRule(operations.OperationTypeBringUp, operations.CodeBringUp)
	require.True(t, ok)
	require.EqualError(t, bringUp.Definition.Validate(), "rule_definition_json: step 4: main_operation: unknown action: VerifyFirmwareConsistency")
	powerOn, ok := operations.BuiltinRule(operations.OperationTypePowerControl, operations.CodePowerOn)
	require.True(t, ok)
	require.NoError(t, powerOn.Definition.Validate())
}

func TestBuiltinRuleIsACopy(t *testing.T) {
	t.Parallel()
	r, ok := operations.BuiltinRule(operations.OperationTypePowerControl, operations.CodeRestart)
	require.True(t, ok)
	off := operations.CodeForcePowerOff
	*r.Definition.Steps[0].MainOperation.Parameters.Operation = off
	r.Definition.Steps[0].Retry.MaxAttempts = 99
	again, _ := operations.BuiltinRule(operations.OperationTypePowerControl, operations.CodeRestart)
	require.Equal(t, operations.CodePowerOff, *again.Definition.Steps[0].MainOperation.Parameters.Operation)
	require.Equal(t, 3, again.Definition.Steps[0].Retry.MaxAttempts)
}

func TestMinimalRule(t *testing.T) {
	t.Parallel()
	r := operations.MinimalRule(operations.OperationTypePowerControl, operations.CodeWarmReset)
	require.Equal(t, "Minimal Default Rule for power_control.warm_reset", r.Name)
	require.Empty(t, r.Definition.Steps)
	require.False(t, r.Definition.HasStepFor([]operations.ComponentType{operations.ComponentTypeCompute}))
}
