package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Admin is what a simulator exposes to its admin HTTP/JSON surface.
type Admin interface {
	Journal() *Journal
	Faults() *Faults
	// Devices returns the simulated devices, JSON-encodable.
	Devices() any
	// SeedJSON adds or replaces devices from a JSON list.
	SeedJSON(data []byte) error
	// Remove deletes a device by ID or MAC and reports whether it existed.
	Remove(device string) bool
}

// DeviceUpdater is implemented by simulators whose devices can be changed
// in place (controller state, health, firmware, position…); AdminHandler
// then serves PATCH /admin/devices/{device}.
type DeviceUpdater interface {
	// UpdateJSON applies a JSON patch to the device with the given ID or
	// MAC.
	UpdateJSON(device string, patch []byte) error
}

// RackAdmin is implemented by simulators that model racks; AdminHandler
// then serves /admin/racks.
type RackAdmin interface {
	RacksJSON() any
	SeedRacksJSON(data []byte) error
	RemoveRack(id string) bool
}

// LeakAdmin is implemented by simulators that model coolant-leak sensors;
// AdminHandler then serves /admin/leaks.
type LeakAdmin interface {
	// SetLeak raises (leaking) or clears the leak alert of the device with
	// the given ID or MAC.
	SetLeak(device string, leaking bool) error
	// LeaksJSON returns the leaking devices, JSON-encodable.
	LeaksJSON() any
}

// DesiredFirmwareAdmin is implemented by simulators that hold desired
// firmware versions; AdminHandler then serves /admin/desired-firmware.
type DesiredFirmwareAdmin interface {
	DesiredFirmwareJSON() any
	// SetDesiredFirmwareJSON replaces the desired versions from a JSON
	// list.
	SetDesiredFirmwareJSON(data []byte) error
}

// AdminHandler serves a simulator's admin surface under /admin/:
//
//	GET    /admin/journal[?method=M]  calls received (JSON list of Call)
//	DELETE /admin/journal             forget them
//	GET    /admin/faults              active faults
//	POST   /admin/faults              add one (JSON Fault) → {"id": N}
//	DELETE /admin/faults              clear all
//	DELETE /admin/faults/{id}         remove one
//	GET    /admin/devices             simulated devices
//	POST   /admin/devices             seed devices (JSON list)
//	DELETE /admin/devices/{device}    remove a device by ID or MAC
//	PATCH  /admin/devices/{device}    change a device (DeviceUpdater only)
//	GET    /admin/racks               simulated racks (RackAdmin only)
//	POST   /admin/racks               add or replace racks (JSON list)
//	DELETE /admin/racks/{rack}        remove a rack
//	GET    /admin/leaks               leaking devices (LeakAdmin only)
//	PUT    /admin/leaks/{device}      raise a device's leak alert
//	DELETE /admin/leaks/{device}      clear it
//	GET    /admin/desired-firmware    desired firmware versions (DesiredFirmwareAdmin only)
//	PUT    /admin/desired-firmware    replace them (JSON list)
//	GET    /admin/                    this list (the routes this simulator serves), as text
//
// It answers loopback clients only (403 to others), whatever address the
// simulator listens on: the surface rewrites the simulated fleet and
// injects faults, with no authentication.
func AdminHandler(a Admin) http.Handler {
	return loopbackOnly(adminMux(a))
}

// loopbackOnly refuses requests whose peer is not a loopback address.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			writeError(w, http.StatusForbidden, errors.New("the simulator's admin surface answers loopback clients only"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adminRoutes are the admin surface's routes as GET /admin/ lists them.
var adminRoutes = []struct{ route, what, needs string }{
	{"GET    /admin/journal[?method=M]", "calls received (JSON list)", ""},
	{"DELETE /admin/journal", "forget them", ""},
	{"GET    /admin/faults", "active faults", ""},
	{"POST   /admin/faults", "add one (JSON fault) -> {\"id\": N}", ""},
	{"DELETE /admin/faults", "clear all", ""},
	{"DELETE /admin/faults/{id}", "remove one", ""},
	{"GET    /admin/devices", "simulated devices", ""},
	{"POST   /admin/devices", "seed devices (JSON list)", ""},
	{"DELETE /admin/devices/{device}", "remove a device by ID or MAC", ""},
	{"PATCH  /admin/devices/{device}", "change a device in place", "devices"},
	{"GET    /admin/racks", "simulated racks", "racks"},
	{"POST   /admin/racks", "add or replace racks (JSON list)", "racks"},
	{"DELETE /admin/racks/{rack}", "remove a rack", "racks"},
	{"GET    /admin/leaks", "leaking devices", "leaks"},
	{"PUT    /admin/leaks/{device}", "raise a device's leak alert", "leaks"},
	{"DELETE /admin/leaks/{device}", "clear it", "leaks"},
	{"GET    /admin/desired-firmware", "desired firmware versions", "desired"},
	{"PUT    /admin/desired-firmware", "replace them (JSON list)", "desired"},
}

// adminIndex is GET /admin/'s text: the routes a serves.
func adminIndex(a Admin) string {
	_, devices := a.(DeviceUpdater)
	_, racks := a.(RackAdmin)
	_, leaks := a.(LeakAdmin)
	_, desired := a.(DesiredFirmwareAdmin)
	has := map[string]bool{"": true, "devices": devices, "racks": racks, "leaks": leaks, "desired": desired}
	var b strings.Builder
	b.WriteString("Simulator admin surface (loopback clients only; JSON bodies; docs/simulators.md)\n")
	for _, r := range adminRoutes {
		if has[r.needs] {
			fmt.Fprintf(&b, "  %-34s %s\n", r.route, r.what)
		}
	}
	return b.String()
}

func adminMux(a Admin) *http.ServeMux {
	mux := http.NewServeMux()
	index := adminIndex(a)
	mux.HandleFunc("GET /admin/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(index))
	})
	if u, ok := a.(DeviceUpdater); ok {
		mux.HandleFunc("PATCH /admin/devices/{device}", func(w http.ResponseWriter, r *http.Request) {
			var raw json.RawMessage
			if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
				writeError(w, http.StatusBadRequest, err)
				return
			}
			if err := u.UpdateJSON(r.PathValue("device"), raw); err != nil {
				status := http.StatusBadRequest
				if errors.Is(err, ErrNoDevice) {
					status = http.StatusNotFound
				}
				writeError(w, status, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}
	if ra, ok := a.(RackAdmin); ok {
		mux.HandleFunc("GET /admin/racks", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, ra.RacksJSON())
		})
		mux.HandleFunc("POST /admin/racks", func(w http.ResponseWriter, r *http.Request) {
			var raw json.RawMessage
			if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
				writeError(w, http.StatusBadRequest, err)
				return
			}
			if err := ra.SeedRacksJSON(raw); err != nil {
				writeError(w, http.StatusBadRequest, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		mux.HandleFunc("DELETE /admin/racks/{rack}", func(w http.ResponseWriter, r *http.Request) {
			if !ra.RemoveRack(r.PathValue("rack")) {
				writeError(w, http.StatusNotFound, errors.New("no such rack"))
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}
	if la, ok := a.(LeakAdmin); ok {
		mux.HandleFunc("GET /admin/leaks", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, la.LeaksJSON())
		})
		for method, leaking := range map[string]bool{"PUT": true, "DELETE": false} {
			mux.HandleFunc(method+" /admin/leaks/{device}", func(w http.ResponseWriter, r *http.Request) {
				if err := la.SetLeak(r.PathValue("device"), leaking); err != nil {
					status := http.StatusBadRequest
					if errors.Is(err, ErrNoDevice) {
						status = http.StatusNotFound
					}
					writeError(w, status, err)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			})
		}
	}
	if da, ok := a.(DesiredFirmwareAdmin); ok {
		mux.HandleFunc("GET /admin/desired-firmware", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, da.DesiredFirmwareJSON())
		})
		mux.HandleFunc("PUT /admin/desired-firmware", func(w http.ResponseWriter, r *http.Request) {
			var raw json.RawMessage
			if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
				writeError(w, http.StatusBadRequest, err)
				return
			}
			if err := da.SetDesiredFirmwareJSON(raw); err != nil {
				writeError(w, http.StatusBadRequest, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}
	mux.HandleFunc("GET /admin/journal", func(w http.ResponseWriter, r *http.Request) {
		var calls []Call
		if m := r.URL.Query().Get("method"); m != "" {
			calls = a.Journal().Calls(m)
		} else {
			calls = a.Journal().Calls()
		}
		writeJSON(w, http.StatusOK, calls)
	})
	mux.HandleFunc("DELETE /admin/journal", func(w http.ResponseWriter, r *http.Request) {
		a.Journal().Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Faults().List())
	})
	mux.HandleFunc("POST /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Fault
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		id, err := a.Faults().Add(f)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		writeJSON(w, http.StatusCreated, map[string]int{"id": id})
	})
	mux.HandleFunc("DELETE /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		a.Faults().Clear()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /admin/faults/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.Atoi(r.PathValue("id"))
		if err != nil {
			writeError(w, http.StatusBadRequest, errors.New("fault id must be a number"))
			return
		}
		if !a.Faults().Remove(id) {
			writeError(w, http.StatusNotFound, errors.New("no such fault"))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /admin/devices", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Devices())
	})
	mux.HandleFunc("POST /admin/devices", func(w http.ResponseWriter, r *http.Request) {
		var raw json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		if err := a.SeedJSON(raw); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /admin/devices/{device}", func(w http.ResponseWriter, r *http.Request) {
		if !a.Remove(r.PathValue("device")) {
			writeError(w, http.StatusNotFound, errors.New("no such device"))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// ErrNoDevice is what a DeviceUpdater returns (wrapped or not) for an
// unknown device.
var ErrNoDevice = errors.New("sim: no such device")

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}
