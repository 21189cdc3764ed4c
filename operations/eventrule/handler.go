package eventrule

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Handler implements the event-rule and binding methods of
// v1.Flow (spec/orchestration.md §4.7). app embeds it in the one Flow
// handler.
type Handler struct {
	pool  *pgxpool.Pool
	rules *Service
}

// NewHandler returns an Handler serving rules over pool.
func NewHandler(pool *pgxpool.Pool, rules *Service) *Handler {
	return &Handler{pool: pool, rules: rules}
}

// CreateEventRule creates a persisted rule; it always starts disabled.
func (h *Handler) CreateEventRule(ctx context.Context, req *flowv1.CreateEventRuleRequest) (*flowv1.EventRule, error) {
	actions, err := eventActionsFromProto("actions", req.GetActions())
	if err != nil {
		return nil, err
	}
	var r Rule
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		r, err = h.rules.Create(ctx, tx, RuleInput{
			Name: req.GetName(), Description: req.GetDescription(), EventType: req.GetEventType(),
			Actions: actions, CreatedBy: caller.Identity(ctx),
		})
		return err
	})
	if err != nil {
		return nil, eventRuleError(err)
	}
	return eventRuleToProto(r), nil
}

// GetEventRule returns a persisted or built-in rule.
func (h *Handler) GetEventRule(ctx context.Context, req *flowv1.GetEventRuleRequest) (*flowv1.EventRule, error) {
	id, err := operations.ParseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	r, err := h.rules.Get(ctx, h.pool, id)
	if err != nil {
		return nil, eventRuleError(err)
	}
	return eventRuleToProto(r), nil
}

// GetEffectiveEventRule returns the rule in effect for an event type at a
// rack or a component.
func (h *Handler) GetEffectiveEventRule(ctx context.Context, req *flowv1.GetEffectiveEventRuleRequest) (*flowv1.EventRule, error) {
	if err := ValidateEventType("event_type", req.GetEventType()); err != nil {
		return nil, eventRuleError(err)
	}
	var rackID, componentID uuid.UUID
	var err error
	switch t := req.GetTarget().(type) {
	case *flowv1.GetEffectiveEventRuleRequest_RackId:
		rackID, err = operations.ParseUUID("rack_id", t.RackId)
	case *flowv1.GetEffectiveEventRuleRequest_ComponentId:
		componentID, err = operations.ParseUUID("component_id", t.ComponentId)
	default:
		err = connect.NewError(connect.CodeInvalidArgument, errors.New("target: exactly one of rack_id and component_id is required"))
	}
	if err != nil {
		return nil, err
	}
	r, err := h.rules.EffectiveAt(ctx, h.pool, req.GetEventType(), rackID, componentID)
	if err != nil {
		return nil, eventRuleError(err)
	}
	return eventRuleToProto(r), nil
}

// ListEventRules lists persisted rules, then built-ins, each by ascending
// ID; filters apply before paging (default offset 0, limit 100).
func (h *Handler) ListEventRules(ctx context.Context, req *flowv1.ListEventRulesRequest) (*flowv1.ListEventRulesResponse, error) {
	f := RuleFilter{EventType: req.EventType, Enabled: req.Enabled}
	if p := req.Pagination; p != nil {
		if p.GetOffset() < 0 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pagination.offset: must not be negative, got %d", p.GetOffset()))
		}
		if p.GetLimit() <= 0 || p.GetLimit() > 1000 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pagination.limit: must be between 1 and 1000, got %d", p.GetLimit()))
		}
		f.Offset, f.Limit = int(p.GetOffset()), int(p.GetLimit())
	}
	rules, total, err := h.rules.List(ctx, h.pool, f)
	if err != nil {
		return nil, eventRuleError(err)
	}
	res := &flowv1.ListEventRulesResponse{Total: total, Rules: make([]*flowv1.EventRule, 0, len(rules))}
	for _, r := range rules {
		res.Rules = append(res.Rules, eventRuleToProto(r))
	}
	return res, nil
}

// UpdateEventRule replaces either the metadata or the action list of a
// persisted rule.
func (h *Handler) UpdateEventRule(ctx context.Context, req *flowv1.UpdateEventRuleRequest) (*flowv1.EventRule, error) {
	id, err := operations.ParseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	var update func(tx pgx.Tx) (Rule, error)
	switch u := req.GetUpdate().(type) {
	case *flowv1.UpdateEventRuleRequest_Metadata:
		if u.Metadata == nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("metadata: is required"))
		}
		update = func(tx pgx.Tx) (Rule, error) {
			return h.rules.UpdateMetadata(ctx, tx, id, u.Metadata.GetName(), u.Metadata.GetDescription())
		}
	case *flowv1.UpdateEventRuleRequest_Actions:
		if u.Actions == nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("actions: is required"))
		}
		actions, err := eventActionsFromProto("actions.actions", u.Actions.GetActions())
		if err != nil {
			return nil, err
		}
		update = func(tx pgx.Tx) (Rule, error) { return h.rules.ReplaceActions(ctx, tx, id, actions) }
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("update: exactly one of metadata and actions is required"))
	}
	var r Rule
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) { r, err = update(tx); return err }); err != nil {
		return nil, eventRuleError(err)
	}
	return eventRuleToProto(r), nil
}

// EnableEventRule enables a persisted rule after re-validating it.
func (h *Handler) EnableEventRule(ctx context.Context, req *flowv1.EnableEventRuleRequest) (*flowv1.EventRule, error) {
	return h.setEnabled(ctx, req.GetRuleId(), true)
}

// DisableEventRule disables a persisted rule.
func (h *Handler) DisableEventRule(ctx context.Context, req *flowv1.DisableEventRuleRequest) (*flowv1.EventRule, error) {
	return h.setEnabled(ctx, req.GetRuleId(), false)
}

func (h *Handler) setEnabled(ctx context.Context, ruleID *flowv1.UUID, enabled bool) (*flowv1.EventRule, error) {
	id, err := operations.ParseUUID("rule_id", ruleID)
	if err != nil {
		return nil, err
	}
	var r Rule
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) { r, err = h.rules.SetEnabled(ctx, tx, id, enabled); return err }); err != nil {
		return nil, eventRuleError(err)
	}
	return eventRuleToProto(r), nil
}

// DeleteEventRule deletes a persisted rule with its bindings.
func (h *Handler) DeleteEventRule(ctx context.Context, req *flowv1.DeleteEventRuleRequest) (*emptypb.Empty, error) {
	id, err := operations.ParseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error { return h.rules.Delete(ctx, tx, id) }); err != nil {
		return nil, eventRuleError(err)
	}
	return &emptypb.Empty{}, nil
}

// CreateEventRuleBinding binds a persisted rule at the site or a rack.
func (h *Handler) CreateEventRuleBinding(ctx context.Context, req *flowv1.CreateEventRuleBindingRequest) (*flowv1.EventRuleBinding, error) {
	id, err := operations.ParseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	scope, err := eventScopeFromProto(req.GetScope())
	if err != nil {
		return nil, err
	}
	var b Binding
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) { b, err = h.rules.Bind(ctx, tx, id, scope); return err }); err != nil {
		return nil, eventRuleError(err)
	}
	return bindingToProto(b), nil
}

// GetEventRuleBinding returns the binding in an (event type, scope) slot.
func (h *Handler) GetEventRuleBinding(ctx context.Context, req *flowv1.GetEventRuleBindingRequest) (*flowv1.EventRuleBinding, error) {
	if err := ValidateEventType("event_type", req.GetEventType()); err != nil {
		return nil, eventRuleError(err)
	}
	scope, err := eventScopeFromProto(req.GetScope())
	if err != nil {
		return nil, err
	}
	b, err := h.rules.Binding(ctx, h.pool, req.GetEventType(), scope)
	if err != nil {
		return nil, eventRuleError(err)
	}
	return bindingToProto(b), nil
}

// DeleteEventRuleBinding clears an (event type, scope) slot.
func (h *Handler) DeleteEventRuleBinding(ctx context.Context, req *flowv1.DeleteEventRuleBindingRequest) (*emptypb.Empty, error) {
	if err := ValidateEventType("event_type", req.GetEventType()); err != nil {
		return nil, eventRuleError(err)
	}
	scope, err := eventScopeFromProto(req.GetScope())
	if err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error { return h.rules.Unbind(ctx, tx, req.GetEventType(), scope) }); err != nil {
		return nil, eventRuleError(err)
	}
	return &emptypb.Empty{}, nil
}

// eventRuleError maps event-rule errors to gRPC codes.
func eventRuleError(err error) error {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, ErrInvalidRule):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrRuleNotFound), errors.Is(err, ErrBindingNotFound), errors.Is(err, ErrTargetNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrBuiltInRule), errors.Is(err, ErrBindingConflict):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return err
}

func eventArg(field, format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func eventScopeFromProto(s *flowv1.EventRuleScope) (Scope, error) {
	if s == nil {
		return Scope{}, eventArg("scope", "is required")
	}
	switch s.GetType() {
	case flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_SITE:
		if s.GetId().GetId() != "" {
			return Scope{}, eventArg("scope.id", "must be empty for a SITE scope")
		}
		return Scope{Type: ScopeSite}, nil
	case flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_RACK:
		id, err := operations.ParseUUID("scope.id", s.GetId())
		if err != nil {
			return Scope{}, err
		}
		return Scope{Type: ScopeRack, RackID: id}, nil
	}
	return Scope{}, eventArg("scope.type", "must be SITE or RACK")
}

func eventScopeToProto(s Scope) *flowv1.EventRuleScope {
	if s.Type == ScopeRack {
		return &flowv1.EventRuleScope{Type: flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_RACK, Id: &flowv1.UUID{Id: s.RackID.String()}}
	}
	return &flowv1.EventRuleScope{Type: flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_SITE}
}

func bindingToProto(b Binding) *flowv1.EventRuleBinding {
	return &flowv1.EventRuleBinding{
		Id: &flowv1.UUID{Id: b.ID.String()}, RuleId: &flowv1.UUID{Id: b.RuleID.String()},
		EventType: b.EventType, Scope: eventScopeToProto(b.Scope),
	}
}

var severityFromProto = map[flowv1.EventRuleSeverity]Severity{
	flowv1.EventRuleSeverity_EVENT_RULE_SEVERITY_INFO:     SeverityInfo,
	flowv1.EventRuleSeverity_EVENT_RULE_SEVERITY_WARNING:  SeverityWarning,
	flowv1.EventRuleSeverity_EVENT_RULE_SEVERITY_CRITICAL: SeverityCritical,
}

func severityToProto(s Severity) flowv1.EventRuleSeverity {
	for k, v := range severityFromProto {
		if v == s {
			return k
		}
	}
	return flowv1.EventRuleSeverity_EVENT_RULE_SEVERITY_UNSPECIFIED
}

var targetStrategyFromProto = map[flowv1.EventRuleTargetStrategy]TargetStrategy{
	flowv1.EventRuleTargetStrategy_EVENT_RULE_TARGET_STRATEGY_COMPONENT:           TargetComponent,
	flowv1.EventRuleTargetStrategy_EVENT_RULE_TARGET_STRATEGY_RACK:                TargetRack,
	flowv1.EventRuleTargetStrategy_EVENT_RULE_TARGET_STRATEGY_AFFECTED_COMPONENTS: TargetAffectedComponents,
}

var conflictStrategyFromProto = map[flowv1.EventRuleConflictStrategy]ConflictStrategy{
	flowv1.EventRuleConflictStrategy_EVENT_RULE_CONFLICT_STRATEGY_QUEUE:  ConflictQueue,
	flowv1.EventRuleConflictStrategy_EVENT_RULE_CONFLICT_STRATEGY_REJECT: ConflictReject,
}

// eventActionsFromProto converts wire actions. Enum values are checked
// here (the wire form has no other spelling); the rule contract is checked
// by ValidateActions.
func eventActionsFromProto(field string, in []*flowv1.EventRuleAction) ([]Action, error) {
	out := make([]Action, 0, len(in))
	for i, a := range in {
		f := fmt.Sprintf("%s[%d]", field, i)
		if a == nil {
			return nil, eventArg(f, "is required")
		}
		act := Action{Name: a.GetName()}
		for k, s := range a.GetCondition().GetSeverities() {
			sev, ok := severityFromProto[s]
			if !ok {
				return nil, eventArg(fmt.Sprintf("%s.condition.severities[%d]", f, k), "must be INFO, WARNING or CRITICAL, got %s", s)
			}
			act.Condition.Severities = append(act.Condition.Severities, sev)
		}
		for k, t := range a.GetCondition().GetComponentTypes() {
			ct, ok := inventory.ParseComponentType(t.String())
			if !ok {
				return nil, eventArg(fmt.Sprintf("%s.condition.component_types[%d]", f, k), "unknown component type %s", t)
			}
			act.Condition.ComponentTypes = append(act.Condition.ComponentTypes, operations.ComponentType(ct))
		}
		switch s := a.GetSpec().(type) {
		case *flowv1.EventRuleAction_SubmitTask:
			spec, err := submitTaskFromProto(f+".submit_task", s.SubmitTask)
			if err != nil {
				return nil, err
			}
			act.SubmitTask = spec
		case *flowv1.EventRuleAction_SendAlert:
			act.SendAlert = &SendAlertSpec{Message: s.SendAlert.GetMessage()}
			if sev, ok := severityFromProto[s.SendAlert.GetSeverity()]; ok {
				act.SendAlert.Severity = sev
			}
		case *flowv1.EventRuleAction_Noop:
			act.Noop = &NoopSpec{Reason: s.Noop.GetReason()}
		}
		out = append(out, act)
	}
	return out, nil
}

// embeddedTargetFields are EventRuleSubmitTaskAction's reserved numbers:
// the earlier untyped form (operation_type, operation_code,
// operation_payload_json), whose payload could embed targets.
var embeddedTargetFields = map[protowire.Number]string{1: "operation_type", 2: "operation_code", 3: "operation_payload_json"}

func submitTaskFromProto(field string, s *flowv1.EventRuleSubmitTaskAction) (*SubmitTaskSpec, error) {
	if s == nil {
		return nil, eventArg(field, "is required")
	}
	for b := s.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, _, n := protowire.ConsumeField(b)
		if n < 0 {
			break
		}
		if name, ok := embeddedTargetFields[num]; ok {
			return nil, eventArg(field+"."+name, "is no longer accepted: targets must not be embedded; set operation, and the target strategy derives the targets")
		}
		b = b[n:]
	}
	out := &SubmitTaskSpec{Description: s.GetDescription()}
	if ts, ok := targetStrategyFromProto[s.GetTargetStrategy()]; ok {
		out.TargetStrategy = ts
	} else {
		return nil, eventArg(field+".target_strategy", "must be COMPONENT, RACK or AFFECTED_COMPONENTS, got %s", s.GetTargetStrategy())
	}
	if cs, ok := conflictStrategyFromProto[s.GetConflictStrategy()]; ok {
		out.ConflictStrategy = cs
	} else {
		return nil, eventArg(field+".conflict_strategy", "must be QUEUE or REJECT, got %s", s.GetConflictStrategy())
	}
	switch op := s.GetOperation().GetOperation().(type) {
	case *flowv1.TaskOperation_PowerControl:
		code, ok := strings.CutPrefix(op.PowerControl.GetOperation().String(), "POWER_CONTROL_OPERATION_")
		if !ok || code == "UNSPECIFIED" {
			return nil, eventArg(field+".operation.power_control.operation", "must be a power operation such as FORCE_POWER_OFF, got %s", op.PowerControl.GetOperation())
		}
		out.Operation = TaskOperation{Type: operations.OperationTypePowerControl, Code: operations.OperationCode(strings.ToLower(code)), OverrideReadinessCheck: op.PowerControl.GetOverrideReadinessCheck()}
	case *flowv1.TaskOperation_FirmwareControl:
		fc := op.FirmwareControl
		code, ok := strings.CutPrefix(fc.GetOperation().String(), "FIRMWARE_CONTROL_OPERATION_")
		if !ok || code == "UNSPECIFIED" {
			return nil, eventArg(field+".operation.firmware_control.operation", "must be UPGRADE, DOWNGRADE or ROLLBACK, got %s", fc.GetOperation())
		}
		out.Operation = TaskOperation{
			Type: operations.OperationTypeFirmwareControl, Code: operations.OperationCode(strings.ToLower(code)), TargetVersion: fc.TargetVersion,
			SubTargets: fc.GetSubTargets(), OverrideReadinessCheck: fc.GetOverrideReadinessCheck(), OverrideVersionCheck: fc.GetOverrideVersionCheck(),
		}
		if fc.StartTime != nil {
			if out.Operation.StartTime = fc.GetStartTime().GetSeconds(); out.Operation.StartTime == 0 {
				return nil, eventArg(field+".operation.firmware_control.start_time", "must not be the Unix epoch (0 means not set)")
			}
		}
		if fc.EndTime != nil {
			if out.Operation.EndTime = fc.GetEndTime().GetSeconds(); out.Operation.EndTime == 0 {
				return nil, eventArg(field+".operation.firmware_control.end_time", "must not be the Unix epoch (0 means not set)")
			}
		}
	default:
		return nil, eventArg(field+".operation", "exactly one of power_control and firmware_control is required")
	}
	return out, nil
}

func eventRuleToProto(r Rule) *flowv1.EventRule {
	out := &flowv1.EventRule{
		Id: &flowv1.UUID{Id: r.ID.String()}, ReadOnly: r.ReadOnly, Name: r.Name, Description: r.Description,
		Enabled: r.Enabled, EventType: r.EventType,
	}
	if !r.CreatedAt.IsZero() {
		out.CreatedAt, out.UpdatedAt = timestamppb.New(r.CreatedAt), timestamppb.New(r.UpdatedAt)
	}
	for _, a := range r.Actions {
		pa := &flowv1.EventRuleAction{Name: a.Name}
		if len(a.Condition.Severities) > 0 || len(a.Condition.ComponentTypes) > 0 {
			pa.Condition = &flowv1.EventRuleActionCondition{}
			for _, s := range a.Condition.Severities {
				pa.Condition.Severities = append(pa.Condition.Severities, severityToProto(s))
			}
			for _, t := range a.Condition.ComponentTypes {
				pa.Condition.ComponentTypes = append(pa.Condition.ComponentTypes, flowv1.ComponentType(flowv1.ComponentType_value[inventory.ComponentType(t).EnumName()]))
			}
		}
		switch {
		case a.SubmitTask != nil:
			pa.Spec = &flowv1.EventRuleAction_SubmitTask{SubmitTask: submitTaskToProto(*a.SubmitTask)}
		case a.SendAlert != nil:
			pa.Spec = &flowv1.EventRuleAction_SendAlert{SendAlert: &flowv1.EventRuleSendAlertAction{Severity: severityToProto(a.SendAlert.Severity), Message: a.SendAlert.Message}}
		case a.Noop != nil:
			pa.Spec = &flowv1.EventRuleAction_Noop{Noop: &flowv1.EventRuleNoopAction{Reason: a.Noop.Reason}}
		}
		out.Actions = append(out.Actions, pa)
	}
	return out
}

func submitTaskToProto(s SubmitTaskSpec) *flowv1.EventRuleSubmitTaskAction {
	out := &flowv1.EventRuleSubmitTaskAction{Description: s.Description, Operation: &flowv1.TaskOperation{}}
	for k, v := range targetStrategyFromProto {
		if v == s.TargetStrategy {
			out.TargetStrategy = k
		}
	}
	for k, v := range conflictStrategyFromProto {
		if v == s.ConflictStrategy {
			out.ConflictStrategy = k
		}
	}
	op := s.Operation
	switch op.Type {
	case operations.OperationTypePowerControl:
		out.Operation.Operation = &flowv1.TaskOperation_PowerControl{PowerControl: &flowv1.PowerControlTaskOperation{
			Operation:              flowv1.PowerControlOperation(flowv1.PowerControlOperation_value["POWER_CONTROL_OPERATION_"+strings.ToUpper(string(op.Code))]),
			OverrideReadinessCheck: op.OverrideReadinessCheck,
		}}
	case operations.OperationTypeFirmwareControl:
		fc := &flowv1.FirmwareControlTaskOperation{
			Operation:     flowv1.FirmwareControlOperation(flowv1.FirmwareControlOperation_value["FIRMWARE_CONTROL_OPERATION_"+strings.ToUpper(string(op.Code))]),
			TargetVersion: op.TargetVersion, SubTargets: op.SubTargets,
			OverrideReadinessCheck: op.OverrideReadinessCheck, OverrideVersionCheck: op.OverrideVersionCheck,
		}
		if op.StartTime != 0 {
			fc.StartTime = &timestamppb.Timestamp{Seconds: op.StartTime}
		}
		if op.EndTime != 0 {
			fc.EndTime = &timestamppb.Timestamp{Seconds: op.EndTime}
		}
		out.Operation.Operation = &flowv1.TaskOperation_FirmwareControl{FirmwareControl: fc}
	}
	return out
}

// LeakAdminHandler implements the leak methods of Flow's own admin service
// (flow.admin.v1.AdminService, "Leaks"); app embeds it in the admin
// handler.
type LeakAdminHandler struct {
	pool *pgxpool.Pool
	inv  *inventory.Service
	leak *LeakDetector
	// onOverride hears of each override in its transaction (SetOnOverride).
	onOverride OverrideFunc
}

// OverrideFunc hears of a leak override (the component, and the open leak
// as overridden) inside the transaction that records it; an error rolls
// it back. It must only write through tx and must not do network I/O.
type OverrideFunc func(ctx context.Context, tx pgx.Tx, c inventory.Component, leak inventory.OpenLeak) error

// SetOnOverride registers fn (notifications). Call it before serving.
func (h *LeakAdminHandler) SetOnOverride(fn OverrideFunc) { h.onOverride = fn }

// NewLeakAdminHandler returns the leak admin handler.
func NewLeakAdminHandler(pool *pgxpool.Pool, inv *inventory.Service, leak *LeakDetector) *LeakAdminHandler {
	return &LeakAdminHandler{pool: pool, inv: inv, leak: leak}
}

// maxOverrideReason bounds an override's reason (bytes).
const maxOverrideReason = 1024

// OverrideLeak overrides the energise guard of one component's open leak,
// as the caller, with a reason; the audit interceptor records the call.
func (h *LeakAdminHandler) OverrideLeak(ctx context.Context, req *adminv1.OverrideLeakRequest) (*adminv1.OverrideLeakResponse, error) {
	reason := strings.TrimSpace(req.GetReason())
	switch {
	case reason == "":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("reason: required: say why powering the component on is safe"))
	case len(reason) > maxOverrideReason:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("reason: at most %d bytes", maxOverrideReason))
	}
	ref, err := componentRefOf(req.GetComponentId())
	if err != nil {
		return nil, err
	}
	var out inventory.OpenLeak
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		c, err := h.inv.ResolveComponent(ctx, tx, ref)
		if err != nil {
			return err
		}
		out, err = h.inv.OverrideLeak(ctx, tx, c.ID, caller.Identity(ctx), reason)
		if err != nil || h.onOverride == nil {
			return err
		}
		return h.onOverride(ctx, tx, c, out)
	})
	switch {
	case errors.Is(err, inventory.ErrComponentNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("component_id: %w", err))
	case errors.Is(err, inventory.ErrAmbiguous), errors.Is(err, inventory.ErrInvalidArgument):
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("component_id: %w", err))
	case errors.Is(err, inventory.ErrNoOpenLeak):
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	case err != nil:
		return nil, err
	}
	return &adminv1.OverrideLeakResponse{
		ComponentId: out.ComponentID.String(), DetectedAt: timestamppb.New(out.DetectedAt),
		OverriddenAt: timestamppb.New(*out.OverrideAt), OverriddenBy: out.OverrideBy, Reason: out.OverrideReason,
	}, nil
}

// componentRefOf reads a component given by UUID or Core ID.
func componentRefOf(s string) (inventory.ComponentRef, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return inventory.ComponentRef{}, connect.NewError(connect.CodeInvalidArgument, errors.New("component_id: required (a component UUID or Core ID)"))
	}
	if id, err := uuid.Parse(s); err == nil {
		return inventory.ComponentRef{ID: id}, nil
	}
	return inventory.ComponentRef{ExternalID: s}, nil
}

// ListLeakOccurrences lists the ongoing leak occurrences, with the Flow
// component of each ("" for a device Flow does not hold).
func (h *LeakAdminHandler) ListLeakOccurrences(ctx context.Context, _ *adminv1.ListLeakOccurrencesRequest) (*adminv1.ListLeakOccurrencesResponse, error) {
	occ, err := h.leak.Occurrences(ctx, h.pool)
	if err != nil {
		return nil, err
	}
	out := &adminv1.ListLeakOccurrencesResponse{Occurrences: make([]*adminv1.LeakOccurrence, 0, len(occ))}
	for _, o := range occ {
		lo := &adminv1.LeakOccurrence{Kind: o.Kind, ExternalId: o.ExternalID, StartedAt: timestamppb.New(o.StartedAt),
			LastSeenAt: timestamppb.New(o.LastSeenAt), UnknownOutcome: o.UnknownOutcome}
		ct := inventory.ComponentTypeCompute
		if o.Kind == "nvswitch" {
			ct = inventory.ComponentTypeNVSwitch
		}
		if c, err := h.inv.ResolveComponent(ctx, h.pool, inventory.ComponentRef{ExternalID: o.ExternalID, ExternalType: ct}); err == nil {
			lo.ComponentId = c.ID.String()
		}
		out.Occurrences = append(out.Occurrences, lo)
	}
	return out, nil
}
