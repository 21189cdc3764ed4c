package operations_test

import (
	"testing"

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
	req := func(ct operations.ComponentType, c operations.Capability) operations.Requirement {
		return operations.Requirement{ComponentType: ct, Capability: c}
	}
	d, err := operations.ParseRuleDefinition([]byte(defJSON(
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
	require.Equal(t, []operations.Requirement{
		req(C, operations.CapabilityFirmwareControl),
		req(C, operations.CapabilityFirmwareStatus),
		req(C, operations.CapabilityPowerControl),
		req(C, operations.CapabilityPowerStatus),
		req(N, operations.CapabilityPowerStatus),
	}, got)

	// A step whose type is not targeted needs nothing.
	got, err = d.Steps[0].Requirements([]operations.ComponentType{N, PS})
	require.NoError(t, err)
	require.Empty(t, got)

	// Whole definition, decommission actions included.
	got, err = d.Requirements([]operations.ComponentType{C, PS})
	require.NoError(t, err)
	require.Equal(t, []operations.Requirement{
		req(C, operations.CapabilityFirmwareControl),
		req(C, operations.CapabilityFirmwareStatus),
		req(C, operations.CapabilityPowerControl),
		req(C, operations.CapabilityPowerStatus),
		req(PS, operations.CapabilityDecommissionControl),
		req(PS, operations.CapabilityDecommissionStatus),
		req(PS, operations.CapabilityPowerStatus),
	}, got)
}

func TestBuiltinRequirements(t *testing.T) {
	t.Parallel()
	all := []operations.ComponentType{operations.ComponentTypeCompute, operations.ComponentTypeNVSwitch, operations.ComponentTypePowerShelf}
	for _, tt := range []struct {
		code operations.OperationCode
		typ  operations.OperationType
		want []operations.Requirement
	}{
		{operations.CodeIngest, operations.OperationTypeBringUp, []operations.Requirement{
			{ComponentType: "Compute", Capability: operations.CapabilityInjectExpectation},
			{ComponentType: "NVSwitch", Capability: operations.CapabilityInjectExpectation},
		}},
		{operations.CodeColdReset, operations.OperationTypePowerControl, []operations.Requirement{
			{ComponentType: "Compute", Capability: operations.CapabilityPowerControl},
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
	require.Contains(t, got, operations.Requirement{ComponentType: "NVSwitch", Capability: operations.CapabilityFirmwareConsistencyCheck})
}

func TestRequirementsUnknownAction(t *testing.T) {
	t.Parallel()
	s := operations.Step{ComponentType: operations.ComponentTypeCompute, Stage: 1, MainOperation: operations.Action{Name: "VerifyFirmwareVersion"}}
	_, err := s.Requirements([]operations.ComponentType{operations.ComponentTypeCompute})
	require.EqualError(t, err, "unknown action VerifyFirmwareVersion in capability validation")
}
