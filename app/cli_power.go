package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CLI noun of power operations: power. Each verb submits one task per rack
// (spec/execution.md §2) and prints the task IDs; --wait follows them to the
// end.

// powerRequest holds what the power verbs' flags and arguments say: the
// common rack-operation flags plus --force; submit turns it into the RPC of
// the verb.
type powerRequest struct {
	rackOp
	forced bool
}

type powerSubmitFunc func(ctx context.Context, c *cliEnv, r powerRequest) (*flowv1.SubmitTaskResponse, error)

var powerNoun = cliNoun{
	name:    "power",
	summary: "power operations on racks or components, one task per rack",
	verbs: []cliVerb{
		powerVerb("on", "power on: power shelves, then NVSwitches, then compute trays (by the rule in force)", false,
			func(ctx context.Context, c *cliEnv, r powerRequest) (*flowv1.SubmitTaskResponse, error) {
				return c.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: r.spec, Description: r.description,
					QueueOptions: r.queue, RuleId: r.ruleID, OverrideReadinessCheck: r.override})
			}),
		powerVerb("off", "power off: compute trays, then NVSwitches, then power shelves (--force: forced power-off)", true,
			func(ctx context.Context, c *cliEnv, r powerRequest) (*flowv1.SubmitTaskResponse, error) {
				return c.client.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: r.spec, Forced: r.forced, Description: r.description,
					QueueOptions: r.queue, RuleId: r.ruleID, OverrideReadinessCheck: r.override})
			}),
		powerVerb("reset", "restart: power off in order, then on in reverse order (--force: forced restart)", true,
			func(ctx context.Context, c *cliEnv, r powerRequest) (*flowv1.SubmitTaskResponse, error) {
				return c.client.PowerResetRack(ctx, &flowv1.PowerResetRackRequest{TargetSpec: r.spec, Forced: r.forced, Description: r.description,
					QueueOptions: r.queue, RuleId: r.ruleID, OverrideReadinessCheck: r.override})
			}),
		powerVerb("cycle", "AC power cycle (cold reset) of the compute trays", false,
			func(ctx context.Context, c *cliEnv, r powerRequest) (*flowv1.SubmitTaskResponse, error) {
				return c.client.ACPowerCycleRack(ctx, &flowv1.ACPowerCycleRackRequest{TargetSpec: r.spec, Description: r.description,
					QueueOptions: r.queue, RuleId: r.ruleID, OverrideReadinessCheck: r.override})
			}),
	},
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// powerVerb builds a power verb: a rack-operation verb with queueing,
// --override-readiness, --component and, when forceable, --force.
func powerVerb(name, summary string, forceable bool, submit powerSubmitFunc) cliVerb {
	args := "RACK... | --component ID... [--type T,...] [--queue [--queue-timeout D]] [--rule ID] "
	if forceable {
		args += "[--force] "
	}
	args += "[--override-readiness] [--description D] [--wait]"
	return rackOpVerb(name, args, summary, rackOpFlags{queue: true, override: true, components: true},
		func(fs *flag.FlagSet) rackOpSubmitFunc {
			force := new(bool)
			if forceable {
				force = fs.Bool("force", false, "forced operation")
			}
			return func(ctx context.Context, c *cliEnv, r rackOp) (*flowv1.SubmitTaskResponse, error) {
				return submit(ctx, c, powerRequest{rackOp: r, forced: *force})
			}
		})
}

// powerTargets builds the target spec: racks by name or UUID, optionally
// narrowed by type, or components by UUID.
func powerTargets(racks []string, comps []string, types string) (*flowv1.OperationTargetSpec, error) {
	switch {
	case len(racks) > 0 && len(comps) > 0:
		return nil, usageError{errors.New("give RACK... or --component, not both")}
	case len(comps) > 0:
		if types != "" {
			return nil, usageError{errors.New("--type narrows racks; it does not apply to --component")}
		}
		ts := make([]*flowv1.ComponentTarget, len(comps))
		for i, s := range comps {
			id, err := uuidValue("--component", s)
			if err != nil {
				return nil, err
			}
			ts[i] = &flowv1.ComponentTarget{Identifier: &flowv1.ComponentTarget_Id{Id: id}}
		}
		return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Components{Components: &flowv1.ComponentTargets{Targets: ts}}}, nil
	case len(racks) == 0:
		return nil, usageError{errors.New("want RACK... (names or UUIDs) or --component ID")}
	}
	var filter []flowv1.ComponentType
	if types != "" {
		for _, s := range strings.Split(types, ",") {
			ct, ok := operations.ParseComponentType(strings.TrimSpace(s))
			if !ok {
				return nil, usageError{fmt.Errorf("--type: unknown component type %q (want compute, nvswitch, powershelf, torswitch, ums or cdu)", s)}
			}
			filter = append(filter, flowv1.ComponentType(flowv1.ComponentType_value["COMPONENT_TYPE_"+strings.ToUpper(string(ct))]))
		}
	}
	ts := make([]*flowv1.RackTarget, len(racks))
	for i, s := range racks {
		ts[i] = &flowv1.RackTarget{Identifier: &flowv1.RackTarget_Name{Name: s}, ComponentTypes: filter}
		if _, err := uuid.Parse(s); err == nil {
			ts[i].Identifier = &flowv1.RackTarget_Id{Id: &flowv1.UUID{Id: s}}
		}
	}
	return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: ts}}}, nil
}

// printSubmitted prints the tasks of a request, with their status and
// message when final.
func printSubmitted(w io.Writer, tasks []*flowv1.Task, names map[string]string, final bool) {
	headers := []string{"TASK", "RACK"}
	if final {
		headers = append(headers, "STATUS", "MESSAGE")
	}
	rows := make([][]string, len(tasks))
	for i, t := range tasks {
		rows[i] = []string{t.GetId().GetId(), rackLabel(names, t.GetRackId().GetId())}
		if final {
			rows[i] = append(rows[i], statusName(t.GetStatus()), t.GetMessage())
		}
	}
	printTable(w, headers, rows)
}

// waitTasks follows submitted tasks to their end. The table output shows
// the tasks, their progress (redrawn on a terminal, a line per change
// elsewhere) and the outcome; -o json prints only the final tasks. It
// returns a taskEndError unless every task completed.
func waitTasks(ctx context.Context, c *cliEnv, ids []*flowv1.UUID, interval time.Duration) error {
	var view taskView
	var names map[string]string
	if !c.json {
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
	if !c.json {
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
