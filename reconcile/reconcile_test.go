package reconcile_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/psm"
	"github.com/nicoflow/flow/reconcile"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
	"github.com/nicoflow/flow/sim/psmsim"
)

// flowServer serves the reconcile handler as v1.Flow; other methods answer
// Unimplemented (embedded one level deeper, as in app).
type flowServer struct {
	unimplemented
	*reconcile.Handler
}

type unimplemented struct {
	flowv1connect.UnimplementedFlowHandler
}

type testBundle struct {
	ctx     context.Context
	pool    *pgxpool.Pool
	inv     *inventory.Service
	racks   []inventory.Rack // as created, components with their UUIDs
	nicoSim *nicosim.Sim
	psmSim  *psmsim.Sim
	nicoURL string
	psmURL  string
	client  flowv1connect.FlowClient
}

// serve returns a v1.Flow client of a reconcile handler over managers.
func (b *testBundle) serve(t *testing.T, managers reconcile.DeviceSource) flowv1connect.FlowClient {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(flowv1connect.NewFlowHandler(flowServer{Handler: reconcile.NewHandler(reconcile.NewService(b.inv, managers), b.pool)}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return flowv1connect.NewFlowClient(srv.Client(), srv.URL)
}

// managers returns component managers over the bundle's simulators.
func (b *testBundle) managers(t *testing.T, cfg backend.Config) *backend.Managers {
	t.Helper()
	nc, err := nico.NewClient(b.nicoURL, nico.WithTimeout(5*time.Second))
	require.NoError(t, err)
	pc, err := psm.NewClient(b.psmURL, psm.WithTimeout(5*time.Second))
	require.NoError(t, err)
	return backend.New(cfg, nc, pc)
}

// setup creates demo racks 0..racks-1 in a fresh database, starts both
// simulators on loopback seeded from that inventory (as flow dev does) and
// serves the handler with the default component managers (NICo Core for
// everything).
func setup(t *testing.T, racks int) *testBundle {
	t.Helper()
	b := &testBundle{ctx: context.Background(), pool: dbtest.NewPool(t), inv: inventory.NewService()}
	for i := range racks {
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.inv.CreateRack(b.ctx, tx, inventory.DemoRack(i))
			return err
		}))
		r, err := b.inv.RackBySerial(b.ctx, b.pool, "Wiwynn", inventory.DemoRack(i).SerialNumber, true)
		require.NoError(t, err)
		b.racks = append(b.racks, r)
	}
	b.nicoSim = nicosim.New(nicosim.Options{})
	b.psmSim = psmsim.New(psmsim.Options{})
	var devs []nicosim.Device
	var shelves []psmsim.Shelf
	for _, r := range b.racks {
		for _, c := range r.Components {
			d := nicosim.Device{ID: c.ID.String(), RackID: r.ID.String(), Name: c.Name, Serial: c.SerialNumber, BMCMAC: reconcile.HostMAC(c), Firmware: map[string]string{"bmc": c.FirmwareVersion}}
			switch c.Type {
			case inventory.ComponentTypeCompute:
				d.Kind = nicosim.KindCompute
			case inventory.ComponentTypeNVSwitch:
				d.Kind = nicosim.KindNVSwitch
			case inventory.ComponentTypePowerShelf:
				d.Kind, d.Firmware = nicosim.KindPowerShelf, map[string]string{"pmc": c.FirmwareVersion}
				shelves = append(shelves, psmsim.Shelf{MAC: d.BMCMAC, ChassisSerial: c.SerialNumber, Firmware: c.FirmwareVersion})
			}
			devs = append(devs, d)
		}
	}
	require.NoError(t, b.nicoSim.Seed(devs))
	require.NoError(t, b.psmSim.Seed(shelves))
	for _, s := range []struct {
		h   http.Handler
		url *string
	}{{b.nicoSim.Handler(), &b.nicoURL}, {b.psmSim.Handler(), &b.psmURL}} {
		srv, err := sim.Listen("127.0.0.1:0", s.h)
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv.Close(context.Background()) })
		*s.url = srv.URL()
	}
	b.client = b.serve(t, b.managers(t, backend.DefaultConfig()))
	return b
}

// component returns rack r's component named suffix ("ct-03").
func (b *testBundle) component(t *testing.T, r int, suffix string) inventory.Component {
	t.Helper()
	for _, c := range b.racks[r].Components {
		if c.Name == b.racks[r].Name+"-"+suffix {
			return c
		}
	}
	t.Fatalf("no component %s in rack %d", suffix, r)
	return inventory.Component{}
}

func (b *testBundle) validate(t *testing.T, req *flowv1.ValidateComponentsRequest) *flowv1.ValidateComponentsResponse {
	t.Helper()
	res, err := b.client.ValidateComponents(b.ctx, req)
	require.NoError(t, err)
	return res
}

// TestValidateComponents is the done-when: a fleet whose hardware
// was seeded from the inventory validates clean; a device the backend loses
// is missing, a device Flow does not know is unexpected, and a changed
// serial or firmware version is a mismatch naming the field.
func TestValidateComponents(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	res := b.validate(t, &flowv1.ValidateComponentsRequest{})
	require.Zero(t, res.GetTotalDiffs())
	require.Empty(t, res.GetDiffs())
	require.EqualValues(t, 70, res.GetMatchCount())

	// Lost: removed from Core, and dropped from Core's switch listing.
	lost := b.component(t, 1, "ct-03")
	require.True(t, b.nicoSim.Remove(reconcile.HostMAC(lost)))
	dropped := b.component(t, 0, "sw-04")
	_, err := b.nicoSim.Faults().Add(sim.Fault{Kind: sim.FaultDrop, Method: "FindSwitchIds", Device: dropped.ID.String()})
	require.NoError(t, err)
	// Unknown to Flow.
	require.NoError(t, b.nicoSim.Seed([]nicosim.Device{{Kind: nicosim.KindNVSwitch, ID: "stray-switch", BMCMAC: "0A:00:00:00:00:99", Serial: "STRAY"}}))
	// Drifted: another serial on Core, another firmware version.
	drift := b.component(t, 0, "ct-00")
	require.NoError(t, b.nicoSim.Seed([]nicosim.Device{{Kind: nicosim.KindCompute, ID: drift.ID.String(), Name: drift.Name, Serial: "SWAPPED", BMCMAC: reconcile.HostMAC(drift), Firmware: map[string]string{"bmc": "FW 1.3.00"}}}))
	shelf := b.component(t, 1, "ps-07")
	require.NoError(t, b.nicoSim.Seed([]nicosim.Device{{Kind: nicosim.KindPowerShelf, ID: shelf.ID.String(), Serial: shelf.SerialNumber, BMCMAC: reconcile.HostMAC(shelf), Firmware: map[string]string{"pmc": "PS 3.2.0"}}}))

	res = b.validate(t, &flowv1.ValidateComponentsRequest{})
	require.EqualValues(t, 5, res.GetTotalDiffs())
	require.EqualValues(t, 2, res.GetMissingCount())
	require.EqualValues(t, 1, res.GetUnexpectedCount())
	require.EqualValues(t, 2, res.GetMismatchCount())
	require.EqualValues(t, 66, res.GetMatchCount())
	byName := map[string]*flowv1.ComponentDiff{}
	for _, d := range res.GetDiffs() {
		name := d.GetExpected().GetInfo().GetName()
		if name == "" {
			name = d.GetComponentId()
		}
		byName[name] = d
	}
	// Name order: demo-0000-ct-00, demo-0000-sw-04, demo-0001-ct-03, demo-0001-ps-07, stray-switch.
	require.Equal(t, []flowv1.DiffType{flowv1.DiffType_DIFF_TYPE_MISMATCH, flowv1.DiffType_DIFF_TYPE_MISSING, flowv1.DiffType_DIFF_TYPE_MISSING, flowv1.DiffType_DIFF_TYPE_MISMATCH, flowv1.DiffType_DIFF_TYPE_UNEXPECTED},
		[]flowv1.DiffType{res.Diffs[0].GetType(), res.Diffs[1].GetType(), res.Diffs[2].GetType(), res.Diffs[3].GetType(), res.Diffs[4].GetType()})

	m := byName[lost.Name]
	require.Equal(t, flowv1.DiffType_DIFF_TYPE_MISSING, m.GetType())
	require.Equal(t, lost.ID.String(), m.GetId().GetId())
	require.Equal(t, reconcile.HostMAC(lost), m.GetComponentMacAddress())
	require.Equal(t, lost.SerialNumber, m.GetExpected().GetInfo().GetSerialNumber())
	require.Nil(t, m.GetActual())
	require.Equal(t, flowv1.DiffType_DIFF_TYPE_MISSING, byName[dropped.Name].GetType())

	u := byName["stray-switch"]
	require.Equal(t, flowv1.DiffType_DIFF_TYPE_UNEXPECTED, u.GetType())
	require.Nil(t, u.GetExpected())
	require.Nil(t, u.GetId())
	require.Equal(t, "0a:00:00:00:00:99", u.GetComponentMacAddress())
	require.Equal(t, flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH, u.GetActual().GetType())
	require.Equal(t, "STRAY", u.GetActual().GetInfo().GetSerialNumber())

	x := byName[drift.Name]
	require.Equal(t, flowv1.DiffType_DIFF_TYPE_MISMATCH, x.GetType())
	require.Equal(t, drift.ID.String(), x.GetId().GetId())
	require.Equal(t, drift.ID.String(), x.GetComponentId(), "the manager's ID")
	require.Equal(t, "SWAPPED", x.GetActual().GetInfo().GetSerialNumber())
	require.Len(t, x.GetFieldDiffs(), 2)
	require.Equal(t, "serial_number", x.GetFieldDiffs()[0].GetFieldName())
	require.Equal(t, drift.SerialNumber, x.GetFieldDiffs()[0].GetExpectedValue())
	require.Equal(t, "SWAPPED", x.GetFieldDiffs()[0].GetActualValue())
	require.Equal(t, "firmware_version", x.GetFieldDiffs()[1].GetFieldName())
	require.Equal(t, "FW 1.2.00GA", x.GetFieldDiffs()[1].GetExpectedValue())
	require.Equal(t, "FW 1.3.00", x.GetFieldDiffs()[1].GetActualValue())

	s := byName[shelf.Name]
	require.Len(t, s.GetFieldDiffs(), 1)
	require.Equal(t, "firmware_version", s.GetFieldDiffs()[0].GetFieldName())
	require.Equal(t, "PS 3.2.0", s.GetFieldDiffs()[0].GetActualValue())

	t.Run("Pagination", func(t *testing.T) {
		page := b.validate(t, &flowv1.ValidateComponentsRequest{Pagination: &flowv1.Pagination{Offset: 1, Limit: 2}})
		require.EqualValues(t, 5, page.GetTotalDiffs(), "counts cover every diff")
		require.EqualValues(t, 2, page.GetMissingCount())
		require.Len(t, page.GetDiffs(), 2)
		require.Equal(t, dropped.ID.String(), page.GetDiffs()[0].GetId().GetId())
		require.Equal(t, lost.ID.String(), page.GetDiffs()[1].GetId().GetId())

		beyond := b.validate(t, &flowv1.ValidateComponentsRequest{Pagination: &flowv1.Pagination{Offset: 9, Limit: 2}})
		require.Empty(t, beyond.GetDiffs())
		require.EqualValues(t, 5, beyond.GetTotalDiffs())

		desc := b.validate(t, &flowv1.ValidateComponentsRequest{OrderBy: &flowv1.OrderBy{Field: &flowv1.OrderBy_ComponentField{ComponentField: flowv1.ComponentOrderByField_COMPONENT_ORDER_BY_FIELD_NAME}, Direction: "DESC"}})
		require.Equal(t, "stray-switch", desc.GetDiffs()[0].GetComponentId())

		byType := b.validate(t, &flowv1.ValidateComponentsRequest{OrderBy: &flowv1.OrderBy{Field: &flowv1.OrderBy_ComponentField{ComponentField: flowv1.ComponentOrderByField_COMPONENT_ORDER_BY_FIELD_TYPE}}})
		var types []flowv1.ComponentType
		for _, d := range byType.GetDiffs() {
			c := d.GetExpected()
			if c == nil {
				c = d.GetActual()
			}
			types = append(types, c.GetType())
		}
		require.Equal(t, []flowv1.ComponentType{flowv1.ComponentType_COMPONENT_TYPE_COMPUTE, flowv1.ComponentType_COMPONENT_TYPE_COMPUTE,
			flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH, flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH, flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF}, types)
	})

	t.Run("Scope", func(t *testing.T) {
		rack1 := b.validate(t, &flowv1.ValidateComponentsRequest{TargetSpec: rackSpec(b.racks[1].Name)})
		require.EqualValues(t, 2, rack1.GetTotalDiffs(), "rack 0's diffs and the rack-less stray switch are out of scope")
		require.EqualValues(t, 1, rack1.GetMissingCount())
		require.EqualValues(t, 1, rack1.GetMismatchCount())
		require.EqualValues(t, 33, rack1.GetMatchCount())

		switches := b.validate(t, &flowv1.ValidateComponentsRequest{Filters: []*flowv1.Filter{typeFilter("COMPONENT_TYPE_NVSWITCH")}})
		require.EqualValues(t, 1, switches.GetMissingCount())
		require.EqualValues(t, 1, switches.GetUnexpectedCount(), "a type filter keeps unknown devices of that type")
		require.EqualValues(t, 17, switches.GetMatchCount())

		one := b.validate(t, &flowv1.ValidateComponentsRequest{TargetSpec: &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Components{Components: &flowv1.ComponentTargets{
			Targets: []*flowv1.ComponentTarget{{Identifier: &flowv1.ComponentTarget_Id{Id: &flowv1.UUID{Id: drift.ID.String()}}}}}}}})
		require.EqualValues(t, 1, one.GetTotalDiffs())
		require.Equal(t, drift.ID.String(), one.GetDiffs()[0].GetId().GetId())
	})
}

// TestValidateComponentsRackUnexpected: with rack targets, a device Core
// places in a targeted rack is unexpected there.
func TestValidateComponentsRackUnexpected(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	require.NoError(t, b.nicoSim.Seed([]nicosim.Device{
		{Kind: nicosim.KindPowerShelf, ID: "extra-shelf", RackID: b.racks[0].ID.String(), BMCMAC: "0a:00:00:00:01:01"},
		{Kind: nicosim.KindPowerShelf, ID: "elsewhere", RackID: "some-other-rack", BMCMAC: "0a:00:00:00:01:02"},
	}))
	res := b.validate(t, &flowv1.ValidateComponentsRequest{TargetSpec: rackSpec(b.racks[0].Name)})
	require.EqualValues(t, 1, res.GetUnexpectedCount())
	require.Equal(t, "extra-shelf", res.GetDiffs()[0].GetComponentId())
	require.Equal(t, b.racks[0].ID.String(), res.GetDiffs()[0].GetActual().GetRackExternalId())
}

// TestValidateComponentsDomainScope: a domain target covers its racks; an
// empty domain has nothing to report.
func TestValidateComponentsDomainScope(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		for _, name := range []string{"d1", "empty"} {
			if _, err := b.inv.CreateNVLDomain(b.ctx, tx, inventory.NVLDomain{Name: name}); err != nil {
				return err
			}
		}
		return b.inv.AttachRacks(b.ctx, tx, inventory.NVLDomainRef{Name: "d1"}, []inventory.RackRef{{Name: b.racks[1].Name}})
	}))
	require.True(t, b.nicoSim.Remove(reconcile.HostMAC(b.component(t, 0, "ct-01"))))
	require.True(t, b.nicoSim.Remove(reconcile.HostMAC(b.component(t, 1, "sw-02"))))
	domain := func(name string, types ...flowv1.ComponentType) *flowv1.OperationTargetSpec {
		return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_NvlDomains{NvlDomains: &flowv1.NVLDomainTargets{
			Targets: []*flowv1.NVLDomainTarget{{Identifier: &flowv1.NVLDomainTarget_Name{Name: name}, ComponentTypes: types}}}}}
	}
	res := b.validate(t, &flowv1.ValidateComponentsRequest{TargetSpec: domain("d1")})
	require.EqualValues(t, 1, res.GetMissingCount())
	require.Equal(t, b.component(t, 1, "sw-02").ID.String(), res.GetDiffs()[0].GetId().GetId())
	require.EqualValues(t, 34, res.GetMatchCount())

	res = b.validate(t, &flowv1.ValidateComponentsRequest{TargetSpec: domain("d1", flowv1.ComponentType_COMPONENT_TYPE_COMPUTE)})
	require.Zero(t, res.GetTotalDiffs())
	require.EqualValues(t, 18, res.GetMatchCount())

	res = b.validate(t, &flowv1.ValidateComponentsRequest{TargetSpec: domain("empty")})
	require.Zero(t, res.GetTotalDiffs())
	require.Zero(t, res.GetMatchCount())
}

// TestValidateComponentsPSM: with power shelves managed by PSM, shelves are
// read from PSM (keyed by PMC MAC) and the fleet still validates clean.
func TestValidateComponentsPSM(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	cfg := backend.DefaultConfig()
	cfg.Managers[backend.PowerShelf] = backend.ImplPSM
	client := b.serve(t, b.managers(t, cfg))
	res, err := client.ValidateComponents(b.ctx, &flowv1.ValidateComponentsRequest{})
	require.NoError(t, err)
	require.Zero(t, res.GetTotalDiffs())
	require.EqualValues(t, 35, res.GetMatchCount())

	shelf := b.component(t, 0, "ps-02")
	require.True(t, b.psmSim.Remove(reconcile.HostMAC(shelf)))
	res, err = client.ValidateComponents(b.ctx, &flowv1.ValidateComponentsRequest{})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.GetMissingCount())
	require.Equal(t, shelf.ID.String(), res.GetDiffs()[0].GetId().GetId())
}

func TestValidateComponentsErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	unconfigured := func(t *testing.T) flowv1connect.FlowClient {
		nc, err := nico.NewClient("")
		require.NoError(t, err)
		pc, err := psm.NewClient("")
		require.NoError(t, err)
		return b.serve(t, backend.New(backend.DefaultConfig(), nc, pc))
	}
	psmUnconfigured := func(t *testing.T) flowv1connect.FlowClient {
		nc, err := nico.NewClient(b.nicoURL)
		require.NoError(t, err)
		pc, err := psm.NewClient("")
		require.NoError(t, err)
		cfg := backend.DefaultConfig()
		cfg.Managers[backend.PowerShelf] = backend.ImplPSM
		return b.serve(t, backend.New(cfg, nc, pc))
	}
	unreachable := func(t *testing.T) flowv1connect.FlowClient {
		nc, err := nico.NewClient("http://127.0.0.1:1", nico.WithTimeout(2*time.Second))
		require.NoError(t, err)
		pc, err := psm.NewClient("")
		require.NoError(t, err)
		return b.serve(t, backend.New(backend.DefaultConfig(), nc, pc))
	}
	failingWith := func(code string) func(t *testing.T) flowv1connect.FlowClient {
		return func(t *testing.T) flowv1connect.FlowClient {
			ns := nicosim.New(nicosim.Options{})
			_, err := ns.Faults().Add(sim.Fault{Kind: sim.FaultError, Method: "FindSwitchIds", Code: code})
			require.NoError(t, err)
			srv, err := sim.Listen("127.0.0.1:0", ns.Handler())
			require.NoError(t, err)
			t.Cleanup(func() { _ = srv.Close(context.Background()) })
			nc, err := nico.NewClient(srv.URL())
			require.NoError(t, err)
			pc, err := psm.NewClient("")
			require.NoError(t, err)
			return b.serve(t, backend.New(backend.DefaultConfig(), nc, pc))
		}
	}
	failing := failingWith("unavailable")
	noManagers := func(t *testing.T) flowv1connect.FlowClient { return b.serve(t, nil) }
	seeded := func(*testing.T) flowv1connect.FlowClient { return b.client }
	for _, tt := range []struct {
		name   string
		client func(*testing.T) flowv1connect.FlowClient
		req    *flowv1.ValidateComponentsRequest
		code   connect.Code
		msg    string
	}{
		{name: "NICoNotConfigured", client: unconfigured, code: connect.CodeFailedPrecondition, msg: "NICO_CORE_API_URL"},
		{name: "PSMNotConfigured", client: psmUnconfigured, code: connect.CodeFailedPrecondition, msg: "PSM_API_URL"},
		{name: "NoManagers", client: noManagers, code: connect.CodeFailedPrecondition, msg: "no component managers"},
		{name: "Unreachable", client: unreachable, code: connect.CodeUnavailable, msg: "unreachable"},
		{name: "BackendFails", client: failing, code: connect.CodeUnavailable, msg: "FindSwitchIds"},
		// A backend that answered Internal was reached: it failed.
		{name: "BackendInternal", client: failingWith("internal"), code: connect.CodeUnavailable, msg: "backend failed (internal): FindSwitchIds"},
		{name: "NegativeOffset", client: seeded, req: &flowv1.ValidateComponentsRequest{Pagination: &flowv1.Pagination{Offset: -1}}, code: connect.CodeInvalidArgument, msg: "pagination.offset"},
		{name: "NegativeLimit", client: seeded, req: &flowv1.ValidateComponentsRequest{Pagination: &flowv1.Pagination{Limit: -1}}, code: connect.CodeInvalidArgument, msg: "pagination.limit"},
		{name: "RackFilter", client: seeded, req: &flowv1.ValidateComponentsRequest{Filters: []*flowv1.Filter{{Field: &flowv1.Filter_RackField{RackField: flowv1.RackFilterField_RACK_FILTER_FIELD_NAME}}}}, code: connect.CodeInvalidArgument, msg: "filters[0].component_field"},
		{name: "UnknownType", client: seeded, req: &flowv1.ValidateComponentsRequest{Filters: []*flowv1.Filter{typeFilter("COMPONENT_TYPE_GPU")}}, code: connect.CodeInvalidArgument, msg: "filters[0].query_info.patterns"},
		{name: "OrderByModel", client: seeded, req: &flowv1.ValidateComponentsRequest{OrderBy: &flowv1.OrderBy{Field: &flowv1.OrderBy_ComponentField{ComponentField: flowv1.ComponentOrderByField_COMPONENT_ORDER_BY_FIELD_MODEL}}}, code: connect.CodeInvalidArgument, msg: "order_by.component_field"},
		{name: "BadDirection", client: seeded, req: &flowv1.ValidateComponentsRequest{OrderBy: &flowv1.OrderBy{Direction: "UP"}}, code: connect.CodeInvalidArgument, msg: "order_by.direction"},
		{name: "EmptyTargetSpec", client: seeded, req: &flowv1.ValidateComponentsRequest{TargetSpec: &flowv1.OperationTargetSpec{}}, code: connect.CodeInvalidArgument, msg: "target_spec"},
		{name: "UnknownRack", client: seeded, req: &flowv1.ValidateComponentsRequest{TargetSpec: rackSpec("nope")}, code: connect.CodeNotFound, msg: "nope"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := tt.req
			if req == nil {
				req = &flowv1.ValidateComponentsRequest{}
			}
			_, err := tt.client(t).ValidateComponents(b.ctx, req)
			require.Error(t, err)
			require.Equal(t, tt.code, connect.CodeOf(err), err.Error())
			require.Contains(t, err.Error(), tt.msg)
		})
	}
}

func rackSpec(names ...string) *flowv1.OperationTargetSpec {
	var ts []*flowv1.RackTarget
	for _, n := range names {
		ts = append(ts, &flowv1.RackTarget{Identifier: &flowv1.RackTarget_Name{Name: n}})
	}
	return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: ts}}}
}

func typeFilter(patterns ...string) *flowv1.Filter {
	return &flowv1.Filter{
		Field:     &flowv1.Filter_ComponentField{ComponentField: flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_TYPE},
		QueryInfo: &flowv1.StringQueryInfo{Patterns: patterns, UseOr: true},
	}
}
