package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// taskReport is the part of Task.report the task page draws.
type taskReport struct {
	SubmittedBy        string `json:"submitted_by"`
	Error              string `json:"error"`
	ComponentsTargeted int    `json:"components_targeted"`
	NotTargeted        []struct {
		Name, Type, Reason string
	} `json:"not_targeted"`
	Stages []struct {
		Number                              int
		Status                              string
		Targets, Completed, Failed, Running int
		StartedAt                           string `json:"started_at"`
		FinishedAt                          string `json:"finished_at"`
		Error                               string
		Steps                               []taskStep
	}
}

type taskStep struct {
	ComponentType       string `json:"component_type"`
	Status              string
	TotalComponents     int    `json:"total_components"`
	CompletedComponents int    `json:"completed_components"`
	FailedComponents    int    `json:"failed_components"`
	StartedAt           string `json:"started_at"`
	FinishedAt          string `json:"finished_at"`
	Error               string
	CurrentAction       *struct{ Action, Detail, Until string } `json:"current_action"`
	// Jobs are the River jobs that ran (or run) the step's actions, for
	// links to River UI (not in the report: read from the engine's steps).
	Jobs []int64 `json:"-"`
}

type taskComponent struct {
	ID, Name, Type, Power, Outcome, Error string
}

type taskData struct {
	Task       *flowv1.Task
	Report     taskReport
	RackName   string
	Components []taskComponent
	Active     bool
	// Message is the task's message unless an error above says it
	// already (each error once).
	Message string
	// Failed are the IDs of the components that failed on their own (the
	// retry's targets).
	Failed []string
	// JobsUI says River UI is served (JobsPrefix): the page links the
	// task's jobs (JobsURL: River UI's job list filtered by the task ID,
	// a tag of every job of the task) and each step's.
	JobsUI  bool
	JobsURL string
}

// outcomeRank orders a component's outcomes, the worst last.
var outcomeRank = map[string]int{"": 0, "skipped": 1, "pending": 2, "completed": 3, "running": 4, "stopped": 5, "failed": 6}

// typeOutcomes returns, per component type, the outcome of a component of
// that type that did not fail on its own: the worst of its type's steps,
// where a step some of whose components failed on their own counts as
// completed for the others when they got through it (or stopped when the
// task ended before they did), and a step the task's end stopped with no
// failure of its own counts as stopped. A step that failed whole (every
// component failed) fails them all.
func typeOutcomes(rep taskReport) map[string]string {
	partial := false
	for _, st := range rep.Stages {
		for _, sp := range st.Steps {
			if sp.Status == "failed" && sp.FailedComponents > 0 && sp.FailedComponents < sp.TotalComponents {
				partial = true
			}
		}
	}
	out := map[string]string{}
	for _, st := range rep.Stages {
		for _, sp := range st.Steps {
			s := sp.Status
			if s == "failed" {
				switch {
				case sp.FailedComponents > 0 && sp.FailedComponents < sp.TotalComponents:
					s = "stopped"
					if sp.CompletedComponents+sp.FailedComponents >= sp.TotalComponents {
						s = "completed"
					}
				case sp.FailedComponents == 0 && partial:
					s = "stopped" // another step's failure ended the task
				}
			}
			cur, ok := out[sp.ComponentType]
			switch {
			case !ok:
				out[sp.ComponentType] = s
			case s == "pending" && cur == "completed":
				out[sp.ComponentType] = "running" // a later step still to do
			case outcomeRank[s] > outcomeRank[cur] && !(s == "pending" && cur == "running"):
				out[sp.ComponentType] = s
			}
		}
	}
	return out
}

// onceEach blanks every error of the page that an earlier one (the
// task's, then its message, then the stages' and steps' in order) already
// says, so that each error shows once.
func onceEach(d *taskData) {
	seen := map[string]bool{}
	once := func(s *string) {
		if *s == "" {
			return
		}
		if seen[*s] {
			*s = ""
			return
		}
		seen[*s] = true
	}
	once(&d.Report.Error)
	once(&d.Message)
	for i := range d.Report.Stages {
		once(&d.Report.Stages[i].Error)
		for j := range d.Report.Stages[i].Steps {
			once(&d.Report.Stages[i].Steps[j].Error)
		}
	}
}

// nameIDs writes each component's name beside its ID where an error names
// it by ID only (by external ID or MAC the API names it already).
func nameIDs(comps []taskComponent, msg string) string {
	if msg == "" {
		return msg
	}
	var pairs []string
	for _, c := range comps {
		if c.Name != "" && strings.Contains(msg, c.ID) && !strings.Contains(msg, c.Name+" ("+c.ID+")") {
			pairs = append(pairs, c.ID, c.Name+" ("+c.ID+")")
		}
	}
	if len(pairs) == 0 {
		return msg
	}
	return strings.NewReplacer(pairs...).Replace(msg)
}

// retryable reports whether the console can retry a task's failed
// components: the power operations, each through its own API call
// (firmware needs its version and credentials: the CLI's).
func retryable(op string) bool {
	switch op {
	case "power_on", "power_off", "force_power_off", "restart", "force_restart", "cold_reset":
		return true
	}
	return false
}

// retryFailed serves POST /ui/tasks/{id}/retry: a new task, through the
// same API call as the task's operation, for exactly the components that
// failed on their own in it. The API decides whether the user may
// (operator) and whether the rack can take it now.
func (c *Console) retryFailed(r *http.Request) (string, string, error) {
	id, err := c.resolveTask(r.Context(), r.PathValue("id"))
	if err != nil {
		return "", "", err
	}
	res, err := c.flow.GetTasksByIDs(apiCtx(r), &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{{Id: id}}})
	if err != nil {
		return "", "", err
	}
	if len(res.GetTasks()) == 0 {
		return "", "", connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s not found", id))
	}
	t := res.GetTasks()[0]
	op := t.GetOperation()
	if !retryable(op) {
		return "", "", connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the console retries power operations only; retry %s with the CLI", op))
	}
	rows, err := c.pool.Query(r.Context(), `
		SELECT DISTINCT c.id::text FROM task t JOIN component c ON c.id = ANY (t.component_ids)
		JOIN engine_step s ON s.run_id = t.run_id AND s.failed_targets <> '{}'
		WHERE t.id::text = $1 AND (s.failed_targets ? c.id::text OR s.failed_targets ? c.external_id OR s.failed_targets ? c.serial_number)
		ORDER BY 1`, id)
	if err != nil {
		return "", "", fmt.Errorf("task %s: failed components: %w", id, err)
	}
	failed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", "", fmt.Errorf("task %s: failed components: %w", id, err)
	}
	if len(failed) == 0 {
		return "", "", connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("no component failed on its own in task %s: nothing to retry", id))
	}
	targets := make([]*flowv1.ComponentTarget, len(failed))
	for i, cid := range failed {
		targets[i] = &flowv1.ComponentTarget{Identifier: &flowv1.ComponentTarget_Id{Id: &flowv1.UUID{Id: cid}}}
	}
	spec := &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Components{Components: &flowv1.ComponentTargets{Targets: targets}}}
	desc := fmt.Sprintf("retry of the %d failed component(s) of task %s, from the console", len(failed), id)
	ctx := apiCtx(r)
	var sub *flowv1.SubmitTaskResponse
	switch op {
	case "power_on":
		sub, err = c.flow.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: spec, Description: desc})
	case "power_off", "force_power_off":
		sub, err = c.flow.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: spec, Forced: op == "force_power_off", Description: desc})
	case "restart", "force_restart":
		sub, err = c.flow.PowerResetRack(ctx, &flowv1.PowerResetRackRequest{TargetSpec: spec, Forced: op == "force_restart", Description: desc})
	case "cold_reset":
		sub, err = c.flow.ACPowerCycleRack(ctx, &flowv1.ACPowerCycleRackRequest{TargetSpec: spec, Description: desc})
	}
	if err != nil {
		return "", "", err
	}
	if ids := sub.GetTaskIds(); len(ids) == 1 {
		return Prefix + "tasks/" + ids[0].GetId(), fmt.Sprintf("retry submitted for %d component(s)", len(failed)), nil
	}
	return Prefix + "tasks/" + id, fmt.Sprintf("%d tasks submitted", len(sub.GetTaskIds())), nil
}

func (c *Console) task(r *http.Request) (view, error) {
	id, err := c.resolveTask(r.Context(), r.PathValue("id"))
	if err != nil {
		return view{}, err
	}
	res, err := c.flow.GetTasksByIDs(apiCtx(r), (&flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{{Id: id}}}))
	if err != nil {
		return view{}, err
	}
	if len(res.GetTasks()) == 0 {
		return view{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s not found", id))
	}
	t := res.GetTasks()[0]
	d := taskData{Task: t}
	if t.GetReport() != "" {
		if err := json.Unmarshal([]byte(t.GetReport()), &d.Report); err != nil {
			return view{}, fmt.Errorf("task %s: report: %w", id, err)
		}
	}
	switch t.GetStatus() {
	case flowv1.TaskStatus_TASK_STATUS_PENDING, flowv1.TaskStatus_TASK_STATUS_RUNNING, flowv1.TaskStatus_TASK_STATUS_WAITING:
		d.Active = true
	}
	outcomes := typeOutcomes(d.Report)
	// Per component: its own error where a step failed it alone (the
	// engine keeps each step's failed targets by component ID, Core ID or
	// serial number).
	rows, err := c.pool.Query(r.Context(), `
		SELECT coalesce(rk.name, ''), c.id::text, c.name, c.type, c.power_state,
		  coalesce((SELECT string_agg(DISTINCT f.value, '; ') FROM engine_step s, jsonb_each_text(s.failed_targets) f
		            WHERE s.run_id = t.run_id AND s.failed_targets <> '{}' AND (f.key = c.id::text OR f.key = c.external_id OR f.key = c.serial_number)), '')
		FROM task t JOIN component c ON c.id = ANY (t.component_ids) LEFT JOIN rack rk ON rk.id = t.rack_id
		WHERE t.id::text = $1 ORDER BY c.type, c.slot_id, c.name`, id)
	if err != nil {
		return view{}, fmt.Errorf("task %s: components: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var tc taskComponent
		if err := rows.Scan(&d.RackName, &tc.ID, &tc.Name, &tc.Type, &tc.Power, &tc.Error); err != nil {
			return view{}, err
		}
		tc.Outcome = outcomes[tc.Type]
		if tc.Outcome == "" {
			tc.Outcome = "not in plan"
		}
		if tc.Error != "" {
			tc.Outcome = "failed"
			d.Failed = append(d.Failed, tc.ID)
		}
		d.Components = append(d.Components, tc)
	}
	if err := rows.Err(); err != nil {
		return view{}, err
	}
	named := func(s *string) { *s = nameIDs(d.Components, *s) }
	named(&d.Report.Error)
	for i := range d.Report.Stages {
		named(&d.Report.Stages[i].Error)
		for j := range d.Report.Stages[i].Steps {
			named(&d.Report.Stages[i].Steps[j].Error)
		}
	}
	for i := range d.Components {
		named(&d.Components[i].Error)
	}
	d.Message = nameIDs(d.Components, t.GetMessage())
	onceEach(&d)
	if c.opts.Jobs != nil {
		d.JobsUI = true
		d.JobsURL = JobsPrefix + "/jobs?" + url.Values{"tags": {id}, "state": {jobsState(t.GetStatus())}}.Encode()
		if err := c.stepJobs(r.Context(), id, &d.Report); err != nil {
			return view{}, err
		}
	}
	return view{"task", "Task " + shortID(id), "tasks", []string{"tasks", "steps"}, d}, nil
}

// stepJobs sets each step's River jobs: those of the engine steps that ran
// its actions (an engine step is named "stage/component type/…"; a step
// handed on to the next stage keeps its job, so jobs may repeat).
func (c *Console) stepJobs(ctx context.Context, taskID string, rep *taskReport) error {
	rows, err := c.pool.Query(ctx, `
		SELECT split_part(s.spec->>'name', '/', 1), split_part(s.spec->>'name', '/', 2), array_agg(DISTINCT s.job_id ORDER BY s.job_id)
		FROM task t JOIN engine_step s ON s.run_id = t.run_id
		WHERE t.id::text = $1 AND s.job_id IS NOT NULL GROUP BY 1, 2`, taskID)
	if err != nil {
		return fmt.Errorf("task %s: step jobs: %w", taskID, err)
	}
	defer rows.Close()
	jobs := map[string][]int64{}
	for rows.Next() {
		var stage, typ string
		var ids []int64
		if err := rows.Scan(&stage, &typ, &ids); err != nil {
			return fmt.Errorf("task %s: step jobs: %w", taskID, err)
		}
		jobs[stage+"/"+typ] = ids
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("task %s: step jobs: %w", taskID, err)
	}
	for i := range rep.Stages {
		for j := range rep.Stages[i].Steps {
			sp := &rep.Stages[i].Steps[j]
			sp.Jobs = jobs[strconv.Itoa(rep.Stages[i].Number)+"/"+sp.ComponentType]
		}
	}
	return nil
}

// jobsState is the state of River jobs River UI lists first for a task of
// status st: the jobs of a completed task completed, the failing job of a
// failed one was discarded, a terminated one's were cancelled, and an
// active task's run (River UI's own default).
func jobsState(st flowv1.TaskStatus) string {
	switch st {
	case flowv1.TaskStatus_TASK_STATUS_COMPLETED:
		return "completed"
	case flowv1.TaskStatus_TASK_STATUS_FAILED:
		return "discarded"
	case flowv1.TaskStatus_TASK_STATUS_TERMINATED:
		return "cancelled"
	}
	return "running"
}
