package sim

import (
	"slices"
	"sync"
	"time"
)

// Call is one request a simulator received: when (simulator clock), which
// method (the RPC name, e.g. "UpdateComponentFirmware"), which devices it
// named (IDs or MACs, as sent), and the gRPC code it answered with ("ok" or
// a connect code name such as "unavailable").
type Call struct {
	Time    time.Time `json:"time"`
	Method  string    `json:"method"`
	Devices []string  `json:"devices,omitempty"`
	Code    string    `json:"code"`
	// Action is what a power-control call asked for (e.g.
	// "SYSTEM_POWER_CONTROL_FORCE_OFF"); "" for other calls.
	Action string `json:"action,omitempty"`
	// Filter is the health alert a listing was filtered by (FindMachineIds
	// and FindSwitchIds with only_with_health_alert: leak detection's
	// polls); "" for other calls.
	Filter string `json:"filter,omitempty"`
}

// Journal records the calls a simulator receives, in arrival order: every
// call, up to the newest JournalMaxCalls calls naming at most
// JournalMaxDevices devices in all (older ones are forgotten, so a
// long-running simulator serving inventory syncs of thousands of racks does
// not keep every listing it answered). It is safe for concurrent use.
type Journal struct {
	mu      sync.Mutex
	calls   []Call
	devices int // over calls
}

// The journal's bounds (see Journal).
const (
	JournalMaxCalls   = 100_000
	JournalMaxDevices = 1_000_000
)

// Record appends c, forgetting the oldest calls past the journal's bounds.
func (j *Journal) Record(c Call) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls = append(j.calls, c)
	j.devices += len(c.Devices)
	drop := 0
	for len(j.calls)-drop > 1 && (len(j.calls)-drop > JournalMaxCalls || j.devices > JournalMaxDevices) {
		j.devices -= len(j.calls[drop].Devices)
		j.calls[drop] = Call{} // let its device list go
		drop++
	}
	// The slice's next growth copies only the calls kept.
	j.calls = j.calls[drop:]
}

// Calls returns a copy of the calls recorded so far; with methods given,
// only the calls to those methods.
func (j *Journal) Calls(methods ...string) []Call {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Call, 0, len(j.calls))
	for _, c := range j.calls {
		if len(methods) == 0 || slices.Contains(methods, c.Method) {
			out = append(out, c)
		}
	}
	return out
}

// CountFor returns how many calls to method named device.
func (j *Journal) CountFor(method, device string) int {
	n := 0
	for _, c := range j.Calls(method) {
		if slices.Contains(c.Devices, device) {
			n++
		}
	}
	return n
}

// Reset forgets every recorded call.
func (j *Journal) Reset() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls, j.devices = nil, 0
}
