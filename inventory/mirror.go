package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// ExpectedRack is a rack as NICo Core expects it (GetAllExpectedRacks),
// for MirrorRacks. An empty string means Core does not say: the mirror
// keeps Flow's value (a new rack gets the defaults MirrorRacks names).
type ExpectedRack struct {
	ExternalID   string // Core rack_id: the mirrored rack's identity
	Name         string
	Manufacturer string // label chassis.manufacturer
	SerialNumber string // label chassis.serial-number
	Model        string // label chassis.model
	Description  string
	Location     Location // labels location.region|datacenter|room|position
	ProfileID    string   // rack_profile_id, copied as it is ("" clears it)
}

// ExpectedComponent is a component as NICo Core expects it
// (GetAllExpectedMachines, …Switches, …PowerShelves), for
// MirrorComponents. Empty strings and nil positions mean Core does not say:
// the mirror keeps Flow's value.
type ExpectedComponent struct {
	MAC          string // host BMC MAC (PMC MAC for shelves): the identity
	IP           string // that BMC's IP
	SerialNumber string
	Manufacturer string // label manufacturer
	Model        string // label model
	Name         string
	Description  string
	// SlotID, TrayIdx and HostID come from the labels slot_id, tray_idx
	// and host_id; nil when the label is absent or not an integer.
	SlotID, TrayIdx, HostID *int32
	// RackID is Core's rack_id: a Flow rack's external ID or, as Flow's own
	// ingestion sends it, a Flow rack's UUID. "" or a rack Flow does not
	// know leaves the component where it is (a new one gets no rack).
	RackID string
}

// MirrorResult counts what one mirror pass did.
type MirrorResult struct {
	Inserted, Updated, SoftDeleted int64
	// Adopted and Resurrected are among Updated: rows of Flow's own the
	// pass matched for the first time, and soft-deleted rows it brought
	// back.
	Adopted, Resurrected int
	// Skipped are Core rows the pass could not mirror (no identity, a
	// duplicate identity); Warnings say why.
	Skipped  int
	Warnings []string
	// Live, when the pass wrote nothing, is the type's live components as
	// SyncComponentPages returns them, read in the pass's transaction: the
	// actual sync of the type can use it instead of reading them again.
	// Nil when the pass wrote anything, when the type has more than
	// MirrorLiveMax components, or when the Service lists the type for the
	// first time (its size unknown, the pass holds only what it compares
	// of each row).
	Live []SyncComponent
}

// Changed returns the rows the pass wrote.
func (r MirrorResult) Changed() int64 { return r.Inserted + r.Updated + r.SoftDeleted }

func naturalKey(manufacturer, serial string) string {
	if manufacturer == "" || serial == "" {
		return ""
	}
	return strings.ToLower(manufacturer) + "\x00" + serial
}

type mirrorRackRow struct {
	ID                 uuid.UUID `json:"id"`
	Name               string    `json:"name"`
	Manufacturer       string    `json:"manufacturer"`
	SerialNumber       string    `json:"serial_number"`
	Model              *string   `json:"model"`
	Description        *string   `json:"description"`
	LocationRegion     string    `json:"location_region"`
	LocationDatacenter string    `json:"location_datacenter"`
	LocationRoom       string    `json:"location_room"`
	LocationPosition   string    `json:"location_position"`
	ExternalID         string    `json:"external_id"`
	RackProfileID      *string   `json:"rack_profile_id"`
}

func rackRowOf(r dbsqlc.MirrorRackListRow) mirrorRackRow {
	return mirrorRackRow{
		ID: r.ID, Name: r.Name, Manufacturer: r.Manufacturer, SerialNumber: r.SerialNumber, Model: r.Model, Description: r.Description,
		LocationRegion: r.LocationRegion, LocationDatacenter: r.LocationDatacenter, LocationRoom: r.LocationRoom, LocationPosition: r.LocationPosition,
		ExternalID: deref(r.ExternalID), RackProfileID: r.RackProfileID,
	}
}

func setIf(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

func setPtrIf(dst **string, v string) {
	if v != "" {
		*dst = &v
	}
}

func equalStrPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// MirrorRacks makes Flow's racks follow Core's expected racks, through tx
// (one transaction per pass; the caller commits). The caller passes a
// successful answer only: an empty rs is authoritative.
//
//   - Identity is the external ID (Core's rack_id); a rack Flow has but the
//     mirror never reached is adopted by manufacturer + serial number when
//     its external ID is empty or names no rack Core lists. Soft-deleted
//     rows are matched too and resurrected (UUID kept).
//   - Only mirror-managed columns are written (name, manufacturer, serial
//     number, model, description, location, external ID, rack profile), and
//     only from values Core sends; a row is written only when one differs.
//     A new rack is named after its rack ID when Core gives no name, and
//     takes its rack ID as serial number when Core gives no chassis serial
//     (Flow's identity needs one). A chassis pair another rack holds is not
//     written (the loser keeps its own).
//   - A live rack the mirror created or adopted earlier that Core no longer
//     lists is soft-deleted. Racks of Flow's own that Core never listed are
//     left alone (see docs/inventory-sync.md).
func (s *Service) MirrorRacks(ctx context.Context, tx pgx.Tx, rs []ExpectedRack) (MirrorResult, error) {
	var res MirrorResult
	rows, err := s.q.MirrorRackList(ctx, tx)
	if err != nil {
		return res, fmt.Errorf("list racks for mirror: %w", err)
	}
	byExt := make(map[string]int, len(rows))
	byKey := make(map[string]int, len(rows))
	for i, r := range rows {
		if e := deref(r.ExternalID); e != "" {
			byExt[e] = i
		}
		if k := naturalKey(r.Manufacturer, r.SerialNumber); k != "" {
			byKey[k] = i
		}
	}
	listed := make(map[string]bool, len(rs))
	for _, cr := range rs {
		if cr.ExternalID != "" {
			listed[cr.ExternalID] = true
		}
	}
	touched := make(map[uuid.UUID]bool, len(rs))
	planned := map[string]bool{} // Core rack IDs and chassis pairs taken this pass
	var inserts, updates []mirrorRackRow
	for _, cr := range rs {
		if cr.ExternalID == "" {
			res.Skipped++
			res.Warnings = append(res.Warnings, "a Core expected rack has no rack_id")
			continue
		}
		if planned["id:"+cr.ExternalID] {
			res.Skipped++
			res.Warnings = append(res.Warnings, fmt.Sprintf("Core lists rack %s twice", cr.ExternalID))
			continue
		}
		planned["id:"+cr.ExternalID] = true
		key := naturalKey(cr.Manufacturer, cr.SerialNumber)
		i, found := byExt[cr.ExternalID]
		if !found && key != "" {
			if j, ok := byKey[key]; ok && !touched[rows[j].ID] && (deref(rows[j].ExternalID) == "" || !listed[deref(rows[j].ExternalID)]) {
				i, found = j, true
			}
		}
		// The chassis pair can be written only when no other rack holds it
		// and no earlier Core rack of this pass took it.
		pairFree := key != "" && !planned["key:"+key]
		if j, ok := byKey[key]; pairFree && ok && (!found || rows[j].ID != rows[i].ID) {
			pairFree = false
		}
		if key != "" && !pairFree {
			res.Warnings = append(res.Warnings, fmt.Sprintf("rack %s: chassis %s/%s belongs to another rack; not mirrored", cr.ExternalID, cr.Manufacturer, cr.SerialNumber))
		}
		if pairFree {
			planned["key:"+key] = true
		}
		if !found {
			nr := mirrorRackRow{ID: uuid.New(), Name: cmpOr(cr.Name, cr.ExternalID), SerialNumber: cr.ExternalID, ExternalID: cr.ExternalID,
				LocationRegion: cr.Location.Region, LocationDatacenter: cr.Location.Datacenter, LocationRoom: cr.Location.Room, LocationPosition: cr.Location.Position,
				RackProfileID: nonEmpty(cr.ProfileID)}
			if pairFree {
				nr.Manufacturer, nr.SerialNumber = cr.Manufacturer, cr.SerialNumber
			}
			setPtrIf(&nr.Model, cr.Model)
			setPtrIf(&nr.Description, cr.Description)
			inserts = append(inserts, nr)
			continue
		}
		cur := rows[i]
		touched[cur.ID] = true
		old := rackRowOf(cur)
		nw := old
		nw.ExternalID = cr.ExternalID
		setIf(&nw.Name, cr.Name)
		if pairFree {
			nw.Manufacturer, nw.SerialNumber = cr.Manufacturer, cr.SerialNumber
		}
		setPtrIf(&nw.Model, cr.Model)
		setPtrIf(&nw.Description, cr.Description)
		setIf(&nw.LocationRegion, cr.Location.Region)
		setIf(&nw.LocationDatacenter, cr.Location.Datacenter)
		setIf(&nw.LocationRoom, cr.Location.Room)
		setIf(&nw.LocationPosition, cr.Location.Position)
		nw.RackProfileID = nonEmpty(cr.ProfileID)
		same := nw.Name == old.Name && nw.Manufacturer == old.Manufacturer && nw.SerialNumber == old.SerialNumber &&
			equalStrPtr(nw.Model, old.Model) && equalStrPtr(nw.Description, old.Description) &&
			nw.LocationRegion == old.LocationRegion && nw.LocationDatacenter == old.LocationDatacenter &&
			nw.LocationRoom == old.LocationRoom && nw.LocationPosition == old.LocationPosition &&
			nw.ExternalID == old.ExternalID && equalStrPtr(nw.RackProfileID, old.RackProfileID)
		if same && cur.DeletedAt == nil && cur.MirroredAt != nil {
			continue
		}
		if cur.DeletedAt != nil {
			res.Resurrected++
		}
		if cur.MirroredAt == nil {
			res.Adopted++
		}
		updates = append(updates, nw)
	}
	var gone []uuid.UUID
	for _, r := range rows {
		if r.DeletedAt == nil && r.MirroredAt != nil && !touched[r.ID] {
			gone = append(gone, r.ID)
		}
	}
	if len(updates) > 0 {
		data, err := json.Marshal(updates)
		if err != nil {
			return res, fmt.Errorf("encode rack updates: %w", err)
		}
		if res.Updated, err = s.q.MirrorRackUpdate(ctx, tx, data); err != nil {
			return res, fmt.Errorf("update mirrored racks: %w", err)
		}
	}
	if len(inserts) > 0 {
		data, err := json.Marshal(inserts)
		if err != nil {
			return res, fmt.Errorf("encode rack inserts: %w", err)
		}
		if res.Inserted, err = s.q.MirrorRackInsert(ctx, tx, data); err != nil {
			return res, fmt.Errorf("insert mirrored racks: %w", err)
		}
	}
	if len(gone) > 0 {
		if res.SoftDeleted, err = s.q.MirrorRackSoftDelete(ctx, tx, gone); err != nil {
			return res, fmt.Errorf("soft-delete racks Core no longer lists: %w", err)
		}
	}
	return res, nil
}

type mirrorComponentRow struct {
	ID           uuid.UUID  `json:"id"`
	RackID       *uuid.UUID `json:"rack_id"`
	Name         string     `json:"name"`
	Manufacturer string     `json:"manufacturer"`
	SerialNumber string     `json:"serial_number"`
	Model        *string    `json:"model"`
	Description  *string    `json:"description"`
	SlotID       int32      `json:"slot_id"`
	TrayIdx      int32      `json:"tray_idx"`
	HostID       int32      `json:"host_id"`
}

// MirrorLiveMax is the most live components of a type whose listing a
// mirror pass returns as MirrorResult.Live: at 20,000 (a 1,000-rack
// site's compute trays are 18,000) that listing is about 12 MiB; a larger
// type is held only as the mirror compares it, about a third of that a
// row (issue 29).
const MirrorLiveMax = 20000

// mirrorRow is a listed component as a mirror pass compares it.
type mirrorRow struct {
	id                 uuid.UUID
	rackID             *uuid.UUID
	name, serial       string
	manufacturer       string // shared between rows of one listing
	model, description *string
	pos                Position
	hostMAC            MAC
	hostIP             string
	deleted, mirrored  bool
}

// mirrorList reads ComponentSyncList for t, soft-deleted rows included, as
// the mirror compares each row, and the live ones as SyncComponentPages
// returns them when this Service listed t before and found at most
// MirrorLiveMax rows, and still finds no more (else nil).
func (s *Service) mirrorList(ctx context.Context, dbtx db.DBTX, t ComponentType) ([]mirrorRow, []SyncComponent, error) {
	n := 0
	if v, ok := s.listed.Load(t); ok {
		n = v.(int)
	}
	rows := make([]mirrorRow, 0, n+n/16)
	// The live components are kept when the type's last listing here had
	// room for them: a first listing, or a larger one, keeps none.
	var live []SyncComponent
	keepLive := n > 0 && n <= MirrorLiveMax
	if keepLive {
		live = make([]SyncComponent, 0, min(n+n/16, MirrorLiveMax))
	}
	// A listing repeats few manufacturers and models: one copy each.
	manufacturers, models := map[string]string{}, map[string]*string{}
	err := s.q.ComponentSyncListEach(ctx, dbtx, string(t), func(r *dbsqlc.ComponentSyncListRow) error {
		m, ok := manufacturers[r.Manufacturer]
		if !ok {
			m = r.Manufacturer
			manufacturers[m] = m
		}
		model := r.Model
		if model != nil {
			if shared, ok := models[*model]; ok {
				model = shared
			} else {
				models[*model] = model
			}
		}
		rows = append(rows, mirrorRow{id: r.ID, rackID: r.RackID, name: r.Name, serial: r.SerialNumber, manufacturer: m,
			model: model, description: r.Description, pos: Position{SlotID: r.SlotID, TrayIdx: r.TrayIdx, HostID: r.HostID},
			hostMAC: MAC(r.HostMac), hostIP: r.HostIp, deleted: r.DeletedAt != nil, mirrored: r.MirroredAt != nil})
		if keepLive && r.DeletedAt == nil {
			if len(live) == MirrorLiveMax {
				keepLive, live = false, nil
			} else {
				live = append(live, syncComponentOf(r))
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	s.listed.Store(t, len(rows))
	return rows, live, nil
}

type mirrorBMCRow struct {
	MAC         string    `json:"mac"`
	ComponentID uuid.UUID `json:"component_id"`
	IP          string    `json:"ip"`
}

// MirrorComponents makes Flow's components of type t follow Core's
// expected components of that type, through tx (one transaction per type;
// the caller commits). fetch reads Core's answer; it runs while Flow's rows
// are read through tx, so the two reads overlap, and it must not use tx. A
// fetch error is returned as it is, with nothing written; a successful
// answer is authoritative, an empty one included.
//
//   - Identity is the host BMC MAC (PMC MAC for shelves); a component with
//     no BMC yet is adopted by manufacturer + serial number and given that
//     BMC. Soft-deleted rows are matched too and resurrected (UUID kept).
//   - Only mirror-managed columns are written — rack, name, manufacturer,
//     serial number, model, description, position, and the BMC's IP — and
//     only from values Core sends (see ExpectedComponent); a row is written
//     only when one differs. Firmware version, external ID, status, power
//     and health belong to the actual sync; BMC credentials are never
//     mirrored.
//   - A live component the mirror created or adopted earlier that Core no
//     longer lists is soft-deleted; components of Flow's own that Core never
//     listed are left alone.
func (s *Service) MirrorComponents(ctx context.Context, tx pgx.Tx, t ComponentType, fetch func(context.Context) ([]ExpectedComponent, error)) (MirrorResult, error) {
	var res MirrorResult
	type answer struct {
		cs  []ExpectedComponent
		err error
	}
	fetched := make(chan answer, 1) // buffered: an early return leaves no goroutine blocked
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		cs, err := fetch(fctx)
		fetched <- answer{cs, err}
	}()
	rows, live, err := s.mirrorList(ctx, tx, t)
	if err != nil {
		return res, fmt.Errorf("list %s components for mirror: %w", t, err)
	}
	racks, err := s.q.SyncRackList(ctx, tx)
	if err != nil {
		return res, fmt.Errorf("list racks for mirror: %w", err)
	}
	a := <-fetched
	if a.err != nil {
		return res, a.err
	}
	cs := a.cs
	rackOf := make(map[string]uuid.UUID, 2*len(racks))
	for _, r := range racks {
		rackOf[r.ID.String()] = r.ID
	}
	for _, r := range racks {
		if e := deref(r.ExternalID); e != "" {
			rackOf[e] = r.ID
		}
	}
	byMAC := make(map[string]int, len(rows))
	byKey := make(map[string]int, len(rows))
	for i := range rows {
		r := &rows[i]
		if r.hostMAC != "" {
			byMAC[string(r.hostMAC)] = i
		}
		if k := naturalKey(r.manufacturer, r.serial); k != "" && r.hostMAC == "" {
			byKey[k] = i
		}
	}
	touched := make(map[uuid.UUID]bool, len(cs))
	seenMAC := make(map[string]bool, len(cs))
	type pending struct {
		row    mirrorComponentRow
		mac    string
		ip     string
		keyNew bool // the row's chassis pair changes or is new: check its owner
		insert bool
		cur    int  // the row's index in rows (updates)
		bmcNew bool // give the row its host BMC
		ipSet  bool // update its BMC's IP
		stats  func()
	}
	var plan []pending
	for _, ec := range cs {
		mac, err := ParseMAC(ec.MAC)
		if err != nil {
			res.Skipped++
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s %q: no valid BMC MAC", t, ec.SerialNumber))
			continue
		}
		if seenMAC[string(mac)] {
			res.Skipped++
			res.Warnings = append(res.Warnings, fmt.Sprintf("Core lists %s BMC MAC %s twice", t, mac))
			continue
		}
		seenMAC[string(mac)] = true
		rackID, rackKnown := rackOf[ec.RackID]
		i, found := byMAC[string(mac)]
		if !found {
			if j, ok := byKey[naturalKey(ec.Manufacturer, ec.SerialNumber)]; ok && !touched[rows[j].id] {
				i, found = j, true
			}
		}
		if !found {
			p := pending{mac: string(mac), ip: ec.IP, insert: true, bmcNew: true, keyNew: true}
			p.row = mirrorComponentRow{ID: uuid.New(), Name: ec.Name, Manufacturer: ec.Manufacturer, SerialNumber: ec.SerialNumber,
				SlotID: -1, TrayIdx: -1, HostID: -1}
			if p.row.SerialNumber == "" {
				p.row.SerialNumber = string(mac) // Flow's identity needs one
			}
			if rackKnown {
				p.row.RackID = &rackID
			}
			setPtrIf(&p.row.Model, ec.Model)
			setPtrIf(&p.row.Description, ec.Description)
			setPos(&p.row.SlotID, ec.SlotID)
			setPos(&p.row.TrayIdx, ec.TrayIdx)
			setPos(&p.row.HostID, ec.HostID)
			plan = append(plan, p)
			continue
		}
		cur := &rows[i]
		touched[cur.id] = true
		old := mirrorComponentRow{ID: cur.id, RackID: cur.rackID, Name: cur.name, Manufacturer: cur.manufacturer, SerialNumber: cur.serial,
			Model: cur.model, Description: cur.description, SlotID: cur.pos.SlotID, TrayIdx: cur.pos.TrayIdx, HostID: cur.pos.HostID}
		nw := old
		if rackKnown {
			nw.RackID = &rackID
		}
		setIf(&nw.Name, ec.Name)
		setIf(&nw.Manufacturer, ec.Manufacturer)
		setIf(&nw.SerialNumber, ec.SerialNumber)
		setPtrIf(&nw.Model, ec.Model)
		setPtrIf(&nw.Description, ec.Description)
		setPos(&nw.SlotID, ec.SlotID)
		setPos(&nw.TrayIdx, ec.TrayIdx)
		setPos(&nw.HostID, ec.HostID)
		p := pending{row: nw, mac: string(mac), ip: ec.IP, cur: i, bmcNew: cur.hostMAC == ""}
		p.ipSet = !p.bmcNew && ec.IP != "" && ec.IP != cur.hostIP
		samePair := nw.Manufacturer == old.Manufacturer && nw.SerialNumber == old.SerialNumber
		same := samePair && equalUUIDPtr(nw.RackID, old.RackID) && nw.Name == old.Name &&
			equalStrPtr(nw.Model, old.Model) && equalStrPtr(nw.Description, old.Description) &&
			nw.SlotID == old.SlotID && nw.TrayIdx == old.TrayIdx && nw.HostID == old.HostID
		if same && !cur.deleted && cur.mirrored && !p.bmcNew && !p.ipSet {
			continue
		}
		p.keyNew = !samePair && naturalKey(nw.Manufacturer, nw.SerialNumber) != naturalKey(old.Manufacturer, old.SerialNumber)
		deleted, adopted := cur.deleted, !cur.mirrored
		p.stats = func() {
			if deleted {
				res.Resurrected++
			}
			if adopted {
				res.Adopted++
			}
		}
		plan = append(plan, p)
	}

	// The natural key and the BMC MAC are unique across every component
	// type: a row whose pair or MAC another component holds keeps its own
	// pair (or is skipped, for a MAC).
	var serials, macs []string
	for _, p := range plan {
		if p.keyNew {
			serials = append(serials, p.row.SerialNumber)
		}
		if p.bmcNew {
			macs = append(macs, p.mac)
		}
	}
	keyOwner := map[string]uuid.UUID{}
	if len(serials) > 0 {
		owners, err := s.q.MirrorComponentKeyOwners(ctx, tx, serials)
		if err != nil {
			return res, fmt.Errorf("read serial owners: %w", err)
		}
		for _, o := range owners {
			keyOwner[o.Manufacturer+"\x00"+o.SerialNumber] = o.ID
		}
	}
	macOwner := map[string]uuid.UUID{}
	if len(macs) > 0 {
		owners, err := s.q.MirrorBMCOwners(ctx, tx, macs)
		if err != nil {
			return res, fmt.Errorf("read BMC owners: %w", err)
		}
		for _, o := range owners {
			macOwner[o.MACAddress] = o.ComponentID
		}
	}
	var inserts, updates []mirrorComponentRow
	var bmcs, ips []mirrorBMCRow
	for _, p := range plan {
		if p.bmcNew {
			if owner, ok := macOwner[p.mac]; ok && owner != p.row.ID {
				res.Skipped++
				res.Warnings = append(res.Warnings, fmt.Sprintf("%s BMC MAC %s belongs to component %s", t, p.mac, owner))
				continue
			}
		}
		if p.keyNew {
			k := strings.ToLower(p.row.Manufacturer) + "\x00" + p.row.SerialNumber
			if owner, ok := keyOwner[k]; ok && owner != p.row.ID {
				res.Warnings = append(res.Warnings, fmt.Sprintf("%s %s: serial %s/%s belongs to component %s; not mirrored", t, p.mac, p.row.Manufacturer, p.row.SerialNumber, owner))
				if p.insert {
					p.row.Manufacturer, p.row.SerialNumber = "", p.mac
				} else {
					o := &rows[p.cur]
					p.row.Manufacturer, p.row.SerialNumber = o.manufacturer, o.serial
				}
			}
			keyOwner[k] = p.row.ID
		}
		if p.insert {
			inserts = append(inserts, p.row)
		} else {
			updates = append(updates, p.row)
			p.stats()
		}
		if p.bmcNew {
			bmcs = append(bmcs, mirrorBMCRow{MAC: p.mac, ComponentID: p.row.ID, IP: p.ip})
		} else if p.ipSet {
			ips = append(ips, mirrorBMCRow{MAC: p.mac, ComponentID: p.row.ID, IP: p.ip})
		}
	}
	var gone []uuid.UUID
	for i := range rows {
		if r := &rows[i]; !r.deleted && r.mirrored && !touched[r.id] {
			gone = append(gone, r.id)
		}
	}
	// Each write goes out writeChunk rows a statement (one identity per
	// row, so the chunks of one write touch distinct rows).
	if len(updates) > 0 {
		if res.Updated, err = execChunked(updates, func(d []byte) (int64, error) { return s.q.MirrorComponentUpdate(ctx, tx, d) }); err != nil {
			return res, fmt.Errorf("update mirrored components: %w", err)
		}
	}
	if len(inserts) > 0 {
		if res.Inserted, err = execChunked(inserts, func(d []byte) (int64, error) {
			return s.q.MirrorComponentInsert(ctx, tx, dbsqlc.MirrorComponentInsertParams{Type: string(t), Rows: d})
		}); err != nil {
			return res, fmt.Errorf("insert mirrored components: %w", err)
		}
	}
	if len(bmcs) > 0 {
		if _, err = execChunked(bmcs, func(d []byte) (int64, error) { return s.q.MirrorHostBMCInsert(ctx, tx, d) }); err != nil {
			return res, fmt.Errorf("insert mirrored BMCs: %w", err)
		}
	}
	if len(ips) > 0 {
		// The rows are among the updates already; the count is theirs.
		if _, err := execChunked(ips, func(d []byte) (int64, error) { return s.q.MirrorBMCSetIP(ctx, tx, d) }); err != nil {
			return res, fmt.Errorf("set mirrored BMC IPs: %w", err)
		}
	}
	if len(gone) > 0 {
		if res.SoftDeleted, err = s.q.MirrorComponentSoftDelete(ctx, tx, gone); err != nil {
			return res, fmt.Errorf("soft-delete %s components Core no longer lists: %w", t, err)
		}
	}
	if len(updates)+len(inserts)+len(bmcs)+len(ips)+len(gone) == 0 {
		res.Live = live
	}
	return res, nil
}

func setPos(dst *int32, v *int32) {
	if v != nil {
		*dst = *v
	}
}

// DPUBMC is a DPU's BMC as Core reports it on its host.
type DPUBMC struct {
	MAC MAC
	IP  string
}

// ApplyDPUs makes the DPU BMCs of each component in dpus exactly the ones
// listed (current holds what the component has now, as SyncComponentPages read
// it), through tx, and returns how many BMC rows it wrote. A DPU MAC held by
// another component's DPU moves to this one; one held by a host BMC is left
// alone.
func (s *Service) ApplyDPUs(ctx context.Context, tx pgx.Tx, dpus map[uuid.UUID][]DPUBMC, current map[uuid.UUID][]DPUBMC) (int64, error) {
	var del []string
	var ups []mirrorBMCRow
	for id, want := range dpus {
		have := map[MAC]string{}
		for _, d := range current[id] {
			have[d.MAC] = d.IP
		}
		wantSet := map[MAC]bool{}
		for _, d := range want {
			wantSet[d.MAC] = true
			if ip, ok := have[d.MAC]; !ok || ip != d.IP {
				ups = append(ups, mirrorBMCRow{MAC: string(d.MAC), ComponentID: id, IP: d.IP})
			}
		}
		for mac := range have {
			if !wantSet[mac] {
				del = append(del, string(mac))
			}
		}
	}
	var n int64
	if len(del) > 0 {
		k, err := s.q.SyncDPUDelete(ctx, tx, del)
		if err != nil {
			return 0, fmt.Errorf("remove DPU BMCs: %w", err)
		}
		n += k
	}
	if len(ups) > 0 {
		data, err := json.Marshal(ups)
		if err != nil {
			return 0, fmt.Errorf("encode DPU BMCs: %w", err)
		}
		k, err := s.q.SyncDPUUpsert(ctx, tx, data)
		if err != nil {
			return 0, fmt.Errorf("record DPU BMCs: %w", err)
		}
		n += k
	}
	return n, nil
}
