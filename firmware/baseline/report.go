package baseline

import (
	"context"
	"slices"
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
// for a bad filter.
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
	states, err := s.Evaluate(ctx, dbtx, b, q)
	if err != nil {
		return Report{}, err
	}
	r := Report{Baseline: b, ComputedAt: s.cfg.Now()}
	for _, st := range states {
		r.Site.Add(st.State)
	}
	for _, g := range q.GroupBy {
		r.Groups = append(r.Groups, RollUp(g, states)...)
	}
	if len(q.States) > 0 {
		states = slices.DeleteFunc(states, func(d DeviceState) bool { return !slices.Contains(q.States, d.State) })
	}
	// Order only what is listed: a site's non-compliant devices are few.
	inventory.SortFirmwareDevices(states, func(d *DeviceState) *inventory.FirmwareDevice { return d.Device })
	r.Total = len(states)
	lo, hi := min(q.Offset, len(states)), min(q.Offset+q.Limit, len(states))
	r.Devices = states[lo:hi]
	return r, nil
}

// siteCache keeps the last site roll-up per component type, for metrics.
type siteCache struct {
	at     time.Time
	counts map[string]Counts // component type → counts
	ok     bool              // a baseline was active
}

// siteCacheFor is how long a computed site roll-up serves metrics.
const siteCacheFor = 30 * time.Second

func (s *Service) invalidate() {
	s.mu.Lock()
	s.site = siteCache{}
	s.mu.Unlock()
}

// SiteCounts returns the active baseline's device counts per component
// type (compute, nvswitch, powershelf), computed at most every 30 s; ok
// is false when no baseline is active.
func (s *Service) SiteCounts(ctx context.Context, dbtx db.DBTX) (map[string]Counts, bool, error) {
	s.mu.Lock()
	c := s.site
	s.mu.Unlock()
	if c.counts != nil && s.cfg.Now().Sub(c.at) < siteCacheFor {
		return c.counts, c.ok, nil
	}
	c = siteCache{at: s.cfg.Now(), counts: map[string]Counts{}}
	b, err := s.Get(ctx, dbtx, Ref{})
	switch {
	case err == ErrNoActive:
	case err != nil:
		return nil, false, err
	default:
		states, err := s.Evaluate(ctx, dbtx, b, Query{})
		if err != nil {
			return nil, false, err
		}
		for _, st := range states {
			t := typeOf(st.Device.Type)
			n := c.counts[t]
			n.Add(st.State)
			c.counts[t] = n
		}
		c.ok = true
	}
	s.mu.Lock()
	s.site = c
	s.mu.Unlock()
	return c.counts, c.ok, nil
}
