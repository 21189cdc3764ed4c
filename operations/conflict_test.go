package operations_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/operations"
)

func TestConflicts(t *testing.T) {
	t.Parallel()
	c1, c2, s1, n1, p1 := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	scope := func(op operations.OperationType, byType map[operations.ComponentType][]uuid.UUID) operations.TaskScope {
		return operations.TaskScope{OperationType: op, Components: byType}
	}
	computeOn := func(ids ...uuid.UUID) operations.TaskScope {
		return scope("power_control", map[operations.ComponentType][]uuid.UUID{"Compute": ids})
	}
	shelfPower := scope("power_control", map[operations.ComponentType][]uuid.UUID{"PowerShelf": {p1}})
	switchPower := scope("power_control", map[operations.ComponentType][]uuid.UUID{"NVSwitch": {n1}})
	computeFW := func(ids ...uuid.UUID) operations.TaskScope {
		return scope("firmware_control", map[operations.ComponentType][]uuid.UUID{"Compute": ids})
	}
	switchFW := scope("firmware_control", map[operations.ComponentType][]uuid.UUID{"NVSwitch": {n1}})
	otherSwitchFW := scope("firmware_control", map[operations.ComponentType][]uuid.UUID{"NVSwitch": {s1}})
	bringUp := scope("bring_up", map[operations.ComponentType][]uuid.UUID{"Compute": {c2}})
	decom := scope("decommission", map[operations.ComponentType][]uuid.UUID{"UMS": {uuid.New()}})
	inject := scope("inject_expectation", map[operations.ComponentType][]uuid.UUID{"Compute": {c1}})

	for _, tt := range []struct {
		name string
		a, b operations.TaskScope
		want bool
	}{
		{"1 shelf power blocks any power, rack-wide", shelfPower, computeOn(c1), true},
		{"2 shelf power blocks firmware, rack-wide", shelfPower, computeFW(c2), true},
		{"3 compute power, same tray", computeOn(c1), computeOn(c1, c2), true},
		{"3 compute power, disjoint trays coexist", computeOn(c1), computeOn(c2), false},
		{"4 switch power, same switch", switchPower, switchPower, true},
		{"5 compute power vs compute firmware, same tray", computeOn(c1), computeFW(c1), true},
		{"5 compute power vs compute firmware, other tray", computeOn(c1), computeFW(c2), false},
		{"6 switch power vs switch firmware, same switch", switchPower, switchFW, true},
		{"6 switch power vs other switch firmware", switchPower, otherSwitchFW, false},
		{"7 firmware vs firmware, overlapping", switchFW, switchFW, true},
		{"7 firmware vs firmware, disjoint", computeFW(c1), computeFW(c2), false},
		{"8 bring-up blocks anything", bringUp, computeOn(c1), true},
		{"8 bring-up blocks inject", inject, bringUp, true},
		{"9 decommission blocks anything", computeFW(c1), decom, true},
		{"inject coexists with power", inject, computeOn(c1), false},
		{"inject coexists with firmware", computeFW(c1), inject, false},
		{"compute power coexists with switch firmware", computeOn(c1), switchFW, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, operations.Conflicts(tt.a, tt.b))
			require.Equal(t, tt.want, operations.Conflicts(tt.b, tt.a), "the table is symmetric")
		})
	}
	require.Equal(t, 1, operations.FirstConflict(computeOn(c1), []operations.TaskScope{computeOn(c2), computeFW(c1), shelfPower}))
	require.Equal(t, -1, operations.FirstConflict(computeOn(c1), nil))
}
