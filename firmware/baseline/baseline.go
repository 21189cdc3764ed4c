// Package baseline keeps the site's firmware baselines (named, revised sets
// of desired versions per component type and sub-component) and measures
// every device's installed firmware against the active one: the
// compliance report, its roll-ups and metrics, and the plan that brings the
// site to its baseline (docs/firmware.md).
//
// Service holds the rules and queries, Handler serves them on Flow's own
// AdminService (never in v1.Flow). Installed versions come from inventory
// (the inventory sync writes them), version order from
// firmware.CompareVersions, and "apply" plans through operations/rollout's
// exported API.
package baseline

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
)

// Sentinel errors; the handler maps them to Connect codes.
var (
	// ErrInvalid marks bad input; *FieldError wraps it.
	ErrInvalid = errors.New("baseline: invalid argument")
	// ErrNotFound: no baseline has the name or ID, or it has no such
	// revision.
	ErrNotFound = errors.New("baseline: not found")
	// ErrExists: a baseline already has the name.
	ErrExists = errors.New("baseline: already exists")
	// ErrStale: an edit based on a revision that is no longer the newest.
	ErrStale = errors.New("baseline: changed since it was read")
	// ErrNothingToImport: Core is not configured, or holds no desired
	// version Flow can use.
	ErrNothingToImport = errors.New("baseline: nothing to import")
	// ErrNoActive: no baseline is active and none was named.
	ErrNoActive = errors.New("baseline: no baseline is active")
)

// FieldError is bad input in one request field; it matches ErrInvalid.
type FieldError struct {
	Field, Reason string
}

// Error returns "field: reason".
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Is reports whether target is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// The component types a baseline speaks of, as the API and CLI spell them.
const (
	TypeCompute    = "compute"
	TypeNVSwitch   = "nvswitch"
	TypePowerShelf = "powershelf"
)

// SubComponents are the sub-components Core reports and updates per
// component type, in Core's names (forge.ComputeTrayComponent,
// NvSwitchComponent, PowerShelfComponent).
var SubComponents = map[string][]string{
	TypeCompute:    {"bmc", "bios", "cec", "nic", "cpld_mb", "cpld_pdb", "hgx_bmc", "combined_bmc_uefi", "gpu", "cx7"},
	TypeNVSwitch:   {"bmc", "cpld", "bios", "nvos"},
	TypePowerShelf: {"pmc", "psu"},
}

// Types lists the component types in report order.
var Types = []string{TypeCompute, TypeNVSwitch, TypePowerShelf}

// typeOf maps an inventory component type to a baseline type ("" none).
func typeOf(t inventory.ComponentType) string {
	switch t {
	case inventory.ComponentTypeCompute:
		return TypeCompute
	case inventory.ComponentTypeNVSwitch:
		return TypeNVSwitch
	case inventory.ComponentTypePowerShelf:
		return TypePowerShelf
	}
	return ""
}

// inventoryType maps a baseline type to the inventory's.
func inventoryType(t string) inventory.ComponentType {
	switch t {
	case TypeCompute:
		return inventory.ComponentTypeCompute
	case TypeNVSwitch:
		return inventory.ComponentTypeNVSwitch
	case TypePowerShelf:
		return inventory.ComponentTypePowerShelf
	}
	return ""
}

// ParseType reads a component type as users write it ("compute",
// "Compute", "nvswitch", "NVSwitch", "nvlswitch", "powershelf",
// "power-shelf"); ok is false for anything else.
func ParseType(s string) (string, bool) {
	switch strings.ReplaceAll(strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", ""), "_", "") {
	case "compute", "computetray":
		return TypeCompute, true
	case "nvswitch", "nvlswitch", "switch":
		return TypeNVSwitch, true
	case "powershelf", "shelf":
		return TypePowerShelf, true
	}
	return "", false
}

// Entry is one desired version of one sub-component of a component type,
// optionally narrowed to a vendor, a model or a rack profile ("" any).
type Entry struct {
	ComponentType string `json:"component_type"`
	Component     string `json:"component"`
	Version       string `json:"version"`
	Vendor        string `json:"vendor,omitempty"`
	Model         string `json:"model,omitempty"`
	RackProfile   string `json:"rack_profile,omitempty"`
}

// specificity ranks an entry for precedence: rack profile over model over
// vendor.
func (e Entry) specificity() int {
	n := 0
	if e.RackProfile != "" {
		n += 4
	}
	if e.Model != "" {
		n += 2
	}
	if e.Vendor != "" {
		n++
	}
	return n
}

// matches reports whether e applies to device d.
func (e Entry) matches(d *inventory.FirmwareDevice) bool {
	return (e.Vendor == "" || strings.EqualFold(e.Vendor, d.Manufacturer)) &&
		(e.Model == "" || e.Model == d.Model) &&
		(e.RackProfile == "" || e.RackProfile == d.RackProfile)
}

const maxEntries = 1000

// NormalizeEntries checks entries and returns them canonical (types and
// sub-components lowercased, fields trimmed) and sorted. Field paths in
// errors start with field ("entries").
func NormalizeEntries(field string, entries []Entry) ([]Entry, error) {
	if len(entries) == 0 {
		return nil, invalid(field, "a baseline names at least one sub-component version")
	}
	if len(entries) > maxEntries {
		return nil, invalid(field, "at most %d entries, got %d", maxEntries, len(entries))
	}
	out := make([]Entry, len(entries))
	type key struct{ t, c, v, m, p string }
	seen := map[key]int{}
	for i, e := range entries {
		f := fmt.Sprintf("%s[%d]", field, i)
		t, ok := ParseType(e.ComponentType)
		if !ok {
			return nil, invalid(f+".component_type", "unknown component type %q: give compute, nvswitch or powershelf", e.ComponentType)
		}
		c := strings.ToLower(strings.TrimSpace(e.Component))
		if !slices.Contains(SubComponents[t], c) {
			return nil, invalid(f+".component", "unknown %s sub-component %q: give one of %s", t, e.Component, strings.Join(SubComponents[t], ", "))
		}
		v := strings.TrimSpace(e.Version)
		if err := checkVersion(v); err != nil {
			return nil, invalid(f+".version", "%s", err)
		}
		n := Entry{ComponentType: t, Component: c, Version: v,
			Vendor: strings.TrimSpace(e.Vendor), Model: strings.TrimSpace(e.Model), RackProfile: strings.TrimSpace(e.RackProfile)}
		for name, val := range map[string]string{"vendor": n.Vendor, "model": n.Model, "rack_profile": n.RackProfile} {
			if len(val) > 128 {
				return nil, invalid(f+"."+name, "at most 128 characters")
			}
		}
		k := key{t, c, strings.ToLower(n.Vendor), n.Model, n.RackProfile}
		if j, dup := seen[k]; dup {
			return nil, invalid(f, "names the same %s %s (vendor %q, model %q, rack profile %q) as %s[%d]", t, c, n.Vendor, n.Model, n.RackProfile, field, j)
		}
		seen[k] = i
		out[i] = n
	}
	slices.SortStableFunc(out, func(a, b Entry) int {
		return strings.Compare(a.ComponentType+"\x00"+a.Component+"\x00"+a.Vendor+"\x00"+a.Model+"\x00"+a.RackProfile,
			b.ComponentType+"\x00"+b.Component+"\x00"+b.Vendor+"\x00"+b.Model+"\x00"+b.RackProfile)
	})
	return out, nil
}

// checkVersion refuses an empty or malformed version: one that holds no
// digit (so it cannot be ordered), control characters, or is too long.
func checkVersion(v string) error {
	switch {
	case v == "":
		return errors.New("is required")
	case len(v) > 64:
		return errors.New("at most 64 characters")
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("holds a control character")
	case !strings.ContainsAny(v, "0123456789"):
		return fmt.Errorf("%q holds no number, so no installed version can be ordered against it", v)
	}
	if c, ok := firmware.CompareVersions(v, v); !ok || c != 0 {
		return fmt.Errorf("%q cannot be ordered", v)
	}
	return nil
}

// Sources of a revision.
const (
	SourceManual = "manual"
	SourceCore   = "core"
)

// Revision is one revision's record.
type Revision struct {
	Revision    int
	Description string
	Source      string
	Entries     []Entry
	CreatedAt   time.Time
	CreatedBy   string
}

// Baseline is one revision of a baseline, with the baseline's newest
// revision and its activation.
type Baseline struct {
	ID             uuid.UUID
	Name           string
	LatestRevision int
	Revision
	// ActiveRevision is the revision that is the site's active baseline (0:
	// this baseline is not active).
	ActiveRevision int
	ActivatedAt    time.Time
	ActivatedBy    string
	// History is every revision, newest first, without entries (Get only).
	History []Revision
}

// CheckName refuses a name the store would: 1 to 63 letters, digits, '.',
// '_' and '-', starting with a letter or digit.
func CheckName(field, name string) error {
	if name == "" {
		return invalid(field, "is required")
	}
	if len(name) > 63 {
		return invalid(field, "at most 63 characters")
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '_' || r == '-')
		if !ok {
			return invalid(field, "%q: use letters, digits, '.', '_' and '-', starting with a letter or digit", name)
		}
	}
	return nil
}
