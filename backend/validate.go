package backend

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Position is a compute tray's place in its rack; -1 means unknown.
type Position struct {
	SlotID, TrayIndex, HostID int
}

// Expected is a component Flow's inventory expects.
type Expected struct {
	ID         string // Flow's component UUID
	Name       string
	Type       ComponentType
	BMCMAC     string // identity: BMC MAC (PMC MAC for shelves)
	Serial     string
	ExternalID string // the manager's ID, once linked
	Position   *Position
}

// Actual is a component as a component manager reports it.
type Actual struct {
	Type            ComponentType
	ExternalID      string // Core ID (PSM: PMC MAC)
	Name            string
	BMCMAC          string
	Serial          string
	FirmwareVersion string
	Position        *Position
}

// DiffType classifies a Diff; the numbers are v1.DiffType's.
type DiffType int

// The diff types.
const (
	DiffMissing    DiffType = 1 // expected, the manager lacks it
	DiffUnexpected DiffType = 2 // the manager has it, Flow does not expect it
	DiffMismatch   DiffType = 3 // both have it, fields differ
)

// FieldDiff is one differing field of a mismatch ("position.slot_id"…).
type FieldDiff struct {
	Field, Expected, Actual string
}

// Diff is one discrepancy. Expected is set for missing and mismatch, Actual
// for unexpected and mismatch; ComponentID is the manager's ID, ID Flow's,
// MAC the identity MAC.
type Diff struct {
	Type        DiffType
	ID          string
	ComponentID string
	MAC         string
	Expected    *Expected
	Actual      *Actual
	Fields      []FieldDiff
}

// ValidateOptions pages and orders the diff list. Limit 0 means no limit.
type ValidateOptions struct {
	Offset, Limit int
	Descending    bool // by name
}

// ValidateResult is one page of diffs and the counts over all of them.
type ValidateResult struct {
	Diffs                                       []Diff
	Total, Missing, Unexpected, Mismatch, Match int
}

// NormalizeMAC returns m lowercase and colon-separated, Flow's identity
// form.
func NormalizeMAC(m string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(m), "-", ":"))
}

// Validate compares the components Flow expects with those the managers
// report, matching by normalised BMC MAC (by external ID when a side has no
// MAC). It returns missing, unexpected and mismatch diffs — a mismatch is a
// differing component type, or for compute a differing known position —
// ordered by name (ties: type, Flow ID, manager ID, MAC) and then paged;
// the counts cover every diff. Match counts pairs with no differences.
func Validate(expected []Expected, actual []Actual, opts ValidateOptions) ValidateResult {
	byMAC := map[string]int{}
	byExt := map[string]int{}
	for i, a := range actual {
		if a.BMCMAC != "" {
			byMAC[NormalizeMAC(a.BMCMAC)] = i
		}
		if a.ExternalID != "" {
			byExt[a.ExternalID] = i
		}
	}
	used := make([]bool, len(actual))
	var res ValidateResult
	var diffs []Diff
	for i := range expected {
		e := &expected[i]
		ai, ok := -1, false
		if e.BMCMAC != "" {
			ai, ok = byMAC[NormalizeMAC(e.BMCMAC)]
		}
		if !ok && e.ExternalID != "" {
			ai, ok = byExt[e.ExternalID]
		}
		if !ok || used[ai] {
			diffs = append(diffs, Diff{Type: DiffMissing, ID: e.ID, ComponentID: e.ExternalID, MAC: NormalizeMAC(e.BMCMAC), Expected: e})
			res.Missing++
			continue
		}
		used[ai] = true
		a := &actual[ai]
		if fields := compare(e, a); len(fields) > 0 {
			diffs = append(diffs, Diff{Type: DiffMismatch, ID: e.ID, ComponentID: a.ExternalID, MAC: NormalizeMAC(e.BMCMAC), Expected: e, Actual: a, Fields: fields})
			res.Mismatch++
		} else {
			res.Match++
		}
	}
	for i := range actual {
		if !used[i] {
			a := &actual[i]
			diffs = append(diffs, Diff{Type: DiffUnexpected, ComponentID: a.ExternalID, MAC: NormalizeMAC(a.BMCMAC), Actual: a})
			res.Unexpected++
		}
	}
	slices.SortStableFunc(diffs, func(x, y Diff) int {
		c := strings.Compare(diffName(x), diffName(y))
		if opts.Descending {
			c = -c
		}
		return cmp.Or(c, cmp.Compare(x.Type, y.Type), strings.Compare(x.ID, y.ID), strings.Compare(x.ComponentID, y.ComponentID), strings.Compare(x.MAC, y.MAC))
	})
	res.Total = len(diffs)
	start := min(max(opts.Offset, 0), len(diffs))
	end := len(diffs)
	if opts.Limit > 0 {
		end = min(start+opts.Limit, len(diffs))
	}
	res.Diffs = diffs[start:end]
	return res
}

func diffName(d Diff) string {
	if d.Expected != nil {
		return d.Expected.Name
	}
	return cmp.Or(d.Actual.Name, d.Actual.ExternalID)
}

func compare(e *Expected, a *Actual) []FieldDiff {
	var out []FieldDiff
	if e.Type != "" && a.Type != "" && e.Type != a.Type {
		out = append(out, FieldDiff{Field: "type", Expected: string(e.Type), Actual: string(a.Type)})
	}
	if e.Type == Compute && e.Position != nil && a.Position != nil {
		for _, f := range []struct {
			name string
			x, y int
		}{
			{"position.slot_id", e.Position.SlotID, a.Position.SlotID},
			{"position.tray_index", e.Position.TrayIndex, a.Position.TrayIndex},
			{"position.host_id", e.Position.HostID, a.Position.HostID},
		} {
			if f.x >= 0 && f.y >= 0 && f.x != f.y {
				out = append(out, FieldDiff{Field: f.name, Expected: strconv.Itoa(f.x), Actual: strconv.Itoa(f.y)})
			}
		}
	}
	return out
}
