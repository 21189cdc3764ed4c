package nico

import (
	"context"

	forgepb "github.com/nicoflow/flow/proto/gen/forge"
)

// LeakAlert is the health alert Core raises on a tray whose leak sensor
// fired (spec/southbound.md §2.2, FindMachineIds only_with_health_alert).
const LeakAlert = "hardware-health.tray-leak-detection"

// LeakingMachineIDs lists the machines (DPUs included, as upstream asks)
// that carry the leak alert.
func (c *Client) LeakingMachineIDs(ctx context.Context) ([]string, error) {
	const method = "FindMachineIds"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	alert := LeakAlert
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.FindMachineIds(cctx, &forgepb.MachineSearchConfig{IncludeDpus: true, OnlyWithHealthAlert: &alert})
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]string, 0, len(res.GetMachineIds()))
	for _, id := range res.GetMachineIds() {
		out = append(out, id.GetId())
	}
	return out, nil
}

// LeakingSwitchIDs lists the switches that carry the leak alert.
func (c *Client) LeakingSwitchIDs(ctx context.Context) ([]string, error) {
	const method = "FindSwitchIds"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	alert := LeakAlert
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.FindSwitchIds(cctx, &forgepb.SwitchSearchFilter{OnlyWithHealthAlert: &alert})
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]string, 0, len(res.GetIds()))
	for _, id := range res.GetIds() {
		out = append(out, id.GetId())
	}
	return out, nil
}
