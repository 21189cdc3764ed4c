package operations_test

import (
	"testing"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/operations"
)

func TestStepRequirements(t *testing.T) {
	t.Parallel()
	const (
		C  = operations.ComponentTypeCompute
		N  = operations.ComponentTypeNVSwitch
		PS = operations.ComponentTypePowerShelf
	)
	req := func(ct operations.ComponentType, c ruledef.Capability) ruledef.Requirement {
		return ruledef.Requirement{ComponentType: ct, Capability: c}
	}
	d, err := ruledef.Parse([]byte(defJSON(
		stepJSON(`"pre_operation":[{"name":"Sleep","parameters":{"duration":"1s"}}],
			"post_operation":[
				{"name":"VerifyReachability","timeout":"1m","poll_interval":"1s","parameters":{"component_types":["NVSwitch","PowerShelf","CDU"]}},
				{"name":"FirmwareControl"}]`, pcAction),
		`{"component_type":"NVSwitch","stage":2,"main_operation":{"name":"GetPowerStatus","timeout":"1m"}}`,
		`{"component_type":"PowerShelf","stage":3,"main_operation":{"name":"DecommissionControl"},"post_operation":[{"name":"WaitDecommissioned","timeout":"1h","poll_interval":"1m"}]}`,
	)))
	require.NoError(t, err)
	require.NoError(t, d.Validate())

	// Compute step, Compute and NVSwitch targeted: reachability adds
	// NVSwitch PowerStatus only (PowerShelf and CDU are not targeted).
	got, err := d.Steps[0].Requirements([]operations.ComponentType{C, N})
	require.NoError(t, err)
	require.Equal(t, []ruledef.Requirement{
		req(C, ruledef.CapabilityFirmwareControl),
		req(C, ruledef.CapabilityFirmwareStatus),
		req(C, ruledef.CapabilityPowerControl),
		req(C, ruledef.CapabilityPowerStatus),
		req(N, ruledef.CapabilityPowerStatus),
	}, got)

	// A step whose type is not targeted needs nothing.
	got, err = d.Steps[0].Requirements([]operations.ComponentType{N, PS})
	require.NoError(t, err)
	require.Empty(t, got)

	// Whole definition, decommission actions included.
	got, err = d.Requirements([]operations.ComponentType{C, PS})
	require.NoError(t, err)
	require.Equal(t, []ruledef.Requirement{
		req(C, ruledef.CapabilityFirmwareControl),
		req(C, ruledef.CapabilityFirmwareStatus),
		req(C, ruledef.CapabilityPowerControl),
		req(C, ruledef.CapabilityPowerStatus),
		req(PS, ruledef.CapabilityDecommissionControl),
		req(PS, ruledef.CapabilityDecommissionStatus),
		req(PS, ruledef.CapabilityPowerStatus),
	}, got)
}

func TestBuiltinRequirements(t *testing.T) {
	t.Parallel()
	all := []operations.ComponentType{operations.ComponentTypeCompute, operations.ComponentTypeNVSwitch, operations.ComponentTypePowerShelf}
	for _, tt := range []struct {
		code operations.OperationCode
		typ  operations.OperationType
		want []ruledef.Requirement
	}{
		{operations.CodeIngest, operations.OperationTypeBringUp, []ruledef.Requirement{
			{ComponentType: "Compute", Capability: ruledef.CapabilityInjectExpectation},
			{ComponentType: "NVSwitch", Capability: ruledef.CapabilityInjectExpectation},
		}},
		{operations.CodeColdReset, operations.OperationTypePowerControl, []ruledef.Requirement{
			{ComponentType: "Compute", Capability: ruledef.CapabilityPowerControl},
		}},
	} {
		r, ok := operations.BuiltinRule(tt.typ, tt.code)
		require.True(t, ok)
		got, err := r.Definition.Requirements(all)
		require.NoError(t, err)
		require.Equal(t, tt.want, got, tt.code)
	}
	bringUp, _ := operations.BuiltinRule(operations.OperationTypeBringUp, operations.CodeBringUp)
	got, err := bringUp.Definition.Requirements([]operations.ComponentType{operations.ComponentTypeNVSwitch})
	require.NoError(t, err)
	require.Contains(t, got, ruledef.Requirement{ComponentType: "NVSwitch", Capability: ruledef.CapabilityFirmwareConsistencyCheck})
}

func TestRequirementsUnknownAction(t *testing.T) {
	t.Parallel()
	s := ruledef.Step{ComponentType: operations.ComponentTypeCompute, Stage: 1, MainOperation: ruledef.Action{Name: "VerifyFirmwareVersion"}}
	_, err := s.Requirements([]operations.ComponentType{operations.ComponentTypeCompute})
	require.EqualError(t, err, "unknown action VerifyFirmwareVersion in capability validation")
}
