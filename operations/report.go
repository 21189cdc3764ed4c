package operations

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// Report is the task report (spec/execution.md §10): the rule's stages and
// steps with their status, component counts, times and errors.
type Report struct {
	Version int `json:"version"`
	// SubmittedBy is the identity that submitted the task (Task.SubmittedBy).
	SubmittedBy string        `json:"submitted_by,omitempty"`
	Stages      []StageReport `json:"stages"`
	Error       string        `json:"error,omitempty"`
}

// StageReport is one rule stage of a Report.
type StageReport struct {
	Number     int          `json:"number"`
	Status     string       `json:"status"`
	Steps      []StepReport `json:"steps"`
	StartedAt  string       `json:"started_at,omitempty"`
	FinishedAt string       `json:"finished_at,omitempty"`
	Error      string       `json:"error,omitempty"`
}

// StepReport is one rule step (one component type in one stage).
type StepReport struct {
	ComponentType       ComponentType `json:"component_type"`
	Status              string        `json:"status"`
	TotalComponents     int           `json:"total_components"`
	CompletedComponents int           `json:"completed_components,omitempty"`
	FailedComponents    int           `json:"failed_components,omitempty"`
	StartedAt           string        `json:"started_at,omitempty"`
	FinishedAt          string        `json:"finished_at,omitempty"`
	Error               string        `json:"error,omitempty"`
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
	return reportOf(row, run)
}

// reportOf builds row's report from its frozen rule and scope and its
// engine run (nil: not started).
func reportOf(row dbsqlc.Task, run *engine.RunReport) (json.RawMessage, error) {
	var rule RuleDefinition
	var components map[ComponentType][]string
	if err := json.Unmarshal(row.Rule, &rule); err != nil {
		return nil, fmt.Errorf("decode rule of task %s: %w", row.ID, err)
	}
	if err := json.Unmarshal(row.Components, &components); err != nil {
		return nil, fmt.Errorf("decode scope of task %s: %w", row.ID, err)
	}
	rep := buildReport(rule, components, run)
	rep.SubmittedBy = row.SubmittedBy
	if TaskStatus(row.Status) == TaskTerminated && rep.Error == "" {
		rep.Error = row.Message
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
func buildReport(rule RuleDefinition, components map[ComponentType][]string, run *engine.RunReport) Report {
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
	rep := Report{Version: 1, Stages: []StageReport{}}
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
				fillStep(&step, engineSteps[stepKey{st.Number, s.ComponentType}], len(s.Actions())+boolInt(s.DelayAfter > 0), run)
			}
			sr.Steps = append(sr.Steps, step)
		}
		fillStage(&sr)
		rep.Stages = append(rep.Stages, sr)
	}
	return rep
}

func fillStep(step *StepReport, es []engine.StepReport, actions int, run *engine.RunReport) {
	if len(es) == 0 {
		return
	}
	var started, ended *time.Time
	completedActions := 0
	failedTargets := map[string]bool{}
	doneTargets := -1 // components past every started action
	progressFailed := 0
	failedByProgress := 0 // failed components reported by a failed action
	for _, s := range es {
		if s.StartedAt != nil && (started == nil || s.StartedAt.Before(*started)) {
			started = s.StartedAt
		}
		if s.EndedAt != nil && (ended == nil || s.EndedAt.After(*ended)) {
			ended = s.EndedAt
		}
		switch s.State {
		case engine.StateCompleted:
			completedActions++
		case engine.StateFailed:
			step.Status = reportFailed
			if step.Error == "" {
				step.Error = firstLine(s.Error)
			}
		case engine.StateCancelled, engine.StateTerminated:
			if step.Status != reportFailed && s.StartedAt != nil {
				step.Status = reportFailed
				step.Error = "cancelled"
			}
		}
		if len(s.Targets) > 0 && s.State != engine.StatePending {
			n := 0
			for _, o := range s.Targets {
				switch o.State {
				case engine.StateCompleted:
					n++
				case engine.StateFailed:
					failedTargets[o.Target] = true
				}
			}
			if s.Progress != nil && s.State == engine.StateRunning {
				n = s.Progress.Completed
				progressFailed = max(progressFailed, s.Progress.Failed)
			}
			if s.Progress != nil && s.State == engine.StateFailed {
				// A failed batch marks all its targets failed; the action's
				// last progress says which components actually did.
				n = s.Progress.Completed
				failedByProgress = max(failedByProgress, s.Progress.Failed)
			}
			if doneTargets < 0 || n < doneTargets {
				doneTargets = n
			}
		}
	}
	if started != nil {
		step.StartedAt = reportTime(started)
	}
	step.FailedComponents = max(len(failedTargets), progressFailed)
	if failedByProgress > 0 {
		step.FailedComponents = failedByProgress
	}
	switch {
	case step.Status == reportFailed:
		step.FinishedAt = reportTime(ended)
	case completedActions == actions:
		step.Status = reportCompleted
		step.CompletedComponents = step.TotalComponents
		step.FinishedAt = reportTime(ended)
	case started != nil:
		step.Status = reportRunning
	}
	if step.Status != reportCompleted && doneTargets > 0 {
		step.CompletedComponents = doneTargets
	}
	if step.Status == reportRunning && run != nil && run.State == engine.StateFailed {
		// The run ended at another step's failure: this one stopped too.
		step.Status = reportFailed
		step.Error = firstLine(run.Error)
	}
}

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
// first engine step that failed. It is empty when no step failed (a run
// timeout, say).
func failureMessage(run engine.RunReport) string {
	var first *engine.StepReport
	for i := range run.Stages {
		for j := range run.Stages[i].Steps {
			s := &run.Stages[i].Steps[j]
			if s.State != engine.StateFailed {
				continue
			}
			if first == nil || (s.EndedAt != nil && first.EndedAt != nil && s.EndedAt.Before(*first.EndedAt)) {
				first = s
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
	action := first.Name[strings.LastIndex(first.Name, "/")+1:]
	return fmt.Sprintf("stage %d failed: component type %s failed: %s: %s", stage, ct, action, first.Error)
}
