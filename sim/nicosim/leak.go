package nicosim

import (
	"fmt"
	"slices"
	"time"

	"github.com/nicoflow/flow/nico"
)

// Leak is a leaking device as the admin surface lists it.
type Leak struct {
	Kind   string `json:"kind"`
	ID     string `json:"id"`
	BMCMAC string `json:"bmc_mac"`
	Name   string `json:"name,omitempty"`
	RackID string `json:"rack_id,omitempty"`
}

// SetLeak raises (leaking) or clears the leak alert
// (nico.LeakAlert, "hardware-health.tray-leak-detection") of the compute
// tray or NVLink switch with the given ID or MAC: FindMachineIds and
// FindSwitchIds filtered by that alert then list it, and its health report
// carries it. It fails for an unknown device and for a power shelf (Core
// reports leaks of machines and switches only).
func (s *Sim) SetLeak(key string, leaking bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.byID("", key)
	if d == nil {
		d = s.byMAC(key)
	}
	if d == nil {
		return fmt.Errorf("%w: %s", errNoDevice, key)
	}
	if d.Kind == KindPowerShelf {
		return fmt.Errorf("nicosim: %s is a power shelf: Core reports leaks of compute trays and switches only", key)
	}
	has := slices.Contains(d.Alerts, nico.LeakAlert)
	switch {
	case leaking && !has:
		d.Alerts = append(slices.Clone(d.Alerts), nico.LeakAlert)
	case !leaking && has:
		d.Alerts = slices.DeleteFunc(slices.Clone(d.Alerts), func(a string) bool { return a == nico.LeakAlert })
	default:
		return nil
	}
	d.healthAt = s.clock.Now().UTC().Truncate(time.Second)
	return nil
}

// Leaks returns the devices whose leak alert is raised, in seed order.
func (s *Sim) Leaks() []Leak {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Leak{}
	for _, d := range s.devices {
		if slices.Contains(d.Alerts, nico.LeakAlert) {
			out = append(out, Leak{Kind: d.Kind, ID: d.ID, BMCMAC: d.BMCMAC, Name: d.Name, RackID: d.RackID})
		}
	}
	return out
}

// LeaksJSON is Leaks for the admin surface.
func (s *Sim) LeaksJSON() any { return s.Leaks() }
