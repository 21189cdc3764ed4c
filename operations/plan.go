package operations

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/engine"
)

// Engine action kinds of the rule actions (stable strings: they are stored
// with every run).
const (
	kindPowerControl      = "flow.power_control"
	kindVerifyPowerStatus = "flow.verify_power_status"
	kindGetPowerStatus    = "flow.get_power_status"
	kindSleep             = "flow.sleep"

	kindFirmwareControl           = "flow.firmware_control"
	kindVerifyFirmwareConsistency = "flow.verify_firmware_consistency"
	kindBringUpControl            = "flow.bring_up_control"
	kindWaitBringUp               = "flow.wait_bring_up"
	kindInjectExpectation         = "flow.inject_expectation"
	kindDecommissionControl       = "flow.decommission_control"
	kindWaitDecommissioned        = "flow.wait_decommissioned"
	kindVerifyReachability        = "flow.verify_reachability"
	kindVerifyFirmwareVersions    = "flow.verify_firmware_versions"
)

// actionKinds maps a rule action to its engine action kind.
var actionKinds = map[ruledef.ActionName]string{
	ruledef.ActionPowerControl:      kindPowerControl,
	ruledef.ActionVerifyPowerStatus: kindVerifyPowerStatus,
	ruledef.ActionGetPowerStatus:    kindGetPowerStatus,
	ruledef.ActionSleep:             kindSleep,

	ruledef.ActionFirmwareControl:           kindFirmwareControl,
	ruledef.ActionVerifyFirmwareConsistency: kindVerifyFirmwareConsistency,
	ruledef.ActionBringUpControl:            kindBringUpControl,
	ruledef.ActionWaitBringUp:               kindWaitBringUp,
	ruledef.ActionInjectExpectation:         kindInjectExpectation,
	ruledef.ActionDecommissionControl:       kindDecommissionControl,
	ruledef.ActionWaitDecommissioned:        kindWaitDecommissioned,
	ruledef.ActionVerifyReachability:        kindVerifyReachability,
	ruledef.ActionVerifyFirmwareVersions:    kindVerifyFirmwareVersions,
}

// runTimeouts are the fixed per-type run budgets of upstream (spec §8.1).
// A run gets the larger of this and the sum of its stages' step budgets,
// so a rule with long firmware polls is not cut short (upstream's fixed 60 m
// can end a legal two-stage firmware rule half-way).
var runTimeouts = map[OperationType]time.Duration{
	OperationTypePowerControl:      60 * time.Minute,
	OperationTypeFirmwareControl:   60 * time.Minute,
	OperationTypeInjectExpectation: 60 * time.Minute,
	OperationTypeBringUp:           120 * time.Minute,
	OperationTypeDecommission:      4 * time.Hour,
}

// MaxVerifyGrace bounds the grace of the firmware read-back
// (FLOW_FIRMWARE_VERIFY_GRACE): how long a device may take to show the
// version its backend reported installed.
const MaxVerifyGrace = 24 * time.Hour

// DefaultVerifyGrace is FLOW_FIRMWARE_VERIFY_GRACE's default.
const DefaultVerifyGrace = 2 * time.Minute

// ActionParams are the engine params of every rule action: which task, which
// component type, and the action as the frozen rule states it. They hold no
// secret: firmware credentials are read from the task row when needed.
type ActionParams struct {
	TaskID        uuid.UUID      `json:"task_id"`
	ComponentType ComponentType  `json:"component_type"`
	ByMAC         bool           `json:"by_mac,omitempty"`
	Action        ruledef.Action `json:"action"`
	// Operation is the power operation PowerControl sends: the action's
	// own, else the task's.
	Operation OperationCode `json:"operation,omitempty"`
	Override  bool          `json:"override_readiness_check,omitempty"`
	// BatchSize is the step's max_parallel (0: one batch), so a batch's
	// progress can count the batches before it.
	BatchSize int `json:"batch_size,omitempty"`
	// LeakObservedAt is, for a leak response, when the leak was first
	// observed (Unix nanoseconds): the leak-response metrics time from it.
	LeakObservedAt int64 `json:"leak_observed_at,omitempty"`
}

// stepName is how an engine step records its rule origin: the rule stage
// number, the component type, the action's position in the step and its
// name, e.g. "2/NVSwitch/1/VerifyPowerStatus". reportFromRun parses it back.
func stepName(stage int, t ComponentType, pos int, a ruledef.ActionName) string {
	return fmt.Sprintf("%d/%s/%d/%s", stage, t, pos, a)
}

// stepChain is the engine chain of the actions of one rule step.
func stepChain(stage int, t ComponentType) string { return fmt.Sprintf("%d/%s", stage, t) }

func parseStepName(name string) (stage int, t ComponentType, ok bool) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 {
		return 0, "", false
	}
	n, err := strconv.Atoi(parts[0])
	if err != nil {
		return 0, "", false
	}
	return n, ComponentType(parts[1]), true
}

// buildPlan turns a frozen rule into an engine plan for one task.
//
// A rule stage runs its steps (one per component type) in parallel, each
// step running its actions in order. The engine runs steps of one action
// each, so a rule stage becomes as many engine stages as its longest step
// has actions: engine stage k runs action k of every step that has one.
// Batching (max_parallel), call timeouts and retries are the engine's, per
// action, as spec §8.4/§8.5 describe. A rule stage that contains a firmware
// action waits for all its steps when one fails (spec §8.3).
//
// Every rule step with a FirmwareControl ends with the read-back of the
// installed versions (Step.EngineActions), in the step's chain: an engine
// step of its own, so its reads are checkpointed apart from the update and
// a crash during them starts no update again; in the chain, so it reads
// only the components whose update completed, after the step's own post
// actions (a power cycle that activates the firmware, say). grace is how
// long it may re-read a component not yet at its target
// (FLOW_FIRMWARE_VERIFY_GRACE), frozen into the plan and added to the
// step's budget.
//
// Stages whose steps target no component are skipped. The plan has no
// stages when nothing in the rule applies.
func buildPlan(taskID uuid.UUID, t OperationType, code OperationCode, rule ruledef.Definition, targets map[ComponentType]typeTargets, payload Payload, grace time.Duration, holds []engine.Hold) (engine.Plan, error) {
	plan := engine.Plan{Owner: taskID.String()}
	var budget time.Duration
	for _, st := range rule.Stages() {
		var steps []ruledef.Step
		for _, s := range st.Steps {
			if len(targets[s.ComponentType].IDs) > 0 {
				steps = append(steps, s)
			}
		}
		if len(steps) == 0 {
			continue
		}
		waitAll := slices.ContainsFunc(steps, func(s ruledef.Step) bool {
			return slices.ContainsFunc(s.Actions(), func(a ruledef.Action) bool { return a.Name == ruledef.ActionFirmwareControl })
		})
		depth := 0
		var stageBudget time.Duration
		for _, s := range steps {
			acts := s.EngineActions()
			depth = max(depth, len(acts))
			b := s.Budget(len(targets[s.ComponentType].IDs))
			if slices.ContainsFunc(acts, func(a ruledef.Action) bool { return a.Name == ruledef.ActionVerifyFirmwareVersions }) {
				b += grace + callTimeoutCaps[ruledef.ActionVerifyFirmwareVersions]
			}
			stageBudget = max(stageBudget, b)
		}
		budget = min(budget+stageBudget, ruledef.MaxBudget)
		for k := range depth {
			es := engine.Stage{Name: fmt.Sprintf("stage %d", st.Number), WaitAll: waitAll}
			for _, s := range steps {
				acts := s.EngineActions()
				if k >= len(acts) {
					continue
				}
				step, err := engineStep(taskID, code, st.Number, s, k, acts[k], targets[s.ComponentType], payload, grace)
				if err != nil {
					return engine.Plan{}, err
				}
				if ruledef.PowerTransition(acts[k], code, s.ComponentType) {
					step.Holds = holds
				}
				es.Steps = append(es.Steps, step)
			}
			plan.Stages = append(plan.Stages, es)
		}
	}
	plan.Timeout = max(runTimeouts[t], budget+budget/10)
	return plan, nil
}

func engineStep(taskID uuid.UUID, code OperationCode, stage int, s ruledef.Step, pos int, a ruledef.Action, tt typeTargets, payload Payload, grace time.Duration) (engine.Step, error) {
	kind, ok := actionKinds[a.Name]
	if !ok {
		return engine.Step{}, fmt.Errorf("%w: action %s is not supported yet", ErrNotApplicable, a.Name)
	}
	rp := s.RetryPolicy()
	step := engine.Step{
		Name:   stepName(stage, s.ComponentType, pos, a.Name),
		Action: kind,
		// The actions of one rule step form a chain: a component one of
		// them fails is left out of the next, and the rule step fails
		// once the others have been through all of them.
		Chain:       stepChain(stage, s.ComponentType),
		MaxParallel: s.MaxParallel,
		Timeout:     s.CallTimeout(),
		Retry: engine.RetryPolicy{
			MaxAttempts:        rp.MaxAttempts,
			InitialInterval:    rp.InitialInterval.Std(),
			BackoffCoefficient: rp.BackoffCoefficient,
			MaxInterval:        rp.MaxInterval.Std(),
		},
	}
	if a.ComponentScoped() {
		step.Targets = tt.IDs
	} else {
		step.MaxParallel = 0
	}
	if a.Name == ruledef.ActionVerifyFirmwareVersions {
		// One read per component type of the task, whatever the rule
		// step's batches; the grace travels with the action.
		step.MaxParallel = 0
		a.Timeout = ruledef.Duration(grace)
	}
	params := ActionParams{
		TaskID: taskID, ComponentType: s.ComponentType, ByMAC: tt.ByMAC, Action: a,
		Override: payload.OverrideReadinessCheck, BatchSize: s.MaxParallel,
	}
	if payload.Leak != nil {
		params.LeakObservedAt = payload.Leak.ObservedAt
	}
	if a.Name == ruledef.ActionPowerControl {
		p, err := a.PowerControlParams()
		if err != nil {
			return engine.Step{}, err
		}
		params.Operation = code
		if p.Operation != "" {
			params.Operation = p.Operation
		}
	}
	if c, ok := callTimeoutCaps[a.Name]; ok {
		step.Timeout = min(step.Timeout, c)
	}
	if waits(a.Name) {
		// A polling action spends its own timeout waiting: the step must
		// outlast it, whatever the call budget says.
		wait := a.Timeout.Std()
		switch a.Name {
		case ruledef.ActionFirmwareControl:
			if p, err := a.FirmwareControlParams(); err == nil {
				wait = p.PollTimeout
			}
		case ruledef.ActionWaitBringUp, ruledef.ActionWaitDecommissioned:
			if p, err := a.WaitParams(); err == nil {
				wait = p.Timeout
			}
		case ruledef.ActionVerifyFirmwareVersions:
			wait = grace + callTimeoutCaps[ruledef.ActionVerifyFirmwareVersions]
		}
		step.Deadline = max(s.Budget(len(tt.IDs)), wait+2*time.Minute)
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return engine.Step{}, err
	}
	step.Params = json.RawMessage(raw)
	return step, nil
}

// waits reports whether action a spends its own timeout polling, so its
// engine step must outlast that timeout.
func waits(a ruledef.ActionName) bool {
	switch a {
	case ruledef.ActionVerifyPowerStatus, ruledef.ActionFirmwareControl, ruledef.ActionWaitBringUp, ruledef.ActionWaitDecommissioned, ruledef.ActionVerifyReachability, ruledef.ActionVerifyFirmwareVersions:
		return true
	}
	return false
}

// callTimeoutCaps bound single calls of the actions that wait between
// short backend calls (a start, then status polls, each its own call). A
// rule's step timeout of 45 m or 4 h is the whole wait's budget, not one
// call's: the step deadline carries it. DecommissionControl gets 5 m as
// upstream (spec §8.5). Calls must also stay inside the engine's rescue
// window (FLOW_ENGINE_RESCUE_AFTER, default 30 m).
var callTimeoutCaps = map[ruledef.ActionName]time.Duration{
	ruledef.ActionFirmwareControl:           10 * time.Minute,
	ruledef.ActionWaitBringUp:               2 * time.Minute,
	ruledef.ActionWaitDecommissioned:        2 * time.Minute,
	ruledef.ActionVerifyReachability:        2 * time.Minute,
	ruledef.ActionDecommissionControl:       5 * time.Minute,
	ruledef.ActionBringUpControl:            10 * time.Minute,
	ruledef.ActionInjectExpectation:         10 * time.Minute,
	ruledef.ActionVerifyFirmwareConsistency: 10 * time.Minute,
	ruledef.ActionVerifyFirmwareVersions:    2 * time.Minute,
}
