package eventrule_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule"
	"github.com/nicoflow/flow/operations/opstest"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// eventHandler serves the event-rule methods; everything else is
// unimplemented.
type eventHandler struct {
	unimplemented
	*eventrule.Handler
}

type eventBundle struct {
	pool   *pgxpool.Pool
	inv    *inventory.Service
	rules  *eventrule.Service
	url    string
	client flowv1connect.FlowClient // Connect protocol
	grpc   flowv1connect.FlowClient // gRPC over h2c
}

func setupEventRules(t *testing.T) *eventBundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	inv := inventory.NewService()
	rules := eventrule.NewService(eventrule.Config{Pool: pool, Inv: inv})
	srv := opstest.Serve(t, eventHandler{Handler: eventrule.NewHandler(pool, rules)})
	return &eventBundle{pool: pool, inv: inv, rules: rules, url: srv.URL, client: srv.Client, grpc: srv.GRPC}
}

// rack stores demo rack i and returns it with its components.
func (b *eventBundle) rack(t *testing.T, i int) inventory.Rack {
	t.Helper()
	r, err := b.inv.Rack(context.Background(), b.pool, opstest.AddRack(t, b.pool, b.inv, i).ID, true)
	require.NoError(t, err)
	return r
}

// snapshot dumps the event-rule tables, so a test can show a failed call
// changed nothing.
func (b *eventBundle) snapshot(t *testing.T) string {
	t.Helper()
	var out string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT
		coalesce((SELECT json_agg(r ORDER BY id)::text FROM event_rule r), '') || '|' ||
		coalesce((SELECT json_agg(b ORDER BY id)::text FROM event_rule_binding b), '')`).Scan(&out))
	return out
}

func noopAction(name string) *flowv1.EventRuleAction {
	return &flowv1.EventRuleAction{Name: name, Spec: &flowv1.EventRuleAction_Noop{Noop: &flowv1.EventRuleNoopAction{Reason: "test"}}}
}

func forceOffAction(name string) *flowv1.EventRuleAction {
	return &flowv1.EventRuleAction{Name: name, Spec: &flowv1.EventRuleAction_SubmitTask{SubmitTask: &flowv1.EventRuleSubmitTaskAction{
		TargetStrategy:   flowv1.EventRuleTargetStrategy_EVENT_RULE_TARGET_STRATEGY_AFFECTED_COMPONENTS,
		ConflictStrategy: flowv1.EventRuleConflictStrategy_EVENT_RULE_CONFLICT_STRATEGY_QUEUE,
		Operation: &flowv1.TaskOperation{Operation: &flowv1.TaskOperation_PowerControl{PowerControl: &flowv1.PowerControlTaskOperation{
			Operation: flowv1.PowerControlOperation_POWER_CONTROL_OPERATION_FORCE_POWER_OFF,
		}}},
	}}}
}

func leakRule(name string, actions ...*flowv1.EventRuleAction) *flowv1.CreateEventRuleRequest {
	return &flowv1.CreateEventRuleRequest{Name: name, EventType: eventrule.EventTypeLeakDetected, Actions: actions}
}

func (b *eventBundle) create(t *testing.T, req *flowv1.CreateEventRuleRequest) *flowv1.EventRule {
	t.Helper()
	r, err := b.client.CreateEventRule(context.Background(), req)
	require.NoError(t, err)
	return r
}

func (b *eventBundle) enable(t *testing.T, r *flowv1.EventRule) {
	t.Helper()
	_, err := b.client.EnableEventRule(context.Background(), &flowv1.EnableEventRuleRequest{RuleId: r.GetId()})
	require.NoError(t, err)
}

func (b *eventBundle) bind(t *testing.T, r *flowv1.EventRule, scope *flowv1.EventRuleScope) *flowv1.EventRuleBinding {
	t.Helper()
	res, err := b.client.CreateEventRuleBinding(context.Background(), &flowv1.CreateEventRuleBindingRequest{RuleId: r.GetId(), Scope: scope})
	require.NoError(t, err)
	return res
}

func siteScope() *flowv1.EventRuleScope {
	return &flowv1.EventRuleScope{Type: flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_SITE}
}

func rackScope(id uuid.UUID) *flowv1.EventRuleScope {
	return &flowv1.EventRuleScope{Type: flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_RACK, Id: pbID(id)}
}

// requireCode checks err's code and that its message names want.
func requireEventCode(t *testing.T, err error, code connect.Code, want string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, connect.CodeOf(err), err.Error())
	require.Contains(t, err.Error(), want)
}

func TestEventRuleCreateAndGet(t *testing.T) {
	t.Parallel()
	b := setupEventRules(t)
	ctx := context.Background()
	for _, c := range []flowv1connect.FlowClient{b.client, b.grpc} {
		created, err := c.CreateEventRule(ctx, &flowv1.CreateEventRuleRequest{
			Name: "  quiet leak  ", Description: "d", EventType: eventrule.EventTypeLeakDetected,
			Actions: []*flowv1.EventRuleAction{noopAction("log_only"), forceOffAction("power_off")},
		})
		require.NoError(t, err)
		require.False(t, created.GetEnabled(), "created rules start disabled")
		require.False(t, created.GetReadOnly())
		require.Equal(t, "quiet leak", created.GetName(), "the name is trimmed")
		require.NotNil(t, created.GetCreatedAt())
		got, err := c.GetEventRule(ctx, &flowv1.GetEventRuleRequest{RuleId: created.GetId()})
		require.NoError(t, err)
		require.Equal(t, created.String(), got.String())
		require.Len(t, got.GetActions(), 2)
		st := got.GetActions()[1].GetSubmitTask()
		require.Equal(t, flowv1.PowerControlOperation_POWER_CONTROL_OPERATION_FORCE_POWER_OFF, st.GetOperation().GetPowerControl().GetOperation())
		require.Equal(t, flowv1.EventRuleTargetStrategy_EVENT_RULE_TARGET_STRATEGY_AFFECTED_COMPONENTS, st.GetTargetStrategy())
	}

	builtIn, err := b.client.GetEventRule(ctx, &flowv1.GetEventRuleRequest{RuleId: pbID(eventrule.BuiltInLeakRuleID)})
	require.NoError(t, err)
	require.Equal(t, "f34b87f7-cb1b-4b08-aa51-30c0b3b58680", builtIn.GetId().GetId())
	require.True(t, builtIn.GetReadOnly())
	require.True(t, builtIn.GetEnabled())
	require.Equal(t, "Leakage response", builtIn.GetDescription())
	require.Len(t, builtIn.GetActions(), 1)
	a := builtIn.GetActions()[0]
	require.Equal(t, "power_off_affected_components", a.GetName())
	require.Equal(t, flowv1.PowerControlOperation_POWER_CONTROL_OPERATION_FORCE_POWER_OFF, a.GetSubmitTask().GetOperation().GetPowerControl().GetOperation())
	require.Equal(t, flowv1.EventRuleTargetStrategy_EVENT_RULE_TARGET_STRATEGY_AFFECTED_COMPONENTS, a.GetSubmitTask().GetTargetStrategy())
	require.Equal(t, flowv1.EventRuleConflictStrategy_EVENT_RULE_CONFLICT_STRATEGY_QUEUE, a.GetSubmitTask().GetConflictStrategy())

	_, err = b.client.GetEventRule(ctx, &flowv1.GetEventRuleRequest{RuleId: pbID(uuid.New())})
	requireEventCode(t, err, connect.CodeNotFound, "event rule not found")
	_, err = b.client.GetEventRule(ctx, &flowv1.GetEventRuleRequest{})
	requireEventCode(t, err, connect.CodeInvalidArgument, "rule_id")
	_, err = b.client.GetEventRule(ctx, &flowv1.GetEventRuleRequest{RuleId: &flowv1.UUID{Id: "nope"}})
	requireEventCode(t, err, connect.CodeInvalidArgument, "rule_id")
}

// withUnknown returns a submit_task action carrying a field of the
// reserved, untyped form (number num), as an old client would send it.
func withUnknown(num protowire.Number) *flowv1.EventRuleAction {
	a := forceOffAction("legacy")
	st := a.GetSubmitTask()
	raw := protowire.AppendTag(nil, num, protowire.BytesType)
	raw = protowire.AppendString(raw, `{"target_spec":{"racks":["r1"]}}`)
	st.ProtoReflect().SetUnknown(raw)
	return a
}

func TestEventRuleCreateErrors(t *testing.T) {
	t.Parallel()
	b := setupEventRules(t)
	ctx := context.Background()
	submit := func(mut func(*flowv1.EventRuleSubmitTaskAction)) *flowv1.EventRuleAction {
		a := forceOffAction("act")
		mut(a.GetSubmitTask())
		return a
	}
	long := strings.Repeat("x", 129)
	for _, tt := range []struct {
		name string
		req  *flowv1.CreateEventRuleRequest
		code connect.Code
		want string
	}{
		{"NoEventType", &flowv1.CreateEventRuleRequest{Name: "r", Actions: []*flowv1.EventRuleAction{noopAction("a")}}, connect.CodeInvalidArgument, "event_type: is required"},
		{"MalformedEventTypeUpper", &flowv1.CreateEventRuleRequest{Name: "r", EventType: "Hardware.Leak", Actions: []*flowv1.EventRuleAction{noopAction("a")}}, connect.CodeInvalidArgument, "event_type: \"Hardware.Leak\" is not a valid event type"},
		{"MalformedEventTypeDots", &flowv1.CreateEventRuleRequest{Name: "r", EventType: "hardware..leak", Actions: []*flowv1.EventRuleAction{noopAction("a")}}, connect.CodeInvalidArgument, "is not a valid event type"},
		{"UnsupportedEventType", &flowv1.CreateEventRuleRequest{Name: "r", EventType: "hardware.fan.failed", Actions: []*flowv1.EventRuleAction{noopAction("a")}}, connect.CodeInvalidArgument, "event_type: unsupported event type \"hardware.fan.failed\""},
		{"EmptyName", leakRule("   ", noopAction("a")), connect.CodeInvalidArgument, "name: is required"},
		{"LongName", leakRule(long, noopAction("a")), connect.CodeInvalidArgument, "name: must be at most 128 bytes"},
		{"NoActions", leakRule("r"), connect.CodeInvalidArgument, "actions: at least one action is required"},
		{"EmptyActionName", leakRule("r", noopAction("")), connect.CodeInvalidArgument, "actions[0].name: is required"},
		{"BadActionName", leakRule("r", noopAction("Power-Off")), connect.CodeInvalidArgument, "actions[0].name: \"Power-Off\" must be a lower-snake identifier"},
		{"DuplicateActionName", leakRule("r", noopAction("a"), noopAction("b"), noopAction("a")), connect.CodeInvalidArgument, "actions[2].name: duplicate action name \"a\" (also actions[0])"},
		{"NoSpec", leakRule("r", &flowv1.EventRuleAction{Name: "a"}), connect.CodeInvalidArgument, "actions[0]: exactly one of submit_task, send_alert and noop is required, got 0"},
		{"NoOperation", leakRule("r", submit(func(s *flowv1.EventRuleSubmitTaskAction) { s.Operation = nil })), connect.CodeInvalidArgument, "actions[0].submit_task.operation: exactly one of power_control and firmware_control is required"},
		{"UnspecifiedPowerOperation", leakRule("r", submit(func(s *flowv1.EventRuleSubmitTaskAction) {
			s.GetOperation().GetPowerControl().Operation = flowv1.PowerControlOperation_POWER_CONTROL_OPERATION_UNSPECIFIED
		})), connect.CodeInvalidArgument, "actions[0].submit_task.operation.power_control.operation"},
		{"UnspecifiedFirmwareOperation", leakRule("r", submit(func(s *flowv1.EventRuleSubmitTaskAction) {
			s.Operation = &flowv1.TaskOperation{Operation: &flowv1.TaskOperation_FirmwareControl{FirmwareControl: &flowv1.FirmwareControlTaskOperation{}}}
		})), connect.CodeInvalidArgument, "actions[0].submit_task.operation.firmware_control.operation"},
		{"UnspecifiedTargetStrategy", leakRule("r", submit(func(s *flowv1.EventRuleSubmitTaskAction) {
			s.TargetStrategy = flowv1.EventRuleTargetStrategy_EVENT_RULE_TARGET_STRATEGY_UNSPECIFIED
		})), connect.CodeInvalidArgument, "actions[0].submit_task.target_strategy"},
		{"UnspecifiedConflictStrategy", leakRule("r", submit(func(s *flowv1.EventRuleSubmitTaskAction) {
			s.ConflictStrategy = flowv1.EventRuleConflictStrategy_EVENT_RULE_CONFLICT_STRATEGY_UNSPECIFIED
		})), connect.CodeInvalidArgument, "actions[0].submit_task.conflict_strategy"},
		{"EmbeddedTargets", leakRule("r", withUnknown(3)), connect.CodeInvalidArgument, "actions[0].submit_task.operation_payload_json: is no longer accepted: targets must not be embedded"},
		{"EmbeddedOperationType", leakRule("r", withUnknown(1)), connect.CodeInvalidArgument, "actions[0].submit_task.operation_type"},
		{"SendAlertWithoutSender", leakRule("r", &flowv1.EventRuleAction{Name: "page", Spec: &flowv1.EventRuleAction_SendAlert{SendAlert: &flowv1.EventRuleSendAlertAction{
			Severity: flowv1.EventRuleSeverity_EVENT_RULE_SEVERITY_CRITICAL, Message: "leak"}}}), connect.CodeInvalidArgument, "actions[0].send_alert: no alert sender is configured"},
		{"UnspecifiedSeverity", leakRule("r", &flowv1.EventRuleAction{Name: "a", Condition: &flowv1.EventRuleActionCondition{
			Severities: []flowv1.EventRuleSeverity{flowv1.EventRuleSeverity_EVENT_RULE_SEVERITY_UNSPECIFIED}}, Spec: &flowv1.EventRuleAction_Noop{Noop: &flowv1.EventRuleNoopAction{}}}),
			connect.CodeInvalidArgument, "actions[0].condition.severities[0]"},
		{"UnknownComponentType", leakRule("r", &flowv1.EventRuleAction{Name: "a", Condition: &flowv1.EventRuleActionCondition{
			ComponentTypes: []flowv1.ComponentType{flowv1.ComponentType_COMPONENT_TYPE_UNKNOWN}}, Spec: &flowv1.EventRuleAction_Noop{Noop: &flowv1.EventRuleNoopAction{}}}),
			connect.CodeInvalidArgument, "actions[0].condition.component_types[0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := b.snapshot(t)
			_, err := b.grpc.CreateEventRule(ctx, tt.req)
			requireEventCode(t, err, tt.code, tt.want)
			require.Equal(t, before, b.snapshot(t), "nothing written")
		})
	}

	t.Run("TwoSpecs", func(t *testing.T) {
		// Only the JSON form can carry two members of the spec oneof.
		before := b.snapshot(t)
		body := `{"name":"r","eventType":"hardware.leak.detected","actions":[{"name":"a","noop":{},"submitTask":{"targetStrategy":"EVENT_RULE_TARGET_STRATEGY_RACK"}}]}`
		res, err := http.Post(b.url+flowv1connect.FlowCreateEventRuleProcedure, "application/json", bytes.NewReader([]byte(body)))
		require.NoError(t, err)
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, string(out))
		require.Contains(t, string(out), "invalid_argument")
		require.Contains(t, string(out), "submitTask")
		require.Equal(t, before, b.snapshot(t))
	})
}

func TestEventRuleList(t *testing.T) {
	t.Parallel()
	b := setupEventRules(t)
	ctx := context.Background()
	var ids []string
	for _, n := range []string{"a", "b", "c"} {
		ids = append(ids, b.create(t, leakRule(n, noopAction("x"))).GetId().GetId())
	}
	slices.Sort(ids)
	b.enable(t, &flowv1.EventRule{Id: &flowv1.UUID{Id: ids[1]}})
	builtIn := eventrule.BuiltInLeakRuleID.String()
	ptr := func(v bool) *bool { return &v }
	leak := eventrule.EventTypeLeakDetected
	for _, tt := range []struct {
		name      string
		req       *flowv1.ListEventRulesRequest
		want      []string
		wantTotal int64
	}{
		{"All", &flowv1.ListEventRulesRequest{}, append(slices.Clone(ids), builtIn), 4},
		{"ByType", &flowv1.ListEventRulesRequest{EventType: &leak}, append(slices.Clone(ids), builtIn), 4},
		{"Enabled", &flowv1.ListEventRulesRequest{Enabled: ptr(true)}, []string{ids[1], builtIn}, 2},
		{"Disabled", &flowv1.ListEventRulesRequest{Enabled: ptr(false)}, []string{ids[0], ids[2]}, 2},
		{"FirstPage", &flowv1.ListEventRulesRequest{Pagination: &flowv1.Pagination{Offset: 0, Limit: 2}}, ids[:2], 4},
		{"AcrossBuiltIns", &flowv1.ListEventRulesRequest{Pagination: &flowv1.Pagination{Offset: 2, Limit: 2}}, []string{ids[2], builtIn}, 4},
		{"BuiltInsOnly", &flowv1.ListEventRulesRequest{Pagination: &flowv1.Pagination{Offset: 3, Limit: 5}}, []string{builtIn}, 4},
		{"PastTheEnd", &flowv1.ListEventRulesRequest{Pagination: &flowv1.Pagination{Offset: 9, Limit: 5}}, nil, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := b.client.ListEventRules(ctx, tt.req)
			require.NoError(t, err)
			var got []string
			for _, r := range res.GetRules() {
				got = append(got, r.GetId().GetId())
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.wantTotal, res.GetTotal())
		})
	}
	unsupported, malformed := "hardware.fan.failed", "Leak"
	for _, tt := range []struct {
		name string
		req  *flowv1.ListEventRulesRequest
		want string
	}{
		{"UnsupportedType", &flowv1.ListEventRulesRequest{EventType: &unsupported}, "event_type: unsupported event type"},
		{"MalformedType", &flowv1.ListEventRulesRequest{EventType: &malformed}, "event_type: \"Leak\" is not a valid event type"},
		{"NegativeOffset", &flowv1.ListEventRulesRequest{Pagination: &flowv1.Pagination{Offset: -1, Limit: 1}}, "pagination.offset"},
		{"ZeroLimit", &flowv1.ListEventRulesRequest{Pagination: &flowv1.Pagination{}}, "pagination.limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.ListEventRules(ctx, tt.req)
			requireEventCode(t, err, connect.CodeInvalidArgument, tt.want)
		})
	}
}

func TestEventRuleUpdateEnableDisableDelete(t *testing.T) {
	t.Parallel()
	b := setupEventRules(t)
	ctx := context.Background()
	r := b.create(t, leakRule("r", noopAction("x")))

	got, err := b.client.UpdateEventRule(ctx, &flowv1.UpdateEventRuleRequest{RuleId: r.GetId(), Update: &flowv1.UpdateEventRuleRequest_Metadata{
		Metadata: &flowv1.EventRuleMetadataUpdate{Name: "renamed"}}})
	require.NoError(t, err)
	require.Equal(t, "renamed", got.GetName())
	require.Empty(t, got.GetDescription(), "metadata replaces name and description together")
	require.Len(t, got.GetActions(), 1, "actions kept")

	got, err = b.client.UpdateEventRule(ctx, &flowv1.UpdateEventRuleRequest{RuleId: r.GetId(), Update: &flowv1.UpdateEventRuleRequest_Actions{
		Actions: &flowv1.EventRuleActionsUpdate{Actions: []*flowv1.EventRuleAction{forceOffAction("off"), noopAction("y")}}}})
	require.NoError(t, err)
	require.Equal(t, "renamed", got.GetName())
	require.Equal(t, []string{"off", "y"}, []string{got.GetActions()[0].GetName(), got.GetActions()[1].GetName()})

	got, err = b.client.EnableEventRule(ctx, &flowv1.EnableEventRuleRequest{RuleId: r.GetId()})
	require.NoError(t, err)
	require.True(t, got.GetEnabled())
	got, err = b.client.DisableEventRule(ctx, &flowv1.DisableEventRuleRequest{RuleId: r.GetId()})
	require.NoError(t, err)
	require.False(t, got.GetEnabled())

	builtIn := pbID(eventrule.BuiltInLeakRuleID)
	missing := pbID(uuid.New())
	meta := &flowv1.UpdateEventRuleRequest_Metadata{Metadata: &flowv1.EventRuleMetadataUpdate{Name: "n"}}
	for _, tt := range []struct {
		name string
		call func() error
		code connect.Code
		want string
	}{
		{"UpdateNeither", func() error {
			_, err := b.client.UpdateEventRule(ctx, &flowv1.UpdateEventRuleRequest{RuleId: r.GetId()})
			return err
		}, connect.CodeInvalidArgument, "update: exactly one of metadata and actions"},
		{"UpdateEmptyName", func() error {
			_, err := b.client.UpdateEventRule(ctx, &flowv1.UpdateEventRuleRequest{RuleId: r.GetId(), Update: &flowv1.UpdateEventRuleRequest_Metadata{Metadata: &flowv1.EventRuleMetadataUpdate{Name: " "}}})
			return err
		}, connect.CodeInvalidArgument, "metadata.name: is required"},
		{"UpdateNoActions", func() error {
			_, err := b.client.UpdateEventRule(ctx, &flowv1.UpdateEventRuleRequest{RuleId: r.GetId(), Update: &flowv1.UpdateEventRuleRequest_Actions{Actions: &flowv1.EventRuleActionsUpdate{}}})
			return err
		}, connect.CodeInvalidArgument, "actions.actions: at least one action"},
		{"UpdateDuplicateActions", func() error {
			_, err := b.client.UpdateEventRule(ctx, &flowv1.UpdateEventRuleRequest{RuleId: r.GetId(), Update: &flowv1.UpdateEventRuleRequest_Actions{
				Actions: &flowv1.EventRuleActionsUpdate{Actions: []*flowv1.EventRuleAction{noopAction("a"), noopAction("a")}}}})
			return err
		}, connect.CodeInvalidArgument, "actions.actions[1].name: duplicate action name"},
		{"UpdateBuiltIn", func() error {
			_, err := b.client.UpdateEventRule(ctx, &flowv1.UpdateEventRuleRequest{RuleId: builtIn, Update: meta})
			return err
		}, connect.CodeFailedPrecondition, "built-in event rules are read-only"},
		{"UpdateMissing", func() error {
			_, err := b.client.UpdateEventRule(ctx, &flowv1.UpdateEventRuleRequest{RuleId: missing, Update: meta})
			return err
		}, connect.CodeNotFound, "event rule not found"},
		{"EnableBuiltIn", func() error {
			_, err := b.client.EnableEventRule(ctx, &flowv1.EnableEventRuleRequest{RuleId: builtIn})
			return err
		}, connect.CodeFailedPrecondition, "read-only"},
		{"DisableBuiltIn", func() error {
			_, err := b.client.DisableEventRule(ctx, &flowv1.DisableEventRuleRequest{RuleId: builtIn})
			return err
		}, connect.CodeFailedPrecondition, "read-only"},
		{"EnableMissing", func() error {
			_, err := b.client.EnableEventRule(ctx, &flowv1.EnableEventRuleRequest{RuleId: missing})
			return err
		}, connect.CodeNotFound, "event rule not found"},
		{"DisableNoID", func() error {
			_, err := b.client.DisableEventRule(ctx, &flowv1.DisableEventRuleRequest{})
			return err
		}, connect.CodeInvalidArgument, "rule_id is required"},
		{"DeleteBuiltIn", func() error {
			_, err := b.client.DeleteEventRule(ctx, &flowv1.DeleteEventRuleRequest{RuleId: builtIn})
			return err
		}, connect.CodeFailedPrecondition, "read-only"},
		{"DeleteMissing", func() error {
			_, err := b.client.DeleteEventRule(ctx, &flowv1.DeleteEventRuleRequest{RuleId: missing})
			return err
		}, connect.CodeNotFound, "event rule not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := b.snapshot(t)
			requireEventCode(t, tt.call(), tt.code, tt.want)
			require.Equal(t, before, b.snapshot(t), "nothing written")
		})
	}

	// Delete takes the rule's bindings with it.
	rack := b.rack(t, 1)
	b.bind(t, r, rackScope(rack.ID))
	_, err = b.client.DeleteEventRule(ctx, &flowv1.DeleteEventRuleRequest{RuleId: r.GetId()})
	require.NoError(t, err)
	_, err = b.client.GetEventRule(ctx, &flowv1.GetEventRuleRequest{RuleId: r.GetId()})
	requireEventCode(t, err, connect.CodeNotFound, "event rule not found")
	_, err = b.client.GetEventRuleBinding(ctx, &flowv1.GetEventRuleBindingRequest{EventType: eventrule.EventTypeLeakDetected, Scope: rackScope(rack.ID)})
	requireEventCode(t, err, connect.CodeNotFound, "event rule binding not found")
	require.Equal(t, "|", b.snapshot(t), "no rule or binding left")
}

func TestEventRuleEnableRevalidates(t *testing.T) {
	t.Parallel()
	b := setupEventRules(t)
	ctx := context.Background()
	// A server with an alert sender stored a send_alert rule; this one has
	// none, so enabling the stored rule fails and it stays disabled.
	withAlerts := eventrule.NewService(eventrule.Config{Pool: b.pool, Inv: b.inv, AlertSender: true})
	var r eventrule.Rule
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		r, err = withAlerts.Create(ctx, tx, eventrule.RuleInput{Name: "page", EventType: eventrule.EventTypeLeakDetected,
			Actions: []eventrule.Action{{Name: "page", SendAlert: &eventrule.SendAlertSpec{Severity: eventrule.SeverityCritical}}}})
		return err
	}))
	_, err := b.client.EnableEventRule(ctx, &flowv1.EnableEventRuleRequest{RuleId: pbID(r.ID)})
	requireEventCode(t, err, connect.CodeInvalidArgument, "actions[0].send_alert: no alert sender is configured")
	got, err := b.client.GetEventRule(ctx, &flowv1.GetEventRuleRequest{RuleId: pbID(r.ID)})
	require.NoError(t, err)
	require.False(t, got.GetEnabled())
}

func TestEventRuleBindings(t *testing.T) {
	t.Parallel()
	b := setupEventRules(t)
	ctx := context.Background()
	rack1, rack2 := b.rack(t, 1), b.rack(t, 2)
	site := b.create(t, leakRule("site", noopAction("x")))
	perRack := b.create(t, leakRule("rack", noopAction("x")))
	other := b.create(t, leakRule("other", noopAction("x")))

	sb := b.bind(t, site, siteScope())
	require.Equal(t, site.GetId().GetId(), sb.GetRuleId().GetId())
	require.Equal(t, eventrule.EventTypeLeakDetected, sb.GetEventType(), "the event type comes from the rule")
	require.Equal(t, flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_SITE, sb.GetScope().GetType())
	rb := b.bind(t, perRack, rackScope(rack1.ID))
	b.bind(t, perRack, rackScope(rack2.ID))

	got, err := b.grpc.GetEventRuleBinding(ctx, &flowv1.GetEventRuleBindingRequest{EventType: eventrule.EventTypeLeakDetected, Scope: rackScope(rack1.ID)})
	require.NoError(t, err)
	require.Equal(t, rb.String(), got.String())
	got, err = b.client.GetEventRuleBinding(ctx, &flowv1.GetEventRuleBindingRequest{EventType: eventrule.EventTypeLeakDetected, Scope: siteScope()})
	require.NoError(t, err)
	require.Equal(t, sb.GetId().GetId(), got.GetId().GetId())

	leak := eventrule.EventTypeLeakDetected
	for _, tt := range []struct {
		name string
		call func() error
		code connect.Code
		want string
	}{
		{"BindBuiltIn", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: pbID(eventrule.BuiltInLeakRuleID), Scope: siteScope()})
			return err
		}, connect.CodeFailedPrecondition, "built-in event rules are read-only"},
		{"BindMissingRule", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: pbID(uuid.New()), Scope: siteScope()})
			return err
		}, connect.CodeNotFound, "event rule not found"},
		{"BindMissingRack", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: other.GetId(), Scope: rackScope(uuid.New())})
			return err
		}, connect.CodeNotFound, "scope.id: rack"},
		{"SiteAndRackForOneRule", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: perRack.GetId(), Scope: siteScope()})
			return err
		}, connect.CodeFailedPrecondition, "already bound at rack scope"},
		{"RackAndSiteForOneRule", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: site.GetId(), Scope: rackScope(rack1.ID)})
			return err
		}, connect.CodeFailedPrecondition, "already bound at site scope"},
		{"OccupiedSiteSlot", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: other.GetId(), Scope: siteScope()})
			return err
		}, connect.CodeFailedPrecondition, "the site slot of hardware.leak.detected is taken by rule " + site.GetId().GetId()},
		{"OccupiedRackSlot", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: other.GetId(), Scope: rackScope(rack1.ID)})
			return err
		}, connect.CodeFailedPrecondition, "is taken by rule " + perRack.GetId().GetId()},
		{"SameSlotTwice", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: perRack.GetId(), Scope: rackScope(rack1.ID)})
			return err
		}, connect.CodeFailedPrecondition, "is taken"},
		{"NoScope", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: other.GetId()})
			return err
		}, connect.CodeInvalidArgument, "scope: is required"},
		{"UnspecifiedScopeType", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: other.GetId(), Scope: &flowv1.EventRuleScope{}})
			return err
		}, connect.CodeInvalidArgument, "scope.type: must be SITE or RACK"},
		{"RackScopeWithoutID", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: other.GetId(), Scope: &flowv1.EventRuleScope{Type: flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_RACK}})
			return err
		}, connect.CodeInvalidArgument, "scope.id is required"},
		{"SiteScopeWithID", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: other.GetId(), Scope: &flowv1.EventRuleScope{Type: flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_SITE, Id: pbID(rack1.ID)}})
			return err
		}, connect.CodeInvalidArgument, "scope.id: must be empty for a SITE scope"},
		{"BindNoRuleID", func() error {
			_, err := b.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{Scope: siteScope()})
			return err
		}, connect.CodeInvalidArgument, "rule_id is required"},
		{"GetEmptySlot", func() error {
			_, err := b.client.GetEventRuleBinding(ctx, &flowv1.GetEventRuleBindingRequest{EventType: leak, Scope: rackScope(uuid.New())})
			return err
		}, connect.CodeNotFound, "event rule binding not found"},
		{"GetUnsupportedType", func() error {
			_, err := b.client.GetEventRuleBinding(ctx, &flowv1.GetEventRuleBindingRequest{EventType: "hardware.fan.failed", Scope: siteScope()})
			return err
		}, connect.CodeInvalidArgument, "event_type: unsupported event type"},
		{"GetNoScope", func() error {
			_, err := b.client.GetEventRuleBinding(ctx, &flowv1.GetEventRuleBindingRequest{EventType: leak})
			return err
		}, connect.CodeInvalidArgument, "scope: is required"},
		{"DeleteEmptySlot", func() error {
			_, err := b.client.DeleteEventRuleBinding(ctx, &flowv1.DeleteEventRuleBindingRequest{EventType: leak, Scope: rackScope(uuid.New())})
			return err
		}, connect.CodeNotFound, "event rule binding not found"},
		{"DeleteMalformedType", func() error {
			_, err := b.client.DeleteEventRuleBinding(ctx, &flowv1.DeleteEventRuleBindingRequest{EventType: "leak!", Scope: siteScope()})
			return err
		}, connect.CodeInvalidArgument, "event_type: \"leak!\" is not a valid event type"},
		{"DeleteNoEventType", func() error {
			_, err := b.client.DeleteEventRuleBinding(ctx, &flowv1.DeleteEventRuleBindingRequest{Scope: siteScope()})
			return err
		}, connect.CodeInvalidArgument, "event_type: is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := b.snapshot(t)
			requireEventCode(t, tt.call(), tt.code, tt.want)
			require.Equal(t, before, b.snapshot(t), "nothing written")
		})
	}

	// Unbinding clears exactly the slot named.
	_, err = b.client.DeleteEventRuleBinding(ctx, &flowv1.DeleteEventRuleBindingRequest{EventType: leak, Scope: rackScope(rack1.ID)})
	require.NoError(t, err)
	_, err = b.client.GetEventRuleBinding(ctx, &flowv1.GetEventRuleBindingRequest{EventType: leak, Scope: rackScope(rack1.ID)})
	requireEventCode(t, err, connect.CodeNotFound, "binding not found")
	_, err = b.client.GetEventRuleBinding(ctx, &flowv1.GetEventRuleBindingRequest{EventType: leak, Scope: rackScope(rack2.ID)})
	require.NoError(t, err, "the other rack's binding stays")
	// The freed slot takes another rule.
	b.bind(t, other, rackScope(rack1.ID))
}

func TestEffectiveEventRule(t *testing.T) {
	t.Parallel()
	b := setupEventRules(t)
	ctx := context.Background()
	rack1, rack2 := b.rack(t, 1), b.rack(t, 2)
	builtIn := eventrule.BuiltInLeakRuleID.String()
	site := b.create(t, leakRule("site", noopAction("x")))
	perRack := b.create(t, leakRule("rack", noopAction("x")))
	effective := func(t *testing.T, req *flowv1.GetEffectiveEventRuleRequest) string {
		t.Helper()
		r, err := b.client.GetEffectiveEventRule(ctx, req)
		require.NoError(t, err)
		return r.GetId().GetId()
	}
	atRack := func(id uuid.UUID) *flowv1.GetEffectiveEventRuleRequest {
		return &flowv1.GetEffectiveEventRuleRequest{EventType: eventrule.EventTypeLeakDetected, Target: &flowv1.GetEffectiveEventRuleRequest_RackId{RackId: pbID(id)}}
	}
	atComponent := func(id uuid.UUID) *flowv1.GetEffectiveEventRuleRequest {
		return &flowv1.GetEffectiveEventRuleRequest{EventType: eventrule.EventTypeLeakDetected, Target: &flowv1.GetEffectiveEventRuleRequest_ComponentId{ComponentId: pbID(id)}}
	}
	comp1 := rack1.Components[0].ID

	// Each step changes the bindings or enablement, then checks both racks
	// and a component of rack 1 (which resolves as its rack).
	for _, step := range []struct {
		name         string
		do           func(t *testing.T)
		rack1, rack2 string
	}{
		{"NothingBound", func(*testing.T) {}, builtIn, builtIn},
		{"SiteBoundDisabled", func(t *testing.T) { b.bind(t, site, siteScope()) }, builtIn, builtIn},
		{"SiteEnabled", func(t *testing.T) { b.enable(t, site) }, site.GetId().GetId(), site.GetId().GetId()},
		{"RackBoundDisabled", func(t *testing.T) { b.bind(t, perRack, rackScope(rack1.ID)) }, site.GetId().GetId(), site.GetId().GetId()},
		{"RackEnabled", func(t *testing.T) { b.enable(t, perRack) }, perRack.GetId().GetId(), site.GetId().GetId()},
		{"SiteDisabled", func(t *testing.T) {
			_, err := b.client.DisableEventRule(ctx, &flowv1.DisableEventRuleRequest{RuleId: site.GetId()})
			require.NoError(t, err)
		}, perRack.GetId().GetId(), builtIn},
		{"RackUnbound", func(t *testing.T) {
			_, err := b.client.DeleteEventRuleBinding(ctx, &flowv1.DeleteEventRuleBindingRequest{EventType: eventrule.EventTypeLeakDetected, Scope: rackScope(rack1.ID)})
			require.NoError(t, err)
		}, builtIn, builtIn},
	} {
		t.Run(step.name, func(t *testing.T) {
			step.do(t)
			require.Equal(t, step.rack1, effective(t, atRack(rack1.ID)), "rack 1")
			require.Equal(t, step.rack1, effective(t, atComponent(comp1)), "component of rack 1")
			require.Equal(t, step.rack2, effective(t, atRack(rack2.ID)), "rack 2")
		})
	}

	for _, tt := range []struct {
		name string
		req  *flowv1.GetEffectiveEventRuleRequest
		code connect.Code
		want string
	}{
		{"UnknownRack", atRack(uuid.New()), connect.CodeNotFound, "rack_id: rack"},
		{"UnknownComponent", atComponent(uuid.New()), connect.CodeNotFound, "component_id: component"},
		{"NoTarget", &flowv1.GetEffectiveEventRuleRequest{EventType: eventrule.EventTypeLeakDetected}, connect.CodeInvalidArgument, "target: exactly one of rack_id and component_id"},
		{"BadRackID", &flowv1.GetEffectiveEventRuleRequest{EventType: eventrule.EventTypeLeakDetected, Target: &flowv1.GetEffectiveEventRuleRequest_RackId{RackId: &flowv1.UUID{Id: "x"}}}, connect.CodeInvalidArgument, "rack_id: invalid UUID"},
		{"NoEventType", &flowv1.GetEffectiveEventRuleRequest{Target: atRack(rack1.ID).Target}, connect.CodeInvalidArgument, "event_type: is required"},
		{"UnsupportedEventType", &flowv1.GetEffectiveEventRuleRequest{EventType: "hardware.fan.failed", Target: atRack(rack1.ID).Target}, connect.CodeInvalidArgument, "unsupported event type"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.GetEffectiveEventRule(ctx, tt.req)
			requireEventCode(t, err, tt.code, tt.want)
		})
	}
}

func TestEventConditionApplies(t *testing.T) {
	t.Parallel()
	crit, warn := eventrule.SeverityCritical, eventrule.SeverityWarning
	compute, sw := operations.ComponentTypeCompute, operations.ComponentTypeNVSwitch
	for _, tt := range []struct {
		name string
		cond eventrule.Condition
		sev  eventrule.Severity
		ct   operations.ComponentType
		want bool
	}{
		{"EmptyMatchesAll", eventrule.Condition{}, crit, compute, true},
		{"EmptyMatchesRackEvent", eventrule.Condition{}, crit, "", true},
		{"SeverityListed", eventrule.Condition{Severities: []eventrule.Severity{warn, crit}}, crit, compute, true},
		{"SeverityNotListed", eventrule.Condition{Severities: []eventrule.Severity{warn}}, crit, compute, false},
		{"TypeListed", eventrule.Condition{ComponentTypes: []operations.ComponentType{sw, compute}}, crit, compute, true},
		{"TypeNotListed", eventrule.Condition{ComponentTypes: []operations.ComponentType{sw}}, crit, compute, false},
		{"TypeNeverMatchesRackEvent", eventrule.Condition{ComponentTypes: []operations.ComponentType{compute}}, crit, "", false},
		{"BothMustMatch", eventrule.Condition{Severities: []eventrule.Severity{crit}, ComponentTypes: []operations.ComponentType{sw}}, crit, compute, false},
		{"BothMatch", eventrule.Condition{Severities: []eventrule.Severity{crit}, ComponentTypes: []operations.ComponentType{compute}}, crit, compute, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.cond.Applies(tt.sev, tt.ct))
		})
	}
}
