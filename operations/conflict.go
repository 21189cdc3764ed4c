package operations

import "github.com/google/uuid"

// TaskScope is what the conflict policy knows of a task: its operation type
// and the components it covers, grouped by component type.
type TaskScope struct {
	OperationType OperationType
	Components    map[ComponentType][]uuid.UUID
}

func (s TaskScope) has(componentType ComponentType) bool { return len(s.Components[componentType]) > 0 }

func (s TaskScope) overlaps(o TaskScope) bool {
	seen := map[uuid.UUID]bool{}
	for _, ids := range s.Components {
		for _, id := range ids {
			seen[id] = true
		}
	}
	for _, ids := range o.Components {
		for _, id := range ids {
			if seen[id] {
				return true
			}
		}
	}
	return false
}

// conflictRule is one row of the conflict table (spec/execution.md §6): a
// side-A condition, a side-B condition, and whether the two tasks must share
// a component. The table is symmetric: a rule matches A/B in either order.
type conflictRule struct {
	a, b    func(TaskScope) bool
	overlap bool
}

func opType(t OperationType) func(TaskScope) bool {
	return func(s TaskScope) bool { return s.OperationType == t }
}

func opWith(t OperationType, componentType ComponentType) func(TaskScope) bool {
	return func(s TaskScope) bool { return s.OperationType == t && s.has(componentType) }
}

func anyTask(TaskScope) bool { return true }

var conflictTable = []conflictRule{
	{a: opWith(OperationTypePowerControl, ComponentTypePowerShelf), b: opType(OperationTypePowerControl)},                                        // 1: shelf power is rack-wide
	{a: opWith(OperationTypePowerControl, ComponentTypePowerShelf), b: opType(OperationTypeFirmwareControl)},                                     // 2
	{a: opWith(OperationTypePowerControl, ComponentTypeCompute), b: opWith(OperationTypePowerControl, ComponentTypeCompute), overlap: true},      // 3
	{a: opWith(OperationTypePowerControl, ComponentTypeNVSwitch), b: opWith(OperationTypePowerControl, ComponentTypeNVSwitch), overlap: true},    // 4
	{a: opWith(OperationTypePowerControl, ComponentTypeCompute), b: opWith(OperationTypeFirmwareControl, ComponentTypeCompute), overlap: true},   // 5
	{a: opWith(OperationTypePowerControl, ComponentTypeNVSwitch), b: opWith(OperationTypeFirmwareControl, ComponentTypeNVSwitch), overlap: true}, // 6
	{a: opType(OperationTypeFirmwareControl), b: opType(OperationTypeFirmwareControl), overlap: true},                                            // 7
	{a: opType(OperationTypeBringUp), b: anyTask},      // 8
	{a: opType(OperationTypeDecommission), b: anyTask}, // 9
}

// Conflicts reports whether two tasks on the same rack may not be active at
// the same time. Operation codes play no part; everything the table does not
// name coexists (inject_expectation with anything but bring-up and
// decommission, say, or compute power tasks on disjoint trays).
func Conflicts(x, y TaskScope) bool {
	for _, r := range conflictTable {
		if (r.a(x) && r.b(y)) || (r.a(y) && r.b(x)) {
			if !r.overlap || x.overlaps(y) {
				return true
			}
		}
	}
	return false
}

// FirstConflict returns the index of the first active task that conflicts
// with candidate, or -1.
func FirstConflict(candidate TaskScope, active []TaskScope) int {
	for i, a := range active {
		if Conflicts(candidate, a) {
			return i
		}
	}
	return -1
}
