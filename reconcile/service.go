package reconcile

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
)

// Service compares Flow's inventory with the component managers'.
type Service struct {
	inv      *inventory.Service
	managers DeviceSource
	syncer   *Syncer // nil: every Validate is live
}

// WithDrift makes Validate answer from the drift the inventory sync
// persisted (unless Query.Live), and returns s.
func (s *Service) WithDrift(sy *Syncer) *Service {
	s.syncer = sy
	return s
}

// NewService returns a Service reading expectations through inv and devices
// through managers (nil: every Validate fails with ErrNotConfigured).
func NewService(inv *inventory.Service, managers DeviceSource) *Service {
	return &Service{inv: inv, managers: managers}
}

// managedTypes maps the inventory types that have component managers; the
// others (ToR switches, UMS, CDU) are not compared.
var managedTypes = map[inventory.ComponentType]backend.ComponentType{
	inventory.ComponentTypeCompute:    backend.Compute,
	inventory.ComponentTypeNVSwitch:   backend.NVSwitch,
	inventory.ComponentTypePowerShelf: backend.PowerShelf,
}

// Validate compares the expected components q selects with every device the
// managers report, and returns one page of diffs.
//
// Every live component takes part in matching, so a device that belongs to
// a component outside the selection is never "unexpected". Unexpected
// devices are reported when nothing narrows the query, or when q targets
// racks or NVLink domains and the device reports one of those racks (Core
// rack ID = the rack's external ID or UUID) and a selected type; a type
// filter keeps unexpected devices of those types; component targets and
// name, manufacturer or model filters report none (a device Flow does not
// know has no name, manufacturer or model).
//
// It reads the inventory through dbtx, then calls the backends with no
// transaction of its own. Errors: the inventory's (*inventory.FieldError,
// inventory.ErrRackNotFound…), ErrNotConfigured, and backend errors
// (backend.ErrNotConfigured when a URL variable is unset,
// backend.ErrUnreachable…).
func (s *Service) Validate(ctx context.Context, dbtx db.DBTX, q Query) (Report, error) {
	var checkedAt *time.Time
	if !q.Live && s.syncer != nil {
		run, err := s.syncer.Latest(ctx)
		switch {
		case err == nil:
			t := run.StartedAt
			checkedAt = &t
		case !errors.Is(err, ErrNoSyncYet):
			return Report{}, err
		}
	}
	if checkedAt == nil && s.managers == nil {
		return Report{}, ErrNotConfigured
	}
	all, err := s.listAll(ctx, dbtx, inventory.ComponentQuery{})
	if err != nil {
		return Report{}, err
	}
	sel := q.Selection
	narrowed := sel.Scope != nil || sel.Types != nil || sel.Name != nil || sel.Manufacturer != nil || sel.Model != nil
	var inScope map[string]bool
	keep := func(*backend.Actual) bool { return true }
	if narrowed {
		chosen, err := s.listAll(ctx, dbtx, sel)
		if err != nil {
			return Report{}, err
		}
		inScope = make(map[string]bool, len(chosen))
		for _, c := range chosen {
			inScope[c.ID.String()] = true
		}
		if keep, err = s.unexpectedFilter(ctx, dbtx, sel); err != nil {
			return Report{}, err
		}
	}

	var actual []backend.Actual
	if checkedAt != nil {
		if actual, err = s.storedActual(ctx, dbtx, all); err != nil {
			return Report{}, err
		}
	} else if actual, err = s.managers.Inventory(ctx); err != nil {
		return Report{}, err
	}

	expected := make([]backend.Expected, 0, len(all))
	byID := make(map[string]*inventory.Component, len(all))
	for i := range all {
		c := &all[i]
		t, ok := managedTypes[c.Type]
		if !ok {
			continue
		}
		byID[c.ID.String()] = c
		expected = append(expected, expectedOf(c, t))
	}
	opts := backend.ValidateOptions{Offset: q.Offset, Limit: q.Limit, OrderByType: q.OrderByType, Descending: q.Descending}
	if narrowed {
		opts.InScope = func(e *backend.Expected) bool { return inScope[e.ID] }
		opts.KeepUnexpected = keep
	}
	res := backend.Validate(expected, actual, opts)
	rep := Report{Total: res.Total, Missing: res.Missing, Unexpected: res.Unexpected, Mismatch: res.Mismatch, Match: res.Match, CheckedAt: checkedAt}
	rep.Diffs = make([]Diff, len(res.Diffs))
	for i, d := range res.Diffs {
		rep.Diffs[i] = Diff{Diff: d, Component: byID[d.ID]}
	}
	return rep, nil
}

// listAll returns every live component q selects, page by page.
func (s *Service) listAll(ctx context.Context, dbtx db.DBTX, q inventory.ComponentQuery) ([]inventory.Component, error) {
	q.Order = inventory.ComponentOrder{}
	var out []inventory.Component
	for {
		q.Page = inventory.Page{Offset: int32(len(out)), Limit: inventory.MaxPageLimit}
		page, total, err := s.inv.ListComponents(ctx, dbtx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) == 0 || len(out) >= int(total) {
			return out, nil
		}
	}
}

// unexpectedFilter says which unknown devices a narrowed query reports.
func (s *Service) unexpectedFilter(ctx context.Context, dbtx db.DBTX, sel inventory.ComponentQuery) (func(*backend.Actual) bool, error) {
	none := func(*backend.Actual) bool { return false }
	if sel.Name != nil || sel.Manufacturer != nil || sel.Model != nil {
		return none, nil
	}
	typeOK := func(t backend.ComponentType, types []inventory.ComponentType) bool {
		return types == nil || slices.ContainsFunc(types, func(it inventory.ComponentType) bool { return managedTypes[it] == t })
	}
	if sel.Scope == nil {
		return func(a *backend.Actual) bool { return typeOK(a.Type, sel.Types) }, nil
	}
	if len(sel.Scope.Components) > 0 {
		return none, nil
	}
	sels, err := s.inv.ResolveTargets(ctx, dbtx, *sel.Scope)
	if errors.Is(err, inventory.ErrRackNotFound) {
		// The scope resolved already, so this is "no racks" (an empty
		// NVLink domain): nothing can be unexpected in it.
		return none, nil
	} else if err != nil {
		return nil, err
	}
	racks := map[string][]inventory.ComponentType{} // Core rack ID → types (nil: all)
	for _, x := range sels {
		for _, key := range []string{x.Rack.ID.String(), x.Rack.ExternalID} {
			if key != "" {
				racks[key] = x.Types
			}
		}
	}
	return func(a *backend.Actual) bool {
		types, ok := racks[a.RackID]
		return ok && a.RackID != "" && typeOK(a.Type, types) && typeOK(a.Type, sel.Types)
	}, nil
}

// expectedOf is the expectation one inventory component states. The
// identity MAC is the host BMC's (the first BMC when none is marked host).
func expectedOf(c *inventory.Component, t backend.ComponentType) backend.Expected {
	e := backend.Expected{
		ID: c.ID.String(), Name: c.Name, Type: t, Serial: c.SerialNumber,
		ExternalID: c.ExternalID, FirmwareVersion: c.FirmwareVersion,
	}
	e.BMCMAC = HostMAC(*c)
	if t == backend.Compute {
		e.Position = &backend.Position{SlotID: int(c.Position.SlotID), TrayIndex: int(c.Position.TrayIdx), HostID: int(c.Position.HostID)}
	}
	return e
}

// HostMAC returns the MAC that identifies c to its manager: its host BMC's
// (PMC for shelves), or its first BMC's when none is marked host; "" when c
// has no BMC.
func HostMAC(c inventory.Component) string {
	for _, b := range c.BMCs {
		if b.Type == inventory.BMCTypeHost {
			return string(b.MAC)
		}
	}
	if len(c.BMCs) > 0 {
		return string(c.BMCs[0].MAC)
	}
	return ""
}

// storedActual is what Core reported at the last sync, rebuilt from the
// persisted drift: every component of all that is not missing, as Flow
// holds it with the drifting fields at Core's values, plus the devices
// Flow does not know.
func (s *Service) storedActual(ctx context.Context, dbtx db.DBTX, all []inventory.Component) ([]backend.Actual, error) {
	drifts, err := s.syncer.Drifts(ctx, dbtx)
	if err != nil {
		return nil, err
	}
	missing := map[string]bool{}
	fields := map[string][]backend.FieldDiff{}
	var out []backend.Actual
	for _, d := range drifts {
		switch d.Kind {
		case "missing_in_actual":
			if d.ComponentID != nil {
				missing[d.ComponentID.String()] = true
			}
		case "mismatch":
			if d.ComponentID != nil {
				fields[d.ComponentID.String()] = d.Fields
			}
		case "missing_in_expected":
			t, ok := managedTypes[d.Type]
			if !ok {
				continue
			}
			out = append(out, backend.Actual{Type: t, ExternalID: d.ExternalID, BMCMAC: d.MAC, FirmwareVersion: d.Firmware, RackID: d.RackExternalID, Serial: d.SerialNumber})
		}
	}
	for i := range all {
		c := &all[i]
		t, ok := managedTypes[c.Type]
		if !ok || missing[c.ID.String()] {
			continue
		}
		e := expectedOf(c, t)
		a := backend.Actual{Type: t, ExternalID: e.ExternalID, Name: e.Name, BMCMAC: e.BMCMAC, Serial: e.Serial, FirmwareVersion: e.FirmwareVersion}
		if e.Position != nil {
			p := *e.Position
			for _, f := range fields[c.ID.String()] {
				v, err := strconv.Atoi(f.Actual)
				if err != nil {
					continue
				}
				switch f.Field {
				case "position.slot_id":
					p.SlotID = v
				case "position.tray_idx":
					p.TrayIndex = v
				case "position.host_id":
					p.HostID = v
				}
			}
			a.Position = &p
		}
		out = append(out, a)
	}
	return out, nil
}
