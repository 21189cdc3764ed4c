package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// This file holds the long hardware actions (spec §8.6): bring-up,
// ingestion, decommission and reachability (the firmware steps are in
// package firmware, over firmwareHost). Each waits through durable polls
// (engine.Result.PollAfter) and keeps what it must not redo in its
// checkpoint.

// taskRow reads the action's task.
func (a *actions) taskRow(ctx context.Context, id uuid.UUID) (dbsqlc.Task, error) {
	row, ok, err := a.tasks.get(ctx, id)
	if err == nil && !ok {
		err = pgx.ErrNoRows
	}
	if err != nil {
		return row, fmt.Errorf("read task %s: %w", id, err)
	}
	return row, nil
}

// typeTarget returns the whole target of component type t in the task (for
// actions that run once per step rather than per batch).
func typeTarget(row dbsqlc.Task, t ComponentType) (backend.Target, int, error) {
	var targets map[ComponentType]typeTargets
	if err := json.Unmarshal(row.Targets, &targets); err != nil {
		return backend.Target{}, 0, fmt.Errorf("decode task targets: %w", err)
	}
	tt := targets[t]
	if tt.ByMAC {
		return backend.Target{MACs: tt.IDs}, len(tt.IDs), nil
	}
	return backend.Target{IDs: tt.IDs}, len(tt.IDs), nil
}

func targetKeys(t backend.Target) []string {
	if len(t.MACs) > 0 {
		return t.MACs
	}
	return t.IDs
}

// bringUpControl opens Core's ingestion and power-on gate for the batch.
func (a *actions) bringUpControl(ctx context.Context, call engine.Call[ActionParams]) (engine.Result, error) {
	m, target, err := a.begin(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	if wait, err := a.readinessGate(ctx, call, OperationTypeBringUp); err != nil || wait > 0 {
		return engine.Result{PollAfter: wait}, err
	}
	if err := m.AllowBringUp(ctx, target); err != nil {
		return engine.Result{}, permanentIf(fmt.Errorf("%s bring-up: %w", call.Params.ComponentType, err))
	}
	return engine.Result{}, nil
}

// waitCheckpoint is the checkpoint of WaitBringUp and WaitDecommissioned.
type waitCheckpoint struct {
	Deadline time.Time `json:"deadline"`
	// FailingSince is when status reads started failing in a row (zero
	// while they succeed).
	FailingSince time.Time `json:"failing_since,omitzero"`
}

// waitBringUp waits for every component of the batch to be ingested
// (MachineCreated): it sleeps first, then polls, tolerating read errors.
func (a *actions) waitBringUp(ctx context.Context, call engine.Call[ActionParams]) (engine.Result, error) {
	m, target, err := a.begin(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	p, err := call.Params.Action.WaitParams()
	if err != nil {
		return engine.Result{}, engine.Permanent(err)
	}
	every := a.pollEvery(p.PollInterval)
	var st waitCheckpoint
	if ok, err := call.Checkpoint(&st); err != nil {
		return engine.Result{}, err
	} else if !ok {
		st.Deadline = time.Now().Add(p.Timeout)
		if err := call.SaveCheckpoint(ctx, st); err != nil {
			return engine.Result{}, err
		}
		return engine.Result{PollAfter: every}, nil
	}
	states, err := m.BringUpState(ctx, target)
	if errors.Is(err, backend.ErrNotConfigured) || errors.Is(err, backend.ErrUnsupported) {
		return engine.Result{}, engine.Permanent(err)
	}
	if err == nil {
		done := 0
		for _, k := range targetKeys(target) {
			if states[k] == backend.BringUpDone {
				done++
			}
		}
		_ = call.ReportProgress(ctx, engine.Progress{
			Completed: call.Batch*call.Params.BatchSize + done, Until: st.Deadline,
			Message: fmt.Sprintf("waiting for bring-up, %d of %d ingested", done, len(targetKeys(target))),
		})
		if done == len(targetKeys(target)) {
			return engine.Result{}, nil
		}
	}
	if !time.Now().Before(st.Deadline) {
		return engine.Result{}, engine.Permanent(errors.New("timed out waiting for compute bring-up"))
	}
	return engine.Result{PollAfter: min(every, time.Until(st.Deadline)+time.Millisecond)}, nil
}

// injectExpectation declares the batch's components to the backend from
// Flow's inventory (BMC MAC and IP, serial, rack), so Core can ingest them.
func (a *actions) injectExpectation(ctx context.Context, call engine.Call[ActionParams]) (engine.Result, error) {
	m, _, err := a.begin(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	row, err := a.taskRow(ctx, call.Params.TaskID)
	if err != nil {
		return engine.Result{}, err
	}
	var comps map[string][]uuid.UUID
	if err := json.Unmarshal(row.Components, &comps); err != nil {
		return engine.Result{}, engine.Permanent(fmt.Errorf("decode task components: %w", err))
	}
	batch := map[string]bool{}
	for _, k := range call.Targets {
		batch[strings.ToLower(k)] = true
	}
	var exps []backend.Expectation
	for _, id := range comps[string(call.Params.ComponentType)] {
		c, err := a.inv.Component(ctx, a.pool, id)
		if err != nil {
			return engine.Result{}, fmt.Errorf("read component %s: %w", id, err)
		}
		mac := managementMAC(c)
		if !batch[strings.ToLower(mac)] && !batch[strings.ToLower(c.ExternalID)] {
			continue
		}
		e := backend.Expectation{BMCMAC: mac, Serial: c.SerialNumber, RackID: row.RackID.String()}
		for _, b := range c.BMCs {
			if b.MAC.String() == mac && b.IP != nil {
				e.BMCIP = *b.IP
			}
		}
		exps = append(exps, e)
	}
	if err := m.InjectExpectation(ctx, exps); err != nil {
		return engine.Result{}, permanentIf(fmt.Errorf("%s inject expectation: %w", call.Params.ComponentType, err))
	}
	return engine.Result{}, nil
}

// decommissionControl starts decommissioning the batch, once: a retry or
// re-run asks only the components not already decommissioning (Core accepts
// the request only from Ready).
func (a *actions) decommissionControl(ctx context.Context, call engine.Call[ActionParams]) (engine.Result, error) {
	m, target, err := a.begin(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	if target, err = coreTarget(ctx, m, target); err != nil {
		return engine.Result{}, err
	}
	var sent bool
	if ok, err := call.Checkpoint(&sent); err != nil {
		return engine.Result{}, err
	} else if ok && sent {
		// A retry or a re-run after a crash: ask only the components that
		// have not begun.
		sts, err := m.DecommissionStatus(ctx, target)
		if err != nil {
			return engine.Result{}, permanentIf(fmt.Errorf("%s decommission status: %w", call.Params.ComponentType, err))
		}
		var left []string
		for _, k := range target.IDs {
			s, ok := sts[k]
			if !ok || !(s.Outcome == backend.DecommissionDone || strings.HasPrefix(s.State, "Decommissioning")) {
				left = append(left, k)
			}
		}
		if len(left) == 0 {
			return engine.Result{}, nil
		}
		target = backend.Target{IDs: left}
	} else if err := call.SaveCheckpoint(ctx, true); err != nil {
		return engine.Result{}, err
	}
	if err := m.Decommission(ctx, target); err != nil {
		return engine.Result{}, permanentIf(fmt.Errorf("%s decommission: %w", call.Params.ComponentType, err))
	}
	return engine.Result{}, nil
}

// coreTarget returns t addressed by Core IDs, which decommission needs:
// components Flow addresses by BMC MAC (not linked to Core in Flow's
// inventory) are looked up in the backend's inventory.
func coreTarget(ctx context.Context, m *backend.Manager, t backend.Target) (backend.Target, error) {
	if len(t.MACs) == 0 {
		return t, nil
	}
	actual, err := m.Inventory(ctx)
	if err != nil {
		return t, permanentIf(fmt.Errorf("look up Core IDs by BMC MAC: %w", err))
	}
	byMAC := make(map[string]string, len(actual))
	for _, a := range actual {
		if a.ExternalID != "" {
			byMAC[backend.NormalizeMAC(a.BMCMAC)] = a.ExternalID
		}
	}
	out := backend.Target{IDs: make([]string, 0, len(t.MACs))}
	var unknown []string
	for _, mac := range t.MACs {
		id, ok := byMAC[backend.NormalizeMAC(mac)]
		if !ok {
			unknown = append(unknown, mac)
			continue
		}
		out.IDs = append(out.IDs, id)
	}
	if len(unknown) > 0 {
		return t, engine.Permanent(fmt.Errorf("decommission needs Core IDs: no Core component has BMC MAC %s", strings.Join(unknown, ", ")))
	}
	return out, nil
}

// decommissionErrorWindow is how long status reads may fail in a row before
// WaitDecommissioned gives up.
const decommissionErrorWindow = 5 * time.Minute

// waitDecommissioned polls until every component of the batch is
// decommissioned (spec §8.6): it polls at once, then every poll interval;
// a state outside the known ones, an empty answer or a missing component
// fails; status reads failing for 5 minutes in a row abort.
func (a *actions) waitDecommissioned(ctx context.Context, call engine.Call[ActionParams]) (engine.Result, error) {
	m, target, err := a.begin(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	p, err := call.Params.Action.WaitParams()
	if err != nil {
		return engine.Result{}, engine.Permanent(err)
	}
	var st waitCheckpoint
	if ok, err := call.Checkpoint(&st); err != nil {
		return engine.Result{}, err
	} else if !ok {
		st.Deadline = time.Now().Add(p.Timeout)
		if err := call.SaveCheckpoint(ctx, st); err != nil {
			return engine.Result{}, err
		}
	}
	if target, err = coreTarget(ctx, m, target); err != nil {
		return engine.Result{}, err
	}
	sts, err := m.DecommissionStatus(ctx, target)
	switch {
	case errors.Is(err, backend.ErrNotConfigured) || errors.Is(err, backend.ErrUnsupported):
		return engine.Result{}, engine.Permanent(err)
	case err != nil:
		if st.FailingSince.IsZero() {
			st.FailingSince = time.Now()
			if err := call.SaveCheckpoint(ctx, st); err != nil {
				return engine.Result{}, err
			}
		} else if time.Since(st.FailingSince) >= decommissionErrorWindow {
			return engine.Result{}, engine.Permanent(fmt.Errorf("decommission status unavailable for %s: %w", decommissionErrorWindow, err))
		}
	default:
		if !st.FailingSince.IsZero() {
			st.FailingSince = time.Time{}
			if err := call.SaveCheckpoint(ctx, st); err != nil {
				return engine.Result{}, err
			}
		}
		if len(sts) == 0 {
			return engine.Result{}, engine.Permanent(errors.New("decommission status: empty result"))
		}
		done := 0
		for _, k := range targetKeys(target) {
			s, ok := sts[k]
			switch {
			case !ok || s.State == "":
				return engine.Result{}, engine.Permanent(fmt.Errorf("decommission status: no state for %s", k))
			case s.Outcome == backend.DecommissionFailed:
				return engine.Result{}, engine.Permanent(fmt.Errorf("decommission of %s: unexpected state %s", k, s.State))
			case s.Outcome == backend.DecommissionDone:
				done++
			}
		}
		_ = call.ReportProgress(ctx, engine.Progress{
			Completed: call.Batch*call.Params.BatchSize + done, Until: st.Deadline,
			Message: fmt.Sprintf("waiting for decommission, %d of %d done", done, len(targetKeys(target))),
		})
		if done == len(targetKeys(target)) {
			return engine.Result{}, nil
		}
	}
	if !time.Now().Before(st.Deadline) {
		return engine.Result{}, engine.Permanent(fmt.Errorf("timeout after %s waiting for %s components to be decommissioned", p.Timeout, call.Params.ComponentType))
	}
	return engine.Result{PollAfter: min(a.pollEvery(p.PollInterval), time.Until(st.Deadline)+time.Millisecond)}, nil
}

// reachCheckpoint is VerifyReachability's checkpoint: its deadline and the
// types found reachable so far (they stay reachable).
type reachCheckpoint struct {
	Deadline  time.Time       `json:"deadline"`
	Reachable []ComponentType `json:"reachable,omitempty"`
	Polls     int             `json:"polls"`
}

// verifyReachability waits until every type it names answers power-status
// reads (spec §8.6): types named but not targeted count as reachable; a type
// is reachable once a read succeeds with at least one answer (every
// identifier with require_all), probed in batches of the step's
// max_parallel.
func (a *actions) verifyReachability(ctx context.Context, call engine.Call[ActionParams]) (engine.Result, error) {
	if _, _, err := a.begin(ctx, call); err != nil {
		return engine.Result{}, err
	}
	p, err := call.Params.Action.VerifyReachabilityParams()
	if err != nil {
		return engine.Result{}, engine.Permanent(err)
	}
	var st reachCheckpoint
	if ok, err := call.Checkpoint(&st); err != nil {
		return engine.Result{}, err
	} else if !ok {
		st.Deadline = time.Now().Add(p.Timeout)
	}
	st.Polls++
	row, err := a.taskRow(ctx, call.Params.TaskID)
	if err != nil {
		return engine.Result{}, err
	}
	var pending []ComponentType
	for _, ct := range p.ComponentTypes {
		if slices.Contains(st.Reachable, ct) {
			continue
		}
		target, n, err := typeTarget(row, ct)
		if err != nil {
			return engine.Result{}, engine.Permanent(err)
		}
		if n == 0 || a.reachable(ctx, ct, target, p.RequireAll, call.Params.BatchSize) {
			st.Reachable = append(st.Reachable, ct)
			continue
		}
		pending = append(pending, ct)
	}
	if len(pending) == 0 {
		return engine.Result{}, nil
	}
	if !time.Now().Before(st.Deadline) {
		return engine.Result{}, engine.Permanent(fmt.Errorf("timeout after %s waiting for components to become reachable: %v", p.Timeout, pending))
	}
	if err := call.SaveCheckpoint(ctx, st); err != nil {
		return engine.Result{}, err
	}
	return engine.Result{PollAfter: min(p.PollInterval, time.Until(st.Deadline)+time.Millisecond)}, nil
}

func (a *actions) reachable(ctx context.Context, ct ComponentType, target backend.Target, requireAll bool, batch int) bool {
	m := a.backends.For(backendType(ct))
	if m == nil {
		return false
	}
	keys := targetKeys(target)
	if batch <= 0 {
		batch = len(keys)
	}
	answered := 0
	for chunk := range slices.Chunk(keys, batch) {
		t := backend.Target{IDs: chunk}
		if len(target.MACs) > 0 {
			t = backend.Target{MACs: chunk}
		}
		status, err := m.PowerStatus(ctx, t)
		if err != nil {
			return false
		}
		for _, k := range chunk {
			if _, ok := status[k]; ok {
				answered++
			}
		}
	}
	if requireAll {
		return answered == len(keys)
	}
	return answered > 0
}
