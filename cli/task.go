package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CLI noun of tasks: task. A task is one rack's share of an operation
// request (spec/execution.md §5); its report (§10) mirrors the rule's stages
// and steps. See docs/tasks.md. The following of tasks (watch, --wait) is
// in watch.go.

var taskStatuses = []string{"waiting", "pending", "running", "completed", "failed", "terminated"}

var taskNoun = noun{
	name:    "task",
	summary: "tasks: one per rack and operation, with their stage and step progress",
	verbs: []verb{
		{name: "list", args: "[--rack R] [--component C] [--status S,...] [--operation O,...] [--since D|TIME] [--active] [--report] [--offset N] [--limit N]", summary: "list tasks, newest first",
			flags: func(fs *pflag.FlagSet) runFunc {
				rack := fs.String("rack", "", "only tasks on this rack (name or UUID)")
				comp := fs.String("component", "", "only tasks targeting this component (name or UUID)")
				status := fs.String("status", "", "only tasks in these statuses, comma-separated: "+strings.Join(taskStatuses, ", "))
				operation := fs.String("operation", "", "only these operations, comma-separated: "+strings.Join(taskOperations(), ", "))
				since := fs.String("since", "", "only tasks created since: a duration back from now (1h, 30m) or an RFC 3339 time")
				active := fs.Bool("active", false, "only tasks not yet finished (waiting, pending, running)")
				report := fs.Bool("report", false, "include reports (-o json) and a progress column")
				page := pageFlags(fs)
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					f, err := parseTaskFilter(*status, *operation, *since, time.Now())
					if err != nil {
						return err
					}
					req := &flowv1.ListTasksRequest{ActiveOnly: *active, WithReport: *report, Pagination: page()}
					if *comp != "" {
						if req.ComponentId, err = resolveComponent(ctx, c, *comp); err != nil {
							return err
						}
					}
					if *rack != "" {
						if req.RackId, err = resolveRack(ctx, c, *rack); err != nil {
							return err
						}
					}
					var res *flowv1.ListTasksResponse
					if f.empty() {
						res, err = c.client.ListTasks(ctx, req)
					} else {
						res, err = listFiltered(ctx, c, req, f)
					}
					if err != nil {
						return err
					}
					if c.structured() {
						return c.emit(res, nil)
					}
					names := rackNames(ctx, c, res.GetTasks())
					return c.emit(res, func(w io.Writer) {
						printTasks(w, res.GetTasks(), names, *report, c.wide())
						fmt.Fprintf(w, "(%d of %d tasks)\n", len(res.GetTasks()), res.GetTotal())
					})
				}
			}},
		{name: "get", args: "TASK...", summary: "show tasks (by UUID or unique UUID prefix): status, message, times, rule and the report's stages and steps",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if len(args) == 0 {
						return usageError{errors.New("want TASK...")}
					}
					ids, err := resolveAll(ctx, c, resolveTask, args)
					if err != nil {
						return err
					}
					res, err := c.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: ids})
					if err != nil {
						return err
					}
					if c.structured() {
						return c.emit(res, nil)
					}
					names := rackNames(ctx, c, res.GetTasks())
					return c.emit(res, func(w io.Writer) {
						for i, t := range res.GetTasks() {
							if i > 0 {
								fmt.Fprintln(w)
							}
							printTask(w, t, names, time.Now())
						}
					})
				}
			}},
		{name: "cancel", args: "TASK", complete: activeTaskList, summary: "stop a task: a running one mid-stage, a queued one before it starts (cancelling a terminated task again is a no-op)",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "TASK"); err != nil {
						return err
					}
					id, err := resolveTask(ctx, c, args[0])
					if err != nil {
						return err
					}
					res, err := c.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: id})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						t := res.GetTask()
						fmt.Fprintf(w, "task %s %s: %s\n", t.GetId().GetId(), statusName(t.GetStatus()), t.GetMessage())
					})
				}
			}},
		{name: "watch", args: "TASK [--interval D]", complete: activeTaskList, summary: "follow a task's stages, steps and current action until it ends; exits 1 unless it completed (-o json: print the final task)",
			flags: func(fs *pflag.FlagSet) runFunc {
				interval := fs.Duration("interval", defaultPollInterval, "how often to poll the server")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "TASK"); err != nil {
						return err
					}
					if *interval <= 0 {
						return usageError{errors.New("--interval must be positive")}
					}
					id, err := resolveTask(ctx, c, args[0])
					if err != nil {
						return err
					}
					var view taskView
					if !c.structured() {
						view = newTaskView(c.out, isTerminal(c.out), false)
					}
					tasks, err := followTasks(ctx, c, []*flowv1.UUID{id}, *interval, view, nil)
					if err != nil {
						return err
					}
					t := tasks[0]
					if c.structured() {
						if err := c.emit(t, nil); err != nil {
							return err
						}
					}
					if t.GetStatus() != flowv1.TaskStatus_TASK_STATUS_COMPLETED {
						return taskEndError{fmt.Sprintf("task %s %s: %s", t.GetId().GetId(), statusName(t.GetStatus()), t.GetMessage())}
					}
					return nil
				}
			}},
	},
}

// taskEndError is returned when a watched or awaited task did not complete:
// the command exits 1 with the reason.
type taskEndError struct{ msg string }

func (e taskEndError) Error() string { return e.msg }

// taskFilter is what task list filters on the client side: the API filters
// by rack, component and activity only.
type taskFilter struct {
	statuses   []flowv1.TaskStatus
	operations []string
	since      time.Time
}

func (f taskFilter) empty() bool {
	return len(f.statuses) == 0 && len(f.operations) == 0 && f.since.IsZero()
}

func (f taskFilter) match(t *flowv1.Task) bool {
	return (len(f.statuses) == 0 || slices.Contains(f.statuses, t.GetStatus())) &&
		(len(f.operations) == 0 || slices.Contains(f.operations, t.GetOperation()))
}

// taskOperations are the values of a task's operation: every operation
// code, in the operation types' order.
func taskOperations() []string {
	var out []string
	for _, t := range operations.OperationTypes() {
		for _, c := range t.Codes() {
			if !slices.Contains(out, string(c)) {
				out = append(out, string(c))
			}
		}
	}
	return out
}

// parseTaskFilter reads --status, --operation and --since (relative to now).
func parseTaskFilter(status, operation, since string, now time.Time) (taskFilter, error) {
	var f taskFilter
	for _, s := range splitList(status) {
		v, ok := flowv1.TaskStatus_value["TASK_STATUS_"+strings.ToUpper(s)]
		if !ok || v == 0 {
			return f, usageError{fmt.Errorf("--status: unknown status %q (want %s)", s, strings.Join(taskStatuses, ", "))}
		}
		f.statuses = append(f.statuses, flowv1.TaskStatus(v))
	}
	for _, o := range splitList(operation) {
		if !slices.Contains(taskOperations(), o) {
			return f, usageError{fmt.Errorf("--operation: unknown operation %q (want %s)", o, strings.Join(taskOperations(), ", "))}
		}
		f.operations = append(f.operations, o)
	}
	if since != "" {
		if d, err := time.ParseDuration(since); err == nil {
			if d <= 0 {
				return f, usageError{errors.New("--since: the duration must be positive")}
			}
			f.since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339, since); err == nil {
			f.since = t
		} else {
			return f, usageError{fmt.Errorf("--since: want a duration such as 1h or an RFC 3339 time, not %q", since)}
		}
	}
	return f, nil
}

// splitList splits a comma-separated flag value, dropping empty parts.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// listFiltered lists the tasks req selects that also match f, paging
// through the newest first (and stopping at the first task older than
// --since); req's pagination applies to the filtered list.
func listFiltered(ctx context.Context, c *env, req *flowv1.ListTasksRequest, f taskFilter) (*flowv1.ListTasksResponse, error) {
	offset, limit := int(req.GetPagination().GetOffset()), int(req.GetPagination().GetLimit())
	if limit == 0 {
		limit = 100 // the server's default page
	}
	res := &flowv1.ListTasksResponse{}
	err := eachTask(ctx, c, req, func(t *flowv1.Task) bool {
		if !f.since.IsZero() && t.GetCreatedAt().AsTime().Before(f.since) {
			return false
		}
		if !f.match(t) {
			return true
		}
		if int(res.Total) >= offset && len(res.Tasks) < limit {
			res.Tasks = append(res.Tasks, t)
		}
		res.Total++
		return true
	})
	return res, err
}

// taskFinished reports whether s is a terminal status.
func taskFinished(s flowv1.TaskStatus) bool {
	switch s {
	case flowv1.TaskStatus_TASK_STATUS_COMPLETED, flowv1.TaskStatus_TASK_STATUS_FAILED, flowv1.TaskStatus_TASK_STATUS_TERMINATED:
		return true
	}
	return false
}

// statusName returns the lowercase name of a task status ("running").
func statusName(s flowv1.TaskStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "TASK_STATUS_"))
}

// rackNames returns the names of the tasks' racks and applied rules by
// UUID (UUIDs do not collide, so one map holds both). A rule it cannot read
// is left out, and shown by UUID.
func rackNames(ctx context.Context, c *env, tasks []*flowv1.Task) map[string]string {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.GetRackId().GetId()
	}
	names := rackNamesByID(ctx, c, ids)
	for _, t := range tasks {
		id := t.GetAppliedRuleId().GetId()
		if _, ok := names[id]; ok || id == "" {
			continue
		}
		names[id] = ""
		if r, err := c.client.GetOperationRule(ctx, &flowv1.GetOperationRuleRequest{RuleId: t.GetAppliedRuleId()}); err == nil {
			names[id] = r.GetName()
		}
	}
	return names
}

// printTasks prints a task table; progress adds the report's summary, wide
// the rack UUID, the rule (by name) and the start and end times.
func printTasks(w io.Writer, tasks []*flowv1.Task, names map[string]string, progress, wide bool) {
	headers := []string{"TASK", "OPERATION", "RACK", "STATUS", "MESSAGE", "CREATED"}
	if wide {
		headers = append(headers, "STARTED", "FINISHED", "RACK ID", "RULE")
	}
	if progress {
		headers = append(headers, "PROGRESS")
	}
	rows := make([][]string, len(tasks))
	for i, t := range tasks {
		rows[i] = []string{t.GetId().GetId(), t.GetOperation(), rackLabel(names, t.GetRackId().GetId()),
			statusName(t.GetStatus()), t.GetMessage(), fmtTime(t.GetCreatedAt().AsTime())}
		if wide {
			rule := "built-in"
			if t.AppliedRuleId != nil {
				rule = rackLabel(names, t.GetAppliedRuleId().GetId())
			}
			rows[i] = append(rows[i], fmtTime(t.GetStartedAt().AsTime()), fmtTime(t.GetFinishedAt().AsTime()), t.GetRackId().GetId(), rule)
		}
		if progress {
			rows[i] = append(rows[i], progressSummary(t))
		}
	}
	printTable(w, headers, rows)
}

// printTask prints one task: its fields, then its report as a table of
// stages and steps (durations of running tasks measured to now).
func printTask(w io.Writer, t *flowv1.Task, names map[string]string, now time.Time) {
	rack := t.GetRackId().GetId()
	if n := names[rack]; n != "" {
		rack = n + " (" + rack + ")"
	}
	rule := "built-in"
	if t.AppliedRuleId != nil {
		rule = t.GetAppliedRuleId().GetId()
		if n := names[rule]; n != "" {
			rule = n + " (" + rule + ")"
		}
	}
	fields := [][2]string{
		{"ID", t.GetId().GetId()},
		{"OPERATION", t.GetOperation()},
		{"RACK", rack},
		{"STATUS", statusName(t.GetStatus())},
		{"MESSAGE", t.GetMessage()},
		{"DESCRIPTION", t.GetDescription()},
		{"RULE", rule},
		{"COMPONENTS", strconv.Itoa(len(t.GetComponentUuids()))},
		{"CREATED", fmtTime(t.GetCreatedAt().AsTime())},
	}
	if rep, ok := taskReport(t); ok && rep.SubmittedBy != "" {
		fields = append(fields, [2]string{"SUBMITTED BY", rep.SubmittedBy})
	}
	if t.QueueExpiresAt != nil {
		fields = append(fields, [2]string{"QUEUE EXPIRES", fmtTime(t.GetQueueExpiresAt().AsTime())})
	}
	if t.StartedAt != nil {
		fields = append(fields, [2]string{"STARTED", fmtTime(t.GetStartedAt().AsTime())})
	}
	if t.FinishedAt != nil {
		fields = append(fields, [2]string{"FINISHED", fmtTime(t.GetFinishedAt().AsTime())})
	}
	if t.StartedAt != nil {
		end := now
		if t.FinishedAt != nil {
			end = t.GetFinishedAt().AsTime()
		}
		fields = append(fields, [2]string{"DURATION", end.Sub(t.GetStartedAt().AsTime()).Round(time.Second).String()})
	}
	// A fixed label width keeps the layout the same whether or not the
	// optional fields are there.
	for _, f := range fields {
		fmt.Fprintf(w, "%-15s%s\n", f[0], or(f[1], "-"))
	}
	if rep, ok := taskReport(t); ok {
		fmt.Fprintln(w)
		printReport(w, rep)
	}
}

// clock turns a report time (RFC 3339) into its UTC time of day.
func clock(s string) string {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("15:04:05")
}
