package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/cli"
)

// setupTaskCLI starts a Flow server and returns a CLI bundle pointed at
// it.
func setupTaskCLI(t *testing.T) (*server, *cliBundle) {
	t.Helper()
	s := startServer(t, nil)
	return s, s.bundle()
}

// slowRule is a power_on rule whose stages each sleep for sleep after
// powering their components.
func slowRule(t *testing.T, b *cliBundle, sleep string) string {
	t.Helper()
	var steps strings.Builder
	for i, ct := range []string{"PowerShelf", "NVSwitch", "Compute"} {
		steps.WriteString("  - {component_type: " + ct + ", stage: " + string(rune('1'+i)) +
			", main_operation: {name: PowerControl}, post_operation: [{name: Sleep, parameters: {duration: " + sleep + "}}]}\n")
	}
	file := writeFile(t, "slow.yaml", "name: slow "+sleep+"\noperation_type: power_control\noperation_code: power_on\n"+
		"rule_definition:\n  steps:\n"+steps.String())
	return b.mustFlow(t, "rule", "create", "-f", file)
}

// jsonTask is the part of a protojson Task the tests read.
type jsonTask struct {
	ID      struct{ ID string }
	RackID  struct{ ID string } `json:"rackId"`
	Status  string
	Message string
	Report  string

	ComponentUUIDs []struct{ ID string } `json:"componentUuids"`
}

func TestCLIPower(t *testing.T) {
	t.Parallel()
	e, b := setupTaskCLI(t)
	rack := e.addRack(t, 7, rackOptions{off: true})

	out := b.mustFlow(t, "power", "on", rack.Name, "--wait", "--interval", "20ms", "--description", "cli test")
	lines := strings.Split(out, "\n")
	require.Regexp(t, `^TASK\s+RACK$`, lines[0])
	require.Regexp(t, `^[0-9a-f-]{36}\s+demo-0007$`, lines[1])
	id := strings.Fields(lines[1])[0]
	require.Contains(t, out, "demo-0007: stage 1/3 completed")
	require.Contains(t, out, "demo-0007:   stage 3 Compute completed 18/18")
	require.Contains(t, out, "demo-0007: task "+id+" completed: Succeeded\n\nTASK")
	require.Regexp(t, id+`\s+demo-0007\s+completed\s+Succeeded$`, lines[len(lines)-1])

	t.Run("ListTable", func(t *testing.T) {
		t.Parallel()
		out := b.mustFlow(t, "task", "list")
		// Unfiltered: TypeFilterForce may have added a task on another rack.
		require.Regexp(t, `^TASK\s+OPERATION\s+RACK\s+STATUS\s+MESSAGE\s+CREATED\n(.*\n)?`+id+`\s+power_on\s+demo-0007\s+completed\s+Succeeded\s+\d{4}-`, out)
		out = b.mustFlow(t, "task", "list", "--rack", rack.Name, "--report")
		require.Regexp(t, `completed\s+Succeeded\s+\S+\s+stage 3/3: 18/18 done \(35 components\)\n\(1 of 1 tasks\)$`, out)
		require.Contains(t, b.mustFlow(t, "task", "list", "--rack", rack.Name, "--active"), "(0 of 0 tasks)")
		var res struct{ Tasks []jsonTask }
		require.NoError(t, json.Unmarshal([]byte(b.mustFlow(t, "task", "get", id, "-o", "json")), &res))
		require.Contains(t, b.mustFlow(t, "task", "list", "--component", res.Tasks[0].ComponentUUIDs[0].ID), id)
		require.Contains(t, b.mustFlow(t, "task", "list", "--rack", rack.ID.String(), "--limit", "1", "--offset", "1"), "(0 of 1 tasks)")
	})

	t.Run("ListJSON", func(t *testing.T) {
		t.Parallel()
		var res struct {
			Tasks []jsonTask
			Total int
		}
		require.NoError(t, json.Unmarshal([]byte(b.mustFlow(t, "task", "list", "--rack", rack.Name, "-o", "json")), &res))
		require.Equal(t, 1, res.Total)
		require.Equal(t, id, res.Tasks[0].ID.ID)
		require.Equal(t, "TASK_STATUS_COMPLETED", res.Tasks[0].Status)
		require.Empty(t, res.Tasks[0].Report, "no report without --report")
		require.NoError(t, json.Unmarshal([]byte(b.mustFlow(t, "task", "list", "--rack", rack.Name, "--report", "-o", "json")), &res))
		require.Contains(t, res.Tasks[0].Report, `"stages"`)
	})

	t.Run("GetTable", func(t *testing.T) {
		t.Parallel()
		out := b.mustFlow(t, "task", "get", id)
		for _, want := range []string{
			"ID             " + id,
			"OPERATION      power_on",
			"RACK           demo-0007 (" + rack.ID.String() + ")",
			"STATUS         completed",
			"MESSAGE        Succeeded",
			"DESCRIPTION    cli test",
			"RULE           built-in",
			"COMPONENTS     35",
			"STARTED        ",
			"FINISHED       ",
			"steps: 3 completed, 0 failed, 3 total; components targeted: 35",
		} {
			require.Contains(t, out, want)
		}
		require.Regexp(t, `STAGE\s+STEP\s+STATUS\s+COMPLETED\s+FAILED\s+RUNNING\s+TOTAL\s+STARTED\s+FINISHED\s+ERROR\n`+
			`1 completed\s+PowerShelf\s+completed\s+8\s+0\s+0\s+8\s+\d\d:\d\d:\d\d\s+\d\d:\d\d:\d\d\s+-\n`+
			`2 completed\s+NVSwitch\s+completed\s+9\s+0\s+0\s+9\s+`, out)
	})

	t.Run("GetJSON", func(t *testing.T) {
		t.Parallel()
		var res struct{ Tasks []jsonTask }
		require.NoError(t, json.Unmarshal([]byte(b.mustFlow(t, "task", "get", id, "-o", "json")), &res))
		require.Len(t, res.Tasks, 1)
		require.Equal(t, rack.ID.String(), res.Tasks[0].RackID.ID)
		require.Equal(t, "Succeeded", res.Tasks[0].Message)
		require.Contains(t, res.Tasks[0].Report, `"status":"completed"`)
	})

	t.Run("WatchFinished", func(t *testing.T) {
		t.Parallel()
		out := b.mustFlow(t, "task", "watch", id)
		require.True(t, strings.HasPrefix(out, "stage 1/3 completed 8/8\n  stage 1 PowerShelf completed 8/8\n"), out)
		require.True(t, strings.HasSuffix(out, "\ntask "+id+" completed: Succeeded"), out)
		require.NotContains(t, out, "\x1b[", "no cursor movement off a terminal")
	})

	t.Run("CancelFinished", func(t *testing.T) {
		t.Parallel()
		requireFlowError(t, b, "failed_precondition: ", "task", "cancel", id)
	})

	t.Run("TypeFilterForce", func(t *testing.T) {
		t.Parallel()
		other := e.addRack(t, 9, rackOptions{})
		var res struct{ TaskIDs []struct{ ID string } }
		require.NoError(t, json.Unmarshal([]byte(b.mustFlow(t, "power", "off", other.ID.String(), "--type", "compute,NVSwitch", "--force", "-o", "json")), &res))
		require.Len(t, res.TaskIDs, 1)
		tid := res.TaskIDs[0].ID
		out := b.mustFlow(t, "task", "get", tid)
		require.Contains(t, out, "OPERATION      force_power_off")
		require.Contains(t, out, "COMPONENTS     27")
		require.Regexp(t, `\s+PowerShelf\s+skipped\s+0\s+0\s+0\s`, out)
		require.Contains(t, b.mustFlow(t, "task", "cancel", tid), "terminated: Cancelled by user")
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		requireFlowError(t, b, "not_found: ", "power", "on", "no-such-rack")
		requireFlowError(t, b, `not_found: no rack is named "no-such-rack"`, "task", "list", "--rack", "no-such-rack")
		requireFlowError(t, b, "not_found: ", "task", "get", "00000000-0000-0000-0000-000000000001")
		requireFlowError(t, b, `task "x": want a task UUID or a prefix of at least 4`, "task", "get", id, "x")
		requireFlowError(t, b, `task "x": want a task UUID or a prefix of at least 4`, "task", "watch", "x")
		requireFlowError(t, b, `not_found: no task ID starts with "ffff"`, "task", "watch", "ffff")
		requireFlowError(t, b, `not_found: no component is named "x"`, "power", "cycle", "--component", "x")
		requireFlowError(t, b, `not_found: no component is named "x"`, "task", "list", "--component", "x")
		requireFlowError(t, b, `not_found: no rule is named "x"`, "power", "on", rack.Name, "--rule", "x")
		requireFlowError(t, b, `--type: unknown component type "gpu"`, "power", "on", rack.Name, "--type", "gpu")
		requireFlowError(t, b, "want RACK...", "power", "on")
		requireFlowError(t, b, "not both", "power", "on", rack.Name, "--component", "00000000-0000-0000-0000-000000000001")
		requireFlowError(t, b, "--queue-timeout needs --queue", "power", "on", rack.Name, "--queue-timeout", "30m")
		requireFlowError(t, b, "unknown flag: --force", "power", "on", rack.Name, "--force")
		_, _, err := b.flow("power", "on")
		require.Equal(t, 2, cli.ExitCode(err), "usage errors exit 2")
	})
}

func TestCLITaskWatchQueueCancel(t *testing.T) {
	t.Parallel()
	e, b := setupTaskCLI(t)

	t.Run("Watch", func(t *testing.T) {
		t.Parallel()
		rack := e.addRack(t, 1, rackOptions{off: true})
		rule := slowRule(t, b, "300ms")
		out := b.mustFlow(t, "power", "on", rack.Name, "--rule", rule)
		id := strings.Fields(strings.Split(out, "\n")[1])[0]
		out = b.mustFlow(t, "task", "watch", id, "--interval", "20ms")
		lines := strings.Split(out, "\n")
		// Every stage is seen running, then completed, in rule order.
		var stageLines []string
		for _, l := range lines {
			// "stage 2/3 running 3/9, 6 running": the stage and its status.
			if f := strings.Fields(l); strings.HasPrefix(l, "stage ") && len(f) >= 3 && f[2] != "pending" {
				stageLines = append(stageLines, strings.Join(f[:3], " "))
			}
		}
		require.Equal(t, []string{
			"stage 1/3 running", "stage 1/3 completed",
			"stage 2/3 running", "stage 2/3 completed",
			"stage 3/3 running", "stage 3/3 completed",
		}, dedupe(stageLines), out)
		require.Regexp(t, `\n  stage 3 Compute running \d+/18(: .+)?\n`, out)
		require.Equal(t, "task "+id+" completed: Succeeded", lines[len(lines)-1])
		require.Contains(t, b.mustFlow(t, "task", "get", id), "RULE           slow 300ms ("+rule+")")
	})

	t.Run("QueueAndCancel", func(t *testing.T) {
		t.Parallel()
		rack := e.addRack(t, 2, rackOptions{off: true})
		rule := slowRule(t, b, "1m")
		done := make(chan error, 1)
		var waitOut string
		go func() {
			var err error
			waitOut, _, err = b.flowUnstamped("power", "on", rack.Name, "--rule", rule, "--wait", "--interval", "20ms")
			done <- err
		}()
		var first string
		require.Eventually(t, func() bool {
			var res struct{ Tasks []jsonTask }
			out, _, err := b.flow("task", "list", "--rack", rack.Name, "-o", "json")
			if err != nil || json.Unmarshal([]byte(out), &res) != nil || len(res.Tasks) == 0 {
				return false
			}
			first = res.Tasks[0].ID.ID
			return res.Tasks[0].Status == "TASK_STATUS_RUNNING"
		}, 30*time.Second, 20*time.Millisecond)

		// A conflicting request is rejected, or queued with --queue.
		requireFlowError(t, b, "failed_precondition: rack already has a conflicting task: rack demo-0002: task "+first, "power", "on", rack.Name)
		out := b.mustFlow(t, "power", "on", rack.Name, "--queue", "--queue-timeout", "30m")
		queued := strings.Fields(strings.Split(out, "\n")[1])[0]
		out = b.mustFlow(t, "task", "list", "--active")
		require.Regexp(t, queued+`\s+power_on\s+demo-0002\s+waiting\s+Queued: waiting for rack to become available`, out)
		require.Regexp(t, first+`\s+power_on\s+demo-0002\s+running\s+Running`, out)
		require.Regexp(t, `QUEUE EXPIRES\s+\d{4}-`, b.mustFlow(t, "task", "get", queued))

		require.Equal(t, "task "+queued+" terminated: Cancelled by user", b.mustFlow(t, "task", "cancel", queued))
		require.Equal(t, "task "+first+" terminated: Cancelled by user", b.mustFlow(t, "task", "cancel", first))
		require.Equal(t, "task "+first+" terminated: Cancelled by user", b.mustFlow(t, "task", "cancel", first), "idempotent")

		select {
		case err := <-done:
			require.EqualError(t, err, "1 of 1 tasks did not complete")
			require.Equal(t, 1, cli.ExitCode(err))
		case <-time.After(30 * time.Second):
			t.Fatal("power on --wait did not return after the cancel")
		}
		require.Regexp(t, `\ndemo-0002:   stage 1 PowerShelf running \d/8(: .+)?\n`, waitOut)
		require.Contains(t, waitOut, "\ndemo-0002: task "+first+" terminated: Cancelled by user\n")
		require.Regexp(t, first+`\s+demo-0002\s+terminated\s+Cancelled by user\n$`, waitOut)

		_, _, err := b.flow("task", "watch", first)
		require.EqualError(t, err, "task "+first+" terminated: Cancelled by user")
		var res struct{ Task jsonTask }
		require.NoError(t, json.Unmarshal([]byte(b.mustFlow(t, "task", "cancel", first, "-o", "json")), &res))
		require.Equal(t, "TASK_STATUS_TERMINATED", res.Task.Status)
	})
}

// dedupe drops consecutive repeats.
func dedupe(ss []string) []string {
	var out []string
	for _, s := range ss {
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}
