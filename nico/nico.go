// Package nico is Flow's client of NICo Core (gRPC service forge.Forge). Its
// methods take and return plain Go types; no generated type leaves the
// package. Every call has a deadline, and every error is classified with one
// of the sentinels below, so callers decide with errors.Is.
package nico

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"connectrpc.com/connect"
)

// Error classes. Every error a Client returns matches exactly one of them
// with errors.Is (except context cancellation by the caller, which matches
// context.Canceled).
var (
	// ErrNotConfigured means NICO_CORE_API_URL is unset: Flow runs, but
	// nothing that needs Core can. Handlers map it to FailedPrecondition.
	ErrNotConfigured = errors.New("NICo Core not configured: set NICO_CORE_API_URL")
	// ErrUnreachable means Core could not be reached or failed internally
	// (Unavailable, DeadlineExceeded, Internal, Unknown, Aborted,
	// ResourceExhausted; per-item INTERNAL_ERROR or UNAVAILABLE). Retrying
	// later may help.
	ErrUnreachable = errors.New("backend unreachable")
	// ErrNotFound means Core does not know a device (gRPC NotFound, item
	// NOT_FOUND, or an ID missing from a ByIds reply).
	ErrNotFound = errors.New("device not found")
	// ErrRejected means Core refused the request as invalid for its state
	// (InvalidArgument, FailedPrecondition, AlreadyExists, permission and
	// unimplemented codes; item INVALID_ARGUMENT or ALREADY_EXISTS).
	// Retrying the same request will not help.
	ErrRejected = errors.New("request rejected")
)

// Error is a classified failure of one call, or of one device inside a call.
// errors.Is(err, ErrUnreachable) and friends match its Class.
type Error struct {
	Method string // RPC name, e.g. "ComponentPowerControl"
	Device string // the device ID or MAC the failure concerns, if one
	Class  error  // ErrNotConfigured, ErrUnreachable, ErrNotFound or ErrRejected
	Msg    string // the backend's message
	Err    error  // the underlying error, if any
}

// Error formats the failure.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.label())
	if e.Method != "" {
		fmt.Fprintf(&b, ": %s", e.Method)
	}
	if e.Device != "" {
		fmt.Fprintf(&b, " %s", e.Device)
	}
	if e.Msg != "" {
		fmt.Fprintf(&b, ": %s", e.Msg)
	}
	return b.String()
}

// label begins the message: the class, except that a backend that
// answered with a failure of its own (Internal, Unknown, DataLoss, Aborted,
// ResourceExhausted, or a failed item) is "backend failed (CODE)", not
// "unreachable": it was reached, and the operator should look at it, not
// at the network. The class stays ErrUnreachable (retry later).
func (e *Error) label() string {
	if e.Class != ErrUnreachable {
		return e.Class.Error()
	}
	if e.Err == nil {
		return "backend failed"
	}
	var ce *connect.Error
	if errors.As(e.Err, &ce) {
		switch ce.Code() {
		case connect.CodeInternal, connect.CodeUnknown, connect.CodeDataLoss, connect.CodeAborted, connect.CodeResourceExhausted:
			return "backend failed (" + ce.Code().String() + ")"
		}
	}
	return e.Class.Error()
}

// Is reports whether target is e's class.
func (e *Error) Is(target error) bool { return target == e.Class }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Kind is a component kind as Core distinguishes them.
type Kind int

// The component kinds.
const (
	KindCompute Kind = iota + 1
	KindSwitch
	KindPowerShelf
	// KindRack names whole racks; only the firmware methods take it, by ID.
	KindRack
)

// String returns "compute", "switch" or "powershelf".
func (k Kind) String() string {
	switch k {
	case KindCompute:
		return "compute"
	case KindSwitch:
		return "switch"
	case KindPowerShelf:
		return "powershelf"
	case KindRack:
		return "rack"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Target names components of one kind, either by Core ID or by management
// MAC (BMC MAC for compute and switches, PMC MAC for shelves). Exactly one of
// IDs and MACs must be non-empty.
type Target struct {
	Kind Kind
	IDs  []string
	MACs []string
}

// Keys returns the identifiers the target names, as given.
func (t Target) Keys() []string {
	if len(t.MACs) > 0 {
		return t.MACs
	}
	return t.IDs
}

// PowerAction is a Core component power action (common.SystemPowerControl).
type PowerAction int

// The power actions, numbered as on the wire.
const (
	PowerOn               PowerAction = 1
	PowerGracefulShutdown PowerAction = 2
	PowerForceOff         PowerAction = 3
	PowerGracefulRestart  PowerAction = 4
	PowerForceRestart     PowerAction = 5
	PowerACPowerCycle     PowerAction = 6
)

// Result is one target's outcome. Key is the caller's identifier exactly as
// sent (the MAC for MAC targets, else the ID); Err is nil on success and a
// classified *Error otherwise.
type Result struct {
	Key string
	ID  string // Core's ID, when Core reported one
	MAC string // echoed MAC, for MAC targets
	Err error
}

// PowerState is a component's power as Core reports it.
type PowerState string

// The power states (site_explorer.ComputerSystemPowerState, lowercased).
const (
	PowerStateOn          PowerState = "on"
	PowerStateOff         PowerState = "off"
	PowerStatePoweringOn  PowerState = "powering_on"
	PowerStatePoweringOff PowerState = "powering_off"
	PowerStatePaused      PowerState = "paused"
	PowerStateUnknown     PowerState = "unknown"
	PowerStateHibernating PowerState = "hibernating"
	PowerStateSleeping    PowerState = "sleeping"
)

// DeviceVersions is one device's installed firmware as Core lists it
// (ListComponentFirmwareVersions): Versions for the device as a whole and,
// for compute trays, Components per sub-component (compute_fw_versions).
// Err is set when Core could not read the device.
type DeviceVersions struct {
	Key        string
	ID         string
	Versions   []string
	Components []ComponentVersions
	Err        error
}

// ComponentVersions is the installed versions of one compute-tray
// sub-component, named as FirmwareComponents(KindCompute) names it.
type ComponentVersions struct {
	Component string
	Versions  []string
}

// InventoryItem is one firmware inventory entry of a device (Redfish
// UpdateService inventory).
type InventoryItem struct {
	ID, Description, Version string
}

// Inventory is one device's exploration report. Err is set (and the other
// fields empty) when Core answered the item with a non-success status or
// sent no report.
type Inventory struct {
	Key              string
	ID               string
	Power            PowerState
	FirmwareVersions map[string]string // e.g. "bmc" → version
	Items            []InventoryItem
	ChassisSerial    string
	Err              error
}

// BMCFirmware returns the BMC firmware version by Flow's precedence:
// FirmwareVersions["bmc"], then the inventory item BMC, FW_BMC_0 or
// HostBMC_0, then the item described as "BMC image". It returns "" when none
// is known.
func (inv Inventory) BMCFirmware() string {
	if v := inv.FirmwareVersions["bmc"]; v != "" {
		return v
	}
	for _, id := range []string{"BMC", "FW_BMC_0", "HostBMC_0"} {
		for _, it := range inv.Items {
			if it.ID == id && it.Version != "" {
				return it.Version
			}
		}
	}
	for _, it := range inv.Items {
		if strings.EqualFold(it.Description, "BMC image") {
			return it.Version
		}
	}
	return ""
}

// FirmwareRequest is what UpdateFirmware asks Core to do. Components are the
// sub-target names of spec §2.3 ("bmc", "bios"…; shelves "pmc", "psu"); none
// means the default bundle.
type FirmwareRequest struct {
	Components      []string
	TargetVersion   string
	AccessToken     string
	Force           bool
	BypassReadiness bool
}

// LogValue keeps the access token out of logs.
func (r FirmwareRequest) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("components", r.Components),
		slog.String("target_version", r.TargetVersion),
		slog.Bool("force", r.Force),
	)
}

// FirmwareState is the state of a Core firmware job.
type FirmwareState string

// The firmware job states.
const (
	FirmwareUnknown    FirmwareState = "unknown"
	FirmwareQueued     FirmwareState = "queued"
	FirmwareInProgress FirmwareState = "in_progress"
	FirmwareVerifying  FirmwareState = "verifying"
	FirmwareCompleted  FirmwareState = "completed"
	FirmwareFailed     FirmwareState = "failed"
	FirmwareCancelled  FirmwareState = "cancelled"
)

// FirmwareStatus is one firmware job of one device. Error carries Core's
// result.error text for failed jobs; Err is set when the item itself was not
// a success.
type FirmwareStatus struct {
	Key           string
	ID            string
	State         FirmwareState
	TargetVersion string
	Error         string
	Err           error
}

// IngestionState is a BMC endpoint's ingestion state.
type IngestionState string

// The ingestion states.
const (
	IngestionNotDiscovered     IngestionState = "NotDiscovered"
	IngestionWaiting           IngestionState = "WaitingForIngestion"
	IngestionMachineNotCreated IngestionState = "IngestionMachineNotCreated"
	IngestionMachineCreated    IngestionState = "IngestionMachineCreated"
)

// ExpectedMachine is an expected compute tray. The BMC password is never
// logged and never read back.
type ExpectedMachine struct {
	BMCMAC, BMCUsername, BMCPassword string
	ChassisSerial                    string
	RackID                           string
	BMCIP                            string
	PauseIngestion                   *bool
	Labels                           map[string]string
	// Name and Description are the metadata's (read back only).
	Name, Description string
}

// LogValue redacts the password.
func (e ExpectedMachine) LogValue() slog.Value {
	return slog.GroupValue(slog.String("bmc_mac", e.BMCMAC), slog.String("serial", e.ChassisSerial), slog.String("rack_id", e.RackID))
}

// ExpectedSwitch is an expected NVLink switch.
type ExpectedSwitch struct {
	BMCMAC, BMCUsername, BMCPassword string
	Serial                           string
	RackID                           string
	BMCIP                            string
	NVOSUsername, NVOSPassword       string
	Labels                           map[string]string
	// Name and Description are the metadata's (read back only).
	Name, Description string
}

// LogValue redacts the passwords.
func (e ExpectedSwitch) LogValue() slog.Value {
	return slog.GroupValue(slog.String("bmc_mac", e.BMCMAC), slog.String("serial", e.Serial), slog.String("rack_id", e.RackID))
}

// ExpectedPowerShelf is an expected power shelf (BMCMAC is its PMC MAC).
type ExpectedPowerShelf struct {
	BMCMAC, BMCUsername, BMCPassword string
	Serial                           string
	RackID                           string
	BMCIP                            string
	Labels                           map[string]string
	// Name and Description are the metadata's (read back only).
	Name, Description string
}

// LogValue redacts the password.
func (e ExpectedPowerShelf) LogValue() slog.Value {
	return slog.GroupValue(slog.String("bmc_mac", e.BMCMAC), slog.String("serial", e.Serial), slog.String("rack_id", e.RackID))
}

// Machine is Core's view of a machine.
type Machine struct {
	ID             string
	State          string // display state, e.g. "Ready"
	Host           bool   // machine_type HOST (false for DPUs and others)
	BMCMAC, BMCIP  string
	BMCFirmware    string
	ChassisSerial  string
	UpdateComplete bool
	DPUIDs         []string
	Health         *Health // nil: Core sent no report
}

// Switch is Core's view of an NVLink switch.
type Switch struct {
	ID              string
	ControllerState string // JSON, e.g. {"state":"ready"}
	BMCMAC          string
	RackID          string
	NVOSIP          string
	// NVLinkDomain is the NMX-C cluster UUID Core observed the switch in
	// ("" when none).
	NVLinkDomain string
	Health       *Health // nil: Core sent no report
}

// PowerShelf is Core's view of a power shelf.
type PowerShelf struct {
	ID              string
	ControllerState string // JSON
	BMCMAC          string // PMC MAC
	RackID          string
	Health          *Health // nil: Core sent no report
}

// BuildInfo is Core's version and runtime limits.
type BuildInfo struct {
	Version      string
	MaxFindByIDs uint32 // 0 means unlimited
}
