package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CLI noun of task schedules: schedule (docs/schedules.md). Schedules are
// named by name or UUID; times print in the operator's local time.

var scheduleNoun = noun{
	name:     "schedule",
	aliases:  []string{"schedules"},
	summary:  "task schedules: recurring and one-time operations on racks",
	subnouns: []noun{scheduleScopeNoun},
	verbs: []verb{
		{name: "create", args: "NAME (--every D | --cron EXPR [--tz ZONE] | --at TIME) [--op OP] [--force] [--version V] [--queue] RACK... | --component C... [--type T,...]",
			summary: "create a schedule; OP is power-on (default), power-off, power-reset, bring-up, ingest or firmware-upgrade",
			flags: func(fs *pflag.FlagSet) runFunc {
				spec := specFlags(fs)
				op := opFlags(fs)
				queue := fs.Bool("queue", false, "overlap policy queue: park a rack's task behind its still-running previous one (default: skip that rack)")
				return func(ctx context.Context, c *env, args []string) error {
					if len(args) == 0 {
						return usageError{errors.New("want NAME, then RACK... or --component C")}
					}
					sp, err := spec(true)
					if err != nil {
						return err
					}
					operation, err := op(ctx, c, args[1:])
					if err != nil {
						return err
					}
					cfg := &flowv1.ScheduleConfig{Name: args[0], Spec: sp}
					if *queue {
						cfg.OverlapPolicy = flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE
					}
					res, err := c.client.CreateTaskSchedule(ctx, &flowv1.CreateTaskScheduleRequest{Schedule: cfg, Operation: operation})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printSchedules(w, []*flowv1.TaskSchedule{res}, c.wide()) })
				}
			}},
		{name: "list", args: "[--rack R] [--enabled]", summary: "list schedules, oldest first, with next and last run in local time",
			flags: func(fs *pflag.FlagSet) runFunc {
				rack := fs.String("rack", "", "only schedules with this rack in scope (UUID or name)")
				enabled := fs.Bool("enabled", false, "only enabled (not paused) schedules")
				page := pageFlags(fs)
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					req := &flowv1.ListTaskSchedulesRequest{Pagination: page()}
					if *enabled {
						req.EnabledOnly = ptr(true)
					}
					if *rack != "" {
						id, err := resolveRack(ctx, c, *rack)
						if err != nil {
							return err
						}
						req.RackId = id
					}
					res, err := c.client.ListTaskSchedules(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printSchedules(w, res.GetTaskSchedules(), c.wide()) })
				}
			}},
		{name: "get", args: "SCHEDULE", summary: "show a schedule and its scope",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					id, err := scheduleArg(ctx, c, args)
					if err != nil {
						return err
					}
					s, err := c.client.GetTaskSchedule(ctx, &flowv1.GetTaskScheduleRequest{Id: id})
					if err != nil {
						return err
					}
					scopes, err := c.client.ListTaskScheduleScopes(ctx, &flowv1.ListTaskScheduleScopesRequest{ScheduleId: id})
					if err != nil {
						return err
					}
					return c.emit(s, func(w io.Writer) {
						printSchedules(w, []*flowv1.TaskSchedule{s}, true)
						fmt.Fprintln(w)
						printScopes(w, scopes.GetScopes(), rackNamesOfScopes(ctx, c, scopes.GetScopes()))
					})
				}
			}},
		{name: "update", args: "SCHEDULE [--name N] [--every D | --cron EXPR | --at TIME] [--tz ZONE] [--overlap skip|queue]", summary: "change a schedule's name, timing, timezone or overlap policy",
			flags: func(fs *pflag.FlagSet) runFunc {
				name := fs.String("name", "", "new name")
				spec := specFlags(fs)
				overlap := fs.String("overlap", "", "skip or queue")
				return func(ctx context.Context, c *env, args []string) error {
					id, err := scheduleArg(ctx, c, args)
					if err != nil {
						return err
					}
					set := flagsSet(fs)
					cfg := &flowv1.ScheduleConfig{Name: *name}
					var paths []string
					if set["name"] {
						paths = append(paths, "schedule.name")
					}
					sp, err := spec(false)
					if err != nil {
						return err
					}
					if sp != nil {
						cfg.Spec = sp
						if sp.GetType() != flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_UNSPECIFIED {
							paths = append(paths, "schedule.spec")
						}
						if set["tz"] {
							paths = append(paths, "schedule.spec.timezone")
						}
					}
					if set["overlap"] {
						switch *overlap {
						case "skip":
							cfg.OverlapPolicy = flowv1.OverlapPolicy_OVERLAP_POLICY_SKIP
						case "queue":
							cfg.OverlapPolicy = flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE
						default:
							return usageError{fmt.Errorf("--overlap: want skip or queue, not %q", *overlap)}
						}
						paths = append(paths, "schedule.overlap_policy")
					}
					if len(paths) == 0 {
						return usageError{errors.New("nothing to change: give --name, --every, --cron, --at, --tz or --overlap")}
					}
					res, err := c.client.UpdateTaskSchedule(ctx, &flowv1.UpdateTaskScheduleRequest{Id: id, Schedule: cfg, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printSchedules(w, []*flowv1.TaskSchedule{res}, c.wide()) })
				}
			}},
		scheduleVerb("pause", "pause a schedule (it keeps its scope; resume restarts it)", func(ctx context.Context, c *env, id *flowv1.UUID) (*flowv1.TaskSchedule, error) {
			return c.client.PauseTaskSchedule(ctx, &flowv1.PauseTaskScheduleRequest{Id: id})
		}),
		scheduleVerb("resume", "resume a paused schedule; its next run is counted from now, so it does not fire at once", func(ctx context.Context, c *env, id *flowv1.UUID) (*flowv1.TaskSchedule, error) {
			return c.client.ResumeTaskSchedule(ctx, &flowv1.ResumeTaskScheduleRequest{Id: id})
		}),
		{name: "delete", args: "SCHEDULE", summary: "delete a schedule and its scope (tasks already submitted keep running)",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					id, err := scheduleArg(ctx, c, args)
					if err != nil {
						return err
					}
					res, err := c.client.DeleteTaskSchedule(ctx, &flowv1.DeleteTaskScheduleRequest{Id: id})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "deleted schedule %s\n", id.GetId()) })
				}
			}},
		{name: "trigger", args: "SCHEDULE", summary: "fire a schedule now, every rack in scope; prints the task IDs",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					id, err := scheduleArg(ctx, c, args)
					if err != nil {
						return err
					}
					res, err := c.client.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: id})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						for _, t := range res.GetTaskIds() {
							fmt.Fprintln(w, t.GetId())
						}
					})
				}
			}},
		{name: "conflicts", args: "[--op OP] [--exclude SCHEDULE] RACK... | --component C...", summary: "list enabled schedules whose operation may conflict with OP on these racks (advisory)",
			flags: func(fs *pflag.FlagSet) runFunc {
				op := opFlags(fs)
				exclude := fs.String("exclude", "", "leave this schedule out (name or UUID)")
				return func(ctx context.Context, c *env, args []string) error {
					operation, err := op(ctx, c, args)
					if err != nil {
						return err
					}
					req := &flowv1.CheckScheduleConflictsRequest{Operation: operation}
					if *exclude != "" {
						if req.ExcludeScheduleId, err = resolveSchedule(ctx, c, *exclude); err != nil {
							return err
						}
					}
					res, err := c.client.CheckScheduleConflicts(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						if len(res.GetConflicts()) == 0 {
							fmt.Fprintln(w, "no conflicting schedules")
							return
						}
						printSchedules(w, res.GetConflicts(), c.wide())
					})
				}
			}},
	},
}

// specFlags declares --every, --cron, --tz and --at; the returned function
// builds the spec (required: one of the three is needed; otherwise nil when
// none is given, or a timezone-only spec for --tz alone).
func specFlags(fs *pflag.FlagSet) func(required bool) (*flowv1.ScheduleSpec, error) {
	every := fs.String("every", "", "interval, a Go duration such as 30m or 6h")
	cron := fs.String("cron", "", "5-field cron line such as '0 2 * * *', or @daily, @hourly")
	tz := fs.String("tz", "", "IANA timezone of --cron, e.g. Europe/Berlin (default UTC)")
	at := fs.String("at", "", "one-time, RFC 3339 with an offset, e.g. 2026-12-24T02:00:00+01:00")
	return func(required bool) (*flowv1.ScheduleSpec, error) {
		n := 0
		sp := &flowv1.ScheduleSpec{Timezone: *tz}
		for _, f := range []struct {
			v string
			t flowv1.ScheduleSpecType
		}{{*every, 1}, {*cron, 2}, {*at, 3}} {
			if f.v != "" {
				n++
				sp.Type, sp.Spec = f.t, f.v
			}
		}
		switch {
		case n > 1:
			return nil, usageError{errors.New("give one of --every, --cron or --at")}
		case n == 0 && required:
			return nil, usageError{errors.New("want --every D, --cron EXPR or --at TIME")}
		case n == 0 && *tz == "":
			return nil, nil
		}
		return sp, nil
	}
}

// opFlags declares --op, --force, --version, --component and --type; the
// returned function builds the operation from them and the RACK arguments.
func opFlags(fs *pflag.FlagSet) func(ctx context.Context, c *env, racks []string) (*flowv1.ScheduledOperation, error) {
	op := fs.String("op", "power-on", "power-on, power-off, power-reset, bring-up, ingest or firmware-upgrade")
	force := fs.Bool("force", false, "forced power-off or reset")
	version := fs.String("version", "", "firmware-upgrade: target version")
	comps := fs.StringSlice("component", nil, "components instead of racks (names or UUIDs)")
	types := fs.String("type", "", "narrow racks to these component types, e.g. compute,nvswitch")
	return func(ctx context.Context, c *env, racks []string) (*flowv1.ScheduledOperation, error) {
		spec, err := powerTargets(ctx, c, racks, *comps, *types)
		if err != nil {
			return nil, err
		}
		switch *op {
		case "power-on":
			return &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_PowerOn{PowerOn: &flowv1.PowerOnRackRequest{TargetSpec: spec}}}, nil
		case "power-off":
			return &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_PowerOff{PowerOff: &flowv1.PowerOffRackRequest{TargetSpec: spec, Forced: *force}}}, nil
		case "power-reset":
			return &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_PowerReset{PowerReset: &flowv1.PowerResetRackRequest{TargetSpec: spec, Forced: *force}}}, nil
		case "bring-up":
			return &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_BringUp{BringUp: &flowv1.BringUpRackRequest{TargetSpec: spec}}}, nil
		case "ingest":
			return &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_Ingest{Ingest: &flowv1.IngestRackRequest{TargetSpec: spec}}}, nil
		case "firmware-upgrade":
			r := &flowv1.UpgradeFirmwareRequest{TargetSpec: spec}
			if *version != "" {
				r.TargetVersion = version
			}
			return &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_UpgradeFirmware{UpgradeFirmware: r}}, nil
		}
		return nil, usageError{fmt.Errorf("--op: want power-on, power-off, power-reset, bring-up, ingest or firmware-upgrade, not %q", *op)}
	}
}

func scheduleVerb(name, summary string, call func(context.Context, *env, *flowv1.UUID) (*flowv1.TaskSchedule, error)) verb {
	return verb{name: name, args: "SCHEDULE", summary: summary,
		flags: func(fs *pflag.FlagSet) runFunc {
			return func(ctx context.Context, c *env, args []string) error {
				id, err := scheduleArg(ctx, c, args)
				if err != nil {
					return err
				}
				res, err := call(ctx, c, id)
				if err != nil {
					return err
				}
				return c.emit(res, func(w io.Writer) { printSchedules(w, []*flowv1.TaskSchedule{res}, c.wide()) })
			}
		}}
}

func scopeVerb(name, summary string, call func(context.Context, *env, *flowv1.UUID, *flowv1.OperationTargetSpec) ([]*flowv1.TaskScheduleScope, error)) verb {
	return verb{name: name, args: "SCHEDULE RACK... | --component C... [--type T,...]", summary: summary,
		flags: func(fs *pflag.FlagSet) runFunc {
			comps := fs.StringSlice("component", nil, "components instead of racks (names or UUIDs)")
			types := fs.String("type", "", "narrow racks to these component types, e.g. compute,nvswitch")
			return func(ctx context.Context, c *env, args []string) error {
				if len(args) == 0 {
					return usageError{errors.New("want SCHEDULE, then RACK... or --component C")}
				}
				id, err := resolveSchedule(ctx, c, args[0])
				if err != nil {
					return err
				}
				spec, err := powerTargets(ctx, c, args[1:], *comps, *types)
				if err != nil {
					return err
				}
				scopes, err := call(ctx, c, id, spec)
				if err != nil {
					return err
				}
				return c.emit(&flowv1.ListTaskScheduleScopesResponse{Scopes: scopes}, func(w io.Writer) {
					printScopes(w, scopes, rackNamesOfScopes(ctx, c, scopes))
				})
			}
		}}
}

func scheduleArg(ctx context.Context, c *env, args []string) (*flowv1.UUID, error) {
	if err := wantArgs(args, 1, "SCHEDULE"); err != nil {
		return nil, err
	}
	return resolveSchedule(ctx, c, args[0])
}

// resolveSchedule turns a SCHEDULE argument into a schedule UUID: a UUID is
// used as is, anything else must be a schedule's name (names are unique).
func resolveSchedule(ctx context.Context, c *env, s string) (*flowv1.UUID, error) {
	if isUUID(s) {
		return &flowv1.UUID{Id: s}, nil
	}
	res, err := c.client.ListTaskSchedules(ctx, &flowv1.ListTaskSchedulesRequest{})
	if err != nil {
		return nil, err
	}
	var cands []candidate
	for _, sc := range res.GetTaskSchedules() {
		if sc.GetName() == s {
			cands = append(cands, candidate{id: sc.GetId().GetId()})
		}
	}
	return pick("schedule", s, cands)
}

// localTime prints a timestamp in the operator's local time, "-" if absent.
func localTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().Local().Format("2006-01-02 15:04:05 MST")
}

func specLabel(s *flowv1.ScheduleSpec) string {
	switch s.GetType() {
	case flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_INTERVAL:
		return "every " + s.GetSpec()
	case flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_CRON:
		return fmt.Sprintf("cron %q %s", s.GetSpec(), s.GetTimezone())
	case flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_ONE_TIME:
		return "at " + s.GetSpec()
	}
	return s.GetSpec()
}

func printSchedules(w io.Writer, list []*flowv1.TaskSchedule, wide bool) {
	headers := []string{"NAME", "WHEN", "OPERATION", "OVERLAP", "STATE", "NEXT RUN", "LAST RUN"}
	if wide {
		headers = append(headers, "ID")
	}
	rows := make([][]string, len(list))
	for i, s := range list {
		state := "active"
		switch {
		case !s.GetEnabled() && s.GetSpec().GetType() == flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_ONE_TIME && s.GetLastRunAt() != nil:
			state = "fired"
		case !s.GetEnabled():
			state = "paused"
		}
		overlap := strings.ToLower(strings.TrimPrefix(s.GetOverlapPolicy().String(), "OVERLAP_POLICY_"))
		next := s.GetNextRunAt()
		if state != "active" {
			next = nil // a paused schedule keeps its stale next_run_at; resuming recomputes it
		}
		rows[i] = []string{s.GetName(), specLabel(s.GetSpec()), s.GetDescription(), overlap, state, localTime(next), localTime(s.GetLastRunAt())}
		if wide {
			rows[i] = append(rows[i], s.GetId().GetId())
		}
	}
	printTable(w, headers, rows)
}

func rackNamesOfScopes(ctx context.Context, c *env, scopes []*flowv1.TaskScheduleScope) map[string]string {
	ids := make([]string, len(scopes))
	for i, sc := range scopes {
		ids[i] = sc.GetRackId().GetId()
	}
	return rackNamesByID(ctx, c, ids)
}

func printScopes(w io.Writer, scopes []*flowv1.TaskScheduleScope, names map[string]string) {
	rows := make([][]string, len(scopes))
	for i, sc := range scopes {
		filter := "whole rack"
		if ts := sc.GetTypes(); ts != nil {
			var names []string
			for _, t := range ts.GetTypes() {
				names = append(names, componentTypeName(t))
			}
			filter = "types " + strings.Join(names, ",")
		} else if cs := sc.GetComponents(); cs != nil {
			filter = fmt.Sprintf("%d components", len(cs.GetTargets()))
		}
		last := "-"
		if sc.GetLastTaskId() != nil {
			last = sc.GetLastTaskId().GetId()
		}
		rows[i] = []string{sc.GetId().GetId(), rackLabel(names, sc.GetRackId().GetId()), filter, last}
	}
	printTable(w, []string{"SCOPE", "RACK", "FILTER", "LAST TASK"}, rows)
}

// scheduleScopeNoun is `flow schedule scope add|update|remove|list`: the
// racks (and component filters) a schedule fires on.
var scheduleScopeNoun = noun{
	name:    "scope",
	aliases: []string{"scopes"},
	summary: "a schedule's scope: the racks (or components) it fires on",
	verbs: []verb{
		{name: "list", args: "SCHEDULE", summary: "list a schedule's scope: one entry per rack",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					id, err := scheduleArg(ctx, c, args)
					if err != nil {
						return err
					}
					res, err := c.client.ListTaskScheduleScopes(ctx, &flowv1.ListTaskScheduleScopesRequest{ScheduleId: id})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printScopes(w, res.GetScopes(), rackNamesOfScopes(ctx, c, res.GetScopes())) })
				}
			}},
		scopeVerb("add", "add racks (or components) to a schedule's scope; racks already in scope get their filter merged",
			func(ctx context.Context, c *env, id *flowv1.UUID, spec *flowv1.OperationTargetSpec) ([]*flowv1.TaskScheduleScope, error) {
				res, err := c.client.AddTaskScheduleScope(ctx, &flowv1.AddTaskScheduleScopeRequest{ScheduleId: id, TargetSpec: spec})
				return res.GetScopes(), err
			}),
		scopeVerb("update", "make a schedule's scope exactly these racks (or components): UpdateTaskScheduleScope",
			func(ctx context.Context, c *env, id *flowv1.UUID, spec *flowv1.OperationTargetSpec) ([]*flowv1.TaskScheduleScope, error) {
				res, err := c.client.UpdateTaskScheduleScope(ctx, &flowv1.UpdateTaskScheduleScopeRequest{ScheduleId: id, DesiredScope: spec})
				if err == nil {
					fmt.Fprintf(c.errOut, "added %d, removed %d, updated %d\n", res.GetAdded(), res.GetRemoved(), res.GetUpdated())
				}
				return res.GetScopes(), err
			}),
		{name: "remove", args: "SCHEDULE RACK", summary: "remove one rack from a schedule's scope (not the last one)",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 2, "SCHEDULE RACK"); err != nil {
						return err
					}
					id, err := resolveSchedule(ctx, c, args[0])
					if err != nil {
						return err
					}
					rack, err := resolveRack(ctx, c, args[1])
					if err != nil {
						return err
					}
					scopes, err := c.client.ListTaskScheduleScopes(ctx, &flowv1.ListTaskScheduleScopesRequest{ScheduleId: id})
					if err != nil {
						return err
					}
					for _, sc := range scopes.GetScopes() {
						if sc.GetRackId().GetId() == rack.GetId() {
							res, err := c.client.RemoveTaskScheduleScope(ctx, &flowv1.RemoveTaskScheduleScopeRequest{ScopeId: sc.GetId()})
							if err != nil {
								return err
							}
							return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "removed scope %s (rack %s)\n", sc.GetId().GetId(), args[1]) })
						}
					}
					return fmt.Errorf("rack %s is not in the scope of schedule %s", args[1], args[0])
				}
			}},
	},
}
