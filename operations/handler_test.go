package operations_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nicoflow/flow/operations/ruledef"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/opstest"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// flowHandler serves the rule methods; everything else is unimplemented
// (embedded one level deeper so the rule methods win, as in app).
type flowHandler struct {
	unimplemented
	*operations.Handler
}

type unimplemented struct {
	flowv1connect.UnimplementedFlowHandler
}

type testBundle struct {
	pool   *pgxpool.Pool
	svc    *operations.Service
	url    string                   // server base URL
	client flowv1connect.FlowClient // Connect protocol
	grpc   flowv1connect.FlowClient // gRPC over h2c
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	svc, err := operations.NewService(opstest.Racks{Inv: inventory.NewService()})
	require.NoError(t, err)
	srv := opstest.Serve(t, flowHandler{Handler: operations.NewHandler(pool, svc)})
	return &testBundle{pool: pool, svc: svc, url: srv.URL, client: srv.Client, grpc: srv.GRPC}
}

func (b *testBundle) newRack(t *testing.T) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		serial := uuid.NewString()
		id, err = inventory.NewService().CreateRack(context.Background(), tx, inventory.Rack{Name: "rack-" + serial[:8], Manufacturer: "Acme", SerialNumber: serial})
		return err
	})
	require.NoError(t, err)
	return id
}

// snapshot dumps both rule tables, so a test can show a failed call changed
// nothing.
func (b *testBundle) snapshot(t *testing.T) string {
	t.Helper()
	var out string
	err := b.pool.QueryRow(context.Background(), `SELECT
		coalesce((SELECT json_agg(r ORDER BY id)::text FROM operation_rule r), '') || '|' ||
		coalesce((SELECT json_agg(a ORDER BY rack_id, operation_type, operation_code)::text FROM rack_rule_association a), '')`).Scan(&out)
	require.NoError(t, err)
	return out
}

func (b *testBundle) createRule(t *testing.T, req *flowv1.CreateOperationRuleRequest) uuid.UUID {
	t.Helper()
	res, err := b.client.CreateOperationRule(context.Background(), req)
	require.NoError(t, err)
	id, err := uuid.Parse(res.GetId().GetId())
	require.NoError(t, err)
	return id
}

func pbID(id uuid.UUID) *flowv1.UUID { return &flowv1.UUID{Id: id.String()} }

func rackSpec(racks ...inventory.Rack) *flowv1.OperationTargetSpec {
	var ts []*flowv1.RackTarget
	for _, r := range racks {
		ts = append(ts, &flowv1.RackTarget{Identifier: &flowv1.RackTarget_Id{Id: pbID(r.ID)}})
	}
	return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: ts}}}
}

const powerOnDef = `{"steps":[
	{"component_type":"powershelf","stage":1,"max_parallel":0,"timeout":"10m",
	 "retry":{"max_attempts":2,"initial_interval":"5s","backoff_coefficient":2},
	 "main_operation":{"name":"PowerControl"},
	 "post_operation":[{"name":"VerifyPowerStatus","timeout":"5m","poll_interval":"10s","parameters":{"expected_status":"on"}}]},
	{"component_type":"Compute","stage":2,"max_parallel":4,"main_operation":{"name":"PowerControl"},
	 "post_operation":[{"name":"Sleep","parameters":{"duration":30000000000}}]}]}`

func powerOnReq(name string, isDefault bool) *flowv1.CreateOperationRuleRequest {
	return &flowv1.CreateOperationRuleRequest{
		Name: name, Description: "custom " + name,
		OperationType:      flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL,
		OperationCode:      "power_on",
		RuleDefinitionJson: powerOnDef,
		IsDefault:          isDefault,
	}
}

func TestCreateAndGetRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	before := time.Now().Add(-time.Minute)

	id := b.createRule(t, powerOnReq("rack power on", false))
	for name, client := range map[string]flowv1connect.FlowClient{"connect": b.client, "grpc": b.grpc} {
		got, err := client.GetOperationRule(ctx, &flowv1.GetOperationRuleRequest{RuleId: pbID(id)})
		require.NoError(t, err, name)
		require.Equal(t, id.String(), got.GetId().GetId())
		require.Equal(t, "rack power on", got.GetName())
		require.Equal(t, "custom rack power on", got.GetDescription())
		require.Equal(t, flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL, got.GetOperationType())
		require.Equal(t, "power_on", got.GetOperationCode())
		require.False(t, got.GetIsDefault())
		require.True(t, got.GetCreatedAt().AsTime().After(before))
		require.Equal(t, got.GetCreatedAt().AsTime(), got.GetUpdatedAt().AsTime())

		// The stored definition is normalised: version, canonical types,
		// durations as strings.
		def, err := ruledef.Parse([]byte(got.GetRuleDefinitionJson()))
		require.NoError(t, err)
		require.Contains(t, got.GetRuleDefinitionJson(), `"version":"v1"`)
		require.Contains(t, got.GetRuleDefinitionJson(), `"component_type":"PowerShelf"`)
		require.Contains(t, got.GetRuleDefinitionJson(), `"duration":"30s"`)
		require.Len(t, def.Steps, 2)
		require.Equal(t, 4, def.Steps[1].MaxParallel)
	}

	// Connect JSON works as curl would send it.
	req, err := http.NewRequest(http.MethodPost, b.url+"/v1.Flow/GetOperationRule",
		strings.NewReader(fmt.Sprintf(`{"ruleId":{"id":%q}}`, id)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}

func TestCreateRuleErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.createRule(t, powerOnReq("existing default", true))
	before := b.snapshot(t)

	withDef := func(def string) *flowv1.CreateOperationRuleRequest {
		r := powerOnReq("r", false)
		r.RuleDefinitionJson = def
		return r
	}
	for _, tt := range []struct {
		name string
		req  *flowv1.CreateOperationRuleRequest
		code connect.Code
		msg  string
	}{
		{"NoName", func() *flowv1.CreateOperationRuleRequest { r := powerOnReq("", false); return r }(),
			connect.CodeInvalidArgument, "name: rule name is required"},
		{"UnknownType", func() *flowv1.CreateOperationRuleRequest {
			r := powerOnReq("r", false)
			r.OperationType = flowv1.OperationType_OPERATION_TYPE_UNKNOWN
			return r
		}(), connect.CodeInvalidArgument, "operation_type: must be OPERATION_TYPE_POWER_CONTROL or OPERATION_TYPE_FIRMWARE_CONTROL"},
		{"OutOfRangeType", func() *flowv1.CreateOperationRuleRequest {
			r := powerOnReq("r", false)
			r.OperationType = flowv1.OperationType(42)
			return r
		}(), connect.CodeInvalidArgument, "operation_type: must be"},
		{"CodeOfOtherType", func() *flowv1.CreateOperationRuleRequest {
			r := powerOnReq("r", false)
			r.OperationCode = "upgrade"
			return r
		}(), connect.CodeInvalidArgument, "operation_code: invalid operation code 'upgrade' for operation type 'power_control'"},
		{"BadJSON", withDef(`{"steps":[`), connect.CodeInvalidArgument, "rule_definition_json: malformed rule definition"},
		{"NoDefinition", withDef(``), connect.CodeInvalidArgument, "rule_definition_json: rule definition is required"},
		{"Version", withDef(`{"version":"v2","steps":[]}`), connect.CodeInvalidArgument, "rule_definition_json: unsupported rule definition version: v2 (current version: v1)"},
		{"Validation", withDef(`{"steps":[{"component_type":"Compute","stage":1}]}`), connect.CodeInvalidArgument, "rule_definition_json: step 0: main_operation is required"},
		{"InternalAction", withDef(`{"steps":[{"component_type":"Compute","stage":1,"main_operation":{"name":"BringUpControl"}}]}`),
			connect.CodeInvalidArgument, "rule_definition_json: step 0: main_operation: unknown action: BringUpControl"},
		{"SecondDefault", powerOnReq("another default", true), connect.CodeAlreadyExists, "a default rule already exists for this operation type"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.CreateOperationRule(ctx, tt.req)
			opstest.RequireCode(t, err, tt.code, tt.msg)
			require.Equal(t, before, b.snapshot(t), "a failed call changes nothing")
		})
	}

	// A default for another code of the same type is fine.
	r := powerOnReq("power off default", true)
	r.OperationCode = "power_off"
	b.createRule(t, r)
}

func TestUpdateRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.createRule(t, powerOnReq("original", true))
	get := func() *flowv1.OperationRule {
		r, err := b.client.GetOperationRule(ctx, &flowv1.GetOperationRuleRequest{RuleId: pbID(id)})
		require.NoError(t, err)
		return r
	}
	orig := get()
	ptr := func(s string) *string { return &s }

	_, err := b.client.UpdateOperationRule(ctx, &flowv1.UpdateOperationRuleRequest{RuleId: pbID(id), Name: ptr("renamed")})
	require.NoError(t, err)
	got := get()
	require.Equal(t, "renamed", got.GetName())
	require.Equal(t, orig.GetDescription(), got.GetDescription())
	require.Equal(t, orig.GetRuleDefinitionJson(), got.GetRuleDefinitionJson())
	require.True(t, got.GetIsDefault(), "is_default is unchanged by updates")
	require.True(t, got.GetUpdatedAt().AsTime().After(orig.GetUpdatedAt().AsTime()))
	require.Equal(t, orig.GetCreatedAt().AsTime(), got.GetCreatedAt().AsTime())

	// An empty description is a real value when present.
	_, err = b.client.UpdateOperationRule(ctx, &flowv1.UpdateOperationRuleRequest{RuleId: pbID(id), Description: ptr("")})
	require.NoError(t, err)
	require.Equal(t, "", get().GetDescription())
	require.Equal(t, "renamed", get().GetName())

	newDef := `{"version":"v1","steps":[{"component_type":"Compute","stage":1,"main_operation":{"name":"PowerControl"}}]}`
	_, err = b.client.UpdateOperationRule(ctx, &flowv1.UpdateOperationRuleRequest{RuleId: pbID(id), RuleDefinitionJson: &newDef})
	require.NoError(t, err)
	def, err := ruledef.Parse([]byte(get().GetRuleDefinitionJson()))
	require.NoError(t, err)
	require.Len(t, def.Steps, 1)
	require.Equal(t, operations.ComponentTypeCompute, def.Steps[0].ComponentType)

	before := b.snapshot(t)
	for _, tt := range []struct {
		name string
		req  *flowv1.UpdateOperationRuleRequest
		code connect.Code
		msg  string
	}{
		{"NoID", &flowv1.UpdateOperationRuleRequest{Name: ptr("x")}, connect.CodeInvalidArgument, "rule_id is required"},
		{"BadID", &flowv1.UpdateOperationRuleRequest{RuleId: &flowv1.UUID{Id: "nope"}, Name: ptr("x")}, connect.CodeInvalidArgument, `rule_id: invalid UUID "nope"`},
		{"UnknownID", &flowv1.UpdateOperationRuleRequest{RuleId: pbID(uuid.New()), Name: ptr("x")}, connect.CodeNotFound, "operation rule not found"},
		{"EmptyName", &flowv1.UpdateOperationRuleRequest{RuleId: pbID(id), Name: ptr("")}, connect.CodeInvalidArgument, "name: rule name is required"},
		{"BadDefinition", &flowv1.UpdateOperationRuleRequest{RuleId: pbID(id), Name: ptr("x"), RuleDefinitionJson: ptr(`{"steps":[{"component_type":"Compute","stage":0,"main_operation":{"name":"PowerControl"}}]}`)},
			connect.CodeInvalidArgument, "rule_definition_json: step 0: stage must be >= 1, got 0"},
		{"EmptyDefinition", &flowv1.UpdateOperationRuleRequest{RuleId: pbID(id), RuleDefinitionJson: ptr("")}, connect.CodeInvalidArgument, "rule_definition_json: rule definition is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.UpdateOperationRule(ctx, tt.req)
			opstest.RequireCode(t, err, tt.code, tt.msg)
			require.Equal(t, before, b.snapshot(t))
		})
	}
}

func TestDeleteRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.createRule(t, powerOnReq("doomed", false))
	rack1, rack2 := b.newRack(t), b.newRack(t)
	for _, rack := range []uuid.UUID{rack1, rack2} {
		_, err := b.client.AssociateRuleWithRack(ctx, &flowv1.AssociateRuleWithRackRequest{RackId: pbID(rack), RuleId: pbID(id)})
		require.NoError(t, err)
	}

	before := b.snapshot(t)
	_, err := b.client.DeleteOperationRule(ctx, &flowv1.DeleteOperationRuleRequest{RuleId: pbID(id)})
	opstest.RequireCode(t, err, connect.CodeFailedPrecondition, "operation rule is associated with racks")
	require.Contains(t, err.Error(), rack1.String())
	require.Contains(t, err.Error(), rack2.String())
	require.Equal(t, before, b.snapshot(t))

	for _, rack := range []uuid.UUID{rack1, rack2} {
		_, err := b.client.DisassociateRuleFromRack(ctx, &flowv1.DisassociateRuleFromRackRequest{
			RackId: pbID(rack), OperationType: flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL, OperationCode: "power_on"})
		require.NoError(t, err)
	}
	_, err = b.client.DeleteOperationRule(ctx, &flowv1.DeleteOperationRuleRequest{RuleId: pbID(id)})
	require.NoError(t, err)
	_, err = b.client.GetOperationRule(ctx, &flowv1.GetOperationRuleRequest{RuleId: pbID(id)})
	opstest.RequireCode(t, err, connect.CodeNotFound, "operation rule not found")

	_, err = b.client.DeleteOperationRule(ctx, &flowv1.DeleteOperationRuleRequest{RuleId: pbID(id)})
	opstest.RequireCode(t, err, connect.CodeNotFound, "operation rule not found")
	_, err = b.client.DeleteOperationRule(ctx, &flowv1.DeleteOperationRuleRequest{RuleId: &flowv1.UUID{Id: "12"}})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "rule_id: invalid UUID")
}

func TestGetRuleErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.GetOperationRule(context.Background(), &flowv1.GetOperationRuleRequest{})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "rule_id is required")
	_, err = b.grpc.GetOperationRule(context.Background(), &flowv1.GetOperationRuleRequest{RuleId: pbID(uuid.New())})
	opstest.RequireCode(t, err, connect.CodeNotFound, "operation rule not found")
}

func TestListRules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	fwReq := func(name, code string, isDefault bool) *flowv1.CreateOperationRuleRequest {
		return &flowv1.CreateOperationRuleRequest{
			Name: name, OperationType: flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL, OperationCode: code,
			RuleDefinitionJson: `{"steps":[{"component_type":"Compute","stage":1,"main_operation":{"name":"FirmwareControl"}}]}`,
			IsDefault:          isDefault,
		}
	}
	// Created in this order; listed newest first.
	p1 := b.createRule(t, powerOnReq("p1", true))
	p2 := b.createRule(t, powerOnReq("p2", false))
	f1 := b.createRule(t, fwReq("f1", "upgrade", false))
	f2 := b.createRule(t, fwReq("f2", "rollback", true))
	p3 := b.createRule(t, powerOnReq("p3", false))

	ids := func(res *flowv1.ListOperationRulesResponse) []uuid.UUID {
		var out []uuid.UUID
		for _, r := range res.GetRules() {
			out = append(out, uuid.MustParse(r.GetId().GetId()))
		}
		return out
	}
	pt := func(t flowv1.OperationType) *flowv1.OperationType { return &t }
	bp := func(v bool) *bool { return &v }
	ip := func(v int32) *int32 { return &v }
	for _, tt := range []struct {
		name  string
		req   *flowv1.ListOperationRulesRequest
		want  []uuid.UUID
		total int32
	}{
		{"All", &flowv1.ListOperationRulesRequest{}, []uuid.UUID{p3, f2, f1, p2, p1}, 5},
		{"Power", &flowv1.ListOperationRulesRequest{OperationType: pt(flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL)}, []uuid.UUID{p3, p2, p1}, 3},
		{"Defaults", &flowv1.ListOperationRulesRequest{IsDefault: bp(true)}, []uuid.UUID{f2, p1}, 2},
		{"NotDefaults", &flowv1.ListOperationRulesRequest{IsDefault: bp(false)}, []uuid.UUID{p3, f1, p2}, 3},
		{"FirmwareNotDefault", &flowv1.ListOperationRulesRequest{OperationType: pt(flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL), IsDefault: bp(false)}, []uuid.UUID{f1}, 1},
		{"Page", &flowv1.ListOperationRulesRequest{Offset: ip(1), Limit: ip(2)}, []uuid.UUID{f2, f1}, 5},
		{"PastTheEnd", &flowv1.ListOperationRulesRequest{Offset: ip(10)}, nil, 5},
		{"ZeroLimitMeansDefault", &flowv1.ListOperationRulesRequest{Limit: ip(0)}, []uuid.UUID{p3, f2, f1, p2, p1}, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := b.client.ListOperationRules(ctx, tt.req)
			require.NoError(t, err)
			require.Equal(t, tt.want, ids(res))
			require.Equal(t, tt.total, res.GetTotalCount())
		})
	}

	// Equal created_at (one transaction) falls back to id descending.
	var a, c uuid.UUID
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		for _, id := range []*uuid.UUID{&a, &c} {
			r, err := b.svc.CreateRule(ctx, tx, operations.RuleInput{Name: "same", Type: operations.OperationTypePowerControl, Code: operations.CodeRestart, Definition: []byte(`{"steps":[]}`)})
			if err != nil {
				return err
			}
			*id = r.ID
		}
		return nil
	})
	require.NoError(t, err)
	res, err := b.client.ListOperationRules(ctx, &flowv1.ListOperationRulesRequest{Limit: ip(2)})
	require.NoError(t, err)
	want := []uuid.UUID{a, c}
	if strings.Compare(a.String(), c.String()) < 0 {
		want = []uuid.UUID{c, a}
	}
	require.Equal(t, want, ids(res))

	_, err = b.client.ListOperationRules(ctx, &flowv1.ListOperationRulesRequest{Offset: ip(-1)})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "offset: offset must be >= 0, got -1")
	_, err = b.client.ListOperationRules(ctx, &flowv1.ListOperationRulesRequest{Limit: ip(-5)})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "limit: must be >= 0, got -5")
	_, err = b.client.ListOperationRules(ctx, &flowv1.ListOperationRulesRequest{OperationType: pt(flowv1.OperationType_OPERATION_TYPE_UNKNOWN)})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "operation_type: must be")
}

func TestSetRuleAsDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	a := b.createRule(t, powerOnReq("a", true))
	c := b.createRule(t, powerOnReq("c", false))
	off := powerOnReq("off", true)
	off.OperationCode = "power_off"
	o := b.createRule(t, off)
	isDefault := func(id uuid.UUID) bool {
		r, err := b.client.GetOperationRule(ctx, &flowv1.GetOperationRuleRequest{RuleId: pbID(id)})
		require.NoError(t, err)
		return r.GetIsDefault()
	}

	_, err := b.client.SetRuleAsDefault(ctx, &flowv1.SetRuleAsDefaultRequest{RuleId: pbID(c)})
	require.NoError(t, err)
	require.False(t, isDefault(a))
	require.True(t, isDefault(c))
	require.True(t, isDefault(o), "other codes keep their default")

	// Again: nothing changes.
	before := b.snapshot(t)
	_, err = b.client.SetRuleAsDefault(ctx, &flowv1.SetRuleAsDefaultRequest{RuleId: pbID(c)})
	require.NoError(t, err)
	require.Equal(t, before, b.snapshot(t))

	_, err = b.client.SetRuleAsDefault(ctx, &flowv1.SetRuleAsDefaultRequest{RuleId: pbID(uuid.New())})
	opstest.RequireCode(t, err, connect.CodeNotFound, "operation rule not found")
	_, err = b.client.SetRuleAsDefault(ctx, &flowv1.SetRuleAsDefaultRequest{})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "rule_id is required")
	require.Equal(t, before, b.snapshot(t))
}

// TestSetRuleAsDefaultConcurrent races SetRuleAsDefault over several rules of
// one (type, code): every call succeeds and exactly one default remains.
func TestSetRuleAsDefaultConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var ids []uuid.UUID
	for i := range 8 {
		ids = append(ids, b.createRule(t, powerOnReq(fmt.Sprint("r", i), false)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for _, id := range ids {
		wg.Go(func() {
			_, err := b.client.SetRuleAsDefault(ctx, &flowv1.SetRuleAsDefaultRequest{RuleId: pbID(id)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	res, err := b.client.ListOperationRules(ctx, &flowv1.ListOperationRulesRequest{IsDefault: func() *bool { v := true; return &v }()})
	require.NoError(t, err)
	require.Len(t, res.GetRules(), 1)
}

func TestRackRuleAssociations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rack, other := b.newRack(t), b.newRack(t)
	on1 := b.createRule(t, powerOnReq("on1", false))
	on2 := b.createRule(t, powerOnReq("on2", false))
	fw := b.createRule(t, &flowv1.CreateOperationRuleRequest{
		Name: "fw", OperationType: flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL, OperationCode: "upgrade",
		RuleDefinitionJson: `{"steps":[]}`,
	})
	power := flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL
	getAssoc := func(rackID uuid.UUID, typ flowv1.OperationType, code string) string {
		res, err := b.client.GetRackRuleAssociation(ctx, &flowv1.GetRackRuleAssociationRequest{RackId: pbID(rackID), OperationType: typ, OperationCode: code})
		require.NoError(t, err)
		return res.GetRuleId().GetId()
	}

	require.Equal(t, "", getAssoc(rack, power, "power_on"), "empty rule_id when none")
	list, err := b.client.ListRackRuleAssociations(ctx, &flowv1.ListRackRuleAssociationsRequest{RackId: pbID(rack)})
	require.NoError(t, err)
	require.Empty(t, list.GetAssociations())

	for _, id := range []uuid.UUID{on1, fw} {
		_, err := b.client.AssociateRuleWithRack(ctx, &flowv1.AssociateRuleWithRackRequest{RackId: pbID(rack), RuleId: pbID(id)})
		require.NoError(t, err)
	}
	require.Equal(t, on1.String(), getAssoc(rack, power, "power_on"))
	require.Equal(t, fw.String(), getAssoc(rack, flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL, "upgrade"))
	require.Equal(t, "", getAssoc(rack, power, "power_off"))
	require.Equal(t, "", getAssoc(other, power, "power_on"))

	// Re-associating the same (rack, type, code) replaces the rule.
	_, err = b.client.AssociateRuleWithRack(ctx, &flowv1.AssociateRuleWithRackRequest{RackId: pbID(rack), RuleId: pbID(on2)})
	require.NoError(t, err)
	require.Equal(t, on2.String(), getAssoc(rack, power, "power_on"))

	list, err = b.grpc.ListRackRuleAssociations(ctx, &flowv1.ListRackRuleAssociationsRequest{RackId: pbID(rack)})
	require.NoError(t, err)
	require.Len(t, list.GetAssociations(), 2)
	fwA, onA := list.GetAssociations()[0], list.GetAssociations()[1] // firmware_control < power_control
	require.Equal(t, rack.String(), onA.GetRackId().GetId())
	require.Equal(t, power, onA.GetOperationType())
	require.Equal(t, "power_on", onA.GetOperationCode())
	require.Equal(t, on2.String(), onA.GetRuleId().GetId())
	require.True(t, onA.GetUpdatedAt().AsTime().After(onA.GetCreatedAt().AsTime()))
	require.Equal(t, "upgrade", fwA.GetOperationCode())
	require.Equal(t, fw.String(), fwA.GetRuleId().GetId())

	before := b.snapshot(t)
	for _, tt := range []struct {
		name string
		call func() error
		code connect.Code
		msg  string
	}{
		{"AssociateUnknownRack", func() error {
			_, err := b.client.AssociateRuleWithRack(ctx, &flowv1.AssociateRuleWithRackRequest{RackId: pbID(uuid.New()), RuleId: pbID(on1)})
			return err
		}, connect.CodeNotFound, "rack not found"},
		{"AssociateUnknownRule", func() error {
			_, err := b.client.AssociateRuleWithRack(ctx, &flowv1.AssociateRuleWithRackRequest{RackId: pbID(rack), RuleId: pbID(uuid.New())})
			return err
		}, connect.CodeNotFound, "operation rule not found"},
		{"AssociateBadRack", func() error {
			_, err := b.client.AssociateRuleWithRack(ctx, &flowv1.AssociateRuleWithRackRequest{RackId: &flowv1.UUID{Id: "rack-1"}, RuleId: pbID(on1)})
			return err
		}, connect.CodeInvalidArgument, `rack_id: invalid UUID "rack-1"`},
		{"AssociateNoRule", func() error {
			_, err := b.client.AssociateRuleWithRack(ctx, &flowv1.AssociateRuleWithRackRequest{RackId: pbID(rack)})
			return err
		}, connect.CodeInvalidArgument, "rule_id is required"},
		{"DisassociateMissing", func() error {
			_, err := b.client.DisassociateRuleFromRack(ctx, &flowv1.DisassociateRuleFromRackRequest{RackId: pbID(rack), OperationType: power, OperationCode: "power_off"})
			return err
		}, connect.CodeNotFound, "rack rule association not found"},
		{"DisassociateUnknownRack", func() error {
			_, err := b.client.DisassociateRuleFromRack(ctx, &flowv1.DisassociateRuleFromRackRequest{RackId: pbID(uuid.New()), OperationType: power, OperationCode: "power_on"})
			return err
		}, connect.CodeNotFound, "rack not found"},
		{"DisassociateBadCode", func() error {
			_, err := b.client.DisassociateRuleFromRack(ctx, &flowv1.DisassociateRuleFromRackRequest{RackId: pbID(rack), OperationType: power, OperationCode: "upgrade"})
			return err
		}, connect.CodeInvalidArgument, "operation_code: invalid operation code 'upgrade' for operation type 'power_control'"},
		{"DisassociateUnknownType", func() error {
			_, err := b.client.DisassociateRuleFromRack(ctx, &flowv1.DisassociateRuleFromRackRequest{RackId: pbID(rack), OperationCode: "power_on"})
			return err
		}, connect.CodeInvalidArgument, "operation_type: must be"},
		{"GetUnknownRack", func() error {
			_, err := b.client.GetRackRuleAssociation(ctx, &flowv1.GetRackRuleAssociationRequest{RackId: pbID(uuid.New()), OperationType: power, OperationCode: "power_on"})
			return err
		}, connect.CodeNotFound, "rack not found"},
		{"GetBadCode", func() error {
			_, err := b.client.GetRackRuleAssociation(ctx, &flowv1.GetRackRuleAssociationRequest{RackId: pbID(rack), OperationType: power, OperationCode: "bogus"})
			return err
		}, connect.CodeInvalidArgument, "operation_code: invalid operation code 'bogus'"},
		{"ListUnknownRack", func() error {
			_, err := b.client.ListRackRuleAssociations(ctx, &flowv1.ListRackRuleAssociationsRequest{RackId: pbID(uuid.New())})
			return err
		}, connect.CodeNotFound, "rack not found"},
		{"ListNoRack", func() error {
			_, err := b.client.ListRackRuleAssociations(ctx, &flowv1.ListRackRuleAssociationsRequest{})
			return err
		}, connect.CodeInvalidArgument, "rack_id is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opstest.RequireCode(t, tt.call(), tt.code, tt.msg)
			require.Equal(t, before, b.snapshot(t))
		})
	}

	_, err = b.client.DisassociateRuleFromRack(ctx, &flowv1.DisassociateRuleFromRackRequest{RackId: pbID(rack), OperationType: power, OperationCode: "power_on"})
	require.NoError(t, err)
	require.Equal(t, "", getAssoc(rack, power, "power_on"))
	require.Equal(t, fw.String(), getAssoc(rack, flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL, "upgrade"))
}

// TestCreateDefaultConcurrent races creations of a default for one (type,
// code): exactly one wins, the others get AlreadyExists and leave no row.
func TestCreateDefaultConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := b.client.CreateOperationRule(ctx, powerOnReq(fmt.Sprint("d", i), true))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	var ok int
	for err := range errs {
		if err == nil {
			ok++
			continue
		}
		opstest.RequireCode(t, err, connect.CodeAlreadyExists, "a default rule already exists for this operation type")
	}
	require.Equal(t, 1, ok)
	res, err := b.client.ListOperationRules(ctx, &flowv1.ListOperationRulesRequest{})
	require.NoError(t, err)
	require.Equal(t, int32(1), res.GetTotalCount())
}
