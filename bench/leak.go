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

// leakInjector raises the leaks and finds their power-offs.
type leakInjector struct {
	b     *Bench
	racks []inventory.Rack
	mu    sync.Mutex
	leaks []*benchLeak
	done  chan struct{}
	// seen is how many journal calls were scanned already.
	seen int
}

// startLeaks starts raising o.leaks leaks (none when 0); wait ends it.
func (b *Bench) startLeaks(ctx context.Context, racks []inventory.Rack) *leakInjector {
	li := &leakInjector{b: b, racks: racks, done: make(chan struct{})}
	if b.o.leaks == 0 {
		close(li.done)
		return li
	}
	go func() {
		defer close(li.done)
		li.raise(ctx)
	}()
	return li
}

// candidates returns the rack indexes to try, spread over the site: rack
// k·n/leaks for the k-th leak first, then its successors.
func (li *leakInjector) candidates(k int) []int {
	n := len(li.racks)
	start := k * n / li.b.o.leaks
	out := make([]int, 0, n)
	for i := range n {
		out = append(out, (start+i)%n)
	}
	return out
}

// raise raises the leaks, one every leak interval, each on a busy rack
// not leaking yet.
func (li *leakInjector) raise(ctx context.Context) {
	coreIDs := map[string]string{} // BMC MAC → Core ID
	for _, st := range li.b.sims.NICo.States() {
		coreIDs[strings.ToLower(st.BMCMAC)] = st.ID
	}
	used := map[int]bool{}
	tick := time.NewTicker(li.b.o.leakInterval)
	defer tick.Stop()
	for k := 0; k < li.b.o.leaks; k++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, i := range li.candidates(k) {
			if used[i] || !li.busy(ctx, li.racks[i].ID.String()) {
				continue
			}
			tray := leakTray(li.racks[i])
			if tray == nil {
				continue
			}
			mac := strings.ToLower(tray.BMCs[0].MAC.String())
			id := coreIDs[mac]
			if id == "" {
				continue
			}
			used[i] = true
			if err := li.b.sims.NICo.SetLeak(id, true); err != nil {
				li.b.progressf("leak on %s: %v", tray.Name, err)
				break
			}
			l := &benchLeak{rack: li.racks[i].Name, coreID: id, mac: mac, raisedAt: time.Now()}
			li.mu.Lock()
			li.leaks = append(li.leaks, l)
			li.mu.Unlock()
			break
		}
	}
}

// busy reports whether rack has an active (waiting, pending or running)
// task.
func (li *leakInjector) busy(ctx context.Context, rack string) bool {
	res, err := li.b.client.ListTasks(ctx, &flowv1.ListTasksRequest{ActiveOnly: true, RackId: &flowv1.UUID{Id: rack}, Pagination: &flowv1.Pagination{Limit: 1}})
	return err == nil && res.GetTotal() > 0
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

// scan reads the simulator's journal for the leaks' first power-offs.
func (li *leakInjector) scan() {
	calls := li.b.sims.NICo.Journal().Calls("ComponentPowerControl")
	li.mu.Lock()
	defer li.mu.Unlock()
	for _, c := range calls {
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
// leakResponseWait), and returns the leaks.
func (li *leakInjector) wait(ctx context.Context) []*benchLeak {
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
		time.Sleep(250 * time.Millisecond)
	}
	li.mu.Lock()
	defer li.mu.Unlock()
	return slices.Clone(li.leaks)
}

// measureLeaks fills res's leak-response figures from leaks.
func measureLeaks(res *Result, leaks []*benchLeak) {
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
