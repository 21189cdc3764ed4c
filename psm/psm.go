// Package psm is Flow's client of the Powershelf Manager (gRPC service
// v1.PowershelfManager), the optional power-shelf backend. Shelves are keyed
// by PMC MAC. Its methods take and return plain Go types; every call has a
// deadline and every error is classified with the sentinels below.
package psm

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"connectrpc.com/connect"
)

// Error classes; every error a Client returns matches exactly one with
// errors.Is (except the caller's own context cancellation).
var (
	// ErrNotConfigured means PSM_API_URL is unset. Handlers map it to
	// FailedPrecondition.
	ErrNotConfigured = errors.New("Powershelf Manager not configured: set PSM_API_URL")
	// ErrUnreachable means PSM could not be reached or failed internally
	// (Unavailable, DeadlineExceeded, Internal…; item INTERNAL_ERROR).
	ErrUnreachable = errors.New("backend unreachable")
	// ErrNotFound means PSM does not know a shelf (gRPC NotFound, or an item
	// INVALID_ARGUMENT whose message says the shelf or job is unknown).
	ErrNotFound = errors.New("device not found")
	// ErrRejected means PSM refused the request (InvalidArgument and other
	// caller-side codes; item INVALID_ARGUMENT).
	ErrRejected = errors.New("request rejected")
)

// Error is a classified failure of one call or of one shelf in a call.
type Error struct {
	Method string
	Device string // PMC MAC, when the failure concerns one shelf
	Class  error
	Msg    string
	Err    error
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

// Registration asks PSM to manage one shelf.
type Registration struct {
	MAC, IP            string
	Vendor             string // "liteon" (default) or "delta"
	Username, Password string
}

// LogValue redacts the password.
func (r Registration) LogValue() slog.Value {
	return slog.GroupValue(slog.String("pmc_mac", r.MAC), slog.String("pmc_ip", r.IP))
}

// RegisterResult is one registration's outcome.
type RegisterResult struct {
	MAC     string
	New     bool
	Created time.Time
	Err     error
}

// PSU is one power supply of a shelf.
type PSU struct {
	ID, Name, Serial, Firmware string
	On                         bool
}

// Shelf is PSM's view of a power shelf.
type Shelf struct {
	MAC, IP                  string
	Vendor                   string
	PMCSerial, Model         string
	Manufacturer, PartNumber string
	Firmware                 string // PMC firmware version
	ChassisSerial            string
	PSUs                     []PSU
}

// PowerState summarises a shelf's power.
type PowerState string

// The power summaries.
const (
	PowerOn      PowerState = "on"
	PowerOff     PowerState = "off"
	PowerUnknown PowerState = "unknown"
)

// Power returns on when every PSU is on, off when every PSU is off, and
// unknown for a mix or no PSUs.
func (s Shelf) Power() PowerState {
	on, off := 0, 0
	for _, p := range s.PSUs {
		if p.On {
			on++
		} else {
			off++
		}
	}
	switch {
	case len(s.PSUs) > 0 && on == len(s.PSUs):
		return PowerOn
	case len(s.PSUs) > 0 && off == len(s.PSUs):
		return PowerOff
	}
	return PowerUnknown
}

// Result is one shelf's outcome, keyed by the MAC PSM returned.
type Result struct {
	MAC string
	Err error
}

// Component is a shelf firmware component.
type Component string

// The components.
const (
	ComponentPMC Component = "pmc"
	ComponentPSU Component = "psu"
)

// FirmwareUpdate asks for one component of one shelf to move to Version.
type FirmwareUpdate struct {
	MAC       string
	Component Component
	Version   string
}

// FirmwareState is a PSM firmware job state.
type FirmwareState string

// The job states.
const (
	FirmwareUnknown   FirmwareState = "unknown"
	FirmwareQueued    FirmwareState = "queued"
	FirmwareVerifying FirmwareState = "verifying"
	FirmwareCompleted FirmwareState = "completed"
	FirmwareFailed    FirmwareState = "failed"
)

// FirmwareQuery names one (shelf, component) job.
type FirmwareQuery struct {
	MAC       string
	Component Component
}

// FirmwareStatus is one job's state. Err is set when PSM answered the item
// with a non-success status (no such job: ErrNotFound).
type FirmwareStatus struct {
	MAC       string
	Component Component
	State     FirmwareState
	Err       error
}
