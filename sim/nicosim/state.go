package nicosim

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"
)

// The simulator's state as a file (flow dev keeps it in its state folder
// across restarts): devices with their power, lifecycle and firmware jobs
// in progress, racks, ID counters, expected devices and the desired
// firmware versions. Faults and the journal are not kept.

type stateFile struct {
	Version  int                                 `json:"version"`
	Devices  []deviceState                       `json:"devices"`
	Racks    []rackState                         `json:"racks,omitempty"`
	NextID   map[string]int                      `json:"next_id,omitempty"`
	Expected map[string]map[string]expectedState `json:"expected,omitempty"`
	Desired  []DesiredFirmware                   `json:"desired_firmware,omitempty"`
}

type deviceState struct {
	Device        Device      `json:"device"`
	On            bool        `json:"on"`
	Steps         []stepState `json:"steps,omitempty"`
	Jobs          []jobState  `json:"jobs,omitempty"`
	GateOpen      bool        `json:"gate_open"`
	GateAt        time.Time   `json:"gate_at,omitzero"`
	DecomAt       time.Time   `json:"decom_at,omitzero"`
	Decomming     bool        `json:"decomming,omitempty"`
	DecomStuck    bool        `json:"decom_stuck,omitempty"`
	DecomFail     bool        `json:"decom_fail,omitempty"`
	ControllerRaw string      `json:"controller_raw,omitempty"`
	HealthAt      time.Time   `json:"health_at,omitzero"`
}

type stepState struct {
	At time.Time `json:"at"`
	On bool      `json:"on"`
}

type jobState struct {
	Component   string    `json:"component"`
	Target      string    `json:"target"`
	Created     time.Time `json:"created"`
	FailPhase   string    `json:"fail_phase,omitempty"`
	StuckPhase  string    `json:"stuck_phase,omitempty"`
	CancelPhase string    `json:"cancel_phase,omitempty"`
	Message     string    `json:"message,omitempty"`
	Applied     bool      `json:"applied,omitempty"`
	Lie         bool      `json:"lie,omitempty"`
}

type rackState struct {
	Rack     Rack      `json:"rack"`
	HealthAt time.Time `json:"health_at,omitzero"`
}

type expectedState struct {
	MAC    string            `json:"mac"`
	Serial string            `json:"serial,omitempty"`
	RackID string            `json:"rack_id,omitempty"`
	IP     string            `json:"ip,omitempty"`
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// MarshalState returns the simulator's state (see RestoreState).
func (s *Sim) MarshalState() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := stateFile{Version: 1, NextID: maps.Clone(s.nextID), Desired: s.desired}
	for _, d := range s.devices {
		ds := deviceState{
			Device: d.Device, On: d.on, GateOpen: d.gateOpen, GateAt: d.gateAt, DecomAt: d.decomAt,
			Decomming: d.decomming, DecomStuck: d.decomStuck, DecomFail: d.decomFail, ControllerRaw: d.controllerRaw, HealthAt: d.healthAt,
		}
		for _, st := range d.steps {
			ds.Steps = append(ds.Steps, stepState{At: st.at, On: st.on})
		}
		for _, j := range d.jobs {
			ds.Jobs = append(ds.Jobs, jobState{Component: j.component, Target: j.target, Created: j.created, FailPhase: j.failPhase,
				StuckPhase: j.stuckPhase, CancelPhase: j.cancelPhase, Message: j.message, Applied: j.applied, Lie: j.lie})
		}
		f.Devices = append(f.Devices, ds)
	}
	for _, r := range s.racks {
		f.Racks = append(f.Racks, rackState{Rack: r.Rack, HealthAt: r.healthAt})
	}
	if len(s.expected) > 0 {
		f.Expected = map[string]map[string]expectedState{}
		for kind, byMAC := range s.expected {
			f.Expected[kind] = map[string]expectedState{}
			for mac, e := range byMAC {
				f.Expected[kind][mac] = expectedState{MAC: e.mac, Serial: e.serial, RackID: e.rackID, IP: e.ip, Name: e.name, Labels: e.labels}
			}
		}
	}
	return json.Marshal(f)
}

// RestoreState replaces the simulator's devices, racks, expected devices
// and desired firmware versions with a state MarshalState returned: power changes and firmware jobs in
// progress go on from where they were (their times are absolute).
func (s *Sim) RestoreState(data []byte) error {
	var f stateFile
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("nicosim: restore state: %w", err)
	}
	if f.Version != 1 {
		return fmt.Errorf("nicosim: restore state: unknown version %d", f.Version)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.desired = f.Desired
	s.devices = nil
	for _, ds := range f.Devices {
		if !validKind(ds.Device.Kind) || ds.Device.BMCMAC == "" {
			return fmt.Errorf("nicosim: restore state: device %q has no valid kind or BMC MAC", ds.Device.Name)
		}
		d := &device{
			Device: ds.Device, on: ds.On, gateOpen: ds.GateOpen, gateAt: ds.GateAt, decomAt: ds.DecomAt,
			decomming: ds.Decomming, decomStuck: ds.DecomStuck, decomFail: ds.DecomFail, controllerRaw: ds.ControllerRaw, healthAt: ds.HealthAt,
		}
		if d.Firmware == nil {
			d.Firmware = map[string]string{}
		}
		for _, st := range ds.Steps {
			d.steps = append(d.steps, powerStep{at: st.At, on: st.On})
		}
		for _, j := range ds.Jobs {
			d.jobs = append(d.jobs, &job{component: j.Component, target: j.Target, created: j.Created, failPhase: j.FailPhase,
				stuckPhase: j.StuckPhase, cancelPhase: j.CancelPhase, message: j.Message, applied: j.Applied, lie: j.Lie})
		}
		s.devices = append(s.devices, d)
	}
	s.reindex()
	s.racks = map[string]*rack{}
	for _, r := range f.Racks {
		s.racks[r.Rack.ID] = &rack{Rack: r.Rack, healthAt: r.HealthAt}
	}
	s.nextID = map[string]int{}
	maps.Copy(s.nextID, f.NextID)
	s.expected = map[string]map[string]*expected{KindCompute: {}, KindNVSwitch: {}, KindPowerShelf: {}}
	for kind, byMAC := range f.Expected {
		if s.expected[kind] == nil {
			s.expected[kind] = map[string]*expected{}
		}
		for mac, e := range byMAC {
			s.expected[kind][mac] = &expected{mac: e.MAC, serial: e.Serial, rackID: e.RackID, ip: e.IP, name: e.Name, labels: e.Labels}
		}
	}
	return nil
}
