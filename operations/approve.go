package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// ApprovalKindSubmission is the approval kind of a bulk submission: its
// subjects are the submission's tasks, which wait (WAITING) until a second
// identity approves the plan hash (docs/change-safety.md).
const ApprovalKindSubmission = "submission"

// Approver decides and records two-person approvals for bulk submissions
// (operations/approval implements it; app sets it with SetApprover).
type Approver interface {
	// Required reports whether work over racks racks needs approval.
	Required(ctx context.Context, tx pgx.Tx, racks int) (bool, error)
	// Request records, through tx, a pending approval of subjects by a
	// second person, returning its ID. view is the plan shown to
	// approvers, input what the subject needs to recompute it.
	Request(ctx context.Context, tx pgx.Tx, kind string, subjects []uuid.UUID, racks int, summary, requestedBy, hash string, view, input json.RawMessage) (uuid.UUID, error)
	// Expiry is how long a request waits for its decision.
	Expiry() time.Duration
}

// SetApprover makes every later bulk submission over the approver's
// threshold wait for a second identity's approval (nil: none). Call it
// before serving.
func (t *Tasks) SetApprover(a Approver) { t.approver = a }

// approvalInput is what a submission's approval recomputes its plan from:
// the request as planned, without credentials (the plan hash leaves them
// out), and the size of the plan the requester saw.
type approvalInput struct {
	Type         OperationType        `json:"type"`
	Code         OperationCode        `json:"code"`
	Targets      inventory.TargetSpec `json:"targets"`
	RuleID       uuid.UUID            `json:"rule_id"`
	Payload      Payload              `json:"payload"`
	SubmittedBy  string               `json:"submitted_by"`
	Racks        int                  `json:"racks"`
	Components   int                  `json:"components"`
	QueueTimeout time.Duration        `json:"queue_timeout,omitempty"`
}

// submissionPlan is the frozen part of s's plan, as Preview answers it
// for the same request, so the hash a requester saw with a dry run is the
// hash the approval request records.
func submissionPlan(s *Submission) SubmissionPlan {
	plan := SubmissionPlan{Type: s.Req.Type, Code: s.Req.Code, payload: s.Req.Payload}
	plan.payload.AuthenticationData = nil
	for _, p := range s.plans {
		plan.Racks = append(plan.Racks, PlannedRack{RackID: p.rack.ID, Rack: rackLabel(p.rack), Components: p.components, RuleID: p.rule.Rule.ID, RuleName: p.rule.Rule.Name})
	}
	plan.Hash = plan.hash()
	return plan
}

// approvalView is the plan an approver is shown: one phase of racks.
func approvalView(plan SubmissionPlan) json.RawMessage {
	type rack struct {
		RackID     uuid.UUID   `json:"rack_id"`
		Components []uuid.UUID `json:"component_ids"`
	}
	racks := make([]rack, len(plan.Racks))
	for i, r := range plan.Racks {
		racks[i].RackID, racks[i].Components = r.RackID, orderedIDs(r.Components)
	}
	b, _ := json.Marshal(map[string]any{"phases": [][]rack{racks}})
	return b
}

func planComponents(plan SubmissionPlan) int {
	n := 0
	for _, r := range plan.Racks {
		for _, ids := range r.Components {
			n += len(ids)
		}
	}
	return n
}

// approveMany holds s's tasks for a second identity's approval when s is a
// bulk submission over the approver's threshold: every task waits, whatever
// else would have let it start, with the request's ID in its message, until
// the request is approved (then it waits as any task does), rejected or
// expired (then it ends). Work that other work fires (schedules, operation
// runs, which have their own approval, event rules) and leak responses are
// never held.
func (t *Tasks) approveMany(ctx context.Context, tx pgx.Tx, s *Submission, tasks []admittedTask) error {
	req := s.Req
	if t.approver == nil || req.preview || req.Preempt || req.Payload.Leak != nil || req.TriggerType != "" || len(tasks) == 0 {
		return nil
	}
	if need, err := t.approver.Required(ctx, tx, len(tasks)); err != nil || !need {
		return err
	}
	plan := submissionPlan(s)
	input := approvalInput{Type: req.Type, Code: req.Code, Targets: req.Targets, RuleID: req.RuleID, Payload: req.Payload,
		SubmittedBy: req.SubmittedBy, Racks: len(plan.Racks), Components: planComponents(plan), QueueTimeout: req.QueueTimeout}
	input.Payload.AuthenticationData = nil
	in, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("encode approval input: %w", err)
	}
	ids := make([]uuid.UUID, len(tasks))
	for i, a := range tasks {
		ids[i] = a.row.ID
	}
	summary := fmt.Sprintf("%s %s of %d racks (%d components), submitted by %s", req.Type, req.Code, input.Racks, input.Components, req.SubmittedBy)
	id, err := t.approver.Request(ctx, tx, ApprovalKindSubmission, ids, len(tasks), summary, req.SubmittedBy, plan.Hash, approvalView(plan), in)
	if err != nil {
		return err
	}
	expires := t.now().Add(t.approver.Expiry())
	msg := firstLine(fmt.Sprintf("Held: awaiting approval of request %s (plan hash %s)", id, plan.Hash))
	for i := range tasks {
		a := &tasks[i]
		a.plan, a.wake, a.expires = nil, expires, expires
		a.row.Status, a.row.Message, a.row.QueueExpiresAt, a.row.ApprovalID = string(TaskWaiting), msg, &a.expires, &id
	}
	return nil
}

// ApprovalRecompute plans the submission of approval input again,
// answering its plan hash now and, when it changed, what did.
// The tasks are subjects of one request, so one plan answers for all.
func (t *Tasks) ApprovalRecompute(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, input json.RawMessage) (string, string, error) {
	var in approvalInput
	if err := json.Unmarshal(input, &in); err != nil {
		return "", "", fmt.Errorf("decode approval input: %w", err)
	}
	plan, err := t.Preview(ctx, tx, Request{Type: in.Type, Code: in.Code, Targets: in.Targets, RuleID: in.RuleID, Payload: in.Payload,
		SubmittedBy: in.SubmittedBy, Queue: true})
	if err != nil {
		return "", "", fmt.Errorf("the request no longer plans: %v", err)
	}
	changes := ""
	if n, c := len(plan.Racks), planComponents(plan); n != in.Racks || c != in.Components {
		changes = fmt.Sprintf("it now covers %d racks and %d components, not %d and %d", n, c, in.Racks, in.Components)
	} else {
		changes = "its racks' components or rules changed"
	}
	return plan.Hash, changes, nil
}

// ApprovalRelease lets task id, approved as request approvalID by by, wait
// as any task does: it starts now unless its rack's other work or a
// maintenance window still holds it.
func (t *Tasks) ApprovalRelease(ctx context.Context, tx pgx.Tx, id, approvalID uuid.UUID, by string) error {
	row, ok, err := t.lockWaiting(ctx, tx, id)
	if err != nil || !ok {
		return err // ended meanwhile (cancelled, expired): nothing to start
	}
	// From here it waits as a queued task does, for the default queue
	// timeout at most.
	expires := t.now().Add(DefaultQueueTimeout)
	if _, err := t.q.TaskApprovalRelease(ctx, tx, dbsqlc.TaskApprovalReleaseParams{ID: id, QueueExpiresAt: &expires,
		Message: firstLine(fmt.Sprintf("Approved by %s (request %s): waiting to start", by, approvalID))}); err != nil {
		return fmt.Errorf("release task %s: %w", id, err)
	}
	if t.expiry != nil {
		if err := t.expiry(ctx, tx, row.RackID, expires); err != nil {
			return fmt.Errorf("schedule queue expiry: %w", err)
		}
	}
	return t.promote(ctx, tx, row.RackID)
}

// lockWaiting locks task id (lockTask): ok when it still waits for an
// approval.
func (t *Tasks) lockWaiting(ctx context.Context, tx pgx.Tx, id uuid.UUID) (dbsqlc.Task, bool, error) {
	row, err := t.lockTask(ctx, tx, id)
	if errors.Is(err, ErrTaskNotFound) {
		return row, false, nil
	}
	return row, err == nil && TaskStatus(row.Status) == TaskWaiting && row.ApprovalID != nil, err
}

// ApprovalDiscard ends task id, whose approval was rejected or expired,
// with why; the tasks queued behind it on its rack go on.
func (t *Tasks) ApprovalDiscard(ctx context.Context, tx pgx.Tx, id uuid.UUID, why string) error {
	row, ok, err := t.lockWaiting(ctx, tx, id)
	if err != nil || !ok {
		return err
	}
	if err := t.finishWaiting(ctx, tx, row, TaskTerminated, firstLine("Terminated: "+why)); err != nil {
		return err
	}
	return t.promote(ctx, tx, row.RackID)
}

// expiredMessage is the message of waiting task row once its deadline
// passed: an approval's expiry, or the queue timeout.
func expiredMessage(row dbsqlc.Task) string {
	if row.ApprovalID == nil {
		return msgExpired
	}
	return firstLine(fmt.Sprintf("Expired: approval request %s was not approved in time", row.ApprovalID))
}
