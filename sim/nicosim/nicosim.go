// Package nicosim is an in-memory NICo Core (forge.Forge) served over real
// gRPC, for tests, `flow dev` and `flow simulate`. It models per device what
// spec/southbound.md §7.1 lists (power with delayed transitions, firmware
// jobs, ingestion, decommission, health, expected inventory), drives every
// timed transition from an injectable sim.Clock, records a journal of calls
// and accepts faults (sim.Fault) from Go or from its admin HTTP surface.
package nicosim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/grpcreflect"

	"github.com/nicoflow/flow/proto/gen/forge/forgepbconnect"
	"github.com/nicoflow/flow/sim"
)

// Device kinds as seeded.
const (
	KindCompute    = "compute"
	KindNVSwitch   = "nvswitch"
	KindPowerShelf = "powershelf"
)

// Device is one simulated component as seeded. BMCMAC is the identity (PMC
// MAC for shelves); ID is Core's ID and is generated when empty.
type Device struct {
	Kind   string `json:"kind"` // compute, nvswitch or powershelf
	ID     string `json:"id,omitempty"`
	RackID string `json:"rack_id,omitempty"`
	Name   string `json:"name,omitempty"`
	Serial string `json:"serial,omitempty"`
	BMCMAC string `json:"bmc_mac"`
	BMCIP  string `json:"bmc_ip,omitempty"`
	// Firmware is the installed version of each firmware sub-component,
	// named as Core names them (SubComponents: compute "bmc", "bios",
	// "cec", "nic", "cpld_mb", "cpld_pdb", "gpu"; switches "bmc", "cpld",
	// "bios", "nvos"; shelves "pmc", "psu").
	Firmware map[string]string `json:"firmware,omitempty"`
	// Instances counts the sub-components the device has several of (a
	// compute tray's two NICs: {"nic": 2}); every instance runs Firmware's
	// version of it, and a version read lists one version per instance.
	Instances map[string]int `json:"instances,omitempty"`
	// Unreported makes Core unable to read the device's installed
	// versions: its version read answers an item error (UNAVAILABLE):
	// ListComponentFirmwareVersions for every kind, and for switches and
	// shelves GetComponentInventory too, where Core keeps their versions
	// (so their power and BMC firmware go unread as well).
	Unreported bool `json:"unreported,omitempty"`
	// PoweredOff starts the device off (default on).
	PoweredOff bool `json:"powered_off,omitempty"`
	// State overrides the lifecycle state: compute display state (default
	// "Ready") or switch/shelf controller JSON (default {"state":"ready"}).
	State string `json:"state,omitempty"`
	// AwaitingIngestion starts the device behind a closed ingestion gate
	// (WaitingForIngestion) instead of already ingested.
	AwaitingIngestion bool `json:"awaiting_ingestion,omitempty"`
	// Alerts are health alert IDs reported in the device's health.
	Alerts []string `json:"alerts,omitempty"`
	// SlotID, TrayIndex and HostID are the compute position (-1 unknown).
	SlotID    int `json:"slot_id,omitempty"`
	TrayIndex int `json:"tray_index,omitempty"`
	HostID    int `json:"host_id,omitempty"`
	// NVLinkDomain is the NMX-C cluster UUID a switch is observed in.
	NVLinkDomain string `json:"nvlink_domain,omitempty"`
	// DPUs are a compute tray's DPUs: FindMachinesByIds reports their IDs
	// on the host and serves them as DPU machines.
	DPUs []DPU `json:"dpus,omitempty"`
	// Expected also lists the device in GetAllExpectedMachines (…Switches,
	// …PowerShelves), as if it had been declared to Core, with Name,
	// Serial, RackID, BMCIP and the labels manufacturer, model, slot_id,
	// tray_idx and host_id (positions below zero are left out).
	Expected     bool   `json:"expected,omitempty"`
	Manufacturer string `json:"manufacturer,omitempty"`
	Model        string `json:"model,omitempty"`
}

// DPU is one DPU of a simulated compute tray.
type DPU struct {
	ID     string `json:"id"`
	BMCMAC string `json:"bmc_mac"`
	BMCIP  string `json:"bmc_ip,omitempty"`
}

// Options tunes a Sim. Zero values take the defaults shown.
type Options struct {
	Clock            sim.Clock     // sim.RealClock{}
	PowerDelay       time.Duration // 5s: time for a power change to take effect
	FirmwarePhase    time.Duration // 10s: time in each of QUEUED, IN_PROGRESS, VERIFYING
	IngestionStep    time.Duration // 10s: time in each ingestion state after the gate opens
	DecommissionStep time.Duration // 10s: time in each decommissioning sub-state
	MaxFindByIDs     uint32        // 0: unlimited
	BuildVersion     string        // "nicosim"
	FaultSeed        uint64        // seed for rate-based faults
}

// Sim is a simulated NICo Core. It is safe for concurrent use.
type Sim struct {
	// fwWindows are the machines' firmware update time windows
	// (SetFirmwareUpdateTimeWindow), by machine ID; under mu.
	fwWindows map[string]FirmwareWindow
	opts      Options
	clock     sim.Clock
	journal   sim.Journal
	faults    *sim.Faults

	mu       sync.Mutex
	devices  []*device      // in seed order
	macIndex map[string]int // normalized BMC MAC → index in devices
	idIndex  map[string]int // Core ID → index in devices
	racks    map[string]*rack
	nextID   map[string]int
	expected map[string]map[string]*expected // kind → lowercase MAC → entry
	dpuIndex map[string]dpuRef               // DPU machine ID → its host and place
	desired  []DesiredFirmware               // GetDesiredFirmwareVersions
}

type dpuRef struct {
	host *device
	i    int
}

type expected struct {
	mac, serial, rackID, ip, name string
	labels                        map[string]string
}

// expectedOfDevice is the expected entry a device declared with Expected
// stands for.
func expectedOfDevice(d Device) *expected {
	labels := map[string]string{}
	if d.Manufacturer != "" {
		labels["manufacturer"] = d.Manufacturer
	}
	if d.Model != "" {
		labels["model"] = d.Model
	}
	for k, v := range map[string]int{"slot_id": d.SlotID, "tray_idx": d.TrayIndex, "host_id": d.HostID} {
		if v >= 0 {
			labels[k] = fmt.Sprint(v)
		}
	}
	return &expected{mac: d.BMCMAC, serial: d.Serial, rackID: d.RackID, ip: d.BMCIP, name: d.Name, labels: labels}
}

type powerStep struct {
	at time.Time
	on bool
}

type job struct {
	component, target string // target: this component's version
	created           time.Time
	failPhase         string // "" or a phase name
	stuckPhase        string
	cancelPhase       string
	message           string
	applied           bool
	lie               bool // ends COMPLETED, installs nothing (sim.FaultLie)
}

type device struct {
	Device
	on            bool
	steps         []powerStep
	jobs          []*job // the latest request's jobs
	gateOpen      bool
	gateAt        time.Time
	decomAt       time.Time
	decomming     bool
	decomStuck    bool
	decomFail     bool
	controllerRaw string // lifecycle state before decommission
	// healthAt is when the device's health last changed: the report's
	// observed_at, so an unchanged device reports an unchanged report.
	healthAt time.Time
	// versionsReply is the device's part of a ListComponentFirmwareVersions
	// reply, built once and dropped when its firmware changes (a sync
	// reads every device's versions every cycle).
	versionsReply *versionsReply
}

// New returns an empty simulator.
func New(opts Options) *Sim {
	opts.Clock = cmp.Or[sim.Clock](opts.Clock, sim.RealClock{})
	opts.PowerDelay = cmp.Or(opts.PowerDelay, 5*time.Second)
	opts.FirmwarePhase = cmp.Or(opts.FirmwarePhase, 10*time.Second)
	opts.IngestionStep = cmp.Or(opts.IngestionStep, 10*time.Second)
	opts.DecommissionStep = cmp.Or(opts.DecommissionStep, 10*time.Second)
	opts.BuildVersion = cmp.Or(opts.BuildVersion, "nicosim")
	return &Sim{
		opts:     opts,
		clock:    opts.Clock,
		faults:   sim.NewFaults(opts.FaultSeed),
		nextID:   map[string]int{},
		macIndex: map[string]int{},
		idIndex:  map[string]int{},
		racks:    map[string]*rack{},
		dpuIndex: map[string]dpuRef{},
		expected: map[string]map[string]*expected{KindCompute: {}, KindNVSwitch: {}, KindPowerShelf: {}},
	}
}

// Journal returns the record of calls received.
func (s *Sim) Journal() *sim.Journal { return &s.journal }

// Faults returns the active fault set; add to it to inject faults.
func (s *Sim) Faults() *sim.Faults { return s.faults }

// Handler serves forge.Forge over gRPC, gRPC-Web and Connect, gRPC
// reflection (v1 and v1alpha) and the admin surface under /admin/.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(forgepbconnect.NewForgeHandler(&handler{s: s}))
	reflector := grpcreflect.NewStaticReflector(forgepbconnect.ForgeName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	mux.Handle("/admin/", sim.AdminHandler(s))
	return sim.Garble(s.faults, &s.journal, s.clock, mux)
}

func normMAC(m string) string { return strings.ToLower(strings.ReplaceAll(m, "-", ":")) }

func validKind(k string) bool { return k == KindCompute || k == KindNVSwitch || k == KindPowerShelf }

// Seed adds devices, replacing any device with the same BMC MAC. It fails,
// adding nothing, when a device has an unknown kind or no BMC MAC.
func (s *Sim) Seed(devs []Device) error {
	for i, d := range devs {
		if !validKind(d.Kind) {
			return fmt.Errorf("nicosim: device %d: unknown kind %q (want compute, nvswitch or powershelf)", i, d.Kind)
		}
		if d.BMCMAC == "" {
			return fmt.Errorf("nicosim: device %d: bmc_mac is required", i)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range devs {
		s.upsert(d)
	}
	return nil
}

// SeedJSON is Seed from a JSON list of Device.
func (s *Sim) SeedJSON(data []byte) error {
	var devs []Device
	if err := json.Unmarshal(data, &devs); err != nil {
		return fmt.Errorf("nicosim: seed: %w", err)
	}
	return s.Seed(devs)
}

func (s *Sim) upsert(d Device) *device {
	d.Firmware = maps.Clone(d.Firmware)
	d.Instances = maps.Clone(d.Instances)
	d.DPUs = slices.Clone(d.DPUs)
	if d.Expected {
		s.expected[d.Kind][normMAC(d.BMCMAC)] = expectedOfDevice(d)
	}
	if d.Firmware == nil {
		d.Firmware = map[string]string{}
	}
	if d.ID == "" {
		if old := s.byMAC(d.BMCMAC); old != nil && old.Kind == d.Kind {
			d.ID = old.ID
		} else {
			s.nextID[d.Kind]++
			prefix := map[string]string{KindCompute: "machine", KindNVSwitch: "switch", KindPowerShelf: "shelf"}[d.Kind]
			d.ID = fmt.Sprintf("%s-%04d", prefix, s.nextID[d.Kind])
		}
	}
	if d.State == "" {
		d.State = "Ready"
		if d.Kind != KindCompute {
			d.State = `{"state":"ready"}`
		}
	}
	nd := &device{Device: d, on: !d.PoweredOff, gateOpen: !d.AwaitingIngestion, healthAt: s.clock.Now().UTC().Truncate(time.Second)}
	// The indexes keep seeding and lookups linear in a fleet of tens of
	// thousands of devices (flow bench).
	if i, ok := s.macIndex[normMAC(d.BMCMAC)]; ok {
		delete(s.idIndex, s.devices[i].ID)
		for _, p := range s.devices[i].DPUs {
			delete(s.dpuIndex, p.ID)
		}
		s.devices[i] = nd
		s.idIndex[d.ID] = i
	} else {
		s.macIndex[normMAC(d.BMCMAC)] = len(s.devices)
		s.idIndex[d.ID] = len(s.devices)
		s.devices = append(s.devices, nd)
	}
	for k, p := range nd.DPUs {
		s.dpuIndex[p.ID] = dpuRef{host: nd, i: k}
	}
	return nd
}

// Remove deletes the device with the given ID or MAC, as if it vanished from
// Core, with its expected entry (GetAllExpected… no longer lists it), and
// reports whether either existed. Rather than SeedRacks, RemoveRack takes
// racks away.
func (s *Sim) Remove(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	mac, found := normMAC(key), false
	for i, d := range s.devices {
		if d.ID == key || normMAC(d.BMCMAC) == mac {
			mac, found = normMAC(d.BMCMAC), true
			s.devices = slices.Delete(s.devices, i, i+1)
			s.reindex()
			break
		}
	}
	for _, byMAC := range s.expected {
		if _, ok := byMAC[mac]; ok {
			delete(byMAC, mac)
			found = true
		}
	}
	return found
}

func (s *Sim) reindex() {
	clear(s.macIndex)
	clear(s.idIndex)
	clear(s.dpuIndex)
	for k, d := range s.devices {
		s.macIndex[normMAC(d.BMCMAC)] = k
		s.idIndex[d.ID] = k
		for i, p := range d.DPUs {
			s.dpuIndex[p.ID] = dpuRef{host: d, i: i}
		}
	}
}

func (s *Sim) byMAC(mac string) *device {
	if i, ok := s.macIndex[normMAC(mac)]; ok {
		return s.devices[i]
	}
	return nil
}

func (s *Sim) byID(kind, id string) *device {
	i, ok := s.idIndex[id]
	if !ok {
		return nil
	}
	if kind == "" || s.devices[i].Kind == kind {
		return s.devices[i]
	}
	// Seeded IDs may repeat across kinds; the index holds the last one.
	for _, d := range s.devices {
		if d.ID == id && (kind == "" || d.Kind == kind) {
			return d
		}
	}
	return nil
}

// DeviceState is a device as the simulator sees it now.
type DeviceState struct {
	Device
	Power     string   `json:"power"`     // on, off, powering_on, powering_off
	Ingestion string   `json:"ingestion"` // MachineIngestionState name
	Jobs      []string `json:"jobs,omitempty"`
}

// Devices returns every device's current state, in seed order.
func (s *Sim) Devices() any { return s.States() }

// States returns every device's current state, in seed order.
func (s *Sim) States() []DeviceState {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	out := make([]DeviceState, 0, len(s.devices))
	for _, d := range s.devices {
		out = append(out, s.state(d, now))
	}
	return out
}

// State returns the current state of the device with the given ID or MAC.
func (s *Sim) State(key string) (DeviceState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.byID("", key)
	if d == nil {
		d = s.byMAC(key)
	}
	if d == nil {
		return DeviceState{}, false
	}
	return s.state(d, s.clock.Now()), true
}

func (s *Sim) state(d *device, now time.Time) DeviceState {
	s.advance(d, now)
	st := DeviceState{Device: d.Device, Power: d.powerName(now), Ingestion: s.ingestion(d, now)}
	st.Firmware = maps.Clone(d.Firmware)
	st.State = d.lifecycle(s, now)
	for _, j := range d.jobs {
		state, _ := s.jobState(j, now)
		st.Jobs = append(st.Jobs, j.component+"="+state)
	}
	return st
}

// advance applies every timed transition of d that is due at now.
func (s *Sim) advance(d *device, now time.Time) {
	for len(d.steps) > 0 && !d.steps[0].at.After(now) {
		d.on = d.steps[0].on
		d.steps = d.steps[1:]
	}
	for _, j := range d.jobs {
		if state, _ := s.jobState(j, now); state == phaseCompleted && !j.applied {
			if !j.lie {
				d.Firmware[j.component] = j.target
				d.versionsReply = nil
			}
			j.applied = true
		}
	}
}

func (d *device) powerName(now time.Time) string {
	if len(d.steps) > 0 {
		if d.steps[0].on {
			return "powering_on"
		}
		return "powering_off"
	}
	if d.on {
		return "on"
	}
	return "off"
}

// schedulePower queues the steps of a power action from now.
func (s *Sim) schedulePower(d *device, now time.Time, steps ...bool) {
	d.steps = nil
	for i, on := range steps {
		d.steps = append(d.steps, powerStep{at: now.Add(time.Duration(i+1) * s.opts.PowerDelay), on: on})
	}
}

// Firmware job phases.
const (
	phaseQueued     = "queued"
	phaseInProgress = "in_progress"
	phaseVerifying  = "verifying"
	phaseCompleted  = "completed"
	phaseFailed     = "failed"
	phaseCancelled  = "cancelled"
)

var phases = []string{phaseQueued, phaseInProgress, phaseVerifying, phaseCompleted}

// jobState returns the job's phase at now and, for a failed job, its error.
func (s *Sim) jobState(j *job, now time.Time) (string, string) {
	idx := min(int(now.Sub(j.created)/s.opts.FirmwarePhase), len(phases)-1)
	for i := 0; i <= idx; i++ {
		p := phases[i]
		switch p {
		case j.failPhase:
			return phaseFailed, cmp.Or(j.message, "firmware update failed in "+p)
		case j.cancelPhase:
			return phaseCancelled, cmp.Or(j.message, "firmware update cancelled")
		case j.stuckPhase:
			return p, ""
		}
	}
	return phases[idx], ""
}

// lifecycle returns the display state (compute) or controller JSON
// (switches, shelves), decommissioning included.
func (d *device) lifecycle(s *Sim, now time.Time) string {
	if !d.decomming {
		return d.State
	}
	sub := []string{"started", "erasing", "decommissioned"}
	idx := min(int(now.Sub(d.decomAt)/s.opts.DecommissionStep), len(sub)-1)
	if d.decomStuck {
		idx = 0
	}
	if d.decomFail && idx > 0 {
		if d.Kind == KindCompute {
			return "Failed/Decommissioning"
		}
		return `{"state":"error"}`
	}
	if d.Kind == KindCompute {
		names := []string{"Decommissioning/WaitingForCleanup", "Decommissioning/Erasing", "Decommissioning/Decommissioned"}
		return names[idx]
	}
	return fmt.Sprintf(`{"state":"decommissioning","decommissioning_state":{"state":%q}}`, sub[idx])
}

func (d *device) ready(s *Sim, now time.Time) bool {
	st := d.lifecycle(s, now)
	if d.Kind == KindCompute {
		return st == "Ready"
	}
	var v struct {
		State string `json:"state"`
	}
	return json.Unmarshal([]byte(st), &v) == nil && v.State == "ready"
}

// ingestion returns the MachineIngestionState name of d at now.
func (s *Sim) ingestion(d *device, now time.Time) string {
	if !d.gateOpen {
		return "WaitingForIngestion"
	}
	if d.gateAt.IsZero() {
		return "IngestionMachineCreated"
	}
	switch n := now.Sub(d.gateAt) / s.opts.IngestionStep; {
	case n < 1:
		return "WaitingForIngestion"
	case n < 2:
		return "IngestionMachineNotCreated"
	}
	return "IngestionMachineCreated"
}

// errNoDevice is returned by lookups that name an unknown device.
var errNoDevice = sim.ErrNoDevice
