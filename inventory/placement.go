package inventory

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// placementName is a feed's or loop's name: a letter or digit, then up to
// 127 letters, digits and . _ - : / (a busway "hall-a/bw-3", a CDU loop
// "cdu-12").
var placementName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)

// CheckPlacementName checks a power feed or coolant loop name (field names
// it in the error); "" (clear) passes. A rack is on one feed and one loop:
// a list is refused.
func CheckPlacementName(field, name string) error {
	if name == "" || placementName.MatchString(name) {
		return nil
	}
	if strings.ContainsAny(name, ", ;") {
		return invalid(field, "%q names several; a rack is on one %s", name, strings.ReplaceAll(field, "_", " "))
	}
	return invalid(field, "%q is not a name: a letter or digit, then up to 127 letters, digits, '.', '_', '-', ':' or '/'", name)
}

// Placement is a change of a rack's power feed and coolant loop: a nil
// field is left as it is, "" clears.
type Placement struct {
	PowerFeed   *string
	CoolantLoop *string
}

// SetRackPlacement sets the power feed and coolant loop of the live rack
// ref names, through tx, and returns the rack as changed. Errors: a
// *FieldError (power_feed, coolant_loop) with nothing changed;
// ErrRackNotFound; ErrAmbiguous (a name several racks share).
func (s *Service) SetRackPlacement(ctx context.Context, tx pgx.Tx, ref RackRef, p Placement) (Rack, error) {
	if p.PowerFeed != nil {
		if err := CheckPlacementName("power_feed", *p.PowerFeed); err != nil {
			return Rack{}, err
		}
	}
	if p.CoolantLoop != nil {
		if err := CheckPlacementName("coolant_loop", *p.CoolantLoop); err != nil {
			return Rack{}, err
		}
	}
	rack, err := s.ResolveRack(ctx, tx, ref)
	if err != nil {
		return Rack{}, err
	}
	row, err := s.q.RackSetPlacement(ctx, tx, dbsqlc.RackSetPlacementParams{
		ID: rack.ID, SetFeed: p.PowerFeed != nil, PowerFeed: deref(p.PowerFeed),
		SetLoop: p.CoolantLoop != nil, CoolantLoop: deref(p.CoolantLoop),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Rack{}, fmt.Errorf("%w: %s", ErrRackNotFound, ref)
	} else if err != nil {
		return Rack{}, fmt.Errorf("set rack placement: %w", err)
	}
	return rackFromRow(row), nil
}

// ParseRackRef reads a rack reference given as a UUID or a name.
func ParseRackRef(s string) RackRef {
	if id, err := uuid.Parse(s); err == nil {
		return RackRef{ID: id}
	}
	return RackRef{Name: s}
}

// RackPlacement is a rack's feed and loop, for the floor map and the feed
// list.
type RackPlacement struct {
	ID          uuid.UUID
	Name        string
	Hall        string
	PowerFeed   string
	CoolantLoop string
}

// RackPlacements lists the live racks with a feed or a loop, by name.
func (s *Service) RackPlacements(ctx context.Context, dbtx db.DBTX) ([]RackPlacement, error) {
	rows, err := s.q.RackPlacementList(ctx, dbtx)
	if err != nil {
		return nil, err
	}
	out := make([]RackPlacement, len(rows))
	for i, r := range rows {
		out[i] = RackPlacement{ID: r.ID, Name: r.Name, Hall: r.LocationRoom, PowerFeed: deref(r.PowerFeed), CoolantLoop: deref(r.CoolantLoop)}
	}
	return out, nil
}
