package app

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/notify"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/isolation"
	"github.com/nicoflow/flow/operations/rollout"
	"github.com/nicoflow/flow/operations/window"
)

// IsolationResendJob sends again the rack isolation requests the facility
// has not acknowledged (docs/operations.md "Rack isolation").
const IsolationResendJob = "isolation-resend"

// isolationResendInterval is how often the leader looks for due requests
// (each is due FLOW_LEAK_ISOLATION_RESEND after its last send).
const isolationResendInterval = 5 * time.Second

// isolationRequests emits flow.rack.isolation_requested for each facility
// request, in the transaction that opens or re-sends the isolation: every
// send is a new event (its own ID, one delivery per subscription), carrying
// the same isolation ID.
func isolationRequests(svc *notify.Service) isolation.RequestFunc {
	return func(ctx context.Context, tx pgx.Tx, r isolation.Request) error {
		i := r.Isolation
		rack := i.RackID
		comps := make([]string, len(i.ComponentIDs))
		for k, c := range i.ComponentIDs {
			comps[k] = c.String()
		}
		data := &notify.IsolationData{ID: i.ID.String(), Tier: string(i.Tier), Reason: i.Reason, PowerFeed: r.Rack.Feed, CoolantLoop: r.Rack.Loop,
			ComponentIDs: comps, ObservedAt: i.ObservedAt, RequestedAt: i.RequestedAt, Send: r.Send,
			Acknowledge: "flow rack isolation ack " + nameOr(r.Rack.Name, rack) + " (AdminService.AcknowledgeIsolation)"}
		if i.ReportID != nil {
			data.ReportID = i.ReportID.String()
		}
		return svc.Emit(ctx, tx, notify.Event{
			Type: notify.RackIsolationRequested, RackID: &rack,
			DedupeKey: fmt.Sprintf("rack-isolation/%s/%d", i.ID, r.Send),
			Data: notify.Data{Rack: &notify.Ref{ID: rack.String(), Name: r.Rack.Name}, Isolation: data,
				Message: fmt.Sprintf("isolate rack %s (AC breaker and coolant valves): %s leak tier: %s", nameOr(r.Rack.Name, rack), i.Tier, i.Reason)},
		})
	}
}

func nameOr(name string, id uuid.UUID) string {
	if name == "" {
		return id.String()
	}
	return name
}

// rackPlacement reads a rack's name, power feed and coolant loop.
func rackPlacement(inv *inventory.Service) isolation.PlacementFunc {
	return func(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (isolation.Placement, error) {
		name, feed, loop, err := inv.RackPlacementOf(ctx, dbtx, id)
		return isolation.Placement{Name: name, Feed: feed, Loop: loop}, err
	}
}

// loopRacks returns the live racks on a coolant loop.
func loopRacks(inv *inventory.Service) isolation.LoopRacksFunc {
	return inv.LoopRackIDs
}

// startGates is the task manager's StartGate: maintenance windows and
// freezes, then cooling awareness (a coolant loop's open leak); the first
// that holds a task says why.
type startGates struct {
	windows *window.Service
	cooling *isolation.Service
}

var (
	_ operations.StartGate = startGates{}
	_ rollout.WindowGate   = startGates{}
)

// Hold implements operations.StartGate.
func (g startGates) Hold(ctx context.Context, dbtx db.DBTX, s operations.GateSubject) (operations.GateHold, error) {
	h, err := g.windows.Hold(ctx, dbtx, s)
	if err != nil || h.Held() {
		return h, err
	}
	c, err := g.cooling.Hold(ctx, dbtx, s)
	if err != nil || c.Held() {
		return c, err
	}
	return h, nil // the window it may start in
}

// HoldTarget implements rollout.WindowGate: an operation run's claim on a
// rack waits for its windows and its coolant loop.
func (g startGates) HoldTarget(ctx context.Context, dbtx db.DBTX, runID, rackID uuid.UUID, at time.Time) (operations.GateHold, error) {
	h, err := g.windows.HoldTarget(ctx, dbtx, runID, rackID, at)
	if err != nil || h.Held() {
		return h, err
	}
	return g.cooling.Hold(ctx, dbtx, operations.GateSubject{RackID: rackID, Type: operations.OperationTypeFirmwareControl, Code: operations.CodeUpgrade,
		TriggerType: rollout.TriggerOperationRun, TriggerID: runID.String(), At: at})
}

// RunRelease implements rollout.WindowGate.
func (g startGates) RunRelease(ctx context.Context, dbtx db.DBTX, runID uuid.UUID) (string, string, bool, error) {
	return g.windows.RunRelease(ctx, dbtx, runID)
}
