package inventory

import (
	"cmp"
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

// ResolveRack returns the live rack named by ref (exactly one of UUID, name
// or external ID), without components or task stats (the resolvers serve
// operations, which never show them; reading them cost a query per call).
//
// Errors (the message names the identifier): *FieldError when ref is empty
// or sets more than one identifier; ErrRackNotFound; ErrAmbiguous when a
// name matches several racks.
//
//	rack, err := svc.ResolveRack(ctx, tx, inventory.RackRef{Name: "g10"})
func (s *Service) ResolveRack(ctx context.Context, dbtx db.DBTX, ref RackRef) (Rack, error) {
	return s.resolveRack(ctx, dbtx, ref, "rack")
}

func (s *Service) resolveRack(ctx context.Context, dbtx db.DBTX, ref RackRef, field string) (Rack, error) {
	return s.resolveRackIn(ctx, dbtx, ref, field, nil)
}

// resolveRackIn is resolveRack with the live racks of some names read
// already (byName, by RackListByNames: a name it holds no entry for is read
// as resolveRack would).
func (s *Service) resolveRackIn(ctx context.Context, dbtx db.DBTX, ref RackRef, field string, byName map[string][]dbsqlc.Rack) (Rack, error) {
	n := 0
	for _, set := range []bool{ref.ID != uuid.Nil, ref.Name != "", ref.ExternalID != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return Rack{}, invalid(field, "give exactly one of id, name or external id")
	}
	var row dbsqlc.Rack
	var err error
	switch {
	case ref.ID != uuid.Nil:
		row, err = s.q.RackGetByID(ctx, dbtx, ref.ID)
	case ref.ExternalID != "":
		row, err = s.q.RackGetByExternalID(ctx, dbtx, &ref.ExternalID)
	default:
		rows, ok := byName[ref.Name]
		var lerr error
		if !ok {
			rows, lerr = s.q.RackListByName(ctx, dbtx, ref.Name)
		}
		switch {
		case lerr != nil:
			err = lerr
		case len(rows) == 0:
			err = pgx.ErrNoRows
		case len(rows) > 1:
			return Rack{}, fmt.Errorf("%w: %s matches several racks; use the rack id", ErrAmbiguous, ref)
		default:
			row = rows[0]
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Rack{}, fmt.Errorf("%w: %s", ErrRackNotFound, ref)
	} else if err != nil {
		return Rack{}, fmt.Errorf("resolve %s: %w", ref, err)
	}
	return rackFromRow(row), nil
}

// ResolveComponent returns the live component named by ref, with its BMCs.
// An external reference matches Component.ExternalID and, when the ID
// parses as a MAC address, the normalised BMC MACs; ExternalType narrows
// the match to one type.
//
// Errors (the message names the identifier): *FieldError when ref is empty
// or sets both forms; ErrComponentNotFound; ErrAmbiguous when the external
// reference matches several components.
func (s *Service) ResolveComponent(ctx context.Context, dbtx db.DBTX, ref ComponentRef) (Component, error) {
	return s.resolveComponent(ctx, dbtx, ref, "component")
}

func (s *Service) resolveComponent(ctx context.Context, dbtx db.DBTX, ref ComponentRef, field string) (Component, error) {
	return s.resolveComponentIn(ctx, dbtx, ref, field, nil)
}

// resolveComponentIn is resolveComponent with the components of refs by ID
// read beforehand (componentsByID; nil: none were).
func (s *Service) resolveComponentIn(ctx context.Context, dbtx db.DBTX, ref ComponentRef, field string, byID map[uuid.UUID]Component) (Component, error) {
	if (ref.ID != uuid.Nil) == (ref.ExternalID != "") {
		return Component{}, invalid(field, "give exactly one of id or external id")
	}
	if ref.ExternalType != "" && !ref.ExternalType.Valid() {
		return Component{}, invalid(field+".type", "unknown component type %q", ref.ExternalType)
	}
	if ref.ID != uuid.Nil && byID != nil {
		c, ok := byID[ref.ID]
		if !ok {
			return Component{}, fmt.Errorf("%w: %s", ErrComponentNotFound, ref.ID)
		}
		return c, nil
	}
	if ref.ID != uuid.Nil {
		return s.Component(ctx, dbtx, ref.ID)
	}
	mac := ""
	if m, err := ParseMAC(ref.ExternalID); err == nil {
		mac = string(m)
	}
	rows, err := s.q.ComponentListByExternalID(ctx, dbtx, dbsqlc.ComponentListByExternalIDParams{
		Type:       string(ref.ExternalType),
		ExternalID: &ref.ExternalID,
		MACAddress: mac,
	})
	if err != nil {
		return Component{}, fmt.Errorf("resolve %s: %w", ref, err)
	}
	switch len(rows) {
	case 0:
		return Component{}, fmt.Errorf("%w: %s not found", ErrComponentNotFound, ref)
	case 1:
		return s.oneComponent(ctx, dbtx, componentFromRow(rows[0].Component, rows[0].RackNVLDomainID, rows[0].RackExternalID))
	}
	return Component{}, fmt.Errorf("%w: %s is ambiguous", ErrAmbiguous, ref)
}

// componentsByID reads, with their BMCs, the live components that refs
// name by ID, in three statements whatever their number (a leak
// response's spec names a tray and every component below it); nil when
// fewer than two refs name one (resolveComponent reads a lone one). A
// component missing here is missing from the map.
func (s *Service) componentsByID(ctx context.Context, dbtx db.DBTX, refs []ComponentRef) (map[uuid.UUID]Component, error) {
	var ids []uuid.UUID
	for _, ref := range refs {
		if ref.ID != uuid.Nil && ref.ExternalID == "" {
			ids = append(ids, ref.ID)
		}
	}
	if len(ids) < 2 {
		return nil, nil
	}
	rows, err := s.q.ComponentGetByIDs(ctx, dbtx, ids)
	if err != nil {
		return nil, fmt.Errorf("get components: %w", err)
	}
	comps := make([]Component, len(rows))
	for i, row := range rows {
		comps[i] = componentFromRow(row.Component, row.RackNVLDomainID, row.RackExternalID)
	}
	if err := s.completeComponents(ctx, dbtx, comps); err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]Component, len(comps))
	for _, c := range comps {
		out[c.ID] = c
	}
	return out, nil
}

// ResolveTargets resolves spec (spec/execution.md §3) to one Selection per
// rack, ordered by rack name then UUID. Rack targets and domain targets
// (expanded to the domain's current racks) keep their type filter; the same
// rack named twice gets the union of its filters (an unfiltered target wins).
// Component targets are grouped by their rack. Racks and components of
// rack targets come without task stats, as from ResolveRack.
//
// Errors: *FieldError when spec does not set exactly one kind, a target is
// malformed or a type is unknown; ErrRackNotFound, ErrComponentNotFound,
// ErrNVLDomainNotFound, ErrAmbiguous as the single resolvers; ErrNoRack for
// a rack-less component; ErrRackNotFound "no racks" when nothing resolves
// (an empty domain, say).
func (s *Service) ResolveTargets(ctx context.Context, dbtx db.DBTX, spec TargetSpec) ([]Selection, error) {
	sels, errs := s.ResolveTargetsMany(ctx, dbtx, []TargetSpec{spec})
	return sels[0], errs[0]
}

// ResolveTargetsMany resolves each of specs as ResolveTargets would, with
// the components of all their rack and domain targets read together (one
// listing for a burst of submissions, not one per request). The i-th
// selections and error are specs[i]'s. A database failure is every spec's
// error, the others are the one spec's.
func (s *Service) ResolveTargetsMany(ctx context.Context, dbtx db.DBTX, specs []TargetSpec) ([][]Selection, []error) {
	sels, errs := make([][]Selection, len(specs)), make([]error, len(specs))
	scopes := make([]scope, len(specs))
	byName, err := s.racksByName(ctx, dbtx, specs)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return sels, errs
	}
	var racks []Rack
	listed := map[uuid.UUID]bool{}
	for i, spec := range specs {
		sc, err := s.resolveScope(ctx, dbtx, spec, "target_spec", byName)
		if err != nil {
			errs[i] = err
			continue
		}
		scopes[i] = sc
		if len(sc.comps) > 0 {
			for _, c := range sc.comps {
				if c.RackID == nil {
					errs[i] = fmt.Errorf("%w: component %s", ErrNoRack, c.ID)
					break
				}
			}
			continue
		}
		for _, r := range sc.racks {
			if !listed[r.rack.ID] {
				listed[r.rack.ID] = true
				racks = append(racks, r.rack)
			}
		}
	}
	byRack := map[uuid.UUID][]Component{}
	if len(racks) > 0 {
		comps, err := s.componentsOfRacks(ctx, dbtx, racks, false)
		if err != nil {
			for i := range errs {
				errs[i] = cmp.Or(errs[i], err)
			}
			return sels, errs
		}
		for _, c := range comps {
			byRack[*c.RackID] = append(byRack[*c.RackID], c)
		}
	}
	for i := range specs {
		if errs[i] != nil {
			continue
		}
		sels[i], errs[i] = s.selections(ctx, dbtx, scopes[i], byRack)
	}
	return sels, errs
}

// ResolveInventory returns every live rack with its live components of
// types (every component when types is empty): the scope ResolveTargets
// resolves for a spec naming each live rack by ID with that type filter,
// with only what planning over it uses. Racks carry their name and
// location, components their ID and type (no BMCs, task stats or phases);
// racks come ordered by name then UUID, a rack's components by name then
// UUID, and a rack without matching components has none. Two queries
// whatever the number of racks (ResolveTargets reads each rack of such a
// spec on its own, and every component with its BMCs). No live rack: nil.
//
// Errors: *FieldError for an unknown type when there is a rack to filter,
// named as ResolveTargets names it
// (target_spec.racks.targets[0].component_types[i]).
func (s *Service) ResolveInventory(ctx context.Context, dbtx db.DBTX, types []ComponentType) ([]ScopeRack, error) {
	rows, err := s.q.RackListScope(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list racks: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	typeNames := make([]string, len(types))
	for i, t := range types {
		if !t.Valid() {
			return nil, invalid(fmt.Sprintf("target_spec.racks.targets[0].component_types[%d]", i), "unknown component type")
		}
		typeNames[i] = string(t)
	}
	racks := make([]ScopeRack, len(rows))
	for i, r := range rows {
		racks[i] = ScopeRack{ID: r.ID, Name: r.Name, Location: Location{
			Region: r.LocationRegion, Datacenter: r.LocationDatacenter, Room: r.LocationRoom, Position: r.LocationPosition,
		}}
	}
	// The orders of ResolveTargets (selections): names compared bytewise,
	// not in the database's collation, then UUIDs.
	slices.SortFunc(racks, func(a, b ScopeRack) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), slices.Compare(a.ID[:], b.ID[:]))
	})
	ids := make([]uuid.UUID, len(racks))
	index := make(map[uuid.UUID]int, len(racks))
	for i, r := range racks {
		ids[i] = r.ID
		index[r.ID] = i
	}
	comps, err := s.q.ComponentListScope(ctx, dbtx, dbsqlc.ComponentListScopeParams{RackIDs: ids, Types: typeNames})
	if err != nil {
		return nil, fmt.Errorf("list components of racks: %w", err)
	}
	// Place the components rack by rack in one slab (a counting sort by
	// rack), then sort each rack's run.
	start := make([]int, len(racks)+1)
	for _, c := range comps {
		start[index[c.RackID]+1]++
	}
	for i := range racks {
		start[i+1] += start[i]
	}
	type named struct {
		c    ScopeComponent
		name string
	}
	placed := make([]named, len(comps))
	next := slices.Clone(start[:len(racks)])
	for _, c := range comps {
		i := index[c.RackID]
		placed[next[i]] = named{ScopeComponent{ID: c.ID, Type: ComponentType(c.Type)}, c.Name}
		next[i]++
	}
	slab := make([]ScopeComponent, len(comps))
	for i := range racks {
		run := placed[start[i]:start[i+1]]
		if len(run) == 0 {
			continue
		}
		slices.SortFunc(run, func(a, b named) int {
			return cmp.Or(strings.Compare(a.name, b.name), slices.Compare(a.c.ID[:], b.c.ID[:]))
		})
		for k, n := range run {
			slab[start[i]+k] = n.c
		}
		racks[i].Components = slab[start[i]:start[i+1]:start[i+1]]
	}
	return racks, nil
}

// racksByName reads, in one query, the live racks of every rack name specs
// target, when they name more than one (nil otherwise).
func (s *Service) racksByName(ctx context.Context, dbtx db.DBTX, specs []TargetSpec) (map[string][]dbsqlc.Rack, error) {
	var names []string
	for _, spec := range specs {
		for _, t := range spec.Racks {
			if t.Rack.Name != "" && t.Rack.ID == uuid.Nil && t.Rack.ExternalID == "" {
				names = append(names, t.Rack.Name)
			}
		}
	}
	if len(names) < 2 {
		return nil, nil
	}
	rows, err := s.q.RackListByNames(ctx, dbtx, names)
	if err != nil {
		return nil, fmt.Errorf("resolve racks by name: %w", err)
	}
	byName := make(map[string][]dbsqlc.Rack, len(names))
	for _, n := range names {
		byName[n] = nil
	}
	for _, r := range rows {
		if len(byName[r.Name]) < 2 {
			byName[r.Name] = append(byName[r.Name], r)
		}
	}
	return byName, nil
}

// selections assembles a resolved scope's selections: component targets
// grouped by rack, or the racks' components (from byRack) through their
// type filters.
func (s *Service) selections(ctx context.Context, dbtx db.DBTX, sc scope, byRack map[uuid.UUID][]Component) ([]Selection, error) {
	var out []Selection
	if len(sc.comps) > 0 {
		index := map[uuid.UUID]int{}
		for _, c := range sc.comps {
			i, ok := index[*c.RackID]
			if !ok {
				r, err := s.resolveRack(ctx, dbtx, RackRef{ID: *c.RackID}, "")
				if err != nil {
					return nil, err
				}
				out = append(out, Selection{Rack: r})
				i = len(out) - 1
				index[*c.RackID] = i
			}
			out[i].Components = append(out[i].Components, c)
		}
	} else {
		for _, r := range sc.racks {
			sel := Selection{Rack: r.rack, Types: r.types}
			for _, c := range byRack[r.rack.ID] {
				if sel.Types == nil || slices.Contains(sel.Types, c.Type) {
					sel.Components = append(sel.Components, c)
				}
			}
			out = append(out, sel)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no racks found for the target spec", ErrRackNotFound)
	}
	slices.SortFunc(out, func(a, b Selection) int {
		if a.Rack.Name != b.Rack.Name {
			if a.Rack.Name < b.Rack.Name {
				return -1
			}
			return 1
		}
		return slices.Compare(a.Rack.ID[:], b.Rack.ID[:])
	})
	for i := range out {
		slices.SortStableFunc(out[i].Components, func(a, b Component) int {
			if a.Name != b.Name {
				if a.Name < b.Name {
					return -1
				}
				return 1
			}
			return slices.Compare(a.ID[:], b.ID[:])
		})
	}
	return out, nil
}

// scope is a resolved TargetSpec before components are loaded.
type scope struct {
	racks        []scopeRack // rack and domain targets, one per rack
	comps        []Component // component targets
	componentIDs []uuid.UUID
}

type scopeRack struct {
	rack  Rack
	types []ComponentType // nil: every component
}

func (s *Service) resolveScope(ctx context.Context, dbtx db.DBTX, spec TargetSpec, field string, byName map[string][]dbsqlc.Rack) (scope, error) {
	kinds := 0
	for _, n := range []int{len(spec.Racks), len(spec.NVLDomains), len(spec.Components)} {
		if n > 0 {
			kinds++
		}
	}
	if kinds != 1 {
		return scope{}, invalid(field, "must have exactly one of racks, nvl_domains, or components set")
	}
	var sc scope
	index := map[uuid.UUID]int{}
	add := func(r Rack, types []ComponentType) {
		i, ok := index[r.ID]
		if !ok {
			sc.racks = append(sc.racks, scopeRack{rack: r, types: types})
			index[r.ID] = len(sc.racks) - 1
			return
		}
		cur := &sc.racks[i]
		if cur.types == nil || types == nil {
			cur.types = nil
			return
		}
		for _, t := range types {
			if !slices.Contains(cur.types, t) {
				cur.types = append(cur.types, t)
			}
		}
	}
	checkTypes := func(types []ComponentType, f string) ([]ComponentType, error) {
		if len(types) == 0 {
			return nil, nil
		}
		for i, t := range types {
			if !t.Valid() {
				return nil, invalid(fmt.Sprintf("%s.component_types[%d]", f, i), "unknown component type")
			}
		}
		return slices.Clone(types), nil
	}
	for i, t := range spec.Racks {
		f := fmt.Sprintf("%s.racks.targets[%d]", field, i)
		types, err := checkTypes(t.Types, f)
		if err != nil {
			return scope{}, err
		}
		r, err := s.resolveRackIn(ctx, dbtx, t.Rack, f, byName)
		if err != nil {
			return scope{}, err
		}
		add(r, types)
	}
	for i, t := range spec.NVLDomains {
		f := fmt.Sprintf("%s.nvl_domains.targets[%d]", field, i)
		types, err := checkTypes(t.Types, f)
		if err != nil {
			return scope{}, err
		}
		if t.Domain == (NVLDomainRef{}) {
			return scope{}, invalid(f, "give id, name or external_id")
		}
		racks, err := s.RacksForNVLDomain(ctx, dbtx, t.Domain, false)
		if err != nil {
			return scope{}, err
		}
		for _, r := range racks {
			add(r, types)
		}
	}
	byID, err := s.componentsByID(ctx, dbtx, spec.Components)
	if err != nil {
		return scope{}, err
	}
	seen := map[uuid.UUID]bool{}
	for i, ref := range spec.Components {
		c, err := s.resolveComponentIn(ctx, dbtx, ref, fmt.Sprintf("%s.components.targets[%d]", field, i), byID)
		if err != nil {
			return scope{}, err
		}
		if seen[c.ID] {
			continue
		}
		seen[c.ID] = true
		sc.comps = append(sc.comps, c)
		sc.componentIDs = append(sc.componentIDs, c.ID)
	}
	return sc, nil
}
