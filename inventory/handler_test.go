package inventory_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// flowServer serves the inventory handler as v1.Flow; other methods answer
// Unimplemented (embedded one level deeper, as in app).
type flowServer struct {
	unimplemented
	*inventory.Handler
}

type unimplemented struct {
	flowv1connect.UnimplementedFlowHandler
}

type testBundle struct {
	client flowv1connect.FlowClient
	url    string // server base URL, for extra clients
	svc    *inventory.Service
	h      *inventory.Handler
	pool   *pgxpool.Pool
	ctx    context.Context
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	svc := inventory.NewService()
	mux := http.NewServeMux()
	h := inventory.NewHandler(svc, pool)
	mux.Handle(flowv1connect.NewFlowHandler(flowServer{Handler: h}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testBundle{client: flowv1connect.NewFlowClient(srv.Client(), srv.URL), svc: svc, h: h, pool: pool, ctx: context.Background(), url: srv.URL}
}

func str(s string) *string { return &s }

func id(s string) *flowv1.UUID { return &flowv1.UUID{Id: s} }

// g10 is the README example rack.
func g10() *flowv1.Rack {
	return &flowv1.Rack{
		Info: &flowv1.DeviceInfo{Name: "g10", Manufacturer: "Wiwynn", SerialNumber: "B8111801000951700005Y0SA"},
		Location: &flowv1.Location{
			Region: "MY", Datacenter: "jhb01", Room: "EW-F00-DH-02", Position: "EW-F00-DH-02-G10",
		},
		Components: []*flowv1.Component{{
			Type: flowv1.ComponentType_COMPONENT_TYPE_COMPUTE,
			Info: &flowv1.DeviceInfo{
				Manufacturer: "WiWynn", Model: str("GB200 Compute Tray"), SerialNumber: "B8111801000851500108Y0SA",
			},
			FirmwareVersion: "FW 1.2.00GA",
			Position:        &flowv1.RackPosition{SlotId: 36, TrayIdx: 16, HostId: 0},
			Bmcs: []*flowv1.BMCInfo{
				{Type: flowv1.BMCType_BMC_TYPE_HOST, MacAddress: "d8:19:09:00:04:af"},
				{Type: flowv1.BMCType_BMC_TYPE_DPU, MacAddress: "e0:9d:73:80:c0:59"},
				{Type: flowv1.BMCType_BMC_TYPE_DPU, MacAddress: "e0:9d:73:88:de:1b"},
			},
		}},
	}
}

// smallRack is a rack named name with n compute trays; serials and MACs
// derive from tag so racks of one test do not collide.
func smallRack(name string, tag byte, n int) *flowv1.Rack {
	r := &flowv1.Rack{
		Info:       &flowv1.DeviceInfo{Name: name, Manufacturer: "Acme", SerialNumber: fmt.Sprintf("RACK-%s-%d", name, tag), Model: str("M-" + name)},
		Location:   &flowv1.Location{Region: "r1"},
		ExternalId: "ext-" + name,
	}
	for i := 0; i < n; i++ {
		typ := flowv1.ComponentType_COMPONENT_TYPE_COMPUTE
		if i%2 == 1 {
			typ = flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH
		}
		r.Components = append(r.Components, &flowv1.Component{
			Type:        typ,
			Info:        &flowv1.DeviceInfo{Name: fmt.Sprintf("%s-c%d", name, i), Manufacturer: "Acme", SerialNumber: fmt.Sprintf("C-%s-%d-%d", name, tag, i)},
			ComponentId: fmt.Sprintf("machine-%s-%d", name, i),
			Bmcs:        []*flowv1.BMCInfo{{Type: flowv1.BMCType_BMC_TYPE_HOST, MacAddress: fmt.Sprintf("AA-00-00-%02X-%02X-%02X", tag, len(name), i)}},
		})
	}
	return r
}

func (b *testBundle) create(t testing.TB, r *flowv1.Rack) string {
	t.Helper()
	res, err := b.client.CreateExpectedRack(b.ctx, &flowv1.CreateExpectedRackRequest{Rack: r})
	require.NoError(t, err)
	return res.GetId().GetId()
}

func requireCode(t testing.TB, err error, code connect.Code, contains string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, connect.CodeOf(err), "error: %v", err)
	require.Contains(t, err.Error(), contains)
}

func TestParseMAC(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, in, want string }{
		{name: "Upper", in: "AA:BB:CC:DD:EE:FF", want: "aa:bb:cc:dd:ee:ff"},
		{name: "Dash", in: "aa-bb-cc-dd-ee-ff", want: "aa:bb:cc:dd:ee:ff"},
		{name: "Dots", in: "aabb.ccdd.eeff", want: "aa:bb:cc:dd:ee:ff"},
		{name: "Bare", in: "AABBCCDDEEFF", want: "aa:bb:cc:dd:ee:ff"},
		{name: "Short", in: "aa:bb:cc", want: ""},
		{name: "Junk", in: "zz:bb:cc:dd:ee:ff", want: ""},
		{name: "Empty", in: "", want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := inventory.ParseMAC(tt.in)
			if tt.want == "" {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.String())
		})
	}
}

func TestCreateExpectedRack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, g10())

	for _, tt := range []struct {
		name     string
		mutate   func(r *flowv1.Rack)
		code     connect.Code
		contains string
	}{
		{"NoRack", nil, connect.CodeInvalidArgument, "rack: required"},
		{"EmptySerial", func(r *flowv1.Rack) { r.Info.SerialNumber = "" }, connect.CodeInvalidArgument, "rack.info.serial_number"},
		{"EmptyManufacturer", func(r *flowv1.Rack) { r.Info.Manufacturer = "" }, connect.CodeInvalidArgument, "rack.info.manufacturer"},
		{"BadRackID", func(r *flowv1.Rack) { r.Info.Id = id("nope") }, connect.CodeInvalidArgument, "rack.info.id: malformed UUID"},
		{"UnknownType", func(r *flowv1.Rack) { r.Components[0].Type = 0 }, connect.CodeInvalidArgument, "rack.components[0].type"},
		{"EnumOutOfRange", func(r *flowv1.Rack) { r.Components[0].Type = 42 }, connect.CodeInvalidArgument, "rack.components[0].type"},
		{"BadBMCType", func(r *flowv1.Rack) { r.Components[0].Bmcs[1].Type = 0 }, connect.CodeInvalidArgument, "rack.components[0].bmcs[1].type"},
		{"BadMAC", func(r *flowv1.Rack) { r.Components[0].Bmcs[0].MacAddress = "xx" }, connect.CodeInvalidArgument, "rack.components[0].bmcs[0].mac_address"},
		{"EmptyComponentSerial", func(r *flowv1.Rack) { r.Components[0].Info.SerialNumber = "" }, connect.CodeInvalidArgument, "rack.components[0].info.serial_number"},
		{"DuplicateSerialInRequest", func(r *flowv1.Rack) {
			c := proto.Clone(r.Components[0]).(*flowv1.Component)
			c.Bmcs = nil
			r.Components = append(r.Components, c)
		}, connect.CodeInvalidArgument, "rack.components[1].info.serial_number"},
		{"DuplicateMACInRequest", func(r *flowv1.Rack) { r.Components[0].Bmcs[1].MacAddress = "D8-19-09-00-04-AF" }, connect.CodeInvalidArgument, "rack.components[0].bmcs[1].mac_address"},
		{"RackSerialTakenOtherCase", func(r *flowv1.Rack) { r.Components = nil; r.Info.Manufacturer = "WIWYNN" }, connect.CodeAlreadyExists, "rack already exists"},
		{"ComponentSerialTaken", func(r *flowv1.Rack) { r.Info.SerialNumber = "other"; r.Components[0].Bmcs = nil }, connect.CodeAlreadyExists, "B8111801000851500108Y0SA"},
		{"MACTaken", func(r *flowv1.Rack) {
			r.Info.SerialNumber = "other"
			r.Components[0].Info.SerialNumber = "other-c"
			r.Components[0].Bmcs[0].MacAddress = "02:00:00:00:00:01"
			r.Components[0].Bmcs[1].MacAddress = "02:00:00:00:00:02"
			r.Components[0].Bmcs[2].MacAddress = "E0-9D-73-88-DE-1B"
		}, connect.CodeAlreadyExists, "e0:9d:73:88:de:1b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := &flowv1.CreateExpectedRackRequest{}
			if tt.mutate != nil {
				req.Rack = g10()
				tt.mutate(req.Rack)
			}
			_, err := b.client.CreateExpectedRack(b.ctx, req)
			requireCode(t, err, tt.code, tt.contains)
		})
	}

	t.Run("FailedCallChangesNothing", func(t *testing.T) {
		t.Parallel()
		r := smallRack("atomic", 1, 3)
		r.Components[2].Bmcs[0].MacAddress = "d8:19:09:00:04:af" // taken by g10
		_, err := b.client.CreateExpectedRack(b.ctx, &flowv1.CreateExpectedRackRequest{Rack: r})
		requireCode(t, err, connect.CodeAlreadyExists, "d8:19:09:00:04:af")
		_, err = b.client.GetRackInfoBySerial(b.ctx, &flowv1.GetRackInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "Acme", SerialNumber: r.Info.SerialNumber}})
		requireCode(t, err, connect.CodeNotFound, "rack not found")
		_, err = b.client.GetComponentInfoBySerial(b.ctx, &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "Acme", SerialNumber: r.Components[0].Info.SerialNumber}})
		requireCode(t, err, connect.CodeNotFound, "component not found")
	})

	t.Run("GivenIDsAreKept", func(t *testing.T) {
		t.Parallel()
		r := smallRack("ids", 2, 1)
		rid, cid := uuid.NewString(), uuid.NewString()
		r.Info.Id = id(rid)
		r.Components[0].Info.Id = id(cid)
		require.Equal(t, rid, b.create(t, r))
		res, err := b.client.GetComponentInfoByID(b.ctx, &flowv1.GetComponentInfoByIDRequest{Id: id(cid)})
		require.NoError(t, err)
		require.Equal(t, rid, res.GetComponent().GetRackId().GetId())
	})
}

// TestReadmeExample is the README example: the compute tray is found by
// serial with its manufacturer spelled differently, with its rack.
func TestReadmeExample(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rackID := b.create(t, g10())

	res, err := b.client.GetComponentInfoBySerial(b.ctx, &flowv1.GetComponentInfoBySerialRequest{
		SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "Wiwynn", SerialNumber: "B8111801000851500108Y0SA"},
		WithRack:   true,
	})
	require.NoError(t, err)
	c := res.GetComponent()
	require.Equal(t, flowv1.ComponentType_COMPONENT_TYPE_COMPUTE, c.GetType())
	require.Equal(t, "WiWynn", c.GetInfo().GetManufacturer())
	require.Equal(t, "GB200 Compute Tray", c.GetInfo().GetModel())
	require.Equal(t, "FW 1.2.00GA", c.GetFirmwareVersion())
	require.Equal(t, int32(36), c.GetPosition().GetSlotId())
	require.Equal(t, int32(16), c.GetPosition().GetTrayIdx())
	require.Equal(t, rackID, c.GetRackId().GetId())
	require.Len(t, c.GetBmcs(), 3)
	require.Equal(t, flowv1.BMCType_BMC_TYPE_HOST, c.GetBmcs()[0].GetType())
	require.Equal(t, "d8:19:09:00:04:af", c.GetBmcs()[0].GetMacAddress())
	require.Equal(t, flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_NONE, c.GetLeakHandlingStatus())
	require.NotNil(t, c.GetTaskStats())
	r := res.GetRack()
	require.Equal(t, "g10", r.GetInfo().GetName())
	require.Equal(t, "EW-F00-DH-02-G10", r.GetLocation().GetPosition())
	require.Equal(t, rackID, r.GetInfo().GetId().GetId())

	res, err = b.client.GetComponentInfoBySerial(b.ctx, &flowv1.GetComponentInfoBySerialRequest{
		SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "WIWYNN", SerialNumber: "B8111801000851500108Y0SA"},
	})
	require.NoError(t, err)
	require.Nil(t, res.GetRack(), "rack only with with_rack")
}

func TestGetRackInfo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rackID := b.create(t, g10())

	for _, tt := range []struct {
		name       string
		byID       *flowv1.GetRackInfoByIDRequest
		bySerial   *flowv1.GetRackInfoBySerialRequest
		code       connect.Code
		contains   string
		components int
	}{
		{name: "ByID", byID: &flowv1.GetRackInfoByIDRequest{Id: id(rackID)}},
		{name: "ByIDWithComponents", byID: &flowv1.GetRackInfoByIDRequest{Id: id(rackID), WithComponents: true}, components: 1},
		{name: "BySerial", bySerial: &flowv1.GetRackInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "wiwynn", SerialNumber: "B8111801000951700005Y0SA"}, WithComponents: true}, components: 1},
		{name: "MalformedID", byID: &flowv1.GetRackInfoByIDRequest{Id: id("123")}, code: connect.CodeInvalidArgument, contains: "id: malformed UUID"},
		{name: "MissingID", byID: &flowv1.GetRackInfoByIDRequest{}, code: connect.CodeInvalidArgument, contains: "id: required"},
		{name: "UnknownID", byID: &flowv1.GetRackInfoByIDRequest{Id: id(uuid.NewString())}, code: connect.CodeNotFound, contains: "rack not found"},
		{name: "EmptySerial", bySerial: &flowv1.GetRackInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "Wiwynn"}}, code: connect.CodeInvalidArgument, contains: "serial_info.serial_number"},
		{name: "UnknownSerial", bySerial: &flowv1.GetRackInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "Wiwynn", SerialNumber: "x"}}, code: connect.CodeNotFound, contains: `serial "x"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var res *flowv1.GetRackInfoResponse
			var err error
			if tt.byID != nil {
				res, err = b.client.GetRackInfoByID(b.ctx, tt.byID)
			} else {
				res, err = b.client.GetRackInfoBySerial(b.ctx, tt.bySerial)
			}
			if tt.code != 0 {
				requireCode(t, err, tt.code, tt.contains)
				return
			}
			require.NoError(t, err)
			require.Equal(t, rackID, res.GetRack().GetInfo().GetId().GetId())
			require.Equal(t, "jhb01", res.GetRack().GetLocation().GetDatacenter())
			require.Len(t, res.GetRack().GetComponents(), tt.components)
			require.Equal(t, flowv1.Phase_PHASE_UNKNOWN, res.GetRack().GetOperationStatus())
			require.Empty(t, res.GetRack().GetNvlDomainIds())
		})
	}
}

func names(racks []*flowv1.Rack) []string {
	out := make([]string, len(racks))
	for i, r := range racks {
		out[i] = r.GetInfo().GetName()
	}
	return out
}

func TestGetListOfRacks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, n := range []string{"b2", "a1", "c3", "a2"} {
		r := smallRack(n, byte(i), 2)
		if n == "c3" {
			r.Info.Manufacturer = "Other"
		}
		b.create(t, r)
	}
	// Two racks named "dup": the UUID breaks the tie.
	dup := func(tag byte) *flowv1.Rack {
		r := smallRack("dup", tag, 0)
		r.ExternalId = ""
		return r
	}
	d1 := b.create(t, dup(10))
	d2 := b.create(t, dup(11))
	dups := []string{d1, d2}
	if d2 < d1 {
		dups = []string{d2, d1}
	}

	nameFilter := func(q *flowv1.StringQueryInfo) *flowv1.Filter {
		return &flowv1.Filter{Field: &flowv1.Filter_RackField{RackField: flowv1.RackFilterField_RACK_FILTER_FIELD_NAME}, QueryInfo: q}
	}
	for _, tt := range []struct {
		name     string
		req      *flowv1.GetListOfRacksRequest
		want     []string
		total    int32
		code     connect.Code
		contains string
	}{
		{name: "DefaultOrder", req: &flowv1.GetListOfRacksRequest{}, want: []string{"a1", "a2", "b2", "c3", "dup", "dup"}, total: 6},
		{name: "Page", req: &flowv1.GetListOfRacksRequest{Pagination: &flowv1.Pagination{Offset: 1, Limit: 2}}, want: []string{"a2", "b2"}, total: 6},
		{name: "PagePastEnd", req: &flowv1.GetListOfRacksRequest{Pagination: &flowv1.Pagination{Offset: 10, Limit: 2}}, want: []string{}, total: 6},
		{name: "NameDesc", req: &flowv1.GetListOfRacksRequest{OrderBy: &flowv1.OrderBy{Field: &flowv1.OrderBy_RackField{RackField: flowv1.RackOrderByField_RACK_ORDER_BY_FIELD_NAME}, Direction: "DESC"}}, want: []string{"dup", "dup", "c3", "b2", "a2", "a1"}, total: 6},
		{name: "ByManufacturer", req: &flowv1.GetListOfRacksRequest{OrderBy: &flowv1.OrderBy{Field: &flowv1.OrderBy_RackField{RackField: flowv1.RackOrderByField_RACK_ORDER_BY_FIELD_MANUFACTURER}, Direction: "desc"}, Pagination: &flowv1.Pagination{Limit: 1}}, want: []string{"c3"}, total: 6},
		{name: "ByModel", req: &flowv1.GetListOfRacksRequest{OrderBy: &flowv1.OrderBy{Field: &flowv1.OrderBy_RackField{RackField: flowv1.RackOrderByField_RACK_ORDER_BY_FIELD_MODEL}}, Pagination: &flowv1.Pagination{Limit: 3}}, want: []string{"a1", "a2", "b2"}, total: 6},
		{name: "ExactName", req: &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{nameFilter(&flowv1.StringQueryInfo{Patterns: []string{"a1"}})}}, want: []string{"a1"}, total: 1},
		{name: "ExactIsNotSubstring", req: &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{nameFilter(&flowv1.StringQueryInfo{Patterns: []string{"a"}})}}, want: []string{}, total: 0},
		{name: "ExactOr", req: &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{nameFilter(&flowv1.StringQueryInfo{Patterns: []string{"a1", "c3"}, UseOr: true})}}, want: []string{"a1", "c3"}, total: 2},
		{name: "ExactAnd", req: &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{nameFilter(&flowv1.StringQueryInfo{Patterns: []string{"a1", "c3"}})}}, want: []string{}, total: 0},
		{name: "WildcardPrefix", req: &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{nameFilter(&flowv1.StringQueryInfo{Patterns: []string{"a*"}, IsWildcard: true})}}, want: []string{"a1", "a2"}, total: 2},
		{name: "WildcardSubstring", req: &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{nameFilter(&flowv1.StringQueryInfo{Patterns: []string{"2"}, IsWildcard: true})}}, want: []string{"a2", "b2"}, total: 2},
		{name: "WildcardAnd", req: &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{nameFilter(&flowv1.StringQueryInfo{Patterns: []string{"a%", "%2"}, IsWildcard: true})}}, want: []string{"a2"}, total: 1},
		{name: "Manufacturer", req: &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{{Field: &flowv1.Filter_RackField{RackField: flowv1.RackFilterField_RACK_FILTER_FIELD_MANUFACTURER}, QueryInfo: &flowv1.StringQueryInfo{Patterns: []string{"other"}}}}}, want: []string{"c3"}, total: 1},
		{name: "Model", req: &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{{Field: &flowv1.Filter_RackField{RackField: flowv1.RackFilterField_RACK_FILTER_FIELD_MODEL}, QueryInfo: &flowv1.StringQueryInfo{Patterns: []string{"M-b2"}}}}}, want: []string{"b2"}, total: 1},
		{name: "NegativeOffset", req: &flowv1.GetListOfRacksRequest{Pagination: &flowv1.Pagination{Offset: -1}}, code: connect.CodeInvalidArgument, contains: "pagination.offset"},
		{name: "NegativeLimit", req: &flowv1.GetListOfRacksRequest{Pagination: &flowv1.Pagination{Limit: -1}}, code: connect.CodeInvalidArgument, contains: "pagination.limit"},
		{name: "HugeLimit", req: &flowv1.GetListOfRacksRequest{Pagination: &flowv1.Pagination{Limit: 5000}}, code: connect.CodeInvalidArgument, contains: "pagination.limit"},
		{name: "BadDirection", req: &flowv1.GetListOfRacksRequest{OrderBy: &flowv1.OrderBy{Direction: "UP"}}, code: connect.CodeInvalidArgument, contains: "order_by.direction"},
		{name: "UnknownOrderField", req: &flowv1.GetListOfRacksRequest{OrderBy: &flowv1.OrderBy{Field: &flowv1.OrderBy_RackField{RackField: 9}}}, code: connect.CodeInvalidArgument, contains: "order_by.rack_field"},
		{name: "ComponentOrderField", req: &flowv1.GetListOfRacksRequest{OrderBy: &flowv1.OrderBy{Field: &flowv1.OrderBy_ComponentField{ComponentField: 1}}}, code: connect.CodeInvalidArgument, contains: "order_by.rack_field"},
		{name: "ComponentFilter", req: &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{{Field: &flowv1.Filter_ComponentField{ComponentField: 1}}}}, code: connect.CodeInvalidArgument, contains: "filters[0].rack_field"},
		{name: "UnknownFilterField", req: &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{nameFilter(nil), {Field: &flowv1.Filter_RackField{RackField: 7}}}}, code: connect.CodeInvalidArgument, contains: "filters[1].rack_field"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := b.client.GetListOfRacks(b.ctx, tt.req)
			if tt.code != 0 {
				requireCode(t, err, tt.code, tt.contains)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, names(res.GetRacks()))
			require.Equal(t, tt.total, res.GetTotal())
		})
	}

	t.Run("TieBreakerAndComponents", func(t *testing.T) {
		t.Parallel()
		res, err := b.client.GetListOfRacks(b.ctx, &flowv1.GetListOfRacksRequest{WithComponents: true, Pagination: &flowv1.Pagination{Offset: 4}})
		require.NoError(t, err)
		require.Equal(t, dups, []string{res.GetRacks()[0].GetInfo().GetId().GetId(), res.GetRacks()[1].GetInfo().GetId().GetId()})
		res, err = b.client.GetListOfRacks(b.ctx, &flowv1.GetListOfRacksRequest{WithComponents: true, Pagination: &flowv1.Pagination{Limit: 1}})
		require.NoError(t, err)
		require.Len(t, res.GetRacks()[0].GetComponents(), 2)
		require.Len(t, res.GetRacks()[0].GetComponents()[0].GetBmcs(), 1)
	})
}

func TestPatchRack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rackID := b.create(t, g10())

	for _, tt := range []struct {
		name     string
		rack     *flowv1.Rack
		code     connect.Code
		contains string
	}{
		{name: "NoRack", code: connect.CodeInvalidArgument, contains: "rack: required"},
		{name: "NoIdentity", rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Name: "x"}}, code: connect.CodeInvalidArgument, contains: "rack.info"},
		{name: "BadID", rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Id: id("x")}}, code: connect.CodeInvalidArgument, contains: "rack.info.id"},
		{name: "UnknownID", rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Id: id(uuid.NewString())}}, code: connect.CodeNotFound, contains: "rack not found"},
		{name: "UnknownSerial", rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Manufacturer: "Wiwynn", SerialNumber: "nope"}}, code: connect.CodeNotFound, contains: "rack not found"},
		{name: "NewComponentWithoutType", rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Id: id(rackID)}, Components: []*flowv1.Component{{Info: &flowv1.DeviceInfo{SerialNumber: "new"}}}}, code: connect.CodeInvalidArgument, contains: "rack.components[0].type"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := b.client.PatchRack(b.ctx, &flowv1.PatchRackRequest{Rack: tt.rack})
			requireCode(t, err, tt.code, tt.contains)
		})
	}

	t.Run("Patch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rackID := b.create(t, g10())
		res, err := b.client.PatchRack(b.ctx, &flowv1.PatchRackRequest{Rack: &flowv1.Rack{
			Info:     &flowv1.DeviceInfo{Manufacturer: "WIWYNN", SerialNumber: "B8111801000951700005Y0SA", Name: "g10-renamed", Model: str("NVL72")},
			Location: &flowv1.Location{Room: "room-2"},
			Components: []*flowv1.Component{
				{Info: &flowv1.DeviceInfo{Manufacturer: "wiwynn", SerialNumber: "B8111801000851500108Y0SA"}, FirmwareVersion: "FW 1.3"},
				{Type: flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF, Info: &flowv1.DeviceInfo{Manufacturer: "Delta", SerialNumber: "PS-1"}, Bmcs: []*flowv1.BMCInfo{{Type: flowv1.BMCType_BMC_TYPE_HOST, MacAddress: "02:00:00:00:00:01"}}},
			},
		}})
		require.NoError(t, err)
		require.Contains(t, res.GetReport(), "patched (name, location.room, model)")
		require.Contains(t, res.GetReport(), "patched (firmware_version)")
		require.Contains(t, res.GetReport(), "(PS-1): added")
		got, err := b.client.GetRackInfoByID(b.ctx, &flowv1.GetRackInfoByIDRequest{Id: id(rackID), WithComponents: true})
		require.NoError(t, err)
		require.Equal(t, "g10-renamed", got.GetRack().GetInfo().GetName())
		require.Equal(t, "NVL72", got.GetRack().GetInfo().GetModel())
		require.Equal(t, "room-2", got.GetRack().GetLocation().GetRoom())
		require.Equal(t, "jhb01", got.GetRack().GetLocation().GetDatacenter())
		require.Len(t, got.GetRack().GetComponents(), 2)

		res, err = b.client.PatchRack(b.ctx, &flowv1.PatchRackRequest{Rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Id: id(rackID), Name: "g10-renamed"}}})
		require.NoError(t, err)
		require.Equal(t, "rack "+rackID+": no change", res.GetReport())
	})
}

func TestDeleteAndPurgeRack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rackID := b.create(t, g10())
	comp, err := b.client.GetComponentInfoBySerial(b.ctx, &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "wiwynn", SerialNumber: "B8111801000851500108Y0SA"}})
	require.NoError(t, err)
	compID := comp.GetComponent().GetInfo().GetId()

	for _, tt := range []struct {
		name     string
		call     func() error
		code     connect.Code
		contains string
	}{
		{"DeleteMalformed", func() error { _, err := b.client.DeleteRack(b.ctx, &flowv1.DeleteRackRequest{Id: id("1")}); return err }, connect.CodeInvalidArgument, "id: malformed UUID"},
		{"DeleteUnknown", func() error {
			_, err := b.client.DeleteRack(b.ctx, &flowv1.DeleteRackRequest{Id: id(uuid.NewString())})
			return err
		}, connect.CodeNotFound, "rack not found"},
		{"PurgeMalformed", func() error { _, err := b.client.PurgeRack(b.ctx, &flowv1.PurgeRackRequest{}); return err }, connect.CodeInvalidArgument, "id: required"},
		{"PurgeUnknown", func() error {
			_, err := b.client.PurgeRack(b.ctx, &flowv1.PurgeRackRequest{Id: id(uuid.NewString())})
			return err
		}, connect.CodeNotFound, "rack not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireCode(t, tt.call(), tt.code, tt.contains)
		})
	}

	t.Run("Lifecycle", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rackID := b.create(t, g10())
		_, err := b.client.PurgeRack(b.ctx, &flowv1.PurgeRackRequest{Id: id(rackID)})
		requireCode(t, err, connect.CodeFailedPrecondition, "not soft-deleted")

		_, err = b.client.DeleteRack(b.ctx, &flowv1.DeleteRackRequest{Id: id(rackID)})
		require.NoError(t, err)
		_, err = b.client.GetRackInfoByID(b.ctx, &flowv1.GetRackInfoByIDRequest{Id: id(rackID)})
		requireCode(t, err, connect.CodeNotFound, rackID)
		_, err = b.client.GetComponentInfoBySerial(b.ctx, &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "wiwynn", SerialNumber: "B8111801000851500108Y0SA"}})
		requireCode(t, err, connect.CodeNotFound, "component not found")
		_, err = b.client.DeleteRack(b.ctx, &flowv1.DeleteRackRequest{Id: id(rackID)})
		requireCode(t, err, connect.CodeNotFound, "rack not found")
		// A soft-deleted rack keeps its identity until purged.
		_, err = b.client.CreateExpectedRack(b.ctx, &flowv1.CreateExpectedRackRequest{Rack: g10()})
		requireCode(t, err, connect.CodeAlreadyExists, "already")

		_, err = b.client.PurgeRack(b.ctx, &flowv1.PurgeRackRequest{Id: id(rackID)})
		require.NoError(t, err)
		_, err = b.client.PurgeRack(b.ctx, &flowv1.PurgeRackRequest{Id: id(rackID)})
		requireCode(t, err, connect.CodeNotFound, "rack not found")
		b.create(t, g10()) // serials and MACs are free again
	})
	_ = rackID
	_ = compID
}

func TestComponentByIDAndSerial(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, g10())
	loose, err := b.client.AddComponent(b.ctx, &flowv1.AddComponentRequest{Component: &flowv1.Component{
		Type: flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF,
		Info: &flowv1.DeviceInfo{Manufacturer: "Delta", SerialNumber: "LOOSE-1"},
	}})
	require.NoError(t, err)
	looseID := loose.GetComponent().GetInfo().GetId().GetId()

	for _, tt := range []struct {
		name     string
		byID     *flowv1.GetComponentInfoByIDRequest
		bySerial *flowv1.GetComponentInfoBySerialRequest
		wantRack bool
		code     connect.Code
		contains string
	}{
		{name: "ByIDRackless", byID: &flowv1.GetComponentInfoByIDRequest{Id: id(looseID), WithRack: true}},
		{name: "BySerialWithRack", bySerial: &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "wIwYnN", SerialNumber: "B8111801000851500108Y0SA"}, WithRack: true}, wantRack: true},
		{name: "MalformedID", byID: &flowv1.GetComponentInfoByIDRequest{Id: id("zz")}, code: connect.CodeInvalidArgument, contains: "id: malformed UUID"},
		{name: "UnknownID", byID: &flowv1.GetComponentInfoByIDRequest{Id: id(uuid.NewString())}, code: connect.CodeNotFound, contains: "component not found"},
		{name: "EmptySerial", bySerial: &flowv1.GetComponentInfoBySerialRequest{}, code: connect.CodeInvalidArgument, contains: "serial_info.serial_number"},
		{name: "WrongManufacturer", bySerial: &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "Foxconn", SerialNumber: "B8111801000851500108Y0SA"}}, code: connect.CodeNotFound, contains: "Foxconn"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var res *flowv1.GetComponentInfoResponse
			var err error
			if tt.byID != nil {
				res, err = b.client.GetComponentInfoByID(b.ctx, tt.byID)
			} else {
				res, err = b.client.GetComponentInfoBySerial(b.ctx, tt.bySerial)
			}
			if tt.code != 0 {
				requireCode(t, err, tt.code, tt.contains)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, res.GetComponent())
			require.Equal(t, tt.wantRack, res.GetRack() != nil)
		})
	}

	// By ID and by serial answer the same, with the rack and all BMCs.
	bySerial, err := b.client.GetComponentInfoBySerial(b.ctx, &flowv1.GetComponentInfoBySerialRequest{
		SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "WiWynn", SerialNumber: "B8111801000851500108Y0SA"}, WithRack: true})
	require.NoError(t, err)
	byID, err := b.client.GetComponentInfoByID(b.ctx, &flowv1.GetComponentInfoByIDRequest{
		Id: bySerial.GetComponent().GetInfo().GetId(), WithRack: true})
	require.NoError(t, err)
	require.Len(t, byID.GetComponent().GetBmcs(), 3)
	require.Equal(t, "g10", byID.GetRack().GetInfo().GetName())
	require.True(t, proto.Equal(bySerial, byID), "by serial:\n%v\nby id:\n%v", bySerial, byID)
}

func TestGetComponents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.create(t, smallRack("ra", 1, 4)) // c0 compute, c1 switch, c2 compute, c3 switch
	b.create(t, smallRack("rb", 2, 2))      // c0 compute, c1 switch
	domain, err := b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{Identifier: &flowv1.Identifier{Name: "dom"}}})
	require.NoError(t, err)
	_, err = b.client.AttachRacksToNVLDomain(b.ctx, &flowv1.AttachRacksToNVLDomainRequest{
		NvlDomainIdentifier: &flowv1.Identifier{Name: "dom"},
		RackIdentifiers:     []*flowv1.Identifier{{Name: "rb"}},
	})
	require.NoError(t, err)

	typeFilter := func(wild, or bool, p ...string) *flowv1.Filter {
		return &flowv1.Filter{Field: &flowv1.Filter_ComponentField{ComponentField: flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_TYPE}, QueryInfo: &flowv1.StringQueryInfo{Patterns: p, IsWildcard: wild, UseOr: or}}
	}
	racks := func(ts ...*flowv1.RackTarget) *flowv1.OperationTargetSpec {
		return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: ts}}}
	}
	comps := func(ts ...*flowv1.ComponentTarget) *flowv1.OperationTargetSpec {
		return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Components{Components: &flowv1.ComponentTargets{Targets: ts}}}
	}
	for _, tt := range []struct {
		name     string
		req      *flowv1.GetComponentsRequest
		want     []string
		total    int32
		code     connect.Code
		contains string
	}{
		{name: "All", req: &flowv1.GetComponentsRequest{}, want: []string{"ra-c0", "ra-c1", "ra-c2", "ra-c3", "rb-c0", "rb-c1"}, total: 6},
		{name: "Page", req: &flowv1.GetComponentsRequest{Pagination: &flowv1.Pagination{Offset: 4, Limit: 1}}, want: []string{"rb-c0"}, total: 6},
		{name: "TypeExact", req: &flowv1.GetComponentsRequest{Filters: []*flowv1.Filter{typeFilter(false, false, "COMPONENT_TYPE_NVSWITCH")}}, want: []string{"ra-c1", "ra-c3", "rb-c1"}, total: 3},
		{name: "TypeWildcard", req: &flowv1.GetComponentsRequest{Filters: []*flowv1.Filter{typeFilter(true, false, "*compute")}}, want: []string{"ra-c0", "ra-c2", "rb-c0"}, total: 3},
		{name: "TypeOr", req: &flowv1.GetComponentsRequest{Filters: []*flowv1.Filter{typeFilter(false, true, "COMPONENT_TYPE_POWERSHELF", "COMPONENT_TYPE_COMPUTE")}}, want: []string{"ra-c0", "ra-c2", "rb-c0"}, total: 3},
		// Upstream's client sends its own type names ("Compute", "NVSwitch");
		// any case of those or of the enum names is taken.
		{name: "TypeUpstreamName", req: &flowv1.GetComponentsRequest{Filters: []*flowv1.Filter{typeFilter(false, false, "NVSwitch")}}, want: []string{"ra-c1", "ra-c3", "rb-c1"}, total: 3},
		{name: "TypeUpstreamNameAnyCase", req: &flowv1.GetComponentsRequest{Filters: []*flowv1.Filter{typeFilter(false, true, "compute", "POWERSHELF", "torswitch", "Ums", "cdu")}}, want: []string{"ra-c0", "ra-c2", "rb-c0"}, total: 3},
		{name: "TypeEnumNameLowerCase", req: &flowv1.GetComponentsRequest{Filters: []*flowv1.Filter{typeFilter(false, false, "component_type_compute")}}, want: []string{"ra-c0", "ra-c2", "rb-c0"}, total: 3},
		{name: "TypeUpstreamWildcard", req: &flowv1.GetComponentsRequest{Filters: []*flowv1.Filter{typeFilter(true, false, "NV*")}}, want: []string{"ra-c1", "ra-c3", "rb-c1"}, total: 3},
		{name: "TypeUnknownUpstreamName", req: &flowv1.GetComponentsRequest{Filters: []*flowv1.Filter{typeFilter(false, false, "Unknown")}}, code: connect.CodeInvalidArgument, contains: `filters[0].query_info.patterns[0]: unknown component type "Unknown" (want Compute, NVSwitch`},
		{name: "TypeUnknownName", req: &flowv1.GetComponentsRequest{Filters: []*flowv1.Filter{typeFilter(false, false, "COMPUTER")}}, code: connect.CodeInvalidArgument, contains: "filters[0].query_info.patterns[0]"},
		{name: "RackTarget", req: &flowv1.GetComponentsRequest{TargetSpec: racks(&flowv1.RackTarget{Identifier: &flowv1.RackTarget_Name{Name: "rb"}})}, want: []string{"rb-c0", "rb-c1"}, total: 2},
		{name: "RackTargetTyped", req: &flowv1.GetComponentsRequest{TargetSpec: racks(
			&flowv1.RackTarget{Identifier: &flowv1.RackTarget_Id{Id: id(a)}, ComponentTypes: []flowv1.ComponentType{flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH}},
			&flowv1.RackTarget{Identifier: &flowv1.RackTarget_ExternalId{ExternalId: "ext-rb"}},
		)}, want: []string{"ra-c1", "ra-c3", "rb-c0", "rb-c1"}, total: 4},
		{name: "DomainTarget", req: &flowv1.GetComponentsRequest{TargetSpec: &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_NvlDomains{NvlDomains: &flowv1.NVLDomainTargets{Targets: []*flowv1.NVLDomainTarget{
			{Identifier: &flowv1.NVLDomainTarget_Id{Id: domain.GetId()}, ComponentTypes: []flowv1.ComponentType{flowv1.ComponentType_COMPONENT_TYPE_COMPUTE}},
		}}}}}, want: []string{"rb-c0"}, total: 1},
		{name: "ComponentTargets", req: &flowv1.GetComponentsRequest{TargetSpec: comps(
			&flowv1.ComponentTarget{Identifier: &flowv1.ComponentTarget_External{External: &flowv1.ExternalRef{Id: "machine-ra-2"}}},
			&flowv1.ComponentTarget{Identifier: &flowv1.ComponentTarget_External{External: &flowv1.ExternalRef{Type: flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH, Id: "aa:00:00:02:02:01"}}},
		)}, want: []string{"ra-c2", "rb-c1"}, total: 2},
		{name: "NameWildcardAndOrder", req: &flowv1.GetComponentsRequest{
			Filters: []*flowv1.Filter{{Field: &flowv1.Filter_ComponentField{ComponentField: flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_NAME}, QueryInfo: &flowv1.StringQueryInfo{Patterns: []string{"ra-*"}, IsWildcard: true}}},
			OrderBy: &flowv1.OrderBy{Field: &flowv1.OrderBy_ComponentField{ComponentField: flowv1.ComponentOrderByField_COMPONENT_ORDER_BY_FIELD_TYPE}, Direction: "DESC"},
		}, want: []string{"ra-c?", "ra-c?", "ra-c?", "ra-c?"}, total: 4},
		{name: "EmptySpec", req: &flowv1.GetComponentsRequest{TargetSpec: &flowv1.OperationTargetSpec{}}, code: connect.CodeInvalidArgument, contains: "target_spec: must have exactly one"},
		{name: "UnknownRack", req: &flowv1.GetComponentsRequest{TargetSpec: racks(&flowv1.RackTarget{Identifier: &flowv1.RackTarget_Name{Name: "zz"}})}, code: connect.CodeNotFound, contains: `rack name "zz"`},
		{name: "UnknownTargetType", req: &flowv1.GetComponentsRequest{TargetSpec: racks(&flowv1.RackTarget{Identifier: &flowv1.RackTarget_Name{Name: "ra"}, ComponentTypes: []flowv1.ComponentType{0}})}, code: connect.CodeInvalidArgument, contains: "component_types[0]"},
		{name: "UnknownExternal", req: &flowv1.GetComponentsRequest{TargetSpec: comps(&flowv1.ComponentTarget{Identifier: &flowv1.ComponentTarget_External{External: &flowv1.ExternalRef{Id: "nope"}}})}, code: connect.CodeNotFound, contains: `component identifier "nope" not found`},
		{name: "RackFilter", req: &flowv1.GetComponentsRequest{Filters: []*flowv1.Filter{{Field: &flowv1.Filter_RackField{RackField: 1}}}}, code: connect.CodeInvalidArgument, contains: "filters[0].component_field"},
		{name: "BadOrder", req: &flowv1.GetComponentsRequest{OrderBy: &flowv1.OrderBy{Field: &flowv1.OrderBy_ComponentField{ComponentField: 99}}}, code: connect.CodeInvalidArgument, contains: "order_by.component_field"},
		{name: "BadPage", req: &flowv1.GetComponentsRequest{Pagination: &flowv1.Pagination{Offset: -3}}, code: connect.CodeInvalidArgument, contains: "pagination.offset"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := b.client.GetComponents(b.ctx, tt.req)
			if tt.code != 0 {
				requireCode(t, err, tt.code, tt.contains)
				return
			}
			require.NoError(t, err)
			got := make([]string, len(res.GetComponents()))
			for i, c := range res.GetComponents() {
				got[i] = c.GetInfo().GetName()
			}
			if tt.name == "NameWildcardAndOrder" {
				// Type descending (switches first); the UUID breaks ties.
				for i, c := range res.GetComponents() {
					want := flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH
					if i >= 2 {
						want = flowv1.ComponentType_COMPONENT_TYPE_COMPUTE
					} else if i == 1 {
						require.Less(t, res.GetComponents()[0].GetInfo().GetId().GetId(), c.GetInfo().GetId().GetId())
					}
					require.Equal(t, want, c.GetType())
					got[i] = "ra-c?"
				}
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.total, res.GetTotal())
		})
	}
}

func TestAddComponent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rackID := b.create(t, g10())
	valid := func() *flowv1.Component {
		return &flowv1.Component{
			Type:   flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH,
			Info:   &flowv1.DeviceInfo{Name: "sw1", Manufacturer: "NVIDIA", SerialNumber: "SW-1"},
			RackId: id(rackID),
			Bmcs:   []*flowv1.BMCInfo{{Type: flowv1.BMCType_BMC_TYPE_HOST, MacAddress: "02:AA:BB:CC:DD:EE", IpAddress: str("10.0.0.9")}},
		}
	}
	for _, tt := range []struct {
		name     string
		mutate   func(c *flowv1.Component)
		code     connect.Code
		contains string
	}{
		{name: "Missing", code: connect.CodeInvalidArgument, contains: "component: required"},
		{name: "NoType", mutate: func(c *flowv1.Component) { c.Type = 0 }, code: connect.CodeInvalidArgument, contains: "component.type"},
		{name: "NoSerial", mutate: func(c *flowv1.Component) { c.Info.SerialNumber = "" }, code: connect.CodeInvalidArgument, contains: "component.info.serial_number"},
		{name: "BadRackID", mutate: func(c *flowv1.Component) { c.RackId = id("r") }, code: connect.CodeInvalidArgument, contains: "component.rack_id"},
		{name: "UnknownRack", mutate: func(c *flowv1.Component) { c.RackId = id(uuid.NewString()) }, code: connect.CodeNotFound, contains: "rack not found"},
		{name: "MACTaken", mutate: func(c *flowv1.Component) { c.Info.SerialNumber = "SW-2"; c.Bmcs[0].MacAddress = "D8:19:09:00:04:AF" }, code: connect.CodeAlreadyExists, contains: "d8:19:09:00:04:af"},
		{name: "SerialTaken", mutate: func(c *flowv1.Component) {
			c.Info.Manufacturer = "wiwynn"
			c.Info.SerialNumber = "B8111801000851500108Y0SA"
		}, code: connect.CodeAlreadyExists, contains: "component already exists"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := &flowv1.AddComponentRequest{}
			if tt.mutate != nil {
				req.Component = valid()
				tt.mutate(req.Component)
			}
			_, err := b.client.AddComponent(b.ctx, req)
			requireCode(t, err, tt.code, tt.contains)
		})
	}
	t.Run("Added", func(t *testing.T) {
		t.Parallel()
		res, err := b.client.AddComponent(b.ctx, &flowv1.AddComponentRequest{Component: valid()})
		require.NoError(t, err)
		c := res.GetComponent()
		require.Equal(t, rackID, c.GetRackId().GetId())
		require.Equal(t, "02:aa:bb:cc:dd:ee", c.GetBmcs()[0].GetMacAddress())
		require.Equal(t, "10.0.0.9", c.GetBmcs()[0].GetIpAddress())
		_, err = b.client.AddComponent(b.ctx, &flowv1.AddComponentRequest{Component: valid()})
		requireCode(t, err, connect.CodeAlreadyExists, "SW-1")
	})
}

func TestPatchComponent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, g10())
	other := b.create(t, smallRack("other", 3, 1))
	res, err := b.client.GetComponentInfoBySerial(b.ctx, &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "wiwynn", SerialNumber: "B8111801000851500108Y0SA"}})
	require.NoError(t, err)
	cid := res.GetComponent().GetInfo().GetId().GetId()

	for _, tt := range []struct {
		name     string
		req      *flowv1.PatchComponentRequest
		code     connect.Code
		contains string
	}{
		{name: "NoID", req: &flowv1.PatchComponentRequest{}, code: connect.CodeInvalidArgument, contains: "id: required"},
		{name: "UnknownID", req: &flowv1.PatchComponentRequest{Id: id(uuid.NewString())}, code: connect.CodeNotFound, contains: "component not found"},
		{name: "UnknownMaskPath", req: &flowv1.PatchComponentRequest{Id: id(cid), Position: &flowv1.RackPosition{}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"firmware_version"}}}, code: connect.CodeInvalidArgument, contains: `update_mask: unknown path "firmware_version"`},
		{name: "MaskWithoutPosition", req: &flowv1.PatchComponentRequest{Id: id(cid), UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"position.slot_id"}}}, code: connect.CodeInvalidArgument, contains: "position: required"},
		{name: "BadRackID", req: &flowv1.PatchComponentRequest{Id: id(cid), RackId: id("q")}, code: connect.CodeInvalidArgument, contains: "rack_id"},
		{name: "UnknownRack", req: &flowv1.PatchComponentRequest{Id: id(cid), RackId: id(uuid.NewString()), FirmwareVersion: str("should-not-stick")}, code: connect.CodeNotFound, contains: "rack not found"},
		{name: "BadBMC", req: &flowv1.PatchComponentRequest{Id: id(cid), Bmcs: []*flowv1.BMCInfo{{Type: 1, MacAddress: "nope"}}}, code: connect.CodeInvalidArgument, contains: "bmcs[0].mac_address"},
		{name: "MACOfOtherComponent", req: &flowv1.PatchComponentRequest{Id: id(cid), FirmwareVersion: str("should-not-stick"), Bmcs: []*flowv1.BMCInfo{{Type: 1, MacAddress: "aa:00:00:03:05:00"}}}, code: connect.CodeAlreadyExists, contains: "aa:00:00:03:05:00"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := b.client.PatchComponent(b.ctx, tt.req)
			requireCode(t, err, tt.code, tt.contains)
		})
	}

	t.Run("Apply", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.create(t, g10())
		other := b.create(t, smallRack("other", 3, 1))
		res, err := b.client.GetComponentInfoBySerial(b.ctx, &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "wiwynn", SerialNumber: "B8111801000851500108Y0SA"}})
		require.NoError(t, err)
		cid := res.GetComponent().GetInfo().GetId().GetId()

		// With a mask only the listed coordinates change.
		got, err := b.client.PatchComponent(b.ctx, &flowv1.PatchComponentRequest{
			Id:              id(cid),
			FirmwareVersion: str("FW 2"),
			Description:     str(`{"note":"x"}`),
			Position:        &flowv1.RackPosition{SlotId: 1, TrayIdx: 2, HostId: 3},
			UpdateMask:      &fieldmaskpb.FieldMask{Paths: []string{"position.tray_idx"}},
			Bmcs: []*flowv1.BMCInfo{
				{Type: flowv1.BMCType_BMC_TYPE_HOST, MacAddress: "D8-19-09-00-04-AF", IpAddress: str("10.1.1.1")},
				{Type: flowv1.BMCType_BMC_TYPE_DPU, MacAddress: "02:00:00:00:00:77"},
			},
		})
		require.NoError(t, err)
		c := got.GetComponent()
		require.Equal(t, "FW 2", c.GetFirmwareVersion())
		require.Equal(t, `{"note":"x"}`, c.GetInfo().GetDescription())
		require.Equal(t, &flowv1.RackPosition{SlotId: 36, TrayIdx: 2, HostId: 0}, c.GetPosition())
		require.Len(t, c.GetBmcs(), 4)
		require.Equal(t, "10.1.1.1", c.GetBmcs()[0].GetIpAddress())

		// Without a mask position replaces all three; rack_id moves it.
		got, err = b.client.PatchComponent(b.ctx, &flowv1.PatchComponentRequest{Id: id(cid), Position: &flowv1.RackPosition{SlotId: 5}, RackId: id(other)})
		require.NoError(t, err)
		require.Equal(t, &flowv1.RackPosition{SlotId: 5}, got.GetComponent().GetPosition())
		require.Equal(t, other, got.GetComponent().GetRackId().GetId())
		require.Equal(t, "ext-other", got.GetComponent().GetRackExternalId())
	})

	t.Run("FailedPatchChangesNothing", func(t *testing.T) {
		t.Parallel()
		for _, req := range []*flowv1.PatchComponentRequest{
			{Id: id(cid), RackId: id(uuid.NewString()), FirmwareVersion: str("should-not-stick")},
			{Id: id(cid), FirmwareVersion: str("should-not-stick"), Bmcs: []*flowv1.BMCInfo{{Type: 1, MacAddress: "02:00:00:00:00:99"}, {Type: 1, MacAddress: "aa:00:00:03:05:00"}}},
		} {
			_, err := b.client.PatchComponent(b.ctx, req)
			require.Error(t, err)
		}
		_, err := b.client.GetComponents(b.ctx, &flowv1.GetComponentsRequest{TargetSpec: &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Components{Components: &flowv1.ComponentTargets{Targets: []*flowv1.ComponentTarget{
			{Identifier: &flowv1.ComponentTarget_External{External: &flowv1.ExternalRef{Id: "02:00:00:00:00:99"}}},
		}}}}})
		requireCode(t, err, connect.CodeNotFound, "02:00:00:00:00:99")
		res, err := b.client.GetComponentInfoByID(b.ctx, &flowv1.GetComponentInfoByIDRequest{Id: id(cid)})
		require.NoError(t, err)
		require.Equal(t, "FW 1.2.00GA", res.GetComponent().GetFirmwareVersion())
	})
	_ = other
}

func TestDeleteAndPurgeComponent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.create(t, g10())
	res, err := b.client.GetComponentInfoBySerial(b.ctx, &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "wiwynn", SerialNumber: "B8111801000851500108Y0SA"}})
	require.NoError(t, err)
	cid := res.GetComponent().GetInfo().GetId()

	for _, tt := range []struct {
		name     string
		call     func() error
		code     connect.Code
		contains string
	}{
		{"DeleteMalformed", func() error {
			_, err := b.client.DeleteComponent(b.ctx, &flowv1.DeleteComponentRequest{Id: id("x")})
			return err
		}, connect.CodeInvalidArgument, "id: malformed"},
		{"DeleteUnknown", func() error {
			_, err := b.client.DeleteComponent(b.ctx, &flowv1.DeleteComponentRequest{Id: id(uuid.NewString())})
			return err
		}, connect.CodeNotFound, "component not found"},
		{"PurgeUnknown", func() error {
			_, err := b.client.PurgeComponent(b.ctx, &flowv1.PurgeComponentRequest{Id: id(uuid.NewString())})
			return err
		}, connect.CodeNotFound, "component not found"},
		{"PurgeMissingID", func() error { _, err := b.client.PurgeComponent(b.ctx, &flowv1.PurgeComponentRequest{}); return err }, connect.CodeInvalidArgument, "id: required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireCode(t, tt.call(), tt.code, tt.contains)
		})
	}

	t.Run("Lifecycle", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.create(t, g10())
		res, err := b.client.GetComponentInfoBySerial(b.ctx, &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "wiwynn", SerialNumber: "B8111801000851500108Y0SA"}})
		require.NoError(t, err)
		cid := res.GetComponent().GetInfo().GetId()
		_, err = b.client.PurgeComponent(b.ctx, &flowv1.PurgeComponentRequest{Id: cid})
		requireCode(t, err, connect.CodeFailedPrecondition, "not soft-deleted")
		_, err = b.client.DeleteComponent(b.ctx, &flowv1.DeleteComponentRequest{Id: cid})
		require.NoError(t, err)
		_, err = b.client.GetComponentInfoByID(b.ctx, &flowv1.GetComponentInfoByIDRequest{Id: cid})
		requireCode(t, err, connect.CodeNotFound, cid.GetId())
		_, err = b.client.PurgeComponent(b.ctx, &flowv1.PurgeComponentRequest{Id: cid})
		require.NoError(t, err)
		// The MACs are free again.
		_, err = b.client.AddComponent(b.ctx, &flowv1.AddComponentRequest{Component: g10().Components[0]})
		require.NoError(t, err)
	})
	_ = cid
}

func TestNVLDomains(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ra := b.create(t, smallRack("ra", 1, 1))
	b.create(t, smallRack("rb", 2, 1))
	b.create(t, smallRack("rc", 3, 0))
	d1, err := b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{Identifier: &flowv1.Identifier{Name: "d1"}}})
	require.NoError(t, err)
	again, err := b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{Identifier: &flowv1.Identifier{Name: "d1"}}})
	require.NoError(t, err)
	require.Equal(t, d1.GetId().GetId(), again.GetId().GetId(), "create is idempotent by name")
	d2ID := uuid.NewString()
	d2, err := b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{Identifier: &flowv1.Identifier{Id: id(d2ID), Name: "d2"}}})
	require.NoError(t, err)
	require.Equal(t, d2ID, d2.GetId().GetId())

	_, err = b.client.AttachRacksToNVLDomain(b.ctx, &flowv1.AttachRacksToNVLDomainRequest{
		NvlDomainIdentifier: &flowv1.Identifier{Name: "d1"},
		RackIdentifiers:     []*flowv1.Identifier{{Id: id(ra)}, {Name: "rb"}},
	})
	require.NoError(t, err)
	// Attaching again to the same domain is a no-op.
	_, err = b.client.AttachRacksToNVLDomain(b.ctx, &flowv1.AttachRacksToNVLDomainRequest{
		NvlDomainIdentifier: &flowv1.Identifier{Id: d1.GetId()},
		RackIdentifiers:     []*flowv1.Identifier{{Name: "ra"}},
	})
	require.NoError(t, err)

	for _, tt := range []struct {
		name     string
		call     func() error
		code     connect.Code
		contains string
	}{
		{"CreateNoName", func() error {
			_, err := b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{})
			return err
		}, connect.CodeInvalidArgument, "nvl_domain.identifier.name"},
		{"CreateBadID", func() error {
			_, err := b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{Identifier: &flowv1.Identifier{Id: id("x"), Name: "n"}}})
			return err
		}, connect.CodeInvalidArgument, "nvl_domain.identifier.id"},
		{"AttachUnknownDomain", func() error {
			_, err := b.client.AttachRacksToNVLDomain(b.ctx, &flowv1.AttachRacksToNVLDomainRequest{NvlDomainIdentifier: &flowv1.Identifier{Name: "zz"}, RackIdentifiers: []*flowv1.Identifier{{Name: "rc"}}})
			return err
		}, connect.CodeNotFound, `nvl domain name "zz"`},
		{"AttachNoDomain", func() error {
			_, err := b.client.AttachRacksToNVLDomain(b.ctx, &flowv1.AttachRacksToNVLDomainRequest{RackIdentifiers: []*flowv1.Identifier{{Name: "rc"}}})
			return err
		}, connect.CodeInvalidArgument, "nvl_domain_identifier"},
		{"AttachNoRacks", func() error {
			_, err := b.client.AttachRacksToNVLDomain(b.ctx, &flowv1.AttachRacksToNVLDomainRequest{NvlDomainIdentifier: &flowv1.Identifier{Name: "d2"}})
			return err
		}, connect.CodeInvalidArgument, "rack_identifiers"},
		{"AttachUnknownRack", func() error {
			_, err := b.client.AttachRacksToNVLDomain(b.ctx, &flowv1.AttachRacksToNVLDomainRequest{NvlDomainIdentifier: &flowv1.Identifier{Name: "d2"}, RackIdentifiers: []*flowv1.Identifier{{Name: "rc"}, {Name: "nope"}}})
			return err
		}, connect.CodeNotFound, `rack name "nope"`},
		{"AttachToOtherDomain", func() error {
			_, err := b.client.AttachRacksToNVLDomain(b.ctx, &flowv1.AttachRacksToNVLDomainRequest{NvlDomainIdentifier: &flowv1.Identifier{Name: "d2"}, RackIdentifiers: []*flowv1.Identifier{{Name: "rc"}, {Name: "ra"}}})
			return err
		}, connect.CodeAlreadyExists, `rack name "ra"`},
		{"DetachBadID", func() error {
			_, err := b.client.DetachRacksFromNVLDomain(b.ctx, &flowv1.DetachRacksFromNVLDomainRequest{RackIdentifiers: []*flowv1.Identifier{{Id: id("bad")}}})
			return err
		}, connect.CodeInvalidArgument, "rack_identifiers[0].id"},
		{"RacksForUnknown", func() error {
			_, err := b.client.GetRacksForNVLDomain(b.ctx, &flowv1.GetRacksForNVLDomainRequest{NvlDomainIdentifier: &flowv1.Identifier{Id: id(uuid.NewString())}})
			return err
		}, connect.CodeNotFound, "nvl domain not found"},
		{"ListBadPage", func() error {
			_, err := b.client.GetListOfNVLDomains(b.ctx, &flowv1.GetListOfNVLDomainsRequest{Pagination: &flowv1.Pagination{Limit: -1}})
			return err
		}, connect.CodeInvalidArgument, "pagination.limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireCode(t, tt.call(), tt.code, tt.contains)
		})
	}

	t.Run("ReadBack", func(t *testing.T) {
		t.Parallel()
		// Failed attaches changed nothing: rc is still in no domain.
		rc, err := b.client.GetListOfRacks(b.ctx, &flowv1.GetListOfRacksRequest{Filters: []*flowv1.Filter{{Field: &flowv1.Filter_RackField{RackField: 1}, QueryInfo: &flowv1.StringQueryInfo{Patterns: []string{"rc"}}}}})
		require.NoError(t, err)
		require.Empty(t, rc.GetRacks()[0].GetNvlDomainIds())

		racks, err := b.client.GetRacksForNVLDomain(b.ctx, &flowv1.GetRacksForNVLDomainRequest{NvlDomainIdentifier: &flowv1.Identifier{Name: "d1"}})
		require.NoError(t, err)
		require.Equal(t, []string{"ra", "rb"}, names(racks.GetRacks()))
		require.Equal(t, d1.GetId().GetId(), racks.GetRacks()[0].GetNvlDomainIds()[0].GetId())

		comp, err := b.client.GetComponentInfoBySerial(b.ctx, &flowv1.GetComponentInfoBySerialRequest{SerialInfo: &flowv1.DeviceSerialInfo{Manufacturer: "acme", SerialNumber: "C-ra-1-0"}})
		require.NoError(t, err)
		require.Equal(t, d1.GetId().GetId(), comp.GetComponent().GetNvlDomainId().GetId())

		list, err := b.client.GetListOfNVLDomains(b.ctx, &flowv1.GetListOfNVLDomainsRequest{})
		require.NoError(t, err)
		require.Equal(t, int32(2), list.GetTotal())
		require.Equal(t, "d1", list.GetNvlDomains()[0].GetIdentifier().GetName())
		list, err = b.client.GetListOfNVLDomains(b.ctx, &flowv1.GetListOfNVLDomainsRequest{Info: &flowv1.StringQueryInfo{Patterns: []string{"d2"}}, Pagination: &flowv1.Pagination{Limit: 5}})
		require.NoError(t, err)
		require.Equal(t, int32(1), list.GetTotal())
		require.Equal(t, d2ID, list.GetNvlDomains()[0].GetIdentifier().GetId().GetId())
	})

	t.Run("Detach", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.create(t, smallRack("ra", 1, 0))
		b.create(t, smallRack("rb", 2, 0))
		_, err := b.client.CreateNVLDomain(b.ctx, &flowv1.CreateNVLDomainRequest{NvlDomain: &flowv1.NVLDomain{Identifier: &flowv1.Identifier{Name: "d"}}})
		require.NoError(t, err)
		_, err = b.client.AttachRacksToNVLDomain(b.ctx, &flowv1.AttachRacksToNVLDomainRequest{NvlDomainIdentifier: &flowv1.Identifier{Name: "d"}, RackIdentifiers: []*flowv1.Identifier{{Name: "rb"}}})
		require.NoError(t, err)
		// ra is in no domain: it is skipped, rb is still detached.
		_, err = b.client.DetachRacksFromNVLDomain(b.ctx, &flowv1.DetachRacksFromNVLDomainRequest{RackIdentifiers: []*flowv1.Identifier{{Name: "ra"}, {Name: "rb"}}})
		require.NoError(t, err)
		racks, err := b.client.GetRacksForNVLDomain(b.ctx, &flowv1.GetRacksForNVLDomainRequest{NvlDomainIdentifier: &flowv1.Identifier{Name: "d"}})
		require.NoError(t, err)
		require.Empty(t, racks.GetRacks())
	})
}

// TestRackComponentLimit: with FLOW_MAX_COMPONENTS_PER_RACK's bound set, a
// component added to or moved into a full rack is refused with
// resource_exhausted naming the limit, and nothing changes; a soft-deleted
// component frees its place.
func TestRackComponentLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.svc.SetMaxComponentsPerRack(3)
	full := b.create(t, smallRack("full", 1, 3))
	other := b.create(t, smallRack("spare", 2, 1))
	extra := func(serial string) *flowv1.Component {
		return &flowv1.Component{
			Type:   flowv1.ComponentType_COMPONENT_TYPE_COMPUTE,
			Info:   &flowv1.DeviceInfo{Name: serial, Manufacturer: "Acme", SerialNumber: serial},
			RackId: id(full),
		}
	}
	count := func(rack string) int {
		t.Helper()
		res, err := b.client.GetRackInfoByID(b.ctx, &flowv1.GetRackInfoByIDRequest{Id: id(rack), WithComponents: true})
		require.NoError(t, err)
		return len(res.GetRack().GetComponents())
	}

	_, err := b.client.AddComponent(b.ctx, &flowv1.AddComponentRequest{Component: extra("X-1")})
	requireCode(t, err, connect.CodeResourceExhausted, "FLOW_MAX_COMPONENTS_PER_RACK")
	require.Equal(t, 3, count(full))

	spare, err := b.client.GetRackInfoByID(b.ctx, &flowv1.GetRackInfoByIDRequest{Id: id(other), WithComponents: true})
	require.NoError(t, err)
	moved := spare.GetRack().GetComponents()[0].GetInfo().GetId()
	_, err = b.client.PatchComponent(b.ctx, &flowv1.PatchComponentRequest{Id: moved, RackId: id(full)})
	requireCode(t, err, connect.CodeResourceExhausted, "limit")
	require.Equal(t, 3, count(full))
	require.Equal(t, 1, count(other))

	res, err := b.client.GetRackInfoByID(b.ctx, &flowv1.GetRackInfoByIDRequest{Id: id(full), WithComponents: true})
	require.NoError(t, err)
	_, err = b.client.DeleteComponent(b.ctx, &flowv1.DeleteComponentRequest{Id: res.GetRack().GetComponents()[0].GetInfo().GetId()})
	require.NoError(t, err)
	_, err = b.client.AddComponent(b.ctx, &flowv1.AddComponentRequest{Component: extra("X-2")})
	require.NoError(t, err)
	require.Equal(t, 3, count(full))
}
