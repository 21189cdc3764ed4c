package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
)

// Drift is one persisted difference between Flow's inventory and NICo Core,
// found by the last successful sync of its component type.
type Drift struct {
	// Kind is "missing_in_actual" (Flow has it, Core does not),
	// "missing_in_expected" (Core has it, Flow does not) or "mismatch".
	Kind           string
	Type           inventory.ComponentType
	ComponentID    *uuid.UUID // nil for missing_in_expected
	ExternalID     string     // Core's ID, when known
	MAC            string
	Name           string
	SerialNumber   string
	Firmware       string
	RackExternalID string
	Fields         []backend.FieldDiff // mismatch only
	CheckedAt      time.Time
}

// Drifts returns every persisted drift row, by component type.
func (s *Syncer) Drifts(ctx context.Context, dbtx db.DBTX) ([]Drift, error) {
	rows, err := s.q.DriftList(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list drift: %w", err)
	}
	out := make([]Drift, len(rows))
	for i, r := range rows {
		d := driftOfRow(r)
		out[i] = Drift{
			Kind: d.kind, Type: inventory.ComponentType(r.ComponentType), ComponentID: r.ComponentID, ExternalID: d.externalID,
			MAC: d.mac, Name: d.name, SerialNumber: d.serial, Firmware: d.firmware, RackExternalID: d.rackExt, Fields: d.diffs,
			CheckedAt: r.CheckedAt,
		}
	}
	return out, nil
}

// lastSynced returns, per part name, the start of the newest cycle in which
// it succeeded.
func (s *Syncer) lastSynced(ctx context.Context, dbtx db.DBTX) (map[string]time.Time, error) {
	rows, err := s.q.SyncRunLatestOK(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("last successful sync: %w", err)
	}
	out := make(map[string]time.Time, len(rows))
	for _, r := range rows {
		out[r.Name] = r.StartedAt
	}
	return out, nil
}
