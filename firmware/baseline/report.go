package baseline

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
)

// Query selects and pages a compliance report. Empty fields select all.
type Query struct {
	Ref      Ref
	States   []string
	Type     string // compute, nvswitch, powershelf
	RackIDs  []uuid.UUID
	DomainID *uuid.UUID
	Row      string
	Hall     string
	Offset   int
	Limit    int      // 0: 100
	GroupBy  []string // rack, nvl_domain, row, hall
}

// Report is a compliance report: one page of devices in the selection
// (filtered by state), and the counts and roll-ups of the whole selection
// (every state).
type Report struct {
	Baseline   Baseline
	Devices    []DeviceState
	Total      int // devices the filters select, states included
	Site       Counts
	Groups     []Group
	ComputedAt time.Time
}

// Limits of a report page.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Evaluate measures every device the query selects (ignoring states and
// paging) against b and returns their states, in no order.
func (s *Service) Evaluate(ctx context.Context, dbtx db.DBTX, b Baseline, q Query) ([]DeviceState, error) {
	devs, err := s.cfg.Inventory.FirmwareDevices(ctx, dbtx, inventory.FirmwareDeviceFilter{
		Type: inventoryType(q.Type), RackIDs: q.RackIDs, DomainID: q.DomainID,
	})
	if err != nil {
		return nil, err
	}
	tasks, err := s.cfg.Operations.ActiveFirmwareComponents(ctx, dbtx)
	if err != nil {
		return nil, err
	}
	ev := NewEvaluator(b.Entries, s.cfg.Now(), s.cfg.StaleAfter)
	out := make([]DeviceState, 0, len(devs))
	for i := range devs {
		d := &devs[i]
		if q.Row != "" && d.Row != q.Row || q.Hall != "" && d.Hall != q.Hall {
			continue
		}
		var task *uuid.UUID
		if t, ok := tasks[d.ID]; ok {
			task = &t
		}
		out = append(out, ev.Evaluate(d, task))
	}
	return out, nil
}

// Compliance returns the report q asks for. ErrNoActive when q names no
// baseline and none is active; ErrNotFound for an unknown one; *FieldError
// for a bad filter. The states, counts and roll-ups come from the site's
// snapshot (rebuilt only when the inventory or the installed versions
// changed); the listed page's devices are read and measured afresh, with
// their differences.
func (s *Service) Compliance(ctx context.Context, dbtx db.DBTX, q Query) (Report, error) {
	for i, st := range q.States {
		if !slices.Contains(States, st) {
			return Report{}, invalid("states", "states[%d]: unknown state %q: give %v", i, st, States)
		}
	}
	for _, g := range q.GroupBy {
		if g != GroupRack && g != GroupDomain && g != GroupRow && g != GroupHall {
			return Report{}, invalid("group_by", "unknown roll-up %q: give rack, nvl_domain, row or hall", g)
		}
	}
	switch {
	case q.Offset < 0:
		return Report{}, invalid("offset", "must not be negative")
	case q.Limit < 0 || q.Limit > MaxLimit:
		return Report{}, invalid("limit", "must be between 0 and %d", MaxLimit)
	case q.Limit == 0:
		q.Limit = DefaultLimit
	}
	b, err := s.Get(ctx, dbtx, q.Ref)
	if err != nil {
		return Report{}, err
	}
	sn, err := s.snapshotFor(ctx, dbtx, b)
	if err != nil {
		return Report{}, err
	}
	l, err := s.readLive(ctx, dbtx)
	if err != nil {
		return Report{}, err
	}
	racks := map[uuid.UUID]bool{}
	for _, id := range q.RackIDs {
		racks[id] = true
	}
	r := Report{Baseline: b, ComputedAt: l.now}
	type groupAt struct {
		kind, key string
	}
	groups := map[groupAt]*Group{}
	var listed []*snapDev
	for i := range sn.devs {
		d := &sn.devs[i]
		if !sn.selects(&q, d, racks) {
			continue
		}
		st := l.state(d)
		r.Site.Add(st)
		for _, kind := range q.GroupBy {
			key, name := sn.groupOf(kind, d)
			if key == "" {
				continue
			}
			g := groups[groupAt{kind, key}]
			if g == nil {
				g = &Group{Kind: kind, Key: key, Name: name}
				groups[groupAt{kind, key}] = g
			}
			g.Counts.Add(st)
		}
		if len(q.States) == 0 || slices.Contains(q.States, st) {
			listed = append(listed, d)
		}
	}
	for _, kind := range q.GroupBy {
		start := len(r.Groups)
		for k, g := range groups {
			if k.kind == kind {
				r.Groups = append(r.Groups, *g)
			}
		}
		slices.SortFunc(r.Groups[start:], func(a, b Group) int {
			if c := strings.Compare(a.Name, b.Name); c != 0 {
				return c
			}
			return strings.Compare(a.Key, b.Key)
		})
	}
	sn.sortDevs(listed)
	r.Total = len(listed)
	page := listed[min(q.Offset, len(listed)):min(q.Offset+q.Limit, len(listed))]
	if len(page) == 0 {
		return r, nil
	}
	ids := make([]uuid.UUID, len(page))
	var rackIDs []uuid.UUID
	seenRack := map[int32]bool{}
	rackless := false
	for i, d := range page {
		ids[i] = d.id
		rackless = rackless || d.rack < 0
		if d.rack >= 0 && !seenRack[d.rack] {
			seenRack[d.rack] = true
			rackIDs = append(rackIDs, sn.racks[d.rack].id)
		}
	}
	f := inventory.FirmwareDeviceFilter{ComponentIDs: ids, RackIDs: rackIDs}
	if rackless {
		f.RackIDs = nil // the rack filter would leave rack-less devices out
	}
	devs, err := s.cfg.Inventory.FirmwareDevices(ctx, dbtx, f)
	if err != nil {
		return Report{}, err
	}
	byID := make(map[uuid.UUID]*inventory.FirmwareDevice, len(devs))
	for i := range devs {
		byID[devs[i].ID] = &devs[i]
	}
	ev := NewEvaluator(b.Entries, l.now, s.cfg.StaleAfter)
	for _, id := range ids {
		d, ok := byID[id]
		if !ok {
			continue // gone since the snapshot
		}
		var task *uuid.UUID
		if t, ok := l.tasks[id]; ok {
			task = &t
		}
		r.Devices = append(r.Devices, ev.Evaluate(d, task))
	}
	return r, nil
}

// SiteCounts returns the active baseline's device counts per component
// type (compute, nvswitch, powershelf); ok is false when no baseline is
// active. It reads the site's snapshot, so a scrape costs a few small
// queries while nothing changed.
func (s *Service) SiteCounts(ctx context.Context, dbtx db.DBTX) (map[string]Counts, bool, error) {
	b, err := s.Get(ctx, dbtx, Ref{})
	if errors.Is(err, ErrNoActive) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	sn, err := s.snapshotFor(ctx, dbtx, b)
	if err != nil {
		return nil, false, err
	}
	l, err := s.readLive(ctx, dbtx)
	if err != nil {
		return nil, false, err
	}
	out := map[string]Counts{}
	for i := range sn.devs {
		d := &sn.devs[i]
		t := typeOf(d.typ)
		n := out[t]
		n.Add(l.state(d))
		out[t] = n
	}
	return out, true, nil
}
