package ruledef

import (
	"cmp"
	"fmt"
	"slices"
)

// Capability is something a component manager must support for an action to
// run against a component type (spec §8.1).
type Capability string

// Capabilities.
const (
	CapabilityPowerControl             Capability = "PowerControl"
	CapabilityPowerStatus              Capability = "PowerStatus"
	CapabilityFirmwareControl          Capability = "FirmwareControl"
	CapabilityFirmwareStatus           Capability = "FirmwareStatus"
	CapabilityBringUpControl           Capability = "BringUpControl"
	CapabilityBringUpStatus            Capability = "BringUpStatus"
	CapabilityInjectExpectation        Capability = "InjectExpectation"
	CapabilityFirmwareConsistencyCheck Capability = "FirmwareConsistencyCheck"
	CapabilityDecommissionControl      Capability = "DecommissionControl"
	CapabilityDecommissionStatus       Capability = "DecommissionStatus"
)

// Requirement is one capability the manager of one component type must have.
type Requirement struct {
	ComponentType ComponentType
	Capability    Capability
}

// actionCapabilities is the pre-dispatch capability table (spec §8.1). Unlike
// upstream's newest table it also covers the decommission actions, so a
// decommission rule can pass the pre-check instead of failing with
// "unknown action … in capability validation".
var actionCapabilities = map[ActionName][]Capability{
	ActionSleep:                     nil,
	ActionPowerControl:              {CapabilityPowerControl},
	ActionVerifyPowerStatus:         {CapabilityPowerStatus},
	ActionGetPowerStatus:            {CapabilityPowerStatus},
	ActionVerifyReachability:        {CapabilityPowerStatus},
	ActionFirmwareControl:           {CapabilityFirmwareControl, CapabilityFirmwareStatus},
	ActionBringUpControl:            {CapabilityBringUpControl},
	ActionWaitBringUp:               {CapabilityBringUpStatus},
	ActionInjectExpectation:         {CapabilityInjectExpectation},
	ActionVerifyFirmwareConsistency: {CapabilityFirmwareConsistencyCheck},
	ActionDecommissionControl:       {CapabilityDecommissionControl},
	ActionWaitDecommissioned:        {CapabilityDecommissionStatus},
}

// Requirements returns the capabilities step s needs from component managers
// when the task targets the component types in targeted. A step whose own type
// is not targeted needs nothing. Each action needs its capabilities on the
// step's type; VerifyReachability also needs PowerStatus on every targeted
// type named in its component_types. The result is deduplicated and sorted
// by component type, then capability. An action outside the table is an
// error.
func (s Step) Requirements(targeted []ComponentType) ([]Requirement, error) {
	if !slices.Contains(targeted, s.ComponentType) {
		return nil, nil
	}
	var out []Requirement
	for _, a := range s.Actions() {
		caps, ok := actionCapabilities[a.Name]
		if !ok {
			return nil, fmt.Errorf("unknown action %s in capability validation", a.Name)
		}
		for _, c := range caps {
			out = append(out, Requirement{ComponentType: s.ComponentType, Capability: c})
		}
		if a.Name == ActionVerifyReachability {
			for _, ct := range a.Parameters.ComponentTypes {
				if slices.Contains(targeted, ct) {
					out = append(out, Requirement{ComponentType: ct, Capability: CapabilityPowerStatus})
				}
			}
		}
	}
	return sortRequirements(out), nil
}

// Requirements returns the union of Step.Requirements over every step of d,
// deduplicated and sorted.
func (d Definition) Requirements(targeted []ComponentType) ([]Requirement, error) {
	var out []Requirement
	for i, s := range d.Steps {
		r, err := s.Requirements(targeted)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", i, err)
		}
		out = append(out, r...)
	}
	return sortRequirements(out), nil
}

func sortRequirements(rs []Requirement) []Requirement {
	slices.SortFunc(rs, func(a, b Requirement) int {
		return cmp.Or(cmp.Compare(a.ComponentType, b.ComponentType), cmp.Compare(a.Capability, b.Capability))
	})
	return slices.Compact(rs)
}
