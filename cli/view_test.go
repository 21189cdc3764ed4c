package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// flow runs the CLI (a root with only the client commands) with env as the
// environment and returns stdout, stderr and the error.
func flow(env map[string]string, args ...string) (string, string, error) {
	root := &cobra.Command{Use: "flow"}
	AddCommands(root, Options{Getenv: func(k string) string { return env[k] }, Stdin: strings.NewReader("")})
	var stdout, stderr bytes.Buffer
	err := Execute(context.Background(), root, args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestReadCredentials(t *testing.T) {
	t.Parallel()
	shared, err := readCredentials("", true, false, strings.NewReader("  tok\n"))
	require.NoError(t, err)
	require.Equal(t, "tok", shared.GetShared())

	per, err := readCredentials("", true, true, strings.NewReader(`{"compute":"c","nvswitch":"n"}`))
	require.NoError(t, err)
	require.True(t, proto.Equal(&flowv1.PerComponentFirmwareAuthenticationData{Compute: ptr("c"), Nvswitch: ptr("n")}, per.GetPerComponent()))

	_, err = readCredentials("", true, true, strings.NewReader(`{"gpu":"hunter2"}`))
	require.ErrorContains(t, err, "JSON object with keys")
	require.NotContains(t, err.Error(), "hunter2", "a secret is never echoed")

	_, err = readCredentials("", true, false, strings.NewReader(" \n"))
	require.ErrorContains(t, err, "empty")
	_, err = readCredentials("", false, true, nil)
	require.ErrorContains(t, err, "--per-component needs")
	none, err := readCredentials("", false, false, nil)
	require.NoError(t, err)
	require.Nil(t, none)
}

// fixedClock makes the views' clock read t for the test's duration; tests
// that use it do not run in parallel.
func fixedClock(t *testing.T, at time.Time) {
	old := now
	now = func() time.Time { return at }
	t.Cleanup(func() { now = old })
}

// newReport is a report as the server sends it with the progress counters
// and the current action.
const newReport = `{"version":1,"components_targeted":35,` +
	`"not_targeted":[{"name":"tor-1","type":"ToRSwitch","reason":"no step of the rule drives ToRSwitch"}],` +
	`"stages":[{"number":1,"status":"completed","targets":8,"completed":8,"failed":0,"running":0,"steps":[{"component_type":"PowerShelf","status":"completed","total_components":8,"completed_components":8}]},` +
	`{"number":2,"status":"running","targets":9,"completed":3,"failed":1,"running":5,"steps":[{"component_type":"NVSwitch","status":"running","total_components":9,"completed_components":3,"failed_components":1,` +
	`"current_action":{"action":"VerifyPowerStatus","detail":"verifying power, poll 3 of 60"}}]},` +
	`{"number":3,"status":"pending","steps":[{"component_type":"Compute","status":"pending","total_components":18}]}]}`

// oldReport is a report without them (an older server).
const oldReport = `{"version":1,"stages":[{"number":1,"status":"running","steps":[{"component_type":"Compute","status":"running","total_components":2,"completed_components":1}]}]}`

func TestTaskViewRedraw(t *testing.T) {
	fixedClock(t, time.Date(2026, 12, 1, 10, 42, 17, 0, time.UTC))
	task := func(status flowv1.TaskStatus, msg, rep string) []*flowv1.Task {
		return []*flowv1.Task{{
			Id: &flowv1.UUID{Id: "t1"}, RackId: &flowv1.UUID{Id: "r1"}, Operation: "power_on", Status: status, Message: msg,
			Report: rep,
		}}
	}
	names := map[string]string{"r1": "g10"}
	var buf strings.Builder
	v := newTaskView(&buf, true, true)
	v.show(task(flowv1.TaskStatus_TASK_STATUS_RUNNING, "Running", newReport), names)
	first := buf.String()
	require.Equal(t, "g10  power_on  running  task t1: Running\n"+
		"  STAGE  STEPS       STATUS     DONE                      ACTION\n"+
		"  1      PowerShelf  completed  8/8                       -\n"+
		"  2      NVSwitch    running    3/9, 1 failed, 5 running  verifying power, poll 3 of 60\n"+
		"  3      Compute     pending    0/18                      -\n"+
		"\nupdated 10:42:17 · Ctrl-C stops watching (the tasks keep running)\n", first)
	v.show(task(flowv1.TaskStatus_TASK_STATUS_COMPLETED, "Succeeded", oldReport), names)
	// Up over the lines drawn, clear, redraw; a finished frame has no footer.
	require.True(t, strings.HasPrefix(buf.String()[len(first):], "\x1b[7A\x1b[J"), "%q", buf.String())
	require.Equal(t, "g10  power_on  completed  task t1: Succeeded\n"+
		"  STAGE  STEPS    STATUS   DONE\n"+
		"  1      Compute  running  1/2\n", buf.String()[len(first)+len("\x1b[7A\x1b[J"):])

	buf.Reset()
	v = newTaskView(&buf, true, false)
	v.show(task(flowv1.TaskStatus_TASK_STATUS_RUNNING, "Running", newReport), nil)
	n := strings.Count(buf.String(), "\n")
	require.Regexp(t, `STAGE\s+STEP\s+STATUS\s+COMPLETED\s+FAILED\s+RUNNING\s+TOTAL\s+STARTED\s+FINISHED\s+ACTION\s+ERROR\n`, buf.String())
	require.Regexp(t, `2 running\s+NVSwitch\s+running\s+3\s+1\s+5\s+9\s+-\s+-\s+verifying power, poll 3 of 60\s+-\n`, buf.String())
	require.Contains(t, buf.String(), "components targeted: 35\n")
	require.Contains(t, buf.String(), "not targeted: 1 torswitch (no step of the rule drives ToRSwitch): tor-1\n")
	v.show(task(flowv1.TaskStatus_TASK_STATUS_RUNNING, "Running", oldReport), nil)
	require.Contains(t, buf.String(), fmt.Sprintf("\x1b[%dA\x1b[J", n))
	require.Regexp(t, `1 running\s+Compute\s+running\s+1\s+0\s+2\s+-\s+-\s+-\n`, buf.String()[n:])
}

func TestTaskViewLines(t *testing.T) {
	fixedClock(t, time.Date(2026, 12, 1, 10, 42, 17, 0, time.UTC))
	var buf strings.Builder
	v := newTaskView(&buf, false, true)
	tasks := []*flowv1.Task{{Id: &flowv1.UUID{Id: "t1"}, RackId: &flowv1.UUID{Id: "r1"}, Status: flowv1.TaskStatus_TASK_STATUS_RUNNING, Message: "Running", Report: newReport}}
	v.show(tasks, map[string]string{"r1": "g10"})
	require.Contains(t, buf.String(), "10:42:17 g10: stage 2/3 running 3/9, 1 failed, 5 running\n")
	require.Contains(t, buf.String(), "10:42:17 g10:   stage 2 NVSwitch running 3/9 (1 failed): verifying power, poll 3 of 60\n")
	buf.Reset()
	v.show(tasks, map[string]string{"r1": "g10"})
	require.Empty(t, buf.String(), "nothing changed, nothing printed")
}

func TestProgressSummary(t *testing.T) {
	t.Parallel()
	require.Equal(t, "stage 2/3: 3/9 done, 1 failed, 5 running (35 components)", progressSummary(&flowv1.Task{Report: newReport}))
	require.Equal(t, "stage 1/1: 1/2 done", progressSummary(&flowv1.Task{Report: oldReport}))
	require.Equal(t, "", progressSummary(&flowv1.Task{}))
}

func TestTaskViewRedrawCutsLines(t *testing.T) {
	t.Parallel()
	var buf strings.Builder
	v := &redrawView{w: &buf, multi: true, width: 20}
	v.show([]*flowv1.Task{{Id: &flowv1.UUID{Id: "t1"}, Status: flowv1.TaskStatus_TASK_STATUS_FAILED, Message: strings.Repeat("x", 100)}}, nil)
	for _, l := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		require.Equal(t, 19, len([]rune(l)), "%q", l)
	}
	require.Equal(t, 1, v.lines)
}

// flakyTasks answers GetTasksByIDs with Unavailable a number of times, then
// with one completed task.
type flakyTasks struct {
	flowv1connect.UnimplementedFlowHandler
	failures atomic.Int32
}

func (f *flakyTasks) GetTasksByIDs(_ context.Context, req *flowv1.GetTasksByIDsRequest) (*flowv1.GetTasksByIDsResponse, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("restarting"))
	}
	return &flowv1.GetTasksByIDsResponse{Tasks: []*flowv1.Task{{Id: req.GetTaskIds()[0], Status: flowv1.TaskStatus_TASK_STATUS_COMPLETED, Message: "Succeeded"}}}, nil
}

func TestCLITaskWatchRidesOutUnavailable(t *testing.T) {
	t.Parallel()
	h := &flakyTasks{}
	h.failures.Store(3)
	mux := http.NewServeMux()
	mux.Handle(flowv1connect.NewFlowHandler(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	env := map[string]string{"FLOW_SERVER": srv.URL}
	id := "00000000-0000-0000-0000-000000000001"
	out, errOut, err := flow(env, "task", "watch", id, "--interval", "5ms")
	require.NoError(t, err)
	require.Regexp(t, `^\d\d:\d\d:\d\d task `+id+` completed: Succeeded\n$`, out)
	// Each failed poll is reported at once, then the recovery.
	require.Equal(t, 3, strings.Count(errOut, "not answering (unavailable)"), errOut)
	require.Contains(t, errOut, "(1 of 30)")
	require.Contains(t, errOut, "answers again")

	h.failures.Store(maxFailedPolls + 1)
	_, _, err = flow(env, "task", "watch", id, "--interval", "1ms")
	require.ErrorContains(t, err, "gave up after 30 failed polls")
	require.ErrorContains(t, err, "unavailable: restarting")
	require.ErrorContains(t, err, "the task keeps running on the server\n  watch it:  flow --server "+srv.URL+" task watch "+id)
}

func TestHelpAndCompletion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--help"}, {"help"}, {"rack", "--help"}, {"rack", "list", "--help"}, {"help", "rack", "list"},
		{"task", "watch", "-h"}, {"power", "on", "--help"}, {"bringup", "--help"}, {"rack"},
	} {
		out, errOut, err := flow(nil, args...)
		require.NoError(t, err, "%v", args)
		require.Equal(t, 0, ExitCode(err))
		require.Contains(t, out, "Usage:", "%v: help on stdout", args)
		require.Empty(t, errOut, "%v", args)
	}
	out, _, _ := flow(nil, "rack", "list", "--help")
	require.Contains(t, out, "--server string")
	require.Contains(t, out, "-o, --output string")
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		out, _, err := flow(nil, "completion", shell)
		require.NoError(t, err, shell)
		require.Contains(t, out, "flow", shell)
		require.Greater(t, len(out), 1000, shell)
	}
	// Completion of verbs and of the -o values, no server needed.
	out, _, err := flow(nil, "__complete", "rack", "")
	require.NoError(t, err)
	for _, v := range []string{"create", "list", "get", "patch", "delete", "purge"} {
		require.Contains(t, out, v+"\t")
	}
	out, _, err = flow(nil, "__complete", "rack", "list", "-o", "")
	require.NoError(t, err)
	require.Contains(t, out, "yaml\n")
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"rack", "explode"}, "unknown rack verb \"explode\"\nRun 'flow rack --help' for usage."},
		{[]string{"rack", "lsit"}, "unknown rack verb \"lsit\" (did you mean list, set?)\nRun 'flow rack --help' for usage."},
		{[]string{"explode"}, "unknown command \"explode\" for \"flow\"\nRun 'flow --help' for usage."},
		{[]string{"rack", "list", "--explode"}, "unknown flag: --explode\nRun 'flow rack list --help' for usage."},
		{[]string{"rack", "list", "-o", "xml"}, "-o must be one of table, wide, json, yaml, csv, not \"xml\"\nRun 'flow rack list --help' for usage."},
		{[]string{"task", "list", "--status", "done"}, "--status: unknown status \"done\""},
		{[]string{"task", "list", "--since", "yesterday"}, "--since: want a duration such as 1h or an RFC 3339 time"},
		{[]string{"task", "list", "--operation", "power_on,firmware_upgrade"}, "--operation: unknown operation \"firmware_upgrade\" (want inject_expectation, power_on, force_power_on,"},
		{[]string{"component", "list", "--type", "compute,gpu"}, "--type: unknown component type \"gpu\" (want compute, nvswitch, powershelf, torswitch, ums, cdu)"},
		{[]string{"component", "validate", "--type", "computer"}, "--type: unknown component type \"computer\""},
		{[]string{"rollout", "list", "--status", "unknown"}, "--status: unknown status \"unknown\""},
		{[]string{"rule", "disassociate", "g1", "--type", "power_control", "--code", "upgrade"}, "--code: \"upgrade\" is not an operation code of power_control (want power_on,"},
		{[]string{"rule", "associations", "g1", "--type", "firmware_control", "--code", "firmware_upgrade"}, "--code: \"firmware_upgrade\" is not an operation code of firmware_control (want upgrade, downgrade, rollback)"},
		{[]string{"task", "get", "x"}, "task \"x\": want a task UUID or a prefix"},
	} {
		_, _, err := flow(nil, tt.args...)
		require.ErrorContains(t, err, tt.msg, "%v", tt.args)
		require.Equal(t, 2, ExitCode(err), "%v", tt.args)
		require.Equal(t, 1, strings.Count(strings.Split(err.Error(), "\nRun")[0], "\n")+1, "one line, then the hint")
	}
}

func TestParseTaskFilter(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f, err := parseTaskFilter("running,FAILED", "power_on", "90m", at)
	require.NoError(t, err)
	require.Equal(t, []flowv1.TaskStatus{flowv1.TaskStatus_TASK_STATUS_RUNNING, flowv1.TaskStatus_TASK_STATUS_FAILED}, f.statuses)
	require.Equal(t, []string{"power_on"}, f.operations)
	require.Equal(t, at.Add(-90*time.Minute), f.since)
	f, err = parseTaskFilter("", "", "2026-11-30T00:00:00Z", at)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), f.since)
	require.True(t, taskFilter{}.empty())
}

func TestMarshalYAML(t *testing.T) {
	t.Parallel()
	b, err := marshalYAML(&flowv1.Task{Id: &flowv1.UUID{Id: "t1"}, Operation: "power_on", Status: flowv1.TaskStatus_TASK_STATUS_RUNNING, Message: "123"})
	require.NoError(t, err)
	require.Equal(t, "id:\n  id: t1\noperation: power_on\nstatus: TASK_STATUS_RUNNING\nmessage: \"123\"\n", string(b))
}

// runningTasks answers GetTasksByIDs with a running task, after block
// (when set) lets it: a server that hangs.
type runningTasks struct {
	flowv1connect.UnimplementedFlowHandler
	block chan struct{}
	polls atomic.Int32
}

func (h *runningTasks) GetTasksByIDs(ctx context.Context, req *flowv1.GetTasksByIDsRequest) (*flowv1.GetTasksByIDsResponse, error) {
	h.polls.Add(1)
	if h.block != nil {
		select {
		case <-h.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &flowv1.GetTasksByIDsResponse{Tasks: []*flowv1.Task{{Id: req.GetTaskIds()[0], Status: flowv1.TaskStatus_TASK_STATUS_RUNNING, Message: "Running"}}}, nil
}

func serveFlow(t *testing.T, h flowv1connect.FlowHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(flowv1connect.NewFlowHandler(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// interruptAfter returns a context canceled, as by the user's Ctrl-C, once
// polls reaches n.
func interruptAfter(polls *atomic.Int32, n int32) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for polls.Load() < n {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	return ctx
}

func TestWatchInterrupted(t *testing.T) {
	t.Parallel()
	h := &runningTasks{}
	url := serveFlow(t, h)
	root := &cobra.Command{Use: "flow"}
	AddCommands(root, Options{Getenv: func(string) string { return "" }})
	ctx := interruptAfter(&h.polls, 3)
	id := "00000000-0000-0000-0000-000000000007"
	var out, errOut bytes.Buffer
	err := Execute(ctx, root, []string{"--server", url, "task", "watch", id, "--interval", "5ms"}, &out, &errOut)
	require.Equal(t, 130, ExitCode(err))
	require.EqualError(t, err, "interrupted: stopped watching; the task keeps running on the server\n"+
		"  watch it:  flow --server "+url+" task watch "+id+"\n"+
		"  cancel it: flow --server "+url+" task cancel "+id)
}

// TestWatchReportsHungServer: a server that stops answering is reported
// after one poll timeout, not after the HTTP client's minute.
func TestWatchReportsHungServer(t *testing.T) {
	old := pollTimeout
	pollTimeout = 100 * time.Millisecond
	t.Cleanup(func() { pollTimeout = old })
	h := &runningTasks{block: make(chan struct{})}
	url := serveFlow(t, h)
	t.Cleanup(func() { close(h.block) })
	id := "00000000-0000-0000-0000-000000000008"
	start := time.Now()
	_, errOut, err := flow(map[string]string{"FLOW_SERVER": url}, "task", "watch", id, "--interval", "10ms")
	require.ErrorContains(t, err, "gave up after 30 failed polls")
	require.ErrorContains(t, err, "deadline_exceeded")
	require.Less(t, time.Since(start), 30*time.Second)
	require.Contains(t, errOut, "not answering (deadline_exceeded); retrying every 10ms (1 of 30)")
	require.Equal(t, 30, strings.Count(errOut, "not answering"))
}
