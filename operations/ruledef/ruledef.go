// Package ruledef is the operation rule format (spec/execution.md §7): a
// rule definition's numbered stages of per-component-type steps, each a
// sequence of typed actions, with their validation, the capability each
// action needs from a component manager, and the vocabulary the rules and
// the task manager share (operation types and codes, component types).
//
// It is a leaf: the task manager (package operations) plans and runs
// definitions, and the rule files of the CLI (operations/rulefile), the
// console and the engine's plan check read them, without one another.
// Package operations re-exports the vocabulary under its own names, as os
// does fs's (operations.ComponentType is ruledef.ComponentType).
package ruledef

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Version is the only rule definition version (spec §7.3).
const Version = "v1"

// Defaults applied where a rule leaves a value unset (spec §7.1, §8.5, §8.6).
const (
	DefaultStepCallTimeout         = 20 * time.Minute
	DefaultStepBudget              = 30 * time.Minute
	DefaultFirmwarePollInterval    = 2 * time.Minute
	DefaultFirmwarePollTimeout     = 30 * time.Minute
	DefaultWaitBringUpTimeout      = 15 * time.Minute
	DefaultWaitBringUpPoll         = 30 * time.Second
	DefaultWaitDecommissionTimeout = 4 * time.Hour
	DefaultWaitDecommissionPoll    = 30 * time.Second
)

// DefaultRetryPolicy is the retry policy of a step that has no retry block:
// 3 attempts, 1 s initial interval, ×2 backoff, 1 m maximum interval.
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts:        3,
	InitialInterval:    Duration(time.Second),
	BackoffCoefficient: 2,
	MaxInterval:        Duration(time.Minute),
}

// Duration is a time.Duration that reads a JSON string in Go syntax ("90s",
// "5m0s") or a JSON number of nanoseconds, and writes the string form.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string or a number of nanoseconds; null
// leaves d unchanged.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %q", s)
		}
		*d = Duration(v)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt64 {
		return fmt.Errorf("invalid duration %s: want a string such as \"90s\" or whole nanoseconds", b)
	}
	*d = Duration(int64(f))
	return nil
}

// Definition is the body of an operation rule: steps grouped into
// numbered stages. Stages run in ascending order; the steps of one stage run
// in parallel (spec §7.1).
type Definition struct {
	Version string `json:"version"`
	Steps   []Step `json:"steps"`
}

// Step is what one component type does in one stage: pre actions, the main
// action, post actions, then the legacy DelayAfter sleep.
type Step struct {
	ComponentType ComponentType `json:"component_type"`
	Stage         int           `json:"stage"`
	// MaxParallel is the per-call batch size; 0 means all components in one
	// call (spec §8.4).
	MaxParallel   int          `json:"max_parallel"`
	Timeout       Duration     `json:"timeout,omitempty"`
	Retry         *RetryPolicy `json:"retry,omitempty"`
	PreOperation  []Action     `json:"pre_operation,omitempty"`
	MainOperation Action       `json:"main_operation"`
	PostOperation []Action     `json:"post_operation,omitempty"`
	DelayAfter    Duration     `json:"delay_after,omitempty"`
}

// RetryPolicy is the retry policy applied to each component-manager call of
// a step.
type RetryPolicy struct {
	MaxAttempts        int      `json:"max_attempts"`
	InitialInterval    Duration `json:"initial_interval"`
	BackoffCoefficient float64  `json:"backoff_coefficient"`
	MaxInterval        Duration `json:"max_interval,omitempty"`
}

// ActionName names an action a step runs.
type ActionName string

// Actions. The first eight are accepted in user rules; BringUpControl,
// WaitBringUp, InjectExpectation and VerifyFirmwareConsistency only in
// built-in rules (spec §7.2).
const (
	ActionSleep               ActionName = "Sleep"
	ActionPowerControl        ActionName = "PowerControl"
	ActionVerifyPowerStatus   ActionName = "VerifyPowerStatus"
	ActionVerifyReachability  ActionName = "VerifyReachability"
	ActionGetPowerStatus      ActionName = "GetPowerStatus"
	ActionFirmwareControl     ActionName = "FirmwareControl"
	ActionDecommissionControl ActionName = "DecommissionControl"
	ActionWaitDecommissioned  ActionName = "WaitDecommissioned"

	ActionBringUpControl            ActionName = "BringUpControl"
	ActionWaitBringUp               ActionName = "WaitBringUp"
	ActionInjectExpectation         ActionName = "InjectExpectation"
	ActionVerifyFirmwareConsistency ActionName = "VerifyFirmwareConsistency"

	// ActionVerifyFirmwareVersions is the read-back of installed firmware
	// that the planner runs after every FirmwareControl (Step.EngineActions).
	// No rule writes it, and none can leave it out.
	ActionVerifyFirmwareVersions ActionName = "VerifyFirmwareVersions"
)

// Action is one action of a step. Timeout and PollInterval are action-level
// settings some actions require; Parameters are the action's own inputs. Use
// the typed accessors (SleepParams, VerifyPowerStatusParams, …) to read them.
type Action struct {
	Name         ActionName `json:"name"`
	Timeout      Duration   `json:"timeout,omitempty"`
	PollInterval Duration   `json:"poll_interval,omitempty"`
	Parameters   Parameters `json:"parameters,omitzero"`
}

// Parameters is the union of action parameter keys (spec §7.1). A nil field
// is an absent key. Which keys an action accepts is checked by validation;
// read them through Action's typed accessors.
type Parameters struct {
	Duration       *Duration       `json:"duration,omitempty"`
	ExpectedStatus *string         `json:"expected_status,omitempty"`
	ComponentTypes []ComponentType `json:"component_types,omitempty"`
	Operation      *OperationCode  `json:"operation,omitempty"`
	PollInterval   *Duration       `json:"poll_interval,omitempty"`
	PollTimeout    *Duration       `json:"poll_timeout,omitempty"`
	RequireAll     *bool           `json:"require_all,omitempty"`
}

// Parameter keys.
const (
	ParamDuration       = "duration"
	ParamExpectedStatus = "expected_status"
	ParamComponentTypes = "component_types"
	ParamOperation      = "operation"
	ParamPollInterval   = "poll_interval"
	ParamPollTimeout    = "poll_timeout"
	ParamRequireAll     = "require_all"
)

// present returns the keys set in p, in a fixed order.
func (p Parameters) present() []string {
	var keys []string
	add := func(set bool, key string) {
		if set {
			keys = append(keys, key)
		}
	}
	add(p.Duration != nil, ParamDuration)
	add(p.ExpectedStatus != nil, ParamExpectedStatus)
	add(len(p.ComponentTypes) > 0, ParamComponentTypes)
	add(p.Operation != nil, ParamOperation)
	add(p.PollInterval != nil, ParamPollInterval)
	add(p.PollTimeout != nil, ParamPollTimeout)
	add(p.RequireAll != nil, ParamRequireAll)
	return keys
}

// PowerStatus is a component's power state as component managers report it.
type PowerStatus string

// Power states (spec §1).
const (
	PowerStatusOn        PowerStatus = "On"
	PowerStatusOff       PowerStatus = "Off"
	PowerStatusUnknown   PowerStatus = "Unknown"
	PowerStatusRebooting PowerStatus = "Rebooting"
)

// SleepParams are the inputs of Sleep: a durable timer.
type SleepParams struct {
	Duration time.Duration
}

// PowerControlParams are the inputs of PowerControl. An empty Operation means
// "the task's own operation".
type PowerControlParams struct {
	Operation OperationCode
}

// VerifyPowerStatusParams are the inputs of VerifyPowerStatus: poll every
// PollInterval until every target reports Expected, failing after Timeout.
type VerifyPowerStatusParams struct {
	Expected     PowerStatus
	Timeout      time.Duration
	PollInterval time.Duration
}

// VerifyReachabilityParams are the inputs of VerifyReachability.
type VerifyReachabilityParams struct {
	ComponentTypes []ComponentType
	RequireAll     bool
	Timeout        time.Duration
	PollInterval   time.Duration
}

// GetPowerStatusParams are the inputs of GetPowerStatus.
type GetPowerStatusParams struct {
	Timeout time.Duration
}

// FirmwareControlParams are the inputs of FirmwareControl. An empty Operation
// means "the task's own operation" (upgrade outside firmware tasks).
// PollInterval and PollTimeout carry their defaults (2 m, 30 m) when unset.
type FirmwareControlParams struct {
	Operation    OperationCode
	PollInterval time.Duration
	PollTimeout  time.Duration
}

// WaitParams are the inputs of the waiting actions WaitBringUp and
// WaitDecommissioned, with the action's defaults applied when unset.
type WaitParams struct {
	Timeout      time.Duration
	PollInterval time.Duration
}

func (a Action) want(name ActionName) error {
	if a.Name != name {
		return fmt.Errorf("action %s is not %s", a.Name, name)
	}
	return nil
}

// SleepParams returns the typed inputs of a Sleep action, or an error when a
// is not a valid Sleep action.
func (a Action) SleepParams() (SleepParams, error) {
	if err := a.want(ActionSleep); err != nil {
		return SleepParams{}, err
	}
	if a.Parameters.Duration == nil {
		return SleepParams{}, fmt.Errorf("action %s missing required parameter: %s", a.Name, ParamDuration)
	}
	if *a.Parameters.Duration < 0 {
		return SleepParams{}, fmt.Errorf("action %s: %s must be non-negative", a.Name, ParamDuration)
	}
	return SleepParams{Duration: a.Parameters.Duration.Std()}, nil
}

// PowerControlParams returns the typed inputs of a PowerControl action, or an
// error when a is not a valid PowerControl action.
func (a Action) PowerControlParams() (PowerControlParams, error) {
	if err := a.want(ActionPowerControl); err != nil {
		return PowerControlParams{}, err
	}
	var p PowerControlParams
	if op := a.Parameters.Operation; op != nil {
		if !OperationTypePowerControl.HasCode(*op) {
			return PowerControlParams{}, fmt.Errorf("action %s: unrecognized operation %s", a.Name, *op)
		}
		p.Operation = *op
	}
	return p, nil
}

// VerifyPowerStatusParams returns the typed inputs of a VerifyPowerStatus
// action, or an error when a is not a valid VerifyPowerStatus action.
func (a Action) VerifyPowerStatusParams() (VerifyPowerStatusParams, error) {
	if err := a.want(ActionVerifyPowerStatus); err != nil {
		return VerifyPowerStatusParams{}, err
	}
	if a.Parameters.ExpectedStatus == nil {
		return VerifyPowerStatusParams{}, fmt.Errorf("action %s missing required parameter: %s", a.Name, ParamExpectedStatus)
	}
	p := VerifyPowerStatusParams{Timeout: a.Timeout.Std(), PollInterval: a.PollInterval.Std()}
	switch s := *a.Parameters.ExpectedStatus; s {
	case "on":
		p.Expected = PowerStatusOn
	case "off":
		p.Expected = PowerStatusOff
	default:
		return VerifyPowerStatusParams{}, fmt.Errorf("action %s: expected_status must be 'on' or 'off', got '%s'", a.Name, s)
	}
	return p, nil
}

// VerifyReachabilityParams returns the typed inputs of a VerifyReachability
// action, or an error when a is not a valid VerifyReachability action.
func (a Action) VerifyReachabilityParams() (VerifyReachabilityParams, error) {
	if err := a.want(ActionVerifyReachability); err != nil {
		return VerifyReachabilityParams{}, err
	}
	if len(a.Parameters.ComponentTypes) == 0 {
		return VerifyReachabilityParams{}, fmt.Errorf("action %s missing required parameter: %s", a.Name, ParamComponentTypes)
	}
	for _, ct := range a.Parameters.ComponentTypes {
		if !ct.Valid() {
			return VerifyReachabilityParams{}, fmt.Errorf("action %s: invalid component type: %s", a.Name, ct)
		}
	}
	p := VerifyReachabilityParams{
		ComponentTypes: slices.Clone(a.Parameters.ComponentTypes),
		Timeout:        a.Timeout.Std(),
		PollInterval:   a.PollInterval.Std(),
	}
	if a.Parameters.RequireAll != nil {
		p.RequireAll = *a.Parameters.RequireAll
	}
	return p, nil
}

// GetPowerStatusParams returns the typed inputs of a GetPowerStatus action,
// or an error when a is not a GetPowerStatus action.
func (a Action) GetPowerStatusParams() (GetPowerStatusParams, error) {
	if err := a.want(ActionGetPowerStatus); err != nil {
		return GetPowerStatusParams{}, err
	}
	return GetPowerStatusParams{Timeout: a.Timeout.Std()}, nil
}

// FirmwareControlParams returns the typed inputs of a FirmwareControl action
// with defaults applied, or an error when a is not a valid FirmwareControl
// action.
func (a Action) FirmwareControlParams() (FirmwareControlParams, error) {
	if err := a.want(ActionFirmwareControl); err != nil {
		return FirmwareControlParams{}, err
	}
	p := FirmwareControlParams{PollInterval: DefaultFirmwarePollInterval, PollTimeout: DefaultFirmwarePollTimeout}
	if op := a.Parameters.Operation; op != nil {
		if !OperationTypeFirmwareControl.HasCode(*op) {
			return FirmwareControlParams{}, fmt.Errorf("action %s: unrecognized operation %s", a.Name, *op)
		}
		p.Operation = *op
	}
	if d := a.Parameters.PollInterval; d != nil {
		if *d <= 0 {
			return FirmwareControlParams{}, fmt.Errorf("action %s: %s must be positive", a.Name, ParamPollInterval)
		}
		p.PollInterval = d.Std()
	}
	if d := a.Parameters.PollTimeout; d != nil {
		if *d <= 0 {
			return FirmwareControlParams{}, fmt.Errorf("action %s: %s must be positive", a.Name, ParamPollTimeout)
		}
		p.PollTimeout = d.Std()
	}
	return p, nil
}

// WaitParams returns the timeout and poll interval of a WaitBringUp or
// WaitDecommissioned action, with that action's defaults applied when unset.
func (a Action) WaitParams() (WaitParams, error) {
	var p WaitParams
	switch a.Name {
	case ActionWaitBringUp:
		p = WaitParams{Timeout: DefaultWaitBringUpTimeout, PollInterval: DefaultWaitBringUpPoll}
	case ActionWaitDecommissioned:
		p = WaitParams{Timeout: DefaultWaitDecommissionTimeout, PollInterval: DefaultWaitDecommissionPoll}
	default:
		return WaitParams{}, fmt.Errorf("action %s is not a waiting action", a.Name)
	}
	if a.Timeout > 0 {
		p.Timeout = a.Timeout.Std()
	}
	if a.PollInterval > 0 {
		p.PollInterval = a.PollInterval.Std()
	}
	return p, nil
}

// actionSpec says what an action needs and accepts (spec §7.2).
type actionSpec struct {
	internal          bool     // built-in rules only
	required          []string // parameter keys
	optional          []string
	needsTimeout      bool
	needsPollInterval bool
	check             func(Action) error // typed parameter check
}

var actionSpecs = map[ActionName]actionSpec{
	ActionSleep: {required: []string{ParamDuration},
		check: func(a Action) error { _, err := a.SleepParams(); return err }},
	ActionPowerControl: {optional: []string{ParamOperation},
		check: func(a Action) error { _, err := a.PowerControlParams(); return err }},
	ActionVerifyPowerStatus: {required: []string{ParamExpectedStatus}, needsTimeout: true, needsPollInterval: true,
		check: func(a Action) error { _, err := a.VerifyPowerStatusParams(); return err }},
	ActionVerifyReachability: {required: []string{ParamComponentTypes}, optional: []string{ParamRequireAll}, needsTimeout: true, needsPollInterval: true,
		check: func(a Action) error { _, err := a.VerifyReachabilityParams(); return err }},
	ActionGetPowerStatus: {needsTimeout: true,
		check: func(a Action) error { _, err := a.GetPowerStatusParams(); return err }},
	ActionFirmwareControl: {optional: []string{ParamOperation, ParamPollInterval, ParamPollTimeout},
		check: func(a Action) error { _, err := a.FirmwareControlParams(); return err }},
	ActionDecommissionControl: {},
	ActionWaitDecommissioned:  {needsTimeout: true, needsPollInterval: true},

	ActionBringUpControl:            {internal: true},
	ActionWaitBringUp:               {internal: true},
	ActionInjectExpectation:         {internal: true},
	ActionVerifyFirmwareConsistency: {internal: true},
}

func (a Action) validate(allowInternal bool) error {
	spec, ok := actionSpecs[a.Name]
	if !ok || (spec.internal && !allowInternal) {
		return fmt.Errorf("unknown action: %s", a.Name)
	}
	present := a.Parameters.present()
	for _, key := range spec.required {
		if !slices.Contains(present, key) {
			return fmt.Errorf("action %s missing required parameter: %s", a.Name, key)
		}
	}
	if spec.needsTimeout && a.Timeout == 0 {
		return fmt.Errorf("action %s requires timeout", a.Name)
	}
	if spec.needsPollInterval && a.PollInterval == 0 {
		return fmt.Errorf("action %s requires poll_interval", a.Name)
	}
	if a.Timeout < 0 {
		return fmt.Errorf("action %s: timeout must be non-negative", a.Name)
	}
	if a.PollInterval < 0 {
		return fmt.Errorf("action %s: poll_interval must be non-negative", a.Name)
	}
	for _, d := range []struct {
		key string
		v   *Duration
	}{{"timeout", &a.Timeout}, {"poll_interval", &a.PollInterval}, {"parameters.duration", a.Parameters.Duration},
		{"parameters.poll_interval", a.Parameters.PollInterval}, {"parameters.poll_timeout", a.Parameters.PollTimeout}} {
		if err := checkRuleDuration(d.v); err != nil {
			return fmt.Errorf("action %s: %s %w", a.Name, d.key, err)
		}
	}
	for _, key := range present {
		if !slices.Contains(spec.required, key) && !slices.Contains(spec.optional, key) {
			return fmt.Errorf("action %s does not accept parameter: %s", a.Name, key)
		}
	}
	if spec.check != nil {
		return spec.check(a)
	}
	return nil
}

// Validate checks a retry policy: max_attempts ≥ 1, initial_interval > 0,
// backoff_coefficient ≥ 1.0, max_interval ≥ 0.
func (rp RetryPolicy) Validate() error {
	switch {
	case rp.MaxAttempts < 1:
		return fmt.Errorf("max_attempts must be >= 1, got %d", rp.MaxAttempts)
	case rp.InitialInterval <= 0:
		return errors.New("initial_interval is required and must be positive")
	case rp.BackoffCoefficient < 1.0:
		return fmt.Errorf("backoff_coefficient must be >= 1.0, got %g", rp.BackoffCoefficient)
	case rp.MaxInterval < 0:
		return fmt.Errorf("max_interval must be non-negative, got %v", rp.MaxInterval.Std())
	case rp.MaxAttempts > MaxRetryAttempts:
		return fmt.Errorf("max_attempts must be at most %d, got %d", MaxRetryAttempts, rp.MaxAttempts)
	case math.IsNaN(rp.BackoffCoefficient) || rp.BackoffCoefficient > MaxBackoffCoefficient:
		return fmt.Errorf("backoff_coefficient must be at most %g, got %g", float64(MaxBackoffCoefficient), rp.BackoffCoefficient)
	}
	if err := checkRuleDuration(&rp.InitialInterval); err != nil {
		return fmt.Errorf("initial_interval %w", err)
	}
	if err := checkRuleDuration(&rp.MaxInterval); err != nil {
		return fmt.Errorf("max_interval %w", err)
	}
	return nil
}

// Bounds of rule values, so that the budgets computed from them (spec
// §8.3's step deadline, the run timeout) stay finite numbers; whether the
// engine accepts those budgets is checked when the rule is stored
// (Service.SetPlanCheck).
const (
	// MaxRuleDuration is the longest timeout, interval or sleep a rule may
	// state.
	MaxRuleDuration = 7 * 24 * time.Hour
	// MaxRetryAttempts is the most calls a retry policy may allow.
	MaxRetryAttempts = 1000
	// MaxBackoffCoefficient is the steepest retry backoff.
	MaxBackoffCoefficient = 100
)

func checkRuleDuration(d *Duration) error {
	if d != nil && d.Std() > MaxRuleDuration {
		return fmt.Errorf("must be at most %s, got %s", MaxRuleDuration, d.Std())
	}
	return nil
}

func (s Step) validate(allowInternal bool) error {
	if !s.ComponentType.Valid() {
		return errors.New("component type is unknown or invalid")
	}
	if s.Stage < 1 {
		return fmt.Errorf("stage must be >= 1, got %d", s.Stage)
	}
	if s.MaxParallel < 0 {
		return fmt.Errorf("max_parallel must be >= 0, got %d", s.MaxParallel)
	}
	if s.DelayAfter < 0 {
		return fmt.Errorf("delay_after must be non-negative, got %v", s.DelayAfter.Std())
	}
	if s.Timeout < 0 {
		return fmt.Errorf("timeout must be non-negative, got %v", s.Timeout.Std())
	}
	if err := checkRuleDuration(&s.Timeout); err != nil {
		return fmt.Errorf("timeout %w", err)
	}
	if err := checkRuleDuration(&s.DelayAfter); err != nil {
		return fmt.Errorf("delay_after %w", err)
	}
	if s.Retry != nil {
		if err := s.Retry.Validate(); err != nil {
			return fmt.Errorf("invalid retry policy: %w", err)
		}
	}
	for i, a := range s.PreOperation {
		if err := a.validate(allowInternal); err != nil {
			return fmt.Errorf("pre_operation[%d]: %w", i, err)
		}
	}
	if s.MainOperation.Name == "" {
		return errors.New("main_operation is required")
	}
	if err := s.MainOperation.validate(allowInternal); err != nil {
		return fmt.Errorf("main_operation: %w", err)
	}
	for i, a := range s.PostOperation {
		if err := a.validate(allowInternal); err != nil {
			return fmt.Errorf("post_operation[%d]: %w", i, err)
		}
	}
	return nil
}

// Actions returns the step's actions in execution order: pre, main, post.
func (s Step) Actions() []Action {
	out := make([]Action, 0, len(s.PreOperation)+1+len(s.PostOperation))
	out = append(out, s.PreOperation...)
	out = append(out, s.MainOperation)
	return append(out, s.PostOperation...)
}

// EngineActions returns the actions the step's engine steps run, in
// order: its own (pre, main, post), then, when one of them is a
// FirmwareControl, the VerifyFirmwareVersions Flow adds so that no rule can
// skip the read-back of what was installed, then the legacy delay_after as
// a Sleep.
func (s Step) EngineActions() []Action {
	acts := s.Actions()
	if slices.ContainsFunc(acts, func(a Action) bool { return a.Name == ActionFirmwareControl }) {
		acts = append(acts, Action{Name: ActionVerifyFirmwareVersions})
	}
	if s.DelayAfter > 0 {
		d := s.DelayAfter
		acts = append(acts, Action{Name: ActionSleep, Parameters: Parameters{Duration: &d}})
	}
	return acts
}

// CallTimeout returns the start-to-close timeout of each component-manager
// call of the step: its timeout, or 20 m when unset (spec §8.5).
func (s Step) CallTimeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout.Std()
	}
	return DefaultStepCallTimeout
}

// RetryPolicy returns the step's retry policy, or DefaultRetryPolicy when it
// has none.
func (s Step) RetryPolicy() RetryPolicy {
	if s.Retry != nil {
		return *s.Retry
	}
	return DefaultRetryPolicy
}

// ComponentScoped reports whether the action calls component managers once
// per batch of at most max_parallel components (spec §8.4). Sleep,
// VerifyFirmwareConsistency and VerifyReachability run once per step.
func (a Action) ComponentScoped() bool {
	switch a.Name {
	case ActionSleep, ActionVerifyFirmwareConsistency, ActionVerifyReachability:
		return false
	}
	return true
}

// Batches returns how many sequential calls action a makes for components
// components of the step's type: ceil(components/max_parallel) for
// component-scoped actions (1 when max_parallel is 0 or covers them all),
// otherwise 1.
func (s Step) Batches(a Action, components int) int {
	if !a.ComponentScoped() || s.MaxParallel <= 0 || components <= s.MaxParallel {
		return 1
	}
	return (components + s.MaxParallel - 1) / s.MaxParallel
}

// Budget returns the step's total time budget for components components
// (spec §8.3): base = timeout or 30 m; attempts = retry.max_attempts when
// above 1, else 1; backoff = retry.max_interval when set, else
// retry.initial_interval; main = (base·attempts + backoff·(attempts−1)) ×
// batches; plus each pre/post action's timeout × its batches; plus 2 m.
func (s Step) Budget(components int) time.Duration {
	base := DefaultStepBudget
	if s.Timeout > 0 {
		base = s.Timeout.Std()
	}
	attempts, backoff := 1, time.Duration(0)
	if s.Retry != nil {
		if s.Retry.MaxAttempts > 1 {
			attempts = s.Retry.MaxAttempts
		}
		backoff = s.Retry.InitialInterval.Std()
		if s.Retry.MaxInterval > 0 {
			backoff = s.Retry.MaxInterval.Std()
		}
	}
	// In float64, capped: a budget past any real deadline must not wrap
	// round to a negative one.
	total := (float64(base)*float64(attempts) + float64(backoff)*float64(attempts-1)) * float64(s.Batches(s.MainOperation, components))
	for _, a := range append(slices.Clone(s.PreOperation), s.PostOperation...) {
		total += float64(a.Timeout.Std()) * float64(s.Batches(a, components))
	}
	total += float64(2 * time.Minute)
	if math.IsNaN(total) || total > float64(MaxBudget) {
		return MaxBudget
	}
	return time.Duration(total)
}

// MaxBudget caps Step.Budget and a plan's summed budget: beyond any
// deadline the engine accepts (engine.MaxStepDeadline), far below overflow.
const MaxBudget = 1000 * 24 * time.Hour

// Validate checks d as a user rule (spec §7.2): every step valid, no component
// type twice in one stage, and only the actions users may write. It returns a
// *ValidationError for field "rule_definition_json".
func (d Definition) Validate() error { return d.validate(false) }

// ValidateBuiltin validates d as a built-in rule: the internal actions
// (BringUpControl, WaitBringUp, InjectExpectation, VerifyFirmwareConsistency)
// are allowed.
func (d Definition) ValidateBuiltin() error { return d.validate(true) }

func (d Definition) validate(allowInternal bool) error {
	if d.Version != "" && d.Version != Version {
		return invalid("rule_definition_json", "unsupported rule definition version: %s (current version: %s)", d.Version, Version)
	}
	seen := map[int]map[ComponentType]bool{}
	for i, s := range d.Steps {
		if err := s.validate(allowInternal); err != nil {
			return invalid("rule_definition_json", "step %d: %v", i, err)
		}
		if seen[s.Stage] == nil {
			seen[s.Stage] = map[ComponentType]bool{}
		}
		if seen[s.Stage][s.ComponentType] {
			return invalid("rule_definition_json", "step %d: duplicate component type %s in stage %d", i, s.ComponentType, s.Stage)
		}
		seen[s.Stage][s.ComponentType] = true
	}
	return nil
}

// Stage is one stage of a rule: its number and its steps, which run in
// parallel.
type Stage struct {
	Number int
	Steps  []Step
}

// Stages returns the steps grouped by stage number, stages ascending, steps
// in definition order.
func (d Definition) Stages() []Stage {
	var stages []Stage
	for _, s := range d.Steps {
		i := slices.IndexFunc(stages, func(st Stage) bool { return st.Number == s.Stage })
		if i < 0 {
			stages = append(stages, Stage{Number: s.Stage})
			i = len(stages) - 1
		}
		stages[i].Steps = append(stages[i].Steps, s)
	}
	slices.SortStableFunc(stages, func(a, b Stage) int { return a.Number - b.Number })
	return stages
}

// HasStepFor reports whether some step targets one of types (the
// applicability check at submission, spec §8.2).
func (d Definition) HasStepFor(types []ComponentType) bool {
	return slices.ContainsFunc(d.Steps, func(s Step) bool { return slices.Contains(types, s.ComponentType) })
}

// Parse decodes a JSON rule definition (spec §7.3): an empty or
// "v1" version reads as v1 (Version is set to "v1"); any other version, a
// malformed document or an unknown field is an error. It does not validate;
// call Validate. Errors are *ValidationError for "rule_definition_json".
func Parse(data []byte) (Definition, error) {
	const field = "rule_definition_json"
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return Definition{}, invalid(field, "rule definition is required")
	}
	if data[0] != '{' {
		return Definition{}, invalid(field, "rule definition must be a JSON object")
	}
	// json.Unmarshal also rejects trailing data after the object.
	var head struct {
		Version json.RawMessage `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Definition{}, invalid(field, "malformed rule definition: %v", err)
	}
	var version string
	if len(head.Version) > 0 && string(head.Version) != "null" {
		if err := json.Unmarshal(head.Version, &version); err != nil {
			return Definition{}, invalid(field, "malformed rule definition: version must be a string")
		}
	}
	if version != "" && version != Version {
		return Definition{}, invalid(field, "unsupported rule definition version: %s (current version: %s)", version, Version)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d Definition
	if err := dec.Decode(&d); err != nil {
		return Definition{}, invalid(field, "malformed rule definition: %v", err)
	}
	d.Version = Version
	return d, nil
}

// MarshalJSON writes d with version "v1" and steps as an array (never null).
func (d Definition) MarshalJSON() ([]byte, error) {
	type plain Definition
	p := plain(d)
	p.Version = Version
	if p.Steps == nil {
		p.Steps = []Step{}
	}
	return json.Marshal(p)
}
