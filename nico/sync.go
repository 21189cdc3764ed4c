package nico

import (
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	forgepb "github.com/nicoflow/flow/proto/gen/forge"
)

// Health is Core's aggregate health report of a machine, switch, shelf or
// rack (health.HealthReport).
type Health struct {
	Source      string        `json:"source"`
	TriggeredBy string        `json:"triggered_by,omitempty"`
	ObservedAt  *time.Time    `json:"observed_at,omitempty"`
	Successes   []HealthProbe `json:"successes"`
	Alerts      []HealthAlert `json:"alerts"`
}

// HealthProbe is one passing probe.
type HealthProbe struct {
	ID     string `json:"id"`
	Target string `json:"target,omitempty"`
}

// HealthAlert is one failing probe.
type HealthAlert struct {
	ID              string     `json:"id"`
	Target          string     `json:"target,omitempty"`
	InAlertSince    *time.Time `json:"in_alert_since,omitempty"`
	Message         string     `json:"message"`
	TenantMessage   string     `json:"tenant_message,omitempty"`
	Classifications []string   `json:"classifications"`
}

func optTime(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime().UTC()
	return &t
}

// healthOf converts a report; nil stays nil (Core sent none).
func healthOf(h *forgepb.HealthReport) *Health {
	if h == nil {
		return nil
	}
	out := &Health{Source: h.GetSource(), TriggeredBy: h.GetTriggeredBy(), ObservedAt: optTime(h.GetObservedAt()),
		Successes: []HealthProbe{}, Alerts: []HealthAlert{}}
	for _, s := range h.GetSuccesses() {
		out.Successes = append(out.Successes, HealthProbe{ID: s.GetId(), Target: s.GetTarget()})
	}
	for _, a := range h.GetAlerts() {
		out.Alerts = append(out.Alerts, HealthAlert{
			ID: a.GetId(), Target: a.GetTarget(), InAlertSince: optTime(a.GetInAlertSince()), Message: a.GetMessage(),
			TenantMessage: a.GetTenantMessage(), Classifications: append([]string{}, a.GetClassifications()...),
		})
	}
	return out
}

// Position is a machine's place as Core reports it; nil fields are unknown.
type Position struct {
	SlotID, TrayIndex, TopologyID *int32
}

// Rack is Core's view of a rack: its health (nil: Core sent none) and rack
// group ("" when ungrouped).
type Rack struct {
	ID      string
	Health  *Health
	GroupID string
}

// ExpectedRack is a rack Core expects (GetAllExpectedRacks).
type ExpectedRack struct {
	RackID, ProfileID, GroupID string
	Name, Description          string
	Labels                     map[string]string
}

// PowerStates reads the actual power of the machines with ids
// (GetPowerOptions), in batches: on, off, or "power_manager_disabled".
// Machines Core does not report are absent from the map.
func (c *Client) PowerStates(ctx context.Context, ids []string) (map[string]PowerState, error) {
	const method = "GetPowerOptions"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	if err := checkIDs(method, ids); err != nil {
		return nil, err
	}
	size := c.batchSize(ctx)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	out := make(map[string]PowerState, len(ids))
	chunks := slices.Collect(slices.Chunk(ids, size))
	replies := make([]*forgepb.PowerOptionResponse, len(chunks))
	if err := eachBatch(cctx, len(chunks), func(bctx context.Context, i int) (err error) {
		replies[i], err = c.rpc.GetPowerOptions(bctx, &forgepb.PowerOptionRequest{MachineId: machineIDs(chunks[i])})
		return classify(ctx, method, err)
	}); err != nil {
		return nil, err
	}
	for _, res := range replies {
		for _, p := range res.GetResponse() {
			switch p.GetActualState() {
			case forgepb.PowerState_POWER_STATE_ON:
				out[p.GetHostId().GetId()] = PowerStateOn
			case forgepb.PowerState_POWER_STATE_OFF:
				out[p.GetHostId().GetId()] = PowerStateOff
			default:
				out[p.GetHostId().GetId()] = "power_manager_disabled"
			}
		}
	}
	return out, nil
}

// Positions reads the slot, tray and topology of the machines with ids
// (GetMachinePositionInfo), in batches. Machines Core does not report are
// absent from the map.
func (c *Client) Positions(ctx context.Context, ids []string) (map[string]Position, error) {
	const method = "GetMachinePositionInfo"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	if err := checkIDs(method, ids); err != nil {
		return nil, err
	}
	size := c.batchSize(ctx)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	out := make(map[string]Position, len(ids))
	chunks := slices.Collect(slices.Chunk(ids, size))
	replies := make([]*forgepb.MachinePositionInfoList, len(chunks))
	if err := eachBatch(cctx, len(chunks), func(bctx context.Context, i int) (err error) {
		replies[i], err = c.rpc.GetMachinePositionInfo(bctx, &forgepb.MachinePositionQuery{MachineIds: machineIDs(chunks[i])})
		return classify(ctx, method, err)
	}); err != nil {
		return nil, err
	}
	for _, res := range replies {
		for _, p := range res.GetMachinePositionInfo() {
			out[p.GetMachineId().GetId()] = Position{SlotID: p.PhysicalSlotNumber, TrayIndex: p.ComputeTrayIndex, TopologyID: p.TopologyId}
		}
	}
	return out, nil
}

// Racks reads the racks with ids (FindRacksByIds), in batches. Racks Core
// does not know are absent from the result.
func (c *Client) Racks(ctx context.Context, ids []string) ([]Rack, error) {
	const method = "FindRacksByIds"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	if err := checkIDs(method, ids); err != nil {
		return nil, err
	}
	size := c.batchSize(ctx)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	var out []Rack
	for chunk := range slices.Chunk(ids, size) {
		req := &forgepb.RacksByIdsRequest{}
		for _, id := range chunk {
			req.RackIds = append(req.RackIds, &forgepb.RackId{Id: id})
		}
		res, err := c.rpc.FindRacksByIds(cctx, req)
		if err != nil {
			return nil, classify(ctx, method, err)
		}
		for _, r := range res.GetRacks() {
			out = append(out, Rack{ID: r.GetId().GetId(), Health: healthOf(r.GetStatus().GetHealth()), GroupID: r.GetRackGroupId().GetId()})
		}
	}
	return out, nil
}

// ExpectedRacks reads every rack Core expects (GetAllExpectedRacks).
func (c *Client) ExpectedRacks(ctx context.Context) ([]ExpectedRack, error) {
	const method = "GetAllExpectedRacks"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.GetAllExpectedRacks(cctx, &emptypb.Empty{})
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]ExpectedRack, 0, len(res.GetExpectedRacks()))
	for _, r := range res.GetExpectedRacks() {
		out = append(out, ExpectedRack{
			RackID: r.GetRackId().GetId(), ProfileID: r.GetRackProfileId().GetId(), GroupID: r.GetRackGroupId().GetId(),
			Name: r.GetMetadata().GetName(), Description: r.GetMetadata().GetDescription(), Labels: labels(r.GetMetadata()),
		})
	}
	return out, nil
}
