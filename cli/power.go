package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/pflag"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
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

type powerSubmitFunc func(ctx context.Context, c *env, r powerRequest) (*flowv1.SubmitTaskResponse, error)

var powerNoun = noun{
	name:    "power",
	summary: "power operations on racks or components, one task per rack",
	verbs: []verb{
		powerVerb("on", "power on: power shelves, then NVSwitches, then compute trays (by the rule in force)", false,
			func(ctx context.Context, c *env, r powerRequest) (*flowv1.SubmitTaskResponse, error) {
				req := &flowv1.PowerOnRackRequest{TargetSpec: r.spec, Description: r.description,
					QueueOptions: r.queue, RuleId: r.ruleID, OverrideReadinessCheck: r.override}
				if r.dryRun {
					return nil, previewSubmission(ctx, c, &adminv1.PreviewSubmissionRequest{Request: &adminv1.PreviewSubmissionRequest_PowerOn{PowerOn: req}})
				}
				return c.client.PowerOnRack(ctx, req)
			}),
		powerVerb("off", "power off: compute trays, then NVSwitches, then power shelves (--force: forced power-off)", true,
			func(ctx context.Context, c *env, r powerRequest) (*flowv1.SubmitTaskResponse, error) {
				req := &flowv1.PowerOffRackRequest{TargetSpec: r.spec, Forced: r.forced, Description: r.description,
					QueueOptions: r.queue, RuleId: r.ruleID, OverrideReadinessCheck: r.override}
				if r.dryRun {
					return nil, previewSubmission(ctx, c, &adminv1.PreviewSubmissionRequest{Request: &adminv1.PreviewSubmissionRequest_PowerOff{PowerOff: req}})
				}
				return c.client.PowerOffRack(ctx, req)
			}),
		powerVerb("reset", "restart: power off in order, then on in reverse order (--force: forced restart)", true,
			func(ctx context.Context, c *env, r powerRequest) (*flowv1.SubmitTaskResponse, error) {
				req := &flowv1.PowerResetRackRequest{TargetSpec: r.spec, Forced: r.forced, Description: r.description,
					QueueOptions: r.queue, RuleId: r.ruleID, OverrideReadinessCheck: r.override}
				if r.dryRun {
					return nil, previewSubmission(ctx, c, &adminv1.PreviewSubmissionRequest{Request: &adminv1.PreviewSubmissionRequest_PowerReset{PowerReset: req}})
				}
				return c.client.PowerResetRack(ctx, req)
			}),
		powerVerb("cycle", "AC power cycle (cold reset) of the compute trays", false,
			func(ctx context.Context, c *env, r powerRequest) (*flowv1.SubmitTaskResponse, error) {
				req := &flowv1.ACPowerCycleRackRequest{TargetSpec: r.spec, Description: r.description,
					QueueOptions: r.queue, RuleId: r.ruleID, OverrideReadinessCheck: r.override}
				if r.dryRun {
					return nil, previewSubmission(ctx, c, &adminv1.PreviewSubmissionRequest{Request: &adminv1.PreviewSubmissionRequest_AcPowerCycle{AcPowerCycle: req}})
				}
				return c.client.ACPowerCycleRack(ctx, req)
			}),
	},
}

// powerVerb builds a power verb: a rack-operation verb with queueing,
// --override-readiness, --component and, when forceable, --force.
func powerVerb(name, summary string, forceable bool, submit powerSubmitFunc) verb {
	args := "RACK... | --component C... [--type T,...] [--queue [--queue-timeout D]] [--rule RULE] "
	if forceable {
		args += "[--force] "
	}
	args += "[--override-readiness] [--description D] [--wait]"
	args += " [--dry-run]"
	return rackOpVerb(name, args, summary, rackOpFlags{queue: true, override: true, components: true, dryRun: true},
		func(fs *pflag.FlagSet) rackOpSubmitFunc {
			force := new(bool)
			if forceable {
				force = fs.Bool("force", false, "forced operation")
			}
			return func(ctx context.Context, c *env, r rackOp) (*flowv1.SubmitTaskResponse, error) {
				return submit(ctx, c, powerRequest{rackOp: r, forced: *force})
			}
		})
}

// powerTargets builds the target spec: racks by name or UUID, optionally
// narrowed by type, or components by name or UUID.
func powerTargets(ctx context.Context, c *env, racks []string, comps []string, types string) (*flowv1.OperationTargetSpec, error) {
	switch {
	case len(racks) > 0 && len(comps) > 0:
		return nil, usageError{errors.New("give RACK... or --component, not both")}
	case len(comps) > 0:
		if types != "" {
			return nil, usageError{errors.New("--type narrows racks; it does not apply to --component")}
		}
		ts := make([]*flowv1.ComponentTarget, len(comps))
		for i, s := range comps {
			id, err := resolveComponent(ctx, c, s)
			if err != nil {
				return nil, err
			}
			ts[i] = &flowv1.ComponentTarget{Identifier: &flowv1.ComponentTarget_Id{Id: id}}
		}
		return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Components{Components: &flowv1.ComponentTargets{Targets: ts}}}, nil
	case len(racks) == 0:
		return nil, usageError{errors.New("want RACK... or --component C (names or UUIDs)")}
	}
	var filter []flowv1.ComponentType
	if types != "" {
		for _, s := range strings.Split(types, ",") {
			ct, ok := parseComponentType(s)
			if !ok {
				return nil, usageError{fmt.Errorf("--type: unknown component type %q (want compute, nvswitch, powershelf, torswitch, ums or cdu)", s)}
			}
			filter = append(filter, ct)
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
	if final || len(tasks) == 0 {
		return
	}
	// Tasks that wait (a conflict, a maintenance window, an approval) say
	// why, once per reason.
	var reasons []string
	count := map[string]int{}
	for _, t := range tasks {
		if t.GetStatus() != flowv1.TaskStatus_TASK_STATUS_WAITING {
			continue
		}
		if count[t.GetMessage()] == 0 {
			reasons = append(reasons, t.GetMessage())
		}
		count[t.GetMessage()]++
	}
	for _, m := range reasons {
		fmt.Fprintf(w, "waiting (%d of %d): %s\n", count[m], len(tasks), m)
	}
	printAwaitingApproval(w, tasks[0].GetMessage())
}

// awaitingApprovalRe reads the approval request a held task or run waits
// for from its message.
var awaitingApprovalRe = regexp.MustCompile(`awaiting approval of request ([0-9a-f-]{36}) \(plan hash ([0-9a-f]+)\)`)

// printAwaitingApproval says, when msg is a task's or run's message
// awaiting a second identity's approval, which request and how to approve
// it.
func printAwaitingApproval(w io.Writer, msg string) {
	if m := awaitingApprovalRe.FindStringSubmatch(msg); m != nil {
		fmt.Fprintf(w, "awaiting approval: request %s, plan hash %s (a second operator: flow approval approve %s --hash %s)\n", m[1], m[2], m[1], m[2])
	}
}
