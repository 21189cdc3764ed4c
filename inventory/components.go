package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// componentsOfRacks returns the live components of racks with their BMCs
// and, when stats, their task stats, grouped by rack in the order of racks,
// each group ordered by name then UUID.
func (s *Service) componentsOfRacks(ctx context.Context, dbtx db.DBTX, racks []Rack, stats bool) ([]Component, error) {
	ids := make([]uuid.UUID, len(racks))
	rackIndex := make(map[uuid.UUID]int, len(racks))
	for i := range racks {
		ids[i] = racks[i].ID
		rackIndex[racks[i].ID] = i
	}
	// Components and then BMCs come in no particular order. Components are
	// kept in arrival order with the rack they belong to, and their BMCs
	// apart; the result is assembled from them at the end.
	sc := scratchPool.Get().(*pageScratch)
	n := 0 // components so far
	defer func() { sc.release(n) }()
	perRack := make([]int, len(racks)) // components per rack
	err := s.q.ComponentRackPageFunc(ctx, dbtx, ids, func(row *dbsqlc.ComponentPageRow) error {
		i := n
		n++
		ri := rackIndex[row.RackID]
		r := &racks[ri]
		*sc.component(i) = Component{
			ID:                  row.ID,
			RackID:              &r.ID,
			Type:                ComponentType(row.Type),
			Name:                row.Name,
			Manufacturer:        row.Manufacturer,
			SerialNumber:        row.SerialNumber,
			Model:               row.Model,
			Description:         row.Description,
			FirmwareVersion:     row.FirmwareVersion,
			Position:            Position{SlotID: row.SlotID, TrayIdx: row.TrayIdx, HostID: row.HostID},
			ExternalID:          row.ExternalID,
			NVLDomainID:         r.NVLDomainID,
			RackExternalID:      r.ExternalID,
			NVLDomainExternalID: r.NVLDomainExternalID,
			Status:              OperationStatus{Phase: row.OperationPhase, Reason: row.OperationReason, Blocked: row.BlockedOperations},
			PowerState:          row.PowerState,
			Health:              jsonOrNil(row.Health),
		}
		sc.compIndex[row.ID] = i
		sc.compRack = append(sc.compRack, ri)
		perRack[ri]++
		return nil
	}, func(row *dbsqlc.BMCPageRow) error {
		i, ok := sc.compIndex[row.ComponentID]
		if !ok {
			return nil // a deleted component's
		}
		sc.bmcs = append(sc.bmcs, BMC{Type: BMCType(row.Type), MAC: MAC(row.MACAddress), IP: row.IPAddress})
		sc.bmcOwner = append(sc.bmcOwner, i)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list components of racks: %w", err)
	}

	perComp := make([]int, n)
	for _, i := range sc.bmcOwner {
		perComp[i]++
	}
	slab := make([]BMC, 0, len(sc.bmcs))
	for i, k := range perComp {
		sc.component(i).BMCs = slab[len(slab) : len(slab) : len(slab)+k]
		slab = slab[:len(slab)+k]
	}
	for k, b := range sc.bmcs {
		c := sc.component(sc.bmcOwner[k])
		c.BMCs = append(c.BMCs, b) // within the capacity set above
	}

	// Group by rack (a counting sort, one move per component), then order
	// each rack's run.
	start := make([]int, len(racks))
	for ri := 1; ri < len(racks); ri++ {
		start[ri] = start[ri-1] + perRack[ri-1]
	}
	out := make([]Component, n)
	next := slices.Clone(start)
	for i := range n {
		ri := sc.compRack[i]
		out[next[ri]] = *sc.component(i)
		next[ri]++
	}
	for ri := range racks {
		slices.SortFunc(out[start[ri]:start[ri]+perRack[ri]], compareComponents)
	}
	sortBMCs(out)
	if stats {
		if err := s.addTaskStats(ctx, dbtx, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// pageScratch is componentsOfRacks' working memory. A page of 3,600
// components needs about 2 MB of it; reusing it through scratchPool instead
// of allocating it per page made the garbage collector run a third less
// often.
type pageScratch struct {
	// chunks hold the components in arrival order, in fixed-size chunks so
	// that growing never copies them.
	chunks    [][]Component
	compRack  []int             // index in racks of component i's rack
	compIndex map[uuid.UUID]int // component ID → i
	bmcs      []BMC             // in arrival order
	bmcOwner  []int             // i of bmcs[k]'s component
}

const scratchChunkLen = 256

var scratchPool = sync.Pool{New: func() any { return &pageScratch{compIndex: map[uuid.UUID]int{}} }}

// component returns component i, adding a chunk when i is the first past
// the end.
func (sc *pageScratch) component(i int) *Component {
	if i/scratchChunkLen == len(sc.chunks) {
		sc.chunks = append(sc.chunks, make([]Component, scratchChunkLen))
	}
	return &sc.chunks[i/scratchChunkLen][i%scratchChunkLen]
}

// release clears the first n components and the rest of sc, so that it
// keeps nothing of the page alive, and puts it back in the pool.
func (sc *pageScratch) release(n int) {
	for _, c := range sc.chunks[:(n+scratchChunkLen-1)/scratchChunkLen] {
		clear(c)
	}
	if len(sc.compIndex) > 8192 {
		// Clearing a map costs its capacity: do not keep a huge one.
		sc.compIndex = map[uuid.UUID]int{}
	} else {
		clear(sc.compIndex)
	}
	clear(sc.bmcs)
	sc.compRack, sc.bmcs, sc.bmcOwner = sc.compRack[:0], sc.bmcs[:0], sc.bmcOwner[:0]
	scratchPool.Put(sc)
}

// compareComponents orders by name, then UUID.
func compareComponents(a, b Component) int {
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return slices.Compare(a.ID[:], b.ID[:])
}

// completeComponents adds BMCs and task stats to comps in place.
func (s *Service) completeComponents(ctx context.Context, dbtx db.DBTX, comps []Component) error {
	if len(comps) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(comps))
	index := make(map[uuid.UUID]int, len(comps))
	for i, c := range comps {
		ids[i] = c.ID
		index[c.ID] = i
	}
	bmcs, err := s.q.BMCListByComponents(ctx, dbtx, ids)
	if err != nil {
		return fmt.Errorf("list bmcs: %w", err)
	}
	if err := s.fillDomainExternalIDs(ctx, dbtx, len(comps), func(i int) *uuid.UUID { return comps[i].NVLDomainID },
		func(i int, ext string) { comps[i].NVLDomainExternalID = ext }); err != nil {
		return err
	}
	return s.attachBMCsAndStats(ctx, dbtx, comps, bmcs)
}

// Component returns the live component id with its BMCs.
// Errors: ErrComponentNotFound.
func (s *Service) Component(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (Component, error) {
	row, err := s.q.ComponentGetByID(ctx, dbtx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Component{}, fmt.Errorf("%w: %s", ErrComponentNotFound, id)
	} else if err != nil {
		return Component{}, fmt.Errorf("get component %s: %w", id, err)
	}
	return s.oneComponent(ctx, dbtx, componentFromRow(row.Component, row.RackNVLDomainID, row.RackExternalID))
}

// ComponentBySerial returns the live component with this manufacturer
// (compared ignoring case) and serial number and, when withRack and the
// component is in a rack, that rack without its components (nil otherwise).
// One query reads all of it.
// Errors: *FieldError for an empty serial number, ErrComponentNotFound, and
// ErrRackNotFound when withRack and the component's rack is deleted.
func (s *Service) ComponentBySerial(ctx context.Context, dbtx db.DBTX, manufacturer, serial string, withRack bool) (Component, *Rack, error) {
	if serial == "" {
		return Component{}, nil, invalid("serial_info.serial_number", "must not be empty")
	}
	rows, err := s.q.ComponentGetBySerialWithRack(ctx, dbtx, dbsqlc.ComponentGetBySerialWithRackParams{Manufacturer: manufacturer, SerialNumber: serial})
	if err != nil {
		return Component{}, nil, fmt.Errorf("get component by serial: %w", err)
	}
	if len(rows) == 0 {
		return Component{}, nil, fmt.Errorf("%w: manufacturer %q serial %q", ErrComponentNotFound, manufacturer, serial)
	}
	return s.componentWithRack(ctx, dbtx, rows, withRack)
}

// ComponentWithRack returns the live component with this ID and, when
// withRack and the component is in a rack, that rack without its components
// (nil otherwise), read in one query as ComponentBySerial.
// Errors: ErrComponentNotFound, and ErrRackNotFound when withRack and the
// component's rack is deleted.
func (s *Service) ComponentWithRack(ctx context.Context, dbtx db.DBTX, id uuid.UUID, withRack bool) (Component, *Rack, error) {
	rows, err := s.q.ComponentGetByIDWithRack(ctx, dbtx, id)
	if err != nil {
		return Component{}, nil, fmt.Errorf("get component %s: %w", id, err)
	}
	if len(rows) == 0 {
		return Component{}, nil, fmt.Errorf("%w: %s", ErrComponentNotFound, id)
	}
	same := make([]dbsqlc.ComponentGetBySerialWithRackRow, len(rows))
	for i, row := range rows {
		same[i] = dbsqlc.ComponentGetBySerialWithRackRow(row) // the same columns
	}
	return s.componentWithRack(ctx, dbtx, same, withRack)
}

// componentWithRack builds a component (one row per BMC) and, when withRack,
// its rack from the rows of ComponentGetBySerialWithRack, with their task
// stats.
func (s *Service) componentWithRack(ctx context.Context, dbtx db.DBTX, rows []dbsqlc.ComponentGetBySerialWithRackRow, withRack bool) (Component, *Rack, error) {
	first := rows[0]
	c := componentFromRow(first.Component, first.RackNVLDomainID, first.RackExternalID)
	for _, row := range rows {
		if row.BMCMACAddress != nil {
			c.BMCs = append(c.BMCs, BMC{Type: BMCType(deref(row.BMCType)), MAC: MAC(*row.BMCMACAddress), IP: row.BMCIPAddress})
		}
	}
	ids := []uuid.UUID{c.ID}
	var rack *Rack
	if withRack && c.RackID != nil {
		if first.RackName == nil || first.RackDeletedAt != nil {
			return Component{}, nil, fmt.Errorf("%w: %s", ErrRackNotFound, *c.RackID)
		}
		rack = &Rack{
			ID:           *c.RackID,
			Name:         *first.RackName,
			Manufacturer: deref(first.RackManufacturer),
			SerialNumber: deref(first.RackSerialNumber),
			Model:        first.RackModel,
			Description:  first.RackDescription,
			Location: Location{
				Region:     deref(first.RackLocationRegion),
				Datacenter: deref(first.RackLocationDatacenter),
				Room:       deref(first.RackLocationRoom),
				Position:   deref(first.RackLocationPosition),
			},
			ExternalID:  deref(first.RackExternalID),
			NVLDomainID: first.RackNVLDomainID,
			CreatedAt:   deref(first.RackCreatedAt),
			UpdatedAt:   deref(first.RackUpdatedAt),
		}
		ids = append(ids, rack.ID)
	}
	comps := []Component{c}
	sortBMCs(comps)
	// Component and rack IDs never collide: one look-up serves both.
	stats, err := s.TaskStats(ctx, dbtx, ids)
	if err != nil {
		return Component{}, nil, err
	}
	comps[0].TaskStats = stats[c.ID]
	if err := s.addLeak(ctx, dbtx, comps); err != nil {
		return Component{}, nil, err
	}
	if rack != nil {
		rack.TaskStats = stats[rack.ID]
	}
	return comps[0], rack, nil
}

func (s *Service) oneComponent(ctx context.Context, dbtx db.DBTX, c Component) (Component, error) {
	comps := []Component{c}
	if err := s.completeComponents(ctx, dbtx, comps); err != nil {
		return Component{}, err
	}
	return comps[0], nil
}

// ComponentOrder is a component listing's sort key: "name" (default),
// "manufacturer", "model" or "type"; ties are broken by UUID ascending.
type ComponentOrder struct {
	Key  string
	Desc bool
}

// ComponentQuery selects components for ListComponents. Nil filters match
// everything; a non-nil empty Types matches nothing.
type ComponentQuery struct {
	Scope                     *TargetSpec
	Types                     []ComponentType
	Name, Manufacturer, Model *StringQuery
	Order                     ComponentOrder
	Page                      Page
}

// ListComponents returns one page of live components matching q, with their
// BMCs, and the number of matches before paging. A Scope is resolved like an
// operation's targets (ResolveTargets), except that components named one by
// one may be rack-less.
// Errors: *FieldError, and the resolver's errors for Scope.
func (s *Service) ListComponents(ctx context.Context, dbtx db.DBTX, q ComponentQuery) ([]Component, int32, error) {
	limit, err := pageLimit(q.Page, DefaultPageLimit)
	if err != nil {
		return nil, 0, err
	}
	key := cmpOr(q.Order.Key, "name")
	if !slices.Contains([]string{"name", "manufacturer", "model", "type"}, key) {
		return nil, 0, invalid("order_by.component_field", "unknown order key %q", key)
	}
	params := dbsqlc.ComponentListParams{OrderKey: key, OrderDesc: q.Order.Desc, RowOffset: q.Page.Offset, RowLimit: limit}
	if q.Scope != nil {
		sc, err := s.resolveScope(ctx, dbtx, *q.Scope, "target_spec", nil)
		if err != nil {
			return nil, 0, err
		}
		params.Scoped = true
		params.ScopeComponentIDs = sc.componentIDs
		params.ScopeRackIDs = []uuid.UUID{}
		params.ScopeRackTypes = []string{}
		for _, r := range sc.racks {
			if r.types == nil {
				params.ScopeRackIDs = append(params.ScopeRackIDs, r.rack.ID)
				continue
			}
			for _, t := range r.types {
				params.ScopeRackTypes = append(params.ScopeRackTypes, r.rack.ID.String()+"/"+string(t))
			}
		}
		if params.ScopeComponentIDs == nil {
			params.ScopeComponentIDs = []uuid.UUID{}
		}
	}
	if q.Types != nil {
		params.Types = make([]string, len(q.Types))
		for i, t := range q.Types {
			params.Types[i] = string(t)
		}
	}
	params.NamePatterns, params.NameAny = likePatterns(q.Name)
	params.ManufacturerPatterns, params.ManufacturerAny = likePatterns(q.Manufacturer)
	params.ModelPatterns, params.ModelAny = likePatterns(q.Model)
	rows, err := s.q.ComponentList(ctx, dbtx, params)
	if err != nil {
		return nil, 0, fmt.Errorf("list components: %w", err)
	}
	total, err := s.q.ComponentCount(ctx, dbtx, dbsqlc.ComponentCountParams{
		Scoped:               params.Scoped,
		ScopeComponentIDs:    params.ScopeComponentIDs,
		ScopeRackIDs:         params.ScopeRackIDs,
		ScopeRackTypes:       params.ScopeRackTypes,
		Types:                params.Types,
		NamePatterns:         params.NamePatterns,
		NameAny:              params.NameAny,
		ManufacturerPatterns: params.ManufacturerPatterns,
		ManufacturerAny:      params.ManufacturerAny,
		ModelPatterns:        params.ModelPatterns,
		ModelAny:             params.ModelAny,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("count components: %w", err)
	}
	comps := make([]Component, len(rows))
	for i, r := range rows {
		comps[i] = componentFromRow(r.Component, r.RackNVLDomainID, r.RackExternalID)
	}
	if err := s.completeComponents(ctx, dbtx, comps); err != nil {
		return nil, 0, err
	}
	return comps, int32(total), nil
}

func componentFromRow(c dbsqlc.Component, domain *uuid.UUID, rackExternalID *string) Component {
	return Component{
		ID:              c.ID,
		RackID:          c.RackID,
		Type:            ComponentType(c.Type),
		Name:            c.Name,
		Manufacturer:    c.Manufacturer,
		SerialNumber:    c.SerialNumber,
		Model:           c.Model,
		Description:     c.Description,
		FirmwareVersion: c.FirmwareVersion,
		Position:        Position{SlotID: c.SlotID, TrayIdx: c.TrayIdx, HostID: c.HostID},
		ExternalID:      deref(c.ExternalID),
		NVLDomainID:     domain,
		RackExternalID:  deref(rackExternalID),
		Status:          OperationStatus{Phase: c.OperationPhase, Reason: c.OperationReason, Blocked: c.BlockedOperations},
		PowerState:      c.PowerState,
		Health:          jsonOrNil(c.Health),
		CreatedAt:       c.CreatedAt,
		UpdatedAt:       c.UpdatedAt,
		DeletedAt:       c.DeletedAt,
	}
}

// SetOperationStatus records a component's operability status: what the
// inventory sync with NICo Core writes, and operators' tools may too. It
// writes only through tx. Errors: ErrComponentNotFound.
func (s *Service) SetOperationStatus(ctx context.Context, tx pgx.Tx, id uuid.UUID, st OperationStatus) error {
	if st.Phase == "" {
		st.Phase = "unknown"
	}
	if st.Blocked == nil {
		st.Blocked = []string{}
	}
	n, err := s.q.ComponentSetOperationStatus(ctx, tx, dbsqlc.ComponentSetOperationStatusParams{
		ID: id, OperationPhase: st.Phase, OperationReason: st.Reason, BlockedOperations: st.Blocked,
	})
	if err != nil {
		return fmt.Errorf("set operation status of %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrComponentNotFound, id)
	}
	return nil
}

// Blocking returns which live components block operation type op: among
// ids themselves, and with rackScoped also every compute tray of the racks
// that hold ids (switches and shelves wait for their rack's hosts, spec
// §8.7). An empty result means the readiness gate is open.
func (s *Service) Blocking(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID, op string, rackScoped bool) ([]uuid.UUID, error) {
	return s.q.ComponentBlocking(ctx, dbtx, dbsqlc.ComponentBlockingParams{Op: op, IDs: ids, RackScoped: rackScoped})
}

// BlockingQuery is one question of BlockingMany: Blocking's arguments.
type BlockingQuery struct {
	IDs        []uuid.UUID
	Op         string
	RackScoped bool
}

// BlockingMany answers each of qs as Blocking would, all in one round trip
// (the readiness checks of a burst's first calls).
func (s *Service) BlockingMany(ctx context.Context, sender db.BatchSender, qs []BlockingQuery) ([][]uuid.UUID, error) {
	params := make([]dbsqlc.ComponentBlockingParams, len(qs))
	for i, q := range qs {
		params[i] = dbsqlc.ComponentBlockingParams{Op: q.Op, IDs: q.IDs, RackScoped: q.RackScoped}
	}
	return s.q.ComponentBlockingBatch(ctx, sender, params)
}
