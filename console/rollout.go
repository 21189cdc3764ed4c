package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// ---- A whole rollout: every phase, every target ----

// rolloutData is the rollout page: the run, its whole plan (every phase's
// targets, those of phases not opened yet included, with their outcomes)
// and, in words, its operation, its gates and what its controls do.
type rolloutData struct {
	Run   *flowv1.OperationRun
	State string
	// Operation is what each target's task does, in words ("firmware
	// upgrade to 2.0"); Versions the per-type versions of a baseline's
	// run, one line each.
	Operation string
	Versions  []string
	// Planned is every target of the run, all phases.
	Planned int
	Phases  []phaseRow
	Targets []targetRow
	// Gates says the safety gates and the advance policy in words;
	// Status what the run is waiting for now, in words.
	Gates  []string
	Status string
	// AtPhaseGate: the run is paused at a phase gate (Advance opens the
	// next phase; Resume is refused); Next is that phase.
	AtPhaseGate bool
	Next        *phaseRow
	// Current is the phase in progress (nil: none).
	Current *phaseRow
	// Unacknowledged counts the failures Resume would acknowledge.
	Failed int
}

// phaseRow is one phase and its targets' outcomes.
type phaseRow struct {
	Index                                                   int
	State                                                   string // done, running, waiting, at the gate, skipped
	Targets, Done, Running, Waiting, Skipped, Failed, Other int
}

// targetRow is one target of the run: its rack and its outcome in words.
type targetRow struct {
	Seq, Phase               int
	RackID, RackName         string
	Outcome, Status          string // the outcome in words; the API's status
	TaskID, Message, TaskMsg string
}

// targetOutcome says a target's status as the page counts it: done,
// running, waiting, skipped, failed, cancelled.
func targetOutcome(status string) string {
	switch status {
	case "completed":
		return "done"
	case "submitted", "claimed":
		return "running"
	case "pending", "blocked":
		return "waiting"
	case "terminated":
		return "cancelled"
	}
	return status // failed, skipped
}

// runTargets reads every target of a run, in phase and sequence order,
// with its rack's name: the run's frozen plan. (ListOperationRunTargets
// answers only the phases opened so far: the contract's; the page shows
// the phases to come too.)
func (c *Console) runTargets(ctx context.Context, runID string) ([]targetRow, error) {
	rows, err := c.pool.Query(ctx, `SELECT t.sequence_index, t.phase_index, t.rack_id::text, coalesce(r.name, ''), t.status,
		coalesce(t.task_id::text, ''), t.message
		FROM operation_run_target t LEFT JOIN rack r ON r.id = t.rack_id
		WHERE t.operation_run_id = $1 ORDER BY t.phase_index, t.sequence_index LIMIT 20000`, runID)
	if err != nil {
		return nil, fmt.Errorf("read the run's targets: %w", err)
	}
	defer rows.Close()
	var out []targetRow
	for rows.Next() {
		var t targetRow
		if err := rows.Scan(&t.Seq, &t.Phase, &t.RackID, &t.RackName, &t.Status, &t.TaskID, &t.Message); err != nil {
			return nil, fmt.Errorf("read the run's targets: %w", err)
		}
		t.Outcome = targetOutcome(t.Status)
		out = append(out, t)
	}
	return out, rows.Err()
}

func (c *Console) rollout(r *http.Request) (view, error) {
	id, err := c.resolveRun(r.Context(), r.PathValue("id"))
	if err != nil {
		return view{}, err
	}
	// The API call first: it is what checks the user may read runs.
	res, err := c.flow.GetOperationRun(apiCtx(r), (&flowv1.GetOperationRunRequest{Id: &flowv1.UUID{Id: id}, IncludeStats: true}))
	if err != nil {
		return view{}, err
	}
	targets, err := c.runTargets(r.Context(), id)
	if err != nil {
		return view{}, err
	}
	d := rolloutView(res.GetOperationRun(), targets)
	return view{"rollout", "Rollout " + d.Run.GetSummary().GetName(), "rollouts", []string{"runs", "tasks", "steps"}, d}, nil
}

// rolloutView builds the page from the run and its targets.
func rolloutView(run *flowv1.OperationRun, targets []targetRow) rolloutData {
	sum := run.GetSummary()
	d := rolloutData{Run: run, Targets: targets, Planned: len(targets)}
	d.State = strings.ToLower(strings.TrimPrefix(sum.GetState().GetStatus().String(), "OPERATION_RUN_STATUS_"))
	reason := sum.GetState().GetReason()
	d.AtPhaseGate = d.State == "paused" && reason == flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_PHASE_GATE
	d.Operation, d.Versions = runOperation(run.GetConfiguration())

	n := int(sum.GetTotalPhases())
	for _, t := range targets {
		if t.Phase+1 > n {
			n = t.Phase + 1
		}
	}
	d.Phases = make([]phaseRow, n)
	for i := range d.Phases {
		d.Phases[i].Index = i
	}
	for _, t := range targets {
		p := &d.Phases[t.Phase]
		p.Targets++
		switch t.Outcome {
		case "done":
			p.Done++
		case "running":
			p.Running++
		case "waiting":
			p.Waiting++
		case "skipped":
			p.Skipped++
		case "failed":
			p.Failed++
			d.Failed++
		default:
			p.Other++
		}
	}
	terminal := d.State != "pending" && d.State != "running" && d.State != "paused"
	current := -1
	for i := range d.Phases {
		p := &d.Phases[i]
		switch {
		case p.Targets > 0 && p.Waiting == 0 && p.Running == 0:
			if p.Skipped == p.Targets {
				p.State = "skipped"
			} else {
				p.State = "done"
			}
		case terminal:
			p.State = "not run"
		case current < 0 && (p.Running > 0 || p.Done+p.Failed+p.Skipped+p.Other > 0 || !d.AtPhaseGate):
			current = i
			switch d.State {
			case "paused":
				p.State = "paused"
			case "pending":
				p.State = "starting"
			default:
				p.State = "running"
			}
		default:
			p.State = "waiting"
		}
	}
	if current >= 0 {
		d.Current = &d.Phases[current]
	}
	if d.AtPhaseGate {
		for i := range d.Phases {
			if d.Phases[i].State == "waiting" {
				d.Next = &d.Phases[i]
				d.Next.State = "waiting for Advance"
				break
			}
		}
	}
	d.Gates = gateWords(run.GetConfiguration().GetOptions())
	d.Status = statusWords(d, reason)
	return d
}

// runOperation says the run's operation in words, and a baseline run's
// per-type versions.
func runOperation(cfg *flowv1.OperationRunConfiguration) (string, []string) {
	fw := cfg.GetOperation().GetUpgradeFirmware()
	if fw == nil {
		return "unknown operation", nil
	}
	what := "firmware upgrade"
	if st := fw.GetSubTargets(); len(st) > 0 {
		what += " of " + strings.Join(st, ", ")
	}
	v := fw.GetTargetVersion()
	if v == "" {
		return what + " to the bundle's default version", nil
	}
	// A baseline's run carries a per-type map of sub-component versions.
	var m map[string]map[string]string
	if strings.HasPrefix(strings.TrimSpace(v), "{") && json.Unmarshal([]byte(v), &m) == nil {
		var lines []string
		for typ, parts := range m {
			var ps []string
			for part, ver := range parts {
				ps = append(ps, part+" "+ver)
			}
			sort.Strings(ps)
			lines = append(lines, typ+": "+strings.Join(ps, ", "))
		}
		sort.Strings(lines)
		return what + " to the versions below", lines
	}
	return what + " to version " + v, nil
}

// gateWords says a run's safety gates and its phase advance policy.
func gateWords(o *flowv1.OperationRunOptions) []string {
	var out []string
	scope := func(s flowv1.OperationRunSafetyGateScope) string {
		if s == flowv1.OperationRunSafetyGateScope_OPERATION_RUN_SAFETY_GATE_SCOPE_CUMULATIVE_RUN {
			return "counted over the whole run so far"
		}
		return "counted in the current phase"
	}
	for _, g := range o.GetSafetyPolicy().GetGates() {
		switch {
		case g.GetFailureCount() != nil:
			fc := g.GetFailureCount()
			out = append(out, fmt.Sprintf("Safety gate: pauses the run when %s failed (%s).", plural(int(fc.GetFailureThresholdCount()), "target"), scope(fc.GetScope())))
		case g.GetFailureRate() != nil:
			fr := g.GetFailureRate()
			out = append(out, fmt.Sprintf("Safety gate: pauses the run when %d%% of the planned targets failed (%s).", fr.GetFailureThresholdPercent(), scope(fr.GetScope())))
		}
	}
	if len(out) == 0 {
		out = append(out, "No safety gate: failures do not pause the run.")
	}
	if o.GetPhasePolicy().GetAdvancePolicy().GetAutoAdvance() {
		out = append(out, "Phase gates: none; each phase opens as soon as the one before it has finished (unless a safety gate has tripped).")
	} else {
		out = append(out, "Phase gates: after each phase the run pauses until an operator advances it to the next.")
	}
	if m := o.GetMaxConcurrentTargets(); m > 0 {
		out = append(out, fmt.Sprintf("At most %s at once.", plural(int(m), "rack")))
	}
	return out
}

// statusWords says what the run is doing or waiting for.
func statusWords(d rolloutData, reason flowv1.OperationRunStatusReason) string {
	switch d.State {
	case "pending":
		return "Not started yet."
	case "running":
		if d.Current != nil {
			return fmt.Sprintf("Running phase %d of %d.", d.Current.Index, len(d.Phases))
		}
		return "Running."
	case "paused":
		switch reason {
		case flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_PHASE_GATE:
			if d.Next != nil {
				return fmt.Sprintf("Paused at the phase gate: the phase before has finished; phase %d (%s) waits for Advance.", d.Next.Index, plural(d.Next.Targets, "rack"))
			}
			return "Paused at the phase gate."
		case flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_SAFETY_GATE:
			return "Paused by a safety gate: too many targets failed. Look at the failed targets, then resume or cancel."
		case flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_OPERATOR_PAUSED:
			return "Paused by an operator: no new targets start; the running ones finish."
		case flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_CONFLICT_RETRY_TIMEOUT:
			return "Paused: a target's rack stayed busy with other work longer than the retry timeout."
		}
		return "Paused."
	case "completed":
		return "Finished: every target done."
	case "completed_with_failures":
		return fmt.Sprintf("Finished with failures: %s failed.", plural(d.Failed, "target"))
	case "failed":
		return "Failed: no target succeeded."
	case "cancelled":
		return "Cancelled: targets not started were skipped."
	}
	return d.State
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
