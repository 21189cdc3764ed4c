package operations

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// Tasks turns operation requests into per-rack tasks and runs them on the
// engine (spec/execution.md §2–§6, §8, §10). Submission, conflict checks,
// queueing, promotion and cancellation happen in transactions under a
// per-rack advisory lock; a task row never exists without the run that
// executes it (or, while WAITING, without the promotion that will start it).
type Tasks struct {
	pool     *pgxpool.Pool
	q        *dbsqlc.Queries
	rules    *Service
	inv      *inventory.Service
	engine   *engine.Engine
	backends Backends
	keys     *firmware.Keyring
	logger   *slog.Logger
	expiry   ExpiryScheduler
	obs      TaskObserver
	tracer   trace.Tracer
	// endHooks are called at the end of RunsEnded (OnTaskEnd);
	// waitingHooks when a task ends before it started (OnWaitingEnd).
	endHooks     []TaskEndFunc
	waitingHooks []WaitingEndFunc
	// verifyGrace is frozen into each firmware plan (TasksConfig.VerifyGrace).
	verifyGrace time.Duration
	// ingestTarget gives an ingest task that upgrades firmware its rack's
	// target versions (SetIngestFirmwareTarget); nil: none.
	ingestTarget IngestTargetFunc
	// gate, if set, holds tasks outside maintenance windows (SetStartGate);
	// nowFunc is the clock (SetClock; nil: time.Now).
	gate  StartGate
	holds TransitionHolds // power budgets (SetTransitionHolds)
	// approver, if set, holds bulk submissions over its threshold for a
	// second identity's approval (SetApprover).
	approver Approver
	// rackGuard, if set, refuses energising isolated racks
	// (SetEnergiseGuard).
	rackGuard EnergiseGuard
	nowFunc   func() time.Time
}

// IngestTargetFunc returns the target version an ingest task of rack that
// upgrades firmware should install (a JSON object per component type, as
// UpgradeFirmware's target_version takes), or "" to leave the choice to
// the component manager (its desired version).
type IngestTargetFunc func(ctx context.Context, dbtx db.DBTX, rack uuid.UUID) (string, error)

// SetIngestFirmwareTarget makes ingest tasks whose rule upgrades firmware
// (FLOW_INGEST_FIRMWARE_UPGRADE) install fn's versions for their rack,
// frozen into the task at submission: firmware baselines bring newly
// ingested racks to the active baseline this way. Call it before serving.
func (t *Tasks) SetIngestFirmwareTarget(fn IngestTargetFunc) { t.ingestTarget = fn }

// ExpiryScheduler arranges, through tx, for PromoteRack(rackID) to run at
// at: when a waiting task's queue timeout passes, so it expires on time
// rather than at the next sweep.
type ExpiryScheduler func(ctx context.Context, tx pgx.Tx, rackID uuid.UUID, at time.Time) error

// TasksConfig holds what Tasks needs. Keys may be nil (no encryption key
// configured: requests with credentials are refused).
type TasksConfig struct {
	Pool     *pgxpool.Pool
	Rules    *Service
	Inv      *inventory.Service
	Engine   *engine.Engine
	Backends Backends
	Keys     *firmware.Keyring
	Logger   *slog.Logger
	// Expiry, if set, schedules the expiry of each waiting task; without
	// it waiting tasks expire at promotions and sweeps only.
	Expiry ExpiryScheduler
	// Observer, if set, hears of task submissions, starts and ends.
	Observer TaskObserver
	// Tracer, if set, traces each submission (a span whose context the
	// tasks' River jobs carry).
	Tracer trace.Tracer
	// VerifyGrace is how long the read-back after a firmware update may
	// re-read a device not yet at its target before failing it
	// (FLOW_FIRMWARE_VERIFY_GRACE; 0: one read). Each task's plan keeps the
	// value it was started with. At most MaxVerifyGrace.
	VerifyGrace time.Duration
}

// NewTasks returns the task manager. Wire its RunsEnded as the engine's
// end-of-run hook.
func NewTasks(cfg TasksConfig) *Tasks {
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	return &Tasks{
		tracer: cfg.Tracer,
		pool:   cfg.Pool, q: dbsqlc.New(), rules: cfg.Rules, inv: cfg.Inv, engine: cfg.Engine,
		backends: cfg.Backends, keys: cfg.Keys, logger: cfg.Logger, expiry: cfg.Expiry, obs: cfg.Observer,
		verifyGrace: min(max(cfg.VerifyGrace, 0), MaxVerifyGrace),
	}
}

// rackPlan is one rack's part of a validated request, ready to write.
type rackPlan struct {
	// targetVersion, when set, replaces the request's target version for
	// this rack's task (SetIngestFirmwareTarget).
	targetVersion string
	rack          inventory.Rack
	components    map[ComponentType][]uuid.UUID
	ids           []uuid.UUID
	targets       map[ComponentType]typeTargets
	rule          ResolvedRule
	scope         TaskScope
	// notTargeted are the rack's selected components of types the rule
	// drives no step for, left out of the task.
	notTargeted []NotTargeted
}

func validateRequest(req Request) error {
	if !req.Type.Valid() {
		return invalidRequest("operation", "unknown operation type %q", req.Type)
	}
	if !req.Type.HasCode(req.Code) {
		return invalidRequest("operation", "operation code %q is not valid for %s", req.Code, req.Type)
	}
	if req.IdempotencyKey != "" && req.RequiredRackID == uuid.Nil {
		return invalidRequest("idempotency_key", "an idempotency key requires a required rack")
	}
	if req.QueueTimeout < 0 {
		return invalidRequest("queue_options.queue_timeout_seconds", "must not be negative")
	}
	if req.Preempt && req.Payload.Leak == nil {
		return invalidRequest("preempt", "only a leak response pre-empts")
	}
	return nil
}

// seal encrypts the request's firmware credentials, before anything is
// written.
func (t *Tasks) seal(req Request) (*firmware.Envelope, error) {
	if req.Auth.Empty() {
		return nil, nil
	}
	if t.keys == nil {
		return nil, ErrNoEncryptionKey
	}
	return t.keys.Seal(req.Auth)
}

// planRack plans and validates one rack of req; rules, if it holds the
// rack, is its rule already resolved.
func (t *Tasks) planRack(ctx context.Context, tx pgx.Tx, req Request, sel inventory.Selection, rules map[uuid.UUID]ResolvedRule) (rackPlan, error) {
	rack := sel.Rack
	p := rackPlan{rack: rack, components: map[ComponentType][]uuid.UUID{}, targets: map[ComponentType]typeTargets{}}
	if len(sel.Components) == 0 {
		return p, fmt.Errorf("%w: racks have no selected components: %s", ErrNotApplicable, rackLabel(rack))
	}
	rule, ok := rules[rack.ID]
	if !ok {
		var err error
		if rule, err = t.rules.ResolveRule(ctx, tx, ResolveRequest{RackID: rack.ID, Type: req.Type, Code: req.Code, RuleID: req.RuleID}); err != nil {
			return p, err
		}
	}
	p.rule = rule
	def := rule.Rule.Definition
	if t.ingestTarget != nil && req.Type == OperationTypeBringUp && req.Code == CodeIngest && req.Payload.TargetVersion == "" && upgradesFirmware(def) {
		v, err := t.ingestTarget(ctx, tx, rack.ID)
		if err != nil {
			return p, fmt.Errorf("ingest firmware target of rack %s: %w", rackLabel(rack), err)
		}
		p.targetVersion = v
	}
	var selected []ComponentType
	for _, c := range sel.Components {
		if ct := ComponentType(c.Type); !slices.Contains(selected, ct) {
			selected = append(selected, ct)
		}
	}
	slices.Sort(selected)
	if !def.HasStepFor(selected) {
		return p, fmt.Errorf("%w: operation rule %q (%s) has no step applicable to targeted component types %v", ErrNotApplicable, rule.Rule.Name, ruleIDLabel(rule.Rule.ID), selected)
	}
	// Components of types the rule drives no step for (ToR switches, UMS,
	// CDU under the built-in rules) are left out and named in the report;
	// only the others must be known to the backends.
	driven := drivenTypes(def)
	byType := map[ComponentType][]inventory.Component{}
	for _, c := range sel.Components {
		ct := ComponentType(c.Type)
		if !driven[ct] {
			p.notTargeted = append(p.notTargeted, NotTargeted{
				Name: c.Name, Type: ct, ComponentID: c.ID,
				Reason: fmt.Sprintf("operation rule %q has no step for %s", rule.Rule.Name, ct),
			})
			continue
		}
		byType[ct] = append(byType[ct], c)
		p.components[ct] = append(p.components[ct], c.ID)
		p.ids = append(p.ids, c.ID)
	}
	var unlinked []string
	for ct, comps := range byType {
		tt := typeTargets{}
		for _, c := range comps {
			if c.ExternalID == "" {
				tt.ByMAC = true
			}
		}
		for _, c := range comps {
			id := c.ExternalID
			if tt.ByMAC {
				id = managementMAC(c)
			}
			if id == "" {
				unlinked = append(unlinked, fmt.Sprintf("rack %s %s/%s", rackLabel(rack), ct, c.ID))
			}
			tt.IDs = append(tt.IDs, id)
		}
		p.targets[ct] = tt
	}
	if len(unlinked) > 0 {
		sort.Strings(unlinked)
		return p, fmt.Errorf("%w: selected components not linked to actual inventory (%d): %s", ErrNotApplicable, len(unlinked), strings.Join(unlinked, ", "))
	}
	types := make([]ComponentType, 0, len(byType))
	for ct := range byType {
		types = append(types, ct)
	}
	slices.Sort(types)
	reqs, err := rule.Rule.Definition.Requirements(types)
	if err != nil {
		return p, fmt.Errorf("%w: %v", ErrNotApplicable, err)
	}
	for _, r := range reqs {
		if err := t.checkCapability(r, req); err != nil {
			return p, err
		}
	}
	for _, s := range rule.Rule.Definition.Steps {
		if len(p.targets[s.ComponentType].IDs) == 0 {
			continue
		}
		// Refuse now, not at run time, when the backend the step calls is
		// not configured (spec: fail early, naming the variable to set).
		if err := t.backends.Ready(backendType(s.ComponentType)); err != nil {
			return p, err
		}
		for _, a := range s.Actions() {
			if _, ok := actionKinds[a.Name]; !ok {
				return p, fmt.Errorf("%w: action %s of operation rule %q is not supported by this server yet", ErrNotApplicable, a.Name, rule.Rule.Name)
			}
			if a.Name == ruledef.ActionPowerControl {
				op := req.Code
				if pp, _ := a.PowerControlParams(); pp.Operation != "" {
					op = pp.Operation
				}
				if !t.backends.SupportsPower(backendType(s.ComponentType), backend.PowerOp(op)) {
					return p, fmt.Errorf("%w: the %s component manager cannot %s", ErrNotApplicable, s.ComponentType, op)
				}
			}
		}
	}
	p.scope = TaskScope{OperationType: req.Type, Components: p.components}
	if err := t.checkLeaks(ctx, tx, req, p); err != nil {
		return p, err
	}
	return p, nil
}

// drivenTypes are the component types rule d acts on: those it has a step
// for, and those a VerifyReachability action probes.
func drivenTypes(d ruledef.Definition) map[ComponentType]bool {
	out := map[ComponentType]bool{}
	for _, s := range d.Steps {
		out[s.ComponentType] = true
		for _, a := range s.Actions() {
			if a.Name == ruledef.ActionVerifyReachability {
				for _, ct := range a.Parameters.ComponentTypes {
					out[ct] = true
				}
			}
		}
	}
	return out
}

// capabilityOps maps a rule capability to the component-manager operation
// that provides it.
var capabilityOps = map[ruledef.Capability]backend.Operation{
	ruledef.CapabilityPowerControl:        backend.OpPowerControl,
	ruledef.CapabilityPowerStatus:         backend.OpPowerStatus,
	ruledef.CapabilityFirmwareControl:     backend.OpFirmwareControl,
	ruledef.CapabilityFirmwareStatus:      backend.OpFirmwareStatus,
	ruledef.CapabilityBringUpControl:      backend.OpBringUp,
	ruledef.CapabilityBringUpStatus:       backend.OpBringUpStatus,
	ruledef.CapabilityInjectExpectation:   backend.OpInjectExpectation,
	ruledef.CapabilityDecommissionControl: backend.OpDecommission,
	ruledef.CapabilityDecommissionStatus:  backend.OpDecommissionStatus,
	// Firmware consistency is computed by Flow from the version reads.
	ruledef.CapabilityFirmwareConsistencyCheck: backend.OpFirmwareVersion,
}

func (t *Tasks) checkCapability(r ruledef.Requirement, req Request) error {
	op, ok := capabilityOps[r.Capability]
	if !ok || !t.backends.Supports(backendType(r.ComponentType), op) {
		return fmt.Errorf("%w: component manager capability pre-dispatch validation failed: %s lacks %s", ErrNotApplicable, r.ComponentType, r.Capability)
	}
	return nil
}

// managementMAC is the MAC a backend knows a component by when it has no
// backend ID: its host BMC, else its first BMC.
func managementMAC(c inventory.Component) string {
	for _, b := range c.BMCs {
		if b.Type == inventory.BMCTypeHost {
			return b.MAC.String()
		}
	}
	if len(c.BMCs) > 0 {
		return c.BMCs[0].MAC.String()
	}
	return ""
}

func rackLabel(r inventory.Rack) string {
	if r.Name != "" {
		return r.Name
	}
	return r.ID.String()
}

func ruleIDLabel(id uuid.UUID) string {
	if id == uuid.Nil {
		return "built-in"
	}
	return id.String()
}

func (t *Tasks) insertError(err error) error {
	if db.IsUniqueViolation(err, "task_idempotency_key_key") {
		return invalidRequest("idempotency_key", "a task with this key is being created concurrently")
	}
	return fmt.Errorf("insert task: %w", err)
}

// startRun starts the run of a task (a queued one promoted).
func (t *Tasks) startRun(ctx context.Context, tx pgx.Tx, taskID uuid.UUID, rack inventory.Rack, typ OperationType, code OperationCode, rule ruledef.Definition, targets map[ComponentType]typeTargets, payload Payload) (int64, error) {
	plan, err := runPlan(taskID, rack, typ, code, rule, targets, payload, t.verifyGrace, t.holds)
	if err != nil {
		return 0, err
	}
	runID, err := t.engine.Start(ctx, tx, plan)
	if err != nil {
		return 0, startError(err)
	}
	return int64(runID), nil
}

// runPlan is the engine plan of a task's run.
func runPlan(taskID uuid.UUID, rack inventory.Rack, typ OperationType, code OperationCode, rule ruledef.Definition, targets map[ComponentType]typeTargets, payload Payload, grace time.Duration, holds TransitionHolds) (engine.Plan, error) {
	var hs []engine.Hold
	if holds != nil && rack.PowerFeed != "" && payload.Leak == nil {
		hs = holds(rack.PowerFeed, len(targets[ComponentTypeCompute].IDs), len(targets[ComponentTypePowerShelf].IDs))
	}
	plan, err := buildPlan(taskID, typ, code, rule, targets, payload, grace, hs)
	if err != nil {
		return plan, err
	}
	plan.Labels = runLabels(taskID, rackLabel(rack), code)
	// A leak response's steps are fetched before any other waiting step
	// (a site-wide wave queued before it included).
	plan.Urgent = payload.Leak != nil
	if len(plan.Stages) == 0 {
		return plan, fmt.Errorf("%w: operation rule has no step for the targeted components", ErrNotApplicable)
	}
	return plan, nil
}

// startError is the error of starting runs (engine.Start, StartMany).
func startError(err error) error {
	var pe *engine.PlanError
	if errors.As(err, &pe) {
		// A rule stored before its runnability was checked, or a rack with
		// more components than it was checked for: the client's to fix.
		return fmt.Errorf("%w: %w", ErrRuleNotRunnable, pe)
	}
	return fmt.Errorf("start run: %w", err)
}

func scopeOfRow(row dbsqlc.Task) TaskScope {
	var comps map[ComponentType][]uuid.UUID
	_ = json.Unmarshal(row.Components, &comps)
	return TaskScope{OperationType: OperationType(row.OperationType), Components: comps}
}

// RunsEnded is the engine's end-of-run hook: inside the transaction that
// ends the runs (a checkpoint ends many at once) it records the tasks' final
// status, message and report, promotes waiting tasks on their racks, then
// calls the end-of-task hooks registered with OnTaskEnd, in order, in the
// same transaction. Runs that are not a task's are ignored. Its statements
// are per transaction, not per task: the tasks are locked, read, reported
// and finished together, and their racks promoted together.
func (t *Tasks) RunsEnded(ctx context.Context, tx pgx.Tx, runs []engine.RunSummary) error {
	byTask := make(map[uuid.UUID]engine.RunSummary, len(runs))
	ids := make([]uuid.UUID, 0, len(runs))
	for _, run := range runs {
		id, err := taskIDOf(run.Owner)
		if err != nil {
			continue // not a task's run
		}
		if _, dup := byTask[id]; !dup {
			ids = append(ids, id)
		}
		byTask[id] = run
	}
	if len(ids) == 0 {
		return nil
	}
	if err := t.tasksEnded(ctx, tx, ids, byTask); err != nil {
		return err
	}
	for _, fn := range t.endHooks {
		if err := fn(ctx, tx, ids); err != nil {
			return err
		}
	}
	return nil
}

// tasksEnded records the end of the tasks' runs and promotes their racks'
// waiting tasks. A task no longer there (its rack was purged) is skipped.
func (t *Tasks) tasksEnded(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, runs map[uuid.UUID]engine.RunSummary) error {
	rows, err := t.q.TaskGetByIDsForUpdate(ctx, tx, ids)
	if err != nil {
		return fmt.Errorf("lock tasks: %w", err)
	}
	var runIDs []engine.RunID
	for _, row := range rows {
		if !TaskStatus(row.Status).Finished() {
			runIDs = append(runIDs, runs[row.ID].ID)
		}
	}
	reps, err := t.engine.Runs(ctx, tx, runIDs)
	if err != nil {
		return fmt.Errorf("read runs: %w", err)
	}
	var fin dbsqlc.TaskFinishManyParams
	events := make(map[uuid.UUID]TaskEvent, len(runIDs))
	racks := make([]uuid.UUID, 0, len(rows))
	for _, row := range rows {
		racks = append(racks, row.RackID)
		if TaskStatus(row.Status).Finished() {
			continue
		}
		run := runs[row.ID]
		name := t.namer(ctx, tx, row.RackID)
		rep, ok := reps[run.ID]
		if !ok {
			return fmt.Errorf("read run %d of task %s: %w", run.ID, row.ID, engine.ErrRunNotFound)
		}
		status, msg := TaskCompleted, msgSucceeded
		switch run.State {
		case engine.StateFailed:
			status, msg = TaskFailed, name(firstLine(cmp.Or(failureMessage(rep), run.Error)))
		case engine.StateTerminated:
			status, msg = TaskTerminated, msgCancelled
			if run.Error != "" && run.Error != "cancelled" {
				msg = firstLine(run.Error) // pre-empted (Preempt): by what
			}
		}
		row.Status, row.Message = string(status), msg
		report, err := reportOf(row, &rep, name)
		if err != nil {
			return err
		}
		fin.IDs = append(fin.IDs, row.ID)
		fin.Statuses = append(fin.Statuses, string(status))
		fin.Messages = append(fin.Messages, msg)
		fin.Reports = append(fin.Reports, report)
		ev := TaskEvent{Kind: TaskEnded, TaskID: row.ID, Rack: cmp.Or(run.Labels["rack"], row.RackID.String()),
			Operation: OperationCode(row.OperationCode), Type: OperationType(row.OperationType), Status: status, Message: msg, SubmittedAt: row.CreatedAt}
		var p Payload
		if json.Unmarshal(row.Information, &p) == nil && p.Leak != nil {
			ev.LeakObservedAt = unixNano(p.Leak.ObservedAt)
		}
		events[row.ID] = ev
	}
	if len(fin.IDs) > 0 {
		ended, err := t.q.TaskFinishMany(ctx, tx, fin)
		if err != nil {
			return fmt.Errorf("finish tasks: %w", err)
		}
		for _, id := range ended {
			t.observe(ctx, events[id])
		}
	}
	return t.promoteMany(ctx, tx, racks)
}

// promoteMany promotes the racks' waiting tasks (promote), taking the racks'
// locks in one statement in key order (as submissions do) and reading their
// unfinished tasks in another, both in one round trip.
func (t *Tasks) promoteMany(ctx context.Context, tx pgx.Tx, racks []uuid.UUID) error {
	racks = uniq(racks)
	if len(racks) == 0 {
		return nil
	}
	all, err := t.q.TaskLockRacksThenActive(ctx, tx, rackKeys(racks), racks)
	if err != nil {
		return fmt.Errorf("lock racks and read their unfinished tasks: %w", err)
	}
	byRack := make(map[uuid.UUID][]dbsqlc.Task)
	for _, row := range all {
		byRack[row.RackID] = append(byRack[row.RackID], row)
	}
	for _, rack := range racks {
		if err := t.promoteRows(ctx, tx, byRack[rack]); err != nil {
			return err
		}
	}
	return nil
}

// promote starts the rack's waiting tasks that no longer conflict, oldest
// first, stopping at the first that still does (strict FIFO), and ends the
// ones whose queue deadline has passed. It runs in tx under the rack lock.
func (t *Tasks) promote(ctx context.Context, tx pgx.Tx, rackID uuid.UUID) error {
	if err := t.q.TaskLockRack(ctx, tx, rackID.String()); err != nil {
		return err
	}
	all, err := t.q.TaskActiveOnRack(ctx, tx, rackID)
	if err != nil {
		return err
	}
	return t.promoteRows(ctx, tx, all)
}

// promoteRows is promote's work on all, the rack's unfinished tasks oldest
// first, read under the rack lock.
func (t *Tasks) promoteRows(ctx context.Context, tx pgx.Tx, all []dbsqlc.Task) error {
	var active []TaskScope
	for _, row := range all {
		if row.Status != string(TaskWaiting) {
			active = append(active, scopeOfRow(row))
		}
	}
	now := t.now()
	for _, row := range all {
		if row.Status != string(TaskWaiting) {
			continue
		}
		if row.QueueExpiresAt != nil && !row.QueueExpiresAt.After(now) {
			if err := t.finishWaiting(ctx, tx, row, TaskTerminated, expiredMessage(row)); err != nil {
				return err
			}
			continue
		}
		// Awaiting a second identity's approval, it holds the tasks behind
		// it too (strict FIFO).
		if row.ApprovalID != nil {
			return nil
		}
		// Nothing queued starts on a component whose leak is open.
		if hold, err := t.leakHold(ctx, tx, row); err != nil {
			return err
		} else if hold != "" {
			if err := t.finishWaiting(ctx, tx, row, TaskTerminated, hold); err != nil {
				return err
			}
			continue
		}
		scope := scopeOfRow(row)
		if FirstConflict(scope, active) >= 0 {
			return nil
		}
		// Outside its maintenance windows (or in a freeze) it waits for the
		// next opening, and so do the tasks behind it (strict FIFO).
		if h, err := t.rowGate(ctx, tx, row); err != nil {
			return err
		} else if h.Held() {
			return t.holdRow(ctx, tx, row, h)
		} else if OperationType(row.OperationType) == OperationTypeFirmwareControl && !h.OpenUntil.IsZero() {
			if row.Information, err = withWindow(row.Information, h); err != nil {
				return err
			}
			if err := t.q.TaskSetInformation(ctx, tx, dbsqlc.TaskSetInformationParams{ID: row.ID, Information: row.Information}); err != nil {
				return err
			}
		}
		var rule ruledef.Definition
		var targets map[ComponentType]typeTargets
		var payload Payload
		if err := errors.Join(json.Unmarshal(row.Rule, &rule), json.Unmarshal(row.Targets, &targets), json.Unmarshal(row.Information, &payload)); err != nil {
			return fmt.Errorf("decode task %s: %w", row.ID, err)
		}
		rack, err := t.inv.Rack(ctx, tx, row.RackID, false)
		if err != nil {
			rack = inventory.Rack{ID: row.RackID}
		}
		runID, err := t.startRun(ctx, tx, row.ID, rack, OperationType(row.OperationType), OperationCode(row.OperationCode), rule, targets, payload)
		if err != nil {
			// The task can never run: end it rather than block the queue.
			if ferr := t.finishWaiting(ctx, tx, row, TaskFailed, firstLine(err.Error())); ferr != nil {
				return ferr
			}
			continue
		}
		msg := msgPromoted
		if row.WindowRelease != nil {
			msg = firstLine(msgPromoted + "; released from maintenance windows by " + *row.WindowRelease)
		}
		if err := t.q.TaskPromote(ctx, tx, dbsqlc.TaskPromoteParams{ID: row.ID, Message: msg, RunID: &runID}); err != nil {
			return err
		}
		active = append(active, scope)
	}
	return nil
}

// Sweep promotes and expires waiting tasks on every rack that has some: the
// safety net behind promotion at task end (run at startup and periodically).
func (t *Tasks) Sweep(ctx context.Context) error {
	racks, err := t.q.TaskRacksWithWaiting(ctx, t.pool)
	if err != nil {
		return err
	}
	for _, rack := range racks {
		if err := t.PromoteRack(ctx, rack); err != nil {
			return fmt.Errorf("sweep rack %s: %w", rack, err)
		}
	}
	return nil
}

// PromoteRack starts the rack's waiting tasks that no longer conflict and
// expires those whose queue timeout has passed, in its own transaction.
func (t *Tasks) PromoteRack(ctx context.Context, rackID uuid.UUID) error {
	ctx, hooks := db.WithCommitHooks(ctx)
	if err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error { return t.promote(ctx, tx, rackID) }); err != nil {
		return err
	}
	hooks.Run()
	return nil
}

// rackName returns the name of rack id, else its ID.
func (t *Tasks) rackName(ctx context.Context, dbtx db.DBTX, id uuid.UUID) string {
	if r, err := t.inv.Rack(ctx, dbtx, id, true); err == nil {
		return rackLabel(r)
	}
	return id.String()
}

// endEvent is the end of task row with status and msg, for the observer.
func (t *Tasks) endEvent(ctx context.Context, dbtx db.DBTX, row dbsqlc.Task, status TaskStatus, msg string) TaskEvent {
	ev := TaskEvent{Kind: TaskEnded, TaskID: row.ID, Operation: OperationCode(row.OperationCode), Type: OperationType(row.OperationType),
		Status: status, Message: msg, SubmittedAt: row.CreatedAt}
	if t.obs != nil {
		ev.Rack = t.rackName(ctx, dbtx, row.RackID)
	}
	return ev
}

// finishWaiting ends waiting task row (it never started: no run ends it)
// with status and msg, and tells the observer and the OnWaitingEnd hooks.
func (t *Tasks) finishWaiting(ctx context.Context, tx pgx.Tx, row dbsqlc.Task, status TaskStatus, msg string) error {
	if _, err := t.q.TaskFinish(ctx, tx, dbsqlc.TaskFinishParams{ID: row.ID, Status: string(status), Message: msg}); err != nil {
		return err
	}
	t.observe(ctx, t.endEvent(ctx, tx, row, status, msg))
	ended := WaitingEnd{TaskID: row.ID, RackID: row.RackID, Code: OperationCode(row.OperationCode), Type: OperationType(row.OperationType),
		Status: status, Message: msg, SubmittedBy: row.SubmittedBy, SubmittedAt: row.CreatedAt}
	for _, fn := range t.waitingHooks {
		if err := fn(ctx, tx, ended); err != nil {
			return err
		}
	}
	return nil
}

// Cancel stops a task (spec §5 CancelTask): a waiting task ends at once; a
// pending or running one has its run terminated (running calls see their
// context cancelled; nothing is rolled back). Cancelling a terminated task
// is a no-op; a completed or failed one is ErrNotCancellable. It returns the
// task as it now is.
func (t *Tasks) Cancel(ctx context.Context, id uuid.UUID) (Task, error) {
	ctx, hooks := db.WithCommitHooks(ctx)
	err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		row, err := t.q.TaskGetByID(ctx, tx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", ErrTaskNotFound, id)
		} else if err != nil {
			return err
		}
		if row.RunID != nil && !TaskStatus(row.Status).Finished() {
			// Lock the run before the task, in the order a checkpoint
			// ending the run takes them (the run, then the task in
			// RunsEnded): the other order deadlocks with a run ending
			// at the same moment.
			if err := t.engine.Lock(ctx, tx, engine.RunID(*row.RunID)); err != nil {
				return err
			}
		}
		if row, err = t.q.TaskGetByIDForUpdate(ctx, tx, id); err != nil {
			return err
		}
		switch TaskStatus(row.Status) {
		case TaskTerminated:
			return nil
		case TaskCompleted, TaskFailed:
			return fmt.Errorf("%w: task %s has status %s", ErrNotCancellable, id, row.Status)
		case TaskWaiting:
			if err := t.finishWaiting(ctx, tx, row, TaskTerminated, msgCancelled); err != nil {
				return err
			}
			return t.promote(ctx, tx, row.RackID)
		}
		// The engine ends the run and calls RunsEnded in this transaction,
		// which records the termination and promotes the queue.
		return t.engine.Cancel(ctx, tx, engine.RunID(*row.RunID))
	})
	if err != nil {
		return Task{}, err
	}
	hooks.Run()
	tasks, err := t.Get(ctx, []uuid.UUID{id})
	if err != nil {
		return Task{}, err
	}
	return tasks[0], nil
}

// Get returns the tasks with the given IDs, reports included, newest first.
// Unknown IDs are ErrTaskNotFound.
func (t *Tasks) Get(ctx context.Context, ids []uuid.UUID) ([]Task, error) {
	rows, err := t.q.TaskGetByIDs(ctx, t.pool, ids)
	if err != nil {
		return nil, err
	}
	if len(rows) < len(uniq(ids)) {
		found := map[uuid.UUID]bool{}
		for _, r := range rows {
			found[r.ID] = true
		}
		for _, id := range ids {
			if !found[id] {
				return nil, fmt.Errorf("%w: %s", ErrTaskNotFound, id)
			}
		}
	}
	return t.fromRows(ctx, rows, true)
}

// rackKeys are the rack-lock keys (TaskLockRack) of racks, in their order:
// callers pass them sorted as uniq sorts, the order every rack lock is
// taken in.
func rackKeys(racks []uuid.UUID) []string {
	keys := make([]string, len(racks))
	for i, r := range racks {
		keys[i] = r.String()
	}
	return keys
}

func uniq(ids []uuid.UUID) []uuid.UUID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}

// TaskFilter selects tasks for List.
type TaskFilter struct {
	RackID      *uuid.UUID
	ComponentID *uuid.UUID
	ActiveOnly  bool
	Offset      int
	Limit       int // 0: 100
	WithReport  bool
}

// List returns one page of tasks, newest first (created_at, then ID,
// descending), and the total matching count.
func (t *Tasks) List(ctx context.Context, f TaskFilter) ([]Task, int, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var rows []dbsqlc.Task
	var total int32
	var err error
	// The site's active tasks (a poll) and a rack's tasks have statements
	// of their own, whose plans are the same for any arguments and
	// history: they run as generic plans, page and count in one round
	// trip (TaskListActive, TaskListByRack).
	switch {
	case f.ActiveOnly && f.RackID == nil && f.ComponentID == nil:
		rows, total, err = t.q.TaskListActiveCounted(ctx, db.GenericPlans{Pool: t.pool},
			dbsqlc.TaskListActiveParams{RowLimit: int32(f.Limit), RowOffset: int32(f.Offset)})
	case !f.ActiveOnly && f.RackID != nil && f.ComponentID == nil:
		rows, total, err = t.q.TaskListByRackCounted(ctx, db.GenericPlans{Pool: t.pool},
			dbsqlc.TaskListByRackParams{RackID: *f.RackID, RowLimit: int32(f.Limit), RowOffset: int32(f.Offset)})
	default:
		rows, err = t.q.TaskList(ctx, t.pool, dbsqlc.TaskListParams{
			RackID: f.RackID, ComponentID: f.ComponentID, ActiveOnly: f.ActiveOnly,
			RowLimit: int32(f.Limit), RowOffset: int32(f.Offset),
		})
		if err == nil {
			total, err = t.q.TaskCount(ctx, t.pool, dbsqlc.TaskCountParams{RackID: f.RackID, ComponentID: f.ComponentID, ActiveOnly: f.ActiveOnly})
		}
	}
	if err != nil {
		return nil, 0, err
	}
	tasks, err := t.fromRows(ctx, rows, f.WithReport)
	return tasks, int(total), err
}

func (t *Tasks) fromRows(ctx context.Context, rows []dbsqlc.Task, withReport bool) ([]Task, error) {
	out := make([]Task, 0, len(rows))
	for _, r := range rows {
		task := Task{
			ID: r.ID, OperationType: OperationType(r.OperationType), OperationCode: OperationCode(r.OperationCode),
			RackID: r.RackID, ComponentIDs: r.ComponentIDs, Description: r.Description,
			Status: TaskStatus(r.Status), Message: r.Message, AppliedRuleID: r.AppliedRuleID, RuleName: r.RuleName, SubmittedBy: r.SubmittedBy,
			RunID: r.RunID, QueueExpiresAt: r.QueueExpiresAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
			StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		}
		if withReport {
			rep, err := t.report(ctx, t.pool, r)
			if err != nil {
				return nil, err
			}
			task.Report = rep
		}
		out = append(out, task)
	}
	return out, nil
}

// KeyUsage counts, per data-encryption key ID, the unfinished tasks whose
// firmware credentials are sealed with that key: a retired key may be
// dropped once no unfinished task needs it (docs/security.md).
func (t *Tasks) KeyUsage(ctx context.Context) (map[string]int, error) {
	rows, err := t.q.TaskKeyUsage(ctx, t.pool)
	if err != nil {
		return nil, fmt.Errorf("key usage: %w", err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.KeyID] = int(r.N)
	}
	return out, nil
}

// TaskStats counts unfinished tasks per rack (all its tasks) and per
// component (tasks whose scope includes it). It is the inventory's task
// statistics source.
func (t *Tasks) TaskStats(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]inventory.TaskStats, error) {
	out := map[uuid.UUID]inventory.TaskStats{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := t.q.TaskStatsFor(ctx, dbtx, ids)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		s := out[r.ID]
		switch TaskStatus(r.Status) {
		case TaskWaiting:
			s.Waiting += uint32(r.N)
		case TaskPending:
			s.Pending += uint32(r.N)
		case TaskRunning:
			s.Running += uint32(r.N)
		}
		out[r.ID] = s
	}
	return out, nil
}

// namer returns a function that names each component of rack a message
// identifies by its Core ID or a BMC MAC (backends answer in those):
// "demo-0007-ct-03 (1bd925ef-…)", so the operator reads the name they know
// with the ID beside it. The rack is read once, at the first message that
// needs it; a message is returned as it is when the rack cannot be read.
func (t *Tasks) namer(ctx context.Context, dbtx db.DBTX, rackID uuid.UUID) func(string) string {
	var (
		loaded bool
		comps  []inventory.Component
	)
	return func(msg string) string {
		if msg == "" || t.inv == nil {
			return msg
		}
		if !loaded {
			loaded = true
			if rack, err := t.inv.Rack(ctx, dbtx, rackID, true); err == nil {
				comps = rack.Components
			}
		}
		return nameComponents(comps, msg)
	}
}

func nameComponents(comps []inventory.Component, msg string) string {
	var pairs []string
	seen := map[string]bool{}
	add := func(key, name string) {
		if key == "" || name == "" || seen[key] || !strings.Contains(msg, key) || strings.Contains(msg, name+" ("+key+")") {
			return
		}
		seen[key] = true
		pairs = append(pairs, key, name+" ("+key+")")
	}
	for _, c := range comps {
		add(c.ExternalID, c.Name)
		for _, b := range c.BMCs {
			add(string(b.MAC), c.Name)
			add(strings.ToUpper(string(b.MAC)), c.Name)
		}
	}
	if len(pairs) == 0 {
		return msg
	}
	return strings.NewReplacer(pairs...).Replace(msg)
}

// ActiveFirmwareComponents returns every component a firmware task that
// has not ended (waiting, pending or running) covers, mapped to the
// newest such task.
func (s *Service) ActiveFirmwareComponents(ctx context.Context, dbtx db.DBTX) (map[uuid.UUID]uuid.UUID, error) {
	rows, err := s.q.TaskActiveFirmwareComponents(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list active firmware tasks: %w", err)
	}
	out := make(map[uuid.UUID]uuid.UUID, len(rows))
	for _, r := range rows {
		out[r.ComponentID] = r.TaskID
	}
	return out, nil
}

// upgradesFirmware reports whether def has a FirmwareControl step.
func upgradesFirmware(def ruledef.Definition) bool {
	for _, st := range def.Steps {
		if st.MainOperation.Name == ruledef.ActionFirmwareControl {
			return true
		}
	}
	return false
}
