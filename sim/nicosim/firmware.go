package nicosim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nicoflow/flow/nico"
	forgepb "github.com/nicoflow/flow/proto/gen/forge"
)

// subComponents are the firmware sub-components a GB200 device of each
// kind carries, as Core names them; a compute tray has two NICs.
var subComponents = map[string][]string{
	KindCompute:    {"bmc", "bios", "cec", "nic", "cpld_mb", "cpld_pdb", "gpu"},
	KindNVSwitch:   {"bmc", "cpld", "bios", "nvos"},
	KindPowerShelf: {"pmc", "psu"},
}

// updatable are the sub-components an update of each kind may name: what
// Core accepts.
var updatable = map[string][]string{
	KindCompute:    nico.FirmwareComponents(nico.KindCompute),
	KindNVSwitch:   nico.FirmwareComponents(nico.KindSwitch),
	KindPowerShelf: nico.FirmwareComponents(nico.KindPowerShelf),
}

// SubComponents returns the firmware sub-components a realistic simulated
// device of kind carries (compute: bmc, bios, cec, nic, cpld_mb, cpld_pdb,
// gpu; nvswitch: bmc, cpld, bios, nvos; powershelf: pmc, psu), for
// Device.Firmware. The simulator itself adds none: a device carries what
// it was seeded with.
func SubComponents(kind string) []string { return slices.Clone(subComponents[kind]) }

// DefaultInstances returns Device.Instances for a realistic device of
// kind: a compute tray's two NICs; nil for the other kinds.
func DefaultInstances(kind string) map[string]int {
	if kind == KindCompute {
		return map[string]int{"nic": 2}
	}
	return nil
}

// versions returns the installed versions of sub-component c of d, one
// per instance (nil when d does not carry c).
func (d *device) versions(c string) []string {
	v, ok := d.Firmware[c]
	if !ok {
		return nil
	}
	n := max(d.Instances[c], 1)
	out := make([]string, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// versionsReply is a device's installed versions as a
// ListComponentFirmwareVersions reply holds them: for a compute tray the
// per-sub-component list (compute_fw_versions; the simulator models no
// bundle version of the tray as a whole), for a switch or shelf
// "component=version" for each instance (versions). Replies share it;
// nothing changes it once built.
type versionsReply struct {
	versions []string
	compute  []*forgepb.ComputeTrayFirmwareVersions
}

// versionsOf returns d's versionsReply, built when its firmware changed.
func (d *device) versionsOf() *versionsReply {
	if d.versionsReply != nil {
		return d.versionsReply
	}
	r := &versionsReply{}
	for _, c := range slices.Sorted(maps.Keys(d.Firmware)) {
		vs := d.versions(c)
		if d.Kind != KindCompute {
			for _, v := range vs {
				r.versions = append(r.versions, c+"="+v)
			}
		} else if v, ok := computeFwComponent[c]; ok {
			r.compute = append(r.compute, &forgepb.ComputeTrayFirmwareVersions{Component: v, Versions: vs})
		}
	}
	d.versionsReply = r
	return r
}

// DesiredFirmware is one entry of the desired versions the simulator
// holds and serves (GetDesiredFirmwareVersions): for devices of Vendor
// and Model, the version of each sub-component.
type DesiredFirmware struct {
	Vendor     string            `json:"vendor,omitempty"`
	Model      string            `json:"model,omitempty"`
	Components map[string]string `json:"components"`
}

// SetDesiredFirmware replaces the desired versions the simulator holds.
// It fails, changing nothing, when an entry names no sub-component or one
// with an empty name or version.
func (s *Sim) SetDesiredFirmware(entries []DesiredFirmware) error {
	out := make([]DesiredFirmware, 0, len(entries))
	for i, e := range entries {
		if len(e.Components) == 0 {
			return fmt.Errorf("nicosim: desired firmware entry %d: components is required", i)
		}
		for c, v := range e.Components {
			if strings.TrimSpace(c) == "" || strings.TrimSpace(v) == "" {
				return fmt.Errorf("nicosim: desired firmware entry %d: empty sub-component or version (%q: %q)", i, c, v)
			}
		}
		e.Components = maps.Clone(e.Components)
		out = append(out, e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.desired = out
	return nil
}

// DesiredFirmware returns the desired versions the simulator holds.
func (s *Sim) DesiredFirmware() []DesiredFirmware {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]DesiredFirmware, len(s.desired))
	for i, e := range s.desired {
		out[i] = DesiredFirmware{Vendor: e.Vendor, Model: e.Model, Components: maps.Clone(e.Components)}
	}
	return out
}

// DesiredFirmwareJSON is DesiredFirmware for the admin surface.
func (s *Sim) DesiredFirmwareJSON() any { return s.DesiredFirmware() }

// SetDesiredFirmwareJSON is SetDesiredFirmware from a JSON list of
// DesiredFirmware.
func (s *Sim) SetDesiredFirmwareJSON(data []byte) error {
	var entries []DesiredFirmware
	if err := json.Unmarshal(data, &entries); err != nil {
		return fmt.Errorf("nicosim: desired firmware: %w", err)
	}
	return s.SetDesiredFirmware(entries)
}

func (h *handler) GetDesiredFirmwareVersions(ctx context.Context, _ *forgepb.GetDesiredFirmwareVersionsRequest) (res *forgepb.GetDesiredFirmwareVersionsResponse, err error) {
	const method = "GetDesiredFirmwareVersions"
	defer h.end(method, nil, &err)
	if err := h.begin(ctx, method, nil); err != nil {
		return nil, err
	}
	res = &forgepb.GetDesiredFirmwareVersionsResponse{}
	for _, e := range h.s.DesiredFirmware() {
		res.Entries = append(res.Entries, &forgepb.DesiredFirmwareVersionEntry{Vendor: e.Vendor, Model: e.Model, ComponentVersions: e.Components})
	}
	return res, nil
}

// firmwarePlan is what an UpdateComponentFirmware request installs: one
// version for every component (a plain target_version), or each named
// sub-component at its own version (a JSON-object target_version such as
// {"bmc":"2.0","bios":"3.1"}).
type firmwarePlan struct {
	version string
	each    map[string]string // nil: version for every component
}

// parsePlan reads target_version. A value that starts with "{" must be a
// JSON object of sub-component to non-empty version; with components
// named, the object must name exactly those.
func parsePlan(target string, named []string) (firmwarePlan, error) {
	t := strings.TrimSpace(target)
	if !strings.HasPrefix(t, "{") {
		if t == "" {
			t = "latest"
		}
		return firmwarePlan{version: t}, nil
	}
	var raw map[string]string
	if err := json.Unmarshal([]byte(t), &raw); err != nil {
		return firmwarePlan{}, errInvalid("target_version: a JSON object of sub-component to version, such as {\"bmc\":\"2.0\"}: " + err.Error())
	}
	if len(raw) == 0 {
		return firmwarePlan{}, errInvalid("target_version: the JSON object names no sub-component")
	}
	each := make(map[string]string, len(raw))
	for c, v := range raw {
		if strings.TrimSpace(v) == "" {
			return firmwarePlan{}, errInvalid(fmt.Sprintf("target_version: sub-component %q has an empty version", c))
		}
		each[strings.ToLower(c)] = v
	}
	if len(named) > 0 {
		if !slices.Equal(slices.Sorted(maps.Keys(each)), sortedUnique(named)) {
			return firmwarePlan{}, errInvalid(fmt.Sprintf("target_version names %s, the request's components %s: they must be the same",
				strings.Join(slices.Sorted(maps.Keys(each)), ","), strings.Join(sortedUnique(named), ",")))
		}
	}
	return firmwarePlan{each: each}, nil
}

func sortedUnique(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}

// check fails when the plan names a sub-component a device of kind does
// not take (a rack target skips those per device instead).
func (p firmwarePlan) check(kind string) error {
	for c := range p.each {
		if !slices.Contains(updatable[kind], c) {
			return errInvalid(fmt.Sprintf("target_version: %s is not a %s firmware sub-component (%s)", c, kind, strings.Join(updatable[kind], ", ")))
		}
	}
	return nil
}

// jobs returns the sub-components to update on a device of kind, in a
// fixed order, and the version of each: the named ones (else the kind's
// default bundle) for a plain version, the object's for a JSON object
// (those the kind takes).
func (p firmwarePlan) jobs(kind string, named []string) ([]string, func(string) string) {
	if p.each == nil {
		return orDefault(named, defaultBundle[kind]), func(string) string { return p.version }
	}
	var cs []string
	for _, c := range slices.Sorted(maps.Keys(p.each)) {
		if slices.Contains(updatable[kind], c) {
			cs = append(cs, c)
		}
	}
	return cs, func(c string) string { return p.each[c] }
}

// errUnreported is the item error a version read answers for an
// Unreported device.
var errUnreported = errors.New("firmware inventory unavailable: the device's versions could not be read")
