// Package psmsim is an in-memory Powershelf Manager (v1.PowershelfManager)
// served over real gRPC. It models what spec/southbound.md §7.2 lists:
// shelves keyed by PMC MAC with PSUs that switch after a delay, idempotent
// registration, and one firmware job per (MAC, component) that a worker
// advances QUEUED → VERIFYING → COMPLETED on a timer (driven by sim.Clock),
// failing after a state lasts too long. Per-item problems are reported in
// status fields, never as gRPC errors (faults aside).
package psmsim

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	psmv1 "github.com/nicoflow/flow/proto/gen/psm/v1"
	"github.com/nicoflow/flow/proto/gen/psm/v1/psmv1connect"
	"github.com/nicoflow/flow/sim"
)

// Shelf is one simulated power shelf as seeded.
type Shelf struct {
	MAC           string `json:"pmc_mac"`
	IP            string `json:"pmc_ip,omitempty"`
	Vendor        string `json:"vendor,omitempty"` // liteon (default) or delta
	PMCSerial     string `json:"pmc_serial,omitempty"`
	ChassisSerial string `json:"serial,omitempty"`
	Model         string `json:"model,omitempty"`
	Firmware      string `json:"firmware,omitempty"`     // PMC version
	PSUFirmware   string `json:"psu_firmware,omitempty"` // every PSU's version
	PSUs          int    `json:"psus,omitempty"`         // default 6
	PoweredOff    bool   `json:"powered_off,omitempty"`
	// Unregistered seeds a shelf PSM has not been told about yet.
	Unregistered bool `json:"unregistered,omitempty"`
}

// Options tunes a Sim; zero values take the defaults shown.
type Options struct {
	Clock      sim.Clock     // sim.RealClock{}
	PowerDelay time.Duration // 5s
	JobStep    time.Duration // 30s: the worker's tick, time spent in QUEUED and in VERIFYING
	JobTimeout time.Duration // 1h: a job longer than this in one state fails
	Available  []string      // PMC versions ListAvailableFirmware offers; default ["1.0.0", "2.0.0"]
	FaultSeed  uint64
}

// Sim is a simulated PSM. It is safe for concurrent use.
type Sim struct {
	opts    Options
	clock   sim.Clock
	journal sim.Journal
	faults  *sim.Faults

	mu       sync.Mutex
	shelves  []*shelf
	macIndex map[string]int // normalized PMC MAC → index in shelves
}

type job struct {
	target    string
	created   time.Time
	stuck     string // phase the job never leaves
	failPhase string
	applied   bool
}

type shelf struct {
	Shelf
	registered time.Time
	psus       []bool
	steps      []step
	jobs       map[psmv1.PowershelfComponent]*job
}

type step struct {
	at time.Time
	on []bool
}

// New returns an empty simulator.
func New(opts Options) *Sim {
	opts.Clock = cmp.Or[sim.Clock](opts.Clock, sim.RealClock{})
	opts.PowerDelay = cmp.Or(opts.PowerDelay, 5*time.Second)
	opts.JobStep = cmp.Or(opts.JobStep, 30*time.Second)
	opts.JobTimeout = cmp.Or(opts.JobTimeout, time.Hour)
	if len(opts.Available) == 0 {
		opts.Available = []string{"1.0.0", "2.0.0"}
	}
	return &Sim{opts: opts, clock: opts.Clock, faults: sim.NewFaults(opts.FaultSeed), macIndex: map[string]int{}}
}

// Journal returns the record of calls received.
func (s *Sim) Journal() *sim.Journal { return &s.journal }

// Faults returns the active fault set.
func (s *Sim) Faults() *sim.Faults { return s.faults }

// Handler serves v1.PowershelfManager over gRPC, gRPC-Web and Connect, gRPC
// reflection, and the admin surface under /admin/.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(psmv1connect.NewPowershelfManagerHandler(&handler{s: s}))
	reflector := grpcreflect.NewStaticReflector(psmv1connect.PowershelfManagerName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	mux.Handle("/admin/", sim.AdminHandler(s))
	return sim.Garble(s.faults, &s.journal, s.clock, mux)
}

func norm(mac string) string { return strings.ToLower(strings.ReplaceAll(mac, "-", ":")) }

// Seed adds shelves, replacing any with the same MAC. It fails, adding
// nothing, when a shelf has no MAC.
func (s *Sim) Seed(shelves []Shelf) error {
	for i, sh := range shelves {
		if sh.MAC == "" {
			return fmt.Errorf("psmsim: shelf %d: pmc_mac is required", i)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for _, sh := range shelves {
		s.upsert(sh, now)
	}
	return nil
}

// SeedJSON is Seed from a JSON list of Shelf.
func (s *Sim) SeedJSON(data []byte) error {
	var shelves []Shelf
	if err := json.Unmarshal(data, &shelves); err != nil {
		return fmt.Errorf("psmsim: seed: %w", err)
	}
	return s.Seed(shelves)
}

func (s *Sim) upsert(sh Shelf, now time.Time) *shelf {
	sh.PSUs = cmp.Or(sh.PSUs, 6)
	sh.Firmware = cmp.Or(sh.Firmware, "1.0.0")
	sh.PSUFirmware = cmp.Or(sh.PSUFirmware, "1.0.0")
	sh.Vendor = cmp.Or(sh.Vendor, "liteon")
	n := &shelf{Shelf: sh, psus: make([]bool, sh.PSUs), jobs: map[psmv1.PowershelfComponent]*job{}}
	for i := range n.psus {
		n.psus[i] = !sh.PoweredOff
	}
	if !sh.Unregistered {
		n.registered = now
	}
	// The index keeps seeding and lookups linear in a large fleet.
	if i, ok := s.macIndex[norm(sh.MAC)]; ok {
		s.shelves[i] = n
		return n
	}
	s.macIndex[norm(sh.MAC)] = len(s.shelves)
	s.shelves = append(s.shelves, n)
	return n
}

// Remove deletes the shelf with the MAC and reports whether it existed.
func (s *Sim) Remove(mac string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, sh := range s.shelves {
		if norm(sh.MAC) == norm(mac) {
			s.shelves = slices.Delete(s.shelves, i, i+1)
			clear(s.macIndex)
			for k, sh := range s.shelves {
				s.macIndex[norm(sh.MAC)] = k
			}
			return true
		}
	}
	return false
}

func (s *Sim) find(mac string) *shelf {
	if i, ok := s.macIndex[norm(mac)]; ok && !s.shelves[i].registered.IsZero() {
		return s.shelves[i]
	}
	return nil
}

// ShelfState is a shelf as the simulator sees it now.
type ShelfState struct {
	Shelf
	PSUPower []bool            `json:"psu_power"`
	Jobs     map[string]string `json:"jobs,omitempty"` // component → state
}

// Devices returns every shelf's current state.
func (s *Sim) Devices() any { return s.States() }

// States returns every shelf's current state, in seed order.
func (s *Sim) States() []ShelfState {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var out []ShelfState
	for _, sh := range s.shelves {
		s.advance(sh, now)
		st := ShelfState{Shelf: sh.Shelf, PSUPower: slices.Clone(sh.psus), Jobs: map[string]string{}}
		for c, j := range sh.jobs {
			st.Jobs[strings.ToLower(c.String())] = s.jobState(j, now).String()
		}
		out = append(out, st)
	}
	return out
}

// State returns one shelf's current state by MAC.
func (s *Sim) State(mac string) (ShelfState, bool) {
	for _, st := range s.States() {
		if norm(st.MAC) == norm(mac) {
			return st, true
		}
	}
	return ShelfState{}, false
}

func (s *Sim) advance(sh *shelf, now time.Time) {
	for len(sh.steps) > 0 && !sh.steps[0].at.After(now) {
		sh.psus = sh.steps[0].on
		sh.steps = sh.steps[1:]
	}
	for c, j := range sh.jobs {
		if s.jobState(j, now) == psmv1.FirmwareUpdateState_FIRMWARE_UPDATE_STATE_COMPLETED && !j.applied {
			j.applied = true
			if c == psmv1.PowershelfComponent_PMC {
				sh.Firmware = j.target
			}
		}
	}
}

// jobState is the worker's view at now: QUEUED for one step, VERIFYING for
// one step, then COMPLETED, unless a fault holds or fails it; a job held in
// one state for longer than JobTimeout fails.
func (s *Sim) jobState(j *job, now time.Time) psmv1.FirmwareUpdateState {
	ticks := int(now.Sub(j.created) / s.opts.JobStep)
	names := []string{"queued", "verifying", "completed"}
	states := []psmv1.FirmwareUpdateState{
		psmv1.FirmwareUpdateState_FIRMWARE_UPDATE_STATE_QUEUED,
		psmv1.FirmwareUpdateState_FIRMWARE_UPDATE_STATE_VERIFYING,
		psmv1.FirmwareUpdateState_FIRMWARE_UPDATE_STATE_COMPLETED,
	}
	for i, name := range names {
		if name == j.failPhase && ticks >= i {
			return psmv1.FirmwareUpdateState_FIRMWARE_UPDATE_STATE_FAILED
		}
		if name == j.stuck && ticks >= i {
			if now.Sub(j.created.Add(time.Duration(i)*s.opts.JobStep)) > s.opts.JobTimeout {
				return psmv1.FirmwareUpdateState_FIRMWARE_UPDATE_STATE_FAILED
			}
			return states[i]
		}
	}
	return states[min(ticks, len(states)-1)]
}

type handler struct {
	psmv1connect.UnimplementedPowershelfManagerHandler
	s *Sim
}

func (h *handler) begin(ctx context.Context, method string, devices []string) error {
	return h.s.faults.Gate(ctx, method, devices)
}

func (h *handler) end(method string, devices []string, err *error) {
	code := "ok"
	if *err != nil {
		code = connect.CodeOf(*err).String()
	}
	h.s.journal.Record(sim.Call{Time: h.s.clock.Now(), Method: method, Devices: devices, Code: code})
}

// item applies an item fault for mac and returns its status and message.
func (h *handler) item(method, mac string) (psmv1.StatusCode, string, bool) {
	f, ok := h.s.faults.Take(sim.FaultItem, method, mac)
	if !ok {
		return psmv1.StatusCode_SUCCESS, "", false
	}
	st := psmv1.StatusCode_INTERNAL_ERROR
	if f.Status == "invalid_argument" || f.Status == "not_found" {
		st = psmv1.StatusCode_INVALID_ARGUMENT
	}
	msg := cmp.Or(f.Message, "injected item fault")
	if f.Status == "not_found" && f.Message == "" {
		msg = "powershelf not found"
	}
	return st, msg, true
}

var vendorName = map[psmv1.PMCVendor]string{psmv1.PMCVendor_PMC_TYPE_LITEON: "liteon", psmv1.PMCVendor_PMC_TYPE_DELTA: "delta"}

func (h *handler) RegisterPowershelves(ctx context.Context, req *psmv1.RegisterPowershelvesRequest) (res *psmv1.RegisterPowershelvesResponse, err error) {
	const method = "RegisterPowershelves"
	var macs []string
	for _, r := range req.GetRegistrationRequests() {
		macs = append(macs, r.GetPmcMacAddress())
	}
	defer h.end(method, macs, &err)
	if err := h.begin(ctx, method, macs); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	now := h.s.clock.Now()
	res = &psmv1.RegisterPowershelvesResponse{}
	for _, r := range req.GetRegistrationRequests() {
		out := &psmv1.RegisterPowershelfResponse{PmcMacAddress: r.GetPmcMacAddress()}
		if st, msg, ok := h.item(method, r.GetPmcMacAddress()); ok {
			out.Status, out.Error = st, msg
		} else if r.GetPmcMacAddress() == "" {
			out.Status, out.Error = psmv1.StatusCode_INVALID_ARGUMENT, "pmc_mac_address is required"
		} else {
			var sh *shelf
			if i, ok := h.s.macIndex[norm(r.GetPmcMacAddress())]; ok {
				sh = h.s.shelves[i]
			}
			if sh == nil {
				sh = h.s.upsert(Shelf{MAC: r.GetPmcMacAddress(), IP: r.GetPmcIpAddress(), Vendor: vendorName[r.GetPmcVendor()], Unregistered: true}, now)
			}
			if sh.registered.IsZero() {
				sh.registered, out.IsNew = now, true
				sh.IP = cmp.Or(r.GetPmcIpAddress(), sh.IP)
			}
			out.Created = timestamppb.New(sh.registered)
		}
		res.Responses = append(res.Responses, out)
	}
	return res, nil
}

func (h *handler) GetPowershelves(ctx context.Context, req *psmv1.PowershelfRequest) (res *psmv1.GetPowershelvesResponse, err error) {
	const method = "GetPowershelves"
	defer h.end(method, req.GetPmcMacs(), &err)
	if err := h.begin(ctx, method, req.GetPmcMacs()); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	now := h.s.clock.Now()
	var list []*shelf
	if len(req.GetPmcMacs()) == 0 {
		for _, sh := range h.s.shelves {
			if !sh.registered.IsZero() {
				list = append(list, sh)
			}
		}
	} else {
		for _, m := range req.GetPmcMacs() {
			if sh := h.s.find(m); sh != nil {
				list = append(list, sh)
			}
		}
	}
	res = &psmv1.GetPowershelvesResponse{}
	for _, sh := range list {
		if _, drop := h.s.faults.Take(sim.FaultDrop, method, sh.MAC); drop {
			continue
		}
		h.s.advance(sh, now)
		v := psmv1.PMCVendor_PMC_TYPE_LITEON
		if sh.Vendor == "delta" {
			v = psmv1.PMCVendor_PMC_TYPE_DELTA
		}
		p := &psmv1.PowerShelf{
			Pmc: &psmv1.PowerManagementController{
				MacAddress: sh.MAC, IpAddress: sh.IP, Vendor: v, SerialNumber: sh.PMCSerial, Model: cmp.Or(sh.Model, "PS-33kW"),
				Manufacturer: "Simulated", FirmwareVersion: sh.Firmware,
			},
			Chassis: &psmv1.Chassis{SerialNumber: sh.ChassisSerial},
		}
		for i, on := range sh.psus {
			p.Psus = append(p.Psus, &psmv1.PowerSupplyUnit{Id: fmt.Sprint(i), Name: fmt.Sprintf("PSU%d", i), PowerState: on, FirmwareVersion: sh.PSUFirmware, CapacityWatts: "5500"})
		}
		res.Powershelves = append(res.Powershelves, p)
	}
	return res, nil
}

func (h *handler) power(ctx context.Context, method string, req interface{ GetPmcMacs() []string }, on bool) (res *psmv1.PowerControlResponse, err error) {
	defer h.end(method, req.GetPmcMacs(), &err)
	if err := h.begin(ctx, method, req.GetPmcMacs()); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	now := h.s.clock.Now()
	res = &psmv1.PowerControlResponse{}
	for _, m := range req.GetPmcMacs() {
		out := &psmv1.PowershelfResponse{PmcMacAddress: m}
		sh := h.s.find(m)
		switch st, msg, faulted := h.item(method, m); {
		case faulted:
			out.Status, out.Error = st, msg
		case sh == nil:
			out.Status, out.Error = psmv1.StatusCode_INVALID_ARGUMENT, "powershelf "+m+" not found"
		default:
			h.s.advance(sh, now)
			target := make([]bool, len(sh.psus))
			_, mixed := h.s.faults.Take(sim.FaultMixed, method, m)
			for i := range target {
				target[i] = on
				if mixed && i%2 == 1 {
					target[i] = !on
				}
			}
			sh.steps = []step{{at: now.Add(h.s.opts.PowerDelay), on: target}}
		}
		res.Responses = append(res.Responses, out)
	}
	return res, nil
}

func (h *handler) PowerOn(ctx context.Context, req *psmv1.PowerRequest) (*psmv1.PowerControlResponse, error) {
	return h.power(ctx, "PowerOn", req, true)
}

func (h *handler) PowerOff(ctx context.Context, req *psmv1.PowerRequest) (*psmv1.PowerControlResponse, error) {
	return h.power(ctx, "PowerOff", req, false)
}

func (h *handler) UpdateFirmware(ctx context.Context, req *psmv1.UpdateFirmwareRequest) (res *psmv1.UpdateFirmwareResponse, err error) {
	const method = "UpdateFirmware"
	var macs []string
	for _, u := range req.GetUpgrades() {
		macs = append(macs, u.GetPmcMacAddress())
	}
	defer h.end(method, macs, &err)
	if err := h.begin(ctx, method, macs); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	now := h.s.clock.Now()
	res = &psmv1.UpdateFirmwareResponse{}
	for _, u := range req.GetUpgrades() {
		out := &psmv1.UpdatePowershelfFirmwareResponse{PmcMacAddress: u.GetPmcMacAddress()}
		sh := h.s.find(u.GetPmcMacAddress())
		for _, c := range u.GetComponents() {
			cr := &psmv1.UpdateComponentFirmwareResponse{Component: c.GetComponent()}
			switch st, msg, faulted := h.item(method, u.GetPmcMacAddress()); {
			case faulted:
				cr.Status, cr.Error = st, msg
			case sh == nil:
				cr.Status, cr.Error = psmv1.StatusCode_INVALID_ARGUMENT, "powershelf "+u.GetPmcMacAddress()+" not found"
			case c.GetComponent() != psmv1.PowershelfComponent_PMC:
				cr.Status, cr.Error = psmv1.StatusCode_INVALID_ARGUMENT, "only PMC firmware upgrades are supported"
			case c.GetUpgradeTo().GetVersion() == "":
				cr.Status, cr.Error = psmv1.StatusCode_INVALID_ARGUMENT, "upgradeTo.version is required"
			default:
				j := &job{target: c.GetUpgradeTo().GetVersion(), created: now}
				if f, ok := h.s.faults.Take(sim.FaultFail, method, u.GetPmcMacAddress()); ok {
					j.failPhase = cmp.Or(f.Phase, "verifying")
				} else if f, ok := h.s.faults.Take(sim.FaultStuck, method, u.GetPmcMacAddress()); ok {
					j.stuck = cmp.Or(f.Phase, "verifying")
				}
				sh.jobs[c.GetComponent()] = j
			}
			out.Components = append(out.Components, cr)
		}
		res.Responses = append(res.Responses, out)
	}
	return res, nil
}

func (h *handler) GetFirmwareUpdateStatus(ctx context.Context, req *psmv1.GetFirmwareUpdateStatusRequest) (res *psmv1.GetFirmwareUpdateStatusResponse, err error) {
	const method = "GetFirmwareUpdateStatus"
	var macs []string
	for _, q := range req.GetQueries() {
		macs = append(macs, q.GetPmcMacAddress())
	}
	defer h.end(method, macs, &err)
	if err := h.begin(ctx, method, macs); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	now := h.s.clock.Now()
	res = &psmv1.GetFirmwareUpdateStatusResponse{}
	for _, q := range req.GetQueries() {
		out := &psmv1.FirmwareUpdateStatus{PmcMacAddress: q.GetPmcMacAddress(), Component: q.GetComponent()}
		sh := h.s.find(q.GetPmcMacAddress())
		switch st, msg, faulted := h.item(method, q.GetPmcMacAddress()); {
		case faulted:
			out.Status, out.Error = st, msg
		case sh == nil || sh.jobs[q.GetComponent()] == nil:
			out.Status, out.Error = psmv1.StatusCode_INVALID_ARGUMENT, "firmware update not found"
		default:
			h.s.advance(sh, now)
			out.State = h.s.jobState(sh.jobs[q.GetComponent()], now)
		}
		res.Statuses = append(res.Statuses, out)
	}
	return res, nil
}

func (h *handler) ListAvailableFirmware(ctx context.Context, req *psmv1.PowershelfRequest) (res *psmv1.ListAvailableFirmwareResponse, err error) {
	const method = "ListAvailableFirmware"
	defer h.end(method, req.GetPmcMacs(), &err)
	if err := h.begin(ctx, method, req.GetPmcMacs()); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	res = &psmv1.ListAvailableFirmwareResponse{}
	for _, m := range req.GetPmcMacs() {
		if h.s.find(m) == nil {
			continue
		}
		up := &psmv1.ComponentFirmwareUpgrades{Component: psmv1.PowershelfComponent_PMC}
		for _, v := range h.s.opts.Available {
			up.Upgrades = append(up.Upgrades, &psmv1.FirmwareVersion{Version: v})
		}
		res.Upgrades = append(res.Upgrades, &psmv1.AvailableFirmware{PmcMacAddress: m, Upgrades: []*psmv1.ComponentFirmwareUpgrades{up}})
	}
	return res, nil
}

func (h *handler) SetDryRun(ctx context.Context, req *psmv1.SetDryRunRequest) (res *emptypb.Empty, err error) {
	defer h.end("SetDryRun", nil, &err)
	if err := h.begin(ctx, "SetDryRun", nil); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}
