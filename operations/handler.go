package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Handler implements the operation-rule and rack-rule-association methods
// of v1.Flow. app embeds it in the one Flow handler.
type Handler struct {
	pool *pgxpool.Pool
	svc  *Service
}

// NewHandler returns a Handler serving svc over pool.
func NewHandler(pool *pgxpool.Pool, svc *Service) *Handler {
	return &Handler{pool: pool, svc: svc}
}

// CreateOperationRule creates a rule and returns its ID.
func (h *Handler) CreateOperationRule(ctx context.Context, req *flowv1.CreateOperationRuleRequest) (*flowv1.CreateOperationRuleResponse, error) {
	t, err := operationTypeFromProto("operation_type", req.GetOperationType())
	if err != nil {
		return nil, err
	}
	var rule Rule
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		rule, err = h.svc.CreateRule(ctx, tx, RuleInput{
			Name: req.GetName(), Description: req.GetDescription(),
			Type: t, Code: OperationCode(req.GetOperationCode()),
			Definition: []byte(req.GetRuleDefinitionJson()), IsDefault: req.GetIsDefault(),
		})
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.CreateOperationRuleResponse{Id: &flowv1.UUID{Id: rule.ID.String()}}, nil
}

// UpdateOperationRule changes the name, description and/or definition of a
// rule; absent fields are left as they are.
func (h *Handler) UpdateOperationRule(ctx context.Context, req *flowv1.UpdateOperationRuleRequest) (*emptypb.Empty, error) {
	id, err := parseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	change := RuleChange{Name: req.Name, Description: req.Description}
	if req.RuleDefinitionJson != nil {
		change.Definition = []byte(req.GetRuleDefinitionJson())
	}
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		_, err := h.svc.UpdateRule(ctx, tx, id, change)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// DeleteOperationRule deletes a rule that no rack is associated with.
func (h *Handler) DeleteOperationRule(ctx context.Context, req *flowv1.DeleteOperationRuleRequest) (*emptypb.Empty, error) {
	id, err := parseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error { return h.svc.DeleteRule(ctx, tx, id) }); err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// GetOperationRule returns one rule.
func (h *Handler) GetOperationRule(ctx context.Context, req *flowv1.GetOperationRuleRequest) (*flowv1.OperationRule, error) {
	id, err := parseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	rule, err := h.svc.Rule(ctx, h.pool, id)
	if err != nil {
		return nil, connectError(err)
	}
	return ruleToProto(rule)
}

// ListOperationRules lists rules, newest first, with optional type and
// default filters and offset/limit (defaults 0/100).
func (h *Handler) ListOperationRules(ctx context.Context, req *flowv1.ListOperationRulesRequest) (*flowv1.ListOperationRulesResponse, error) {
	var f RuleFilter
	if req.OperationType != nil {
		t, err := operationTypeFromProto("operation_type", req.GetOperationType())
		if err != nil {
			return nil, err
		}
		f.Type = &t
	}
	f.IsDefault = req.IsDefault
	if req.GetLimit() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("limit: must be >= 0, got %d", req.GetLimit()))
	}
	f.Offset, f.Limit = int(req.GetOffset()), int(req.GetLimit())
	rules, total, err := h.svc.ListRules(ctx, h.pool, f)
	if err != nil {
		return nil, connectError(err)
	}
	res := &flowv1.ListOperationRulesResponse{TotalCount: int32(total), Rules: make([]*flowv1.OperationRule, 0, len(rules))}
	for _, r := range rules {
		pr, err := ruleToProto(r)
		if err != nil {
			return nil, err
		}
		res.Rules = append(res.Rules, pr)
	}
	return res, nil
}

// SetRuleAsDefault makes a rule the default for its type and code, clearing
// the previous default in the same transaction.
func (h *Handler) SetRuleAsDefault(ctx context.Context, req *flowv1.SetRuleAsDefaultRequest) (*emptypb.Empty, error) {
	id, err := parseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error { return h.svc.SetDefaultRule(ctx, tx, id) }); err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// AssociateRuleWithRack makes a rack use a rule for the rule's type and code.
func (h *Handler) AssociateRuleWithRack(ctx context.Context, req *flowv1.AssociateRuleWithRackRequest) (*emptypb.Empty, error) {
	rackID, err := parseUUID("rack_id", req.GetRackId())
	if err != nil {
		return nil, err
	}
	ruleID, err := parseUUID("rule_id", req.GetRuleId())
	if err != nil {
		return nil, err
	}
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		_, err := h.svc.AssociateRule(ctx, tx, rackID, ruleID)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// DisassociateRuleFromRack removes a rack's rule association for a type and
// code.
func (h *Handler) DisassociateRuleFromRack(ctx context.Context, req *flowv1.DisassociateRuleFromRackRequest) (*emptypb.Empty, error) {
	rackID, t, err := parseAssociationKey(req.GetRackId(), req.GetOperationType())
	if err != nil {
		return nil, err
	}
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		return h.svc.DisassociateRule(ctx, tx, rackID, t, OperationCode(req.GetOperationCode()))
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// GetRackRuleAssociation returns the rule a rack uses for a type and code;
// rule_id is empty when the rack has no association.
func (h *Handler) GetRackRuleAssociation(ctx context.Context, req *flowv1.GetRackRuleAssociationRequest) (*flowv1.GetRackRuleAssociationResponse, error) {
	rackID, t, err := parseAssociationKey(req.GetRackId(), req.GetOperationType())
	if err != nil {
		return nil, err
	}
	a, err := h.svc.Association(ctx, h.pool, rackID, t, OperationCode(req.GetOperationCode()))
	if errors.Is(err, ErrAssociationNotFound) {
		return &flowv1.GetRackRuleAssociationResponse{}, nil
	} else if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.GetRackRuleAssociationResponse{RuleId: &flowv1.UUID{Id: a.RuleID.String()}}, nil
}

// ListRackRuleAssociations lists every rule association of a rack.
func (h *Handler) ListRackRuleAssociations(ctx context.Context, req *flowv1.ListRackRuleAssociationsRequest) (*flowv1.ListRackRuleAssociationsResponse, error) {
	rackID, err := parseUUID("rack_id", req.GetRackId())
	if err != nil {
		return nil, err
	}
	as, err := h.svc.Associations(ctx, h.pool, rackID)
	if err != nil {
		return nil, connectError(err)
	}
	res := &flowv1.ListRackRuleAssociationsResponse{Associations: make([]*flowv1.RackRuleAssociation, 0, len(as))}
	for _, a := range as {
		res.Associations = append(res.Associations, &flowv1.RackRuleAssociation{
			RackId:        &flowv1.UUID{Id: a.RackID.String()},
			OperationType: operationTypeToProto(a.Type),
			OperationCode: string(a.Code),
			RuleId:        &flowv1.UUID{Id: a.RuleID.String()},
			CreatedAt:     timestamppb.New(a.CreatedAt),
			UpdatedAt:     timestamppb.New(a.UpdatedAt),
		})
	}
	return res, nil
}

func parseAssociationKey(rack *flowv1.UUID, t flowv1.OperationType) (uuid.UUID, OperationType, error) {
	rackID, err := parseUUID("rack_id", rack)
	if err != nil {
		return uuid.Nil, "", err
	}
	ot, err := operationTypeFromProto("operation_type", t)
	if err != nil {
		return uuid.Nil, "", err
	}
	return rackID, ot, nil
}

// parseUUID reads a required UUID field, answering InvalidArgument that names
// the field.
func parseUUID(field string, u *flowv1.UUID) (uuid.UUID, error) {
	if u.GetId() == "" {
		return uuid.Nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is required", field))
	}
	id, err := uuid.Parse(u.GetId())
	if err != nil {
		return uuid.Nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: invalid UUID %q", field, u.GetId()))
	}
	return id, nil
}

// operationTypeFromProto maps the wire enum, which has only the two types
// users may write rules for.
func operationTypeFromProto(field string, t flowv1.OperationType) (OperationType, error) {
	switch t {
	case flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL:
		return OperationTypePowerControl, nil
	case flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL:
		return OperationTypeFirmwareControl, nil
	}
	return "", connect.NewError(connect.CodeInvalidArgument,
		fmt.Errorf("%s: must be OPERATION_TYPE_POWER_CONTROL or OPERATION_TYPE_FIRMWARE_CONTROL, got %v", field, t))
}

// operationTypeToProto maps a type to the wire enum; types the enum lacks
// (bring_up, decommission, inject_expectation) become UNKNOWN.
func operationTypeToProto(t OperationType) flowv1.OperationType {
	switch t {
	case OperationTypePowerControl:
		return flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL
	case OperationTypeFirmwareControl:
		return flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL
	}
	return flowv1.OperationType_OPERATION_TYPE_UNKNOWN
}

func ruleToProto(r Rule) (*flowv1.OperationRule, error) {
	def, err := json.Marshal(r.Definition)
	if err != nil {
		return nil, fmt.Errorf("encode rule %s definition: %w", r.ID, err)
	}
	return &flowv1.OperationRule{
		Id:                 &flowv1.UUID{Id: r.ID.String()},
		Name:               r.Name,
		Description:        r.Description,
		OperationType:      operationTypeToProto(r.Type),
		OperationCode:      string(r.Code),
		RuleDefinitionJson: string(def),
		IsDefault:          r.IsDefault,
		CreatedAt:          timestamppb.New(r.CreatedAt),
		UpdatedAt:          timestamppb.New(r.UpdatedAt),
	}, nil
}

// connectError maps the package's sentinel errors to Connect codes; anything
// else passes through for app's interceptor to log and hide.
func connectError(err error) error {
	switch {
	case errors.Is(err, ErrInvalidRule), errors.Is(err, ErrRuleMismatch):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrRuleNotFound), errors.Is(err, ErrRackNotFound), errors.Is(err, ErrAssociationNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrDefaultRuleExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, ErrRuleInUse):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return err
}

// TaskHandler implements the rack-operation methods (power control for now)
// and the task methods of v1.Flow. app embeds it in the one Flow handler.
type TaskHandler struct {
	pool  *pgxpool.Pool
	tasks *Tasks
	slots chan struct{} // nil: submissions are not limited

	mu      sync.Mutex
	pending []*submitCall // submissions waiting for a slot, in arrival order
	arrived time.Time     // when the last submission was queued
	dense   bool          // it came within submitBurstGap of the one before
}

// A submission that comes within submitBurstGap of the one before is part
// of a burst: a transaction about to take it lingers until no submission
// has come for submitBurstGap (at most submitLinger), so that the burst is
// written in one transaction instead of its first few each in their own.
const (
	submitBurstGap = 2 * time.Millisecond
	submitLinger   = 5 * time.Millisecond
)

// maxSubmitBatch bounds how many waiting submissions one transaction takes.
const maxSubmitBatch = 64

// LimitSubmits lets at most n submission transactions run at once; the
// submissions that arrive meanwhile wait, in arrival order, until their
// deadline, and the next transaction to start takes them (all, or after a
// burst one slot's share: see take) and writes them together
// (Tasks.SubmitMany). A burst of
// submissions is then written in a few transactions of a few statements
// each, instead of a dozen statements per submission all sharing the CPUs
// and ending at about the same late moment. n ≤ 0 removes the limit (and
// the batching: each submission has its own transaction). Call it before
// serving.
func (h *TaskHandler) LimitSubmits(n int) {
	h.slots = nil
	if n > 0 {
		h.slots = make(chan struct{}, n)
	}
}

// NewTaskHandler returns a TaskHandler serving tasks over pool.
func NewTaskHandler(pool *pgxpool.Pool, tasks *Tasks) *TaskHandler {
	return &TaskHandler{pool: pool, tasks: tasks}
}

// submitOptions are the request fields every rack operation shares.
type submitOptions struct {
	spec        *flowv1.OperationTargetSpec
	description string
	queue       *flowv1.QueueOptions
	ruleID      *flowv1.UUID
}

func (h *TaskHandler) submit(ctx context.Context, req Request, o submitOptions) (*flowv1.SubmitTaskResponse, error) {
	if o.spec == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("target_spec is required"))
	}
	spec, err := inventory.TargetSpecFromProto(o.spec, "target_spec")
	if err != nil {
		return nil, taskError(err)
	}
	req.Targets, req.Description = spec, o.description
	if o.ruleID != nil {
		if req.RuleID, err = parseUUID("rule_id", o.ruleID); err != nil {
			return nil, err
		}
	}
	switch o.queue.GetConflictStrategy() {
	case flowv1.ConflictStrategy_CONFLICT_STRATEGY_UNSPECIFIED, flowv1.ConflictStrategy_CONFLICT_STRATEGY_REJECT:
	case flowv1.ConflictStrategy_CONFLICT_STRATEGY_QUEUE:
		req.Queue = true
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("queue_options.conflict_strategy: unknown value %d", o.queue.GetConflictStrategy()))
	}
	if s := o.queue.GetQueueTimeoutSeconds(); s < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("queue_options.queue_timeout_seconds: must not be negative, got %d", s))
	} else if s > 0 {
		req.QueueTimeout = time.Duration(s) * time.Second
	}
	req.SubmittedBy = caller.Identity(ctx)
	if pv, ok := ctx.Value(previewKey{}).(*previewCall); ok {
		return h.preview(ctx, pv, req)
	}
	c := &submitCall{ctx: ctx, req: req, done: make(chan struct{})}
	if h.slots == nil {
		h.runBatch([]*submitCall{c})
	} else {
		h.wait(c)
	}
	if c.err != nil {
		return nil, c.err
	}
	if c.sub.Err != nil {
		return nil, taskError(c.sub.Err)
	}
	res := &flowv1.SubmitTaskResponse{TaskIds: make([]*flowv1.UUID, len(c.sub.IDs))}
	for i, id := range c.sub.IDs {
		res.TaskIds[i] = &flowv1.UUID{Id: id.String()}
	}
	return res, nil
}

// submitCall is a submission waiting for, or in, a batch.
type submitCall struct {
	ctx   context.Context
	req   Request
	sub   Submission
	hooks *db.CommitHooks
	err   error // the answer when the submission's transaction failed
	taken bool  // out of the queue, in a batch (guarded by TaskHandler.mu)
	done  chan struct{}
}

// wait queues c and waits for its answer. Whoever gets a slot takes the
// queued submissions, its own or not, and writes them in one transaction;
// a submission whose deadline passes while it waits withdraws, having
// written nothing.
func (h *TaskHandler) wait(c *submitCall) {
	h.mu.Lock()
	now := time.Now()
	h.dense, h.arrived = now.Sub(h.arrived) < submitBurstGap, now
	h.pending = append(h.pending, c)
	h.mu.Unlock()
	for {
		select {
		case <-c.done:
			return
		case h.slots <- struct{}{}:
			if !h.isTaken(c) {
				if batch := h.take(h.linger()); len(batch) > 0 {
					h.runBatch(batch)
				}
			}
			<-h.slots
			if h.isTaken(c) {
				// In a batch (this one's or another's): its answer comes with
				// the batch's end, so leave the slots to the queued ones.
				<-c.done
				return
			}
		case <-c.ctx.Done():
			if h.withdraw(c) {
				c.err = slotError(c.ctx)
				return
			}
			<-c.done // in a running batch: wait for its answer
			return
		}
	}
}

// isTaken reports whether c is out of the queue, in a batch.
func (h *TaskHandler) isTaken(c *submitCall) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return c.taken
}

func slotError(ctx context.Context) error {
	code := connect.CodeCanceled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, fmt.Errorf("waiting for a submission slot (FLOW_MAX_CONCURRENT_SUBMITS): %w", ctx.Err()))
}

// linger waits, in a burst of submissions, until the burst ends (no
// submission for submitBurstGap), it fills a batch, or submitLinger passes.
// It reports whether it waited for a burst.
func (h *TaskHandler) linger() (burst bool) {
	end := time.Now().Add(submitLinger)
	for {
		h.mu.Lock()
		coming := h.dense && time.Since(h.arrived) < submitBurstGap && len(h.pending) < maxSubmitBatch
		h.mu.Unlock()
		if !coming || time.Now().After(end) {
			return burst
		}
		burst = true
		time.Sleep(submitBurstGap / 4)
	}
}

// take removes queued submissions, oldest first, for one transaction, at
// most maxSubmitBatch. After a burst (split) it takes one slot's share of
// them, the other slots taking the rest side by side, now or as soon as
// they are done (a slot is busy for a transaction's time, so waiting for
// one beats a transaction twice as long); otherwise all. Those whose
// context ended are answered so instead.
func (h *TaskHandler) take(split bool) []*submitCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	limit := min(maxSubmitBatch, len(h.pending))
	if split {
		limit = min(maxSubmitBatch, (len(h.pending)+cap(h.slots)-1)/cap(h.slots))
	}
	limit = max(1, limit)
	var batch []*submitCall
	n := 0
	for n < len(h.pending) && len(batch) < limit {
		c := h.pending[n]
		n++
		c.taken = true
		if c.ctx.Err() != nil {
			c.err = slotError(c.ctx)
			close(c.done)
			continue
		}
		batch = append(batch, c)
	}
	h.pending = slices.Delete(h.pending, 0, n)
	return batch
}

// withdraw removes c from the queue, reporting whether it was still there.
func (h *TaskHandler) withdraw(c *submitCall) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.Index(h.pending, c)
	if i < 0 {
		return false
	}
	h.pending = slices.Delete(h.pending, i, i+1)
	return true
}

// runBatch writes batch in one transaction and answers every call. When the
// transaction fails (a statement's error, which aborts it, or a conflict
// only the database saw), each call is written again alone, for its own
// answer.
func (h *TaskHandler) runBatch(batch []*submitCall) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	err := h.write(batch)
	if err == nil {
		return
	}
	if len(batch) == 1 {
		batch[0].err = taskError(err)
		return
	}
	for _, c := range batch {
		if err := h.write([]*submitCall{c}); err != nil {
			c.err = taskError(err)
		}
	}
}

// write submits calls in one transaction; their commit hooks run once it
// commits. The transaction runs on the first call's context, without its
// cancellation (a batch outlives any one caller), until the latest of the
// calls' deadlines.
func (h *TaskHandler) write(calls []*submitCall) error {
	ctx := context.WithoutCancel(calls[0].ctx)
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	if !latest.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	ctx, hooks := db.WithCommitHooks(ctx)
	subs := make([]*Submission, len(calls))
	for i, c := range calls {
		c.sub = Submission{Req: c.req}
		c.sub.Ctx, c.hooks = db.WithCommitHooks(c.ctx)
		subs[i] = &c.sub
	}
	// Plain BEGIN: the batch plans each statement once for all its
	// submissions, so the generic plans one submit per transaction wanted
	// (planning was a fifth of PostgreSQL's CPU then) no longer pay, and the
	// generic plan of the component listing scanned every component.
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		return h.tasks.SubmitMany(ctx, tx, subs)
	}); err != nil {
		return err
	}
	hooks.Run()
	for _, c := range calls {
		c.hooks.Run()
	}
	return nil
}

func powerRequest(code OperationCode, override bool) Request {
	return Request{
		Type: OperationTypePowerControl, Code: code,
		Payload: Payload{Operation: powerOperations[code], OverrideReadinessCheck: override},
	}
}

// PowerOnRack submits power-on tasks, one per targeted rack.
func (h *TaskHandler) PowerOnRack(ctx context.Context, req *flowv1.PowerOnRackRequest) (*flowv1.SubmitTaskResponse, error) {
	return h.submit(ctx, powerRequest(CodePowerOn, req.GetOverrideReadinessCheck()),
		submitOptions{req.GetTargetSpec(), req.GetDescription(), req.GetQueueOptions(), req.RuleId})
}

// PowerOffRack submits power-off tasks (forced: force_power_off).
func (h *TaskHandler) PowerOffRack(ctx context.Context, req *flowv1.PowerOffRackRequest) (*flowv1.SubmitTaskResponse, error) {
	code := CodePowerOff
	if req.GetForced() {
		code = CodeForcePowerOff
	}
	r := powerRequest(code, req.GetOverrideReadinessCheck())
	r.Payload.Forced = req.GetForced()
	return h.submit(ctx, r, submitOptions{req.GetTargetSpec(), req.GetDescription(), req.GetQueueOptions(), req.RuleId})
}

// PowerResetRack submits restart tasks (forced: force_restart).
func (h *TaskHandler) PowerResetRack(ctx context.Context, req *flowv1.PowerResetRackRequest) (*flowv1.SubmitTaskResponse, error) {
	code := CodeRestart
	if req.GetForced() {
		code = CodeForceRestart
	}
	r := powerRequest(code, req.GetOverrideReadinessCheck())
	r.Payload.Forced = req.GetForced()
	return h.submit(ctx, r, submitOptions{req.GetTargetSpec(), req.GetDescription(), req.GetQueueOptions(), req.RuleId})
}

// ACPowerCycleRack submits AC power-cycle (cold_reset) tasks.
func (h *TaskHandler) ACPowerCycleRack(ctx context.Context, req *flowv1.ACPowerCycleRackRequest) (*flowv1.SubmitTaskResponse, error) {
	return h.submit(ctx, powerRequest(CodeColdReset, req.GetOverrideReadinessCheck()),
		submitOptions{req.GetTargetSpec(), req.GetDescription(), req.GetQueueOptions(), req.RuleId})
}

// UpgradeFirmware submits firmware-upgrade tasks. Credentials in
// authentication_data are sealed before anything is written (spec §12).
func (h *TaskHandler) UpgradeFirmware(ctx context.Context, req *flowv1.UpgradeFirmwareRequest) (*flowv1.SubmitTaskResponse, error) {
	auth, err := authFromProto(req.GetAuthenticationData(), req.GetSubTargets())
	if err != nil {
		return nil, err
	}
	r := Request{
		Type: OperationTypeFirmwareControl, Code: CodeUpgrade, Auth: auth,
		Payload: Payload{
			Operation: firmwareOperations[CodeUpgrade], TargetVersion: req.GetTargetVersion(),
			SubTargets: req.GetSubTargets(), OverrideReadinessCheck: req.GetOverrideReadinessCheck(),
			OverrideVersionCheck: req.GetOverrideVersionCheck(),
		},
	}
	if req.StartTime != nil {
		r.Payload.StartTime = req.GetStartTime().GetSeconds()
	}
	if req.EndTime != nil {
		r.Payload.EndTime = req.GetEndTime().GetSeconds()
	}
	if r.Payload.StartTime != 0 && r.Payload.EndTime != 0 && r.Payload.EndTime < r.Payload.StartTime {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("end_time must not be before start_time"))
	}
	return h.submit(ctx, r, submitOptions{req.GetTargetSpec(), req.GetDescription(), req.GetQueueOptions(), req.RuleId})
}

// authFromProto converts firmware credentials (spec §12): absent, an empty
// shared value or per-component values that are all empty mean none.
func authFromProto(d *flowv1.FirmwareAuthenticationData, subTargets []string) (firmware.AuthData, error) {
	var out firmware.AuthData
	if d == nil {
		return out, nil
	}
	switch v := d.GetValue().(type) {
	case nil:
		return out, connect.NewError(connect.CodeInvalidArgument, errors.New("authentication data value is required"))
	case *flowv1.FirmwareAuthenticationData_Shared:
		out.Shared = &v.Shared
	case *flowv1.FirmwareAuthenticationData_PerComponent:
		if v.PerComponent == nil {
			return out, connect.NewError(connect.CodeInvalidArgument, errors.New("per-component authentication data is required"))
		}
		out.Compute, out.NVSwitch, out.PowerShelf = v.PerComponent.Compute, v.PerComponent.Nvswitch, v.PerComponent.Powershelf
	}
	if out.Empty() {
		return firmware.AuthData{}, nil
	}
	if len(subTargets) > 0 && !slices.ContainsFunc(subTargets, func(s string) bool { return s != "dpu" }) {
		return out, connect.NewError(connect.CodeInvalidArgument, errors.New("dpu-only firmware updates do not support authentication data"))
	}
	return out, nil
}

// BringUpRack submits bring-up tasks. It has no queue options: a busy rack
// rejects the request.
func (h *TaskHandler) BringUpRack(ctx context.Context, req *flowv1.BringUpRackRequest) (*flowv1.SubmitTaskResponse, error) {
	r := Request{Type: OperationTypeBringUp, Code: CodeBringUp, Payload: Payload{OverrideReadinessCheck: req.GetOverrideReadinessCheck()}}
	return h.submit(ctx, r, submitOptions{req.GetTargetSpec(), req.GetDescription(), nil, req.RuleId})
}

// IngestRack submits ingestion tasks (bring_up / ingest; the payload's
// op_code stays empty, as upstream). filters is accepted and ignored; a
// busy rack rejects the request.
func (h *TaskHandler) IngestRack(ctx context.Context, req *flowv1.IngestRackRequest) (*flowv1.SubmitTaskResponse, error) {
	r := Request{Type: OperationTypeBringUp, Code: CodeIngest}
	return h.submit(ctx, r, submitOptions{req.GetTargetSpec(), req.GetDescription(), nil, req.RuleId})
}

// DecommissionRack submits decommission tasks. Unlike upstream, which
// answers Unimplemented, Flow runs them. Only rack and NVLink-domain
// targets are accepted.
func (h *TaskHandler) DecommissionRack(ctx context.Context, req *flowv1.DecommissionRackRequest) (*flowv1.SubmitTaskResponse, error) {
	if _, ok := req.GetTargetSpec().GetTargets().(*flowv1.OperationTargetSpec_Components); ok {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("target_spec: decommission targets racks, not components"))
	}
	r := Request{Type: OperationTypeDecommission, Code: CodeDecommission}
	return h.submit(ctx, r, submitOptions{req.GetTargetSpec(), req.GetDescription(), req.GetQueueOptions(), req.RuleId})
}

// ListTasks lists tasks, newest first, with AND-combined filters.
func (h *TaskHandler) ListTasks(ctx context.Context, req *flowv1.ListTasksRequest) (*flowv1.ListTasksResponse, error) {
	f := TaskFilter{ActiveOnly: req.GetActiveOnly(), WithReport: req.GetWithReport()}
	if req.RackId != nil {
		id, err := parseUUID("rack_id", req.RackId)
		if err != nil {
			return nil, err
		}
		f.RackID = &id
	}
	if req.ComponentId != nil {
		id, err := parseUUID("component_id", req.ComponentId)
		if err != nil {
			return nil, err
		}
		f.ComponentID = &id
	}
	if p := req.Pagination; p != nil {
		if p.GetOffset() < 0 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pagination.offset: must not be negative, got %d", p.GetOffset()))
		}
		if p.GetLimit() < 0 || p.GetLimit() > 1000 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pagination.limit: must be between 0 and 1000, got %d", p.GetLimit()))
		}
		f.Offset, f.Limit = int(p.GetOffset()), int(p.GetLimit())
	}
	tasks, total, err := h.tasks.List(ctx, f)
	if err != nil {
		return nil, taskError(err)
	}
	res := &flowv1.ListTasksResponse{Total: int32(total)}
	for _, t := range tasks {
		res.Tasks = append(res.Tasks, taskToProto(t))
	}
	return res, nil
}

// GetTasksByIDs returns the given tasks with their reports.
func (h *TaskHandler) GetTasksByIDs(ctx context.Context, req *flowv1.GetTasksByIDsRequest) (*flowv1.GetTasksByIDsResponse, error) {
	if len(req.GetTaskIds()) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("task_ids is required"))
	}
	ids := make([]uuid.UUID, len(req.GetTaskIds()))
	for i, u := range req.GetTaskIds() {
		id, err := parseUUID(fmt.Sprintf("task_ids[%d]", i), u)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	tasks, err := h.tasks.Get(ctx, ids)
	if err != nil {
		return nil, taskError(err)
	}
	res := &flowv1.GetTasksByIDsResponse{}
	for _, t := range tasks {
		res.Tasks = append(res.Tasks, taskToProto(t))
	}
	return res, nil
}

// CancelTask stops a task and returns it, report included.
func (h *TaskHandler) CancelTask(ctx context.Context, req *flowv1.CancelTaskRequest) (*flowv1.CancelTaskResponse, error) {
	id, err := parseUUID("task_id", req.GetTaskId())
	if err != nil {
		return nil, err
	}
	t, err := h.tasks.Cancel(ctx, id)
	if err != nil {
		return nil, taskError(err)
	}
	return &flowv1.CancelTaskResponse{Task: taskToProto(t)}, nil
}

var taskStatusToProto = map[TaskStatus]flowv1.TaskStatus{
	TaskWaiting: flowv1.TaskStatus_TASK_STATUS_WAITING, TaskPending: flowv1.TaskStatus_TASK_STATUS_PENDING,
	TaskRunning: flowv1.TaskStatus_TASK_STATUS_RUNNING, TaskCompleted: flowv1.TaskStatus_TASK_STATUS_COMPLETED,
	TaskFailed: flowv1.TaskStatus_TASK_STATUS_FAILED, TaskTerminated: flowv1.TaskStatus_TASK_STATUS_TERMINATED,
}

func ts(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

func taskToProto(t Task) *flowv1.Task {
	out := &flowv1.Task{
		Id:             &flowv1.UUID{Id: t.ID.String()},
		Operation:      string(t.OperationCode),
		RackId:         &flowv1.UUID{Id: t.RackID.String()},
		Description:    t.Description,
		ExecutorType:   flowv1.TaskExecutorType_TASK_EXECUTOR_TYPE_UNKNOWN,
		Status:         taskStatusToProto[t.Status],
		Message:        t.Message,
		QueueExpiresAt: ts(t.QueueExpiresAt),
		CreatedAt:      timestamppb.New(t.CreatedAt),
		UpdatedAt:      timestamppb.New(t.UpdatedAt),
		StartedAt:      ts(t.StartedAt),
		FinishedAt:     ts(t.FinishedAt),
		Report:         string(t.Report),
	}
	if t.RunID != nil {
		out.ExecutionId = fmt.Sprintf("flow-engine-run-%d", *t.RunID)
	}
	if t.AppliedRuleID != nil {
		out.AppliedRuleId = &flowv1.UUID{Id: t.AppliedRuleID.String()}
	}
	for _, id := range t.ComponentIDs {
		out.ComponentUuids = append(out.ComponentUuids, &flowv1.UUID{Id: id.String()})
	}
	return out
}

// taskError maps task, rule, inventory and backend errors to gRPC codes.
func taskError(err error) error {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, ErrInvalidRequest), errors.Is(err, inventory.ErrInvalidArgument):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrTaskNotFound), errors.Is(err, inventory.ErrRackNotFound),
		errors.Is(err, inventory.ErrComponentNotFound), errors.Is(err, inventory.ErrNVLDomainNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrConflict), errors.Is(err, ErrNotApplicable), errors.Is(err, ErrNotCancellable), errors.Is(err, ErrRuleNotRunnable),
		errors.Is(err, ErrNoEncryptionKey), errors.Is(err, inventory.ErrAmbiguous), errors.Is(err, inventory.ErrNoRack),
		errors.Is(err, backend.ErrNotConfigured), errors.Is(err, ErrLeakOpen):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, ErrQueueFull):
		return connect.NewError(connect.CodeResourceExhausted, err)
	}
	return connectError(err)
}
