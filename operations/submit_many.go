package operations

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// Submission is one request of a SubmitMany, and its answer.
type Submission struct {
	// Ctx is the request's own context: its span is the parent of the
	// submission's, its commit hooks hear of the task events. Nil is the
	// SubmitMany's ctx.
	Ctx context.Context
	Req Request
	// IDs are the request's tasks, in rack-ID order, once Err is nil.
	IDs []uuid.UUID
	// Err is the request's own failure (bad input, a conflict, a full
	// queue...): nothing of the request is written, the others go on.
	Err error

	span  trace.Span
	racks []string // the racks of IDs, for the span
	plans []rackPlan
	info  []byte
	done  bool // answered without writing (an idempotency key's task)
}

func (s *Submission) live() bool { return s.Err == nil && !s.done }

// Submit validates req as a whole, then writes one task per targeted rack,
// in one transaction through tx: PENDING tasks with their engine runs, or
// WAITING tasks when req.Queue and the rack is busy. Nothing is written when
// any rack fails: a conflict with REJECT is ErrConflict naming the rack and
// the blocking task, a full queue ErrQueueFull. It returns the task IDs in
// rack-ID order.
func (t *Tasks) Submit(ctx context.Context, tx pgx.Tx, req Request) ([]uuid.UUID, error) {
	s := &Submission{Ctx: ctx, Req: req}
	if err := t.SubmitMany(ctx, tx, []*Submission{s}); err != nil {
		return nil, err
	}
	return s.IDs, s.Err
}

// SubmitMany submits each of subs as Submit would, one after the other in
// one transaction through tx, each seeing the tasks of those before it, but
// in a few statements whatever their number: the racks of all are read,
// locked and checked together, and their tasks and runs inserted together.
// A request's own failure is its Err, and the others go on. An error
// returned is the transaction's (a statement failed, and tx is aborted:
// the caller rolls back, and may submit each request alone to give each its
// own answer).
func (t *Tasks) SubmitMany(ctx context.Context, tx pgx.Tx, subs []*Submission) (err error) {
	for _, s := range subs {
		s.Ctx = cmp.Or(s.Ctx, ctx)
		s.Ctx, s.span = t.tracer.Start(s.Ctx, "operations.submit", trace.WithAttributes(
			attribute.String("flow.operation", string(s.Req.Code)), attribute.String("flow.operation_type", string(s.Req.Type))))
	}
	defer func() {
		for _, s := range subs {
			if e := cmp.Or(err, s.Err); e != nil {
				s.span.SetStatus(codes.Error, e.Error())
			}
			s.span.End()
		}
	}()
	for _, s := range subs {
		s.Err = validateRequest(s.Req)
	}
	if err := t.lookUpKeys(ctx, tx, subs); err != nil {
		return err
	}
	t.prepare(subs)
	if err := t.planMany(ctx, tx, subs); err != nil {
		return err
	}
	return t.admitMany(ctx, tx, subs)
}

// prepare seals each live request's credentials and encodes its payload,
// before its targets are read.
func (t *Tasks) prepare(subs []*Submission) {
	for _, s := range subs {
		if !s.live() {
			continue
		}
		envelope, err := t.seal(s.Req)
		if err != nil {
			s.Err = err
			continue
		}
		s.Req.Payload.AuthenticationData = envelope
		if s.Req.RuleID != uuid.Nil {
			s.Req.Payload.RuleID = s.Req.RuleID.String()
		}
		s.info, s.Err = json.Marshal(s.Req.Payload)
	}
}

// lookUpKeys answers the requests whose idempotency key already has a task
// with that task, in one query for all.
func (t *Tasks) lookUpKeys(ctx context.Context, tx pgx.Tx, subs []*Submission) error {
	var keys []string
	for _, s := range subs {
		if s.live() && s.Req.IdempotencyKey != "" {
			keys = append(keys, s.Req.IdempotencyKey)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	rows, err := t.q.TaskGetByIdempotencyKeys(ctx, tx, keys)
	if err != nil {
		return fmt.Errorf("idempotency lookup: %w", err)
	}
	byKey := make(map[string]dbsqlc.Task, len(rows))
	for _, r := range rows {
		byKey[*r.IdempotencyKey] = r
	}
	for _, s := range subs {
		if !s.live() || s.Req.IdempotencyKey == "" {
			continue
		}
		if existing, ok := byKey[s.Req.IdempotencyKey]; ok {
			s.answerKey(existing.ID, existing.RackID)
		}
	}
	return nil
}

// answerKey answers s with the task its idempotency key already has.
func (s *Submission) answerKey(id, rack uuid.UUID) {
	if rack != s.Req.RequiredRackID {
		s.Err = invalidRequest("idempotency_key", "key %q belongs to a task on another rack", s.Req.IdempotencyKey)
		return
	}
	s.IDs, s.done = []uuid.UUID{id}, true
}

// planMany resolves the live requests' targets, all in one listing, then
// plans and validates every rack of each (spec §4 step 5), writing nothing.
func (t *Tasks) planMany(ctx context.Context, tx pgx.Tx, subs []*Submission) error {
	var live []*Submission
	specs := make([]inventory.TargetSpec, 0, len(subs))
	for _, s := range subs {
		if s.live() {
			live = append(live, s)
			specs = append(specs, s.Req.Targets)
		}
	}
	if len(live) == 0 {
		return nil
	}
	sels, errs := t.inv.ResolveTargetsMany(ctx, tx, specs)
	if txFailed(tx) {
		return cmp.Or(errors.Join(errs...), errors.New("resolve targets: the transaction failed"))
	}
	rules, err := t.resolveRules(ctx, tx, live, sels, errs)
	if err != nil {
		return err
	}
	for i, s := range live {
		if errs[i] == nil {
			s.plans, errs[i] = t.planSelections(ctx, tx, s.Req, sels[i], rules[ruleKey{s.Req.Type, s.Req.Code}])
		}
		if errs[i] != nil {
			if txFailed(tx) {
				return errs[i]
			}
			s.Err = errs[i]
		}
	}
	return nil
}

// ruleKey is an operation whose rules resolveRules resolved.
type ruleKey struct {
	typ  OperationType
	code OperationCode
}

// resolveRules resolves, one query per operation, the rules of the racks
// of the requests that name no rule, when there are several of them (a
// lone request resolves its own, in planRack).
func (t *Tasks) resolveRules(ctx context.Context, tx pgx.Tx, live []*Submission, sels [][]inventory.Selection, errs []error) (map[ruleKey]map[uuid.UUID]ResolvedRule, error) {
	racks := map[ruleKey][]uuid.UUID{}
	n := 0
	for i, s := range live {
		if errs[i] != nil || s.Req.RuleID != uuid.Nil || !s.Req.Type.HasCode(s.Req.Code) {
			continue
		}
		k := ruleKey{s.Req.Type, s.Req.Code}
		for _, sel := range sels[i] {
			racks[k] = append(racks[k], sel.Rack.ID)
			n++
		}
	}
	if n < 2 {
		return nil, nil
	}
	out := make(map[ruleKey]map[uuid.UUID]ResolvedRule, len(racks))
	for k, ids := range racks {
		rules, err := t.rules.ResolveRules(ctx, tx, k.typ, k.code, ids)
		if err != nil {
			return nil, err
		}
		out[k] = rules
	}
	return out, nil
}

// txFailed reports whether a statement failed in tx, which PostgreSQL then
// refuses every further statement of.
func txFailed(tx pgx.Tx) bool {
	return tx.Conn().PgConn().TxStatus() == 'E'
}

// planSelections plans each rack of one request's resolved targets.
func (t *Tasks) planSelections(ctx context.Context, tx pgx.Tx, req Request, sels []inventory.Selection, rules map[uuid.UUID]ResolvedRule) ([]rackPlan, error) {
	if len(sels) == 0 {
		return nil, fmt.Errorf("%w: no valid racks found for request", ErrNotApplicable)
	}
	if req.RequiredRackID != uuid.Nil && (len(sels) != 1 || sels[0].Rack.ID != req.RequiredRackID) {
		return nil, invalidRequest("target_spec", "targets must resolve to exactly rack %s", req.RequiredRackID)
	}
	sort.Slice(sels, func(i, j int) bool { return sels[i].Rack.ID.String() < sels[j].Rack.ID.String() })
	plans := make([]rackPlan, 0, len(sels))
	for _, sel := range sels {
		p, err := t.planRack(ctx, tx, req, sel, rules)
		if err != nil {
			return nil, err
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// activeTask is what admission needs of a rack's unfinished task.
type activeTask struct {
	id           uuid.UUID
	status       TaskStatus
	scope        TaskScope
	opType, code string
}

// admittedTask is one rack's task of a request, ready to insert.
type admittedTask struct {
	sub     *Submission
	rack    inventory.Rack
	scope   TaskScope // what it holds the rack with
	row     taskRow
	plan    *engine.Plan // nil: waiting
	expires time.Time
	// wake is when its rack is promoted again: the queue deadline, or the
	// next window opening of a task a StartGate holds.
	wake time.Time
}

// taskRow is one row of TaskInsertMany.
type taskRow struct {
	ID             uuid.UUID       `json:"id"`
	OperationType  string          `json:"operation_type"`
	OperationCode  string          `json:"operation_code"`
	Information    json.RawMessage `json:"information"`
	Description    string          `json:"description"`
	RackID         uuid.UUID       `json:"rack_id"`
	Components     json.RawMessage `json:"components"`
	ComponentIDs   []uuid.UUID     `json:"component_ids"`
	Targets        json.RawMessage `json:"targets"`
	Rule           json.RawMessage `json:"rule"`
	RuleName       string          `json:"rule_name"`
	AppliedRuleID  *uuid.UUID      `json:"applied_rule_id"`
	Status         string          `json:"status"`
	Message        string          `json:"message"`
	RunID          *int64          `json:"run_id"`
	QueueExpiresAt *time.Time      `json:"queue_expires_at"`
	IdempotencyKey *string         `json:"idempotency_key"`
	TriggerType    string          `json:"trigger_type"`
	TriggerID      string          `json:"trigger_id"`
	NotTargeted    json.RawMessage `json:"not_targeted"`
	SubmittedBy    string          `json:"submitted_by"`
	// WindowHeldUntil is the next window opening of a task a StartGate
	// holds.
	WindowHeldUntil *time.Time `json:"window_held_until"`
	// ApprovalID is the approval request a task of a bulk submission
	// waits for (Tasks.SetApprover).
	ApprovalID *uuid.UUID `json:"approval_id"`
	Seq        int64      `json:"seq"`
}

// admitMany writes the live requests' tasks under their racks' locks, in
// arrival order: PENDING with its run, WAITING behind a conflict, or the
// request's error. The locks are taken together in rack-ID order, as one
// request on many racks takes them.
func (t *Tasks) admitMany(ctx context.Context, tx pgx.Tx, subs []*Submission) error {
	var ids []uuid.UUID
	for _, s := range subs {
		if !s.live() {
			continue
		}
		for _, p := range s.plans {
			ids = append(ids, p.rack.ID)
		}
	}
	ids = uniq(ids)
	if len(ids) == 0 {
		return nil
	}
	rows, err := t.q.TaskLockRacksThenActive(ctx, tx, rackKeys(ids), ids)
	if err != nil {
		return fmt.Errorf("lock racks and read their active tasks: %w", err)
	}
	active := make(map[uuid.UUID][]activeTask, len(ids))
	for _, r := range rows {
		active[r.RackID] = append(active[r.RackID], activeTask{
			id: r.ID, status: TaskStatus(r.Status), scope: scopeOfRow(r), opType: r.OperationType, code: r.OperationCode,
		})
	}

	var admitted []admittedTask
	keyTaken := map[string]admittedTask{}
	for _, s := range subs {
		if !s.live() {
			continue
		}
		if k := s.Req.IdempotencyKey; k != "" {
			if prev, ok := keyTaken[k]; ok {
				s.answerKey(prev.row.ID, prev.rack.ID)
				continue
			}
		}
		tasks, err := t.decide(s, active)
		if err == nil {
			err = t.gateMany(ctx, tx, s, tasks, active)
		}
		if err == nil {
			err = t.approveMany(ctx, tx, s, tasks)
		}
		if err != nil {
			s.Err = err
			continue
		}
		for _, a := range tasks {
			active[a.rack.ID] = append(active[a.rack.ID], activeTask{
				id: a.row.ID, status: TaskStatus(a.row.Status), scope: a.scope, opType: a.row.OperationType, code: a.row.OperationCode,
			})
			s.IDs, s.racks = append(s.IDs, a.row.ID), append(s.racks, rackLabel(a.rack))
		}
		if k := s.Req.IdempotencyKey; k != "" && len(tasks) > 0 {
			keyTaken[k] = tasks[0]
		}
		admitted = append(admitted, tasks...)
	}
	if err := t.insertMany(ctx, tx, admitted); err != nil {
		return err
	}
	for _, s := range subs {
		if !s.live() || len(s.IDs) == 0 {
			continue
		}
		taskIDs := make([]string, len(s.IDs))
		for i, id := range s.IDs {
			taskIDs[i] = id.String()
		}
		s.span.SetAttributes(attribute.StringSlice("flow.task_ids", taskIDs), attribute.StringSlice("flow.racks", s.racks))
		if len(taskIDs) == 1 {
			s.span.SetAttributes(attribute.String("flow.task_id", taskIDs[0]), attribute.String("flow.rack", s.racks[0]))
		}
	}
	return nil
}

// decide admits each rack of s against the racks' unfinished tasks: every
// rack's task, or the first rack's error.
func (t *Tasks) decide(s *Submission, active map[uuid.UUID][]activeTask) ([]admittedTask, error) {
	req := s.Req
	out := make([]admittedTask, 0, len(s.plans))
	for _, p := range s.plans {
		var blocking *activeTask
		waiting := 0
		for i := range active[p.rack.ID] {
			a := &active[p.rack.ID][i]
			if a.status == TaskWaiting {
				waiting++
				continue
			}
			if blocking == nil && Conflicts(p.scope, a.scope) {
				blocking = a
			}
		}
		info, payload := s.info, req.Payload
		if p.targetVersion != "" {
			payload.TargetVersion = p.targetVersion
			var err error
			if info, err = json.Marshal(payload); err != nil {
				return nil, err
			}
		}
		a := admittedTask{sub: s, rack: p.rack, scope: p.scope, row: t.taskRow(req, p, info)}
		// A queued request also waits behind tasks already waiting: promotion
		// is strict FIFO, so overtaking them would break the order.
		// A leak response waits behind nothing (Preempt).
		if !req.Preempt && (blocking != nil || (req.Queue && waiting > 0)) {
			if !req.Queue {
				return nil, fmt.Errorf("%w: rack %s: task %s (%s %s, %s)", ErrConflict, rackLabel(p.rack), blocking.id, blocking.opType, blocking.code, blocking.status)
			}
			if waiting >= MaxWaitingPerRack {
				return nil, fmt.Errorf("%w: rack %s waiting queue is full (%d/%d tasks)", ErrQueueFull, rackLabel(p.rack), waiting, MaxWaitingPerRack)
			}
			timeout := req.QueueTimeout
			if timeout <= 0 {
				timeout = DefaultQueueTimeout
			}
			a.expires = t.now().Add(timeout)
			a.row.Status, a.row.Message, a.row.QueueExpiresAt = string(TaskWaiting), msgQueued, &a.expires
			a.wake = a.expires
			out = append(out, a)
			continue
		}
		plan, err := runPlan(a.row.ID, p.rack, req.Type, req.Code, p.rule.Rule.Definition, p.targets, payload, t.verifyGrace, t.holds)
		if err != nil {
			return nil, err
		}
		if trace.SpanContextFromContext(s.Ctx).IsValid() {
			plan.Trace = map[string]string{}
			propagation.TraceContext{}.Inject(s.Ctx, propagation.MapCarrier(plan.Trace))
		}
		a.plan = &plan
		a.row.Status, a.row.Message = string(TaskPending), msgPending
		out = append(out, a)
	}
	return out, nil
}

// taskRow is the row of rack plan p's task of req.
func (t *Tasks) taskRow(req Request, p rackPlan, info []byte) taskRow {
	components, _ := json.Marshal(p.components)
	targets, _ := json.Marshal(p.targets)
	rule, _ := json.Marshal(p.rule.Rule.Definition)
	if p.notTargeted == nil {
		p.notTargeted = []NotTargeted{}
	}
	notTargeted, _ := json.Marshal(p.notTargeted)
	row := taskRow{
		ID: uuid.New(), OperationType: string(req.Type), OperationCode: string(req.Code), Information: info,
		Description: req.Description, RackID: p.rack.ID, Components: components, ComponentIDs: p.ids,
		Targets: targets, Rule: rule, RuleName: p.rule.Rule.Name, TriggerType: req.TriggerType, TriggerID: req.TriggerID,
		NotTargeted: notTargeted, SubmittedBy: req.SubmittedBy,
	}
	if row.ComponentIDs == nil {
		row.ComponentIDs = []uuid.UUID{}
	}
	if p.rule.Rule.ID != uuid.Nil {
		ruleID := p.rule.Rule.ID
		row.AppliedRuleID = &ruleID
	}
	if req.IdempotencyKey != "" {
		key := req.IdempotencyKey
		row.IdempotencyKey = &key
	}
	return row
}

// insertMany starts the admitted pending tasks' runs, all in one
// StartMany, then inserts every admitted task in one statement and
// schedules the waiting ones' expiry.
func (t *Tasks) insertMany(ctx context.Context, tx pgx.Tx, admitted []admittedTask) error {
	if len(admitted) == 0 {
		return nil
	}
	var plans []engine.Plan
	var first *Submission
	single := true // every run is of one request
	for _, a := range admitted {
		if a.plan != nil {
			plans = append(plans, *a.plan)
			first = cmp.Or(first, a.sub)
			single = single && a.sub == first
		}
	}
	if len(plans) > 0 {
		// One request's jobs carry its trace through its context, as River
		// inserts them; a burst's carry each their own (Plan.Trace), so the
		// context River sees carries none.
		sctx := first.Ctx
		if single {
			for i := range plans {
				plans[i].Trace = nil
			}
		} else {
			sctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(context.Background()))
		}
		runIDs, err := t.engine.StartMany(sctx, tx, plans)
		if err != nil {
			return startError(err)
		}
		n := 0
		for i := range admitted {
			if admitted[i].plan != nil {
				admitted[i].row.RunID = ptrTo(int64(runIDs[n]))
				n++
			}
		}
	}
	rows := make([]taskRow, len(admitted))
	for i, a := range admitted {
		rows[i] = a.row
		rows[i].Seq = int64(i)
	}
	b, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("encode tasks: %w", err)
	}
	if err := t.q.TaskInsertMany(ctx, tx, b); err != nil {
		return t.insertError(err)
	}
	now := time.Now()
	for _, a := range admitted {
		ev := TaskEvent{Kind: TaskSubmitted, TaskID: a.row.ID, Rack: rackLabel(a.rack), Operation: a.sub.Req.Code, Type: a.sub.Req.Type,
			Status: TaskStatus(a.row.Status), Message: a.row.Message, SubmittedAt: now}
		t.observe(a.sub.Ctx, ev)
		if a.plan == nil && t.expiry != nil {
			if err := t.expiry(ctx, tx, a.rack.ID, a.wake); err != nil {
				return fmt.Errorf("schedule queue expiry: %w", err)
			}
		}
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }
