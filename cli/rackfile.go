package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/nicoflow/flow/inventory"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Upstream Flow's CLI (`flow rack create --file`) reads its own rack file
// format, not protojson: snake_case keys, lowercase type names ("compute",
// "host"), "tray_index", "mac"/"ip" and "nvl_domain_ids" as plain UUID
// strings. upstreamRackFile reads that format so such files load here too,
// and builds the Rack as upstream's CLI does, except that it invents no
// IDs (the server assigns them).

type upstreamDeviceInfo struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Manufacturer string `json:"manufacturer"`
	Model        string `json:"model"`
	SerialNumber string `json:"serial_number"`
	Description  string `json:"description"`
}

type upstreamRackInput struct {
	Info     upstreamDeviceInfo `json:"info"`
	Location struct {
		Region     string `json:"region"`
		Datacenter string `json:"datacenter"`
		Room       string `json:"room"`
		Position   string `json:"position"`
	} `json:"location"`
	NVLDomainIDs []string                 `json:"nvl_domain_ids"`
	Components   []upstreamComponentInput `json:"components"`
}

type upstreamComponentInput struct {
	Type            string             `json:"type"`
	FirmwareVersion string             `json:"firmware_version"`
	ComponentID     string             `json:"component_id"`
	Info            upstreamDeviceInfo `json:"info"`
	Position        struct {
		SlotID    int32 `json:"slot_id"`
		TrayIndex int32 `json:"tray_index"`
		HostID    int32 `json:"host_id"`
	} `json:"position"`
	BMCs []struct {
		Type string `json:"type"`
		MAC  string `json:"mac"`
		IP   string `json:"ip"`
	} `json:"bmcs"`
}

// upstreamComponentTypes are the type names upstream's CLI accepts (its
// revisions spell the switch "nvswitch" or "nvlswitch").
var upstreamComponentTypes = map[string]flowv1.ComponentType{
	"compute":  flowv1.ComponentType_COMPONENT_TYPE_COMPUTE,
	"nvswitch": flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH, "nvlswitch": flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH, "nvl-switch": flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH,
	"powershelf": flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF, "power-shelf": flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF,
	"torswitch": flowv1.ComponentType_COMPONENT_TYPE_TORSWITCH, "tor-switch": flowv1.ComponentType_COMPONENT_TYPE_TORSWITCH,
	"ums": flowv1.ComponentType_COMPONENT_TYPE_UMS, "cdu": flowv1.ComponentType_COMPONENT_TYPE_CDU,
}

func upstreamInfo(in upstreamDeviceInfo, field string) (*flowv1.DeviceInfo, error) {
	out := &flowv1.DeviceInfo{Name: in.Name, Manufacturer: in.Manufacturer, SerialNumber: in.SerialNumber}
	// Upstream's CLI always sends model and description, empty or not.
	model, desc := in.Model, in.Description
	out.Model, out.Description = &model, &desc
	if in.ID != "" {
		if _, err := uuid.Parse(in.ID); err != nil {
			return nil, fmt.Errorf("%s.id: invalid UUID %q", field, in.ID)
		}
		out.Id = &flowv1.UUID{Id: in.ID}
	}
	return out, nil
}

// upstreamRackFile reads a rack file in upstream's CLI format. Unknown keys
// are refused, so a protojson file is not mistaken for one.
func upstreamRackFile(data []byte) (*flowv1.Rack, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var in upstreamRackInput
	if err := dec.Decode(&in); err != nil {
		return nil, err
	}
	info, err := upstreamInfo(in.Info, "info")
	if err != nil {
		return nil, err
	}
	rack := &flowv1.Rack{Info: info, Location: &flowv1.Location{
		Region: in.Location.Region, Datacenter: in.Location.Datacenter, Room: in.Location.Room, Position: in.Location.Position,
	}}
	for i, id := range in.NVLDomainIDs {
		if _, err := uuid.Parse(id); err != nil {
			return nil, fmt.Errorf("nvl_domain_ids[%d]: invalid UUID %q", i, id)
		}
		rack.NvlDomainIds = append(rack.NvlDomainIds, &flowv1.UUID{Id: id})
	}
	for i, c := range in.Components {
		field := fmt.Sprintf("components[%d]", i)
		typ, ok := upstreamComponentTypes[strings.ToLower(c.Type)]
		if !ok {
			return nil, fmt.Errorf("%s.type: invalid component type %q (compute, nvswitch, powershelf, torswitch, ums or cdu)", field, c.Type)
		}
		ci, err := upstreamInfo(c.Info, field+".info")
		if err != nil {
			return nil, err
		}
		comp := &flowv1.Component{
			Type: typ, Info: ci, FirmwareVersion: c.FirmwareVersion, ComponentId: c.ComponentID,
			Position: &flowv1.RackPosition{SlotId: c.Position.SlotID, TrayIdx: c.Position.TrayIndex, HostId: c.Position.HostID},
		}
		for j, b := range c.BMCs {
			bf := fmt.Sprintf("%s.bmcs[%d]", field, j)
			bmc := &flowv1.BMCInfo{}
			switch strings.ToLower(b.Type) {
			case "host", "":
				bmc.Type = flowv1.BMCType_BMC_TYPE_HOST
			case "dpu":
				bmc.Type = flowv1.BMCType_BMC_TYPE_DPU
			default:
				return nil, fmt.Errorf("%s.type: invalid BMC type %q (host or dpu)", bf, b.Type)
			}
			if b.MAC != "" {
				mac, err := net.ParseMAC(b.MAC)
				if err != nil {
					return nil, fmt.Errorf("%s.mac: invalid MAC address %q", bf, b.MAC)
				}
				bmc.MacAddress = mac.String()
			}
			if b.IP != "" {
				ip := net.ParseIP(b.IP)
				if ip == nil {
					return nil, fmt.Errorf("%s.ip: invalid IP address %q", bf, b.IP)
				}
				s := ip.String()
				bmc.IpAddress = &s
			}
			comp.Bmcs = append(comp.Bmcs, bmc)
		}
		rack.Components = append(rack.Components, comp)
	}
	return rack, nil
}

// rackCreateRequest reads the file of `flow rack create`: a
// CreateExpectedRackRequest, a Rack (both protojson), or a rack file of
// upstream's CLI.
func rackCreateRequest(data []byte) (*flowv1.CreateExpectedRackRequest, error) {
	req := &flowv1.CreateExpectedRackRequest{}
	reqErr := protojson.Unmarshal(data, req)
	if reqErr == nil && req.Rack != nil {
		return req, nil
	}
	rack := &flowv1.Rack{}
	rackErr := protojson.Unmarshal(data, rack)
	if rackErr == nil {
		return &flowv1.CreateExpectedRackRequest{Rack: rack}, nil
	}
	up, upErr := upstreamRackFile(data)
	if upErr == nil {
		return &flowv1.CreateExpectedRackRequest{Rack: up}, nil
	}
	if reqErr == nil {
		reqErr = fmt.Errorf("no rack")
	}
	return nil, fmt.Errorf("neither a CreateExpectedRack request (%v), a Rack (%v) nor an upstream rack file (%v)", reqErr, rackErr, upErr)
}

// splitPlacement takes Flow's own keys "power_feed" and "coolant_loop" out
// of a rack file (at its top, or in its "rack" object): CreateExpectedRack
// cannot carry them (v1.Flow is upstream's), so `flow rack create` sets
// them with SetRackPlacement once the rack exists. It checks the names
// first, so a bad one creates nothing. place is nil when the file has
// neither key.
func splitPlacement(data []byte) (rest []byte, place *adminv1.SetRackPlacementRequest, err error) {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return data, nil, nil // not an object: rackCreateRequest says why
	}
	obj, inner := top, false
	if raw, ok := top["rack"]; ok {
		var r map[string]json.RawMessage
		if json.Unmarshal(raw, &r) == nil {
			if _, has := r["power_feed"]; has || r["coolant_loop"] != nil {
				obj, inner = r, true
			}
		}
	}
	for _, k := range []struct {
		key string
		dst func(p *adminv1.SetRackPlacementRequest, v string)
	}{
		{"power_feed", func(p *adminv1.SetRackPlacementRequest, v string) { p.PowerFeed = &v }},
		{"coolant_loop", func(p *adminv1.SetRackPlacementRequest, v string) { p.CoolantLoop = &v }},
	} {
		raw, ok := obj[k.key]
		if !ok {
			continue
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, nil, fmt.Errorf("%s: want a string", k.key)
		}
		if err := inventory.CheckPlacementName(k.key, v); err != nil {
			return nil, nil, err
		}
		if place == nil {
			place = &adminv1.SetRackPlacementRequest{}
		}
		k.dst(place, v)
		delete(obj, k.key)
	}
	if place == nil {
		return data, nil, nil
	}
	if inner {
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, nil, err
		}
		top["rack"] = b
	}
	rest, err = json.Marshal(top)
	return rest, place, err
}
