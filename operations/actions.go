package operations

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// Backends is what the rule actions need from the component managers.
type Backends interface {
	For(t backend.ComponentType) *backend.Manager
	SupportsPower(t backend.ComponentType, p backend.PowerOp) bool
	Supports(t backend.ComponentType, op backend.Operation) bool
	// Ready tells why type t's backend cannot be reached (its URL variable
	// unset), or nil.
	Ready(t backend.ComponentType) error
}

// actions are the engine actions of rule steps: each does its backend call
// with no transaction open and reports the outcome to the engine, which
// checkpoints it.
type actions struct {
	pool     *pgxpool.Pool
	q        *dbsqlc.Queries
	backends Backends
	inv      *inventory.Service
	logger   *slog.Logger
	poll     time.Duration
	obs      TaskObserver

	// started marks tasks running, tasks reads them: a burst's first
	// calls each need both, and get them in a few statements.
	started  coalescer[uuid.UUID, dbsqlc.TaskMarkRunningManyRow]
	tasks    coalescer[uuid.UUID, dbsqlc.Task]
	blocking coalescer[blockingKey, []uuid.UUID]
	scope    coalescer[uuid.UUID, scopeRead]
	scopes   scopeCache
}

// scopeRead is a task's scope as read, or why it could not be decoded.
type scopeRead struct {
	s   *taskScope
	err error
}

// blockingKey is one readiness question: the components (their IDs
// joined), the operation type and whether the whole rack's compute trays
// count.
type blockingKey struct {
	ids        string
	op         string
	rackScoped bool
}

// ActionDeps is what the rule actions use. Keys may be nil (no
// data-encryption key: firmware steps of tasks with credentials fail).
// PollInterval, when positive, replaces the rules' poll interval of
// FirmwareControl, WaitBringUp and WaitDecommissioned
// (FLOW_FIRMWARE_POLL_INTERVAL).
type ActionDeps struct {
	Pool         *pgxpool.Pool
	Backends     Backends
	Inv          *inventory.Service // component operation status, for the readiness gate
	Keys         *firmware.Keyring
	Logger       *slog.Logger
	PollInterval time.Duration
	// Observer, if set, hears of each task's start (its first call).
	Observer TaskObserver
}

// RegisterActions registers the rule actions with e. Call it once, in app,
// before the engine's River client starts.
func RegisterActions(e *engine.Engine, d ActionDeps) {
	a := &actions{
		pool: d.Pool, q: dbsqlc.New(), backends: d.Backends, inv: d.Inv,
		logger: d.Logger, poll: d.PollInterval, obs: d.Observer,
	}
	a.started.run = func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]dbsqlc.TaskMarkRunningManyRow, error) {
		rows, err := a.q.TaskMarkRunningMany(ctx, a.pool, ids)
		for _, r := range rows {
			// The run's first call checks readiness next: its scope is here
			// (one that cannot be decoded is read again, and fails, there).
			_, _ = a.scopes.load(r.ID, r.Components, r.Targets)
		}
		return keyed(rows, func(r dbsqlc.TaskMarkRunningManyRow) uuid.UUID { return r.ID }), err
	}
	a.scope.run = func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]scopeRead, error) {
		rows, err := a.q.TaskScopeByIDs(ctx, db.GenericPlans{Pool: a.pool}, ids)
		out := make(map[uuid.UUID]scopeRead, len(rows))
		for _, r := range rows {
			sc, err := a.scopes.load(r.ID, r.Components, r.Targets)
			out[r.ID] = scopeRead{sc, err}
		}
		return out, err
	}
	a.blocking.run = func(ctx context.Context, keys []blockingKey) (map[blockingKey][]uuid.UUID, error) {
		qs := make([]inventory.BlockingQuery, len(keys))
		for i, k := range keys {
			qs[i] = inventory.BlockingQuery{IDs: splitIDs(k.ids), Op: k.op, RackScoped: k.rackScoped}
		}
		answers, err := a.inv.BlockingMany(ctx, db.GenericPlans{Pool: a.pool}, qs)
		if err != nil {
			return nil, err
		}
		out := make(map[blockingKey][]uuid.UUID, len(keys))
		for i, k := range keys {
			out[k] = answers[i]
		}
		return out, nil
	}
	a.tasks.run = func(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]dbsqlc.Task, error) {
		rows, err := a.q.TaskGetByIDs(ctx, db.GenericPlans{Pool: a.pool}, ids)
		return keyed(rows, func(r dbsqlc.Task) uuid.UUID { return r.ID }), err
	}
	engine.Register(e, kindPowerControl, a.powerControl)
	engine.Register(e, kindVerifyPowerStatus, a.verifyPowerStatus)
	engine.Register(e, kindGetPowerStatus, a.getPowerStatus)
	engine.Register(e, kindSleep, a.sleep)
	fw := firmware.NewSteps(firmwareHost{a}, d.Keys, d.Logger)
	engine.Register(e, kindFirmwareControl, fw.Control)
	engine.Register(e, kindVerifyFirmwareConsistency, fw.VerifyConsistency)
	engine.Register(e, kindVerifyFirmwareVersions, fw.VerifyVersions)
	engine.Register(e, kindBringUpControl, a.bringUpControl)
	engine.Register(e, kindWaitBringUp, a.waitBringUp)
	engine.Register(e, kindInjectExpectation, a.injectExpectation)
	engine.Register(e, kindDecommissionControl, a.decommissionControl)
	engine.Register(e, kindWaitDecommissioned, a.waitDecommissioned)
	engine.Register(e, kindVerifyReachability, a.verifyReachability)
}

// pollEvery returns the poll interval of a long hardware wait: the
// server's override when set, else the rule's.
func (a *actions) pollEvery(rule time.Duration) time.Duration {
	if a.poll > 0 {
		return a.poll
	}
	return rule
}

// backendType maps a rule component type to the component managers' name.
func backendType(t ComponentType) backend.ComponentType {
	return backend.ComponentType(strings.ToLower(string(t)))
}

// markRunning moves the task from pending to running on the first call of
// its run (a no-op on any later call).
func (a *actions) markRunning(ctx context.Context, call engine.Call[ActionParams]) error {
	if call.Stage != 0 || call.Batch != 0 || call.Attempt != 1 {
		return nil
	}
	row, ok, err := a.started.get(ctx, call.Params.TaskID)
	if err != nil {
		return fmt.Errorf("mark task running: %w", err)
	}
	if a.obs != nil && ok {
		a.obs.TaskEvent(ctx, TaskEvent{Kind: TaskStarted, TaskID: call.Params.TaskID, Rack: call.Labels["rack"],
			Operation: OperationCode(row.OperationCode), Type: OperationType(row.OperationType),
			Status: TaskRunning, Message: "Running", SubmittedAt: row.CreatedAt, At: time.Now(), LeakObservedAt: unixNano(call.Params.LeakObservedAt)})
	}
	return nil
}

// begin marks the task running on its first call and returns the manager
// and target of the call.
func (a *actions) begin(ctx context.Context, call engine.Call[ActionParams]) (*backend.Manager, backend.Target, error) {
	if err := a.markRunning(ctx, call); err != nil {
		return nil, backend.Target{}, err
	}
	m := a.backends.For(backendType(call.Params.ComponentType))
	if m == nil {
		return nil, backend.Target{}, engine.Permanent(fmt.Errorf("no component manager for %s", call.Params.ComponentType))
	}
	t := backend.Target{IDs: call.Targets}
	if call.Params.ByMAC {
		t = backend.Target{MACs: call.Targets}
	}
	return m, t, nil
}

// permanentIf marks errors that no retry can cure.
func permanentIf(err error) error {
	if isPermanent(err) {
		return engine.Permanent(err)
	}
	return err
}

func (a *actions) sleep(ctx context.Context, call engine.Call[ActionParams]) (engine.Result, error) {
	// A sleep has no targets, so its one call is batch 0.
	if err := a.markRunning(ctx, call); err != nil {
		return engine.Result{}, err
	}
	p, err := call.Params.Action.SleepParams()
	if err != nil {
		return engine.Result{}, engine.Permanent(err)
	}
	return engine.Result{Sleep: p.Duration}, nil
}

func (a *actions) powerControl(ctx context.Context, call engine.Call[ActionParams]) (engine.Result, error) {
	m, target, err := a.begin(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	op := backend.PowerOp(call.Params.Operation)
	if wait, err := a.readinessGate(ctx, call, OperationTypePowerControl); err != nil || wait > 0 {
		return engine.Result{PollAfter: wait}, err
	}
	if call.OutcomeUnknown && isReset(op) {
		// An earlier reset of this batch may have reached the devices
		// (its server died or lost its database lease before recording
		// the answer): do not reboot again the devices still going
		// through it.
		if target = a.notMidReset(ctx, m, call, target); len(targetKeys(target)) == 0 {
			return engine.Result{}, nil
		}
	}
	results, err := m.PowerControl(ctx, target, op, call.Params.Override)
	if err == nil {
		return engine.Result{}, nil
	}
	err = permanentIf(fmt.Errorf("%s %s: %w", call.Params.ComponentType, op, err))
	// The call failed for some devices only: once no retry is left, those
	// fail and the others go on through the rest of the rule step.
	if failed := itemFailures(call.Targets, results); failed != nil && (call.Attempt >= call.MaxAttempts || isPermanent(err)) {
		return engine.Result{Failed: failed}, nil
	}
	return engine.Result{}, err
}

// isReset reports whether op reboots a device: repeating it reboots it
// again, unlike a power on or off.
func isReset(op backend.PowerOp) bool {
	switch op {
	case backend.Restart, backend.WarmReset, backend.ForceRestart, backend.ColdReset:
		return true
	}
	return false
}

// notMidReset returns the components of t not powering on or off right
// now (backend.PowerStateTransitioning), for a reset whose earlier call's
// outcome is unknown: a device in transition got that call. Core's
// inventory tells no more (no last-reboot time), so a device that has
// already come back up is reset again; PSM has no reset. When the status
// cannot be read, every component is reset again (at least once).
func (a *actions) notMidReset(ctx context.Context, m *backend.Manager, call engine.Call[ActionParams], t backend.Target) backend.Target {
	status, err := m.PowerStatus(ctx, t)
	if err != nil {
		a.logger.WarnContext(ctx, "reset with an unknown earlier outcome: power state unreadable, resetting again",
			"task_id", call.Params.TaskID, "step", call.Step, "error", err.Error())
		return t
	}
	moving := map[string]bool{}
	for k, st := range status {
		moving[strings.ToLower(k)] = st == backend.PowerStateTransitioning
	}
	keep := func(keys []string) (left, skipped []string) {
		for _, k := range keys {
			if moving[strings.ToLower(k)] {
				skipped = append(skipped, k)
			} else {
				left = append(left, k)
			}
		}
		return left, skipped
	}
	var skipped []string
	if len(t.MACs) > 0 {
		t.MACs, skipped = keep(t.MACs)
	} else {
		t.IDs, skipped = keep(t.IDs)
	}
	if len(skipped) > 0 {
		a.logger.WarnContext(ctx, "reset with an unknown earlier outcome: not resetting again the devices still going through it",
			"task_id", call.Params.TaskID, "step", call.Step, "components", skipped)
	}
	return t
}

// itemFailures returns the targets a batch call failed with why, when it
// succeeded for at least one other target (nil otherwise: the call failed
// whole). A target the results do not mention failed.
func itemFailures(targets []string, results []backend.Result) map[string]string {
	byKey := make(map[string]error, len(results))
	for _, r := range results {
		byKey[strings.ToLower(r.Key)] = r.Err
	}
	failed := map[string]string{}
	for _, t := range targets {
		err, ok := byKey[strings.ToLower(t)]
		switch {
		case !ok:
			failed[t] = "no result for this component"
		case err != nil:
			failed[t] = err.Error()
		}
	}
	if len(failed) == 0 || len(failed) == len(targets) {
		return nil
	}
	return failed
}

// isPermanent reports whether no retry can cure err.
func isPermanent(err error) bool {
	return errors.Is(err, backend.ErrNotConfigured) || errors.Is(err, backend.ErrUnsupported)
}

func (a *actions) getPowerStatus(ctx context.Context, call engine.Call[ActionParams]) (engine.Result, error) {
	m, target, err := a.begin(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	if _, err := m.PowerStatus(ctx, target); err != nil {
		return engine.Result{}, permanentIf(err)
	}
	return engine.Result{}, nil
}

// pollState is the checkpoint of a polling action: its deadline, computed
// once when the action starts and honoured after restarts, the polls so
// far, and the targets seen in the expected state.
type pollState struct {
	Deadline time.Time `json:"deadline"`
	Polls    int       `json:"polls"`
	Verified []string  `json:"verified,omitempty"`
}

// verifyPowerStatus polls until every target has reported the expected
// power state (spec §8.6): the first probe is immediate, call errors are
// tolerated, and the deadline is start + the action's timeout. A target
// counts verified from the first poll that shows it in the state (upstream
// asks for all in one poll; a target's verification is what the report
// counts, so it must not be taken back). At the deadline, the targets not
// verified fail and the verified ones go on; with none verified the call
// fails whole.
func (a *actions) verifyPowerStatus(ctx context.Context, call engine.Call[ActionParams]) (engine.Result, error) {
	m, target, err := a.begin(ctx, call)
	if err != nil {
		return engine.Result{}, err
	}
	p, err := call.Params.Action.VerifyPowerStatusParams()
	if err != nil {
		return engine.Result{}, engine.Permanent(err)
	}
	var st pollState
	if ok, err := call.Checkpoint(&st); err != nil {
		return engine.Result{}, err
	} else if !ok {
		st.Deadline = time.Now().Add(p.Timeout)
	}
	st.Polls++
	want := strings.ToLower(string(p.Expected))
	status, err := m.PowerStatus(ctx, target)
	if errors.Is(err, backend.ErrNotConfigured) {
		return engine.Result{}, engine.Permanent(err)
	}
	if err == nil {
		for _, id := range call.Targets {
			if !slices.Contains(st.Verified, id) && strings.EqualFold(string(status[id]), want) {
				st.Verified = append(st.Verified, id)
			}
		}
	}
	if len(st.Verified) == len(call.Targets) {
		return engine.Result{}, nil
	}
	if !time.Now().Before(st.Deadline) {
		if len(st.Verified) == 0 {
			return engine.Result{}, engine.Permanent(fmt.Errorf("timeout after %s waiting for power status %s (attempts: %d)", p.Timeout, p.Expected, st.Polls))
		}
		failed := map[string]string{}
		for _, id := range call.Targets {
			if !slices.Contains(st.Verified, id) {
				failed[id] = fmt.Sprintf("timeout after %s waiting for power status %s (attempts: %d, last seen: %s)", p.Timeout, p.Expected, st.Polls, cmp.Or(string(status[id]), "no answer"))
			}
		}
		return engine.Result{Failed: failed}, nil
	}
	if err := call.SaveCheckpoint(ctx, st); err != nil {
		return engine.Result{}, err
	}
	polls := 1
	if p.PollInterval > 0 {
		polls += int(p.Timeout / p.PollInterval)
	}
	progress := engine.Progress{
		Completed: call.Batch*call.Params.BatchSize + len(st.Verified), Done: st.Verified, Until: st.Deadline,
		Message: fmt.Sprintf("verifying power %s, poll %d of %d, %d of %d verified", want, st.Polls, polls, len(st.Verified), len(call.Targets)),
	}
	if err := call.ReportProgress(ctx, progress); err != nil {
		return engine.Result{}, err
	}
	return engine.Result{PollAfter: min(p.PollInterval, time.Until(st.Deadline)+time.Millisecond)}, nil
}

// Readiness gate timing (spec §8.7).
const (
	GateTimeout = 30 * time.Minute
	gatePoll    = 5 * time.Second
)

// gateState is the checkpoint of a call waiting at the readiness gate: the
// deadline, computed once.
type gateState struct {
	GateUntil time.Time `json:"gate_until"`
}

// readinessGate holds a disruptive call while a targeted component's
// operation status blocks op (for switches and power shelves: while any
// compute tray of their rack does), polling durably every 5 s for up to 30
// minutes (spec §8.7). It answers how long to wait before calling again (0:
// go ahead). With override_readiness_check it lets the call through and
// logs the bypass (the flag is also passed to the backend).
func (a *actions) readinessGate(ctx context.Context, call engine.Call[ActionParams], op OperationType) (time.Duration, error) {
	if call.Params.Override {
		a.logger.InfoContext(ctx, "readiness check overridden", "task_id", call.Params.TaskID, "step", call.Step)
		return 0, nil
	}
	ids, err := a.batchComponents(ctx, call)
	if err != nil {
		return 0, err
	}
	rackScoped := call.Params.ComponentType != ComponentTypeCompute
	blocking, _, err := a.blocking.get(ctx, blockingKey{ids: joinIDs(ids), op: string(op), rackScoped: rackScoped})
	if err != nil {
		return 0, err
	}
	var st gateState
	if _, err := call.Checkpoint(&st); err != nil {
		return 0, err
	}
	if len(blocking) == 0 {
		if !st.GateUntil.IsZero() {
			// The wait is over: the report stops naming it.
			_ = call.ReportProgress(ctx, engine.Progress{})
		}
		return 0, nil
	}
	if st.GateUntil.IsZero() {
		st.GateUntil = time.Now().Add(GateTimeout)
		if err := call.SaveCheckpoint(ctx, st); err != nil {
			return 0, err
		}
	}
	if !time.Now().Before(st.GateUntil) {
		return 0, engine.Permanent(fmt.Errorf("timed out after %s waiting for components to become ready for %s: %v", GateTimeout, op, blocking))
	}
	msg := fmt.Sprintf("waiting for %d component(s) to become ready for %s, until %s", len(blocking), op, st.GateUntil.UTC().Format(time.TimeOnly))
	if err := call.ReportProgress(ctx, engine.Progress{Message: msg, Until: st.GateUntil}); err != nil {
		return 0, err
	}
	return min(gatePoll, time.Until(st.GateUntil)+time.Millisecond), nil
}

// batchComponents returns the UUIDs of the components in the call's batch:
// the task's frozen scope lists them in the order of its backend
// identifiers. The scope is read once per task and process (scopeCache).
func (a *actions) batchComponents(ctx context.Context, call engine.Call[ActionParams]) ([]uuid.UUID, error) {
	id := call.Params.TaskID
	sc, ok := a.scopes.get(id)
	if !ok {
		r, found, err := a.scope.get(ctx, id)
		if err == nil && !found {
			err = pgx.ErrNoRows
		}
		if err != nil {
			return nil, fmt.Errorf("read task %s: %w", id, err)
		}
		if r.err != nil {
			return nil, r.err
		}
		sc = r.s
	}
	return sc.batch(call.Params.ComponentType, call.Targets), nil
}

// taskIDOf returns the task of a run's owner string.
func taskIDOf(owner string) (uuid.UUID, error) { return uuid.Parse(owner) }

// joinIDs and splitIDs turn component IDs into a comparable key and back.
func joinIDs(ids []uuid.UUID) string {
	b := make([]byte, 0, len(ids)*16)
	for _, id := range ids {
		b = append(b, id[:]...)
	}
	return string(b)
}

func splitIDs(s string) []uuid.UUID {
	ids := make([]uuid.UUID, len(s)/16)
	for i := range ids {
		copy(ids[i][:], s[i*16:])
	}
	return ids
}

// unixNano is n Unix nanoseconds, or the zero time for 0.
func unixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
