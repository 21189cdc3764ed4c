package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// upstreamCLIRackRequest builds the CreateExpectedRackRequest upstream's
// CLI (`flow rack create --file`, rest-api/flow/cmd/rack_json.go and
// pkg/client/convert.go at 4b944f22) sends for a rack file: a fresh UUID
// for the rack and for every component without one, model and description
// always present (empty or not), an empty nvl_domain_ids, every
// component's position, BMC MACs as Go prints them and IPs when given.
// It is written here from their description, apart from the CLI code of
// package cli, so the two cannot share a mistake.
func upstreamCLIRackRequest(t *testing.T, data []byte) *flowv1.CreateExpectedRackRequest {
	t.Helper()
	type info struct{ ID, Name, Manufacturer, Model, SerialNumber, Description string }
	var in struct {
		Info     info
		Location struct{ Region, Datacenter, Room, Position string }
		Comps    []struct {
			Type, FirmwareVersion, ComponentID string
			Info                               info
			Position                           struct{ SlotID, TrayIndex, HostID int32 }
			BMCs                               []struct{ Type, MAC, IP string }
		} `json:"components"`
	}
	// Their keys are snake_case; encoding/json matches case-insensitively
	// but not across underscores, so map them to these field names first.
	for _, k := range []string{"serial_number", "firmware_version", "component_id", "slot_id", "tray_index", "host_id"} {
		data = bytes.ReplaceAll(data, []byte(`"`+k+`"`), []byte(`"`+strings.ReplaceAll(k, "_", "")+`"`))
	}
	require.NoError(t, json.Unmarshal(data, &in))
	devInfo := func(i info) *flowv1.DeviceInfo {
		id := i.ID
		if id == "" {
			id = uuid.NewString()
		}
		model, desc := i.Model, i.Description
		return &flowv1.DeviceInfo{Id: &flowv1.UUID{Id: id}, Name: i.Name, Manufacturer: i.Manufacturer, Model: &model, SerialNumber: i.SerialNumber, Description: &desc}
	}
	types := map[string]flowv1.ComponentType{"compute": 1, "nvswitch": 2, "nvlswitch": 2, "powershelf": 3}
	rack := &flowv1.Rack{
		Info:         devInfo(in.Info),
		Location:     &flowv1.Location{Region: in.Location.Region, Datacenter: in.Location.Datacenter, Room: in.Location.Room, Position: in.Location.Position},
		NvlDomainIds: []*flowv1.UUID{},
	}
	for _, c := range in.Comps {
		typ, ok := types[strings.ToLower(c.Type)]
		require.True(t, ok, c.Type)
		comp := &flowv1.Component{
			Type: typ, Info: devInfo(c.Info), FirmwareVersion: c.FirmwareVersion, ComponentId: c.ComponentID,
			Position: &flowv1.RackPosition{SlotId: c.Position.SlotID, TrayIdx: c.Position.TrayIndex, HostId: c.Position.HostID},
		}
		for _, b := range c.BMCs {
			bmc := &flowv1.BMCInfo{Type: flowv1.BMCType_BMC_TYPE_HOST}
			if strings.EqualFold(b.Type, "dpu") {
				bmc.Type = flowv1.BMCType_BMC_TYPE_DPU
			}
			if b.MAC != "" {
				mac, err := net.ParseMAC(b.MAC)
				require.NoError(t, err)
				bmc.MacAddress = mac.String()
			}
			if b.IP != "" {
				ip := net.ParseIP(b.IP).String()
				bmc.IpAddress = &ip
			}
			comp.Bmcs = append(comp.Bmcs, bmc)
		}
		rack.Components = append(rack.Components, comp)
	}
	return &flowv1.CreateExpectedRackRequest{Rack: rack}
}

// TestUpstreamCLIRackCreateFile: what upstream's CLI sends for a rack file
// (our examples/rack-upstream-format.json, in their format, with the
// plain-text description "Example GB200 NVL72 rack") is accepted over gRPC
// as sent: the rack and its components keep the IDs the client chose, and
// read back as given.
func TestUpstreamCLIRackCreateFile(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../examples/rack-upstream-format.json")
	require.NoError(t, err)
	req := upstreamCLIRackRequest(t, data)
	sent := proto.Clone(req).(*flowv1.CreateExpectedRackRequest)

	e := startE2E(t, 10*time.Millisecond)
	client := flowv1connect.NewFlowClient(h2cClient(), e.url, connect.WithGRPC())
	ctx := context.Background()
	res, err := client.CreateExpectedRack(ctx, req)
	require.NoError(t, err)
	require.Equal(t, sent.GetRack().GetInfo().GetId().GetId(), res.GetId().GetId(), "the ID the client chose")

	got, err := client.GetRackInfoBySerial(ctx, &flowv1.GetRackInfoBySerialRequest{
		SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "Wiwynn", SerialNumber: "NVL72-UPSTREAM-FMT-01"}, WithComponents: true,
	})
	require.NoError(t, err)
	r := got.GetRack()
	require.Equal(t, "Example GB200 NVL72 rack", r.GetInfo().GetDescription())
	require.Equal(t, "GB200 NVL72", r.GetInfo().GetModel())
	require.Equal(t, sent.GetRack().GetLocation().GetPosition(), r.GetLocation().GetPosition())
	require.Len(t, r.GetComponents(), len(sent.GetRack().GetComponents()))
	byID := map[string]*flowv1.Component{}
	for _, c := range r.GetComponents() {
		byID[c.GetInfo().GetId().GetId()] = c
	}
	for _, want := range sent.GetRack().GetComponents() {
		c, ok := byID[want.GetInfo().GetId().GetId()]
		require.True(t, ok, "component %s kept its client-chosen ID", want.GetInfo().GetName())
		require.Equal(t, want.GetType(), c.GetType())
		require.Equal(t, want.GetInfo().GetName(), c.GetInfo().GetName())
		require.Equal(t, want.GetInfo().GetDescription(), c.GetInfo().GetDescription(), "empty or plain text")
		require.Equal(t, want.GetFirmwareVersion(), c.GetFirmwareVersion())
		require.Equal(t, want.GetPosition().GetSlotId(), c.GetPosition().GetSlotId())
		require.Equal(t, want.GetPosition().GetTrayIdx(), c.GetPosition().GetTrayIdx())
		require.Equal(t, want.GetPosition().GetHostId(), c.GetPosition().GetHostId())
		require.Len(t, c.GetBmcs(), len(want.GetBmcs()))
		for i, b := range want.GetBmcs() {
			require.Equal(t, b.GetType(), c.GetBmcs()[i].GetType())
			require.Equal(t, b.GetMacAddress(), c.GetBmcs()[i].GetMacAddress())
			require.Equal(t, b.GetIpAddress(), c.GetBmcs()[i].GetIpAddress())
		}
	}

	// Their CLI run again on the same file: new UUIDs, same serial.
	_, err = client.CreateExpectedRack(ctx, upstreamCLIRackRequest(t, data))
	require.Equal(t, connect.CodeAlreadyExists, connect.CodeOf(err), "%v", err)
}
