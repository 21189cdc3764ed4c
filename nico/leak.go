package nico

import (
	"context"

	forgepb "github.com/nicoflow/flow/proto/gen/forge"
)

// LeakAlert is the health alert Core raises on a tray whose leak sensor
// fired (spec/southbound.md §2.2, FindMachineIds only_with_health_alert).
const LeakAlert = "hardware-health.tray-leak-detection"

// LeakingMachineIDs lists the machines that carry the leak alert. Core is
// asked with include_dpus, as upstream asks, so that a leak Core reports
// on a DPU alone is seen; but a tray's leak also lists the DPUs inside it,
// which are not devices of their own to answer (Flow holds the tray, not
// its DPUs): while anything leaks, one more call (FindMachinesByIds on the
// leaking IDs) learns each leaking host's DPUs and leaves them out. When
// that read fails, the whole list is returned: reporting a DPU too many is
// better than missing a leak.
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
	if len(out) < 2 {
		return out, nil // a lone ID cannot be a host together with its DPU
	}
	ms, err := c.Machines(ctx, out)
	if err != nil {
		return out, nil
	}
	inside := map[string]bool{}
	for _, m := range ms {
		if m.Host {
			for _, d := range m.DPUIDs {
				inside[d] = true
			}
		}
	}
	kept := out[:0]
	for _, id := range out {
		if !inside[id] {
			kept = append(kept, id)
		}
	}
	return kept, nil
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
