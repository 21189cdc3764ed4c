package operations

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// Report is the task report (spec/execution.md §10): the rule's stages and
// steps with their status, component counts, times and errors, plus what
// Flow adds: per-stage counters, the components the task covers, the ones
// it leaves out, and each running step's current action.
type Report struct {
	Version int `json:"version"`
	// SubmittedBy is the identity that submitted the task (Task.SubmittedBy).
	SubmittedBy string        `json:"submitted_by,omitempty"`
	Stages      []StageReport `json:"stages"`
	Error       string        `json:"error,omitempty"`
	// ComponentsTargeted counts the task's components once each, however
	// many stages act on them.
	ComponentsTargeted int `json:"components_targeted"`
	// NotTargeted are the rack's components the task leaves out: types its
	// rule has no step for.
	NotTargeted []NotTargeted `json:"not_targeted"`
}

// NotTargeted is a component a task leaves out, and why.
type NotTargeted struct {
	Name        string        `json:"name"`
	Type        ComponentType `json:"type"`
	ComponentID uuid.UUID     `json:"component_id"`
	Reason      string        `json:"reason"`
}

// StageReport is one rule stage of a Report. Targets is the components its
// steps act on; Completed those through every action of their step,
// Failed those whose own call failed (or whose step failed whole), Running
// the rest while the stage runs (0 otherwise). Completed and Failed never
// decrease, and Completed + Failed + Running never exceeds Targets.
type StageReport struct {
	Number     int          `json:"number"`
	Status     string       `json:"status"`
	Targets    int          `json:"targets"`
	Completed  int          `json:"completed"`
	Failed     int          `json:"failed"`
	Running    int          `json:"running"`
	Steps      []StepReport `json:"steps"`
	StartedAt  string       `json:"started_at,omitempty"`
	FinishedAt string       `json:"finished_at,omitempty"`
	Error      string       `json:"error,omitempty"`
}

// StepReport is one rule step (one component type in one stage).
// CompletedComponents counts the components through every action of the
// step (its verification included), FailedComponents those that failed.
type StepReport struct {
	ComponentType       ComponentType  `json:"component_type"`
	Status              string         `json:"status"`
	TotalComponents     int            `json:"total_components"`
	CompletedComponents int            `json:"completed_components,omitempty"`
	FailedComponents    int            `json:"failed_components,omitempty"`
	StartedAt           string         `json:"started_at,omitempty"`
	FinishedAt          string         `json:"finished_at,omitempty"`
	Error               string         `json:"error,omitempty"`
	CurrentAction       *CurrentAction `json:"current_action,omitempty"`
	// Verification says what the read-back of the installed firmware found,
	// once it has completed, for a step with a FirmwareControl
	// ("installed firmware read back from Core: 18 of 18 at target (bmc
	// 2.0)", or why nothing could be compared). A device it found off
	// target fails the step, and Error names it.
	Verification string `json:"verification,omitempty"`
	// OutcomeUnknown lists the calls of the step whose outcome Flow never
	// recorded (its server died, or lost its database lease, during the
	// call or before saving the answer): the call may have reached the
	// device, and the step called again. Absent in the normal case, a
	// database restart or failover included (docs/engine.md).
	OutcomeUnknown []UnknownCall `json:"outcome_unknown,omitempty"`
	running        int
}

// UnknownCall is a call whose outcome was never recorded.
type UnknownCall struct {
	Action     string   `json:"action"`
	Components []string `json:"components"` // the call's targets (IDs or BMC MACs)
	Attempt    int      `json:"attempt"`
	StartedAt  string   `json:"started_at"`
	Reason     string   `json:"reason"`
}

// CurrentAction is what a running step is doing: the rule action, a line
// of detail ("sleeping 30s, until 10:42:17", "verifying power on, poll 3
// of 31") and, for a wait with an end, when it ends (RFC 3339).
type CurrentAction struct {
	Action string `json:"action"`
	Detail string `json:"detail,omitempty"`
	Until  string `json:"until,omitempty"`
}

// Report statuses.
const (
	reportPending   = "pending"
	reportRunning   = "running"
	reportCompleted = "completed"
	reportFailed    = "failed"
	reportSkipped   = "skipped"
)

func reportTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// report returns row's report: the stored one once the task has ended,
// else one built live from the frozen rule and the engine run.
func (t *Tasks) report(ctx context.Context, dbtx db.DBTX, row dbsqlc.Task) (json.RawMessage, error) {
	if len(row.Report) > 0 && TaskStatus(row.Status).Finished() {
		// Re-encode: jsonb reorders keys and spaces them out.
		var rep Report
		if err := json.Unmarshal(row.Report, &rep); err != nil {
			return nil, fmt.Errorf("decode report of task %s: %w", row.ID, err)
		}
		if rep.NotTargeted == nil {
			rep.NotTargeted = []NotTargeted{}
		}
		return json.Marshal(rep)
	}
	var run *engine.RunReport
	if row.RunID != nil {
		r, err := t.engine.Run(ctx, dbtx, engine.RunID(*row.RunID))
		if err != nil {
			return nil, fmt.Errorf("read run of task %s: %w", row.ID, err)
		}
		run = &r
	}
	return reportOf(row, run, t.namer(ctx, dbtx, row.RackID))
}

// reportOf builds row's report from its frozen rule and scope and its
// engine run (nil: not started); name names the components its error
// messages identify by Core ID or MAC (Tasks.namer).
func reportOf(row dbsqlc.Task, run *engine.RunReport, name func(string) string) (json.RawMessage, error) {
	var rule ruledef.Definition
	var components map[ComponentType][]string
	if err := json.Unmarshal(row.Rule, &rule); err != nil {
		return nil, fmt.Errorf("decode rule of task %s: %w", row.ID, err)
	}
	if err := json.Unmarshal(row.Components, &components); err != nil {
		return nil, fmt.Errorf("decode scope of task %s: %w", row.ID, err)
	}
	notTargeted := []NotTargeted{}
	if len(row.NotTargeted) > 0 {
		if err := json.Unmarshal(row.NotTargeted, &notTargeted); err != nil {
			return nil, fmt.Errorf("decode components left out of task %s: %w", row.ID, err)
		}
	}
	rep := buildReport(rule, components, run)
	rep.NotTargeted = notTargeted
	rep.SubmittedBy = row.SubmittedBy
	if TaskStatus(row.Status) == TaskTerminated && rep.Error == "" {
		rep.Error = row.Message
	}
	rep.Error = name(rep.Error)
	for i := range rep.Stages {
		for j := range rep.Stages[i].Steps {
			rep.Stages[i].Steps[j].Error = name(rep.Stages[i].Steps[j].Error)
		}
	}
	return json.Marshal(rep)
}

type stepKey struct {
	stage int
	ct    ComponentType
}

// buildReport mirrors the rule (spec §10): one stage record per stage, one
// step record per step in rule order, skipped where no component is
// targeted, with status and counts taken from the engine steps that ran the
// rule step's actions (none yet: pending).
func buildReport(rule ruledef.Definition, components map[ComponentType][]string, run *engine.RunReport) Report {
	engineSteps := map[stepKey][]engine.StepReport{}
	if run != nil {
		for _, st := range run.Stages {
			for _, s := range st.Steps {
				if n, ct, ok := parseStepName(s.Name); ok {
					k := stepKey{n, ct}
					engineSteps[k] = append(engineSteps[k], s)
				}
			}
		}
	}
	rep := Report{Version: 1, Stages: []StageReport{}, NotTargeted: []NotTargeted{}}
	for _, ids := range components {
		rep.ComponentsTargeted += len(ids)
	}
	if run != nil && run.State == engine.StateFailed {
		rep.Error = firstLine(run.Error)
		if m := failureMessage(*run); m != "" {
			rep.Error = firstLine(m)
		}
	}
	for _, st := range rule.Stages() {
		sr := StageReport{Number: st.Number}
		for _, s := range st.Steps {
			total := len(components[s.ComponentType])
			step := StepReport{ComponentType: s.ComponentType, TotalComponents: total, Status: reportPending}
			if total == 0 {
				step.Status = reportSkipped
			} else {
				fillStep(&step, s, engineSteps[stepKey{st.Number, s.ComponentType}], run)
			}
			sr.Targets += total
			sr.Completed += step.CompletedComponents
			sr.Failed += step.FailedComponents
			sr.Running += step.running
			sr.Steps = append(sr.Steps, step)
		}
		fillStage(&sr)
		rep.Stages = append(rep.Stages, sr)
	}
	return rep
}

// fillStep sets a rule step's status, counts, times, error and current
// action from the engine steps of its actions (es, in action order).
//
// A component counts completed once every action of the step is done for
// it: each component-scoped action reports it completed and every other
// action but a sleep (a consistency check) has ended well. It counts failed
// once an action failed it (its own call, or its whole batch). The rest are
// running while the step runs.
func fillStep(step *StepReport, s ruledef.Step, es []engine.StepReport, run *engine.RunReport) {
	if len(es) == 0 {
		return
	}
	acts := s.EngineActions()
	var started, ended *time.Time
	completedActions := 0
	failed := map[string]bool{}
	for _, e := range es {
		if e.StartedAt != nil && (started == nil || e.StartedAt.Before(*started)) {
			started = e.StartedAt
		}
		if e.EndedAt != nil && (ended == nil || e.EndedAt.After(*ended)) {
			ended = e.EndedAt
		}
		if len(e.FailedTargets) > 0 && step.Error == "" {
			// The action that failed components, not the later one of
			// the step that surfaced it.
			step.Error = firstLine(stepFailure(e))
		}
		switch e.State {
		case engine.StateCompleted:
			completedActions++
			if e.Action == kindVerifyFirmwareVersions && e.Progress != nil {
				step.Verification = e.Progress.Message
			}
		case engine.StateFailed:
			step.Status = reportFailed
			if step.Error == "" {
				step.Error = firstLine(stepFailure(e))
			}
		case engine.StateCancelled, engine.StateTerminated:
			if step.Status != reportFailed && e.StartedAt != nil {
				step.Status = reportFailed
				step.Error = "cancelled"
			}
		}
		for _, o := range e.Targets {
			if o.State == engine.StateFailed {
				failed[o.Target] = true
			}
		}
		for _, u := range e.UnknownOutcomes {
			step.OutcomeUnknown = append(step.OutcomeUnknown, UnknownCall{
				Action: actionName(acts, e), Components: u.Targets, Attempt: u.Attempt,
				StartedAt: u.BeganAt.UTC().Format(time.RFC3339Nano), Reason: u.Why,
			})
		}
	}
	completed, nFailed := countComponents(es, failed, step.TotalComponents)
	if started != nil {
		step.StartedAt = reportTime(started)
	}
	switch {
	case step.Status == reportFailed:
		step.FinishedAt = reportTime(ended)
	case completedActions == len(acts):
		step.Status = reportCompleted
		step.FinishedAt = reportTime(ended)
	case started != nil:
		step.Status = reportRunning
	}
	if step.Status == reportRunning && run != nil && run.State == engine.StateFailed {
		// The run ended at another step's failure: this one stopped too.
		step.Status = reportFailed
		step.Error = firstLine(run.Error)
	}
	step.CompletedComponents, step.FailedComponents = completed, nFailed
	if step.Status == reportRunning {
		step.running = max(step.TotalComponents-completed-nFailed, 0)
		step.CurrentAction = currentAction(acts, es)
	}
}

// countComponents counts a rule step's components through every action
// (completed) and failed by one, from its engine steps' target outcomes.
func countComponents(es []engine.StepReport, failed map[string]bool, total int) (completed, nFailed int) {
	var scoped []engine.StepReport
	for _, e := range es {
		if len(e.Targets) > 0 {
			scoped = append(scoped, e)
		}
	}
	// A sleep does nothing to a component: it holds the step, not the
	// component's completion. Other target-less actions (a consistency or
	// reachability check) verify the whole type, and do.
	allEnded := true
	for _, e := range es {
		if len(e.Targets) == 0 && e.Action != kindSleep && e.State != engine.StateCompleted {
			allEnded = false
		}
	}
	if len(scoped) == 0 {
		for _, e := range es {
			if e.State != engine.StateCompleted {
				return 0, 0
			}
		}
		return total, 0
	}
	outcomes := make([]map[string]engine.State, len(scoped))
	for i, e := range scoped {
		outcomes[i] = make(map[string]engine.State, len(e.Targets))
		for _, o := range e.Targets {
			outcomes[i][o.Target] = o.State
		}
	}
	for _, o := range scoped[0].Targets {
		if failed[o.Target] {
			continue
		}
		done := allEnded
		for i := range scoped {
			done = done && outcomes[i][o.Target] == engine.StateCompleted
		}
		if done {
			completed++
		}
	}
	nFailed = len(failed)
	// An action that reports progress as counts rather than as the targets
	// done: when it is the step's last and everything before it is through,
	// its counts say how many components finished. A failed batch marks all
	// its targets failed; the last progress says how many actually did
	// (firmware: the jobs that failed, not the batch).
	// The last action that has started: the actions after it (a
	// firmware step's read-back while its update runs) have no say yet.
	n := len(es) - 1
	for n > 0 && es[n].StartedAt == nil {
		n--
	}
	last := es[n]
	before := true
	for _, e := range es[:n] {
		before = before && e.State == engine.StateCompleted && len(e.FailedTargets) == 0
	}
	if p := last.Progress; p != nil && len(last.Targets) > 0 && before {
		switch {
		case last.State == engine.StateRunning && p.Done == nil && n == len(es)-1:
			completed = max(completed, p.Completed)
			nFailed = max(nFailed, p.Failed)
		case last.State == engine.StateFailed && len(last.FailedTargets) == 0 && p.Failed > 0:
			// The components whose own job failed, not the whole batch.
			nFailed = p.Failed
			if p.Done == nil {
				completed = p.Completed
			}
		}
	}
	nFailed = min(nFailed, total)
	return min(completed, total-nFailed), nFailed
}

// currentAction names what a running rule step is doing: the action of its
// running engine step, with a line of detail and, for waits, their end.
// actionName is the rule action e runs (its engine action kind when its
// name does not say).
func actionName(acts []ruledef.Action, e engine.StepReport) string {
	parts := strings.Split(e.Name, "/")
	if len(parts) >= 2 {
		if pos, err := strconv.Atoi(parts[len(parts)-2]); err == nil && pos >= 0 && pos < len(acts) {
			return string(acts[pos].Name)
		}
	}
	return e.Action
}

func currentAction(acts []ruledef.Action, es []engine.StepReport) *CurrentAction {
	for _, e := range es {
		if e.State != engine.StateRunning {
			continue
		}
		parts := strings.Split(e.Name, "/")
		pos, err := strconv.Atoi(parts[len(parts)-2])
		if err != nil || pos < 0 || pos >= len(acts) {
			return nil
		}
		a := acts[pos]
		ca := &CurrentAction{Action: string(a.Name)}
		switch {
		case e.WakeAt != nil:
			ca.Until = reportTime(e.WakeAt)
			ca.Detail = "waiting until " + clock(*e.WakeAt)
			if p, err := a.SleepParams(); err == nil {
				ca.Detail = fmt.Sprintf("sleeping %s, until %s", p.Duration, clock(*e.WakeAt))
			}
		case e.Progress != nil && e.Progress.Message != "":
			ca.Detail = e.Progress.Message
			if !e.Progress.Until.IsZero() {
				ca.Until = reportTime(&e.Progress.Until)
			}
		case e.Attempt > 0:
			ca.Detail = fmt.Sprintf("attempt %d of %d failed, retrying: %s", e.Attempt, e.MaxAttempts, firstLine(e.LastError))
		case a.Name == ruledef.ActionSleep:
			if p, err := a.SleepParams(); err == nil {
				ca.Detail = fmt.Sprintf("sleeping %s", p.Duration)
			}
		case e.Batches > 1:
			ca.Detail = fmt.Sprintf("batch %d of %d", e.Batch+1, e.Batches)
		}
		return ca
	}
	return nil
}

// clock is a time of day in UTC, for details ("until 10:42:17").
func clock(t time.Time) string { return t.UTC().Format(time.TimeOnly) }

func fillStage(sr *StageReport) {
	allSkipped, allDone, anyStarted := true, true, false
	for _, s := range sr.Steps {
		if s.Status != reportSkipped {
			allSkipped = false
		}
		if s.Status != reportCompleted && s.Status != reportSkipped {
			allDone = false
		}
		if s.Status != reportPending && s.Status != reportSkipped {
			anyStarted = true
		}
		if s.Status == reportFailed && sr.Error == "" {
			sr.Status, sr.Error = reportFailed, s.Error
		}
		if s.StartedAt != "" && (sr.StartedAt == "" || s.StartedAt < sr.StartedAt) {
			sr.StartedAt = s.StartedAt
		}
		if s.FinishedAt > sr.FinishedAt {
			sr.FinishedAt = s.FinishedAt
		}
	}
	switch {
	case sr.Status == reportFailed:
	case allSkipped:
		sr.Status = reportSkipped
	case allDone:
		sr.Status = reportCompleted
	case anyStarted:
		sr.Status, sr.FinishedAt = reportRunning, ""
	default:
		sr.Status = reportPending
	}
}

// failureMessage says where a failed run failed, in rule terms: "stage 3
// failed: component type Compute failed: PowerControl: <error>", from the
// first engine step that failed, or failed some of its components (the
// action whose calls failed, not the later one of its rule step that
// surfaced it). It is empty when no step failed (a run timeout, say).
func failureMessage(run engine.RunReport) string {
	var first *engine.StepReport
	firstStage := 0
	for i := range run.Stages {
		for j := range run.Stages[i].Steps {
			s := &run.Stages[i].Steps[j]
			if s.State != engine.StateFailed && len(s.FailedTargets) == 0 {
				continue
			}
			// Stages run in order: the first stage with a failure holds
			// the first failure, its earliest-ended step.
			if first == nil || (i == firstStage && s.EndedAt != nil && first.EndedAt != nil && s.EndedAt.Before(*first.EndedAt)) {
				first, firstStage = s, i
			}
		}
	}
	if first == nil {
		return ""
	}
	stage, ct, ok := parseStepName(first.Name)
	if !ok {
		return ""
	}
	return fmt.Sprintf("stage %d failed: component type %s failed: %s", stage, ct, stepFailure(*first))
}

// stepFailure says why engine step s failed, or which of its components it
// failed: "PowerControl: 1 of 9 component(s) failed: t4: reason".
func stepFailure(s engine.StepReport) string {
	action := s.Name[strings.LastIndex(s.Name, "/")+1:]
	if len(s.FailedTargets) > 0 {
		return action + ": " + engine.FailedTargetsMessage(s.FailedTargets, len(s.Targets), "component")
	}
	return action + ": " + s.Error
}
