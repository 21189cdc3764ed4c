package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/nicoflow/flow/cli"
)

// TestCLIConventions checks the kubectl-style conventions against a real
// server: global flags before and after the noun, -o yaml/-ojson/-o wide,
// names for every noun, the task list filters.
func TestCLIConventions(t *testing.T) {
	t.Parallel()
	e, b := setupTaskCLI(t)
	rack := e.addRack(t, 5, rackOptions{off: true})
	other := b.env["FLOW_SERVER"]
	// A bundle without FLOW_SERVER: the address comes from --server.
	nb := &cliBundle{env: map[string]string{}}

	t.Run("GlobalFlagsAnywhere", func(t *testing.T) {
		t.Parallel()
		// One rack, not the list: the other subtests add racks meanwhile.
		before := nb.mustFlow(t, "--server", other, "rack", "get", rack.Name)
		after := nb.mustFlow(t, "rack", "get", rack.Name, "--server", other)
		between := nb.mustFlow(t, "rack", "--server="+other, "get", rack.Name)
		require.Contains(t, before, rack.Name)
		require.Equal(t, before, after)
		require.Equal(t, before, between)
		require.Equal(t, nb.mustFlow(t, "-ojson", "--server", other, "rack", "get", rack.Name),
			nb.mustFlow(t, "rack", "get", rack.Name, "--server", other, "-o", "json"))
	})

	t.Run("Completion", func(t *testing.T) {
		t.Parallel()
		// Names come from the server; flags that name objects complete too.
		require.Contains(t, b.mustFlow(t, "__complete", "rack", "get", ""), rack.Name+"\n")
		require.Contains(t, b.mustFlow(t, "__complete", "power", "on", "demo-000"), rack.Name+"\n")
		require.Contains(t, b.mustFlow(t, "__complete", "task", "list", "--rack", ""), rack.Name+"\n")
		require.Contains(t, b.mustFlow(t, "__complete", "component", "get", rack.Name+"-ct-0"), rack.Name+"-ct-00\n")
		require.Contains(t, b.mustFlow(t, "__complete", "task", "list", "--status", ""), "running\n")
		// No server: no names, and no error.
		out, _, err := nb.flow("__complete", "--server", "127.0.0.1:1", "rack", "get", "")
		require.NoError(t, err)
		require.Equal(t, ":4\n", strings.SplitAfter(out, "\n")[0], "directive only: no file completion")
	})

	t.Run("Outputs", func(t *testing.T) {
		t.Parallel()
		var j struct {
			Rack struct{ Info struct{ Name string } }
		}
		require.NoError(t, json.Unmarshal([]byte(b.mustFlow(t, "rack", "get", rack.Name, "-ojson")), &j))
		require.Equal(t, rack.Name, j.Rack.Info.Name)
		var y struct {
			Rack struct {
				Info struct{ Name string }
			}
		}
		out := b.mustFlow(t, "rack", "get", rack.Name, "-o", "yaml")
		require.NoError(t, yaml.Unmarshal([]byte(out), &y))
		require.Equal(t, rack.Name, y.Rack.Info.Name)
		require.True(t, strings.HasPrefix(out, "rack:\n  info:\n    id:\n"), out)

		table := b.mustFlow(t, "component", "list", "--rack", rack.Name, "--limit", "1")
		require.Regexp(t, `\s+RACK\n`, strings.SplitAfter(table, "\n")[0])
		require.Contains(t, table, rack.Name, "components name their rack")
		require.NotContains(t, table, rack.ID.String(), "not its UUID")
		wide := b.mustFlow(t, "component", "list", "--rack", rack.Name, "--limit", "1", "-o", "wide")
		require.Contains(t, wide, rack.ID.String(), "-o wide adds the UUIDs")
		require.Contains(t, b.mustFlow(t, "rack", "list", "-o", "wide"), "EXTERNAL ID")
	})

	t.Run("NamesForEveryNoun", func(t *testing.T) {
		t.Parallel()
		r := e.addRack(t, 6, rackOptions{off: true})
		comp := r.Components[0]
		require.Contains(t, b.mustFlow(t, "rack", "get", r.Name), r.ID.String())
		require.Contains(t, b.mustFlow(t, "component", "get", comp.Name), comp.SerialNumber)
		rule := slowRule(t, b, "1ms")
		ruleName := "slow 1ms"
		require.Contains(t, b.mustFlow(t, "rule", "get", ruleName), rule)
		require.Contains(t, b.mustFlow(t, "rule", "associate", r.Name, ruleName), "rack "+r.Name+" ("+r.ID.String()+") now uses rule \"slow 1ms\" ("+rule+")")
		out := b.mustFlow(t, "power", "on", r.Name, "--rule", ruleName, "--wait", "--interval", "20ms")
		id := strings.Fields(strings.Split(out, "\n")[1])[0]
		require.Contains(t, b.mustFlow(t, "task", "get", id[:8]), "ID             "+id, "a task by a UUID prefix")
		require.Contains(t, b.mustFlow(t, "task", "list", "--component", comp.Name), id)
		out = b.mustFlow(t, "power", "off", "--component", comp.Name, "--wait", "--interval", "20ms")
		require.Contains(t, out, "completed")
		require.Contains(t, b.mustFlow(t, "nvl-domain", "create", "names"), "-")
		require.Contains(t, b.mustFlow(t, "nvl-domain", "attach", "names", r.Name), "attached 1 rack(s) to names")

		// A name two racks share is an error naming both.
		twin := e.addRack(t, 7, rackOptions{off: true})
		b.mustFlow(t, "rack", "patch", twin.ID.String(), "--name", r.Name)
		_, _, err := b.flow("rack", "get", r.Name)
		require.ErrorContains(t, err, `2 racks are named "`+r.Name+`"`)
		require.ErrorContains(t, err, r.ID.String())
		require.ErrorContains(t, err, twin.ID.String())
	})

	t.Run("TaskListFilters", func(t *testing.T) {
		t.Parallel()
		r := e.addRack(t, 8, rackOptions{off: true})
		b.mustFlow(t, "power", "on", r.Name, "--wait", "--interval", "20ms")
		out := b.mustFlow(t, "task", "list", "--rack", r.Name, "--status", "completed", "--operation", "power_on", "--since", "1h")
		require.Contains(t, out, "(1 of 1 tasks)")
		require.Contains(t, b.mustFlow(t, "task", "list", "--rack", r.Name, "--status", "failed,running"), "(0 of 0 tasks)")
		require.Contains(t, b.mustFlow(t, "task", "list", "--rack", r.Name, "--operation", "power_off"), "(0 of 0 tasks)")
		// An unknown operation is refused with the valid ones, not an
		// empty list.
		_, _, err := b.flow("task", "list", "--rack", r.Name, "--operation", "firmware_upgrade")
		require.ErrorContains(t, err, `--operation: unknown operation "firmware_upgrade" (want inject_expectation, power_on,`)
		require.ErrorContains(t, err, "upgrade, downgrade, rollback")
		require.Equal(t, 2, cli.ExitCode(err))
		require.Contains(t, b.mustFlow(t, "task", "list", "--rack", r.Name, "--since", "2099-01-01T00:00:00Z"), "(0 of 0 tasks)")
		var res struct{ Tasks []jsonTask }
		require.NoError(t, json.Unmarshal([]byte(b.mustFlow(t, "task", "list", "--status", "completed", "-o", "json")), &res))
		for _, task := range res.Tasks {
			require.Equal(t, "TASK_STATUS_COMPLETED", task.Status)
		}
	})
}
