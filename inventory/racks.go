package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// CreateRack registers an expected rack with its components and their BMCs,
// all or nothing, and returns the rack's UUID (r.ID when set, else a new
// one). Components get their own IDs the same way. It writes only through
// tx; the caller commits.
//
// Errors: *FieldError (ErrInvalidArgument) for bad input, including
// duplicates inside the request; ErrRackExists, ErrComponentExists or
// ErrBMCExists when the serial numbers, external ID or MACs are taken.
func (s *Service) CreateRack(ctx context.Context, tx pgx.Tx, r Rack) (uuid.UUID, error) {
	if err := validateNewRack(&r); err != nil {
		return uuid.Nil, err
	}
	if r.ID == uuid.Nil {
		r.ID = uuid.New()
	}
	for i := range r.Components {
		c := &r.Components[i]
		if c.ID == uuid.Nil {
			c.ID = uuid.New()
		}
		c.RackID = &r.ID
	}
	if existing, err := s.q.RackGetBySerial(ctx, tx, dbsqlc.RackGetBySerialParams{Manufacturer: r.Manufacturer, SerialNumber: r.SerialNumber}); err == nil {
		return uuid.Nil, fmt.Errorf("%w: %s/%s is rack %s", ErrRackExists, r.Manufacturer, r.SerialNumber, existing.ID)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, fmt.Errorf("get rack by serial: %w", err)
	}
	err := s.q.RackInsert(ctx, tx, dbsqlc.RackInsertParams{
		ID:                 r.ID,
		Name:               r.Name,
		Manufacturer:       r.Manufacturer,
		SerialNumber:       r.SerialNumber,
		Model:              r.Model,
		Description:        r.Description,
		LocationRegion:     r.Location.Region,
		LocationDatacenter: r.Location.Datacenter,
		LocationRoom:       r.Location.Room,
		LocationPosition:   r.Location.Position,
		ExternalID:         nonEmpty(r.ExternalID),
	})
	if err != nil {
		return uuid.Nil, rackWriteError(err, r)
	}
	if err := s.insertComponents(ctx, tx, r.Components, "rack.components"); err != nil {
		return uuid.Nil, err
	}
	return r.ID, nil
}

func rackWriteError(err error, r Rack) error {
	switch {
	case db.IsUniqueViolation(err, "rack_pkey"):
		return fmt.Errorf("%w: id %s", ErrRackExists, r.ID)
	case db.IsUniqueViolation(err, "rack_serial_key"):
		return fmt.Errorf("%w: %s/%s (soft-deleted racks keep their serial until purged)", ErrRackExists, r.Manufacturer, r.SerialNumber)
	case db.IsUniqueViolation(err, "rack_external_id_key"):
		return fmt.Errorf("%w: external id %q", ErrRackExists, r.ExternalID)
	}
	return fmt.Errorf("write rack: %w", err)
}

// Rack returns the live rack id, with its components when withComponents.
// Errors: ErrRackNotFound.
func (s *Service) Rack(ctx context.Context, dbtx db.DBTX, id uuid.UUID, withComponents bool) (Rack, error) {
	row, err := s.q.RackGetByID(ctx, dbtx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Rack{}, fmt.Errorf("%w: %s", ErrRackNotFound, id)
	} else if err != nil {
		return Rack{}, fmt.Errorf("get rack %s: %w", id, err)
	}
	return s.oneRack(ctx, dbtx, row, withComponents)
}

// RackBySerial returns the live rack with this manufacturer (compared
// ignoring case) and serial number. Errors: *FieldError for an empty serial
// number, ErrRackNotFound.
func (s *Service) RackBySerial(ctx context.Context, dbtx db.DBTX, manufacturer, serial string, withComponents bool) (Rack, error) {
	if serial == "" {
		return Rack{}, invalid("serial_info.serial_number", "must not be empty")
	}
	row, err := s.q.RackGetBySerial(ctx, dbtx, dbsqlc.RackGetBySerialParams{Manufacturer: manufacturer, SerialNumber: serial})
	if errors.Is(err, pgx.ErrNoRows) {
		return Rack{}, fmt.Errorf("%w: manufacturer %q serial %q", ErrRackNotFound, manufacturer, serial)
	} else if err != nil {
		return Rack{}, fmt.Errorf("get rack by serial: %w", err)
	}
	return s.oneRack(ctx, dbtx, row, withComponents)
}

func (s *Service) oneRack(ctx context.Context, dbtx db.DBTX, row dbsqlc.Rack, withComponents bool) (Rack, error) {
	racks, err := s.completeRacks(ctx, dbtx, []dbsqlc.Rack{row}, withComponents)
	if err != nil {
		return Rack{}, err
	}
	return racks[0], nil
}

// completeRacks converts rows and adds task stats and, when asked, the live
// components with their BMCs (three queries whatever the number of racks).
func (s *Service) completeRacks(ctx context.Context, dbtx db.DBTX, rows []dbsqlc.Rack, withComponents bool) ([]Rack, error) {
	racks := make([]Rack, len(rows))
	ids := make([]uuid.UUID, len(rows))
	for i, row := range rows {
		racks[i] = rackFromRow(row)
		ids[i] = row.ID
	}
	stats, err := s.TaskStats(ctx, dbtx, ids)
	if err != nil {
		return nil, err
	}
	phases, err := s.RackPhases(ctx, dbtx, ids)
	if err != nil {
		return nil, err
	}
	for i := range racks {
		racks[i].TaskStats = stats[racks[i].ID]
		racks[i].OperationPhase = phases[racks[i].ID]
	}
	if err := s.fillDomainExternalIDs(ctx, dbtx, len(racks), func(i int) *uuid.UUID { return racks[i].NVLDomainID },
		func(i int, ext string) { racks[i].NVLDomainExternalID = ext }); err != nil {
		return nil, err
	}
	if !withComponents || len(rows) == 0 {
		return racks, nil
	}
	comps, err := s.componentsOfRacks(ctx, dbtx, racks, true)
	if err != nil {
		return nil, err
	}
	// comps come grouped by rack in rack order: hand each rack its run.
	for i := range racks {
		n := 0
		for n < len(comps) && *comps[n].RackID == racks[i].ID {
			n++
		}
		racks[i].Components, comps = comps[:n:n], comps[n:]
	}
	return racks, nil
}

// RackOrder is a rack listing's sort key: "name" (default), "manufacturer"
// or "model"; ties are always broken by UUID ascending.
type RackOrder struct {
	Key  string
	Desc bool
}

// RackQuery selects racks for ListRacks. Nil filters match everything.
type RackQuery struct {
	Name, Manufacturer, Model *StringQuery
	Order                     RackOrder
	Page                      Page
	WithComponents            bool
	// WithExternalIDOnly keeps only racks with a non-empty external ID
	// (counted in the total too).
	WithExternalIDOnly bool
}

// ListRacks returns one page of live racks matching q and the number of
// matching racks before paging. Errors: *FieldError for bad paging or order.
func (s *Service) ListRacks(ctx context.Context, dbtx db.DBTX, q RackQuery) ([]Rack, int32, error) {
	limit, err := pageLimit(q.Page, DefaultPageLimit)
	if err != nil {
		return nil, 0, err
	}
	key := cmpOr(q.Order.Key, "name")
	if !slices.Contains([]string{"name", "manufacturer", "model"}, key) {
		return nil, 0, invalid("order_by.rack_field", "unknown order key %q", key)
	}
	name, nameAny := likePatterns(q.Name)
	manu, manuAny := likePatterns(q.Manufacturer)
	model, modelAny := likePatterns(q.Model)
	rows, err := s.q.RackList(ctx, dbtx, dbsqlc.RackListParams{
		NamePatterns: name, NameAny: nameAny,
		ManufacturerPatterns: manu, ManufacturerAny: manuAny,
		ModelPatterns: model, ModelAny: modelAny,
		ExternalIDOnly: q.WithExternalIDOnly,
		OrderKey:       key, OrderDesc: q.Order.Desc,
		RowOffset: q.Page.Offset, RowLimit: limit,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list racks: %w", err)
	}
	total, err := s.q.RackCount(ctx, dbtx, dbsqlc.RackCountParams{
		NamePatterns: name, NameAny: nameAny,
		ManufacturerPatterns: manu, ManufacturerAny: manuAny,
		ModelPatterns: model, ModelAny: modelAny,
		ExternalIDOnly: q.WithExternalIDOnly,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("count racks: %w", err)
	}
	racks, err := s.completeRacks(ctx, dbtx, rows, q.WithComponents)
	if err != nil {
		return nil, 0, err
	}
	return racks, int32(total), nil
}

// RackPatch changes a rack found by ID or, when ID is nil, by manufacturer
// and serial number. Empty strings and nil pointers leave a field alone.
// Components are matched by ID or serial number among the rack's live
// components: known ones are patched (firmware version when non-empty,
// description when set, position when non-zero, BMCs by MAC), unknown ones
// are added.
type RackPatch struct {
	ID           uuid.UUID
	Manufacturer string
	SerialNumber string
	Name         string
	Model        *string
	Description  *string
	Location     Location
	ExternalID   string
	Components   []Component
}

// PatchRack applies p and returns a report: one line per rack and component
// saying "patched (fields…)", "added" or "no change". It writes only through
// tx; the caller commits.
// Errors: *FieldError, ErrRackNotFound, ErrRackExists (external ID taken),
// ErrComponentExists, ErrBMCExists.
func (s *Service) PatchRack(ctx context.Context, tx pgx.Tx, p RackPatch) (string, error) {
	var row dbsqlc.Rack
	var err error
	switch {
	case p.ID != uuid.Nil:
		row, err = s.q.RackGetByIDForUpdate(ctx, tx, p.ID)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("%w: %s", ErrRackNotFound, p.ID)
		}
	case p.SerialNumber != "":
		row, err = s.q.RackGetBySerial(ctx, tx, dbsqlc.RackGetBySerialParams{Manufacturer: p.Manufacturer, SerialNumber: p.SerialNumber})
		if errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("%w: manufacturer %q serial %q", ErrRackNotFound, p.Manufacturer, p.SerialNumber)
		}
	default:
		return "", invalid("rack.info", "give id, or manufacturer and serial_number")
	}
	if err != nil {
		return "", fmt.Errorf("get rack: %w", err)
	}
	cur := rackFromRow(row)
	next := cur
	var changed []string
	set := func(field string, dst *string, v string) {
		if v != "" && *dst != v {
			*dst = v
			changed = append(changed, field)
		}
	}
	set("name", &next.Name, p.Name)
	set("location.region", &next.Location.Region, p.Location.Region)
	set("location.datacenter", &next.Location.Datacenter, p.Location.Datacenter)
	set("location.room", &next.Location.Room, p.Location.Room)
	set("location.position", &next.Location.Position, p.Location.Position)
	set("external_id", &next.ExternalID, p.ExternalID)
	if p.Model != nil && (cur.Model == nil || *cur.Model != *p.Model) {
		next.Model = p.Model
		changed = append(changed, "model")
	}
	if p.Description != nil && (cur.Description == nil || *cur.Description != *p.Description) {
		next.Description = p.Description
		changed = append(changed, "description")
	}
	var report []string
	if len(changed) > 0 {
		err := s.q.RackUpdate(ctx, tx, dbsqlc.RackUpdateParams{
			ID:                 cur.ID,
			Name:               next.Name,
			Model:              next.Model,
			Description:        next.Description,
			LocationRegion:     next.Location.Region,
			LocationDatacenter: next.Location.Datacenter,
			LocationRoom:       next.Location.Room,
			LocationPosition:   next.Location.Position,
			ExternalID:         nonEmpty(next.ExternalID),
		})
		if err != nil {
			return "", rackWriteError(err, next)
		}
		report = append(report, fmt.Sprintf("rack %s: patched (%s)", cur.ID, strings.Join(changed, ", ")))
	} else {
		report = append(report, fmt.Sprintf("rack %s: no change", cur.ID))
	}
	if len(p.Components) > 0 {
		lines, err := s.patchRackComponents(ctx, tx, cur, p.Components)
		if err != nil {
			return "", err
		}
		report = append(report, lines...)
	}
	return strings.Join(report, "\n"), nil
}

func (s *Service) patchRackComponents(ctx context.Context, tx pgx.Tx, rack Rack, in []Component) ([]string, error) {
	rows, err := s.q.ComponentListByRacks(ctx, tx, []uuid.UUID{rack.ID})
	if err != nil {
		return nil, fmt.Errorf("list rack components: %w", err)
	}
	byID := map[uuid.UUID]dbsqlc.Component{}
	bySerial := map[string]dbsqlc.Component{}
	for _, r := range rows {
		byID[r.ID] = r
		bySerial[strings.ToLower(r.Manufacturer)+"\x00"+r.SerialNumber] = r
	}
	var lines []string
	var added []Component
	for i, c := range in {
		field := fmt.Sprintf("rack.components[%d]", i)
		cur, ok := byID[c.ID]
		if !ok && c.ID == uuid.Nil {
			cur, ok = bySerial[strings.ToLower(c.Manufacturer)+"\x00"+c.SerialNumber]
		}
		if !ok {
			if err := validateNewComponent(&c, field); err != nil {
				return nil, err
			}
			if c.ID == uuid.Nil {
				c.ID = uuid.New()
			}
			c.RackID = &rack.ID
			added = append(added, c)
			lines = append(lines, fmt.Sprintf("component %s (%s): added", c.ID, c.SerialNumber))
			continue
		}
		patch := ComponentPatch{ID: cur.ID, BMCs: c.BMCs, Description: c.Description}
		if c.FirmwareVersion != "" {
			patch.FirmwareVersion = &c.FirmwareVersion
		}
		if c.Position != (Position{}) {
			patch.Position = &c.Position
		}
		for j := range patch.BMCs {
			if err := validateBMC(&patch.BMCs[j], fmt.Sprintf("%s.bmcs[%d]", field, j)); err != nil {
				return nil, err
			}
		}
		_, changed, err := s.patchComponent(ctx, tx, patch)
		if err != nil {
			return nil, err
		}
		if len(changed) == 0 {
			lines = append(lines, fmt.Sprintf("component %s (%s): no change", cur.ID, cur.SerialNumber))
		} else {
			lines = append(lines, fmt.Sprintf("component %s (%s): patched (%s)", cur.ID, cur.SerialNumber, strings.Join(changed, ", ")))
		}
	}
	if err := checkUniqueInRequest(added, "rack.components"); err != nil {
		return nil, err
	}
	if err := s.insertComponents(ctx, tx, added, "rack.components"); err != nil {
		return nil, err
	}
	return lines, nil
}

// DeleteRack soft-deletes the live rack id and its live components. It
// writes only through tx. Errors: ErrRackNotFound.
func (s *Service) DeleteRack(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	n, err := s.q.RackSoftDelete(ctx, tx, id)
	if err != nil {
		return fmt.Errorf("delete rack %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrRackNotFound, id)
	}
	if err := s.q.ComponentSoftDeleteByRack(ctx, tx, &id); err != nil {
		return fmt.Errorf("delete components of rack %s: %w", id, err)
	}
	return nil
}

// PurgeRack permanently removes the soft-deleted rack id with all its
// components and their BMCs. It writes only through tx.
// Errors: ErrRackNotFound, ErrNotDeleted when the rack is still live.
func (s *Service) PurgeRack(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	row, err := s.q.RackGetByIDWithDeleted(ctx, tx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", ErrRackNotFound, id)
	} else if err != nil {
		return fmt.Errorf("get rack %s: %w", id, err)
	}
	if row.DeletedAt == nil {
		return fmt.Errorf("%w: rack %s", ErrNotDeleted, id)
	}
	if _, err := s.q.RackPurge(ctx, tx, id); err != nil {
		return fmt.Errorf("purge rack %s: %w", id, err)
	}
	return nil
}

// MaxDeletedRacks bounds what DeletedRacks returns.
const MaxDeletedRacks = 100

// DeletedRacks returns the soft-deleted racks named name (an exact match),
// the racks PurgeRack still takes, newest deletion first and at most
// MaxDeletedRacks; none is an empty slice. The racks carry no components.
// Errors: *FieldError (ErrInvalidArgument) when name is empty.
func (s *Service) DeletedRacks(ctx context.Context, dbtx db.DBTX, name string) ([]Rack, error) {
	if name == "" {
		return nil, invalid("name", "required")
	}
	rows, err := s.q.RackListDeletedByName(ctx, dbtx, dbsqlc.RackListDeletedByNameParams{Name: name, RowLimit: MaxDeletedRacks})
	if err != nil {
		return nil, fmt.Errorf("list deleted racks named %q: %w", name, err)
	}
	out := make([]Rack, len(rows))
	for i, r := range rows {
		out[i] = rackFromRow(r)
	}
	return out, nil
}

func validateNewRack(r *Rack) error {
	if r.SerialNumber == "" {
		return invalid("rack.info.serial_number", "must not be empty")
	}
	if r.Manufacturer == "" {
		return invalid("rack.info.manufacturer", "must not be empty")
	}
	if r.Name == "" {
		r.Name = r.SerialNumber
	}
	for i := range r.Components {
		if err := validateNewComponent(&r.Components[i], fmt.Sprintf("rack.components[%d]", i)); err != nil {
			return err
		}
	}
	return checkUniqueInRequest(r.Components, "rack.components")
}

func rackFromRow(r dbsqlc.Rack) Rack {
	return Rack{
		ID:           r.ID,
		Name:         r.Name,
		Manufacturer: r.Manufacturer,
		SerialNumber: r.SerialNumber,
		Model:        r.Model,
		Description:  r.Description,
		Location: Location{
			Region:     r.LocationRegion,
			Datacenter: r.LocationDatacenter,
			Room:       r.LocationRoom,
			Position:   r.LocationPosition,
		},
		ExternalID:  deref(r.ExternalID),
		NVLDomainID: r.NVLDomainID,
		Health:      jsonOrNil(r.Health),
		ProfileID:   deref(r.RackProfileID),
		PowerFeed:   deref(r.PowerFeed),
		CoolantLoop: deref(r.CoolantLoop),
		CreatedAt:   r.CreatedAt,
		UpdatedAt:   r.UpdatedAt,
		DeletedAt:   r.DeletedAt,
	}
}

// jsonOrNil returns a json column's value, nil for SQL NULL and for JSON
// null (how the sync clears a report).
func jsonOrNil(b []byte) []byte {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return b
}

// fillDomainExternalIDs sets the external ID of the domain of each of n
// items (domain(i) is item i's domain, nil for none; set stores the ID), in
// one query for all of them, none when no item has a domain. Domains
// without an external ID leave their items alone.
func (s *Service) fillDomainExternalIDs(ctx context.Context, dbtx db.DBTX, n int, domain func(int) *uuid.UUID, set func(int, string)) error {
	var want []uuid.UUID
	seen := map[uuid.UUID]bool{}
	for i := range n {
		if id := domain(i); id != nil && !seen[*id] {
			seen[*id] = true
			want = append(want, *id)
		}
	}
	if len(want) == 0 {
		return nil
	}
	rows, err := s.q.NVLDomainExternalIDs(ctx, dbtx, want)
	if err != nil {
		return fmt.Errorf("nvl domain external ids: %w", err)
	}
	ext := make(map[uuid.UUID]string, len(rows))
	for _, r := range rows {
		ext[r.ID] = r.ExternalID
	}
	for i := range n {
		if id := domain(i); id != nil && ext[*id] != "" {
			set(i, ext[*id])
		}
	}
	return nil
}
