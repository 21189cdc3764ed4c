package rollout

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/rollout/internal/dbsqlc"
)

// DefaultMaxCandidates is the candidate-scope cap of a run when none is
// configured (upstream's DefaultMaxCandidateScopeTargets).
const DefaultMaxCandidates = 100

// RunWaker arranges, through tx, for Service.Wake(runID) to run at at:
// the end of a conflict backoff or of the retry timeout.
type RunWaker func(ctx context.Context, tx pgx.Tx, runID uuid.UUID, at time.Time) error

// Service runs operation runs (spec/orchestration.md §2, docs/rollouts.md):
// planning at create, then a state machine advanced by events — the end of
// a child task (TaskEnded, inside the task's last checkpoint transaction),
// an operator control, or a wake-up job for a backoff — always under the
// run's row lock, with child tasks written in the transaction that claims
// their targets.
type Service struct {
	pool          *pgxpool.Pool
	q             *dbsqlc.Queries
	tasks         *operations.Tasks
	inv           *inventory.Service
	keys          *firmware.Keyring
	wake          RunWaker
	logger        *slog.Logger
	maxCandidates int
	// windows, if set, holds targets outside maintenance windows
	// (SetWindowGate); nowFunc is the clock (SetClock).
	windows  WindowGate
	nowFunc  func() time.Time
	approver Approver
	// onChange hears of status and phase changes (OnRunChange).
	onChange RunChangeFunc
}

// Config holds what Service needs. MaxCandidates ≤ 0 means
// DefaultMaxCandidates; Wake nil means backoffs end at the next sweep.
type Config struct {
	Pool  *pgxpool.Pool
	Tasks *operations.Tasks
	// Inv and Keys are the task manager's inventory and keyring (Keys nil:
	// no encryption key configured, runs with credentials are refused).
	Inv           *inventory.Service
	Keys          *firmware.Keyring
	Wake          RunWaker
	Logger        *slog.Logger
	MaxCandidates int
	// Approver, when set, is asked whether a new run needs a second
	// person's approval.
	Approver Approver
}

// NewService returns the operation-run service. Register its TasksEnded
// with cfg.Tasks.OnTaskEnd.
func NewService(cfg Config) *Service {
	maxC := cfg.MaxCandidates
	if maxC <= 0 {
		maxC = DefaultMaxCandidates
	}
	return &Service{
		pool: cfg.Pool, q: dbsqlc.New(), tasks: cfg.Tasks, inv: cfg.Inv, keys: cfg.Keys,
		wake: cfg.Wake, logger: cfg.Logger, maxCandidates: maxC, approver: cfg.Approver,
	}
}

// CreateRunInput is a create request. Targets nil means the default scope:
// every rack with components, narrowed by FilterTypes or FilterComponents.
type CreateRunInput struct {
	Name, Description string
	Selector          Selector
	Options           RunOptions
	Template          RunTemplate
	Targets           *inventory.TargetSpec
	FilterTypes       []inventory.ComponentType
	FilterComponents  []inventory.ComponentRef
	// HasFilter is set when the request carried a component filter (even
	// an empty one), which is illegal beside Targets.
	HasFilter bool
	Auth      firmware.AuthData
	// CreatedBy is the creating caller's identity (caller.Identity); every
	// child task the run submits records it as its submitter.
	CreatedBy string
	// Waves, when set, fixes the phases: phase i runs exactly the racks of
	// Waves[i] (each must be a candidate), in the order given, in place of
	// selection, ordering and the phase plan (firmware baselines plan
	// waves that keep each NVLink domain whole). Selector and Options'
	// ordering and phase plan are then recorded as 100 %, physical
	// location and one count per wave.
	Waves [][]uuid.UUID
	// AllowOverlap creates the run even when its racks overlap an
	// unfinished run (Flow's own create, FLOW_RUN_OVERLAP=allow for v1).
	AllowOverlap bool `json:"-"`
}

// Field paths of the create request, for error messages.
const (
	fOptions  = "configuration.options"
	fSelector = "configuration.selector.percentage"
	fPhases   = "configuration.options.phase_policy"
	fRetry    = "configuration.options.conflict_policy.retry"
	fScope    = "configuration.operation.target_scope"
)

// normalize checks in and fills every default (§2.2).
func normalize(in *CreateRunInput) error {
	if len(in.Waves) > 0 {
		in.Selector.Percentage = 100
		in.Options.Ordering = Ordering{Kind: OrderingPhysicalLocation, Strategy: StrategyRowByRow}
		counts := make([]int, len(in.Waves))
		for i, w := range in.Waves {
			counts[i] = len(w)
		}
		in.Options.Phases = PhasePlan{Kind: PhasesCount, Counts: counts}
	}
	in.Name = strings.TrimSpace(in.Name)
	if in.Name == "" {
		return runInvalid("name", "is required")
	}
	if len(in.Name) > 255 {
		return runInvalid("name", "must be at most 255 characters")
	}
	if p := in.Selector.Percentage; p < 1 || p > 100 {
		return runInvalid(fSelector+".percentage", "must be between 1 and 100, got %d", p)
	}
	if in.Selector.Seed == "" {
		in.Selector.Seed = uuid.NewString()
	}
	o := &in.Options
	if o.MaxConcurrent <= 0 {
		return runInvalid(fOptions+".max_concurrent_targets", "must be greater than 0, got %d", o.MaxConcurrent)
	}
	if len(o.Gates) == 0 {
		return runInvalid(fOptions+".safety_policy.gates", "at least one safety gate is required")
	}
	for i := range o.Gates {
		g := &o.Gates[i]
		f := fmt.Sprintf("%s.safety_policy.gates[%d]", fOptions, i)
		if g.Scope == "" {
			g.Scope = GateScopeCurrentPhase
		}
		switch g.Kind {
		case GateFailureRate:
			if g.Threshold < 1 || g.Threshold > 100 {
				return runInvalid(f+".failure_rate.failure_threshold_percent", "must be between 1 and 100, got %d", g.Threshold)
			}
		case GateFailureCount:
			if g.Threshold <= 0 {
				return runInvalid(f+".failure_count.failure_threshold_count", "must be greater than 0, got %d", g.Threshold)
			}
		default:
			return runInvalid(f, "give failure_rate or failure_count")
		}
	}
	c := &o.Conflict
	if c.RetryTimeout == 0 {
		c.RetryTimeout = DefaultRetryTimeout
	}
	if c.InitialDelay == 0 {
		c.InitialDelay = DefaultInitialDelay
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = DefaultMaxDelay
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"retry_timeout", c.RetryTimeout}, {"initial_retry_delay", c.InitialDelay}, {"max_retry_delay", c.MaxDelay}} {
		if d.v < 0 {
			return runInvalid(fRetry+"."+d.name, "must be positive, got %s", d.v)
		}
	}
	if c.MaxDelay < c.InitialDelay {
		return runInvalid(fRetry+".max_retry_delay", "must not be less than initial_retry_delay (%s < %s)", c.MaxDelay, c.InitialDelay)
	}
	switch o.Ordering.Kind {
	case "", OrderingRandom:
		o.Ordering.Kind, o.Ordering.Strategy = OrderingRandom, ""
		if o.Ordering.Seed == "" {
			o.Ordering.Seed = uuid.NewString()
		}
	case OrderingPhysicalLocation:
		if o.Ordering.Strategy != StrategyRowByRow && o.Ordering.Strategy != StrategyOnePerRowRoundRobin {
			return runInvalid(fOptions+".ordering_policy.physical_location.strategy", "give STRATEGY_ROW_BY_ROW or STRATEGY_ONE_PER_ROW_ROUND_ROBIN")
		}
		o.Ordering.Seed = ""
	default:
		return runInvalid(fOptions+".ordering_policy", "unknown ordering %q", o.Ordering.Kind)
	}
	p := &o.Phases
	switch p.Kind {
	case "":
		*p = PhasePlan{Kind: PhasesEqual, Count: 1}
	case PhasesEqual:
		if p.Count <= 0 {
			return runInvalid(fPhases+".equal.phase_count", "must be greater than 0, got %d", p.Count)
		}
	case PhasesPercentage:
		if len(p.Percentages) == 0 {
			return runInvalid(fPhases+".percentage.phases", "at least one phase is required")
		}
		sum := 0
		for i, v := range p.Percentages {
			if v < 1 || v > 100 {
				return runInvalid(fmt.Sprintf("%s.percentage.phases[%d].percentage", fPhases, i), "must be between 1 and 100, got %d", v)
			}
			sum += v
		}
		if sum != 100 {
			return runInvalid(fPhases+".percentage.phases", "percentages must add up to 100, got %d", sum)
		}
	case PhasesCount:
		if len(p.Counts) == 0 {
			return runInvalid(fPhases+".count.phases", "at least one phase is required")
		}
		for i, v := range p.Counts {
			if v <= 0 {
				return runInvalid(fmt.Sprintf("%s.count.phases[%d].count", fPhases, i), "must be greater than 0, got %d", v)
			}
		}
	default:
		return runInvalid(fPhases, "unknown phase plan %q", p.Kind)
	}
	if in.Targets != nil && in.HasFilter {
		return runInvalid(fScope+".default_scope_component_filter", "must not be combined with an explicit target_spec")
	}
	if in.Template.StartTime != 0 && in.Template.EndTime != 0 && in.Template.EndTime < in.Template.StartTime {
		return runInvalid("configuration.operation.upgrade_firmware.end_time", "must not be before start_time")
	}
	return nil
}

// Create validates and plans a run, then writes it and all its targets
// through tx, and makes the first pass (claiming the first targets and
// writing their child tasks) in the same transaction; the caller commits.
// Nothing is written on error: a *RunError (ErrRunInvalid), ErrRunNotFound
// for an unknown excluded run, ErrRunOverlap (unless in.AllowOverlap),
// operations.ErrNoEncryptionKey, or an inventory error of resolving the
// scope. A run over the approval threshold is written awaiting approval
// (RunPendingApproval) and makes no pass: Created.ApprovalID says so.
func (r *Service) Create(ctx context.Context, tx pgx.Tx, in CreateRunInput) (uuid.UUID, error) {
	c, err := r.CreatePlanned(ctx, tx, in)
	return c.ID, err
}

// Created is a run Create wrote.
type Created struct {
	ID uuid.UUID
	// ApprovalID is the approval request the run waits for; uuid.Nil when
	// it started at once.
	ApprovalID uuid.UUID
	Plan       Plan
}

// CreatePlanned is Create, answering the plan it froze and the approval
// request it waits for, if any.
func (r *Service) CreatePlanned(ctx context.Context, tx pgx.Tx, in CreateRunInput) (Created, error) {
	plan, err := r.plan(ctx, tx, in)
	if err != nil {
		return Created{}, err
	}
	if !in.AllowOverlap {
		if err := r.refuseOverlap(ctx, tx, plan); err != nil {
			return Created{}, err
		}
	}
	return r.write(ctx, tx, plan)
}

// plan validates and plans in as Create freezes it, writing nothing: the
// normalized input (seeds filled, credentials sealed), its targets and its
// hash. Preview and Create share it.
func (r *Service) plan(ctx context.Context, tx pgx.Tx, in CreateRunInput) (Plan, error) {
	if err := normalize(&in); err != nil {
		return Plan{}, err
	}
	if !in.Auth.Empty() {
		if r.keys == nil {
			return Plan{}, operations.ErrNoEncryptionKey
		}
		env, err := r.keys.Seal(in.Auth)
		if err != nil {
			return Plan{}, err
		}
		in.Template.Auth = env
		in.Auth = firmware.AuthData{}
	}
	in.Template.ExcludeRunIDs = uniq(in.Template.ExcludeRunIDs)
	taken, err := r.excluded(ctx, tx, in.Template.ExcludeRunIDs)
	if err != nil {
		return Plan{}, err
	}
	cands, err := r.candidates(ctx, tx, in)
	if err != nil {
		return Plan{}, err
	}
	cands = excludeComponents(cands, taken)
	if len(cands) == 0 {
		return Plan{}, runInvalid("configuration.operation", "the candidate scope is empty (no racks with matching components left after exclusions)")
	}
	p := Plan{Input: in}
	if len(in.Waves) > 0 {
		p.Targets, err = PlanWaves(cands, in.Waves)
		p.Phases = len(in.Waves)
	} else {
		p.Targets, p.Phases, err = PlanTargets(cands, in.Selector, in.Options)
	}
	if err != nil {
		return Plan{}, err
	}
	p.Hash = p.hash()
	return p, nil
}

// write writes plan's run and targets through tx, then either asks for
// approval or makes the run's first pass.
func (r *Service) write(ctx context.Context, tx pgx.Tx, plan Plan) (Created, error) {
	in := plan.Input
	approve := false
	if r.approver != nil {
		var err error
		if approve, err = r.approver.Required(ctx, tx, len(plan.Targets)); err != nil {
			return Created{}, err
		}
	}
	status := string(RunPending)
	if approve {
		status = string(RunPendingApproval)
	}
	sel, _ := json.Marshal(in.Selector)
	opts, _ := json.Marshal(in.Options)
	tmpl, _ := json.Marshal(in.Template)
	row, err := r.q.OperationRunInsert(ctx, tx, dbsqlc.OperationRunInsertParams{
		Name: in.Name, Description: in.Description, Selector: sel, Options: opts, OperationTemplate: tmpl,
		OperationType: string(operations.OperationTypeFirmwareControl), OperationCode: string(operations.CodeUpgrade), TotalPhases: int32(plan.Phases),
		CreatedBy: in.CreatedBy, Status: status,
	})
	if err != nil {
		return Created{}, fmt.Errorf("insert operation run: %w", err)
	}
	rows := make([]dbsqlc.OperationRunTargetInsertParams, len(plan.Targets))
	for i, p := range plan.Targets {
		comps, _ := json.Marshal(p.Components)
		rows[i] = dbsqlc.OperationRunTargetInsertParams{
			OperationRunID: row.ID, RackID: p.RackID, SequenceIndex: int32(p.Sequence), PhaseIndex: int32(p.Phase), ComponentsByType: comps,
		}
	}
	if _, err := r.q.OperationRunTargetInsert(ctx, tx, rows); err != nil {
		return Created{}, fmt.Errorf("insert operation run targets: %w", err)
	}
	out := Created{ID: row.ID, Plan: plan}
	if approve {
		input, err := json.Marshal(in)
		if err != nil {
			return Created{}, fmt.Errorf("encode run input: %w", err)
		}
		out.ApprovalID, err = r.approver.Request(ctx, tx, ApprovalKindRun, []uuid.UUID{row.ID}, len(plan.Targets),
			fmt.Sprintf("operation run %q (%s): firmware upgrade of %s in %s", in.Name, row.ID, plural(len(plan.Targets), "rack"), plural(int(plan.Phases), "phase")),
			in.CreatedBy, plan.Hash, plan.View(), input)
		if err != nil {
			return Created{}, err
		}
		msg := fmt.Sprintf("awaiting approval of request %s (plan hash %s)", out.ApprovalID, plan.Hash)
		if err := r.q.OperationRunUpdate(ctx, tx, dbsqlc.OperationRunUpdateParams{
			ID: row.ID, Status: status, StatusReason: string(ReasonNone), StatusMessage: msg,
		}); err != nil {
			return Created{}, err
		}
		return out, nil
	}
	if err := r.tick(ctx, tx, row.ID); err != nil {
		return Created{}, err
	}
	return out, nil
}

// excluded returns, per rack, the components earlier runs targeted.
func (r *Service) excluded(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (map[uuid.UUID]map[operations.ComponentType][]uuid.UUID, error) {
	taken := map[uuid.UUID]map[operations.ComponentType][]uuid.UUID{}
	if len(ids) == 0 {
		return taken, nil
	}
	found, err := r.q.OperationRunExist(ctx, tx, ids)
	if err != nil {
		return nil, fmt.Errorf("look up excluded runs: %w", err)
	}
	for _, id := range ids {
		if !slices.Contains(found, id) {
			return nil, fmt.Errorf("%w: %s.exclude_operation_run_ids: %s", ErrRunNotFound, fScope, id)
		}
	}
	rows, err := r.q.OperationRunTargetComponents(ctx, tx, ids)
	if err != nil {
		return nil, fmt.Errorf("read excluded targets: %w", err)
	}
	for _, row := range rows {
		var comps map[operations.ComponentType][]uuid.UUID
		if err := json.Unmarshal(row.ComponentsByType, &comps); err != nil {
			return nil, fmt.Errorf("decode excluded target: %w", err)
		}
		m := taken[row.RackID]
		if m == nil {
			m = map[operations.ComponentType][]uuid.UUID{}
			taken[row.RackID] = m
		}
		for ct, cs := range comps {
			m[ct] = append(m[ct], cs...)
		}
	}
	return taken, nil
}

// candidates resolves the base scope (§2.3 step 1) and applies the cap.
func (r *Service) candidates(ctx context.Context, tx pgx.Tx, in CreateRunInput) ([]Candidate, error) {
	var spec inventory.TargetSpec
	perComponent := false
	switch {
	case in.Targets != nil:
		spec = *in.Targets
		perComponent = len(spec.Components) > 0
	case len(in.FilterComponents) > 0:
		spec.Components = in.FilterComponents
		perComponent = true
	default:
		return r.inventoryCandidates(ctx, tx, in.FilterTypes)
	}
	sels, err := r.inv.ResolveTargets(ctx, tx, spec)
	if err != nil {
		return nil, err
	}
	var out []Candidate
	count := 0
	for _, sel := range sels {
		if len(sel.Components) == 0 {
			continue
		}
		c := Candidate{
			RackID: sel.Rack.ID, Components: map[operations.ComponentType][]uuid.UUID{},
			Row: locationRow(sel.Rack.Location), Position: sel.Rack.Location.Position,
		}
		for _, comp := range sel.Components {
			c.Components[operations.ComponentType(comp.Type)] = append(c.Components[operations.ComponentType(comp.Type)], comp.ID)
		}
		out = append(out, c)
		if perComponent {
			count += len(sel.Components)
		} else {
			count++
		}
	}
	if err := r.checkCap(count); err != nil {
		return nil, err
	}
	return out, nil
}

// inventoryCandidates resolves the default scope, every rack with
// components (of types, when given), in bulk: two queries, where resolving
// a spec that lists every rack costs a query per rack and reads every
// component's BMCs. It plans the same candidates, in the same order.
func (r *Service) inventoryCandidates(ctx context.Context, tx pgx.Tx, types []inventory.ComponentType) ([]Candidate, error) {
	racks, err := r.inv.ResolveInventory(ctx, tx, types)
	if err != nil {
		return nil, err
	}
	if len(racks) == 0 {
		return nil, runInvalid("configuration.operation", "the inventory has no racks")
	}
	var out []Candidate
	for _, rack := range racks {
		if len(rack.Components) == 0 {
			continue
		}
		c := Candidate{
			RackID: rack.ID, Components: map[operations.ComponentType][]uuid.UUID{},
			Row: locationRow(rack.Location), Position: rack.Location.Position,
		}
		for _, comp := range rack.Components {
			c.Components[operations.ComponentType(comp.Type)] = append(c.Components[operations.ComponentType(comp.Type)], comp.ID)
		}
		out = append(out, c)
	}
	if err := r.checkCap(len(out)); err != nil {
		return nil, err
	}
	return out, nil
}

// locationRow is a rack's row for physical-location ordering.
func locationRow(l inventory.Location) string {
	return l.Region + "/" + l.Datacenter + "/" + l.Room
}

// checkCap refuses a candidate scope of more than maxCandidates targets.
func (r *Service) checkCap(count int) error {
	if count > r.maxCandidates {
		return runInvalid("configuration.operation", "the candidate scope has %d targets, more than the limit of %d (FLOW_OPERATION_RUN_MAX_CANDIDATES)", count, r.maxCandidates)
	}
	return nil
}

// Run returns run id, without stats, or ErrRunNotFound.
func (r *Service) Run(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (Run, error) {
	row, err := r.q.OperationRunGetByID(ctx, dbtx, id)
	if err != nil {
		return Run{}, runGetError(id, err)
	}
	return runFromRow(row)
}

// RunWithStats returns run id with its stats, or ErrRunNotFound: the run
// and its targets' counts are read in one round trip, as generic plans
// (both reach rows by key, so their plans hold for any run and history;
// planned on each call instead, they cost more to plan than to run).
func (r *Service) RunWithStats(ctx context.Context, id uuid.UUID) (Run, error) {
	row, counts, err := r.q.OperationRunGetWithPhaseCounts(ctx, db.GenericPlans{Pool: r.pool}, id)
	if err != nil {
		return Run{}, runGetError(id, err)
	}
	run, err := runFromRow(row)
	if err != nil {
		return Run{}, err
	}
	st := RunStats{Current: PhaseStats{Phase: run.CurrentPhase}, Cumulative: PhaseStats{Phase: run.CurrentPhase}}
	for _, c := range counts {
		ph := int(c.PhaseIndex)
		if ph > run.CurrentPhase {
			continue
		}
		add := func(s *PhaseStats) {
			s.Selected += int(c.N)
			switch TargetStatus(c.Status) {
			case TargetCompleted:
				s.Completed += int(c.N)
			case TargetFailed:
				s.Failed += int(c.N)
			case TargetTerminated:
				s.Terminated += int(c.N)
			case TargetSkipped:
				s.Skipped += int(c.N)
			}
		}
		add(&st.Cumulative)
		if ph == run.CurrentPhase {
			add(&st.Current)
		}
	}
	run.Stats = &st
	return run, nil
}

// runGetError is the error of reading run id.
func runGetError(id uuid.UUID, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	return fmt.Errorf("get operation run %s: %w", id, err)
}

func runFromRow(row dbsqlc.OperationRun) (Run, error) {
	run := Run{
		ID: row.ID, Name: row.Name, Description: row.Description,
		Status: RunStatus(row.Status), Reason: RunReason(row.StatusReason), Message: row.StatusMessage,
		Type: operations.OperationType(row.OperationType), Code: operations.OperationCode(row.OperationCode),
		CurrentPhase: int(row.CurrentPhaseIndex), TotalPhases: int(row.TotalPhases),
		CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt, StartedAt: row.StartedAt, FinishedAt: row.FinishedAt,
		CreatedBy: row.CreatedBy,
	}
	if err := errors.Join(json.Unmarshal(row.Selector, &run.Selector), json.Unmarshal(row.Options, &run.Options),
		json.Unmarshal(row.OperationTemplate, &run.Template)); err != nil {
		return run, fmt.Errorf("decode operation run %s: %w", row.ID, err)
	}
	return run, nil
}

// RunFilter selects runs for ListRuns. A state with an empty status or
// reason matches any; a kind with an empty code matches every code.
type RunFilter struct {
	Name   *inventory.StringQuery
	States []struct {
		Status RunStatus
		Reason RunReason
	}
	Kinds []struct {
		Type operations.OperationType
		Code operations.OperationCode
	}
	Offset, Limit int
}

// ListRuns returns one page of runs, newest first, and the total matching.
func (r *Service) ListRuns(ctx context.Context, dbtx db.DBTX, f RunFilter) ([]Run, int, error) {
	if f.Limit <= 0 {
		f.Limit = operations.DefaultListLimit
	}
	states, kinds := []string{}, []string{}
	names, nameAny := likePatterns(f.Name)
	for _, s := range f.States {
		states = append(states, cmp.Or(string(s.Status), "%")+"|"+cmp.Or(string(s.Reason), "%"))
	}
	for _, k := range f.Kinds {
		kinds = append(kinds, string(k.Type)+"|"+cmp.Or(string(k.Code), "%"))
	}
	rows, err := r.q.OperationRunList(ctx, dbtx, dbsqlc.OperationRunListParams{
		NamePatterns: names, NameAny: nameAny, States: states, Kinds: kinds, RowLimit: int32(f.Limit), RowOffset: int32(f.Offset),
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list operation runs: %w", err)
	}
	total, err := r.q.OperationRunCount(ctx, dbtx, dbsqlc.OperationRunCountParams{NamePatterns: names, NameAny: nameAny, States: states, Kinds: kinds})
	if err != nil {
		return nil, 0, fmt.Errorf("count operation runs: %w", err)
	}
	out := make([]Run, 0, len(rows))
	for _, row := range rows {
		run, err := runFromRow(row)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, run)
	}
	return out, int(total), nil
}

// Phase scopes of ListTargets.
const (
	ScopeCurrentPhase        = "current_phase"
	ScopeCompletedPhases     = "completed_phases"
	ScopeCurrentAndCompleted = "current_and_completed_phases"
)

// TargetFilter selects targets for ListTargets.
type TargetFilter struct {
	Status        TargetStatus // "": any
	Scope         string       // "": ScopeCurrentPhase
	Offset, Limit int
}

// ListTargets returns one page of a run's targets in the phase scope,
// ordered by phase then sequence, and the total matching. The current phase
// is the run's current phase index while the run is not terminal; a
// terminal run has none, and all its phases count as completed. Future
// phases are never listed.
func (r *Service) ListTargets(ctx context.Context, dbtx db.DBTX, runID uuid.UUID, f TargetFilter) ([]Target, int, error) {
	run, err := r.Run(ctx, dbtx, runID)
	if err != nil {
		return nil, 0, err
	}
	if f.Limit <= 0 {
		f.Limit = operations.DefaultListLimit
	}
	cur, last := run.CurrentPhase, run.CurrentPhase
	if run.Status.Terminal() {
		cur, last = -1, run.TotalPhases-1
	}
	lo, hi := cur, cur
	switch f.Scope {
	case ScopeCompletedPhases:
		lo, hi = 0, cur-1
		if cur < 0 {
			hi = last
		}
	case ScopeCurrentAndCompleted:
		lo, hi = 0, last
	}
	if hi < lo || hi < 0 {
		return []Target{}, 0, nil
	}
	rows, err := r.q.OperationRunTargetList(ctx, dbtx, dbsqlc.OperationRunTargetListParams{
		OperationRunID: runID, MinPhase: int32(lo), MaxPhase: int32(hi), Status: string(f.Status),
		RowLimit: int32(f.Limit), RowOffset: int32(f.Offset),
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list targets: %w", err)
	}
	total, err := r.q.OperationRunTargetCount(ctx, dbtx, dbsqlc.OperationRunTargetCountParams{
		OperationRunID: runID, MinPhase: int32(lo), MaxPhase: int32(hi), Status: string(f.Status),
	})
	if err != nil {
		return nil, 0, fmt.Errorf("count targets: %w", err)
	}
	out := make([]Target, 0, len(rows))
	for _, row := range rows {
		t := targetFromRow(row.OperationRunTarget)
		if row.RackExternalID != nil {
			t.RackExternalID = *row.RackExternalID
		}
		out = append(out, t)
	}
	return out, int(total), nil
}

func targetFromRow(row dbsqlc.OperationRunTarget) Target {
	t := Target{
		ID: row.ID, RunID: row.OperationRunID, RackID: row.RackID, Sequence: int(row.SequenceIndex), Phase: int(row.PhaseIndex),
		TaskID: row.TaskID, Status: TargetStatus(row.Status), Message: row.Message, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
	}
	_ = json.Unmarshal(row.ComponentsByType, &t.Components)
	return t
}

// likePatterns turns a name query into LIKE patterns: exact names, or with
// Wildcard "*" and "?" as wildcards (a pattern without one matches as a
// substring), as the inventory's list queries do.
func likePatterns(q *inventory.StringQuery) ([]string, bool) {
	if q == nil {
		return []string{}, false
	}
	esc := strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`)
	out := make([]string, len(q.Patterns))
	for i, p := range q.Patterns {
		if !q.Wildcard {
			out[i] = esc.Replace(p)
			continue
		}
		p = strings.NewReplacer("*", "%", "?", "_").Replace(p)
		if !strings.ContainsAny(p, "%_") {
			p = "%" + esc.Replace(p) + "%"
		}
		out[i] = p
	}
	return out, q.AnyOf
}

// uniq returns ids sorted and without duplicates.
func uniq(ids []uuid.UUID) []uuid.UUID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}
