package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/term"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Following tasks: task watch and the --wait of the rack operations poll
// GetTasksByIDs and show each snapshot. On a terminal the view is redrawn in
// place (stages, steps, the current action); elsewhere it prints a
// timestamped line per change. Ctrl-C stops the following, not the tasks,
// and says how to watch or cancel them; a server that stops answering is
// reported at once and retried.

// defaultPollInterval is how often watch and --wait ask the server for
// news.
const defaultPollInterval = time.Second

// pollTimeout bounds one poll, so that a server that hangs is noticed and
// reported as quickly as one that refuses the connection.
var pollTimeout = 5 * time.Second

// maxFailedPolls is how many polls in a row may fail (server unavailable or
// not answering within pollTimeout) before watch and --wait give up.
const maxFailedPolls = 30

// now is the clock of the views (timestamps, durations).
var now = time.Now

// waitTasks follows submitted tasks to their end. The table output shows
// the tasks, their progress (redrawn on a terminal, a line per change
// elsewhere) and the outcome; -o json prints only the final tasks. It
// returns a taskEndError unless every task completed.
func waitTasks(ctx context.Context, c *env, ids []*flowv1.UUID, interval time.Duration) error {
	var view taskView
	var names map[string]string
	if !c.structured() {
		tasks, err := c.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: ids})
		if err != nil {
			return err
		}
		names = rackNames(ctx, c, tasks.GetTasks())
		tty := isTerminal(c.out)
		if !tty {
			// A terminal gets the tasks in the redrawn frame.
			printSubmitted(c.out, tasks.GetTasks(), names, false)
			fmt.Fprintln(c.out)
		}
		view = newTaskView(c.out, tty, true)
	}
	tasks, err := followTasks(ctx, c, ids, interval, view, names)
	if err != nil {
		return err
	}
	res := &flowv1.GetTasksByIDsResponse{Tasks: tasks}
	if !c.structured() {
		fmt.Fprintln(c.out)
	}
	if err := c.emit(res, func(w io.Writer) { printSubmitted(w, tasks, names, true) }); err != nil {
		return err
	}
	failed := 0
	for _, t := range tasks {
		if t.GetStatus() != flowv1.TaskStatus_TASK_STATUS_COMPLETED {
			failed++
		}
	}
	if failed > 0 {
		return taskEndError{fmt.Sprintf("%d of %d tasks did not complete", failed, len(tasks))}
	}
	return nil
}

// followTasks polls the tasks every interval, showing each snapshot on view
// (nil: show nothing) with the racks' names (nil: looked up), until all have
// finished; it returns the final snapshot. A failed poll is reported on
// c.errOut at once and retried; after maxFailedPolls in a row, or when ctx
// ends (Ctrl-C), it returns an error saying that the tasks keep running and
// how to follow or cancel them.
func followTasks(ctx context.Context, c *env, ids []*flowv1.UUID, interval time.Duration, view taskView, names map[string]string) ([]*flowv1.Task, error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failed := 0
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				if view != nil {
					view.interrupted()
				}
				return nil, interrupted(c, ids)
			case <-tick.C:
			}
		}
		pctx, cancel := context.WithTimeout(ctx, pollTimeout)
		res, err := c.client.GetTasksByIDs(pctx, &flowv1.GetTasksByIDsRequest{TaskIds: ids})
		cancel()
		if ctx.Err() != nil {
			if view != nil {
				view.interrupted()
			}
			return nil, interrupted(c, ids)
		}
		if err != nil {
			// Tasks run for many minutes: ride out a server restart or a
			// network blip rather than stop following them, but say so.
			code := connect.CodeOf(err)
			if code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded {
				return nil, err
			}
			failed++
			if failed > maxFailedPolls {
				return nil, fmt.Errorf("gave up after %d failed polls of %s: %w\n%s", maxFailedPolls, c.server, err, followHint(c, ids, "keep running on the server"))
			}
			fmt.Fprintf(c.errOut, "%s flow: server %s not answering (%s); retrying every %s (%d of %d)\n",
				now().UTC().Format("15:04:05"), c.server, connect.CodeOf(err), interval, failed, maxFailedPolls)
			continue
		}
		if failed > 0 {
			fmt.Fprintf(c.errOut, "%s flow: server %s answers again\n", now().UTC().Format("15:04:05"), c.server)
			failed = 0
		}
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

// interrupted is the error of a watch stopped by Ctrl-C.
func interrupted(c *env, ids []*flowv1.UUID) error {
	return interruptedError{"interrupted: stopped watching; " + followHint(c, ids, "keep running on the server")}
}

// followHint says what happens to the tasks and the commands that watch and
// cancel them.
func followHint(c *env, ids []*flowv1.UUID, fate string) string {
	server := ""
	if c.server != DefaultServer {
		server = " --server " + c.server
	}
	var b strings.Builder
	if len(ids) == 1 {
		fmt.Fprintf(&b, "the task keeps running on the server\n  watch it:  flow%s task watch %s\n  cancel it: flow%s task cancel %s",
			server, ids[0].GetId(), server, ids[0].GetId())
		return b.String()
	}
	fmt.Fprintf(&b, "the %d tasks %s\n", len(ids), fate)
	for _, id := range ids {
		fmt.Fprintf(&b, "  flow%s task watch %s   |   flow%s task cancel %s\n", server, id.GetId(), server, id.GetId())
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// taskView shows successive snapshots of tasks as they progress.
type taskView interface {
	show(tasks []*flowv1.Task, names map[string]string)
	// interrupted ends the view when the following stops early.
	interrupted()
}

// newTaskView returns a view writing to w: on a terminal it redraws the
// tasks in place, elsewhere it prints a timestamped line per change. multi
// prefixes each line with the task's rack and, on a terminal, draws each
// task compactly (its stages and current actions) instead of in full.
func newTaskView(w io.Writer, tty, multi bool) taskView {
	if tty {
		width, height := termSize(w)
		return &redrawView{w: w, multi: multi, width: width, height: height}
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

// termSize returns the size of the terminal w, 0, 0 if unknown.
func termSize(w io.Writer) (width, height int) {
	if f, ok := w.(*os.File); ok {
		if width, height, err := term.GetSize(int(f.Fd())); err == nil {
			return width, height
		}
	}
	return 0, 0
}

// lineView prints one timestamped line for each task status, stage and
// step whose state (or current action) changed since the previous snapshot
// (every one on the first). A finished task's status line comes after its
// stages, so the output ends with it.
type lineView struct {
	w     io.Writer
	multi bool
	last  map[string]string // fact key → last line printed for it
}

func (v *lineView) show(tasks []*flowv1.Task, names map[string]string) {
	stamp := now().UTC().Format("15:04:05") + " "
	for _, t := range tasks {
		id := t.GetId().GetId()
		prefix := stamp
		if v.multi {
			prefix += rackLabel(names, t.GetRackId().GetId()) + ": "
		}
		status := fmt.Sprintf("task %s %s: %s", id, statusName(t.GetStatus()), t.GetMessage())
		finished := taskFinished(t.GetStatus())
		if !finished {
			v.emit(id, prefix, status)
		}
		if rep, ok := taskReport(t); ok {
			for _, st := range rep.Stages {
				key := fmt.Sprintf("%s/%d", id, st.Number)
				v.emit(key, prefix, stageLine(st, len(rep.Stages)))
				for _, s := range st.Steps {
					v.emit(key+"/"+s.ComponentType, prefix, "  "+stepLine(st.Number, s))
				}
			}
			if finished && len(rep.NotTargeted) > 0 {
				names := make([]string, len(rep.NotTargeted))
				for i, n := range rep.NotTargeted {
					names[i] = n.Name + " (" + strings.ToLower(n.Type) + ")"
				}
				v.emit(id+"/not-targeted", prefix, "not targeted: "+strings.Join(names, ", "))
			}
		}
		if finished {
			v.emit(id, prefix, status)
		}
	}
}

func (v *lineView) interrupted() {}

// emit prints prefix+line unless line is what key showed last.
func (v *lineView) emit(key, prefix, line string) {
	if v.last[key] == line {
		return
	}
	v.last[key] = line
	fmt.Fprintln(v.w, prefix+line)
}

func stageLine(st stageReport, stages int) string {
	line := fmt.Sprintf("stage %d/%d %s", st.Number, stages, st.Status)
	if st.Targets != nil {
		line += fmt.Sprintf(" %d/%d", deref(st.Completed), *st.Targets)
		if n := deref(st.Failed); n > 0 {
			line += fmt.Sprintf(", %d failed", n)
		}
		if n := deref(st.Running); n > 0 {
			line += fmt.Sprintf(", %d running", n)
		}
	}
	if st.Error != "" {
		line += ": " + st.Error
	}
	return line
}

func stepLine(stage int, s stepReport) string {
	line := fmt.Sprintf("stage %d %s %s %d/%d", stage, s.ComponentType, s.Status, s.CompletedComponents, s.TotalComponents)
	if s.FailedComponents > 0 {
		line += fmt.Sprintf(" (%d failed)", s.FailedComponents)
	}
	if a := s.CurrentAction.String(); a != "" && s.Status == "running" {
		line += ": " + a
	}
	if s.Error != "" {
		line += ": " + s.Error
	}
	return line
}

// redrawView redraws its frame in place with ANSI cursor movement: up over
// the previous frame, then clear to the end of the screen. Lines are cut to
// the terminal's width, as a wrapped line would throw off the count, and a
// frame taller than the terminal falls back to one row per task.
type redrawView struct {
	w      io.Writer
	multi  bool
	width  int // terminal columns; 0: unknown, lines are not cut
	height int // terminal rows; 0: unknown
	lines  int // lines of the frame on screen
}

func (v *redrawView) show(tasks []*flowv1.Task, names map[string]string) {
	var b strings.Builder
	t := now()
	if v.multi {
		for i, task := range tasks {
			if i > 0 {
				b.WriteByte('\n')
			}
			printTaskCompact(&b, task, names, t)
		}
		if v.height > 0 && strings.Count(b.String(), "\n")+2 > v.height {
			b.Reset()
			printTaskRows(&b, tasks, names)
		}
	} else {
		for _, task := range tasks {
			printTask(&b, task, names, t)
		}
	}
	done := true
	for _, task := range tasks {
		done = done && taskFinished(task.GetStatus())
	}
	if !done {
		fmt.Fprintf(&b, "\nupdated %s · Ctrl-C stops watching (the tasks keep running)\n", t.UTC().Format("15:04:05"))
	}
	v.draw(b.String())
}

func (v *redrawView) draw(frame string) {
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

// interrupted leaves the last frame on screen, without its footer.
func (v *redrawView) interrupted() { fmt.Fprintln(v.w) }

// printTaskCompact prints a task in a few lines: rack, operation, status and
// time, then a line per stage with its counts and current action.
func printTaskCompact(w io.Writer, t *flowv1.Task, names map[string]string, at time.Time) {
	elapsed := ""
	if t.StartedAt != nil {
		end := at
		if t.FinishedAt != nil {
			end = t.GetFinishedAt().AsTime()
		}
		elapsed = " " + end.Sub(t.GetStartedAt().AsTime()).Round(time.Second).String()
	}
	fmt.Fprintf(w, "%s  %s  %s%s  task %s", rackLabel(names, t.GetRackId().GetId()), t.GetOperation(), statusName(t.GetStatus()), elapsed, t.GetId().GetId())
	if m := t.GetMessage(); m != "" {
		fmt.Fprintf(w, ": %s", m)
	}
	fmt.Fprintln(w)
	rep, ok := taskReport(t)
	if !ok {
		return
	}
	rows := make([][]string, 0, len(rep.Stages))
	withAction := false
	for _, st := range rep.Stages {
		targets, done, failed, running := st.counts()
		types := make([]string, len(st.Steps))
		for i, s := range st.Steps {
			types[i] = s.ComponentType
		}
		counts := fmt.Sprintf("%d/%d", done, targets)
		if failed > 0 {
			counts += fmt.Sprintf(", %d failed", failed)
		}
		if running > 0 {
			counts += fmt.Sprintf(", %d running", running)
		}
		act := st.action()
		if act == "" && st.Error != "" {
			act = st.Error
		}
		withAction = withAction || act != ""
		rows = append(rows, []string{fmt.Sprintf("  %d", st.Number), strings.Join(types, ","), st.Status, counts, act})
	}
	headers := []string{"  STAGE", "STEPS", "STATUS", "DONE", "ACTION"}
	if !withAction {
		// A server without current actions in its reports (and a task
		// between actions) has no column to show.
		headers = headers[:4]
		for i := range rows {
			rows[i] = rows[i][:4]
		}
	}
	var b strings.Builder
	printTable(&b, headers, rows)
	io.WriteString(w, b.String())
}

// printTaskRows prints one row per task (the view of many tasks).
func printTaskRows(w io.Writer, tasks []*flowv1.Task, names map[string]string) {
	rows := make([][]string, len(tasks))
	for i, t := range tasks {
		rows[i] = []string{t.GetId().GetId(), rackLabel(names, t.GetRackId().GetId()), statusName(t.GetStatus()), progressSummary(t), t.GetMessage()}
	}
	printTable(w, []string{"TASK", "RACK", "STATUS", "PROGRESS", "MESSAGE"}, rows)
}
