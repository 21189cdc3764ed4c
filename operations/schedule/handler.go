package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Handler implements the 13 task-schedule methods of v1.Flow. app
// embeds it in the one Flow handler.
type Handler struct {
	pool *pgxpool.Pool
	svc  *Service
}

// NewHandler returns a Handler serving svc over pool.
func NewHandler(pool *pgxpool.Pool, svc *Service) *Handler {
	return &Handler{pool: pool, svc: svc}
}

// scheduledOp is a wire ScheduledOperation converted: the template, its
// credentials (plaintext, sealed by the service) and its targets.
type scheduledOp struct {
	tmpl    Template
	auth    firmware.AuthData
	targets inventory.TargetSpec
}

func invalidArg(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// scheduledOpFromProto converts op; field prefixes error fields. Any
// description inside is ignored, as are queue options' conflict strategy
// (the overlap policy decides) but not their timeout.
func scheduledOpFromProto(op *flowv1.ScheduledOperation, field string) (scheduledOp, error) {
	var out scheduledOp
	var spec *flowv1.OperationTargetSpec
	var queue *flowv1.QueueOptions
	var ruleID *flowv1.UUID
	var branch string
	switch o := op.GetOperation().(type) {
	case *flowv1.ScheduledOperation_PowerOn:
		r := o.PowerOn
		branch, spec, queue, ruleID = "power_on", r.GetTargetSpec(), r.GetQueueOptions(), r.RuleId
		out.tmpl = powerTemplate(operations.CodePowerOn, r.GetOverrideReadinessCheck())
	case *flowv1.ScheduledOperation_PowerOff:
		r := o.PowerOff
		branch, spec, queue, ruleID = "power_off", r.GetTargetSpec(), r.GetQueueOptions(), r.RuleId
		code := operations.CodePowerOff
		if r.GetForced() {
			code = operations.CodeForcePowerOff
		}
		out.tmpl = powerTemplate(code, r.GetOverrideReadinessCheck())
		out.tmpl.Information.Forced = r.GetForced()
	case *flowv1.ScheduledOperation_PowerReset:
		r := o.PowerReset
		branch, spec, queue, ruleID = "power_reset", r.GetTargetSpec(), r.GetQueueOptions(), r.RuleId
		code := operations.CodeRestart
		if r.GetForced() {
			code = operations.CodeForceRestart
		}
		out.tmpl = powerTemplate(code, r.GetOverrideReadinessCheck())
		out.tmpl.Information.Forced = r.GetForced()
	case *flowv1.ScheduledOperation_BringUp:
		r := o.BringUp
		branch, spec, ruleID = "bring_up", r.GetTargetSpec(), r.RuleId
		out.tmpl = Template{Type: operations.OperationTypeBringUp, Code: operations.CodeBringUp, Information: operations.Payload{OverrideReadinessCheck: r.GetOverrideReadinessCheck()}}
	case *flowv1.ScheduledOperation_Ingest:
		r := o.Ingest
		branch, spec, ruleID = "ingest", r.GetTargetSpec(), r.RuleId
		out.tmpl = Template{Type: operations.OperationTypeBringUp, Code: operations.CodeIngest}
	case *flowv1.ScheduledOperation_UpgradeFirmware:
		r := o.UpgradeFirmware
		branch, spec, queue, ruleID = "upgrade_firmware", r.GetTargetSpec(), r.GetQueueOptions(), r.RuleId
		auth, err := operations.AuthFromProto(r.GetAuthenticationData(), r.GetSubTargets())
		if err != nil {
			return out, err
		}
		out.auth = auth
		out.tmpl = Template{Type: operations.OperationTypeFirmwareControl, Code: operations.CodeUpgrade, Information: operations.Payload{
			Operation: operations.PayloadOperation(operations.OperationTypeFirmwareControl, operations.CodeUpgrade), TargetVersion: r.GetTargetVersion(), SubTargets: r.GetSubTargets(),
			OverrideReadinessCheck: r.GetOverrideReadinessCheck(), OverrideVersionCheck: r.GetOverrideVersionCheck(),
		}}
		if r.StartTime != nil {
			out.tmpl.Information.StartTime = r.GetStartTime().GetSeconds()
		}
		if r.EndTime != nil {
			out.tmpl.Information.EndTime = r.GetEndTime().GetSeconds()
		}
		if s, e := out.tmpl.Information.StartTime, out.tmpl.Information.EndTime; s != 0 && e != 0 && e < s {
			return out, invalidArg("%s.upgrade_firmware.end_time: must not be before start_time", field)
		}
	default:
		return out, invalidArg("%s: one of power_on, power_off, power_reset, bring_up, upgrade_firmware or ingest is required", field)
	}
	prefix := field + "." + branch
	if spec == nil {
		return out, invalidArg("%s.target_spec is required", prefix)
	}
	targets, err := inventory.TargetSpecFromProto(spec, prefix+".target_spec")
	if err != nil {
		return out, connect.NewError(connect.CodeInvalidArgument, err)
	}
	out.targets = targets
	if s := queue.GetQueueTimeoutSeconds(); s < 0 {
		return out, invalidArg("%s.queue_options.queue_timeout_seconds: must not be negative, got %d", prefix, s)
	} else {
		out.tmpl.QueueTimeoutSecs = s
	}
	if ruleID != nil {
		id, err := operations.ParseUUID(prefix+".rule_id", ruleID)
		if err != nil {
			return out, err
		}
		out.tmpl.RuleID = &id
	}
	return out, nil
}

// powerTemplate is the template of a power operation, its payload as the
// task manager's power methods write it.
func powerTemplate(code operations.OperationCode, override bool) Template {
	return Template{Type: operations.OperationTypePowerControl, Code: code, Information: operations.Payload{
		Operation: operations.PayloadOperation(operations.OperationTypePowerControl, code), OverrideReadinessCheck: override,
	}}
}

func specTypeFromProto(t flowv1.ScheduleSpecType) SpecType {
	switch t {
	case flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_INTERVAL:
		return SpecInterval
	case flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON:
		return SpecCron
	case flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_ONE_TIME:
		return SpecOneTime
	}
	return "" // rejected by ParseSpec, naming the field
}

func specTypeToProto(t SpecType) flowv1.ScheduleSpecType {
	switch t {
	case SpecInterval:
		return flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_INTERVAL
	case SpecCron:
		return flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON
	case SpecOneTime:
		return flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_ONE_TIME
	}
	return flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_UNSPECIFIED
}

func overlapFromProto(p flowv1.OverlapPolicy, field string) (OverlapPolicy, error) {
	switch p {
	case flowv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED:
		return "", nil
	case flowv1.OverlapPolicy_OVERLAP_POLICY_SKIP:
		return OverlapSkip, nil
	case flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE:
		return OverlapQueue, nil
	}
	return "", invalidArg("%s: unknown value %d", field, p)
}

func overlapToProto(p OverlapPolicy) flowv1.OverlapPolicy {
	if p == OverlapQueue {
		return flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE
	}
	return flowv1.OverlapPolicy_OVERLAP_POLICY_SKIP
}

// OperationTypeName is the wire operation_type of a schedule's template:
// POWER_ON, POWER_OFF, POWER_RESET, BRING_UP, INGEST, UPGRADE_FIRMWARE,
// DOWNGRADE_FIRMWARE or ROLLBACK_FIRMWARE.
func (t Template) OperationTypeName() string {
	switch t.Code {
	case operations.CodePowerOn, operations.CodeForcePowerOn:
		return "POWER_ON"
	case operations.CodePowerOff, operations.CodeForcePowerOff:
		return "POWER_OFF"
	case operations.CodeRestart, operations.CodeForceRestart, operations.CodeWarmReset, operations.CodeColdReset:
		return "POWER_RESET"
	case operations.CodeBringUp:
		return "BRING_UP"
	case operations.CodeIngest:
		return "INGEST"
	case operations.CodeUpgrade:
		return "UPGRADE_FIRMWARE"
	case operations.CodeDowngrade:
		return "DOWNGRADE_FIRMWARE"
	case operations.CodeRollback:
		return "ROLLBACK_FIRMWARE"
	}
	return strings.ToUpper(string(t.Code))
}

// Summary is a human description of the template, e.g. "Power Reset
// (forced)" or "Upgrade Firmware to v2.3.1".
func (t Template) Summary() string {
	words := strings.Fields(strings.ReplaceAll(strings.ToLower(t.OperationTypeName()), "_", " "))
	for i, w := range words {
		words[i] = strings.ToUpper(w[:1]) + w[1:]
	}
	s := strings.Join(words, " ")
	if t.Information.Forced || t.Code == operations.CodeForcePowerOn {
		s += " (forced)"
	}
	if v := t.Information.TargetVersion; v != "" {
		s += " to " + v
	}
	return s
}

func scheduleToProto(s Schedule) *flowv1.TaskSchedule {
	out := &flowv1.TaskSchedule{
		Id: &flowv1.UUID{Id: s.ID.String()}, Name: s.Name,
		Spec:          &flowv1.ScheduleSpec{Type: specTypeToProto(s.Spec.Type), Spec: s.Spec.Spec, Timezone: s.Spec.Timezone},
		OverlapPolicy: overlapToProto(s.Overlap), Enabled: s.Enabled,
		LastRunAt: operations.Timestamp(s.LastRunAt), CreatedAt: timestamppb.New(s.CreatedAt), UpdatedAt: timestamppb.New(s.UpdatedAt),
		OperationType: s.Template.OperationTypeName(), Description: s.Template.Summary(),
	}
	// A paused schedule keeps (and shows) its next_run_at, as upstream's
	// does; resuming recomputes it.
	out.NextRunAt = operations.Timestamp(s.NextRunAt)
	return out
}

var componentTypesToProto = map[operations.ComponentType]flowv1.ComponentType{
	operations.ComponentTypeCompute: flowv1.ComponentType_COMPONENT_TYPE_COMPUTE, operations.ComponentTypeNVSwitch: flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH,
	operations.ComponentTypePowerShelf: flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF, operations.ComponentTypeToRSwitch: flowv1.ComponentType_COMPONENT_TYPE_TORSWITCH,
	operations.ComponentTypeUMS: flowv1.ComponentType_COMPONENT_TYPE_UMS, operations.ComponentTypeCDU: flowv1.ComponentType_COMPONENT_TYPE_CDU,
}

func scopeToProto(sc Scope) *flowv1.TaskScheduleScope {
	out := &flowv1.TaskScheduleScope{
		Id: &flowv1.UUID{Id: sc.ID.String()}, ScheduleId: &flowv1.UUID{Id: sc.ScheduleID.String()},
		RackId: &flowv1.UUID{Id: sc.RackID.String()}, CreatedAt: timestamppb.New(sc.CreatedAt),
	}
	if sc.LastTaskID != nil {
		out.LastTaskId = &flowv1.UUID{Id: sc.LastTaskID.String()}
	}
	if f := sc.Filter; f != nil {
		if f.Kind == filterTypes {
			types := &flowv1.ComponentTypes{}
			for _, t := range f.Types {
				types.Types = append(types.Types, componentTypesToProto[t])
			}
			out.ComponentFilter = &flowv1.TaskScheduleScope_Types{Types: types}
		} else {
			comps := &flowv1.ComponentTargets{}
			for _, id := range f.Components {
				comps.Targets = append(comps.Targets, &flowv1.ComponentTarget{Identifier: &flowv1.ComponentTarget_Id{Id: &flowv1.UUID{Id: id.String()}}})
			}
			out.ComponentFilter = &flowv1.TaskScheduleScope_Components{Components: comps}
		}
	}
	return out
}

func scopesToProto(scopes []Scope) []*flowv1.TaskScheduleScope {
	out := make([]*flowv1.TaskScheduleScope, len(scopes))
	for i, sc := range scopes {
		out[i] = scopeToProto(sc)
	}
	return out
}

// scheduleError maps schedule, task and inventory errors to gRPC codes.
func scheduleError(err error) error {
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrScopeNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, ErrConsumed), errors.Is(err, ErrLastScope), errors.Is(err, ErrFireFailed):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return operations.TaskError(err)
}

// inTx runs fn in a transaction on the handler's pool.
func (h *Handler) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, h.pool, fn)
}

// CreateTaskSchedule creates a schedule whose initial scope is the
// operation's target_spec.
func (h *Handler) CreateTaskSchedule(ctx context.Context, req *flowv1.CreateTaskScheduleRequest) (*flowv1.TaskSchedule, error) {
	cfg := req.GetSchedule()
	if cfg == nil {
		return nil, invalidArg("schedule is required")
	}
	if cfg.GetSpec() == nil {
		return nil, invalidArg("schedule.spec is required")
	}
	if req.GetOperation() == nil {
		return nil, invalidArg("operation is required")
	}
	overlap, err := overlapFromProto(cfg.GetOverlapPolicy(), "schedule.overlap_policy")
	if err != nil {
		return nil, err
	}
	op, err := scheduledOpFromProto(req.GetOperation(), "operation")
	if err != nil {
		return nil, err
	}
	var s Schedule
	err = h.inTx(ctx, func(tx pgx.Tx) (err error) {
		s, err = h.svc.Create(ctx, tx, Input{
			Name: cfg.GetName(), Overlap: overlap, Template: op.tmpl, Auth: op.auth, Targets: op.targets,
			CreatedBy: caller.Identity(ctx),
			Spec:      Spec{Type: specTypeFromProto(cfg.GetSpec().GetType()), Spec: cfg.GetSpec().GetSpec(), Timezone: cfg.GetSpec().GetTimezone()},
		})
		return err
	})
	if err != nil {
		return nil, scheduleError(err)
	}
	return scheduleToProto(s), nil
}

// GetTaskSchedule returns one schedule.
func (h *Handler) GetTaskSchedule(ctx context.Context, req *flowv1.GetTaskScheduleRequest) (*flowv1.TaskSchedule, error) {
	id, err := operations.ParseUUID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	s, err := h.svc.Get(ctx, h.pool, id)
	if err != nil {
		return nil, scheduleError(err)
	}
	return scheduleToProto(s), nil
}

// ListTaskSchedules lists schedules oldest first, optionally only those on a
// rack and/or enabled ones; without pagination every schedule.
func (h *Handler) ListTaskSchedules(ctx context.Context, req *flowv1.ListTaskSchedulesRequest) (*flowv1.ListTaskSchedulesResponse, error) {
	f := Filter{EnabledOnly: req.GetEnabledOnly()}
	if req.RackId != nil {
		id, err := operations.ParseUUID("rack_id", req.RackId)
		if err != nil {
			return nil, err
		}
		f.RackID = &id
	}
	if p := req.Pagination; p != nil {
		if p.GetOffset() < 0 {
			return nil, invalidArg("pagination.offset: must not be negative, got %d", p.GetOffset())
		}
		if p.GetLimit() < 0 {
			return nil, invalidArg("pagination.limit: must not be negative, got %d", p.GetLimit())
		}
		f.Offset, f.Limit = int(p.GetOffset()), int(p.GetLimit())
	}
	list, total, err := h.svc.List(ctx, h.pool, f)
	if err != nil {
		return nil, scheduleError(err)
	}
	res := &flowv1.ListTaskSchedulesResponse{Total: int32(total), TaskSchedules: make([]*flowv1.TaskSchedule, 0, len(list))}
	for _, s := range list {
		res.TaskSchedules = append(res.TaskSchedules, scheduleToProto(s))
	}
	return res, nil
}

// Update mask paths of UpdateTaskSchedule.
const (
	pathName     = "schedule.name"
	pathOverlap  = "schedule.overlap_policy"
	pathSpec     = "schedule.spec"
	pathTimezone = "schedule.spec.timezone"
)

// UpdateTaskSchedule changes the config fields named by the mandatory
// update mask.
func (h *Handler) UpdateTaskSchedule(ctx context.Context, req *flowv1.UpdateTaskScheduleRequest) (*flowv1.TaskSchedule, error) {
	id, err := operations.ParseUUID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, invalidArg("update_mask is required: give one or more of %s, %s, %s, %s", pathName, pathOverlap, pathSpec, pathTimezone)
	}
	cfg := req.GetSchedule()
	if cfg == nil {
		return nil, invalidArg("schedule is required")
	}
	var ch Change
	for i, p := range paths {
		switch p {
		case pathName:
			name := cfg.GetName()
			ch.Name = &name
		case pathOverlap:
			o, err := overlapFromProto(cfg.GetOverlapPolicy(), "schedule.overlap_policy")
			if err != nil {
				return nil, err
			}
			if o == "" {
				o = OverlapSkip // unspecified means skip, here as at creation (and as upstream)
			}
			ch.Overlap = &o
		case pathSpec:
			if cfg.GetSpec() == nil {
				return nil, invalidArg("schedule.spec is required by update_mask path %s", pathSpec)
			}
			ch.Spec = &Spec{Type: specTypeFromProto(cfg.GetSpec().GetType()), Spec: cfg.GetSpec().GetSpec()}
		case pathTimezone:
			if cfg.GetSpec() == nil {
				return nil, invalidArg("schedule.spec is required by update_mask path %s", pathTimezone)
			}
			tz := cfg.GetSpec().GetTimezone()
			ch.Timezone = &tz
		default:
			return nil, invalidArg("update_mask.paths[%d]: unknown path %q (valid: %s, %s, %s, %s)", i, p, pathName, pathOverlap, pathSpec, pathTimezone)
		}
	}
	var s Schedule
	err = h.inTx(ctx, func(tx pgx.Tx) (err error) {
		s, err = h.svc.Update(ctx, tx, id, ch)
		return err
	})
	if err != nil {
		return nil, scheduleError(err)
	}
	return scheduleToProto(s), nil
}

func (h *Handler) change(ctx context.Context, u *flowv1.UUID, fn func(context.Context, pgx.Tx, uuid.UUID) (Schedule, error)) (*flowv1.TaskSchedule, error) {
	id, err := operations.ParseUUID("id", u)
	if err != nil {
		return nil, err
	}
	var s Schedule
	err = h.inTx(ctx, func(tx pgx.Tx) (err error) {
		s, err = fn(ctx, tx, id)
		return err
	})
	if err != nil {
		return nil, scheduleError(err)
	}
	return scheduleToProto(s), nil
}

// PauseTaskSchedule disables a schedule.
func (h *Handler) PauseTaskSchedule(ctx context.Context, req *flowv1.PauseTaskScheduleRequest) (*flowv1.TaskSchedule, error) {
	return h.change(ctx, req.GetId(), h.svc.Pause)
}

// ResumeTaskSchedule re-enables a schedule without an instant firing.
func (h *Handler) ResumeTaskSchedule(ctx context.Context, req *flowv1.ResumeTaskScheduleRequest) (*flowv1.TaskSchedule, error) {
	return h.change(ctx, req.GetId(), h.svc.Resume)
}

// DeleteTaskSchedule removes a schedule and its scope.
func (h *Handler) DeleteTaskSchedule(ctx context.Context, req *flowv1.DeleteTaskScheduleRequest) (*emptypb.Empty, error) {
	id, err := operations.ParseUUID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	if err := h.inTx(ctx, func(tx pgx.Tx) error { return h.svc.Delete(ctx, tx, id) }); err != nil {
		return nil, scheduleError(err)
	}
	return &emptypb.Empty{}, nil
}

// TriggerTaskSchedule fires a schedule now, every scope entry included.
func (h *Handler) TriggerTaskSchedule(ctx context.Context, req *flowv1.TriggerTaskScheduleRequest) (*flowv1.SubmitTaskResponse, error) {
	id, err := operations.ParseUUID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	ids, err := h.svc.Trigger(ctx, id)
	if err != nil {
		return nil, scheduleError(err)
	}
	res := &flowv1.SubmitTaskResponse{TaskIds: make([]*flowv1.UUID, len(ids))}
	for i, id := range ids {
		res.TaskIds[i] = &flowv1.UUID{Id: id.String()}
	}
	return res, nil
}

func targetsFromProto(spec *flowv1.OperationTargetSpec, field string) (inventory.TargetSpec, error) {
	if spec == nil {
		return inventory.TargetSpec{}, invalidArg("%s is required", field)
	}
	t, err := inventory.TargetSpecFromProto(spec, field)
	if err != nil {
		return t, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return t, nil
}

// AddTaskScheduleScope merges racks into a schedule's scope.
func (h *Handler) AddTaskScheduleScope(ctx context.Context, req *flowv1.AddTaskScheduleScopeRequest) (*flowv1.AddTaskScheduleScopeResponse, error) {
	id, err := operations.ParseUUID("schedule_id", req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	targets, err := targetsFromProto(req.GetTargetSpec(), "target_spec")
	if err != nil {
		return nil, err
	}
	var scopes []Scope
	err = h.inTx(ctx, func(tx pgx.Tx) (err error) {
		scopes, err = h.svc.AddScopes(ctx, tx, id, targets)
		return err
	})
	if err != nil {
		return nil, scheduleError(err)
	}
	return &flowv1.AddTaskScheduleScopeResponse{Scopes: scopesToProto(scopes)}, nil
}

// RemoveTaskScheduleScope removes one scope entry (not the last).
func (h *Handler) RemoveTaskScheduleScope(ctx context.Context, req *flowv1.RemoveTaskScheduleScopeRequest) (*emptypb.Empty, error) {
	id, err := operations.ParseUUID("scope_id", req.GetScopeId())
	if err != nil {
		return nil, err
	}
	if err := h.inTx(ctx, func(tx pgx.Tx) error { return h.svc.RemoveScope(ctx, tx, id) }); err != nil {
		return nil, scheduleError(err)
	}
	return &emptypb.Empty{}, nil
}

// UpdateTaskScheduleScope reconciles a schedule's scope to the desired one.
func (h *Handler) UpdateTaskScheduleScope(ctx context.Context, req *flowv1.UpdateTaskScheduleScopeRequest) (*flowv1.UpdateTaskScheduleScopeResponse, error) {
	id, err := operations.ParseUUID("schedule_id", req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	targets, err := targetsFromProto(req.GetDesiredScope(), "desired_scope")
	if err != nil {
		return nil, err
	}
	var scopes []Scope
	var ch ScopeChanges
	err = h.inTx(ctx, func(tx pgx.Tx) (err error) {
		scopes, ch, err = h.svc.ReconcileScopes(ctx, tx, id, targets)
		return err
	})
	if err != nil {
		return nil, scheduleError(err)
	}
	return &flowv1.UpdateTaskScheduleScopeResponse{
		Scopes: scopesToProto(scopes), Added: int32(ch.Added), Removed: int32(ch.Removed), Updated: int32(ch.Updated),
	}, nil
}

// ListTaskScheduleScopes returns every scope entry of a schedule.
func (h *Handler) ListTaskScheduleScopes(ctx context.Context, req *flowv1.ListTaskScheduleScopesRequest) (*flowv1.ListTaskScheduleScopesResponse, error) {
	id, err := operations.ParseUUID("schedule_id", req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	scopes, err := h.svc.Scopes(ctx, h.pool, id)
	if err != nil {
		return nil, scheduleError(err)
	}
	return &flowv1.ListTaskScheduleScopesResponse{Scopes: scopesToProto(scopes)}, nil
}

// CheckScheduleConflicts returns enabled schedules that may conflict with a
// proposed scheduled operation (advisory).
func (h *Handler) CheckScheduleConflicts(ctx context.Context, req *flowv1.CheckScheduleConflictsRequest) (*flowv1.CheckScheduleConflictsResponse, error) {
	if req.GetOperation() == nil {
		return nil, invalidArg("operation is required")
	}
	op, err := scheduledOpFromProto(req.GetOperation(), "operation")
	if err != nil {
		return nil, err
	}
	var exclude uuid.UUID
	if req.ExcludeScheduleId != nil {
		if exclude, err = operations.ParseUUID("exclude_schedule_id", req.ExcludeScheduleId); err != nil {
			return nil, err
		}
	}
	list, err := h.svc.Conflicts(ctx, h.pool, op.tmpl.Type, op.targets, exclude)
	if err != nil {
		return nil, scheduleError(err)
	}
	res := &flowv1.CheckScheduleConflictsResponse{Conflicts: make([]*flowv1.TaskSchedule, 0, len(list))}
	for _, s := range list {
		res.Conflicts = append(res.Conflicts, scheduleToProto(s))
	}
	return res, nil
}
