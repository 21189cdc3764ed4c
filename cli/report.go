package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// The task report (Task.report, spec/execution.md §10) as the CLI reads it.
// Decoding is tolerant: fields a server does not send (an older one, or the
// progress counters before they existed) are nil or empty and the printers
// leave them out.

type report struct {
	Version int `json:"version"`
	// SubmittedBy is the identity that submitted the task (a client
	// certificate's SPIFFE ID or CN, "insecure" on a cleartext server).
	SubmittedBy string        `json:"submitted_by,omitempty"`
	Stages      []stageReport `json:"stages"`
	Error       string        `json:"error,omitempty"`
	// ComponentsTargeted counts the task's components once, whatever the
	// number of stages that drive them.
	ComponentsTargeted *int `json:"components_targeted,omitempty"`
	// NotTargeted are the rack's components the rule has no step for.
	NotTargeted []notTargeted `json:"not_targeted,omitempty"`
}

type notTargeted struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

type stageReport struct {
	Number     int          `json:"number"`
	Status     string       `json:"status"`
	Steps      []stepReport `json:"steps"`
	StartedAt  string       `json:"started_at,omitempty"`
	FinishedAt string       `json:"finished_at,omitempty"`
	Error      string       `json:"error,omitempty"`
	// Per-stage counters of components.
	Targets   *int `json:"targets,omitempty"`
	Completed *int `json:"completed,omitempty"`
	Failed    *int `json:"failed,omitempty"`
	Running   *int `json:"running,omitempty"`
}

type stepReport struct {
	ComponentType       string         `json:"component_type"`
	Status              string         `json:"status"`
	TotalComponents     int            `json:"total_components"`
	CompletedComponents int            `json:"completed_components,omitempty"`
	FailedComponents    int            `json:"failed_components,omitempty"`
	StartedAt           string         `json:"started_at,omitempty"`
	FinishedAt          string         `json:"finished_at,omitempty"`
	Error               string         `json:"error,omitempty"`
	CurrentAction       *currentAction `json:"current_action,omitempty"`
	// Verification is what the read-back of a firmware step's installed
	// versions found.
	Verification string `json:"verification,omitempty"`
}

// currentAction is what a running step is doing now.
type currentAction struct {
	Action string `json:"action"`
	Detail string `json:"detail,omitempty"` // "sleeping 30s, until 10:42:17"
	Until  string `json:"until,omitempty"`  // RFC 3339
}

// String is "Detail" or, without one, "Action [until 10:42:17]".
func (a *currentAction) String() string {
	if a == nil {
		return ""
	}
	if a.Detail != "" {
		return a.Detail
	}
	if a.Until != "" {
		return a.Action + " until " + clock(a.Until)
	}
	return a.Action
}

// counts returns a stage's targets, completed, failed and running
// components: its counters when the report has them, else the sums over
// its steps (running unknown: -1).
func (st stageReport) counts() (targets, completed, failed, running int) {
	if st.Targets != nil {
		return *st.Targets, deref(st.Completed), deref(st.Failed), deref(st.Running)
	}
	for _, s := range st.Steps {
		targets += s.TotalComponents
		completed += s.CompletedComponents
		failed += s.FailedComponents
	}
	return targets, completed, failed, -1
}

// action returns what the stage is doing now: its steps' current actions.
func (st stageReport) action() string {
	var parts []string
	for _, s := range st.Steps {
		if a := s.CurrentAction.String(); a != "" {
			if len(st.Steps) > 1 {
				a = s.ComponentType + ": " + a
			}
			parts = append(parts, a)
		}
	}
	return strings.Join(parts, "; ")
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// taskReport decodes t's report; ok is false when it has none (ListTasks
// without --report) or it cannot be read.
func taskReport(t *flowv1.Task) (rep report, ok bool) {
	if t.GetReport() == "" {
		return rep, false
	}
	return rep, json.Unmarshal([]byte(t.GetReport()), &rep) == nil
}

// progressSummary condenses a task's report to its current stage: "stage
// 2/3: 3/9 done, 1 failed, 5 running" (the last stage once the task is
// over), then the components the task targets when the report counts them.
func progressSummary(t *flowv1.Task) string {
	rep, ok := taskReport(t)
	if !ok {
		return ""
	}
	var cur *stageReport
	n, stages := 0, 0
	for i := range rep.Stages {
		st := &rep.Stages[i]
		if st.Status == "skipped" {
			continue
		}
		stages++
		if st.Status != "pending" {
			cur, n = st, stages
		}
	}
	if cur == nil {
		return fmt.Sprintf("stage 0/%d", stages)
	}
	targets, done, failed, running := cur.counts()
	out := fmt.Sprintf("stage %d/%d: %d/%d done", n, stages, done, targets)
	if failed > 0 {
		out += fmt.Sprintf(", %d failed", failed)
	}
	if running > 0 {
		out += fmt.Sprintf(", %d running", running)
	}
	if rep.ComponentsTargeted != nil {
		out += fmt.Sprintf(" (%d components)", *rep.ComponentsTargeted)
	}
	return out
}

// printReport prints a report as one row per step (the stage number and
// status on each stage's first row, the stage's running count and current
// action when the report has them), then the totals and what the task does
// not target.
func printReport(w io.Writer, rep report) {
	if len(rep.Stages) == 0 {
		fmt.Fprintln(w, "no stages")
		return
	}
	withRunning, withAction := false, false
	for _, st := range rep.Stages {
		withRunning = withRunning || st.Running != nil
		withAction = withAction || st.action() != ""
	}
	headers := []string{"STAGE", "STEP", "STATUS", "COMPLETED", "FAILED"}
	if withRunning {
		headers = append(headers, "RUNNING")
	}
	headers = append(headers, "TOTAL", "STARTED", "FINISHED")
	if withAction {
		headers = append(headers, "ACTION")
	}
	headers = append(headers, "ERROR")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(headers, "\t"))
	var steps, stepsDone, stepsFailed, comps, compsDone, compsFailed int
	for _, st := range rep.Stages {
		for i, s := range st.Steps {
			stage := ""
			if i == 0 {
				stage = fmt.Sprintf("%d %s", st.Number, st.Status)
			}
			row := []string{stage, s.ComponentType, s.Status, strconv.Itoa(s.CompletedComponents), strconv.Itoa(s.FailedComponents)}
			if withRunning {
				running := ""
				if i == 0 && st.Running != nil {
					running = strconv.Itoa(*st.Running)
				}
				row = append(row, or(running, "-"))
			}
			row = append(row, strconv.Itoa(s.TotalComponents), or(clock(s.StartedAt), "-"), or(clock(s.FinishedAt), "-"))
			if withAction {
				row = append(row, or(s.CurrentAction.String(), "-"))
			}
			row = append(row, or(s.Error, "-"))
			fmt.Fprintln(tw, strings.Join(row, "\t"))
			steps++
			comps += s.TotalComponents
			compsDone += s.CompletedComponents
			compsFailed += s.FailedComponents
			switch s.Status {
			case "completed":
				stepsDone++
			case "failed":
				stepsFailed++
			}
		}
	}
	tw.Flush()
	if rep.ComponentsTargeted != nil {
		fmt.Fprintf(w, "steps: %d completed, %d failed, %d total; components targeted: %d\n", stepsDone, stepsFailed, steps, *rep.ComponentsTargeted)
	} else {
		fmt.Fprintf(w, "steps: %d completed, %d failed, %d total; components: %d completed, %d failed, %d total\n",
			stepsDone, stepsFailed, steps, compsDone, compsFailed, comps)
	}
	for _, st := range rep.Stages {
		for _, s := range st.Steps {
			if s.Verification != "" {
				fmt.Fprintf(w, "verified: stage %d %s: %s\n", st.Number, s.ComponentType, s.Verification)
			}
		}
	}
	// One line per type and reason, naming the components: a rack's eight
	// shelves left out for one reason are one line, not eight.
	type notTargetedGroup struct {
		typ, reason string
		names       []string
	}
	var groups []*notTargetedGroup
	for _, n := range rep.NotTargeted {
		typ := strings.ToLower(n.Type)
		var g *notTargetedGroup
		for _, h := range groups {
			if h.typ == typ && h.reason == n.Reason {
				g = h
			}
		}
		if g == nil {
			g = &notTargetedGroup{typ: typ, reason: n.Reason}
			groups = append(groups, g)
		}
		g.names = append(g.names, n.Name)
	}
	for _, g := range groups {
		why := ""
		if g.reason != "" {
			why = " (" + g.reason + ")"
		}
		fmt.Fprintf(w, "not targeted: %d %s%s: %s\n", len(g.names), g.typ, why, strings.Join(g.names, ", "))
	}
	if rep.Error != "" {
		fmt.Fprintf(w, "error: %s\n", rep.Error)
	}
}
