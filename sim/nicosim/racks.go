package nicosim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	forgepb "github.com/nicoflow/flow/proto/gen/forge"
)

// Rack is one simulated Core rack: an expected rack (GetAllExpectedRacks)
// with its health and rack group (FindRacksByIds).
type Rack struct {
	ID        string            `json:"id"`
	ProfileID string            `json:"profile_id,omitempty"`
	GroupID   string            `json:"group_id,omitempty"`
	Name      string            `json:"name,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"` // chassis.manufacturer, chassis.serial-number, location.*…
	Alerts    []string          `json:"alerts,omitempty"` // health alert IDs
	// NoHealth makes FindRacksByIds send the rack without a report.
	NoHealth bool `json:"no_health,omitempty"`
	// Unexpected keeps the rack out of GetAllExpectedRacks (Core knows it,
	// nobody declared it).
	Unexpected bool `json:"unexpected,omitempty"`
}

type rack struct {
	Rack
	healthAt time.Time
}

// SeedRacks adds racks, replacing any with the same ID. It fails, adding
// nothing, when a rack has no ID.
func (s *Sim) SeedRacks(racks []Rack) error {
	for i, r := range racks {
		if r.ID == "" {
			return fmt.Errorf("nicosim: rack %d: id is required", i)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range racks {
		r.Labels = maps.Clone(r.Labels)
		s.racks[r.ID] = &rack{Rack: r, healthAt: s.clock.Now().UTC().Truncate(time.Second)}
	}
	return nil
}

// RemoveRack deletes a rack and reports whether it existed.
func (s *Sim) RemoveRack(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.racks[id]
	delete(s.racks, id)
	return ok
}

// Racks returns the simulated racks ordered by ID.
func (s *Sim) Racks() []Rack {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Rack, 0, len(s.racks))
	for _, id := range slices.Sorted(maps.Keys(s.racks)) {
		out = append(out, s.racks[id].Rack)
	}
	return out
}

// RacksJSON is Racks for the admin surface.
func (s *Sim) RacksJSON() any { return s.Racks() }

// SeedRacksJSON is SeedRacks from a JSON list of Rack.
func (s *Sim) SeedRacksJSON(data []byte) error {
	var racks []Rack
	if err := json.Unmarshal(data, &racks); err != nil {
		return fmt.Errorf("nicosim: racks: %w", err)
	}
	return s.SeedRacks(racks)
}

// DevicePatch changes a device in place, as the hardware or Core would:
// nil fields stay as they are. Firmware entries are merged.
type DevicePatch struct {
	State        *string           `json:"state,omitempty"`  // display state or controller JSON
	Alerts       *[]string         `json:"alerts,omitempty"` // replaces the health alerts
	Firmware     map[string]string `json:"firmware,omitempty"`
	SlotID       *int              `json:"slot_id,omitempty"`
	TrayIndex    *int              `json:"tray_index,omitempty"`
	HostID       *int              `json:"host_id,omitempty"`
	RackID       *string           `json:"rack_id,omitempty"`
	NVLinkDomain *string           `json:"nvlink_domain,omitempty"`
	PoweredOff   *bool             `json:"powered_off,omitempty"`
	// DPUs replaces a compute tray's DPUs.
	DPUs *[]DPU `json:"dpus,omitempty"`
	// Instances entries are merged (a count below 2 makes it one).
	Instances map[string]int `json:"instances,omitempty"`
	// Unreported sets Device.Unreported: Core cannot read the device's
	// installed versions.
	Unreported *bool `json:"unreported,omitempty"`
}

// Update applies p to the device with the given ID or MAC. It fails when no
// device has that key.
func (s *Sim) Update(key string, p DevicePatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.byID("", key)
	if d == nil {
		d = s.byMAC(key)
	}
	if d == nil {
		return errNoDevice
	}
	now := s.clock.Now()
	s.advance(d, now)
	if p.State != nil {
		d.State = *p.State
	}
	if p.Alerts != nil {
		d.Alerts = slices.Clone(*p.Alerts)
		d.healthAt = now.UTC().Truncate(time.Second)
	}
	maps.Copy(d.Firmware, p.Firmware)
	d.versionsReply = nil
	for c, n := range p.Instances {
		if d.Instances == nil {
			d.Instances = map[string]int{}
		}
		if n < 2 {
			delete(d.Instances, c)
		} else {
			d.Instances[c] = n
		}
	}
	if p.Unreported != nil {
		d.Unreported = *p.Unreported
	}
	if p.SlotID != nil {
		d.SlotID = *p.SlotID
	}
	if p.TrayIndex != nil {
		d.TrayIndex = *p.TrayIndex
	}
	if p.HostID != nil {
		d.HostID = *p.HostID
	}
	if p.RackID != nil {
		d.RackID = *p.RackID
	}
	if p.NVLinkDomain != nil {
		d.NVLinkDomain = *p.NVLinkDomain
	}
	if p.PoweredOff != nil {
		d.steps = nil
		d.on = !*p.PoweredOff
	}
	if p.DPUs != nil {
		for _, x := range d.DPUs {
			delete(s.dpuIndex, x.ID)
		}
		d.DPUs = slices.Clone(*p.DPUs)
		for k, x := range d.DPUs {
			s.dpuIndex[x.ID] = dpuRef{host: d, i: k}
		}
	}
	return nil
}

// UpdateJSON is Update from a JSON DevicePatch.
func (s *Sim) UpdateJSON(key string, data []byte) error {
	var p DevicePatch
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("nicosim: patch: %w", err)
	}
	return s.Update(key, p)
}

func (h *handler) FindRacksByIds(ctx context.Context, req *forgepb.RacksByIdsRequest) (res *forgepb.RackList, err error) {
	ids := idsOf(req.GetRackIds())
	defer h.end("FindRacksByIds", ids, &err)
	if err := h.begin(ctx, "FindRacksByIds", ids); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	res = &forgepb.RackList{}
	for _, id := range ids {
		r, ok := h.s.racks[id]
		if !ok {
			continue
		}
		out := &forgepb.Rack{Id: &forgepb.RackId{Id: id}}
		if r.GroupID != "" {
			out.RackGroupId = &forgepb.RackGroupId{Id: r.GroupID}
		}
		if !r.NoHealth {
			hr := &forgepb.HealthReport{Source: "nicosim", ObservedAt: timestamppb.New(r.healthAt)}
			for _, a := range r.Alerts {
				hr.Alerts = append(hr.Alerts, &forgepb.HealthProbeAlert{Id: a, Message: a, InAlertSince: timestamppb.New(r.healthAt)})
			}
			out.Status = &forgepb.RackStatus{Health: hr}
		}
		res.Racks = append(res.Racks, out)
	}
	return res, nil
}

func (h *handler) GetAllExpectedRacks(ctx context.Context, _ *emptypb.Empty) (res *forgepb.ExpectedRackList, err error) {
	defer h.end("GetAllExpectedRacks", nil, &err)
	if err := h.begin(ctx, "GetAllExpectedRacks", nil); err != nil {
		return nil, err
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	res = &forgepb.ExpectedRackList{}
	for _, id := range slices.Sorted(maps.Keys(h.s.racks)) {
		r := h.s.racks[id]
		if r.Unexpected {
			continue
		}
		er := &forgepb.ExpectedRack{RackId: &forgepb.RackId{Id: id}, Metadata: metadataOf(r.Labels)}
		er.Metadata.Name = r.Name
		if r.ProfileID != "" {
			er.RackProfileId = &forgepb.RackProfileId{Id: r.ProfileID}
		}
		if r.GroupID != "" {
			er.RackGroupId = &forgepb.RackGroupId{Id: r.GroupID}
		}
		res.ExpectedRacks = append(res.ExpectedRacks, er)
	}
	return res, nil
}

func (h *handler) GetPowerOptions(ctx context.Context, req *forgepb.PowerOptionRequest) (res *forgepb.PowerOptionResponse, err error) {
	ids := idsOf(req.GetMachineId())
	defer h.end("GetPowerOptions", ids, &err)
	if err := h.begin(ctx, "GetPowerOptions", ids); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		ids = h.listIDs("GetPowerOptions", KindCompute, nil)
	}
	res = &forgepb.PowerOptionResponse{}
	err = h.byIDs("GetPowerOptions", KindCompute, ids, func(d *device, now time.Time) {
		st := forgepb.PowerState_POWER_STATE_OFF
		if d.on {
			st = forgepb.PowerState_POWER_STATE_ON
		}
		res.Response = append(res.Response, &forgepb.PowerOptions{ActualState: st, HostId: &forgepb.MachineId{Id: d.ID}})
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (h *handler) GetMachinePositionInfo(ctx context.Context, req *forgepb.MachinePositionQuery) (res *forgepb.MachinePositionInfoList, err error) {
	ids := idsOf(req.GetMachineIds())
	defer h.end("GetMachinePositionInfo", ids, &err)
	if err := h.begin(ctx, "GetMachinePositionInfo", ids); err != nil {
		return nil, err
	}
	res = &forgepb.MachinePositionInfoList{}
	opt := func(v int) *int32 {
		if v < 0 {
			return nil
		}
		x := int32(v)
		return &x
	}
	err = h.byIDs("GetMachinePositionInfo", KindCompute, ids, func(d *device, _ time.Time) {
		res.MachinePositionInfo = append(res.MachinePositionInfo, &forgepb.MachinePositionInfo{
			MachineId: &forgepb.MachineId{Id: d.ID}, PhysicalSlotNumber: opt(d.SlotID), ComputeTrayIndex: opt(d.TrayIndex), TopologyId: opt(d.HostID),
		})
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
