package operations

import (
	"time"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/google/uuid"
)

// Rule is a stored operation rule: how the operation (Type, Code) runs.
type Rule struct {
	ID          uuid.UUID
	Name        string
	Description string
	Type        OperationType
	Code        OperationCode
	Definition  ruledef.Definition
	IsDefault   bool
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// RackRuleAssociation says that a rack runs RuleID for operation (Type,
// Code), ahead of the default and built-in rules. Type and Code are always
// the rule's own.
type RackRuleAssociation struct {
	RackID    uuid.UUID
	Type      OperationType
	Code      OperationCode
	RuleID    uuid.UUID
	CreatedAt time.Time
	UpdatedAt time.Time
}
