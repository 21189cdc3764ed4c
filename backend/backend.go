// Package backend holds Flow's component managers: per component type
// (compute, nvswitch, powershelf) the implementation chosen by
// COMPONENT_MANAGER_CONFIG (NICo Core, or PSM for power shelves), exposing
// what engine actions need (inject expectation, power, firmware, bring-up,
// decommission) plus a capability check that operation rules are validated
// against. It also holds ValidateComponents' comparison of expected against
// actual inventory. It imports nico and psm, never the other way round.
package backend

import (
	"errors"

	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/psm"
)

// ComponentType is a kind of rack component a manager handles.
type ComponentType string

// The component types, spelled as in COMPONENT_MANAGER_CONFIG.
const (
	Compute    ComponentType = "compute"
	NVSwitch   ComponentType = "nvswitch"
	PowerShelf ComponentType = "powershelf"
)

// ComponentTypes lists every component type, in power-on order reversed
// (compute first), as upstream lists them.
var ComponentTypes = []ComponentType{Compute, NVSwitch, PowerShelf}

// Implementation names a component-manager implementation.
type Implementation string

// The implementations Flow has. ImplMock is upstream's mock component
// manager: Flow answers it with its NICo Core simulator, run in process
// (Managers.WithMock), so it behaves as ImplNICo against simulated hardware.
const (
	ImplNICo Implementation = "nico"
	ImplPSM  Implementation = "psm"
	ImplMock Implementation = "mock"
)

// Operation is something an engine action asks a component manager to do.
type Operation string

// The operations.
const (
	OpInjectExpectation  Operation = "inject_expectation"
	OpPowerControl       Operation = "power_control"
	OpPowerStatus        Operation = "power_status"
	OpFirmwareControl    Operation = "firmware_control"
	OpFirmwareStatus     Operation = "firmware_status"
	OpFirmwareVersion    Operation = "firmware_version"
	OpBringUp            Operation = "bring_up"
	OpBringUpStatus      Operation = "bring_up_status"
	OpDecommission       Operation = "decommission"
	OpDecommissionStatus Operation = "decommission_status"
	OpInventory          Operation = "inventory"
)

// Operations lists every operation.
var Operations = []Operation{
	OpInjectExpectation, OpPowerControl, OpPowerStatus, OpFirmwareControl, OpFirmwareStatus,
	OpFirmwareVersion, OpBringUp, OpBringUpStatus, OpDecommission, OpDecommissionStatus, OpInventory,
}

// Error classes of every Manager method. Client errors keep matching their
// own package's sentinels (nico.ErrNotFound…) too.
var (
	// ErrNotConfigured: the backend's URL variable is unset, or no manager
	// is configured for the component type. Map to FailedPrecondition.
	ErrNotConfigured = errors.New("not configured")
	// ErrUnreachable: the backend could not be reached or failed; retryable.
	ErrUnreachable = errors.New("unreachable")
	// ErrNotFound: the backend does not know a device.
	ErrNotFound = errors.New("device not found")
	// ErrRejected: the backend refused the request.
	ErrRejected = errors.New("request rejected")
	// ErrUnsupported: the configured manager cannot do this operation for
	// this component type (see Supports). Map to InvalidArgument or
	// FailedPrecondition.
	ErrUnsupported = errors.New("operation not supported")
)

// classified tags a client error with a backend class while keeping the
// client's own error reachable.
type classified struct {
	class error
	err   error
}

func (c *classified) Error() string        { return c.err.Error() }
func (c *classified) Is(target error) bool { return target == c.class }
func (c *classified) Unwrap() error        { return c.err }

// wrap classifies a nico or psm error. Several item errors joined together
// take the first class in this order: not configured, unreachable, not
// found, rejected.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range []struct {
		class     error
		nico, psm error
	}{
		{ErrNotConfigured, nico.ErrNotConfigured, psm.ErrNotConfigured},
		{ErrUnreachable, nico.ErrUnreachable, psm.ErrUnreachable},
		{ErrNotFound, nico.ErrNotFound, psm.ErrNotFound},
		{ErrRejected, nico.ErrRejected, psm.ErrRejected},
	} {
		if errors.Is(err, m.nico) || errors.Is(err, m.psm) {
			return &classified{class: m.class, err: err}
		}
	}
	return err
}

// PowerOp is a Flow power operation.
type PowerOp string

// The power operations (spec/southbound.md §5.1).
const (
	PowerOn       PowerOp = "power_on"
	ForcePowerOn  PowerOp = "force_power_on"
	PowerOff      PowerOp = "power_off"
	ForcePowerOff PowerOp = "force_power_off"
	Restart       PowerOp = "restart"
	WarmReset     PowerOp = "warm_reset"
	ForceRestart  PowerOp = "force_restart"
	ColdReset     PowerOp = "cold_reset"
)

// PowerOps lists every power operation.
var PowerOps = []PowerOp{PowerOn, ForcePowerOn, PowerOff, ForcePowerOff, Restart, WarmReset, ForceRestart, ColdReset}

// Supports reports whether implementation impl, managing component type t,
// can perform op (spec/southbound.md §6). Operation rules are validated
// against it before a task is written.
func Supports(t ComponentType, impl Implementation, op Operation) bool {
	switch impl {
	case ImplNICo, ImplMock:
		switch op {
		case OpBringUp, OpBringUpStatus:
			return t == Compute
		}
		return t == Compute || t == NVSwitch || t == PowerShelf
	case ImplPSM:
		if t != PowerShelf {
			return false
		}
		switch op {
		case OpInjectExpectation, OpPowerControl, OpPowerStatus, OpFirmwareControl, OpFirmwareStatus, OpFirmwareVersion, OpInventory:
			return true
		}
	}
	return false
}

// SupportsPower reports whether impl can apply power operation p to type t:
// PSM only switches shelves on and off, and Core's AC power cycle (ColdReset)
// exists for compute only.
func SupportsPower(t ComponentType, impl Implementation, p PowerOp) bool {
	if !Supports(t, impl, OpPowerControl) {
		return false
	}
	switch impl {
	case ImplPSM:
		return p == PowerOn || p == ForcePowerOn || p == PowerOff || p == ForcePowerOff
	case ImplNICo, ImplMock:
		return p != ColdReset || t == Compute
	}
	return false
}
