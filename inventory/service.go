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

// Service holds the inventory rules and queries. It keeps no connection:
// every method runs on the db.DBTX or pgx.Tx it is given, and methods that
// write take a pgx.Tx and leave the commit to the caller.
type Service struct {
	q         *dbsqlc.Queries
	taskStats TaskStatsFunc
}

// NewService returns a Service.
func NewService() *Service {
	return &Service{q: dbsqlc.New()}
}

// TaskStatsFunc counts the unfinished tasks linked to racks and components
// (see TaskStats). The task manager provides it.
type TaskStatsFunc func(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]TaskStats, error)

// SetTaskStats installs the source of task statistics. Call it once at
// startup, before serving.
func (s *Service) SetTaskStats(fn TaskStatsFunc) { s.taskStats = fn }

// TaskStats returns, per rack or component ID, how many unfinished tasks
// (waiting, pending, running) are linked to it: for a rack every active task
// on the rack, for a component the active tasks whose scope includes it.
// ids may mix rack and component UUIDs (they never collide). IDs without
// tasks are absent from the map (their stats are zero). Without a source
// installed (SetTaskStats) the map is empty.
func (s *Service) TaskStats(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]TaskStats, error) {
	if s.taskStats == nil {
		return map[uuid.UUID]TaskStats{}, nil
	}
	return s.taskStats(ctx, dbtx, ids)
}

// ---- racks ---------------------------------------------------------------

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
	for i := range racks {
		racks[i].TaskStats = stats[racks[i].ID]
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
			ID:              row.ID,
			RackID:          &r.ID,
			Type:            ComponentType(row.Type),
			Name:            row.Name,
			Manufacturer:    row.Manufacturer,
			SerialNumber:    row.SerialNumber,
			Model:           row.Model,
			Description:     row.Description,
			FirmwareVersion: row.FirmwareVersion,
			Position:        Position{SlotID: row.SlotID, TrayIdx: row.TrayIdx, HostID: row.HostID},
			ExternalID:      row.ExternalID,
			NVLDomainID:     r.NVLDomainID,
			RackExternalID:  r.ExternalID,
			Status:          OperationStatus{Phase: row.OperationPhase, Reason: row.OperationReason, Blocked: row.BlockedOperations},
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
	return s.attachBMCsAndStats(ctx, dbtx, comps, bmcs)
}

// attachBMCsAndStats adds bmcs (of comps) and task stats to comps in place.
func (s *Service) attachBMCsAndStats(ctx context.Context, dbtx db.DBTX, comps []Component, bmcs []dbsqlc.BMC) error {
	index := make(map[uuid.UUID]int, len(comps))
	for i, c := range comps {
		index[c.ID] = i
	}
	for _, b := range bmcs {
		c := &comps[index[b.ComponentID]]
		c.BMCs = append(c.BMCs, BMC{Type: BMCType(b.Type), MAC: MAC(b.MACAddress), IP: b.IPAddress})
	}
	sortBMCs(comps)
	return s.addTaskStats(ctx, dbtx, comps)
}

// sortBMCs orders each component's BMCs: host first, then by MAC.
func sortBMCs(comps []Component) {
	for i := range comps {
		if len(comps[i].BMCs) > 1 {
			slices.SortFunc(comps[i].BMCs, func(a, b BMC) int {
				if a.Type != b.Type {
					if a.Type == BMCTypeHost {
						return -1
					}
					return 1
				}
				return strings.Compare(string(a.MAC), string(b.MAC))
			})
		}
	}
}

// addTaskStats sets the task stats of comps in place.
func (s *Service) addTaskStats(ctx context.Context, dbtx db.DBTX, comps []Component) error {
	ids := make([]uuid.UUID, len(comps))
	for i := range comps {
		ids[i] = comps[i].ID
	}
	stats, err := s.TaskStats(ctx, dbtx, ids)
	if err != nil {
		return err
	}
	for i := range comps {
		comps[i].TaskStats = stats[comps[i].ID]
	}
	return nil
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
		OrderKey: key, OrderDesc: q.Order.Desc,
		RowOffset: q.Page.Offset, RowLimit: limit,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list racks: %w", err)
	}
	total, err := s.q.RackCount(ctx, dbtx, dbsqlc.RackCountParams{
		NamePatterns: name, NameAny: nameAny,
		ManufacturerPatterns: manu, ManufacturerAny: manuAny,
		ModelPatterns: model, ModelAny: modelAny,
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

// ---- components ----------------------------------------------------------

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
		sc, err := s.resolveScope(ctx, dbtx, *q.Scope, "target_spec")
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

// ---- NVLink domains ------------------------------------------------------

// CreateNVLDomain creates a named NVLink domain (with d.ID when set) and
// returns its UUID. As upstream does, creating a domain whose ID or name
// already exists is not an error: the existing domain's UUID is returned.
// It writes only through tx. Errors: *FieldError for an empty name.
func (s *Service) CreateNVLDomain(ctx context.Context, tx pgx.Tx, d NVLDomain) (uuid.UUID, error) {
	if d.Name == "" {
		return uuid.Nil, invalid("nvl_domain.identifier.name", "must not be empty")
	}
	if d.ID != uuid.Nil {
		if cur, err := s.q.NVLDomainGetByID(ctx, tx, d.ID); err == nil {
			return cur.ID, nil
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return uuid.Nil, fmt.Errorf("get nvl domain: %w", err)
		}
	}
	if cur, err := s.q.NVLDomainGetByName(ctx, tx, &d.Name); err == nil {
		return cur.ID, nil
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, fmt.Errorf("get nvl domain: %w", err)
	}
	if d.ID == uuid.Nil {
		d.ID = uuid.New()
	}
	if err := s.q.NVLDomainInsert(ctx, tx, dbsqlc.NVLDomainInsertParams{ID: d.ID, Name: &d.Name}); err != nil {
		return uuid.Nil, fmt.Errorf("insert nvl domain: %w", err)
	}
	return d.ID, nil
}

// NVLDomain returns the domain identified by ref (UUID wins over name).
// Errors: *FieldError for an empty ref, ErrNVLDomainNotFound.
func (s *Service) NVLDomain(ctx context.Context, dbtx db.DBTX, ref NVLDomainRef) (NVLDomain, error) {
	var row dbsqlc.NVLDomain
	var err error
	switch {
	case ref.ID != uuid.Nil:
		row, err = s.q.NVLDomainGetByID(ctx, dbtx, ref.ID)
	case ref.Name != "":
		row, err = s.q.NVLDomainGetByName(ctx, dbtx, &ref.Name)
	default:
		return NVLDomain{}, invalid("nvl_domain_identifier", "give id or name")
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return NVLDomain{}, fmt.Errorf("%w: %s", ErrNVLDomainNotFound, ref)
	} else if err != nil {
		return NVLDomain{}, fmt.Errorf("get nvl domain: %w", err)
	}
	return domainFromRow(row), nil
}

// AttachRacks puts every listed rack into the domain, all or nothing. A rack
// already in this domain is left as is. It writes only through tx.
// Errors: *FieldError, ErrNVLDomainNotFound, the resolver's rack errors,
// ErrRackInOtherDomain.
func (s *Service) AttachRacks(ctx context.Context, tx pgx.Tx, domain NVLDomainRef, racks []RackRef) error {
	d, err := s.NVLDomain(ctx, tx, domain)
	if err != nil {
		return err
	}
	if len(racks) == 0 {
		return invalid("rack_identifiers", "must not be empty")
	}
	for i, ref := range racks {
		r, err := s.resolveRack(ctx, tx, ref, fmt.Sprintf("rack_identifiers[%d]", i))
		if err != nil {
			return err
		}
		if r.NVLDomainID != nil {
			if *r.NVLDomainID == d.ID {
				continue
			}
			return fmt.Errorf("%w: %s is in nvl domain %s", ErrRackInOtherDomain, ref, *r.NVLDomainID)
		}
		if err := s.q.RackSetNVLDomain(ctx, tx, dbsqlc.RackSetNVLDomainParams{ID: r.ID, NVLDomainID: &d.ID}); err != nil {
			return fmt.Errorf("attach rack %s: %w", r.ID, err)
		}
	}
	return nil
}

// DetachRacks takes every listed rack out of its NVLink domain, all or
// nothing; racks in no domain are left as they are (upstream instead stops
// silently at the first such rack). It writes only through tx.
// Errors: *FieldError and the resolver's rack errors.
func (s *Service) DetachRacks(ctx context.Context, tx pgx.Tx, racks []RackRef) error {
	if len(racks) == 0 {
		return invalid("rack_identifiers", "must not be empty")
	}
	for i, ref := range racks {
		r, err := s.resolveRack(ctx, tx, ref, fmt.Sprintf("rack_identifiers[%d]", i))
		if err != nil {
			return err
		}
		if r.NVLDomainID == nil {
			continue
		}
		if err := s.q.RackSetNVLDomain(ctx, tx, dbsqlc.RackSetNVLDomainParams{ID: r.ID}); err != nil {
			return fmt.Errorf("detach rack %s: %w", r.ID, err)
		}
	}
	return nil
}

// ListNVLDomains returns one page of domains whose names match q (nil:
// all), ordered by name then UUID, and the number of matches before paging.
// Errors: *FieldError for bad paging.
func (s *Service) ListNVLDomains(ctx context.Context, dbtx db.DBTX, q *StringQuery, page Page) ([]NVLDomain, int32, error) {
	limit, err := pageLimit(page, DefaultNVLDomainPageLimit)
	if err != nil {
		return nil, 0, err
	}
	patterns, anyOf := likePatterns(q)
	rows, err := s.q.NVLDomainList(ctx, dbtx, dbsqlc.NVLDomainListParams{NamePatterns: patterns, NameAny: anyOf, RowOffset: page.Offset, RowLimit: limit})
	if err != nil {
		return nil, 0, fmt.Errorf("list nvl domains: %w", err)
	}
	total, err := s.q.NVLDomainCount(ctx, dbtx, dbsqlc.NVLDomainCountParams{NamePatterns: patterns, NameAny: anyOf})
	if err != nil {
		return nil, 0, fmt.Errorf("count nvl domains: %w", err)
	}
	out := make([]NVLDomain, len(rows))
	for i, r := range rows {
		out[i] = domainFromRow(r)
	}
	return out, int32(total), nil
}

// RacksForNVLDomain returns the live racks in the domain, ordered by name
// then UUID. Errors: *FieldError, ErrNVLDomainNotFound.
func (s *Service) RacksForNVLDomain(ctx context.Context, dbtx db.DBTX, ref NVLDomainRef, withComponents bool) ([]Rack, error) {
	d, err := s.NVLDomain(ctx, dbtx, ref)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.RackListByNVLDomain(ctx, dbtx, &d.ID)
	if err != nil {
		return nil, fmt.Errorf("list racks of nvl domain: %w", err)
	}
	return s.completeRacks(ctx, dbtx, rows, withComponents)
}

// ---- validation and conversion -------------------------------------------

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

// validateBMC normalises b.MAC in place.
func validateBMC(b *BMC, field string) error {
	if b.Type != BMCTypeHost && b.Type != BMCTypeDPU {
		return invalid(field+".type", "must be BMC_TYPE_HOST or BMC_TYPE_DPU")
	}
	mac, err := ParseMAC(string(b.MAC))
	if err != nil {
		return invalid(field+".mac_address", "%v", err)
	}
	b.MAC = mac
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

func pageLimit(p Page, def int32) (int32, error) {
	if p.Offset < 0 {
		return 0, invalid("pagination.offset", "must not be negative")
	}
	if p.Limit < 0 {
		return 0, invalid("pagination.limit", "must not be negative")
	}
	if p.Limit > MaxPageLimit {
		return 0, invalid("pagination.limit", "must be at most %d", MaxPageLimit)
	}
	if p.Limit == 0 {
		return def, nil
	}
	return p.Limit, nil
}

// likePatterns turns a StringQuery into LIKE patterns (nil: no filter) and
// the ANY/ALL choice.
func likePatterns(q *StringQuery) ([]string, bool) {
	if q == nil || len(q.Patterns) == 0 {
		return nil, false
	}
	out := make([]string, len(q.Patterns))
	for i, p := range q.Patterns {
		if !q.Wildcard {
			out[i] = escapeLike(p)
			continue
		}
		p = strings.NewReplacer("*", "%", "?", "_").Replace(p)
		if !strings.ContainsAny(p, "%_") {
			p = "%" + escapeLike(p) + "%"
		}
		out[i] = p
	}
	return out, q.AnyOf
}

func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(s)
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
		CreatedAt:   r.CreatedAt,
		UpdatedAt:   r.UpdatedAt,
		DeletedAt:   r.DeletedAt,
	}
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
		Health:          c.Health,
		CreatedAt:       c.CreatedAt,
		UpdatedAt:       c.UpdatedAt,
		DeletedAt:       c.DeletedAt,
	}
}

func domainFromRow(r dbsqlc.NVLDomain) NVLDomain {
	return NVLDomain{ID: r.ID, Name: deref(r.Name)}
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func equalPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
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
