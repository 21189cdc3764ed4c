package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Handler implements the eight operation-run methods of v1.Flow.
// app embeds it in the one Flow handler. (It lives beside handler.go, not
// in it, so parallel work on the other groups merges cleanly.)
type Handler struct {
	pool *pgxpool.Pool
	runs *Service
	// allowOverlap makes v1 creates overlap unfinished runs silently, as
	// upstream does (FLOW_RUN_OVERLAP=allow); v1 cannot carry the flag.
	allowOverlap bool
}

// SetOverlap sets whether v1 CreateOperationRun may create a run whose
// racks overlap an unfinished run's (upstream's behaviour) or refuses it
// (false, the default: docs/change-safety.md "No silent overlap").
func (h *Handler) SetOverlap(allow bool) { h.allowOverlap = allow }

// NewHandler returns a Handler serving runs over pool.
func NewHandler(pool *pgxpool.Pool, runs *Service) *Handler {
	return &Handler{pool: pool, runs: runs}
}

// CreateOperationRun plans a run and writes it with all its targets (and
// its first child tasks) in one transaction.
func (h *Handler) CreateOperationRun(ctx context.Context, req *flowv1.CreateOperationRunRequest) (*flowv1.CreateOperationRunResponse, error) {
	in, err := createInputFromProto(req)
	if err != nil {
		return nil, runError(err)
	}
	in.CreatedBy = caller.Identity(ctx)
	in.AllowOverlap = h.allowOverlap
	var id uuid.UUID
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		id, err = h.runs.Create(ctx, tx, in)
		return err
	})
	if err != nil {
		return nil, runError(err)
	}
	return &flowv1.CreateOperationRunResponse{Id: &flowv1.UUID{Id: id.String()}}, nil
}

// GetOperationRun returns a run with its configuration, and stats when
// asked.
func (h *Handler) GetOperationRun(ctx context.Context, req *flowv1.GetOperationRunRequest) (*flowv1.GetOperationRunResponse, error) {
	id, err := operations.ParseUUID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	var run Run
	if req.GetIncludeStats() {
		run, err = h.runs.RunWithStats(ctx, id)
	} else {
		run, err = h.runs.Run(ctx, h.pool, id)
	}
	if err != nil {
		return nil, runError(err)
	}
	return &flowv1.GetOperationRunResponse{OperationRun: runToProto(run)}, nil
}

// runStatusToProto maps run statuses to v1's; RunPendingApproval, which
// the v1 enum lacks, shows as PENDING (summaryToProto), its message saying
// it awaits approval.
var runStatusToProto = map[RunStatus]flowv1.OperationRunStatus{
	RunPending: flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PENDING, RunRunning: flowv1.OperationRunStatus_OPERATION_RUN_STATUS_RUNNING,
	RunPaused: flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED, RunCompleted: flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED,
	RunCancelled: flowv1.OperationRunStatus_OPERATION_RUN_STATUS_CANCELLED, RunFailed: flowv1.OperationRunStatus_OPERATION_RUN_STATUS_FAILED,
	RunCompletedWithFailures: flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED_WITH_FAILURES,
}

var runReasonToProto = map[RunReason]flowv1.OperationRunStatusReason{
	ReasonNone:                 flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_NONE,
	ReasonOperatorPaused:       flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_OPERATOR_PAUSED,
	ReasonPhaseGate:            flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_PHASE_GATE,
	ReasonSafetyGate:           flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_SAFETY_GATE,
	ReasonConflictRetryTimeout: flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_CONFLICT_RETRY_TIMEOUT,
}

var targetStatusToProto = map[TargetStatus]flowv1.OperationRunTargetStatus{
	TargetPending: flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_PENDING, TargetClaimed: flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_CLAIMED,
	TargetBlocked: flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_BLOCKED, TargetSubmitted: flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_SUBMITTED,
	TargetCompleted: flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_COMPLETED, TargetFailed: flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_FAILED,
	TargetTerminated: flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_TERMINATED, TargetSkipped: flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_SKIPPED,
}

func reverse[K, V comparable](m map[K]V) map[V]K {
	out := make(map[V]K, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

var (
	runStatusFromProto    = reverse(runStatusToProto)
	runReasonFromProto    = reverse(runReasonToProto)
	targetStatusFromProto = reverse(targetStatusToProto)
)

// ListOperationRuns lists run summaries, newest first.
func (h *Handler) ListOperationRuns(ctx context.Context, req *flowv1.ListOperationRunsRequest) (*flowv1.ListOperationRunsResponse, error) {
	var f RunFilter
	if q := req.GetFilter().GetName(); q != nil && len(q.GetPatterns()) > 0 {
		f.Name = &inventory.StringQuery{Patterns: q.GetPatterns(), Wildcard: q.GetIsWildcard(), AnyOf: q.GetUseOr()}
	}
	for i, s := range req.GetFilter().GetStates() {
		var e struct {
			Status RunStatus
			Reason RunReason
		}
		if s.Status != nil {
			st, ok := runStatusFromProto[s.GetStatus()]
			if !ok {
				return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("filter.states[%d].status: unknown value %d", i, s.GetStatus()))
			}
			e.Status = st
		}
		if s.Reason != nil {
			re, ok := runReasonFromProto[s.GetReason()]
			if !ok {
				return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("filter.states[%d].reason: unknown value %d", i, s.GetReason()))
			}
			e.Reason = re
		}
		f.States = append(f.States, e)
	}
	for i, k := range req.GetFilter().GetOperationKinds() {
		t, err := operations.OperationTypeFromProto(fmt.Sprintf("filter.operation_kinds[%d].type", i), k.GetType())
		if err != nil {
			return nil, err
		}
		f.Kinds = append(f.Kinds, struct {
			Type operations.OperationType
			Code operations.OperationCode
		}{t, operations.OperationCode(k.GetCode())})
	}
	var err error
	if f.Offset, f.Limit, err = pageFromProto(req.Pagination); err != nil {
		return nil, err
	}
	runs, total, err := h.runs.ListRuns(ctx, h.pool, f)
	if err != nil {
		return nil, runError(err)
	}
	res := &flowv1.ListOperationRunsResponse{Total: int32(total), OperationRuns: make([]*flowv1.OperationRunSummary, 0, len(runs))}
	for _, r := range runs {
		res.OperationRuns = append(res.OperationRuns, summaryToProto(r))
	}
	return res, nil
}

func pageFromProto(p *flowv1.Pagination) (int, int, error) {
	if p == nil {
		return 0, 0, nil
	}
	if p.GetOffset() < 0 {
		return 0, 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pagination.offset: must not be negative, got %d", p.GetOffset()))
	}
	if p.GetLimit() < 0 || p.GetLimit() > operations.MaxListLimit {
		return 0, 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pagination.limit: must be between 0 and %d, got %d", operations.MaxListLimit, p.GetLimit()))
	}
	return int(p.GetOffset()), int(p.GetLimit()), nil
}

// ListOperationRunTargets lists a run's targets in a phase scope.
func (h *Handler) ListOperationRunTargets(ctx context.Context, req *flowv1.ListOperationRunTargetsRequest) (*flowv1.ListOperationRunTargetsResponse, error) {
	id, err := operations.ParseUUID("operation_run_id", req.GetOperationRunId())
	if err != nil {
		return nil, err
	}
	var f TargetFilter
	if req.GetStatus() != flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_UNKNOWN {
		st, ok := targetStatusFromProto[req.GetStatus()]
		if !ok {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("status: unknown value %d", req.GetStatus()))
		}
		f.Status = st
	}
	switch req.GetPhaseScope() {
	case flowv1.OperationRunTargetPhaseScope_OPERATION_RUN_TARGET_PHASE_SCOPE_UNKNOWN, flowv1.OperationRunTargetPhaseScope_OPERATION_RUN_TARGET_PHASE_SCOPE_CURRENT_PHASE:
		f.Scope = ScopeCurrentPhase
	case flowv1.OperationRunTargetPhaseScope_OPERATION_RUN_TARGET_PHASE_SCOPE_COMPLETED_PHASES:
		f.Scope = ScopeCompletedPhases
	case flowv1.OperationRunTargetPhaseScope_OPERATION_RUN_TARGET_PHASE_SCOPE_CURRENT_AND_COMPLETED_PHASES:
		f.Scope = ScopeCurrentAndCompleted
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("phase_scope: unknown value %d", req.GetPhaseScope()))
	}
	if f.Offset, f.Limit, err = pageFromProto(req.Pagination); err != nil {
		return nil, err
	}
	targets, total, err := h.runs.ListTargets(ctx, h.pool, id, f)
	if err != nil {
		return nil, runError(err)
	}
	res := &flowv1.ListOperationRunTargetsResponse{Total: int32(total), Targets: make([]*flowv1.OperationRunTarget, 0, len(targets))}
	for _, t := range targets {
		res.Targets = append(res.Targets, targetToProto(t))
	}
	return res, nil
}

// PauseOperationRun pauses a run (operator pause) and returns it.
func (h *Handler) PauseOperationRun(ctx context.Context, req *flowv1.PauseOperationRunRequest) (*flowv1.OperationRun, error) {
	return h.control(req.GetId(), func(id uuid.UUID) (Run, error) { return h.runs.Pause(ctx, id) })
}

// ResumeOperationRun resumes a paused run and returns it.
func (h *Handler) ResumeOperationRun(ctx context.Context, req *flowv1.ResumeOperationRunRequest) (*flowv1.OperationRun, error) {
	return h.control(req.GetId(), func(id uuid.UUID) (Run, error) { return h.runs.Resume(ctx, id) })
}

// AdvanceOperationRunPhase opens the next phase of a run paused at a phase
// gate and returns it.
func (h *Handler) AdvanceOperationRunPhase(ctx context.Context, req *flowv1.AdvanceOperationRunPhaseRequest) (*flowv1.OperationRun, error) {
	var expected *int
	if req.ExpectedPhaseIndex != nil {
		v := int(req.GetExpectedPhaseIndex())
		expected = &v
	}
	return h.control(req.GetId(), func(id uuid.UUID) (Run, error) { return h.runs.Advance(ctx, id, expected) })
}

// CancelOperationRun cancels a run and returns it.
func (h *Handler) CancelOperationRun(ctx context.Context, req *flowv1.CancelOperationRunRequest) (*flowv1.OperationRun, error) {
	return h.control(req.GetId(), func(id uuid.UUID) (Run, error) { return h.runs.Cancel(ctx, id, req.GetReason()) })
}

func (h *Handler) control(pid *flowv1.UUID, fn func(uuid.UUID) (Run, error)) (*flowv1.OperationRun, error) {
	id, err := operations.ParseUUID("id", pid)
	if err != nil {
		return nil, err
	}
	run, err := fn(id)
	if err != nil {
		return nil, runError(err)
	}
	return runToProto(run), nil
}

// runError maps operation-run errors (and the task and inventory errors
// of planning) to Connect codes.
func runError(err error) error {
	switch {
	case errors.Is(err, ErrRunInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrRunNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrRunState), errors.Is(err, ErrRunOverlap):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return operations.TaskError(err)
}

var componentTypeFromProto = map[flowv1.ComponentType]operations.ComponentType{
	flowv1.ComponentType_COMPONENT_TYPE_COMPUTE: operations.ComponentTypeCompute, flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH: operations.ComponentTypeNVSwitch,
	flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF: operations.ComponentTypePowerShelf, flowv1.ComponentType_COMPONENT_TYPE_TORSWITCH: operations.ComponentTypeToRSwitch,
	flowv1.ComponentType_COMPONENT_TYPE_UMS: operations.ComponentTypeUMS, flowv1.ComponentType_COMPONENT_TYPE_CDU: operations.ComponentTypeCDU,
}

var componentTypeToProtoMap = reverse(componentTypeFromProto)

func gateScopeFromProto(s flowv1.OperationRunSafetyGateScope, field string) (string, error) {
	switch s {
	case flowv1.OperationRunSafetyGateScope_OPERATION_RUN_SAFETY_GATE_SCOPE_UNKNOWN, flowv1.OperationRunSafetyGateScope_OPERATION_RUN_SAFETY_GATE_SCOPE_CURRENT_PHASE:
		return GateScopeCurrentPhase, nil
	case flowv1.OperationRunSafetyGateScope_OPERATION_RUN_SAFETY_GATE_SCOPE_CUMULATIVE_RUN:
		return GateScopeCumulativeRun, nil
	}
	return "", runInvalid(field, "unknown scope %d", s)
}

func durationFromProto(d *durationpb.Duration, field string) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, runInvalid(field, "%v", err)
	}
	v := d.AsDuration()
	if v <= 0 {
		return 0, runInvalid(field, "must be positive, got %s", v)
	}
	return v, nil
}

// createInputFromProto converts a create request; shape errors are
// *RunError naming the field. Rules that need defaults applied are
// checked by the service.
func createInputFromProto(req *flowv1.CreateOperationRunRequest) (CreateRunInput, error) {
	in := CreateRunInput{Name: req.GetName(), Description: req.GetDescription()}
	cfg := req.GetConfiguration()
	if cfg == nil {
		return in, runInvalid("configuration", "is required")
	}
	pct := cfg.GetSelector().GetPercentage()
	if pct == nil {
		return in, runInvalid("configuration.selector.percentage", "is required")
	}
	in.Selector = Selector{Percentage: int(pct.GetPercentage()), Seed: pct.GetSeed()}
	opts := cfg.GetOptions()
	if opts == nil {
		return in, runInvalid("configuration.options", "is required")
	}
	in.Options.MaxConcurrent = int(opts.GetMaxConcurrentTargets())
	for i, g := range opts.GetSafetyPolicy().GetGates() {
		f := fmt.Sprintf("configuration.options.safety_policy.gates[%d]", i)
		var gate Gate
		var err error
		switch v := g.GetGate().(type) {
		case *flowv1.OperationRunSafetyGate_FailureRate:
			gate.Kind, gate.Threshold = GateFailureRate, int(v.FailureRate.GetFailureThresholdPercent())
			gate.Scope, err = gateScopeFromProto(v.FailureRate.GetScope(), f+".failure_rate.scope")
		case *flowv1.OperationRunSafetyGate_FailureCount:
			gate.Kind, gate.Threshold = GateFailureCount, int(v.FailureCount.GetFailureThresholdCount())
			gate.Scope, err = gateScopeFromProto(v.FailureCount.GetScope(), f+".failure_count.scope")
		default:
			err = runInvalid(f, "give failure_rate or failure_count")
		}
		if err != nil {
			return in, err
		}
		in.Options.Gates = append(in.Options.Gates, gate)
	}
	if cp := opts.GetConflictPolicy(); cp != nil {
		retry := cp.GetRetry()
		if retry == nil {
			return in, runInvalid("configuration.options.conflict_policy", "only retry is supported")
		}
		var err error
		c := &in.Options.Conflict
		if c.RetryTimeout, err = durationFromProto(retry.GetRetryTimeout(), fRetry+".retry_timeout"); err != nil {
			return in, err
		}
		if c.InitialDelay, err = durationFromProto(retry.GetInitialRetryDelay(), fRetry+".initial_retry_delay"); err != nil {
			return in, err
		}
		if c.MaxDelay, err = durationFromProto(retry.GetMaxRetryDelay(), fRetry+".max_retry_delay"); err != nil {
			return in, err
		}
	}
	if op := opts.GetOrderingPolicy(); op != nil {
		switch v := op.GetOrdering().(type) {
		case *flowv1.OperationRunOrderingPolicy_Random:
			in.Options.Ordering = Ordering{Kind: OrderingRandom, Seed: v.Random.GetSeed()}
		case *flowv1.OperationRunOrderingPolicy_PhysicalLocation:
			in.Options.Ordering = Ordering{Kind: OrderingPhysicalLocation}
			switch v.PhysicalLocation.GetStrategy() {
			case flowv1.OperationRunPhysicalLocationOrdering_STRATEGY_ROW_BY_ROW:
				in.Options.Ordering.Strategy = StrategyRowByRow
			case flowv1.OperationRunPhysicalLocationOrdering_STRATEGY_ONE_PER_ROW_ROUND_ROBIN:
				in.Options.Ordering.Strategy = StrategyOnePerRowRoundRobin
			}
		}
	}
	if pp := opts.GetPhasePolicy(); pp != nil {
		switch v := pp.GetPlan().(type) {
		case *flowv1.OperationRunPhasePolicy_Equal:
			in.Options.Phases = PhasePlan{Kind: PhasesEqual, Count: int(v.Equal.GetPhaseCount())}
		case *flowv1.OperationRunPhasePolicy_Percentage:
			in.Options.Phases = PhasePlan{Kind: PhasesPercentage, Percentages: []int{}}
			for _, p := range v.Percentage.GetPhases() {
				in.Options.Phases.Percentages = append(in.Options.Phases.Percentages, int(p.GetPercentage()))
			}
		case *flowv1.OperationRunPhasePolicy_Count:
			in.Options.Phases = PhasePlan{Kind: PhasesCount, Counts: []int{}}
			for _, p := range v.Count.GetPhases() {
				in.Options.Phases.Counts = append(in.Options.Phases.Counts, int(p.GetCount()))
			}
		}
		in.Options.AutoAdvance = pp.GetAdvancePolicy().GetAutoAdvance()
	}
	op := cfg.GetOperation()
	fw := op.GetUpgradeFirmware()
	if fw == nil {
		return in, runInvalid("configuration.operation.upgrade_firmware", "is required (the only operation runs support)")
	}
	const fFW = "configuration.operation.upgrade_firmware"
	if fw.TargetSpec != nil {
		spec, err := inventory.TargetSpecFromProto(fw.GetTargetSpec(), fFW+".target_spec")
		if err != nil {
			return in, err
		}
		in.Targets = &spec
		in.Template.TargetSpec, _ = protojson.Marshal(fw.GetTargetSpec())
	}
	if filter := op.GetTargetScope().GetDefaultScopeComponentFilter(); filter != nil {
		in.HasFilter = true
		const fF = fScope + ".default_scope_component_filter"
		switch v := filter.GetFilter().(type) {
		case *flowv1.ComponentFilter_Types:
			for i, t := range v.Types.GetTypes() {
				ct, ok := componentTypeFromProto[t]
				if !ok {
					return in, runInvalid(fmt.Sprintf("%s.types.types[%d]", fF, i), "unknown component type %d", t)
				}
				in.FilterTypes = append(in.FilterTypes, inventory.ComponentType(ct))
			}
		case *flowv1.ComponentFilter_Components:
			spec, err := inventory.TargetSpecFromProto(&flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Components{Components: v.Components}}, fF)
			if err != nil {
				return in, err
			}
			in.FilterComponents = spec.Components
		}
		in.Template.ComponentFilter, _ = protojson.Marshal(filter)
	}
	for i, u := range op.GetTargetScope().GetExcludeOperationRunIds() {
		id, err := uuid.Parse(u.GetId())
		if err != nil {
			return in, runInvalid(fmt.Sprintf("%s.exclude_operation_run_ids[%d]", fScope, i), "invalid UUID %q", u.GetId())
		}
		in.Template.ExcludeRunIDs = append(in.Template.ExcludeRunIDs, id)
	}
	auth, err := operations.AuthFromProto(fw.GetAuthenticationData(), fw.GetSubTargets())
	if err != nil {
		return in, err
	}
	in.Auth = auth
	tm := &in.Template
	tm.TargetVersion, tm.Description, tm.SubTargets = fw.TargetVersion, fw.GetDescription(), fw.GetSubTargets()
	tm.OverrideReadinessCheck, tm.OverrideVersionCheck = fw.GetOverrideReadinessCheck(), fw.GetOverrideVersionCheck()
	if fw.StartTime != nil {
		tm.StartTime = fw.GetStartTime().GetSeconds()
	}
	if fw.EndTime != nil {
		tm.EndTime = fw.GetEndTime().GetSeconds()
	}
	if fw.QueueOptions != nil {
		tm.QueueOptions, _ = protojson.Marshal(fw.GetQueueOptions())
	}
	if fw.RuleId != nil {
		id, err := uuid.Parse(fw.GetRuleId().GetId())
		if err != nil {
			return in, runInvalid(fFW+".rule_id", "invalid UUID %q", fw.GetRuleId().GetId())
		}
		tm.RuleID = &id
	}
	return in, nil
}

func gateScopeToProto(s string) flowv1.OperationRunSafetyGateScope {
	if s == GateScopeCumulativeRun {
		return flowv1.OperationRunSafetyGateScope_OPERATION_RUN_SAFETY_GATE_SCOPE_CUMULATIVE_RUN
	}
	return flowv1.OperationRunSafetyGateScope_OPERATION_RUN_SAFETY_GATE_SCOPE_CURRENT_PHASE
}

// configToProto echoes the stored, defaulted configuration. Credentials are
// never echoed.
func configToProto(r Run) *flowv1.OperationRunConfiguration {
	o := r.Options
	opts := &flowv1.OperationRunOptions{
		MaxConcurrentTargets: int32(o.MaxConcurrent),
		SafetyPolicy:         &flowv1.OperationRunSafetyPolicy{},
		ConflictPolicy: &flowv1.OperationRunConflictPolicy{Strategy: &flowv1.OperationRunConflictPolicy_Retry{Retry: &flowv1.OperationRunConflictRetryPolicy{
			RetryTimeout: durationpb.New(o.Conflict.RetryTimeout), InitialRetryDelay: durationpb.New(o.Conflict.InitialDelay), MaxRetryDelay: durationpb.New(o.Conflict.MaxDelay),
		}}},
		OrderingPolicy: &flowv1.OperationRunOrderingPolicy{},
		PhasePolicy:    &flowv1.OperationRunPhasePolicy{AdvancePolicy: &flowv1.OperationRunPhaseAdvancePolicy{AutoAdvance: o.AutoAdvance}},
	}
	for _, g := range o.Gates {
		var pg *flowv1.OperationRunSafetyGate
		if g.Kind == GateFailureRate {
			pg = &flowv1.OperationRunSafetyGate{Gate: &flowv1.OperationRunSafetyGate_FailureRate{FailureRate: &flowv1.OperationRunFailureRateGate{Scope: gateScopeToProto(g.Scope), FailureThresholdPercent: int32(g.Threshold)}}}
		} else {
			pg = &flowv1.OperationRunSafetyGate{Gate: &flowv1.OperationRunSafetyGate_FailureCount{FailureCount: &flowv1.OperationRunFailureCountGate{Scope: gateScopeToProto(g.Scope), FailureThresholdCount: int32(g.Threshold)}}}
		}
		opts.SafetyPolicy.Gates = append(opts.SafetyPolicy.Gates, pg)
	}
	if o.Ordering.Kind == OrderingPhysicalLocation {
		st := flowv1.OperationRunPhysicalLocationOrdering_STRATEGY_ROW_BY_ROW
		if o.Ordering.Strategy == StrategyOnePerRowRoundRobin {
			st = flowv1.OperationRunPhysicalLocationOrdering_STRATEGY_ONE_PER_ROW_ROUND_ROBIN
		}
		opts.OrderingPolicy.Ordering = &flowv1.OperationRunOrderingPolicy_PhysicalLocation{PhysicalLocation: &flowv1.OperationRunPhysicalLocationOrdering{Strategy: st}}
	} else {
		opts.OrderingPolicy.Ordering = &flowv1.OperationRunOrderingPolicy_Random{Random: &flowv1.OperationRunRandomOrdering{Seed: o.Ordering.Seed}}
	}
	switch o.Phases.Kind {
	case PhasesPercentage:
		pp := &flowv1.PercentageOperationRunPhases{}
		for _, v := range o.Phases.Percentages {
			pp.Phases = append(pp.Phases, &flowv1.OperationRunPercentagePhase{Percentage: int32(v)})
		}
		opts.PhasePolicy.Plan = &flowv1.OperationRunPhasePolicy_Percentage{Percentage: pp}
	case PhasesCount:
		cp := &flowv1.CountOperationRunPhases{}
		for _, v := range o.Phases.Counts {
			cp.Phases = append(cp.Phases, &flowv1.OperationRunCountPhase{Count: int32(v)})
		}
		opts.PhasePolicy.Plan = &flowv1.OperationRunPhasePolicy_Count{Count: cp}
	default:
		opts.PhasePolicy.Plan = &flowv1.OperationRunPhasePolicy_Equal{Equal: &flowv1.EqualOperationRunPhases{PhaseCount: int32(o.Phases.Count)}}
	}
	tm := r.Template
	fw := &flowv1.UpgradeFirmwareRequest{
		TargetVersion: tm.TargetVersion, Description: tm.Description, SubTargets: tm.SubTargets,
		OverrideReadinessCheck: tm.OverrideReadinessCheck, OverrideVersionCheck: tm.OverrideVersionCheck,
	}
	if len(tm.TargetSpec) > 0 {
		fw.TargetSpec = &flowv1.OperationTargetSpec{}
		_ = protojson.Unmarshal(tm.TargetSpec, fw.TargetSpec)
	}
	if len(tm.QueueOptions) > 0 {
		fw.QueueOptions = &flowv1.QueueOptions{}
		_ = protojson.Unmarshal(tm.QueueOptions, fw.QueueOptions)
	}
	if tm.StartTime != 0 {
		fw.StartTime = timestamppb.New(time.Unix(tm.StartTime, 0))
	}
	if tm.EndTime != 0 {
		fw.EndTime = timestamppb.New(time.Unix(tm.EndTime, 0))
	}
	if tm.RuleID != nil {
		fw.RuleId = &flowv1.UUID{Id: tm.RuleID.String()}
	}
	scope := &flowv1.OperationRunTargetScope{}
	for _, id := range tm.ExcludeRunIDs {
		scope.ExcludeOperationRunIds = append(scope.ExcludeOperationRunIds, &flowv1.UUID{Id: id.String()})
	}
	if len(tm.ComponentFilter) > 0 {
		scope.DefaultScopeComponentFilter = &flowv1.ComponentFilter{}
		_ = protojson.Unmarshal(tm.ComponentFilter, scope.DefaultScopeComponentFilter)
	}
	return &flowv1.OperationRunConfiguration{
		Selector:  &flowv1.OperationRunSelector{Selector: &flowv1.OperationRunSelector_Percentage{Percentage: &flowv1.PercentageSelector{Percentage: int32(r.Selector.Percentage), Seed: r.Selector.Seed}}},
		Options:   opts,
		Operation: &flowv1.OperationRunOperation{Operation: &flowv1.OperationRunOperation_UpgradeFirmware{UpgradeFirmware: fw}, TargetScope: scope},
	}
}

func summaryToProto(r Run) *flowv1.OperationRunSummary {
	code := string(r.Code)
	status := runStatusToProto[r.Status]
	if r.Status == RunPendingApproval {
		status = flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PENDING
	}
	return &flowv1.OperationRunSummary{
		Id: &flowv1.UUID{Id: r.ID.String()}, Name: r.Name, Description: r.Description,
		OperationKind: &flowv1.OperationKind{Type: operations.OperationTypeToProto(r.Type), Code: &code},
		State:         &flowv1.OperationRunState{Status: status, Reason: runReasonToProto[r.Reason]},
		StatusMessage: r.Message, TotalPhases: int32(r.TotalPhases),
		CreatedAt: timestamppb.New(r.CreatedAt), UpdatedAt: timestamppb.New(r.UpdatedAt),
		StartedAt: operations.Timestamp(r.StartedAt), FinishedAt: operations.Timestamp(r.FinishedAt),
	}
}

func phaseStatsToProto(s PhaseStats) *flowv1.OperationRunPhaseStats {
	return &flowv1.OperationRunPhaseStats{
		PhaseIndex: int32(s.Phase), SelectedTargets: int32(s.Selected),
		OutcomeCounts: &flowv1.OperationRunTargetOutcomeCounts{
			Completed: int32(s.Completed), Failed: int32(s.Failed), Terminated: int32(s.Terminated), Skipped: int32(s.Skipped),
		},
	}
}

func runToProto(r Run) *flowv1.OperationRun {
	out := &flowv1.OperationRun{Summary: summaryToProto(r), Configuration: configToProto(r)}
	if r.Stats != nil {
		out.Stats = &flowv1.OperationRunStats{CurrentPhaseStats: phaseStatsToProto(r.Stats.Current), CumulativePhaseStats: phaseStatsToProto(r.Stats.Cumulative)}
	}
	return out
}

func targetToProto(t Target) *flowv1.OperationRunTarget {
	out := &flowv1.OperationRunTarget{
		Id: &flowv1.UUID{Id: t.ID.String()}, OperationRunId: &flowv1.UUID{Id: t.RunID.String()}, RackId: &flowv1.UUID{Id: t.RackID.String()},
		SequenceIndex: int32(t.Sequence), PhaseIndex: int32(t.Phase), Status: targetStatusToProto[t.Status], Message: t.Message,
		ComponentsByType: &flowv1.ComponentsByType{}, CreatedAt: timestamppb.New(t.CreatedAt), UpdatedAt: timestamppb.New(t.UpdatedAt),
		RackExternalId: t.RackExternalID,
	}
	if t.TaskID != nil {
		out.TaskId = &flowv1.UUID{Id: t.TaskID.String()}
	}
	for _, ct := range componentTypes {
		ids := t.Components[ct]
		if len(ids) == 0 {
			continue
		}
		g := &flowv1.ComponentsForType{Type: componentTypeToProtoMap[ct]}
		for _, id := range ids {
			g.ComponentIds = append(g.ComponentIds, &flowv1.UUID{Id: id.String()})
		}
		out.ComponentsByType.Groups = append(out.ComponentsByType.Groups, g)
	}
	return out
}

// componentTypes are the component types in the order targets list them.
var componentTypes = []operations.ComponentType{
	operations.ComponentTypeCompute, operations.ComponentTypeNVSwitch, operations.ComponentTypePowerShelf,
	operations.ComponentTypeToRSwitch, operations.ComponentTypeUMS, operations.ComponentTypeCDU,
}
