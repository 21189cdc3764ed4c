package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/rollout/internal/dbsqlc"
)

// ErrRunOverlap means a new run's racks overlap an unfinished run's and
// the request did not allow it (docs/change-safety.md "No silent
// overlap"); the message names the run and the racks in both.
var ErrRunOverlap = errors.New("operation run overlaps another")

// RunPendingApproval is the status of a run created over the approval
// threshold, until a second person approves its plan (v1 shows it as
// PENDING, its message saying so).
const RunPendingApproval RunStatus = "pending_approval"

// ApprovalKindRun is the approval kind of an operation run.
const ApprovalKindRun = "operation_run"

// Approver decides and records two-person approvals for the run service
// (operations/approval implements it; app wires it).
type Approver interface {
	// Required reports whether work over racks racks needs approval.
	Required(ctx context.Context, tx pgx.Tx, racks int) (bool, error)
	// Request records, through tx, a pending approval of subjects by a
	// second person, returning its ID. view is the plan shown to
	// approvers, input what the subject needs to recompute it.
	Request(ctx context.Context, tx pgx.Tx, kind string, subjects []uuid.UUID, racks int, summary, requestedBy, hash string, view, input json.RawMessage) (uuid.UUID, error)
}

// Plan is a run as Create freezes it: the normalized input (seeds filled
// in, credentials sealed), its targets in sequence order, and its hash.
type Plan struct {
	Input   CreateRunInput
	Targets []PlannedTarget
	Phases  int
	Hash    string
}

// Overlap is an unfinished run sharing racks with a plan.
type Overlap struct {
	RunID  uuid.UUID
	Name   string
	Status RunStatus
	Racks  []string // the racks in both, by name
}

// String names the run and the racks in both.
func (o Overlap) String() string {
	return fmt.Sprintf("run %q (%s, %s) on racks %s", o.Name, o.RunID, o.Status, strings.Join(o.Racks, ", "))
}

// Preview is a previewed run: its plan, the runs it overlaps, the
// unfinished tasks on its racks and the open leaks holding them.
type Preview struct {
	Plan     Plan
	Overlaps []Overlap
	// Tasks are the unfinished tasks on the plan's racks, by rack.
	Tasks map[uuid.UUID][]operations.ActiveTask
	// Leaks are the open, not overridden leaks of the plan's components, by
	// rack.
	Leaks map[uuid.UUID][]string
	// Names are the plan's racks' names (their IDs when unnamed).
	Names map[uuid.UUID]string
	// ApprovalRequired is set when creating it would wait for approval.
	ApprovalRequired bool
	// Starts say, per phase, when its first target could start under the
	// maintenance windows and freezes (nil without windows).
	Starts []PhaseStart
}

// PhaseStart is when a phase's first target could start: now, or at the
// earliest next opening over its racks, with the reason they are held.
type PhaseStart struct {
	Phase  int
	At     time.Time
	Now    bool
	Reason string
}

// String says it as the CLI prints it.
func (p PhaseStart) String() string {
	if p.Now {
		return fmt.Sprintf("phase %d could start now", p.Phase)
	}
	if p.At.IsZero() {
		return fmt.Sprintf("phase %d is held (%s), no opening known", p.Phase, p.Reason)
	}
	return fmt.Sprintf("phase %d could start at %s (%s)", p.Phase, p.At.UTC().Format(time.RFC3339), p.Reason)
}

// phaseStarts asks the window gate, rack by rack, when each phase of plan
// could start at now.
func (r *Service) phaseStarts(ctx context.Context, tx pgx.Tx, plan Plan, now time.Time) ([]PhaseStart, error) {
	out := make([]PhaseStart, plan.Phases)
	for i := range out {
		out[i].Phase = i
	}
	for _, t := range plan.Targets {
		ps := &out[t.Phase]
		if ps.Now {
			continue
		}
		h, err := r.windows.HoldTarget(ctx, tx, uuid.Nil, t.RackID, now)
		if err != nil {
			return nil, err
		}
		switch {
		case !h.Held():
			ps.Now, ps.At, ps.Reason = true, now, ""
		case ps.Reason == "" || (!h.Next.IsZero() && (ps.At.IsZero() || h.Next.Before(ps.At))):
			ps.At, ps.Reason = h.Next, h.Reason
		}
	}
	return out, nil
}

// Preview plans in exactly as Create would freeze it, through tx, and
// writes nothing (give it a read-only transaction): the plan with the
// conflicts it would meet now. Its errors are Create's, but for overlap,
// which it reports instead.
func (r *Service) Preview(ctx context.Context, tx pgx.Tx, in CreateRunInput) (Preview, error) {
	plan, err := r.plan(ctx, tx, in)
	if err != nil {
		return Preview{}, err
	}
	p := Preview{Plan: plan, Tasks: map[uuid.UUID][]operations.ActiveTask{}, Leaks: map[uuid.UUID][]string{}, Names: map[uuid.UUID]string{}}
	if p.Overlaps, err = r.overlaps(ctx, tx, plan); err != nil {
		return Preview{}, err
	}
	racks := make([]uuid.UUID, len(plan.Targets))
	var comps []uuid.UUID
	owner := map[uuid.UUID]uuid.UUID{}
	for i, t := range plan.Targets {
		racks[i] = t.RackID
		for _, ids := range t.Components {
			for _, id := range ids {
				comps = append(comps, id)
				owner[id] = t.RackID
			}
		}
	}
	active, err := r.tasks.Active(ctx, tx, racks)
	if err != nil {
		return Preview{}, err
	}
	for _, a := range active {
		p.Tasks[a.RackID] = append(p.Tasks[a.RackID], a)
	}
	leaks, err := r.inv.OpenLeaks(ctx, tx, comps)
	if err != nil {
		return Preview{}, err
	}
	for _, l := range leaks {
		if !l.Overridden() {
			p.Leaks[owner[l.ComponentID]] = append(p.Leaks[owner[l.ComponentID]], l.String())
		}
	}
	for _, id := range racks {
		p.Names[id] = id.String()
		if rack, err := r.inv.Rack(ctx, tx, id, false); err == nil && rack.Name != "" {
			p.Names[id] = rack.Name
		}
	}
	if r.approver != nil {
		if p.ApprovalRequired, err = r.approver.Required(ctx, tx, len(plan.Targets)); err != nil {
			return Preview{}, err
		}
	}
	if r.windows != nil {
		if p.Starts, err = r.phaseStarts(ctx, tx, plan, r.now()); err != nil {
			return Preview{}, err
		}
	}
	return p, nil
}

// overlaps returns the unfinished runs with targets on plan's racks.
func (r *Service) overlaps(ctx context.Context, tx pgx.Tx, plan Plan) ([]Overlap, error) {
	racks := make([]uuid.UUID, len(plan.Targets))
	for i, t := range plan.Targets {
		racks[i] = t.RackID
	}
	rows, err := r.q.OperationRunOverlapping(ctx, tx, racks)
	if err != nil {
		return nil, fmt.Errorf("find overlapping runs: %w", err)
	}
	out := make([]Overlap, len(rows))
	for i, row := range rows {
		out[i] = Overlap{RunID: row.ID, Name: row.Name, Status: RunStatus(row.Status), Racks: row.Racks}
	}
	return out, nil
}

// refuseOverlap is ErrRunOverlap naming every unfinished run that shares
// racks with plan, and those racks.
func (r *Service) refuseOverlap(ctx context.Context, tx pgx.Tx, plan Plan) error {
	over, err := r.overlaps(ctx, tx, plan)
	if err != nil || len(over) == 0 {
		return err
	}
	names := make([]string, len(over))
	for i, o := range over {
		names[i] = o.String()
	}
	return fmt.Errorf("%w: the new run's racks overlap %s (allow it with allow_overlap: flow rollout create --allow-overlap)", ErrRunOverlap, strings.Join(names, "; "))
}

// hash is the plan hash: the sha256 of the canonical JSON of what Create
// freezes (the run's configuration, credentials left out but for their
// presence, and every target with its sequence, phase and components).
func (p Plan) hash() string {
	type target struct {
		Rack       uuid.UUID                                `json:"rack"`
		Sequence   int                                      `json:"sequence"`
		Phase      int                                      `json:"phase"`
		Components map[operations.ComponentType][]uuid.UUID `json:"components"`
	}
	tmpl := p.Input.Template
	credentials := tmpl.Auth != nil
	tmpl.Auth = nil
	targets := make([]target, len(p.Targets))
	for i, t := range p.Targets {
		comps := map[operations.ComponentType][]uuid.UUID{}
		for ct, ids := range t.Components {
			comps[ct] = operations.SortedIDs(ids)
		}
		targets[i] = target{Rack: t.RackID, Sequence: t.Sequence, Phase: t.Phase, Components: comps}
	}
	return operations.PlanHash(struct {
		Name        string      `json:"name"`
		Description string      `json:"description"`
		Selector    Selector    `json:"selector"`
		Options     RunOptions  `json:"options"`
		Template    RunTemplate `json:"template"`
		Credentials bool        `json:"credentials"`
		Phases      int         `json:"phases"`
		Targets     []target    `json:"targets"`
	}{p.Input.Name, p.Input.Description, p.Input.Selector, p.Input.Options, tmpl, credentials, p.Phases, targets})
}

// PlanView is the plan shown to an approver: its phases' racks.
type PlanView struct {
	Phases [][]PlanViewRack `json:"phases"`
}

// PlanViewRack is one rack of a PlanView.
type PlanViewRack struct {
	RackID     uuid.UUID   `json:"rack_id"`
	Components []uuid.UUID `json:"component_ids"`
}

// View returns the plan's phases as JSON for an approval request.
func (p Plan) View() json.RawMessage {
	v := PlanView{Phases: make([][]PlanViewRack, p.Phases)}
	for _, t := range p.Targets {
		var ids []uuid.UUID
		for _, cs := range t.Components {
			ids = append(ids, cs...)
		}
		v.Phases[t.Phase] = append(v.Phases[t.Phase], PlanViewRack{RackID: t.RackID, Components: operations.SortedIDs(ids)})
	}
	b, _ := json.Marshal(v)
	return b
}

// ApprovalRecompute plans the run (ids: its one ID) again from its stored
// input (the site as it is now) and returns the new plan hash, and what
// changed against the targets the run froze ("" when nothing did).
func (r *Service) ApprovalRecompute(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, input json.RawMessage) (string, string, error) {
	if len(ids) != 1 {
		return "", "", fmt.Errorf("an operation run's approval has one run, not %d", len(ids))
	}
	runID := ids[0]
	var in CreateRunInput
	if err := json.Unmarshal(input, &in); err != nil {
		return "", "", fmt.Errorf("decode run input: %w", err)
	}
	plan, err := r.plan(ctx, tx, in)
	if err != nil {
		return "", "", fmt.Errorf("the run no longer plans: %w", err)
	}
	rows, err := r.q.OperationRunTargetsAll(ctx, tx, runID)
	if err != nil {
		return "", "", fmt.Errorf("read targets: %w", err)
	}
	return plan.Hash, targetChanges(rows, plan.Targets), nil
}

// targetChanges says how planned differs from the frozen targets: racks
// added, removed, moved to another phase, or with other components.
func targetChanges(frozen []dbsqlc.OperationRunTarget, planned []PlannedTarget) string {
	old := map[uuid.UUID]dbsqlc.OperationRunTarget{}
	for _, t := range frozen {
		old[t.RackID] = t
	}
	var changes []string
	seen := map[uuid.UUID]bool{}
	for _, p := range planned {
		seen[p.RackID] = true
		o, ok := old[p.RackID]
		if !ok {
			changes = append(changes, fmt.Sprintf("rack %s added (phase %d)", p.RackID, p.Phase))
			continue
		}
		if int(o.PhaseIndex) != p.Phase || int(o.SequenceIndex) != p.Sequence {
			changes = append(changes, fmt.Sprintf("rack %s moved from phase %d (#%d) to phase %d (#%d)", p.RackID, o.PhaseIndex, o.SequenceIndex, p.Phase, p.Sequence))
		}
		var comps map[operations.ComponentType][]uuid.UUID
		_ = json.Unmarshal(o.ComponentsByType, &comps)
		for ct, ids := range p.Components {
			if !slices.Equal(operations.SortedIDs(ids), operations.SortedIDs(comps[ct])) {
				changes = append(changes, fmt.Sprintf("rack %s: its %s components changed (%d → %d)", p.RackID, ct, len(comps[ct]), len(ids)))
			}
		}
		for ct, ids := range comps {
			if len(p.Components[ct]) == 0 && len(ids) > 0 {
				changes = append(changes, fmt.Sprintf("rack %s: its %s components are gone", p.RackID, ct))
			}
		}
	}
	for _, t := range frozen {
		if !seen[t.RackID] {
			changes = append(changes, fmt.Sprintf("rack %s removed (was phase %d)", t.RackID, t.PhaseIndex))
		}
	}
	slices.Sort(changes)
	if len(changes) == 0 {
		return ""
	}
	return strings.Join(changes, "; ")
}

// ApprovalRelease starts run runID, approved, through tx: it becomes
// pending and makes its first pass. A run no longer awaiting approval
// (cancelled meanwhile) is ErrRunState.
func (r *Service) ApprovalRelease(ctx context.Context, tx pgx.Tx, runID uuid.UUID, approvalID uuid.UUID, by string) error {
	st, err := r.lock(ctx, tx, runID)
	if err != nil {
		return err
	}
	if st.status() != RunPendingApproval {
		return fmt.Errorf("%w: operation run %s is %s, not awaiting approval", ErrRunState, runID, st.row.Status)
	}
	st.set(RunPending, ReasonNone, fmt.Sprintf("approved by %s (request %s)", by, approvalID))
	if err := r.pass(ctx, tx, st); err != nil {
		return err
	}
	return r.save(ctx, tx, st)
}

// ApprovalDiscard cancels run runID, whose approval was rejected or
// expired, through tx; a run no longer awaiting approval is left as it is.
func (r *Service) ApprovalDiscard(ctx context.Context, tx pgx.Tx, runID uuid.UUID, why string) error {
	st, err := r.lock(ctx, tx, runID)
	if err != nil {
		if errors.Is(err, ErrRunNotFound) {
			return nil
		}
		return err
	}
	if st.status() != RunPendingApproval {
		return nil
	}
	st.set(RunCancelled, ReasonNone, "operation run cancelled: "+why)
	if _, err := r.q.OperationRunTargetSkipOpen(ctx, tx, dbsqlc.OperationRunTargetSkipOpenParams{OperationRunID: runID, Message: st.row.StatusMessage}); err != nil {
		return err
	}
	return r.save(ctx, tx, st)
}
