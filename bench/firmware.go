package bench

import (
	"context"
	"os"
	"time"

	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim/nicosim"
	"github.com/nicoflow/flow/sim/simrun"
)

// benchEnvWorkload is a workload that needs server settings.
type benchEnvWorkload interface {
	serverEnv() []string
}

// benchPoller is a workload whose tasks poll the backend; the bench counts
// those calls as status polls.
type benchPoller interface {
	pollMethods() []string
}

// firmwareUpgradeWorkload upgrades racks to version 2.0 with the built-in
// firmware rule (compute trays, then NVLink switches, each a start call and
// status polls). Simulated jobs spend 50ms in each phase, and the server
// polls every 200ms (FLOW_FIRMWARE_POLL_INTERVAL, unless set already).
type firmwareUpgradeWorkload struct{}

func (firmwareUpgradeWorkload) name() string           { return "firmware-upgrade" }
func (firmwareUpgradeWorkload) tune(o *simrun.Options) { o.FirmwarePhase = 50 * time.Millisecond }
func (firmwareUpgradeWorkload) pollMethods() []string {
	return []string{"GetComponentFirmwareStatus", "GetFirmwareUpdateStatus"}
}
func (firmwareUpgradeWorkload) device(d *nicosim.Device) {
	d.Firmware = map[string]string{"bmc": "1.0"}
}

func (firmwareUpgradeWorkload) serverEnv() []string {
	if os.Getenv("FLOW_FIRMWARE_POLL_INTERVAL") != "" {
		return nil
	}
	return []string{"FLOW_FIRMWARE_POLL_INTERVAL=200ms"}
}

func (firmwareUpgradeWorkload) submit(ctx context.Context, c flowv1connect.FlowClient, rack string) ([]*flowv1.UUID, error) {
	v := "2.0"
	res, err := c.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: benchRackSpec(rack), TargetVersion: &v, Description: "flow bench"})
	if err != nil {
		return nil, err
	}
	return res.GetTaskIds(), nil
}

func (firmwareUpgradeWorkload) rule() (operations.Rule, bool) {
	return operations.BuiltinRule(operations.OperationTypeFirmwareControl, "upgrade")
}
