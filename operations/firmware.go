package operations

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/firmware"
)

// firmwareHost is the rule actions' side of the firmware steps (package
// firmware runs them): the task, its target, its payload and the readiness
// gate.
type firmwareHost struct{ a *actions }

var _ firmware.Host[ActionParams] = firmwareHost{}

func (h firmwareHost) Begin(ctx context.Context, call engine.Call[ActionParams]) (*backend.Manager, backend.Target, error) {
	return h.a.begin(ctx, call)
}

func (h firmwareHost) Job(call engine.Call[ActionParams]) firmware.Job {
	return firmware.Job{TaskID: call.Params.TaskID, ComponentType: string(call.Params.ComponentType), BatchSize: call.Params.BatchSize}
}

func (h firmwareHost) Polling(call engine.Call[ActionParams]) (firmware.Polling, error) {
	p, err := call.Params.Action.FirmwareControlParams()
	if err != nil {
		return firmware.Polling{}, err
	}
	return firmware.Polling{Interval: h.a.pollEvery(p.PollInterval), Timeout: p.PollTimeout}, nil
}

// verifyReread is how often the firmware read-back reads a device not
// yet at its target again, unless FLOW_FIRMWARE_POLL_INTERVAL says.
const verifyReread = 15 * time.Second

// Verifying returns the read-back's policy: the grace frozen into the
// action by the planner, and the re-read interval.
func (h firmwareHost) Verifying(call engine.Call[ActionParams]) (firmware.Polling, error) {
	return firmware.Polling{Interval: h.a.pollEvery(verifyReread), Timeout: call.Params.Action.Timeout.Std()}, nil
}

func (h firmwareHost) ReadinessGate(ctx context.Context, call engine.Call[ActionParams]) (time.Duration, error) {
	return h.a.readinessGate(ctx, call, OperationTypeFirmwareControl)
}

// Request reads the task's firmware request: the target version, the
// sub-targets and the version-check override of a FirmwareControl task, the
// target version an ingest task froze (its rack's baseline,
// SetIngestFirmwareTarget), and the readiness override of any. The start
// call sends it and the read-back verifies it, so both see the same.
func (h firmwareHost) Request(ctx context.Context, call engine.Call[ActionParams]) (firmware.Request, error) {
	row, err := h.a.taskRow(ctx, call.Params.TaskID)
	if err != nil {
		return firmware.Request{}, err
	}
	var p Payload
	if err := json.Unmarshal(row.Information, &p); err != nil {
		return firmware.Request{}, engine.Permanent(fmt.Errorf("decode task payload: %w", err))
	}
	r := firmware.Request{Auth: p.AuthenticationData}
	r.BypassReadiness = p.OverrideReadinessCheck
	if p.StartTime != 0 && p.EndTime > p.StartTime {
		r.WindowStart, r.WindowEnd = time.Unix(p.StartTime, 0), time.Unix(p.EndTime, 0)
	}
	if OperationType(row.OperationType) == OperationTypeFirmwareControl {
		r.Version = p.TargetVersion
		r.Components = p.SubTargets
		r.Force = p.OverrideVersionCheck
	} else if p.TargetVersion != "" {
		// Only an ingest task onto the active baseline has one.
		r.Version = p.TargetVersion
	}
	return r, nil
}

func (h firmwareHost) TypeTarget(ctx context.Context, call engine.Call[ActionParams]) (backend.Target, int, error) {
	row, err := h.a.taskRow(ctx, call.Params.TaskID)
	if err != nil {
		return backend.Target{}, 0, err
	}
	t, n, err := typeTarget(row, call.Params.ComponentType)
	if err != nil {
		return t, n, engine.Permanent(err)
	}
	return t, n, nil
}
