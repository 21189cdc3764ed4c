package ruledef

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nicoflow/flow/inventory"
)

// ErrInvalidRule is matched (errors.Is) by every *ValidationError.
var ErrInvalidRule = errors.New("invalid operation rule")

// ValidationError is a rejected rule or rule field. Field names the request
// field at fault ("name", "operation_type", "operation_code",
// "rule_definition_json"); Msg says what is wrong. It matches ErrInvalidRule.
type ValidationError struct {
	Field string
	Msg   string
}

// Error returns "field: message", or the message alone when Field is empty.
func (e *ValidationError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Is reports whether target is ErrInvalidRule.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidRule }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// OperationType is the operation family of a task or rule (spec §1). Its
// values are the exact strings stored in tables and payloads.
type OperationType string

// Operation types. Only power_control and firmware_control exist in the
// public v1.OperationType enum; the others are served by built-in rules (or
// rows created by other means) and reached internally by the task manager.
const (
	OperationTypeInjectExpectation OperationType = "inject_expectation"
	OperationTypePowerControl      OperationType = "power_control"
	OperationTypeFirmwareControl   OperationType = "firmware_control"
	OperationTypeBringUp           OperationType = "bring_up"
	OperationTypeDecommission      OperationType = "decommission"
)

// OperationCode is a specific operation within a type, e.g. "power_on".
type OperationCode string

// Operation codes (spec §1).
const (
	CodePowerOn           OperationCode = "power_on"
	CodeForcePowerOn      OperationCode = "force_power_on"
	CodePowerOff          OperationCode = "power_off"
	CodeForcePowerOff     OperationCode = "force_power_off"
	CodeRestart           OperationCode = "restart"
	CodeForceRestart      OperationCode = "force_restart"
	CodeWarmReset         OperationCode = "warm_reset"
	CodeColdReset         OperationCode = "cold_reset"
	CodeUpgrade           OperationCode = "upgrade"
	CodeDowngrade         OperationCode = "downgrade"
	CodeRollback          OperationCode = "rollback"
	CodeBringUp           OperationCode = "bring_up"
	CodeIngest            OperationCode = "ingest"
	CodeDecommission      OperationCode = "decommission"
	CodeInjectExpectation OperationCode = "inject_expectation"
)

var operationCodes = map[OperationType][]OperationCode{
	OperationTypePowerControl: {
		CodePowerOn, CodeForcePowerOn, CodePowerOff, CodeForcePowerOff,
		CodeRestart, CodeForceRestart, CodeWarmReset, CodeColdReset,
	},
	OperationTypeFirmwareControl:   {CodeUpgrade, CodeDowngrade, CodeRollback},
	OperationTypeBringUp:           {CodeBringUp, CodeIngest},
	OperationTypeDecommission:      {CodeDecommission},
	OperationTypeInjectExpectation: {CodeInjectExpectation},
}

// OperationTypes returns every valid operation type, in a fixed order.
func OperationTypes() []OperationType {
	return []OperationType{
		OperationTypeInjectExpectation, OperationTypePowerControl, OperationTypeFirmwareControl,
		OperationTypeBringUp, OperationTypeDecommission,
	}
}

// Valid reports whether t is one of the five operation types.
func (t OperationType) Valid() bool {
	_, ok := operationCodes[t]
	return ok
}

// Codes returns the valid operation codes of t (nil for an invalid type).
func (t OperationType) Codes() []OperationCode {
	return slices.Clone(operationCodes[t])
}

// HasCode reports whether code is a valid code of t.
func (t OperationType) HasCode(code OperationCode) bool {
	return slices.Contains(operationCodes[t], code)
}

// ComponentType is a kind of rack component, in its canonical JSON spelling
// ("Compute", "NVSwitch", …). Decoding from JSON is case-insensitive; an
// unrecognised name is kept as written so validation can report it, and Valid
// reports false for it.
type ComponentType string

// Component types (spec §1).
const (
	ComponentTypeCompute    ComponentType = "Compute"
	ComponentTypeNVSwitch   ComponentType = "NVSwitch"
	ComponentTypePowerShelf ComponentType = "PowerShelf"
	ComponentTypeToRSwitch  ComponentType = "ToRSwitch"
	ComponentTypeUMS        ComponentType = "UMS"
	ComponentTypeCDU        ComponentType = "CDU"
)

var componentTypes = []ComponentType{
	ComponentTypeCompute, ComponentTypeNVSwitch, ComponentTypePowerShelf,
	ComponentTypeToRSwitch, ComponentTypeUMS, ComponentTypeCDU,
}

// ParseComponentType returns the canonical component type for s and whether
// s names a known type, compared case-insensitively with upstream's names
// ("Compute", "NVSwitch", …) and the wire enum's (COMPONENT_TYPE_COMPUTE,
// …), as inventory.ParseComponentType. "Unknown" is not a known type; an
// unknown s is returned as written, for the error to name.
func ParseComponentType(s string) (ComponentType, bool) {
	if t, ok := inventory.ParseComponentType(s); ok {
		return ComponentType(t), true
	}
	return ComponentType(s), false
}

// Valid reports whether t is one of the six known component types.
func (t ComponentType) Valid() bool {
	return slices.Contains(componentTypes, t)
}

// UnmarshalJSON decodes a JSON string case-insensitively into the canonical
// spelling; unknown names are kept verbatim.
func (t *ComponentType) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("component type must be a string: %w", err)
	}
	*t, _ = ParseComponentType(s)
	return nil
}
