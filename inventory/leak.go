package inventory

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// LeakStatus is whether leak detection found a component leaking (wire
// Component.leak_status): "" until the detection loop has looked at it.
type LeakStatus string

// Leak statuses.
const (
	LeakUnknown     LeakStatus = ""
	LeakDetected    LeakStatus = "detected"
	LeakNotDetected LeakStatus = "not_detected"
)

// LeakHandling is how far Flow's reaction to a leak on a component has got
// (wire LeakHandlingStatus), from the latest leak-triggered power-off task
// that covers it.
type LeakHandling string

// Leak handling statuses. The zero value is LeakHandlingNone.
const (
	LeakHandlingNone         LeakHandling = ""
	LeakHandlingShuttingDown LeakHandling = "shutting_down"
	LeakHandlingDown         LeakHandling = "down"
	LeakHandlingFailed       LeakHandling = "failed"
	LeakHandlingUnknown      LeakHandling = "unknown"
)

// LeakHandlingFunc returns the leak handling status of the components ids
// that have one (the others are LeakHandlingNone). The event-rule
// processor provides it.
type LeakHandlingFunc func(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]LeakHandling, error)

// SetLeakHandling installs the source of leak handling statuses. Call it
// once at startup, before serving.
func (s *Service) SetLeakHandling(fn LeakHandlingFunc) { s.leakHandling = fn }

// SetLeakStatus records one successful poll of the components of type t
// that leak: every live component of t with an external ID becomes
// LeakDetected if its external ID is in leaking and LeakNotDetected
// otherwise; components without an external ID stay unknown. Only changed
// rows are written; it returns how many were.
func (s *Service) SetLeakStatus(ctx context.Context, dbtx db.DBTX, t ComponentType, leaking []string) (int64, error) {
	if leaking == nil {
		leaking = []string{}
	}
	n, err := s.q.ComponentLeakSet(ctx, dbtx, dbsqlc.ComponentLeakSetParams{Type: string(t), Leaking: leaking})
	if err != nil {
		return 0, fmt.Errorf("set leak status of %s: %w", t, err)
	}
	return n, nil
}

// addLeak sets the leak status and leak handling of comps in place.
func (s *Service) addLeak(ctx context.Context, dbtx db.DBTX, comps []Component) error {
	if len(comps) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(comps))
	for i := range comps {
		ids[i] = comps[i].ID
	}
	rows, err := s.q.ComponentLeakGet(ctx, dbtx, ids)
	if err != nil {
		return fmt.Errorf("leak status: %w", err)
	}
	status := make(map[uuid.UUID]LeakStatus, len(rows))
	for _, r := range rows {
		status[r.ComponentID] = LeakStatus(r.Status)
	}
	handling := map[uuid.UUID]LeakHandling{}
	if s.leakHandling != nil {
		if handling, err = s.leakHandling(ctx, dbtx, ids); err != nil {
			return fmt.Errorf("leak handling: %w", err)
		}
	}
	for i := range comps {
		comps[i].LeakStatus = status[comps[i].ID]
		comps[i].LeakHandling = handling[comps[i].ID]
	}
	return nil
}
