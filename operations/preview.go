package operations

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
)

// SubmissionPlan is a bulk submission as Submit would write it now, written
// nowhere (Tasks.Preview, docs/change-safety.md "Plan preview").
type SubmissionPlan struct {
	Type OperationType
	Code OperationCode
	// Racks are the tasks Submit would write, one per rack, in rack-ID
	// order (the order of Submit's task IDs).
	Racks []PlannedRack
	// Refusal is why Submit would refuse the whole request now (a
	// conflict under REJECT, a full waiting queue, an open leak); "" when
	// it would write the tasks.
	Refusal string
	// Hash is the plan hash: PlanHash of the frozen part of the plan.
	Hash string
	// ApprovalRequired is set when the submission would wait for a second
	// identity's approval (SetApprover).
	ApprovalRequired bool

	payload Payload
}

// PlannedRack is one rack's task of a SubmissionPlan.
type PlannedRack struct {
	RackID uuid.UUID
	Rack   string // name, or ID when unnamed
	// Components are the components the task would act on, by type.
	Components map[ComponentType][]uuid.UUID
	RuleID     uuid.UUID // uuid.Nil: built-in rule
	RuleName   string
	// Waiting is set when the task would be created WAITING (queued behind
	// Conflicts, or behind tasks already waiting).
	Waiting bool
	// Conflicts are the rack's unfinished tasks the new task conflicts with.
	Conflicts []ActiveTask
	// Leaks are the open, not overridden leaks of components the task
	// would energise (Submit refuses the request while one is open).
	Leaks []string
	// Held says why the maintenance windows and freezes would hold the
	// task, and when the next window opens ("": it could start now).
	Held string
}

// ActiveTask is an unfinished task on a rack.
type ActiveTask struct {
	ID          uuid.UUID
	RackID      uuid.UUID
	Type        OperationType
	Code        OperationCode
	Status      TaskStatus
	TriggerType string
	TriggerID   string
	Components  map[ComponentType][]uuid.UUID
}

// String names the task as conflict messages do: "task ID (type code, status)".
func (a ActiveTask) String() string {
	s := fmt.Sprintf("task %s (%s %s, %s)", a.ID, a.Type, a.Code, a.Status)
	if a.TriggerType != "" {
		s += fmt.Sprintf(" of %s %s", a.TriggerType, a.TriggerID)
	}
	return s
}

// Preview plans req exactly as Submit does (validation, targets, rules,
// capability and backend checks, conflicts), through tx, and writes
// nothing: give it a read-only transaction. A request Submit would refuse
// outright (bad input, no applicable racks...) is that error; one refused
// only by the site's state now (a conflict, a full queue, an open leak) is
// a plan whose Refusal says why.
func (t *Tasks) Preview(ctx context.Context, tx pgx.Tx, req Request) (SubmissionPlan, error) {
	if err := validateRequest(req); err != nil {
		return SubmissionPlan{}, err
	}
	req.preview = true
	s := &Submission{Ctx: ctx, Req: req}
	subs := []*Submission{s}
	t.prepare(subs)
	if err := t.planMany(ctx, tx, subs); err != nil {
		return SubmissionPlan{}, err
	}
	if s.Err != nil {
		return SubmissionPlan{}, s.Err
	}
	racks := make([]uuid.UUID, len(s.plans))
	for i, p := range s.plans {
		racks[i] = p.rack.ID
	}
	active, err := t.Active(ctx, tx, racks)
	if err != nil {
		return SubmissionPlan{}, err
	}
	plan := SubmissionPlan{Type: req.Type, Code: req.Code, payload: req.Payload}
	plan.payload.AuthenticationData = nil
	var leaky []string
	for _, p := range s.plans {
		pr := PlannedRack{RackID: p.rack.ID, Rack: rackLabel(p.rack), Components: p.components, RuleID: p.rule.Rule.ID, RuleName: p.rule.Rule.Name}
		for _, a := range active {
			if a.RackID == p.rack.ID && a.Status != TaskWaiting && Conflicts(p.scope, TaskScope{OperationType: a.Type, Components: a.Components}) {
				pr.Conflicts = append(pr.Conflicts, a)
			}
		}
		if pr.Leaks, err = t.leaksHeld(ctx, tx, req, p); err != nil {
			return SubmissionPlan{}, err
		}
		if len(pr.Leaks) > 0 {
			leaky = append(leaky, fmt.Sprintf("rack %s: %s", pr.Rack, strings.Join(pr.Leaks, ", ")))
		}
		plan.Racks = append(plan.Racks, pr)
	}
	// Admission as decide does it: a conflict refuses the request unless
	// it queues; a queued one also waits behind tasks already waiting.
	for i, p := range s.plans {
		pr := &plan.Racks[i]
		waiting := slices.ContainsFunc(active, func(a ActiveTask) bool { return a.RackID == p.rack.ID && a.Status == TaskWaiting })
		switch {
		case req.Preempt:
		case len(pr.Conflicts) > 0 && !req.Queue:
			if plan.Refusal == "" {
				plan.Refusal = fmt.Sprintf("%s: rack %s: %s", ErrConflict, pr.Rack, pr.Conflicts[0])
			}
		case len(pr.Conflicts) > 0 || (req.Queue && waiting):
			pr.Waiting = true
		}
	}
	// Windows and freezes, and a second identity's approval, as
	// gateMany and approveMany would decide them now.
	for i, p := range s.plans {
		h, err := t.gateHold(ctx, tx, GateSubject{RackID: p.rack.ID, Type: req.Type, Code: req.Code, TriggerType: req.TriggerType, TriggerID: req.TriggerID},
			req.Preempt || req.Payload.Leak != nil, false)
		if err != nil {
			return SubmissionPlan{}, err
		}
		if h.Held() {
			plan.Racks[i].Held, plan.Racks[i].Waiting = strings.TrimPrefix(heldMessage(h), "Held: "), true
		}
	}
	if t.approver != nil && !req.Preempt && req.Payload.Leak == nil && req.TriggerType == "" && len(plan.Racks) > 0 {
		if plan.ApprovalRequired, err = t.approver.Required(ctx, tx, len(plan.Racks)); err != nil {
			return SubmissionPlan{}, err
		}
	}
	if plan.Refusal == "" && len(leaky) > 0 {
		plan.Refusal = fmt.Sprintf("%s: %s would energise components with open leaks: %s", ErrLeakOpen, req.Code, strings.Join(leaky, "; "))
	}
	plan.Hash = plan.hash()
	return plan, nil
}

// hash is the sha256 of the canonical JSON of the plan's frozen part: the
// operation, its payload (without credentials) and each rack's components
// and rule, racks and components sorted by ID.
func (p SubmissionPlan) hash() string {
	type rack struct {
		Rack       uuid.UUID                     `json:"rack"`
		Components map[ComponentType][]uuid.UUID `json:"components"`
		Rule       uuid.UUID                     `json:"rule"`
		RuleName   string                        `json:"rule_name"`
	}
	racks := make([]rack, len(p.Racks))
	for i, r := range p.Racks {
		comps := map[ComponentType][]uuid.UUID{}
		for ct, ids := range r.Components {
			comps[ct] = SortedIDs(ids)
		}
		racks[i] = rack{Rack: r.RackID, Components: comps, Rule: r.RuleID, RuleName: r.RuleName}
	}
	slices.SortFunc(racks, func(a, b rack) int { return strings.Compare(a.Rack.String(), b.Rack.String()) })
	return PlanHash(struct {
		Type    OperationType `json:"type"`
		Code    OperationCode `json:"code"`
		Payload Payload       `json:"payload"`
		Racks   []rack        `json:"racks"`
	}{p.Type, p.Code, p.payload, racks})
}

// PlanHash is the plan hash of v: the hex sha256 of its JSON encoding
// (maps encode with sorted keys, so a value built in a fixed order hashes
// the same every time).
func PlanHash(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("plan hash: %v", err)) // plans are plain data
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// SortedIDs returns ids sorted by their string form, as a new slice.
func SortedIDs(ids []uuid.UUID) []uuid.UUID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// orderedIDs returns the IDs of comps type by type (compute trays, NVLink
// switches, power shelves, ToR switches, UMS, CDUs), each type's sorted:
// the order plans show components in.
func orderedIDs(comps map[ComponentType][]uuid.UUID) []uuid.UUID {
	var out []uuid.UUID
	for _, ct := range []ComponentType{ComponentTypeCompute, ComponentTypeNVSwitch, ComponentTypePowerShelf, ComponentTypeToRSwitch, ComponentTypeUMS, ComponentTypeCDU} {
		out = append(out, SortedIDs(comps[ct])...)
	}
	return out
}

// Active returns the unfinished (waiting, pending, running) tasks on racks,
// oldest first, reading without locks.
func (t *Tasks) Active(ctx context.Context, dbtx db.DBTX, racks []uuid.UUID) ([]ActiveTask, error) {
	if len(racks) == 0 {
		return nil, nil
	}
	rows, err := t.q.TaskActiveOnRacks(ctx, dbtx, racks)
	if err != nil {
		return nil, fmt.Errorf("read active tasks: %w", err)
	}
	out := make([]ActiveTask, len(rows))
	for i, r := range rows {
		sc := scopeOfRow(r)
		out[i] = ActiveTask{ID: r.ID, RackID: r.RackID, Type: OperationType(r.OperationType), Code: OperationCode(r.OperationCode),
			Status: TaskStatus(r.Status), TriggerType: r.TriggerType, TriggerID: r.TriggerID, Components: sc.Components}
	}
	return out, nil
}
