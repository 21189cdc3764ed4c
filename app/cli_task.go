package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"golang.org/x/term"

	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CLI noun of tasks: task. A task is one rack's share of an operation
// request (spec/execution.md §5); its report (§10) mirrors the rule's stages
// and steps. See docs/tasks.md.

// defaultPollInterval is how often watch and power --wait ask the server for
// news.
const defaultPollInterval = time.Second

// maxUnavailablePolls is how many polls in a row may find the server
// unavailable before watch and power --wait give up.
const maxUnavailablePolls = 30

var taskNoun = cliNoun{
	name:    "task",
	summary: "tasks: one per rack and operation, with their stage and step progress",
	verbs: []cliVerb{
		{name: "list", args: "[--rack R] [--component ID] [--active] [--report] [--offset N] [--limit N]", summary: "list tasks, newest first",
			flags: func(fs *flag.FlagSet) runFunc {
				rack := fs.String("rack", "", "only tasks on this rack (UUID or name)")
				comp := fs.String("component", "", "only tasks targeting this component (UUID)")
				active := fs.Bool("active", false, "only tasks not yet finished (waiting, pending, running)")
				report := fs.Bool("report", false, "include reports (-o json) and a progress column")
				page := pageFlags(fs)
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					req := &flowv1.ListTasksRequest{ActiveOnly: *active, WithReport: *report, Pagination: page()}
					if *comp != "" {
						id, err := uuidValue("--component", *comp)
						if err != nil {
							return err
						}
						req.ComponentId = id
					}
					if *rack != "" {
						id, err := resolveRack(ctx, c, *rack)
						if err != nil {
							return err
						}
						req.RackId = id
					}
					res, err := c.client.ListTasks(ctx, req)
					if err != nil {
						return err
					}
					if c.json {
						return c.emit(res, nil)
					}
					names := rackNames(ctx, c, res.GetTasks())
					return c.emit(res, func(w io.Writer) {
						printTasks(w, res.GetTasks(), names, *report)
						fmt.Fprintf(w, "(%d of %d tasks)\n", len(res.GetTasks()), res.GetTotal())
					})
				}
			}},
		{name: "get", args: "ID...", summary: "show tasks: status, message, times, rule and the report's stages and steps",
			flags: func(fs *flag.FlagSet) runFunc {
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if len(args) == 0 {
						return usageError{errors.New("want ID...")}
					}
					ids, err := taskIDs(args)
					if err != nil {
						return err
					}
					res, err := c.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: ids})
					if err != nil {
						return err
					}
					if c.json {
						return c.emit(res, nil)
					}
					names := rackNames(ctx, c, res.GetTasks())
					return c.emit(res, func(w io.Writer) {
						for i, t := range res.GetTasks() {
							if i > 0 {
								fmt.Fprintln(w)
							}
							printTask(w, t, names)
						}
					})
				}
			}},
		{name: "cancel", args: "ID", summary: "stop a task: a running one mid-stage, a queued one before it starts (cancelling a terminated task again is a no-op)",
			flags: func(fs *flag.FlagSet) runFunc {
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if err := wantArgs(args, 1, "ID"); err != nil {
						return err
					}
					ids, err := taskIDs(args)
					if err != nil {
						return err
					}
					res, err := c.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: ids[0]})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						t := res.GetTask()
						fmt.Fprintf(w, "task %s %s: %s\n", t.GetId().GetId(), statusName(t.GetStatus()), t.GetMessage())
					})
				}
			}},
		{name: "watch", args: "ID [--interval D]", summary: "follow a task's stages and steps until it ends; exits 1 unless it completed (-o json: print the final task)",
			flags: func(fs *flag.FlagSet) runFunc {
				interval := fs.Duration("interval", defaultPollInterval, "how often to poll the server")
				return func(ctx context.Context, c *cliEnv, args []string) error {
					if err := wantArgs(args, 1, "ID"); err != nil {
						return err
					}
					ids, err := taskIDs(args)
					if err != nil {
						return err
					}
					if *interval <= 0 {
						return usageError{errors.New("--interval must be positive")}
					}
					var view taskView
					if !c.json {
						view = newTaskView(c.out, isTerminal(c.out), false)
					}
					tasks, err := followTasks(ctx, c, ids, *interval, view, nil)
					if err != nil {
						return err
					}
					t := tasks[0]
					if c.json {
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

// uuidValue checks a UUID given on the command line; a malformed one is an
// invalid_argument error, as the server would answer.
func uuidValue(what, s string) (*flowv1.UUID, error) {
	if _, err := uuid.Parse(s); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: %q is not a UUID", what, s))
	}
	return &flowv1.UUID{Id: s}, nil
}

func taskIDs(args []string) ([]*flowv1.UUID, error) {
	ids := make([]*flowv1.UUID, len(args))
	for i, a := range args {
		id, err := uuidValue("task ID", a)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
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

// taskReport decodes t's report; ok is false when it has none (ListTasks
// without --report) or it cannot be read.
func taskReport(t *flowv1.Task) (rep operations.Report, ok bool) {
	if t.GetReport() == "" {
		return rep, false
	}
	return rep, json.Unmarshal([]byte(t.GetReport()), &rep) == nil
}

// rackNames returns the names of the tasks' racks by rack UUID, asking the
// server once per rack. A rack it cannot read (purged meanwhile) is left
// out, and shown by UUID.
func rackNames(ctx context.Context, c *cliEnv, tasks []*flowv1.Task) map[string]string {
	names := map[string]string{}
	for _, t := range tasks {
		id := t.GetRackId().GetId()
		if _, ok := names[id]; ok || id == "" {
			continue
		}
		names[id] = ""
		res, err := c.client.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{Id: t.GetRackId()})
		if err == nil {
			names[id] = res.GetRack().GetInfo().GetName()
		}
	}
	return names
}

func rackLabel(names map[string]string, id string) string {
	return or(names[id], id)
}

// printTasks prints a task table; progress adds the report's summary.
func printTasks(w io.Writer, tasks []*flowv1.Task, names map[string]string, progress bool) {
	headers := []string{"TASK", "OPERATION", "RACK", "STATUS", "MESSAGE", "CREATED"}
	if progress {
		headers = append(headers, "PROGRESS")
	}
	rows := make([][]string, len(tasks))
	for i, t := range tasks {
		rows[i] = []string{t.GetId().GetId(), t.GetOperation(), rackLabel(names, t.GetRackId().GetId()),
			statusName(t.GetStatus()), t.GetMessage(), fmtTime(t.GetCreatedAt().AsTime())}
		if progress {
			rows[i] = append(rows[i], progressSummary(t))
		}
	}
	printTable(w, headers, rows)
}

// progressSummary condenses a task's report to "stage 2/3, 12/35
// components" (failed components added when any).
func progressSummary(t *flowv1.Task) string {
	rep, ok := taskReport(t)
	if !ok {
		return ""
	}
	stage, stages := 0, 0
	var done, failed, total int
	for _, st := range rep.Stages {
		if st.Status == "skipped" {
			continue
		}
		stages++
		if st.Status != "pending" {
			stage = stages
		}
		for _, s := range st.Steps {
			done += s.CompletedComponents
			failed += s.FailedComponents
			total += s.TotalComponents
		}
	}
	out := fmt.Sprintf("stage %d/%d, %d/%d done", stage, stages, done, total)
	if failed > 0 {
		out += fmt.Sprintf(", %d failed", failed)
	}
	return out
}

// printTask prints one task: its fields, then its report as a table of
// stages and steps.
func printTask(w io.Writer, t *flowv1.Task, names map[string]string) {
	rack := t.GetRackId().GetId()
	if n := names[rack]; n != "" {
		rack = n + " (" + rack + ")"
	}
	rule := "built-in"
	if t.AppliedRuleId != nil {
		rule = t.GetAppliedRuleId().GetId()
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
		end := time.Now()
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

// printReport prints a report as one row per step, the stage number and
// status on each stage's first row, then a count of steps and components.
func printReport(w io.Writer, rep operations.Report) {
	if len(rep.Stages) == 0 {
		fmt.Fprintln(w, "no stages")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tSTEP\tSTATUS\tCOMPLETED\tFAILED\tTOTAL\tSTARTED\tFINISHED\tERROR")
	var steps, stepsDone, stepsFailed, comps, compsDone, compsFailed int
	for _, st := range rep.Stages {
		for i, s := range st.Steps {
			stage := ""
			if i == 0 {
				stage = fmt.Sprintf("%d %s", st.Number, st.Status)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", stage, s.ComponentType, s.Status,
				s.CompletedComponents, s.FailedComponents, s.TotalComponents,
				or(clock(s.StartedAt), "-"), or(clock(s.FinishedAt), "-"), or(s.Error, "-"))
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
	fmt.Fprintf(w, "steps: %d completed, %d failed, %d total; components: %d completed, %d failed, %d total\n",
		stepsDone, stepsFailed, steps, compsDone, compsFailed, comps)
	if rep.Error != "" {
		fmt.Fprintf(w, "error: %s\n", rep.Error)
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

// followTasks polls the tasks every interval, showing each snapshot on view
// (nil: show nothing) with the racks' names (nil: looked up), until all have
// finished; it returns the final snapshot.
func followTasks(ctx context.Context, c *cliEnv, ids []*flowv1.UUID, interval time.Duration, view taskView, names map[string]string) ([]*flowv1.Task, error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	unavailable := 0
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-tick.C:
			}
		}
		res, err := c.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: ids})
		if err != nil {
			// Tasks run for many minutes: ride out a server restart or a
			// network blip rather than stop following them.
			unavailable++
			if connect.CodeOf(err) != connect.CodeUnavailable || unavailable > maxUnavailablePolls {
				return nil, err
			}
			continue
		}
		unavailable = 0
		tasks := res.GetTasks()
		if names == nil && view != nil {
			names = rackNames(ctx, c, tasks)
		}
		done := true
		for _, t := range tasks {
			done = done && taskFinished(t.GetStatus())
		}
		if view != nil {
			view.show(tasks, names)
		}
		if done {
			return tasks, nil
		}
	}
}

// taskView shows successive snapshots of tasks as they progress.
type taskView interface {
	show(tasks []*flowv1.Task, names map[string]string)
}

// newTaskView returns a view writing to w: on a terminal it redraws the
// tasks in place, elsewhere it prints a line per change. multi prefixes each
// line with the task's rack and, on a terminal, draws one row per task
// instead of one task's stages and steps.
func newTaskView(w io.Writer, tty, multi bool) taskView {
	if tty {
		return &redrawView{w: w, multi: multi, width: termWidth(w)}
	}
	return &lineView{w: w, multi: multi, last: map[string]string{}}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// lineView prints one line for each task status, stage and step whose state
// changed since the previous snapshot (every one on the first). A finished
// task's status line comes after its stages, so the output ends with it.
type lineView struct {
	w     io.Writer
	multi bool
	last  map[string]string // fact key → last line printed for it
}

func (v *lineView) show(tasks []*flowv1.Task, names map[string]string) {
	for _, t := range tasks {
		id := t.GetId().GetId()
		prefix := ""
		if v.multi {
			prefix = rackLabel(names, t.GetRackId().GetId()) + ": "
		}
		status := fmt.Sprintf("task %s %s: %s", id, statusName(t.GetStatus()), t.GetMessage())
		finished := taskFinished(t.GetStatus())
		if !finished {
			v.emit(id, prefix+status)
		}
		if rep, ok := taskReport(t); ok {
			for _, st := range rep.Stages {
				key := fmt.Sprintf("%s/%d", id, st.Number)
				v.emit(key, prefix+stageLine(st, len(rep.Stages)))
				for _, s := range st.Steps {
					v.emit(key+"/"+string(s.ComponentType), prefix+"  "+stepLine(st.Number, s))
				}
			}
		}
		if finished {
			v.emit(id, prefix+status)
		}
	}
}

func (v *lineView) emit(key, line string) {
	if v.last[key] == line {
		return
	}
	v.last[key] = line
	fmt.Fprintln(v.w, line)
}

func stageLine(st operations.StageReport, stages int) string {
	line := fmt.Sprintf("stage %d/%d %s", st.Number, stages, st.Status)
	if st.Error != "" {
		line += ": " + st.Error
	}
	return line
}

func stepLine(stage int, s operations.StepReport) string {
	line := fmt.Sprintf("stage %d %s %s %d/%d", stage, s.ComponentType, s.Status, s.CompletedComponents, s.TotalComponents)
	if s.FailedComponents > 0 {
		line += fmt.Sprintf(" (%d failed)", s.FailedComponents)
	}
	if s.Error != "" {
		line += ": " + s.Error
	}
	return line
}

// termWidth returns the width of the terminal w, 0 if unknown.
func termWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if width, _, err := term.GetSize(int(f.Fd())); err == nil {
			return width
		}
	}
	return 0
}

// redrawView redraws its frame in place with ANSI cursor movement: up over
// the previous frame, then clear to the end of the screen. Lines are cut to
// the terminal's width, as a wrapped line would throw off the count.
type redrawView struct {
	w     io.Writer
	multi bool
	width int // terminal columns; 0: unknown, lines are not cut
	lines int // lines of the frame on screen
}

func (v *redrawView) show(tasks []*flowv1.Task, names map[string]string) {
	var b strings.Builder
	if v.multi {
		rows := make([][]string, len(tasks))
		for i, t := range tasks {
			rows[i] = []string{t.GetId().GetId(), rackLabel(names, t.GetRackId().GetId()), statusName(t.GetStatus()), progressSummary(t), t.GetMessage()}
		}
		printTable(&b, []string{"TASK", "RACK", "STATUS", "PROGRESS", "MESSAGE"}, rows)
	} else {
		for _, t := range tasks {
			printTask(&b, t, names)
		}
	}
	frame := b.String()
	if v.width > 1 {
		lines := strings.SplitAfter(frame, "\n")
		for i, l := range lines {
			if r := []rune(strings.TrimSuffix(l, "\n")); len(r) >= v.width {
				lines[i] = string(r[:v.width-2]) + "…\n"
			}
		}
		frame = strings.Join(lines, "")
	}
	if v.lines > 0 {
		fmt.Fprintf(v.w, "\x1b[%dA\x1b[J", v.lines)
	}
	io.WriteString(v.w, frame)
	v.lines = strings.Count(frame, "\n")
}
