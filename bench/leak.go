package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Leak injection (flow bench --leaks N, docs/bench.md "Leak response under
// load"): while the workload runs, the bench raises a coolant leak on a
// compute tray of N busy racks (racks whose workload task is still active),
// one every --leak-interval, through the NICo Core simulator, and measures
// per leak the time from the simulator raising it to the first power-off
// command for that tray reaching the simulator (the journal's
// ComponentPowerControl calls with a FORCE_OFF or GRACEFUL_SHUTDOWN action,
// by their journal timestamps; both on the simulator's clock, the wall
// clock here).

// benchLeak is one injected leak.
type benchLeak struct {
	rack     string
	coreID   string
	mac      string
	raisedAt time.Time
	offAt    time.Time // zero: no power-off seen yet
}

// leakResponseWait is how long after the workload (and the last leak) the
// bench waits for the leaks' power-offs.
const leakResponseWait = 60 * time.Second

const scanEvery = 500 * time.Millisecond

// leakInjector raises the leaks and finds their power-offs.
type leakInjector struct {
	b     *Bench
	racks []inventory.Rack
	mu    sync.Mutex
	leaks []*benchLeak
	// listings are the leak check's compute listings seen in the journal
	// (FindMachineIds filtered by the leak alert), by their times.
	listings map[time.Time]bool
	done     chan struct{} // closed when raise has returned
	stop     chan struct{} // closed by wait: raise no more
}

// scanEvery is how often the journal is read for power-offs while the run
// goes on: it keeps a bounded number of calls (sim.JournalMaxCalls,
// JournalMaxDevices; the inventory sync's listings fill it at 3,000
// racks), so a power-off early in a long run would be forgotten by its
// end.

// startLeaks starts raising o.leaks leaks (none when 0); wait ends it.
func (b *Bench) startLeaks(ctx context.Context, racks []inventory.Rack) *leakInjector {
	li := &leakInjector{b: b, racks: racks, listings: map[time.Time]bool{}, done: make(chan struct{}), stop: make(chan struct{})}
	if b.o.leaks == 0 {
		close(li.done)
		return li
	}
	go func() {
		defer close(li.done)
		li.raise(ctx)
	}()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-li.stop:
				return
			case <-time.After(scanEvery):
				li.scan()
			}
		}
	}()
	return li
}

// busyRacks returns the racks with an active task (running ones first),
// at most 500, from one task listing.
func (li *leakInjector) busyRacks(ctx context.Context) []string {
	res, err := li.b.client.ListTasks(ctx, &flowv1.ListTasksRequest{ActiveOnly: true, Pagination: &flowv1.Pagination{Limit: 500}})
	if err != nil {
		return nil
	}
	var running, other []string
	for _, t := range res.GetTasks() {
		if t.GetStatus() == flowv1.TaskStatus_TASK_STATUS_RUNNING {
			running = append(running, t.GetRackId().GetId())
		} else {
			other = append(other, t.GetRackId().GetId())
		}
	}
	return append(running, other...)
}

// raise raises the leaks, one every leak interval, each on a busy rack
// not leaking yet.
func (li *leakInjector) raise(ctx context.Context) {
	coreIDs := map[string]string{} // BMC MAC → Core ID
	for _, st := range li.b.sims.NICo.States() {
		coreIDs[strings.ToLower(st.BMCMAC)] = st.ID
	}
	byID := map[string]int{}
	for i, r := range li.racks {
		byID[r.ID.String()] = i
	}
	used := map[int]bool{}
	tick := time.NewTicker(li.b.o.leakInterval)
	defer tick.Stop()
	for raised := 0; raised < li.b.o.leaks; {
		select {
		case <-ctx.Done():
			return
		case <-li.stop:
			return
		case <-tick.C:
		}
		for _, id := range li.busyRacks(ctx) {
			i, ok := byID[id]
			if !ok || used[i] {
				continue
			}
			tray := leakTray(li.racks[i])
			if tray == nil || coreIDs[strings.ToLower(tray.BMCs[0].MAC.String())] == "" {
				continue
			}
			mac := strings.ToLower(tray.BMCs[0].MAC.String())
			core := coreIDs[mac]
			used[i] = true
			if err := li.b.sims.NICo.SetLeak(core, true); err != nil {
				li.b.progressf("leak on %s: %v", tray.Name, err)
				break
			}
			li.mu.Lock()
			li.leaks = append(li.leaks, &benchLeak{rack: li.racks[i].Name, coreID: core, mac: mac, raisedAt: time.Now()})
			li.mu.Unlock()
			raised++
			break
		}
	}
}

// leakTray is the rack's compute tray whose leak the bench raises: the
// highest-slot one (its response covers the most of the rack), nil when
// the rack has none with a BMC.
func leakTray(r inventory.Rack) *inventory.Component {
	var best *inventory.Component
	for k := range r.Components {
		c := &r.Components[k]
		if c.Type != inventory.ComponentTypeCompute || len(c.BMCs) == 0 {
			continue
		}
		if best == nil || c.Position.SlotID > best.Position.SlotID {
			best = c
		}
	}
	return best
}

// scan reads the simulator's journal for the leaks' first power-offs and
// the leak check's listings.
func (li *leakInjector) scan() {
	calls := li.b.sims.NICo.Journal().Calls("ComponentPowerControl", "FindMachineIds")
	li.mu.Lock()
	defer li.mu.Unlock()
	for _, c := range calls {
		if c.Method == "FindMachineIds" {
			if c.Filter != "" {
				li.listings[c.Time] = true
			}
			continue
		}
		if c.Action != "SYSTEM_POWER_CONTROL_FORCE_OFF" && c.Action != "SYSTEM_POWER_CONTROL_GRACEFUL_SHUTDOWN" {
			continue
		}
		for _, l := range li.leaks {
			if !l.offAt.IsZero() || c.Time.Before(l.raisedAt) {
				continue
			}
			if slices.ContainsFunc(c.Devices, func(d string) bool { d = strings.ToLower(d); return d == strings.ToLower(l.coreID) || d == l.mac }) {
				l.offAt = c.Time
			}
		}
	}
}

// wait waits for the injection to end and every leak's power-off (at most
// leakResponseWait), and returns the leaks and the leak check's listing
// times, sorted.
func (li *leakInjector) wait(ctx context.Context) ([]*benchLeak, []time.Time) {
	close(li.stop)
	select {
	case <-li.done:
	case <-ctx.Done():
	}
	deadline := time.Now().Add(leakResponseWait)
	for {
		li.scan()
		li.mu.Lock()
		open := 0
		for _, l := range li.leaks {
			if l.offAt.IsZero() {
				open++
			}
		}
		li.mu.Unlock()
		if open == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(scanEvery)
	}
	li.mu.Lock()
	defer li.mu.Unlock()
	listings := make([]time.Time, 0, len(li.listings))
	for t := range li.listings {
		listings = append(listings, t)
	}
	slices.SortFunc(listings, time.Time.Compare)
	return slices.Clone(li.leaks), listings
}

// measureLeaks fills res's leak-response figures from leaks and the leak
// check's listings: the totals, the check's cadence and the stages.
func (b *Bench) measureLeaks(ctx context.Context, res *Result, leaks []*benchLeak, listings []time.Time) {
	measureLeakTotals(res, leaks)
	if len(leaks) == 0 {
		return
	}
	first := slices.MinFunc(leaks, func(a, b *benchLeak) int { return a.raisedAt.Compare(b.raisedAt) }).raisedAt
	if ds := checkIntervals(listings, first); len(ds) > 0 {
		slices.Sort(ds)
		res.LeakCheckCycles = len(ds)
		res.LeakCheckIntervalP50Ms, res.LeakCheckIntervalMaxMs = percentileMs(ds, 50), float64(ds[len(ds)-1])/float64(time.Millisecond)
	}
	stages, err := b.leakStages(ctx, leaks, listings)
	if err != nil {
		res.Failures = append(res.Failures, err.Error())
		return
	}
	res.LeakStages = stages
}

// measureLeakTotals fills res's leak → power-off figures from leaks.
func measureLeakTotals(res *Result, leaks []*benchLeak) {
	res.Leaks = len(leaks)
	var ds []time.Duration
	for _, l := range leaks {
		if l.offAt.IsZero() {
			res.LeaksUnanswered++
			res.Failures = append(res.Failures, fmt.Sprintf("leak on %s (%s): no power-off within %s", l.rack, l.coreID, leakResponseWait))
			continue
		}
		ds = append(ds, l.offAt.Sub(l.raisedAt))
	}
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	res.LeakResponseP50Ms, res.LeakResponseP99Ms = percentileMs(ds, 50), percentileMs(ds, 99)
	res.LeakResponseMaxMs = float64(ds[len(ds)-1]) / float64(time.Millisecond)
}
