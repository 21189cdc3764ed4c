package isolation

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/ruledef"
)

// Cooling awareness (docs/event-rules.md "Cooling awareness"): while a
// coolant loop has an open leak (a rack on it with an open leak no admin
// overrode, or an open isolation), work that would energise a rack of the
// loop (power on, cycles and resets, firmware, bring-up) and has not
// started waits, with the reason in its message, and is looked at again
// every coolingRecheck; an operation run's claims on the loop's racks wait
// likewise. A rack whose loop is not known is not held (its own leaking
// components are refused by the leak guard).

// Hold implements operations.StartGate's Hold for cooling awareness.
func (s *Service) Hold(ctx context.Context, dbtx db.DBTX, sub operations.GateSubject) (operations.GateHold, error) {
	if s.cfg.NoCooling || s.cfg.LoopRacks == nil || !operations.Energises(sub.Type, sub.Code, ruledef.Definition{}) {
		return operations.GateHold{}, nil
	}
	leaking, err := s.cfg.Inv.RacksLeaking(ctx, dbtx, 1)
	if err != nil {
		return operations.GateHold{}, err
	}
	anyOpen, err := s.q.IsolationAnyOpen(ctx, dbtx)
	if err != nil || (len(leaking) == 0 && !anyOpen) {
		return operations.GateHold{}, err
	}
	p, err := s.placement(ctx, dbtx, sub.RackID)
	if err != nil || p.Loop == "" {
		return operations.GateHold{}, err
	}
	on, err := s.cfg.LoopRacks(ctx, dbtx, p.Loop)
	if err != nil {
		return operations.GateHold{}, err
	}
	var culprit uuid.UUID
	for _, l := range leaking {
		if slices.Contains(on, l.RackID) {
			culprit = l.RackID
			break
		}
	}
	if culprit == uuid.Nil && anyOpen {
		open, err := s.q.IsolationOpenOfRacks(ctx, dbtx, on)
		if err != nil {
			return operations.GateHold{}, err
		}
		if len(open) > 0 {
			culprit = open[0].RackID
		}
	}
	if culprit == uuid.Nil {
		return operations.GateHold{}, nil
	}
	name := culprit.String()
	if cp, err := s.placement(ctx, dbtx, culprit); err == nil && cp.Name != "" {
		name = cp.Name
	}
	at := sub.At
	if at.IsZero() {
		at = time.Now()
	}
	return operations.GateHold{Reason: fmt.Sprintf("coolant loop %s has an open leak on rack %s", p.Loop, name), Retry: at.Add(coolingRecheck)}, nil
}
