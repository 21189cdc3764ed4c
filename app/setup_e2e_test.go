package app

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// TestSubmitNeedsTheBackendConfigured: with NICO_CORE_API_URL unset, an
// operation on components Core manages is refused at submit with
// FailedPrecondition naming the variable, and no task is written; one on
// power shelves managed through PSM (configured) is still accepted.
func TestSubmitNeedsTheBackendConfigured(t *testing.T) {
	t.Parallel()
	managers := filepath.Join(t.TempDir(), "managers.yaml")
	require.NoError(t, os.WriteFile(managers, []byte("component_managers:\n  compute: nico\n  nvswitch: nico\n  powershelf: psm\n"), 0o600))
	e := startE2E(t, 0, func(env map[string]string) {
		delete(env, "NICO_CORE_API_URL")
		env["COMPONENT_MANAGER_CONFIG"] = managers
	})
	r := e.addRack(t, 1, false)
	ctx := context.Background()
	typed := func(ct flowv1.ComponentType) *flowv1.OperationTargetSpec {
		spec := rackSpec(r.Name)
		spec.GetRacks().GetTargets()[0].ComponentTypes = []flowv1.ComponentType{ct}
		return spec
	}

	for name, call := range map[string]func() error{
		"PowerOnRack": func() error {
			_, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(r.Name)})
			return err
		},
		"PowerOffCompute": func() error {
			_, err := e.client.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: typed(flowv1.ComponentType_COMPONENT_TYPE_COMPUTE)})
			return err
		},
		"UpgradeFirmware": func() error {
			_, err := e.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name)})
			return err
		},
	} {
		err := call()
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%s: %v", name, err)
		require.ErrorContains(t, err, "NICO_CORE_API_URL", name)
	}
	tasks, err := e.client.ListTasks(ctx, &flowv1.ListTasksRequest{})
	require.NoError(t, err)
	require.Zero(t, tasks.GetTotal(), "a refused request writes no task")

	res, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: typed(flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF)})
	require.NoError(t, err)
	require.Len(t, res.GetTaskIds(), 1)
}
