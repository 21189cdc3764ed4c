package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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

// UpdateLeakStatus is SetLeakStatus for the components whose status
// changes (leaking and not yet LeakDetected, LeakDetected and no longer
// leaking), found through indexes rather than by reading every component
// of t: a component never looked at keeps LeakUnknown until the next
// SetLeakStatus, unless it leaks. Leak detection runs it on most cycles.
func (s *Service) UpdateLeakStatus(ctx context.Context, dbtx db.DBTX, t ComponentType, leaking []string) (int64, error) {
	if leaking == nil {
		leaking = []string{}
	}
	n, err := s.q.ComponentLeakSetChanged(ctx, dbtx, dbsqlc.ComponentLeakSetChangedParams{Type: string(t), Leaking: leaking})
	if err != nil {
		return 0, fmt.Errorf("update leak status of %s: %w", t, err)
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

// OpenLeak is a component's open leak: Core reports it, since DetectedAt.
// An admin may have overridden the energise guard for it.
type OpenLeak struct {
	ComponentID    uuid.UUID
	Name           string
	ExternalID     string
	DetectedAt     time.Time
	OverrideReason string
	OverrideBy     string
	OverrideAt     *time.Time
}

// Overridden reports whether an admin overrode the energise guard for
// this leak.
func (l OpenLeak) Overridden() bool { return l.OverrideAt != nil }

// String names the component and its leak, for refusals.
func (l OpenLeak) String() string {
	name := l.Name
	if name == "" {
		name = l.ComponentID.String()
	}
	s := fmt.Sprintf("component %s (%s", name, l.ComponentID)
	if l.ExternalID != "" {
		s += ", Core ID " + l.ExternalID
	}
	s += ") has an open coolant leak"
	if !l.DetectedAt.IsZero() {
		s += " detected at " + l.DetectedAt.UTC().Format(time.RFC3339)
	}
	return s
}

// ErrNoOpenLeak means the component has no open leak to override.
var ErrNoOpenLeak = errors.New("component has no open leak")

// OpenLeaks returns the open leaks among components ids, in no order.
func (s *Service) OpenLeaks(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) ([]OpenLeak, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.q.ComponentLeakOpen(ctx, dbtx, ids)
	if err != nil {
		return nil, fmt.Errorf("open leaks: %w", err)
	}
	out := make([]OpenLeak, len(rows))
	for i, r := range rows {
		out[i] = OpenLeak{ComponentID: r.ComponentID, Name: r.Name, ExternalID: deref(r.ExternalID),
			OverrideReason: deref(r.OverrideReason), OverrideBy: deref(r.OverrideBy), OverrideAt: r.OverrideAt}
		if r.DetectedAt != nil {
			out[i].DetectedAt = *r.DetectedAt
		}
	}
	return out, nil
}

// OverrideLeak records an admin's override of the energise guard for
// component id's current leak, by who, for reason: operations that would
// power it on are accepted again until the leak ends (a new leak needs a
// new override). ErrNoOpenLeak when it has none.
func (s *Service) OverrideLeak(ctx context.Context, dbtx db.DBTX, id uuid.UUID, who, reason string) (OpenLeak, error) {
	row, err := s.q.ComponentLeakOverride(ctx, dbtx, dbsqlc.ComponentLeakOverrideParams{ComponentID: id, Reason: &reason, OverrideBy: &who})
	if errors.Is(err, pgx.ErrNoRows) {
		return OpenLeak{}, fmt.Errorf("%w: %s", ErrNoOpenLeak, id)
	} else if err != nil {
		return OpenLeak{}, fmt.Errorf("override leak: %w", err)
	}
	out := OpenLeak{ComponentID: id, OverrideReason: reason, OverrideBy: who, OverrideAt: row.OverrideAt}
	if row.DetectedAt != nil {
		out.DetectedAt = *row.DetectedAt
	}
	return out, nil
}

// LeakingRack is a rack with open leaks (RacksLeaking): the leaking
// components, and when the first and the latest of their leaks were
// detected.
type LeakingRack struct {
	RackID        uuid.UUID
	ComponentIDs  []uuid.UUID
	FirstDetected time.Time
	LastDetected  time.Time
}

// RacksLeaking returns the racks with at least min open leaks that no admin
// overrode, in no order (the severe leak tier).
func (s *Service) RacksLeaking(ctx context.Context, dbtx db.DBTX, min int) ([]LeakingRack, error) {
	rows, err := s.q.RackLeakOpen(ctx, dbtx, int32(max(min, 1)))
	if err != nil {
		return nil, fmt.Errorf("racks with open leaks: %w", err)
	}
	out := make([]LeakingRack, len(rows))
	for i, r := range rows {
		out[i] = LeakingRack{RackID: r.RackID, ComponentIDs: r.ComponentIDs, FirstDetected: r.FirstDetected, LastDetected: r.LastDetected}
	}
	return out, nil
}

// RackPlacementOf returns live rack id's name, power feed and coolant loop
// ("" when not known); ErrRackNotFound when there is no such live rack.
func (s *Service) RackPlacementOf(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (name, feed, loop string, err error) {
	row, err := s.q.RackLoopPlacement(ctx, dbtx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", "", fmt.Errorf("%w: %s", ErrRackNotFound, id)
	} else if err != nil {
		return "", "", "", fmt.Errorf("get rack %s: %w", id, err)
	}
	return row.Name, deref(row.PowerFeed), deref(row.CoolantLoop), nil
}

// LoopRackIDs returns the live racks on coolant loop, by ID (none for an
// unknown loop).
func (s *Service) LoopRackIDs(ctx context.Context, dbtx db.DBTX, loop string) ([]uuid.UUID, error) {
	ids, err := s.q.LoopRackIDs(ctx, dbtx, loop)
	if err != nil {
		return nil, fmt.Errorf("racks on loop %s: %w", loop, err)
	}
	return ids, nil
}
