package inventory

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// insertComponents inserts validated components (IDs set) and their BMCs
// with COPY, after checking serials and MACs against the database so the
// error names the culprit.
func (s *Service) insertComponents(ctx context.Context, tx pgx.Tx, comps []Component, field string) error {
	if len(comps) == 0 {
		return nil
	}
	serials := make([]string, 0, len(comps))
	var macs []string
	for _, c := range comps {
		serials = append(serials, c.SerialNumber)
		for _, b := range c.BMCs {
			macs = append(macs, string(b.MAC))
		}
	}
	existing, err := s.q.ComponentListBySerials(ctx, tx, serials)
	if err != nil {
		return fmt.Errorf("list components by serial: %w", err)
	}
	for _, e := range existing {
		for i, c := range comps {
			if c.SerialNumber == e.SerialNumber && strings.EqualFold(c.Manufacturer, e.Manufacturer) {
				note := ""
				if e.DeletedAt != nil {
					note = " (soft-deleted; purge it to reuse the serial)"
				}
				return fmt.Errorf("%w: %s[%d]: %s/%s is component %s%s", ErrComponentExists, field, i, c.Manufacturer, c.SerialNumber, e.ID, note)
			}
		}
	}
	if len(macs) > 0 {
		taken, err := s.q.BMCListByMACs(ctx, tx, macs)
		if err != nil {
			return fmt.Errorf("list bmcs by mac: %w", err)
		}
		if len(taken) > 0 {
			return fmt.Errorf("%w: %s belongs to component %s", ErrBMCExists, taken[0].MACAddress, taken[0].ComponentID)
		}
	}
	rows := make([]dbsqlc.ComponentInsertParams, 0, len(comps))
	var bmcs []dbsqlc.BMCInsertParams
	for _, c := range comps {
		rows = append(rows, dbsqlc.ComponentInsertParams{
			ID:              c.ID,
			RackID:          c.RackID,
			Type:            string(c.Type),
			Name:            c.Name,
			Manufacturer:    c.Manufacturer,
			SerialNumber:    c.SerialNumber,
			Model:           c.Model,
			Description:     c.Description,
			FirmwareVersion: c.FirmwareVersion,
			SlotID:          c.Position.SlotID,
			TrayIdx:         c.Position.TrayIdx,
			HostID:          c.Position.HostID,
			ExternalID:      nonEmpty(c.ExternalID),
		})
		for _, b := range c.BMCs {
			bmcs = append(bmcs, dbsqlc.BMCInsertParams{MACAddress: string(b.MAC), ComponentID: c.ID, Type: string(b.Type), IPAddress: b.IP})
		}
	}
	if _, err := s.q.ComponentInsert(ctx, tx, rows); err != nil {
		switch {
		case db.IsUniqueViolation(err, "component_pkey"):
			return fmt.Errorf("%w: %s: component id already used", ErrComponentExists, field)
		case db.IsUniqueViolation(err, "component_serial_key"):
			return fmt.Errorf("%w: %s: serial number already used", ErrComponentExists, field)
		case db.IsForeignKeyViolation(err, ""):
			return fmt.Errorf("%w: %s: rack_id", ErrRackNotFound, field)
		}
		return fmt.Errorf("insert components: %w", err)
	}
	if len(bmcs) > 0 {
		if _, err := s.q.BMCInsert(ctx, tx, bmcs); err != nil {
			if db.IsUniqueViolation(err, "bmc_pkey") {
				return fmt.Errorf("%w: %s: a bmc mac address is already used", ErrBMCExists, field)
			}
			return fmt.Errorf("insert bmcs: %w", err)
		}
	}
	return nil
}

// AddComponent stores one component with its BMCs, in the live rack
// c.RackID or rack-less when RackID is nil, and returns it as stored. It
// writes only through tx.
// Errors: *FieldError, ErrRackNotFound, ErrComponentExists, ErrBMCExists.
func (s *Service) AddComponent(ctx context.Context, tx pgx.Tx, c Component) (Component, error) {
	if err := validateNewComponent(&c, "component"); err != nil {
		return Component{}, err
	}
	if err := checkUniqueInRequest([]Component{c}, "component"); err != nil {
		return Component{}, err
	}
	if c.ID == uuid.Nil {
		c.ID = uuid.New()
	}
	if c.RackID != nil {
		if _, err := s.q.RackGetByIDForUpdate(ctx, tx, *c.RackID); errors.Is(err, pgx.ErrNoRows) {
			return Component{}, fmt.Errorf("%w: component.rack_id %s", ErrRackNotFound, *c.RackID)
		} else if err != nil {
			return Component{}, fmt.Errorf("get rack: %w", err)
		}
		if err := s.checkRoom(ctx, tx, *c.RackID, "component.rack_id"); err != nil {
			return Component{}, err
		}
	}
	if err := s.insertComponents(ctx, tx, []Component{c}, "component"); err != nil {
		return Component{}, err
	}
	return s.Component(ctx, tx, c.ID)
}

// ComponentPatch is a partial update of one component. Nil fields are left
// alone. Position replaces the coordinates named in PositionFields, or all
// three when PositionFields is nil. BMCs are matched by MAC: known ones get
// the given type and IP (when set), unknown ones are created.
type ComponentPatch struct {
	ID              uuid.UUID
	FirmwareVersion *string
	Position        *Position
	// PositionFields lists the coordinates to change: "slot_id",
	// "tray_idx", "host_id". Nil means all three.
	PositionFields []string
	Description    *string
	RackID         *uuid.UUID
	BMCs           []BMC
}

// PatchComponent applies p to the live component p.ID and returns it as
// stored. It writes only through tx.
// Errors: *FieldError, ErrComponentNotFound, ErrRackNotFound (RackID),
// ErrBMCExists (a MAC of another component).
func (s *Service) PatchComponent(ctx context.Context, tx pgx.Tx, p ComponentPatch) (Component, error) {
	for i := range p.BMCs {
		if err := validateBMC(&p.BMCs[i], fmt.Sprintf("bmcs[%d]", i)); err != nil {
			return Component{}, err
		}
	}
	c, _, err := s.patchComponent(ctx, tx, p)
	return c, err
}

func (s *Service) patchComponent(ctx context.Context, tx pgx.Tx, p ComponentPatch) (Component, []string, error) {
	cur, err := s.Component(ctx, tx, p.ID)
	if err != nil {
		return Component{}, nil, err
	}
	next := cur
	var changed []string
	if p.FirmwareVersion != nil && *p.FirmwareVersion != cur.FirmwareVersion {
		next.FirmwareVersion = *p.FirmwareVersion
		changed = append(changed, "firmware_version")
	}
	if p.Description != nil && (cur.Description == nil || *cur.Description != *p.Description) {
		next.Description = p.Description
		changed = append(changed, "description")
	}
	if p.Position != nil {
		fields := p.PositionFields
		if fields == nil {
			fields = []string{"slot_id", "tray_idx", "host_id"}
		}
		for _, f := range fields {
			switch f {
			case "slot_id":
				next.Position.SlotID = p.Position.SlotID
			case "tray_idx":
				next.Position.TrayIdx = p.Position.TrayIdx
			case "host_id":
				next.Position.HostID = p.Position.HostID
			default:
				return Component{}, nil, invalid("update_mask", "unknown path %q", "position."+f)
			}
		}
		if next.Position != cur.Position {
			changed = append(changed, "position")
		}
	}
	if p.RackID != nil && (cur.RackID == nil || *cur.RackID != *p.RackID) {
		if _, err := s.q.RackGetByIDForUpdate(ctx, tx, *p.RackID); errors.Is(err, pgx.ErrNoRows) {
			return Component{}, nil, fmt.Errorf("%w: rack_id %s", ErrRackNotFound, *p.RackID)
		} else if err != nil {
			return Component{}, nil, fmt.Errorf("get rack: %w", err)
		}
		if err := s.checkRoom(ctx, tx, *p.RackID, "rack_id"); err != nil {
			return Component{}, nil, err
		}
		next.RackID = p.RackID
		changed = append(changed, "rack_id")
	}
	if len(changed) > 0 {
		err := s.q.ComponentUpdate(ctx, tx, dbsqlc.ComponentUpdateParams{
			ID:              cur.ID,
			RackID:          next.RackID,
			FirmwareVersion: next.FirmwareVersion,
			Description:     next.Description,
			SlotID:          next.Position.SlotID,
			TrayIdx:         next.Position.TrayIdx,
			HostID:          next.Position.HostID,
		})
		if err != nil {
			return Component{}, nil, fmt.Errorf("update component %s: %w", cur.ID, err)
		}
	}
	seen := map[MAC]bool{}
	var fresh []dbsqlc.BMCInsertParams
	for i, b := range p.BMCs {
		if seen[b.MAC] {
			return Component{}, nil, invalid(fmt.Sprintf("bmcs[%d].mac_address", i), "duplicate MAC %s in request", b.MAC)
		}
		seen[b.MAC] = true
		row, err := s.q.BMCGetByMAC(ctx, tx, string(b.MAC))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			fresh = append(fresh, dbsqlc.BMCInsertParams{MACAddress: string(b.MAC), ComponentID: cur.ID, Type: string(b.Type), IPAddress: b.IP})
			changed = append(changed, "bmc "+string(b.MAC)+" added")
		case err != nil:
			return Component{}, nil, fmt.Errorf("get bmc: %w", err)
		case row.ComponentID != cur.ID:
			return Component{}, nil, fmt.Errorf("%w: %s belongs to component %s", ErrBMCExists, b.MAC, row.ComponentID)
		default:
			ip := row.IPAddress
			if b.IP != nil {
				ip = b.IP
			}
			if row.Type != string(b.Type) || !equalPtr(ip, row.IPAddress) {
				if err := s.q.BMCUpdate(ctx, tx, dbsqlc.BMCUpdateParams{MACAddress: row.MACAddress, Type: string(b.Type), IPAddress: ip}); err != nil {
					return Component{}, nil, fmt.Errorf("update bmc: %w", err)
				}
				changed = append(changed, "bmc "+string(b.MAC))
			}
		}
	}
	if len(fresh) > 0 {
		if _, err := s.q.BMCInsert(ctx, tx, fresh); err != nil {
			return Component{}, nil, fmt.Errorf("insert bmcs: %w", err)
		}
	}
	if len(changed) == 0 {
		return cur, nil, nil
	}
	out, err := s.Component(ctx, tx, cur.ID)
	return out, changed, err
}

// DeleteComponent soft-deletes the live component id. It writes only
// through tx. Errors: ErrComponentNotFound.
func (s *Service) DeleteComponent(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	n, err := s.q.ComponentSoftDelete(ctx, tx, id)
	if err != nil {
		return fmt.Errorf("delete component %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrComponentNotFound, id)
	}
	return nil
}

// PurgeComponent permanently removes the soft-deleted component id and its
// BMCs. It writes only through tx.
// Errors: ErrComponentNotFound, ErrNotDeleted when it is still live.
func (s *Service) PurgeComponent(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	row, err := s.q.ComponentGetByIDWithDeleted(ctx, tx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", ErrComponentNotFound, id)
	} else if err != nil {
		return fmt.Errorf("get component %s: %w", id, err)
	}
	if row.DeletedAt == nil {
		return fmt.Errorf("%w: component %s", ErrNotDeleted, id)
	}
	if _, err := s.q.ComponentPurge(ctx, tx, id); err != nil {
		return fmt.Errorf("purge component %s: %w", id, err)
	}
	return nil
}

func validateNewComponent(c *Component, field string) error {
	if !c.Type.Valid() {
		return invalid(field+".type", "must be a known component type")
	}
	if c.SerialNumber == "" {
		return invalid(field+".info.serial_number", "must not be empty")
	}
	for j := range c.BMCs {
		if err := validateBMC(&c.BMCs[j], fmt.Sprintf("%s.bmcs[%d]", field, j)); err != nil {
			return err
		}
	}
	return nil
}

// checkUniqueInRequest rejects two components with one serial, or one MAC
// used twice, inside a single request.
func checkUniqueInRequest(comps []Component, field string) error {
	serials := map[string]int{}
	macs := map[MAC]string{}
	for i, c := range comps {
		key := strings.ToLower(c.Manufacturer) + "\x00" + c.SerialNumber
		if j, ok := serials[key]; ok {
			return invalid(fmt.Sprintf("%s[%d].info.serial_number", field, i), "duplicates %s[%d]", field, j)
		}
		serials[key] = i
		for k, b := range c.BMCs {
			f := fmt.Sprintf("%s[%d].bmcs[%d].mac_address", field, i, k)
			if prev, ok := macs[b.MAC]; ok {
				return invalid(f, "MAC %s also used by %s", b.MAC, prev)
			}
			macs[b.MAC] = f
		}
	}
	return nil
}
