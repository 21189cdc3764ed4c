// Package operations turns operation requests into per-rack tasks and
// stores the operation rules that say how each operation runs (their format
// is package ruledef: numbered stages of per-component-type steps, each a
// sequence of typed actions, spec/execution.md §7). This file holds the
// package's sentinel errors and its names for ruledef's vocabulary.
package operations

import (
	"errors"
	"fmt"

	"github.com/nicoflow/flow/operations/ruledef"
)

// Sentinel errors. Service methods wrap them with %w; handler.go maps them to
// Connect codes.
var (
	// ErrRuleNotFound means no operation rule has the given ID.
	ErrRuleNotFound = errors.New("operation rule not found")
	// ErrDefaultRuleExists means a default rule already exists for the
	// rule's (operation type, operation code).
	ErrDefaultRuleExists = errors.New("a default rule already exists for this operation type")
	// ErrRackNotFound means the rack named in a rule association does not
	// exist in inventory.
	ErrRackNotFound = errors.New("rack not found")
	// ErrAssociationNotFound means the rack has no rule association for the
	// given (operation type, operation code).
	ErrAssociationNotFound = errors.New("rack rule association not found")
	// ErrRuleInUse means the rule is still associated with racks and cannot
	// be deleted; the wrapping error names the racks.
	ErrRuleInUse = errors.New("operation rule is associated with racks")
	// ErrRuleMismatch means an explicitly requested rule is for a different
	// operation type or code than the task it was requested for.
	ErrRuleMismatch = errors.New("rule does not match the operation")
	// ErrInvalidRule is matched (errors.Is) by every *ValidationError.
	ErrInvalidRule = ruledef.ErrInvalidRule
)

// The vocabulary the task manager shares with its rules: ruledef's types
// and values under the names every caller of the task manager uses.
type (
	// OperationType is the operation family of a task or rule (spec §1).
	OperationType = ruledef.OperationType
	// OperationCode is a specific operation within a type, e.g. "power_on".
	OperationCode = ruledef.OperationCode
	// ComponentType is a kind of rack component ("Compute", "NVSwitch", …).
	ComponentType = ruledef.ComponentType
	// ValidationError is a rejected rule or rule field; it matches
	// ErrInvalidRule.
	ValidationError = ruledef.ValidationError
)

// Operation types, codes and component types (ruledef's).
const (
	OperationTypeInjectExpectation = ruledef.OperationTypeInjectExpectation
	OperationTypePowerControl      = ruledef.OperationTypePowerControl
	OperationTypeFirmwareControl   = ruledef.OperationTypeFirmwareControl
	OperationTypeBringUp           = ruledef.OperationTypeBringUp
	OperationTypeDecommission      = ruledef.OperationTypeDecommission

	CodePowerOn           = ruledef.CodePowerOn
	CodeForcePowerOn      = ruledef.CodeForcePowerOn
	CodePowerOff          = ruledef.CodePowerOff
	CodeForcePowerOff     = ruledef.CodeForcePowerOff
	CodeRestart           = ruledef.CodeRestart
	CodeForceRestart      = ruledef.CodeForceRestart
	CodeWarmReset         = ruledef.CodeWarmReset
	CodeColdReset         = ruledef.CodeColdReset
	CodeUpgrade           = ruledef.CodeUpgrade
	CodeDowngrade         = ruledef.CodeDowngrade
	CodeRollback          = ruledef.CodeRollback
	CodeBringUp           = ruledef.CodeBringUp
	CodeIngest            = ruledef.CodeIngest
	CodeDecommission      = ruledef.CodeDecommission
	CodeInjectExpectation = ruledef.CodeInjectExpectation

	ComponentTypeCompute    = ruledef.ComponentTypeCompute
	ComponentTypeNVSwitch   = ruledef.ComponentTypeNVSwitch
	ComponentTypePowerShelf = ruledef.ComponentTypePowerShelf
	ComponentTypeToRSwitch  = ruledef.ComponentTypeToRSwitch
	ComponentTypeUMS        = ruledef.ComponentTypeUMS
	ComponentTypeCDU        = ruledef.ComponentTypeCDU
)

// OperationTypes returns every valid operation type, in a fixed order.
func OperationTypes() []OperationType { return ruledef.OperationTypes() }

// ParseComponentType returns the canonical component type for s and whether
// s names a known type (ruledef.ParseComponentType).
func ParseComponentType(s string) (ComponentType, bool) { return ruledef.ParseComponentType(s) }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
