package backend

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/psm"
)

// Managers holds the component manager of every component type. It is safe
// for concurrent use.
type Managers struct {
	cfg  Config
	nico *nico.Client
	psm  *psm.Client
	mock *nico.Client // the in-process Core simulator behind ImplMock
}

// New returns the managers cfg describes, calling Core through nc and PSM
// through pc (either may be unconfigured; operations needing it then fail
// with ErrNotConfigured).
func New(cfg Config, nc *nico.Client, pc *psm.Client) *Managers {
	return &Managers{cfg: cfg, nico: nc, psm: pc}
}

// WithMock sets the client of the in-process Core simulator that answers the
// types configured as ImplMock, and returns m. Without it those types fail
// with ErrNotConfigured.
func (m *Managers) WithMock(nc *nico.Client) *Managers {
	m.mock = nc
	return m
}

// Supports reports whether the manager configured for t can perform op; a
// type with no manager supports nothing.
func (m *Managers) Supports(t ComponentType, op Operation) bool {
	impl, ok := m.cfg.Managers[t]
	return ok && Supports(t, impl, op)
}

// Ready reports, as an error, why operations on components of type t cannot
// reach their backend: the manager configured for t calls a backend whose
// URL variable is unset (the error, matching ErrNotConfigured and the
// client's own sentinel, names the variable). A type with no manager is
// ready here; Supports tells it can do nothing.
func (m *Managers) Ready(t ComponentType) error {
	var missing error
	switch m.cfg.Managers[t] {
	case ImplNICo:
		if m.nico == nil || !m.nico.Configured() {
			missing = nico.ErrNotConfigured
		}
	case ImplPSM:
		if m.psm == nil || !m.psm.Configured() {
			missing = psm.ErrNotConfigured
		}
	case ImplMock:
		if m.mock == nil || !m.mock.Configured() {
			missing = nico.ErrNotConfigured
		}
	}
	if missing == nil {
		return nil
	}
	return &classified{class: ErrNotConfigured, err: fmt.Errorf("%s components are managed through the %s manager: %w", t, m.cfg.Managers[t], missing)}
}

// SupportsPower reports whether the manager configured for t can apply p.
func (m *Managers) SupportsPower(t ComponentType, p PowerOp) bool {
	impl, ok := m.cfg.Managers[t]
	return ok && SupportsPower(t, impl, p)
}

// For returns the manager of t. Its methods fail with ErrNotConfigured when
// no implementation is configured for t.
// A type configured as ImplMock gets a NICo Core manager on the simulator.
func (m *Managers) For(t ComponentType) *Manager {
	if m.cfg.Managers[t] == ImplMock {
		return &Manager{Type: t, Impl: ImplNICo, nico: m.mock, psm: m.psm}
	}
	return &Manager{Type: t, Impl: m.cfg.Managers[t], nico: m.nico, psm: m.psm}
}

// Manager performs operations on components of one type through its
// configured implementation.
type Manager struct {
	Type ComponentType
	Impl Implementation // "" when none is configured
	nico *nico.Client
	psm  *psm.Client
}

// Target names components of the manager's type: by manager ID (Core ID;
// for PSM the PMC MAC) or by management MAC (BMC MAC; PMC MAC for shelves).
// Exactly one of IDs and MACs must be set. Results are keyed by the
// identifiers exactly as given.
type Target struct {
	IDs  []string
	MACs []string
}

func (t Target) keys() []string {
	if len(t.MACs) > 0 {
		return t.MACs
	}
	return t.IDs
}

// Result is one component's outcome of a control call; Err is nil on
// success.
type Result struct {
	Key string
	Err error
}

func (m *Manager) check(op Operation) error {
	if m.Impl == "" {
		return fmt.Errorf("%w: no component manager for %s in COMPONENT_MANAGER_CONFIG", ErrNotConfigured, m.Type)
	}
	if !Supports(m.Type, m.Impl, op) {
		return fmt.Errorf("%w: %s on %s with the %s manager", ErrUnsupported, op, m.Type, m.Impl)
	}
	return nil
}

func (m *Manager) kind() nico.Kind {
	switch m.Type {
	case Compute:
		return nico.KindCompute
	case NVSwitch:
		return nico.KindSwitch
	}
	return nico.KindPowerShelf
}

func (m *Manager) nicoTarget(t Target) nico.Target {
	return nico.Target{Kind: m.kind(), IDs: t.IDs, MACs: t.MACs}
}

// Expectation is a component Flow expects, pushed to the backend by
// InjectExpectation. Passwords never appear in logs.
type Expectation struct {
	BMCMAC, BMCIP              string
	Serial                     string
	RackID                     string
	Username, Password         string
	NVOSUsername, NVOSPassword string // switches only
	Labels                     map[string]string
	PauseIngestion             *bool // compute only
}

// LogValue redacts the credentials.
func (e Expectation) LogValue() slog.Value {
	return slog.GroupValue(slog.String("bmc_mac", e.BMCMAC), slog.String("serial", e.Serial), slog.String("rack_id", e.RackID))
}

// InjectExpectation declares the components to the backend (Core:
// AddExpected…, idempotent by MAC; PSM: RegisterPowershelves with vendor
// LITEON). It stops at the first failure.
func (m *Manager) InjectExpectation(ctx context.Context, exps []Expectation) error {
	if err := m.check(OpInjectExpectation); err != nil {
		return err
	}
	if m.Impl == ImplPSM {
		regs := make([]psm.Registration, 0, len(exps))
		for _, e := range exps {
			regs = append(regs, psm.Registration{MAC: e.BMCMAC, IP: e.BMCIP, Vendor: "liteon", Username: e.Username, Password: e.Password})
		}
		_, err := m.psm.Register(ctx, regs)
		return wrap(err)
	}
	for _, e := range exps {
		var err error
		switch m.Type {
		case Compute:
			err = m.nico.AddExpectedMachine(ctx, nico.ExpectedMachine{BMCMAC: e.BMCMAC, BMCIP: e.BMCIP, BMCUsername: e.Username, BMCPassword: e.Password, ChassisSerial: e.Serial, RackID: e.RackID, Labels: e.Labels, PauseIngestion: e.PauseIngestion})
		case NVSwitch:
			err = m.nico.AddExpectedSwitch(ctx, nico.ExpectedSwitch{BMCMAC: e.BMCMAC, BMCIP: e.BMCIP, BMCUsername: e.Username, BMCPassword: e.Password, Serial: e.Serial, RackID: e.RackID, NVOSUsername: e.NVOSUsername, NVOSPassword: e.NVOSPassword, Labels: e.Labels})
		default:
			err = m.nico.AddExpectedPowerShelf(ctx, nico.ExpectedPowerShelf{BMCMAC: e.BMCMAC, BMCIP: e.BMCIP, BMCUsername: e.Username, BMCPassword: e.Password, Serial: e.Serial, RackID: e.RackID, Labels: e.Labels})
		}
		if err != nil {
			return wrap(err)
		}
	}
	return nil
}

var nicoActions = map[PowerOp]nico.PowerAction{
	PowerOn: nico.PowerOn, ForcePowerOn: nico.PowerOn,
	PowerOff: nico.PowerGracefulShutdown, ForcePowerOff: nico.PowerForceOff,
	Restart: nico.PowerGracefulRestart, WarmReset: nico.PowerGracefulRestart,
	ForceRestart: nico.PowerForceRestart, ColdReset: nico.PowerACPowerCycle,
}

// PowerControl applies p to every component of t. bypass carries the
// operator's override_readiness_check. Any item that fails fails the call:
// the error joins the failed items (classified), and the results say which.
// Unsupported combinations (PSM restarts, ColdReset of a switch or shelf)
// fail with ErrUnsupported before any call.
func (m *Manager) PowerControl(ctx context.Context, t Target, p PowerOp, bypass bool) ([]Result, error) {
	if err := m.check(OpPowerControl); err != nil {
		return nil, err
	}
	if !SupportsPower(m.Type, m.Impl, p) {
		return nil, fmt.Errorf("%w: %s on %s with the %s manager", ErrUnsupported, p, m.Type, m.Impl)
	}
	if m.Impl == ImplPSM {
		var (
			rs  []psm.Result
			err error
		)
		if p == PowerOn || p == ForcePowerOn {
			rs, err = m.psm.PowerOn(ctx, t.keys())
		} else {
			rs, err = m.psm.PowerOff(ctx, t.keys())
		}
		out := make([]Result, 0, len(rs))
		for _, r := range rs {
			out = append(out, Result{Key: r.MAC, Err: wrap(r.Err)})
		}
		return out, wrap(err)
	}
	rs, err := m.nico.PowerControl(ctx, m.nicoTarget(t), nicoActions[p], bypass)
	out := make([]Result, 0, len(rs))
	for _, r := range rs {
		out = append(out, Result{Key: r.Key, Err: wrap(r.Err)})
	}
	return out, wrap(err)
}

// PowerState is a component's power as Flow reads it.
type PowerState string

// The power states.
const (
	PowerStateOn      PowerState = "on"
	PowerStateOff     PowerState = "off"
	PowerStateUnknown PowerState = "unknown"
	// PowerStateTransitioning: powering on or off, as a device does
	// during a restart or AC power cycle (Core only).
	PowerStateTransitioning PowerState = "transitioning"
)

// PowerStatus reads the power of the components of t, keyed by identifier
// (Core: as requested; PSM: the MAC PSM returns). Components the backend
// could not report are absent, so a verify loop keeps polling them.
func (m *Manager) PowerStatus(ctx context.Context, t Target) (map[string]PowerState, error) {
	if err := m.check(OpPowerStatus); err != nil {
		return nil, err
	}
	out := map[string]PowerState{}
	if m.Impl == ImplPSM {
		shelves, err := m.psm.Shelves(ctx, t.keys())
		if err != nil {
			return nil, wrap(err)
		}
		for _, s := range shelves {
			out[s.MAC] = PowerState(s.Power())
		}
		return out, nil
	}
	invs, err := m.nico.Inventory(ctx, m.nicoTarget(t))
	if err != nil {
		return nil, wrap(err)
	}
	for _, inv := range invs {
		if inv.Err != nil {
			continue
		}
		switch inv.Power {
		case nico.PowerStateOn:
			out[inv.Key] = PowerStateOn
		case nico.PowerStateOff:
			out[inv.Key] = PowerStateOff
		case nico.PowerStatePoweringOn, nico.PowerStatePoweringOff:
			out[inv.Key] = PowerStateTransitioning
		default:
			out[inv.Key] = PowerStateUnknown
		}
	}
	return out, nil
}

// FirmwareRequest is a firmware update to start. Components are sub-target
// names (compute: bmc, bios, cec, nic, cpld_mb, cpld_pdb, hgx_bmc,
// combined_bmc_uefi, gpu, cx7; switch: bmc, cpld, bios, nvos; shelf: pmc,
// psu); none means the backend's default (Core: the whole bundle; PSM: pmc).
type FirmwareRequest struct {
	Components      []string
	Version         string
	AccessToken     string
	Force           bool // override_version_check
	BypassReadiness bool
	// WindowStart and WindowEnd, when both set, are the time window in
	// which the update may run (the task's start_time/end_time, narrowed
	// to the maintenance window it started in): Core is told it for
	// compute trays (SetFirmwareUpdateTimeWindow) and enforces it too.
	WindowStart, WindowEnd time.Time
}

// LogValue keeps the access token out of logs.
func (r FirmwareRequest) LogValue() slog.Value {
	return slog.GroupValue(slog.Any("components", r.Components), slog.String("version", r.Version), slog.Bool("force", r.Force))
}

// StartFirmware starts the update once for every component of t. Any failed
// item fails the call (joined, classified errors). The "dpu" sub-target
// (DPU reprovisioning) is not supported yet and fails with ErrUnsupported.
func (m *Manager) StartFirmware(ctx context.Context, t Target, fr FirmwareRequest) error {
	if err := m.check(OpFirmwareControl); err != nil {
		return err
	}
	if slices.Contains(fr.Components, "dpu") {
		return fmt.Errorf("%w: dpu reprovisioning", ErrUnsupported)
	}
	if m.Impl == ImplPSM {
		comps := fr.Components
		if len(comps) == 0 {
			comps = []string{"pmc"}
		}
		var ups []psm.FirmwareUpdate
		for _, mac := range t.keys() {
			for _, c := range comps {
				ups = append(ups, psm.FirmwareUpdate{MAC: mac, Component: psm.Component(c), Version: fr.Version})
			}
		}
		_, err := m.psm.UpdateFirmware(ctx, ups)
		return wrap(err)
	}
	if m.Type == Compute && !fr.WindowStart.IsZero() && fr.WindowEnd.After(fr.WindowStart) && len(t.IDs) > 0 {
		// Core's window is per machine ID; a tray named by BMC MAC only
		// has none to set (and its update is not held to the window).
		if err := m.nico.SetFirmwareUpdateWindow(ctx, t.IDs, fr.WindowStart, fr.WindowEnd); err != nil {
			return wrap(err)
		}
	}
	_, err := m.nico.UpdateFirmware(ctx, m.nicoTarget(t), nico.FirmwareRequest{
		Components: fr.Components, TargetVersion: fr.Version, AccessToken: fr.AccessToken, Force: fr.Force, BypassReadiness: fr.BypassReadiness,
	})
	return wrap(err)
}

// FirmwareState is Flow's view of a component's firmware update.
type FirmwareState string

// The firmware states (spec/southbound.md §5.2).
const (
	FirmwareUnknown   FirmwareState = "unknown"
	FirmwareQueued    FirmwareState = "queued"
	FirmwareVerifying FirmwareState = "verifying"
	FirmwareCompleted FirmwareState = "completed"
	FirmwareFailed    FirmwareState = "failed"
)

// FirmwareStatus is one component's aggregated firmware state; Message
// explains a failure.
type FirmwareStatus struct {
	Key     string
	State   FirmwareState
	Message string
}

// FirmwareStatus reads the update state of the components of t. Compute and
// switches through Core are aggregated per component (any failed job →
// failed, all completed → completed, none → unknown, else queued) with every
// requested identifier present. Shelves (Core or PSM) report only what comes
// back, so an empty reply means nothing is pending. components narrows the
// PSM query (default pmc).
func (m *Manager) FirmwareStatus(ctx context.Context, t Target, components []string) ([]FirmwareStatus, error) {
	if err := m.check(OpFirmwareStatus); err != nil {
		return nil, err
	}
	if m.Impl == ImplPSM {
		if len(components) == 0 {
			components = []string{"pmc"}
		}
		var qs []psm.FirmwareQuery
		for _, mac := range t.keys() {
			for _, c := range components {
				qs = append(qs, psm.FirmwareQuery{MAC: mac, Component: psm.Component(c)})
			}
		}
		sts, err := m.psm.FirmwareStatus(ctx, qs)
		if err != nil {
			return nil, wrap(err)
		}
		out := make([]FirmwareStatus, 0, len(sts))
		for _, s := range sts {
			fs := FirmwareStatus{Key: s.MAC, State: FirmwareState(s.State)}
			if s.Err != nil {
				fs.State, fs.Message = FirmwareUnknown, s.Err.Error()
			}
			out = append(out, fs)
		}
		return out, nil
	}
	sts, err := m.nico.FirmwareStatus(ctx, m.nicoTarget(t))
	if err != nil {
		return nil, wrap(err)
	}
	byKey := map[string][]nico.FirmwareStatus{}
	var order []string
	for _, s := range sts {
		if _, seen := byKey[s.Key]; !seen {
			order = append(order, s.Key)
		}
		byKey[s.Key] = append(byKey[s.Key], s)
	}
	if m.Type != PowerShelf {
		order = t.keys()
	}
	out := make([]FirmwareStatus, 0, len(order))
	for _, k := range order {
		out = append(out, aggregate(k, byKey[k]))
	}
	return out, nil
}

// appendNew appends s to list unless list holds it already, so that the
// same reason reported by several of a device's firmware components is told
// once.
func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

func aggregate(key string, sts []nico.FirmwareStatus) FirmwareStatus {
	if len(sts) == 0 {
		return FirmwareStatus{Key: key, State: FirmwareUnknown}
	}
	var failed []string
	completed := 0
	for _, s := range sts {
		switch {
		case s.Err != nil:
			failed = appendNew(failed, s.Err.Error())
		case s.State == nico.FirmwareFailed || s.State == nico.FirmwareCancelled:
			failed = appendNew(failed, cmpOr(s.Error, string(s.State)))
		case s.State == nico.FirmwareCompleted:
			completed++
		}
	}
	switch {
	case len(failed) > 0:
		return FirmwareStatus{Key: key, State: FirmwareFailed, Message: strings.Join(failed, "; ")}
	case completed == len(sts):
		return FirmwareStatus{Key: key, State: FirmwareCompleted}
	}
	for _, s := range sts {
		if s.State == nico.FirmwareVerifying {
			return FirmwareStatus{Key: key, State: FirmwareVerifying}
		}
	}
	return FirmwareStatus{Key: key, State: FirmwareQueued}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// FirmwareVersions reads the current firmware version of the components of
// t (Core: the BMC version by Flow's precedence, the PMC version for
// shelves; PSM: the PMC version), keyed by identifier. Components without a
// readable version are absent.
func (m *Manager) FirmwareVersions(ctx context.Context, t Target) (map[string]string, error) {
	if err := m.check(OpFirmwareVersion); err != nil {
		return nil, err
	}
	out := map[string]string{}
	if m.Impl == ImplPSM {
		shelves, err := m.psm.Shelves(ctx, t.keys())
		if err != nil {
			return nil, wrap(err)
		}
		for _, s := range shelves {
			out[s.MAC] = s.Firmware
		}
		return out, nil
	}
	invs, err := m.nico.Inventory(ctx, m.nicoTarget(t))
	if err != nil {
		return nil, wrap(err)
	}
	for _, inv := range invs {
		if inv.Err != nil {
			continue
		}
		v := inv.BMCFirmware()
		if m.Type == PowerShelf && inv.FirmwareVersions["pmc"] != "" {
			v = inv.FirmwareVersions["pmc"]
		}
		if v != "" {
			out[inv.Key] = v
		}
	}
	return out, nil
}

// Installed is one component's installed firmware as its backend reports
// it: per sub-component (lowercase, as FirmwareRequest names them) the
// version of every instance (two NICs: two versions). Err is set when the
// backend could not read this component.
type Installed struct {
	Components map[string][]string
	Err        error
}

// installedBatch bounds the identifiers of one installed-versions read.
const installedBatch = 100

// InstalledFirmware reads the installed firmware per sub-component of every
// component of t, keyed by identifier as the backend answers it (compare
// case-insensitively for MACs). Core: compute trays from
// ListComponentFirmwareVersions' per-sub-component list, switches and
// shelves from their exploration report (GetComponentInventory), one call
// per hundred components. PSM: the shelf's PMC version as "pmc" and every
// PSU's as "psu". Components the backend did not answer for are absent.
func (m *Manager) InstalledFirmware(ctx context.Context, t Target) (map[string]Installed, error) {
	if err := m.check(OpFirmwareVersion); err != nil {
		return nil, err
	}
	out := map[string]Installed{}
	if m.Impl == ImplPSM {
		shelves, err := m.psm.Shelves(ctx, t.keys())
		if err != nil {
			return nil, wrap(err)
		}
		for _, s := range shelves {
			in := Installed{Components: map[string][]string{}}
			if s.Firmware != "" {
				in.Components["pmc"] = []string{s.Firmware}
			}
			for _, u := range s.PSUs {
				if u.Firmware != "" {
					in.Components["psu"] = append(in.Components["psu"], u.Firmware)
				}
			}
			out[s.MAC] = in
		}
		return out, nil
	}
	byMAC := len(t.MACs) > 0
	for chunk := range slices.Chunk(t.keys(), installedBatch) {
		nt := nico.Target{Kind: m.kind(), IDs: chunk}
		if byMAC {
			nt = nico.Target{Kind: m.kind(), MACs: chunk}
		}
		got, err := m.nico.InstalledVersions(ctx, nt)
		if err != nil {
			return nil, wrap(err)
		}
		for _, in := range got {
			out[in.Key] = Installed{Components: in.Components, Err: wrap(in.Err)}
		}
	}
	return out, nil
}

// AllowBringUp opens Core's ingestion gate for every component of t (the
// identifier is sent as the endpoint address, as upstream does).
func (m *Manager) AllowBringUp(ctx context.Context, t Target) error {
	if err := m.check(OpBringUp); err != nil {
		return err
	}
	for _, k := range t.keys() {
		if err := m.nico.AllowIngestion(ctx, k); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// BringUpDone is the ingestion state bring-up waits for.
const BringUpDone = string(nico.IngestionMachineCreated)

// BringUpState reads the ingestion state of every component of t, keyed by
// identifier; bring-up is done when all read BringUpDone.
func (m *Manager) BringUpState(ctx context.Context, t Target) (map[string]string, error) {
	if err := m.check(OpBringUpStatus); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, k := range t.keys() {
		st, err := m.nico.IngestionState(ctx, k)
		if err != nil {
			return nil, wrap(err)
		}
		out[k] = string(st)
	}
	return out, nil
}

// Decommission starts decommissioning every component of t, by Core ID
// (t.IDs). Core accepts it only from Ready.
func (m *Manager) Decommission(ctx context.Context, t Target) error {
	if err := m.check(OpDecommission); err != nil {
		return err
	}
	if len(t.IDs) == 0 {
		return fmt.Errorf("%w: decommission needs Core IDs", ErrRejected)
	}
	for _, id := range t.IDs {
		if err := m.nico.Decommission(ctx, m.kind(), id); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// DecommissionOutcome classifies a decommission state read.
type DecommissionOutcome string

// The outcomes (spec/southbound.md §5.5).
const (
	DecommissionDone    DecommissionOutcome = "done"
	DecommissionPending DecommissionOutcome = "pending"
	DecommissionFailed  DecommissionOutcome = "failed"
)

// DecommissionState is one component's decommission progress: the state as
// read (compute display state, or "Decommissioning/X" from a controller
// JSON) and its outcome.
type DecommissionState struct {
	State   string
	Outcome DecommissionOutcome
}

// ParseDecommission reads a Core lifecycle state: compute's display state,
// or a switch/shelf controller JSON.
func ParseDecommission(t ComponentType, raw string) DecommissionState {
	state := raw
	if t != Compute {
		var v struct {
			State  string `json:"state"`
			Decomm struct {
				State string `json:"state"`
			} `json:"decommissioning_state"`
		}
		if json.Unmarshal([]byte(raw), &v) == nil && v.State == "decommissioning" {
			state = "Decommissioning/" + v.Decomm.State
			if v.Decomm.State == "decommissioned" {
				state = "Decommissioned"
			}
		}
	}
	switch {
	case state == "Decommissioned", state == "Decommissioning/Decommissioned":
		return DecommissionState{State: state, Outcome: DecommissionDone}
	case state == "Ready", strings.HasPrefix(state, "Maintenance("), strings.HasPrefix(state, "Decommissioning/"):
		return DecommissionState{State: state, Outcome: DecommissionPending}
	}
	return DecommissionState{State: state, Outcome: DecommissionFailed}
}

// DecommissionStatus reads the decommission progress of every component of
// t (by Core ID).
func (m *Manager) DecommissionStatus(ctx context.Context, t Target) (map[string]DecommissionState, error) {
	if err := m.check(OpDecommissionStatus); err != nil {
		return nil, err
	}
	out := map[string]DecommissionState{}
	switch m.Type {
	case Compute:
		ms, err := m.nico.Machines(ctx, t.IDs)
		if err != nil {
			return nil, wrap(err)
		}
		for _, x := range ms {
			out[x.ID] = ParseDecommission(Compute, x.State)
		}
	case NVSwitch:
		ss, err := m.nico.Switches(ctx, t.IDs)
		if err != nil {
			return nil, wrap(err)
		}
		for _, x := range ss {
			out[x.ID] = ParseDecommission(NVSwitch, x.ControllerState)
		}
	default:
		ps, err := m.nico.PowerShelves(ctx, t.IDs)
		if err != nil {
			return nil, wrap(err)
		}
		for _, x := range ps {
			out[x.ID] = ParseDecommission(PowerShelf, x.ControllerState)
		}
	}
	return out, nil
}

// Inventory lists every component of the manager's type the backend knows,
// as Actual records for ValidateComponents (Core: the ID listing then the
// batched ByIds read, hosts only, plus GetComponentInventory for the serial
// and firmware of switches and shelves; PSM: every shelf).
func (m *Manager) Inventory(ctx context.Context) ([]Actual, error) {
	if err := m.check(OpInventory); err != nil {
		return nil, err
	}
	var out []Actual
	if m.Impl == ImplPSM {
		shelves, err := m.psm.Shelves(ctx, nil)
		if err != nil {
			return nil, wrap(err)
		}
		for _, s := range shelves {
			out = append(out, Actual{Type: PowerShelf, ExternalID: s.MAC, BMCMAC: s.MAC, Serial: s.ChassisSerial, FirmwareVersion: s.Firmware})
		}
		return out, nil
	}
	switch m.Type {
	case Compute:
		ids, err := m.nico.MachineIDs(ctx, false, "")
		if err != nil {
			return nil, wrap(err)
		}
		ms, err := m.nico.Machines(ctx, ids)
		if err != nil {
			return nil, wrap(err)
		}
		for _, x := range ms {
			if x.Host {
				out = append(out, Actual{Type: Compute, ExternalID: x.ID, BMCMAC: x.BMCMAC, Serial: x.ChassisSerial, FirmwareVersion: x.BMCFirmware})
			}
		}
	case NVSwitch:
		ids, err := m.nico.SwitchIDs(ctx)
		if err != nil {
			return nil, wrap(err)
		}
		ss, err := m.nico.Switches(ctx, ids)
		if err != nil {
			return nil, wrap(err)
		}
		for _, x := range ss {
			out = append(out, Actual{Type: NVSwitch, ExternalID: x.ID, BMCMAC: x.BMCMAC, RackID: x.RackID})
		}
		if err := m.addExplored(ctx, out); err != nil {
			return nil, err
		}
	default:
		ids, err := m.nico.PowerShelfIDs(ctx)
		if err != nil {
			return nil, wrap(err)
		}
		ps, err := m.nico.PowerShelves(ctx, ids)
		if err != nil {
			return nil, wrap(err)
		}
		for _, x := range ps {
			out = append(out, Actual{Type: PowerShelf, ExternalID: x.ID, BMCMAC: x.BMCMAC, RackID: x.RackID})
		}
		if err := m.addExplored(ctx, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// exploreBatch bounds the IDs of one GetComponentInventory call.
const exploreBatch = 100

// addExplored fills in the chassis serial and firmware version of Core
// switches and shelves from GetComponentInventory, which their ByIds reads
// lack. Firmware follows Flow's BMC precedence (nico.Inventory.BMCFirmware);
// a shelf without a BMC entry falls back to its PMC version. A device whose
// item failed keeps both empty, so nothing is compared for it.
func (m *Manager) addExplored(ctx context.Context, out []Actual) error {
	if len(out) == 0 {
		return nil
	}
	ids := make([]string, len(out))
	for i, a := range out {
		ids[i] = a.ExternalID
	}
	byID := make(map[string]nico.Inventory, len(ids))
	for chunk := range slices.Chunk(ids, exploreBatch) {
		invs, err := m.nico.Inventory(ctx, nico.Target{Kind: m.kind(), IDs: chunk})
		if err != nil {
			return wrap(err)
		}
		for _, inv := range invs {
			if inv.Err == nil {
				byID[cmp.Or(inv.ID, inv.Key)] = inv
			}
		}
	}
	for i := range out {
		inv, ok := byID[out[i].ExternalID]
		if !ok {
			continue
		}
		out[i].Serial = inv.ChassisSerial
		out[i].FirmwareVersion = inv.BMCFirmware()
		if out[i].FirmwareVersion == "" && m.Type == PowerShelf {
			out[i].FirmwareVersion = inv.FirmwareVersions["pmc"]
		}
	}
	return nil
}

// Inventory lists the actual components of every type that has a manager
// supporting OpInventory, for ValidateComponents. It fails on the first
// backend error.
func (m *Managers) Inventory(ctx context.Context) ([]Actual, error) {
	var out []Actual
	for _, t := range ComponentTypes {
		if !m.Supports(t, OpInventory) {
			continue
		}
		got, err := m.For(t).Inventory(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s inventory: %w", t, err)
		}
		out = append(out, got...)
	}
	return out, nil
}
