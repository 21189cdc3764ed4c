package inventory_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// TestReadmeExampleCurl replays the README example as curl sends it: the
// rack from examples/rack-g10.json, then Connect JSON with snake_case names.
func TestReadmeExampleCurl(t *testing.T) {
	t.Parallel()
	b := setup(t)
	raw, err := os.ReadFile("../examples/rack-g10.json")
	require.NoError(t, err)
	req := &flowv1.CreateExpectedRackRequest{}
	require.NoError(t, protojson.Unmarshal(raw, req))
	rackID := b.create(t, req.GetRack())

	body := `{"serial_info": {"manufacturer": "Wiwynn", "serial_number": "B8111801000851500108Y0SA"}, "with_rack": true}`
	res, err := http.Post(b.url+"/v1.Flow/GetComponentInfoBySerial", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	out, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	var got struct {
		Component struct {
			Type string
			Info struct {
				Manufacturer, Model, SerialNumber string
			}
			FirmwareVersion string
			Position        struct{ SlotID, TrayIdx int32 }
			Bmcs            []struct{ Type, MacAddress string }
			RackID          struct{ ID string } `json:"rackId"`
		}
		Rack struct {
			Info     struct{ Name, Manufacturer, SerialNumber string }
			Location struct{ Region, Datacenter, Room, Position string }
		}
	}
	require.NoError(t, json.Unmarshal(out, &got), string(out))
	require.Equal(t, "COMPONENT_TYPE_COMPUTE", got.Component.Type)
	require.Equal(t, "WiWynn", got.Component.Info.Manufacturer)
	require.Equal(t, "GB200 Compute Tray", got.Component.Info.Model)
	require.Equal(t, "FW 1.2.00GA", got.Component.FirmwareVersion)
	require.Equal(t, int32(36), got.Component.Position.SlotID)
	require.Equal(t, int32(16), got.Component.Position.TrayIdx)
	require.Equal(t, rackID, got.Component.RackID.ID)
	require.Equal(t, []struct{ Type, MacAddress string }{
		{"BMC_TYPE_HOST", "d8:19:09:00:04:af"}, {"BMC_TYPE_DPU", "e0:9d:73:80:c0:59"}, {"BMC_TYPE_DPU", "e0:9d:73:88:de:1b"},
	}, got.Component.Bmcs)
	require.Equal(t, "g10", got.Rack.Info.Name)
	require.Equal(t, "B8111801000951700005Y0SA", got.Rack.Info.SerialNumber)
	require.Equal(t, "EW-F00-DH-02-G10", got.Rack.Location.Position)

	// A bad request answers a Connect error naming the field.
	res, err = http.Post(b.url+"/v1.Flow/GetComponentInfoBySerial", "application/json", strings.NewReader(`{"serial_info": {"manufacturer": "Wiwynn"}}`))
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	out, err = io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Contains(t, string(out), `"code":"invalid_argument"`)
	require.Contains(t, string(out), "serial_info.serial_number")
}

// TestGRPCProtocol serves the handler over HTTP/2 and calls it with a gRPC
// client, as upstream Flow clients do.
func TestGRPCProtocol(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	mux := http.NewServeMux()
	mux.Handle(flowv1connect.NewFlowHandler(flowServer{Handler: inventory.NewHandler(inventory.NewService(), pool)}))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := flowv1connect.NewFlowClient(srv.Client(), srv.URL, connect.WithGRPC())
	ctx := t.Context()

	created, err := client.CreateExpectedRack(ctx, &flowv1.CreateExpectedRackRequest{Rack: g10()})
	require.NoError(t, err)
	res, err := client.GetComponentInfoBySerial(ctx, &flowv1.GetComponentInfoBySerialRequest{
		SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "Wiwynn", SerialNumber: "B8111801000851500108Y0SA"},
		WithRack:   true,
	})
	require.NoError(t, err)
	require.Equal(t, created.GetId().GetId(), res.GetRack().GetInfo().GetId().GetId())
	_, err = client.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{Id: id("nope")})
	requireCode(t, err, connect.CodeInvalidArgument, "id: malformed UUID")
}

// TestRackToProtoUUIDs checks the UUID text of converted components (built
// in one shared buffer, racks' and domains' reused) against uuid.String.
func TestRackToProtoUUIDs(t *testing.T) {
	t.Parallel()
	domain := uuid.New()
	r := inventory.Rack{ID: uuid.New(), NVLDomainID: &domain}
	for range 40 {
		r.Components = append(r.Components, inventory.Component{ID: uuid.New(), RackID: &r.ID, NVLDomainID: &domain,
			BMCs: []inventory.BMC{{Type: inventory.BMCTypeHost, MAC: "aa:bb:cc:dd:ee:ff"}}})
	}
	other := uuid.New()
	r.Components = append(r.Components, inventory.Component{ID: uuid.Nil, RackID: &other}, inventory.Component{ID: uuid.Max})
	got := inventory.RackToProto(r)
	require.Len(t, got.GetComponents(), len(r.Components))
	for i, c := range r.Components {
		pc := got.GetComponents()[i]
		require.Equal(t, c.ID.String(), pc.GetInfo().GetId().GetId())
		if c.RackID == nil {
			require.Nil(t, pc.GetRackId())
		} else {
			require.Equal(t, c.RackID.String(), pc.GetRackId().GetId())
		}
		if c.NVLDomainID == nil {
			require.Nil(t, pc.GetNvlDomainId())
		} else {
			require.Equal(t, domain.String(), pc.GetNvlDomainId().GetId())
		}
		require.Len(t, pc.GetBmcs(), len(c.BMCs))
	}
}
