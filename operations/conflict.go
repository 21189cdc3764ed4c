package operations

import "github.com/google/uuid"

// TaskScope is what the conflict policy knows of a task: its operation type
// (power_control, firmware_control, bring_up, decommission,
// inject_expectation) and the components it covers, grouped by component
// type name (Compute, NVSwitch, PowerShelf, …).
type TaskScope struct {
	OperationType string
	Components    map[string][]uuid.UUID
}

func (s TaskScope) has(componentType string) bool { return len(s.Components[componentType]) > 0 }

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

func opType(t string) func(TaskScope) bool {
	return func(s TaskScope) bool { return s.OperationType == t }
}

func opWith(t, componentType string) func(TaskScope) bool {
	return func(s TaskScope) bool { return s.OperationType == t && s.has(componentType) }
}

func anyTask(TaskScope) bool { return true }

const (
	opPower        = "power_control"
	opFirmware     = "firmware_control"
	opBringUp      = "bring_up"
	opDecommission = "decommission"
)

var conflictTable = []conflictRule{
	{a: opWith(opPower, "PowerShelf"), b: opType(opPower)},                             // 1: shelf power is rack-wide
	{a: opWith(opPower, "PowerShelf"), b: opType(opFirmware)},                          // 2
	{a: opWith(opPower, "Compute"), b: opWith(opPower, "Compute"), overlap: true},      // 3
	{a: opWith(opPower, "NVSwitch"), b: opWith(opPower, "NVSwitch"), overlap: true},    // 4
	{a: opWith(opPower, "Compute"), b: opWith(opFirmware, "Compute"), overlap: true},   // 5
	{a: opWith(opPower, "NVSwitch"), b: opWith(opFirmware, "NVSwitch"), overlap: true}, // 6
	{a: opType(opFirmware), b: opType(opFirmware), overlap: true},                      // 7
	{a: opType(opBringUp), b: anyTask},                                                 // 8
	{a: opType(opDecommission), b: anyTask},                                            // 9
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
