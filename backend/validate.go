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
	// FirmwareVersion is the version inventory sync keeps (the BMC's; PMC
	// for shelves); empty means unknown.
	FirmwareVersion string
	Position        *Position
}

// Actual is a component as a component manager reports it. Empty fields
// are unknown and never compared.
type Actual struct {
	Type            ComponentType
	ExternalID      string // Core ID (PSM: PMC MAC)
	Name            string
	BMCMAC          string
	Serial          string
	FirmwareVersion string
	RackID          string // Core's rack ID (switches and Core shelves only)
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

// ValidateOptions scopes, pages and orders the diff list. Limit 0 means no
// limit.
type ValidateOptions struct {
	Offset, Limit int
	// OrderByType sorts by component type before name; otherwise by name.
	OrderByType bool
	Descending  bool
	// InScope, when set, keeps only the missing and mismatch diffs (and
	// matches) of the expected components it accepts. Matching still uses
	// every expected component, so a device that belongs to an out-of-scope
	// component is never unexpected.
	InScope func(*Expected) bool
	// KeepUnexpected, when set, keeps only the unexpected devices it
	// accepts.
	KeepUnexpected func(*Actual) bool
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
// report, matching by normalised BMC MAC, or by external ID when the MAC
// finds nothing. It returns missing, unexpected and mismatch diffs — a
// mismatch is a differing component type, manager ID, BMC MAC (when matched
// by ID), serial number or firmware version, or for compute a differing
// known position; a field empty or unknown on either side is not compared —
// ordered by name (or type, then name; ties: type, Flow ID, manager ID, MAC)
// and then paged; the counts cover every diff in scope. Match counts
// in-scope pairs with no differences.
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
		if ok && used[ai] {
			ok = false
		}
		if ok {
			used[ai] = true
		}
		if opts.InScope != nil && !opts.InScope(e) {
			continue
		}
		if !ok {
			diffs = append(diffs, Diff{Type: DiffMissing, ID: e.ID, ComponentID: e.ExternalID, MAC: NormalizeMAC(e.BMCMAC), Expected: e})
			res.Missing++
			continue
		}
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
			if opts.KeepUnexpected != nil && !opts.KeepUnexpected(a) {
				continue
			}
			diffs = append(diffs, Diff{Type: DiffUnexpected, ComponentID: a.ExternalID, MAC: NormalizeMAC(a.BMCMAC), Actual: a})
			res.Unexpected++
		}
	}
	slices.SortStableFunc(diffs, func(x, y Diff) int {
		c := strings.Compare(diffName(x), diffName(y))
		if opts.OrderByType {
			c = cmp.Or(strings.Compare(string(diffType(x)), string(diffType(y))), c)
		}
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

func diffType(d Diff) ComponentType {
	if d.Expected != nil {
		return d.Expected.Type
	}
	return d.Actual.Type
}

func diffName(d Diff) string {
	if d.Expected != nil {
		return d.Expected.Name
	}
	return cmp.Or(d.Actual.Name, d.Actual.ExternalID)
}

func compare(e *Expected, a *Actual) []FieldDiff {
	var out []FieldDiff
	str := func(field, x, y string) {
		if x != "" && y != "" && x != y {
			out = append(out, FieldDiff{Field: field, Expected: x, Actual: y})
		}
	}
	str("type", string(e.Type), string(a.Type))
	// PSM keys shelves by PMC MAC; its "ID" says nothing about Core's.
	if NormalizeMAC(a.ExternalID) != NormalizeMAC(a.BMCMAC) {
		str("component_id", e.ExternalID, a.ExternalID)
	}
	// Matched by manager ID, so Core knows the device under another MAC.
	str("bmcs.mac_address", NormalizeMAC(e.BMCMAC), NormalizeMAC(a.BMCMAC))
	str("serial_number", e.Serial, a.Serial)
	str("firmware_version", e.FirmwareVersion, a.FirmwareVersion)
	if e.Type == Compute && e.Position != nil && a.Position != nil {
		for _, f := range []struct {
			name string
			x, y int
		}{
			{"position.slot_id", e.Position.SlotID, a.Position.SlotID},
			{"position.tray_idx", e.Position.TrayIndex, a.Position.TrayIndex},
			{"position.host_id", e.Position.HostID, a.Position.HostID},
		} {
			if f.x >= 0 && f.y >= 0 && f.x != f.y {
				out = append(out, FieldDiff{Field: f.name, Expected: strconv.Itoa(f.x), Actual: strconv.Itoa(f.y)})
			}
		}
	}
	return out
}
