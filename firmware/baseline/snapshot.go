package baseline

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
)

// A snapshot is a site's compliance in compact form: every device's state
// against one baseline revision, computed at one inventory and firmware
// generation, with what filters and roll-ups need. It holds no versions
// or differences (a page reads those for its own devices), so a site of
// 100,000 devices takes about 13 MB. While the generations hold, a report is
// the snapshot plus what moves on its own: which devices a firmware task
// covers now (updating) and which have not been reported for too long
// (unknown). A snapshot is not changed once built.
type snapshot struct {
	baselineID uuid.UUID
	revision   int
	gen        inventory.FirmwareGeneration
	racks      []snapRack
	devs       []snapDev
	// kinds are what picks the entries of the devices (snapDev.kind).
	kinds []inventory.FirmwareDevice
}

type snapRack struct {
	id              uuid.UUID
	name, hall, row string
	domainID        *uuid.UUID
	domainName      string
}

// snapDev is one device. base is its state with no task on it and
// ignoring how long ago it was seen.
type snapDev struct {
	id       uuid.UUID
	name     string
	rack     int32 // index in racks; -1 none
	kind     int32 // index in the snapshot's kinds
	typ      inventory.ComponentType
	base     string
	reported bool
	seen     time.Time // zero: never reported; as stored (the type's read moves it: live.state)
}

// siteFirmware is the site's stored installed firmware at one firmware
// generation (inventory.Service.FirmwareTable).
type siteFirmware struct {
	gen   int64
	table inventory.FirmwareTable
}

// siteDevices reads the site's devices (inventory.Service.
// FirmwareDeviceInventory) into a snapshot's racks, devices and kinds,
// with no states yet.
func (s *Service) siteDevices(ctx context.Context, dbtx db.DBTX) (*snapshot, error) {
	devs, err := s.cfg.Inventory.FirmwareDeviceInventory(ctx, dbtx)
	if err != nil {
		return nil, err
	}
	sn := &snapshot{devs: make([]snapDev, len(devs))}
	rackIdx := map[uuid.UUID]int32{}
	kindIdx := map[deviceKind]int32{}
	for i := range devs {
		d := &devs[i]
		k := deviceKind{d.Type, strings.ToLower(d.Manufacturer), d.Model, d.RackProfile}
		ki, ok := kindIdx[k]
		if !ok {
			ki = int32(len(sn.kinds))
			kindIdx[k] = ki
			sn.kinds = append(sn.kinds, inventory.FirmwareDevice{Type: d.Type, Manufacturer: d.Manufacturer, Model: d.Model, RackProfile: d.RackProfile})
		}
		sd := snapDev{id: d.ID, name: d.Name, rack: -1, kind: ki, typ: d.Type}
		if d.RackID != nil {
			k, ok := rackIdx[*d.RackID]
			if !ok {
				k = int32(len(sn.racks))
				rackIdx[*d.RackID] = k
				sn.racks = append(sn.racks, snapRack{id: *d.RackID, name: d.RackName, hall: d.Hall, row: d.Row, domainID: d.DomainID, domainName: d.DomainName})
			}
			sd.rack = k
		}
		sn.devs[i] = sd
	}
	return sn, nil
}

// measure sets every device's state in sn against b from fw: each kind of
// device with each distinct set of versions is evaluated once.
func (s *Service) measure(sn *snapshot, b Baseline, fw *siteFirmware) {
	ev := NewEvaluator(b.Entries, s.cfg.Now(), 0)
	type kindSet struct{ kind, set int32 }
	states := map[kindSet]string{}
	for i := range sn.devs {
		d := &sn.devs[i]
		row, ok := fw.table.ByComponent[d.id]
		k := kindSet{d.kind, -1}
		if ok {
			k.set = row.Set
			d.reported, d.seen = row.Reported, row.SeenAt
		} else {
			d.reported, d.seen = false, time.Time{}
		}
		st, done := states[k]
		if !done {
			dev := sn.kinds[d.kind]
			if ok {
				dev.Installed = &inventory.InstalledFirmware{Versions: fw.table.Sets[row.Set], Reported: row.Reported, SeenAt: row.SeenAt}
			}
			st = ev.Evaluate(&dev, nil).State
			states[k] = st
		}
		d.base = st
	}
}

// snapshotFor returns the snapshot of b at the current generations. When
// the one kept is of another baseline revision or generation, it builds
// one, reading again only what changed: the devices when the inventory
// generation moved (else the kept snapshot's are reused), the installed
// firmware when the firmware generation moved (else the table kept is
// reused); then it measures every device. Builds are one at a time;
// callers that find one under way wait for it.
func (s *Service) snapshotFor(ctx context.Context, dbtx db.DBTX, b Baseline) (*snapshot, error) {
	gen, err := s.cfg.Inventory.FirmwareGenerations(ctx, dbtx)
	if err != nil {
		return nil, err
	}
	fresh := func(sn *snapshot) bool {
		return sn != nil && sn.baselineID == b.ID && sn.revision == b.Revision.Revision && sn.gen == gen
	}
	s.mu.Lock()
	sn := s.snap
	s.mu.Unlock()
	if fresh(sn) {
		return sn, nil
	}
	s.build.Lock()
	defer s.build.Unlock()
	s.mu.Lock()
	sn = s.snap
	s.mu.Unlock()
	if fresh(sn) {
		return sn, nil
	}
	// The generations were read before what is read below, so what is
	// read is at least as new as them: a change in between only makes the
	// next call build again.
	fw := s.fw
	if fw == nil || fw.gen != gen.Firmware {
		t, err := s.cfg.Inventory.FirmwareTable(ctx, dbtx)
		if err != nil {
			return nil, err
		}
		fw = &siteFirmware{gen: gen.Firmware, table: t}
	}
	var next *snapshot
	if sn != nil && sn.gen.Inventory == gen.Inventory {
		next = &snapshot{racks: sn.racks, kinds: sn.kinds, devs: slices.Clone(sn.devs)}
	} else if next, err = s.siteDevices(ctx, dbtx); err != nil {
		return nil, err
	}
	next.baselineID, next.revision, next.gen = b.ID, b.Revision.Revision, gen
	s.measure(next, b, fw)
	s.fw = fw
	s.mu.Lock()
	s.snap = next
	s.mu.Unlock()
	return next, nil
}

// live is what moves on its own between snapshots: the tasks on devices
// and the types' last reads.
type live struct {
	tasks map[uuid.UUID]uuid.UUID
	reads map[inventory.ComponentType]time.Time
	now   time.Time
	stale time.Duration
}

func (s *Service) readLive(ctx context.Context, dbtx db.DBTX) (live, error) {
	tasks, err := s.cfg.Operations.ActiveFirmwareComponents(ctx, dbtx)
	if err != nil {
		return live{}, err
	}
	reads, err := s.cfg.Inventory.FirmwareReads(ctx, dbtx)
	if err != nil {
		return live{}, err
	}
	return live{tasks: tasks, reads: reads, now: s.cfg.Now(), stale: s.cfg.StaleAfter}, nil
}

// state is d's state now, by Evaluate's precedence.
func (l live) state(d *snapDev) string {
	switch {
	case d.base == StateNotCovered:
		return StateNotCovered
	case l.tasks[d.id] != uuid.Nil:
		return StateUpdating
	case d.seen.IsZero():
		return d.base
	}
	seen := d.seen
	if t := l.reads[d.typ]; d.reported && t.After(seen) {
		seen = t
	}
	if l.stale > 0 && l.now.Sub(seen) > l.stale {
		return StateUnknown
	}
	return d.base
}

// selects reports whether q's filters (but states) select d.
func (sn *snapshot) selects(q *Query, d *snapDev, racks map[uuid.UUID]bool) bool {
	if q.Type != "" && typeOf(d.typ) != q.Type {
		return false
	}
	var r *snapRack
	if d.rack >= 0 {
		r = &sn.racks[d.rack]
	}
	switch {
	case len(racks) > 0 && (r == nil || !racks[r.id]):
		return false
	case q.DomainID != nil && (r == nil || r.domainID == nil || *r.domainID != *q.DomainID):
		return false
	case q.Row != "" && (r == nil || r.row != q.Row):
		return false
	case q.Hall != "" && (r == nil || r.hall != q.Hall):
		return false
	}
	return true
}

// groupOf returns d's group key and name under kind ("" key: none).
func (sn *snapshot) groupOf(kind string, d *snapDev) (key, name string) {
	if d.rack < 0 {
		return "", ""
	}
	r := &sn.racks[d.rack]
	switch kind {
	case GroupRack:
		return r.id.String(), r.name
	case GroupDomain:
		if r.domainID != nil {
			return r.domainID.String(), r.domainName
		}
	case GroupRow:
		if r.row != "" {
			return r.hall + "/" + r.row, strings.TrimPrefix(r.hall+" / "+r.row, " / ")
		}
	case GroupHall:
		if r.hall != "" {
			return r.hall, r.hall
		}
	}
	return "", ""
}

// rackName is d's rack's name ("" none).
func (sn *snapshot) rackName(d *snapDev) string {
	if d.rack < 0 {
		return ""
	}
	return sn.racks[d.rack].name
}

// sortDevs orders devices by rack name, name, then ID.
func (sn *snapshot) sortDevs(ds []*snapDev) {
	slices.SortFunc(ds, func(a, b *snapDev) int {
		if c := strings.Compare(sn.rackName(a), sn.rackName(b)); c != 0 {
			return c
		}
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return slices.Compare(a.id[:], b.id[:])
	})
}
