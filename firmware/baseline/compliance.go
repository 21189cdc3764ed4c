package baseline

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
)

// Compliance states of a device (and of a sub-component, for the first
// three and unknown).
const (
	StateCompliant  = "compliant"
	StateUpgrade    = "upgrade"   // below the baseline
	StateDowngrade  = "downgrade" // above it
	StateUnknown    = "unknown"   // not reported, stale, or not orderable
	StateUpdating   = "updating"  // a firmware task is on it
	StateNotCovered = "not_covered"
)

// States lists the device states, most urgent first (a roll-up's state is
// its most urgent device's).
var States = []string{StateUpdating, StateUpgrade, StateDowngrade, StateUnknown, StateCompliant, StateNotCovered}

func stateRank(s string) int { return slices.Index(States, s) }

// Difference is one sub-component of a device that is not at the baseline,
// or could not be compared.
type Difference struct {
	Component string
	State     string // upgrade, downgrade or unknown
	Desired   string
	Installed []string
	Reason    string
}

// DeviceState is one device's compliance.
type DeviceState struct {
	Device      *inventory.FirmwareDevice
	State       string
	Reason      string
	Differences []Difference
	// Desired is the version each covered sub-component should be at.
	Desired map[string]string
	TaskID  *uuid.UUID
}

// SeenAt is when the device's versions were last seen (nil: never).
func (d DeviceState) SeenAt() *time.Time {
	if d.Device.Installed == nil {
		return nil
	}
	return &d.Device.Installed.SeenAt
}

// Evaluator measures devices against one baseline revision's entries. It
// remembers what it worked out (the desired versions per kind of device,
// each comparison of two version strings), since a site has a few of each
// and 100,000 devices; it is not safe for concurrent use.
type Evaluator struct {
	byType map[string][]Entry // entries by component type, most specific first
	wants  map[deviceKind]desired
	cmps   map[[2]string]cmpResult
	// StaleAfter: a device whose versions were last seen longer ago is
	// unknown (0: never stale).
	StaleAfter time.Duration
	Now        time.Time
}

// NewEvaluator returns an Evaluator of entries (normalized).
func NewEvaluator(entries []Entry, now time.Time, staleAfter time.Duration) *Evaluator {
	ev := &Evaluator{byType: map[string][]Entry{}, StaleAfter: staleAfter, Now: now,
		wants: map[deviceKind]desired{}, cmps: map[[2]string]cmpResult{}}
	for _, e := range entries {
		ev.byType[e.ComponentType] = append(ev.byType[e.ComponentType], e)
	}
	for _, es := range ev.byType {
		slices.SortStableFunc(es, func(a, b Entry) int { return cmp.Compare(b.specificity(), a.specificity()) })
	}
	return ev
}

// deviceKind is what picks a device's entries.
type deviceKind struct {
	typ                        inventory.ComponentType
	vendor, model, rackProfile string
}

// desired is the versions one kind of device should be at, with its
// sub-components in order.
type desired struct {
	versions map[string]string
	subs     []string
}

type cmpResult struct {
	c  int
	ok bool
}

// Desired returns the version each sub-component of d should be at: per
// sub-component, the most specific entry that matches d (rack profile over
// model over vendor; among equals, the first in the baseline's order).
// The map is shared: do not change it.
func (ev *Evaluator) Desired(d *inventory.FirmwareDevice) map[string]string {
	return ev.desired(d).versions
}

func (ev *Evaluator) desired(d *inventory.FirmwareDevice) desired {
	k := deviceKind{d.Type, strings.ToLower(d.Manufacturer), d.Model, d.RackProfile}
	if w, ok := ev.wants[k]; ok {
		return w
	}
	w := desired{versions: map[string]string{}}
	for _, e := range ev.byType[typeOf(d.Type)] {
		if _, done := w.versions[e.Component]; done || !e.matches(d) {
			continue
		}
		w.versions[e.Component] = e.Version
	}
	w.subs = slices.Sorted(mapKeys(w.versions))
	ev.wants[k] = w
	return w
}

// compare is firmware.CompareVersions(installed, want), remembered.
func (ev *Evaluator) compare(installed, want string) (int, bool) {
	k := [2]string{installed, want}
	if r, ok := ev.cmps[k]; ok {
		return r.c, r.ok
	}
	c, ok := firmware.CompareVersions(installed, want)
	ev.cmps[k] = cmpResult{c, ok}
	return c, ok
}

// Evaluate returns d's compliance; task is the firmware task on it (nil:
// none). Rules (docs/firmware.md, "Compliance"): no entry applies →
// not_covered; a task on it → updating; versions never reported, or last
// seen longer ago than StaleAfter → unknown; else by sub-component: any
// below → upgrade, else any above → downgrade, else any not reported or
// not orderable → unknown, else compliant.
func (ev *Evaluator) Evaluate(d *inventory.FirmwareDevice, task *uuid.UUID) DeviceState {
	want := ev.desired(d)
	ds := DeviceState{Device: d, Desired: want.versions, TaskID: task}
	switch {
	case len(ds.Desired) == 0:
		ds.State, ds.Reason = StateNotCovered, "no baseline entry applies to it"
		return ds
	case task != nil:
		ds.State, ds.Reason = StateUpdating, fmt.Sprintf("firmware task %s is on it", task)
		return ds
	case d.Installed == nil:
		ds.State, ds.Reason = StateUnknown, "Core has not reported its installed versions"
		return ds
	case ev.StaleAfter > 0 && ev.Now.Sub(d.Installed.SeenAt) > ev.StaleAfter:
		ds.State = StateUnknown
		ds.Reason = fmt.Sprintf("not reported by Core since %s (more than %s ago)", d.Installed.SeenAt.UTC().Format(time.RFC3339), ev.StaleAfter)
		return ds
	}
	worst := StateCompliant
	for _, sub := range want.subs {
		diff := ev.compareSub(want.versions[sub], d.Installed.Versions[sub])
		if diff.State == StateCompliant {
			continue
		}
		diff.Component = sub
		ds.Differences = append(ds.Differences, diff)
		if stateRank(diff.State) < stateRank(worst) {
			worst = diff.State
		}
	}
	ds.State = worst
	if worst == StateUnknown {
		ds.Reason = "some sub-components cannot be compared"
	}
	return ds
}

// compareSub compares every installed instance of a sub-component with
// the desired version.
func (ev *Evaluator) compareSub(want string, installed []string) Difference {
	d := Difference{Desired: want, Installed: installed, State: StateCompliant}
	if len(installed) == 0 {
		d.State, d.Reason = StateUnknown, "not reported"
		return d
	}
	below, above, unordered := false, false, ""
	for _, v := range installed {
		c, ok := ev.compare(v, want)
		switch {
		case !ok:
			unordered = v
		case c < 0:
			below = true
		case c > 0:
			above = true
		}
	}
	switch {
	case below:
		d.State = StateUpgrade
	case above:
		d.State = StateDowngrade
	case unordered != "":
		d.State, d.Reason = StateUnknown, fmt.Sprintf("%q cannot be ordered against %q", unordered, want)
	}
	return d
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Counts counts devices by state.
type Counts struct {
	Total, Compliant, Upgrade, Downgrade, Unknown, Updating, NotCovered int
}

// Add counts one device of state.
func (c *Counts) Add(state string) {
	c.Total++
	switch state {
	case StateCompliant:
		c.Compliant++
	case StateUpgrade:
		c.Upgrade++
	case StateDowngrade:
		c.Downgrade++
	case StateUnknown:
		c.Unknown++
	case StateUpdating:
		c.Updating++
	case StateNotCovered:
		c.NotCovered++
	}
}

// Of returns the count of state.
func (c Counts) Of(state string) int {
	switch state {
	case StateCompliant:
		return c.Compliant
	case StateUpgrade:
		return c.Upgrade
	case StateDowngrade:
		return c.Downgrade
	case StateUnknown:
		return c.Unknown
	case StateUpdating:
		return c.Updating
	case StateNotCovered:
		return c.NotCovered
	}
	return 0
}

// State is the most urgent state counted ("" when none; not_covered only
// when nothing else is).
func (c Counts) State() string {
	for _, s := range States {
		if c.Of(s) > 0 {
			return s
		}
	}
	return ""
}

// Group kinds of a roll-up.
const (
	GroupRack   = "rack"
	GroupDomain = "nvl_domain"
	GroupRow    = "row"
	GroupHall   = "hall"
)

// Group is one roll-up: a rack, NVLink domain, row or hall.
type Group struct {
	Kind, Key, Name string
	Counts          Counts
}
