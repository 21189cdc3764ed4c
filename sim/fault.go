package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// FaultKind names what a Fault does.
type FaultKind string

// The fault kinds. Call-level kinds (error, latency, garbage) act before the
// handler runs; item kinds (item, drop) act on one device's entry in a reply; process
// kinds (fail, stuck, cancel) act on the timed process a call starts
// (firmware job, decommission); empty and mixed reproduce backend quirks.
const (
	// FaultError fails the whole call with the gRPC code in Code.
	FaultError FaultKind = "error"
	// FaultLatency delays the call by Latency (cut short if the caller gives up).
	FaultLatency FaultKind = "latency"
	// FaultItem answers the device's item with the non-success Status.
	FaultItem FaultKind = "item"
	// FaultDrop leaves the device out of replies (ByIds reads, inventory,
	// status and listings).
	FaultDrop FaultKind = "drop"
	// FaultFail makes the started process fail on entering Phase.
	FaultFail FaultKind = "fail"
	// FaultStuck makes the started process stay in Phase forever.
	FaultStuck FaultKind = "stuck"
	// FaultCancel makes a firmware job end CANCELLED on entering Phase.
	FaultCancel FaultKind = "cancel"
	// FaultEmpty makes a status read answer an empty list (Core's shelf quirk).
	FaultEmpty FaultKind = "empty"
	// FaultMixed leaves a PSM shelf's PSUs in mixed power states.
	FaultMixed FaultKind = "mixed"
	// FaultLie makes a started firmware job end COMPLETED without
	// installing its version: a device that lies about success.
	FaultLie FaultKind = "lie"
	// FaultGarbage answers the call, OK, with bytes its reply type cannot
	// decode (see Garble). It applies per method; it names no device.
	FaultGarbage FaultKind = "garbage"
)

var faultKinds = []FaultKind{FaultError, FaultLatency, FaultItem, FaultDrop, FaultFail, FaultStuck, FaultCancel, FaultEmpty, FaultMixed, FaultGarbage, FaultLie}

// Fault is one injected misbehaviour. Method and Device narrow where it
// applies (empty means any); Times limits how often it fires (0 means every
// time) and Rate makes it fire with that probability (0 means always).
type Fault struct {
	ID      int       `json:"id,omitempty"`
	Kind    FaultKind `json:"kind"`
	Method  string    `json:"method,omitempty"`
	Device  string    `json:"device,omitempty"`
	Code    string    `json:"code,omitempty"`    // error: connect code name, e.g. "unavailable"
	Status  string    `json:"status,omitempty"`  // item: "not_found", "invalid_argument", "internal_error", "unavailable"
	Message string    `json:"message,omitempty"` // error and item text
	Phase   string    `json:"phase,omitempty"`   // fail, stuck, cancel: e.g. "in_progress"
	// Component narrows a firmware-job fault (fail, stuck, cancel, lie)
	// to the job of that sub-component ("bios", "nic"…); the device's
	// other jobs run normally. Empty: any job.
	Component string   `json:"component,omitempty"`
	Latency   Duration `json:"latency,omitempty"`
	Times     int      `json:"times,omitempty"`
	Rate      float64  `json:"rate,omitempty"`
	fired     int
}

// Duration is a time.Duration that reads and writes JSON as "250ms".
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return errors.New("duration must be a string such as \"250ms\"")
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Validate reports whether f is well formed.
func (f Fault) Validate() error {
	if !contains(faultKinds, f.Kind) {
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	if f.Kind == FaultError {
		if _, err := f.code(); err != nil {
			return err
		}
	}
	if f.Kind == FaultGarbage && f.Device != "" {
		return errors.New("a garbage fault applies to a method, not a device: leave device empty")
	}
	if f.Component != "" && !contains([]FaultKind{FaultFail, FaultStuck, FaultCancel, FaultLie}, f.Kind) {
		return fmt.Errorf("component narrows a firmware job fault (fail, stuck, cancel, lie), not a %s fault", f.Kind)
	}
	if f.Rate < 0 || f.Rate > 1 {
		return errors.New("rate must be within [0, 1]")
	}
	if f.Times < 0 {
		return errors.New("times must not be negative")
	}
	return nil
}

func (f Fault) code() (connect.Code, error) {
	var c connect.Code
	if f.Code == "" {
		return connect.CodeUnavailable, nil
	}
	if err := c.UnmarshalText([]byte(strings.ToLower(f.Code))); err != nil {
		return 0, fmt.Errorf("unknown gRPC code %q", f.Code)
	}
	return c, nil
}

// Faults is a simulator's set of active faults. It is safe for concurrent
// use.
type Faults struct {
	mu     sync.Mutex
	next   int
	faults []*Fault
	rand   *rand.Rand
}

// NewFaults returns an empty set whose rate-based faults draw from a PRNG
// seeded with seed, so runs repeat.
func NewFaults(seed uint64) *Faults {
	return &Faults{rand: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Add validates f, activates it and returns its ID.
func (fs *Faults) Add(f Fault) (int, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.next++
	f.ID = fs.next
	f.fired = 0
	fs.faults = append(fs.faults, &f)
	return f.ID, nil
}

// Remove deactivates the fault with id and reports whether it existed.
func (fs *Faults) Remove(id int) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, f := range fs.faults {
		if f.ID == id {
			fs.faults = append(fs.faults[:i], fs.faults[i+1:]...)
			return true
		}
	}
	return false
}

// Clear deactivates every fault.
func (fs *Faults) Clear() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.faults = nil
}

// List returns copies of the active faults.
func (fs *Faults) List() []Fault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]Fault, 0, len(fs.faults))
	for _, f := range fs.faults {
		out = append(out, *f)
	}
	return out
}

// Take returns the first active fault of kind that applies to method and
// device, counting it as fired (a fault whose Times are used up is dropped).
// An empty device matches only faults that name no device. Faults that
// name a sub-component are left to TakeComponent.
func (fs *Faults) Take(kind FaultKind, method, device string) (Fault, bool) {
	return fs.TakeComponent(kind, method, device, "")
}

// TakeComponent is Take for the firmware job of one sub-component: it
// also matches faults that name that component (any case); an empty
// component matches only faults that name none.
func (fs *Faults) TakeComponent(kind FaultKind, method, device, component string) (Fault, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, f := range fs.faults {
		if f.Kind != kind || (f.Method != "" && f.Method != method) || (f.Device != "" && !strings.EqualFold(f.Device, device)) {
			continue
		}
		if f.Component != "" && !strings.EqualFold(f.Component, component) {
			continue
		}
		if f.Rate > 0 && fs.rand.Float64() >= f.Rate {
			continue
		}
		f.fired++
		if f.Times > 0 && f.fired >= f.Times {
			fs.faults = append(fs.faults[:i], fs.faults[i+1:]...)
		}
		return *f, true
	}
	return Fault{}, false
}

// TakeAny is Take over several devices; the call-level faults use it with
// every device a request names, plus "" for faults that name none.
func (fs *Faults) TakeAny(kind FaultKind, method string, devices []string) (Fault, bool) {
	for _, d := range append([]string{""}, devices...) {
		if f, ok := fs.Take(kind, method, d); ok {
			return f, true
		}
	}
	return Fault{}, false
}

// Gate applies the call-level faults for a call to method naming devices:
// first any latency (waiting on ctx, so an impatient caller is released),
// then any error. It returns the error to answer with, or nil.
func (fs *Faults) Gate(ctx context.Context, method string, devices []string) error {
	if f, ok := fs.TakeAny(FaultLatency, method, devices); ok {
		t := time.NewTimer(time.Duration(f.Latency))
		select {
		case <-ctx.Done():
			t.Stop()
			return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
		case <-t.C:
		}
	}
	if f, ok := fs.TakeAny(FaultError, method, devices); ok {
		code, _ := f.code()
		msg := f.Message
		if msg == "" {
			msg = "injected fault"
		}
		return connect.NewError(code, errors.New(msg))
	}
	return nil
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
