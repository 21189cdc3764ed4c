package eventrule

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/operations"
)

// Event rules (spec/orchestration.md §4, docs/event-rules.md) say how Flow
// answers an event, such as a coolant leak: a rule for one event type holds
// named actions, each with a condition and exactly one spec (submit a task,
// send an alert, do nothing). This file holds the vocabulary and the rule
// contract (§4.3); service.go the store and effective-rule selection
// (§4.4), pipeline.go the processing pipeline (§4.5), exec.go the
// executions (§4.6).

// Errors of event rules and bindings. handler mapping: ErrInvalidRule
// InvalidArgument; ErrRuleNotFound, ErrBindingNotFound and
// ErrTargetNotFound NotFound; ErrBuiltInRule and
// ErrBindingConflict FailedPrecondition.
var (
	// ErrInvalidRule is matched by every *FieldError.
	ErrInvalidRule = errors.New("invalid event rule")
	// ErrRuleNotFound means no persisted or built-in rule has the ID.
	ErrRuleNotFound = errors.New("event rule not found")
	// ErrBindingNotFound means the (event type, scope) slot is
	// empty.
	ErrBindingNotFound = errors.New("event rule binding not found")
	// ErrTargetNotFound means the rack or component an effective-rule
	// look-up or a binding names does not exist.
	ErrTargetNotFound = errors.New("event rule target not found")
	// ErrBuiltInRule means a change to a built-in rule, which is
	// immutable and never bound.
	ErrBuiltInRule = errors.New("built-in event rules are read-only")
	// ErrBindingConflict means the slot is taken, or the rule's
	// other bindings are of the other scope type.
	ErrBindingConflict = errors.New("event rule binding conflict")
)

// FieldError is a rejected event-rule field: Field is the request
// field path ("actions[1].submit_task.operation"), Msg what is wrong. It
// matches ErrInvalidRule.
type FieldError struct {
	Field string
	Msg   string
}

// Error returns "field: message".
func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Is reports whether target is ErrInvalidRule.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidRule }

func invalidEvent(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// EventTypeLeakDetected is the coolant-leak event type, the only supported
// one (it is the only type with a built-in rule).
const EventTypeLeakDetected = "hardware.leak.detected"

var (
	eventTypePattern  = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)
	identifierPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// ValidateEventType checks that s is a well-formed (dotted lower-snake)
// and supported event type; the error names field.
func ValidateEventType(field, s string) error {
	switch {
	case s == "":
		return invalidEvent(field, "is required")
	case !eventTypePattern.MatchString(s):
		return invalidEvent(field, "%q is not a valid event type (dotted lowercase path such as %s)", s, EventTypeLeakDetected)
	case builtInFor(s) == nil:
		return invalidEvent(field, "unsupported event type %q (supported: %s)", s, EventTypeLeakDetected)
	}
	return nil
}

// Severity is an event's severity (condition values and alerts).
type Severity string

// Severities.
const (
	SeverityInfo     Severity = "info"
	SeverityWarning  Severity = "warning"
	SeverityCritical Severity = "critical"
)

func (s Severity) valid() bool {
	return s == SeverityInfo || s == SeverityWarning || s == SeverityCritical
}

// TargetStrategy is how a submit_task action derives its targets from the
// event (§4.3).
type TargetStrategy string

// Target strategies.
const (
	TargetComponent          TargetStrategy = "component"
	TargetRack               TargetStrategy = "rack"
	TargetAffectedComponents TargetStrategy = "affected_components"
)

// ConflictStrategy is what a submitted task does on a busy rack.
type ConflictStrategy string

// Conflict strategies of event-rule tasks.
const (
	ConflictQueue  ConflictStrategy = "queue"
	ConflictReject ConflictStrategy = "reject"
)

// ActionType names an action's spec.
type ActionType string

// Action types.
const (
	ActionSubmitTask ActionType = "submit_task"
	ActionSendAlert  ActionType = "send_alert"
	ActionNoop       ActionType = "noop"
)

// Action is one named action of a rule: a condition and exactly one
// of SubmitTask, SendAlert and Noop.
type Action struct {
	Name       string          `json:"name"`
	Condition  Condition       `json:"condition"`
	SubmitTask *SubmitTaskSpec `json:"submit_task,omitempty"`
	SendAlert  *SendAlertSpec  `json:"send_alert,omitempty"`
	Noop       *NoopSpec       `json:"noop,omitempty"`
}

// Type returns the action's spec type ("" when it has none).
func (a Action) Type() ActionType {
	switch {
	case a.SubmitTask != nil:
		return ActionSubmitTask
	case a.SendAlert != nil:
		return ActionSendAlert
	case a.Noop != nil:
		return ActionNoop
	}
	return ""
}

// Condition says when an action applies: any listed severity AND any
// listed component type; an empty list imposes nothing, and a
// component-type list never matches a rack event.
type Condition struct {
	Severities     []Severity                 `json:"severities,omitempty"`
	ComponentTypes []operations.ComponentType `json:"component_types,omitempty"`
}

// Applies reports whether the condition accepts an event of severity sev
// about a component of type ct ("" for a rack event).
func (c Condition) Applies(sev Severity, ct operations.ComponentType) bool {
	if len(c.Severities) > 0 && !slices.Contains(c.Severities, sev) {
		return false
	}
	if len(c.ComponentTypes) > 0 && (ct == "" || !slices.Contains(c.ComponentTypes, ct)) {
		return false
	}
	return true
}

// SubmitTaskSpec submits one task per affected rack.
type SubmitTaskSpec struct {
	Operation        TaskOperation    `json:"operation"`
	TargetStrategy   TargetStrategy   `json:"target_strategy"`
	ConflictStrategy ConflictStrategy `json:"conflict_strategy"`
	Description      string           `json:"description,omitempty"`
}

// TaskOperation is a target-free operation (wire TaskOperation): a power
// or firmware operation with its options.
type TaskOperation struct {
	Type                   operations.OperationType `json:"type"`
	Code                   operations.OperationCode `json:"code"`
	OverrideReadinessCheck bool                     `json:"override_readiness_check,omitempty"`
	// Firmware only.
	TargetVersion        *string  `json:"target_version,omitempty"`
	StartTime            int64    `json:"start_time,omitempty"`
	EndTime              int64    `json:"end_time,omitempty"`
	SubTargets           []string `json:"sub_targets,omitempty"`
	OverrideVersionCheck bool     `json:"override_version_check,omitempty"`
}

// SendAlertSpec raises an alert.
type SendAlertSpec struct {
	Severity Severity `json:"severity"`
	Message  string   `json:"message,omitempty"`
}

// NoopSpec does nothing, on purpose.
type NoopSpec struct {
	Reason string `json:"reason,omitempty"`
}

// Rule is a persisted or built-in rule.
type Rule struct {
	ID          uuid.UUID
	Name        string
	Description string
	Enabled     bool
	EventType   string
	Actions     []Action
	// ReadOnly marks a built-in rule.
	ReadOnly  bool
	CreatedBy string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// eventPolicyVersion is the version of the stored action list.
const eventPolicyVersion = 1

// eventPolicy is a rule's stored action list (event_rule.policy,
// event.effective_policy).
type eventPolicy struct {
	Version int      `json:"version"`
	Actions []Action `json:"actions"`
}

// Limits of rule fields.
const (
	maxEventRuleName   = 128  // bytes
	maxEventRuleText   = 4096 // bytes: descriptions, messages, reasons
	maxEventRuleAction = 64   // actions per rule
)

// validateRuleName checks a rule name (trimmed by the caller).
func validateRuleName(field, name string) error {
	switch {
	case name == "":
		return invalidEvent(field, "is required")
	case len(name) > maxEventRuleName:
		return invalidEvent(field, "must be at most %d bytes, got %d", maxEventRuleName, len(name))
	}
	return nil
}

func validateText(field, s string) error {
	if len(s) > maxEventRuleText {
		return invalidEvent(field, "must be at most %d bytes, got %d", maxEventRuleText, len(s))
	}
	return nil
}

// ValidateActions checks a rule's action list against the rule
// contract (§4.3): 1 to 64 actions, unique lower-snake names, a valid
// condition and exactly one valid spec each; send_alert only when alerts
// is true (an alert sender is configured). field prefixes the paths.
func ValidateActions(field string, actions []Action, alerts bool) error {
	if len(actions) == 0 {
		return invalidEvent(field, "at least one action is required")
	}
	if len(actions) > maxEventRuleAction {
		return invalidEvent(field, "at most %d actions, got %d", maxEventRuleAction, len(actions))
	}
	seen := map[string]int{}
	for i, a := range actions {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case a.Name == "":
			return invalidEvent(f+".name", "is required")
		case len(a.Name) > maxEventRuleName || !identifierPattern.MatchString(a.Name):
			return invalidEvent(f+".name", "%q must be a lower-snake identifier of at most %d bytes (e.g. power_off_affected_components)", a.Name, maxEventRuleName)
		}
		if j, dup := seen[a.Name]; dup {
			return invalidEvent(f+".name", "duplicate action name %q (also %s[%d])", a.Name, field, j)
		}
		seen[a.Name] = i
		for k, s := range a.Condition.Severities {
			if !s.valid() {
				return invalidEvent(fmt.Sprintf("%s.condition.severities[%d]", f, k), "must be INFO, WARNING or CRITICAL")
			}
		}
		for k, t := range a.Condition.ComponentTypes {
			if !t.Valid() {
				return invalidEvent(fmt.Sprintf("%s.condition.component_types[%d]", f, k), "unknown component type %q", t)
			}
		}
		specs := 0
		for _, set := range []bool{a.SubmitTask != nil, a.SendAlert != nil, a.Noop != nil} {
			if set {
				specs++
			}
		}
		if specs != 1 {
			return invalidEvent(f, "exactly one of submit_task, send_alert and noop is required, got %d", specs)
		}
		var err error
		switch {
		case a.SubmitTask != nil:
			err = validateSubmitTask(f+".submit_task", *a.SubmitTask)
		case a.SendAlert != nil:
			switch {
			case !alerts:
				err = invalidEvent(f+".send_alert", "no alert sender is configured on this server")
			case !a.SendAlert.Severity.valid():
				err = invalidEvent(f+".send_alert.severity", "must be INFO, WARNING or CRITICAL")
			default:
				err = validateText(f+".send_alert.message", a.SendAlert.Message)
			}
		case a.Noop != nil:
			err = validateText(f+".noop.reason", a.Noop.Reason)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func validateSubmitTask(field string, s SubmitTaskSpec) error {
	op := s.Operation
	switch op.Type {
	case operations.OperationTypePowerControl:
		if !op.Type.HasCode(op.Code) {
			return invalidEvent(field+".operation.power_control.operation", "is required")
		}
		if op.TargetVersion != nil || op.StartTime != 0 || op.EndTime != 0 || len(op.SubTargets) > 0 || op.OverrideVersionCheck {
			return invalidEvent(field+".operation", "a power operation takes no firmware options")
		}
	case operations.OperationTypeFirmwareControl:
		if !op.Type.HasCode(op.Code) {
			return invalidEvent(field+".operation.firmware_control.operation", "is required")
		}
		if op.StartTime != 0 && op.EndTime != 0 && op.EndTime <= op.StartTime {
			return invalidEvent(field+".operation.firmware_control.end_time", "must be later than start_time")
		}
	case "":
		return invalidEvent(field+".operation", "exactly one of power_control and firmware_control is required")
	default:
		return invalidEvent(field+".operation", "operation type %q cannot be submitted by an event rule", op.Type)
	}
	switch s.TargetStrategy {
	case TargetComponent, TargetRack, TargetAffectedComponents:
	default:
		return invalidEvent(field+".target_strategy", "must be COMPONENT, RACK or AFFECTED_COMPONENTS")
	}
	switch s.ConflictStrategy {
	case ConflictQueue, ConflictReject:
	default:
		return invalidEvent(field+".conflict_strategy", "must be QUEUE or REJECT")
	}
	return validateText(field+".description", s.Description)
}

// Built-in rules (§4.1): code-defined, immutable, always enabled, never
// bound.

// BuiltInLeakRuleID is the fixed ID of the built-in leakage rule.
var BuiltInLeakRuleID = uuid.MustParse("f34b87f7-cb1b-4b08-aa51-30c0b3b58680")

// BuiltInRuleCreator is who the tasks of built-in rules are submitted
// by (Task.SubmittedBy).
const BuiltInRuleCreator = "flow:built-in-event-rule"

// builtInRules lists the built-in rules by ascending ID.
var builtInRules = []Rule{{
	ID:          BuiltInLeakRuleID,
	Name:        "Leakage response",
	Description: "Leakage response",
	Enabled:     true,
	EventType:   EventTypeLeakDetected,
	ReadOnly:    true,
	CreatedBy:   BuiltInRuleCreator,
	Actions: []Action{{
		Name: "power_off_affected_components",
		SubmitTask: &SubmitTaskSpec{
			Operation:        TaskOperation{Type: operations.OperationTypePowerControl, Code: operations.CodeForcePowerOff},
			TargetStrategy:   TargetAffectedComponents,
			ConflictStrategy: ConflictQueue,
			Description:      "Leakage response",
		},
	}},
}}

// BuiltInRules returns the built-in rules by ascending ID.
func BuiltInRules() []Rule {
	out := make([]Rule, len(builtInRules))
	for i, r := range builtInRules {
		r.Actions = slices.Clone(r.Actions)
		out[i] = r
	}
	return out
}

func builtInFor(eventType string) *Rule {
	for i := range builtInRules {
		if builtInRules[i].EventType == eventType {
			r := builtInRules[i]
			return &r
		}
	}
	return nil
}

// RuleInput is a rule to create.
type RuleInput struct {
	Name, Description, EventType string
	Actions                      []Action
	CreatedBy                    string
}

// ScopeType is a binding's scope kind.
type ScopeType string

// Scope types.
const (
	ScopeSite ScopeType = "site"
	ScopeRack ScopeType = "rack"
)

// Scope is a binding slot's scope: the site, or one rack.
type Scope struct {
	Type   ScopeType
	RackID uuid.UUID // ScopeRack only
}

// String names the scope for messages ("site", "rack <id>").
func (s Scope) String() string {
	if s.Type == ScopeRack {
		return "rack " + s.RackID.String()
	}
	return string(s.Type)
}

// Binding places a persisted rule in one (event type, scope) slot.
type Binding struct {
	ID        uuid.UUID
	RuleID    uuid.UUID
	EventType string
	Scope     Scope
	CreatedAt time.Time
}

// trimName trims a rule name as upstream does.
func trimName(s string) string { return strings.TrimSpace(s) }
