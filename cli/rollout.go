package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CLI noun of operation runs: rollout. A rollout upgrades firmware over a
// share of the site in phases, a few racks at a time, pausing at phase and
// safety gates. See docs/rollouts.md.

// rolloutSpec is a rollout to create, from flags or a YAML file (same
// names, with underscores).
type rolloutSpec struct {
	Name             string   `yaml:"name"`
	Description      string   `yaml:"description"`
	Racks            []string `yaml:"racks"`
	All              bool     `yaml:"all"`        // the whole site
	Percentage       *int     `yaml:"percentage"` // nil: not given
	Seed             string   `yaml:"seed"`
	Phases           int      `yaml:"phases"`
	PhasePercentages []int    `yaml:"phase_percentages"`
	PhaseCounts      []int    `yaml:"phase_counts"`
	AutoAdvance      bool     `yaml:"auto_advance"`
	MaxConcurrent    int      `yaml:"max_concurrent"`
	GateRate         int      `yaml:"gate_rate"`
	GateCount        int      `yaml:"gate_count"`
	GateScope        string   `yaml:"gate_scope"`
	Version          string   `yaml:"version"`
	TargetVersion    string   `yaml:"target_version"` // the older name of version
	Rule             string   `yaml:"rule"`
	Exclude          []string `yaml:"exclude"`
	Ordering         string   `yaml:"ordering"`
	OrderingSeed     string   `yaml:"ordering_seed"`
	RetryTimeout     string   `yaml:"retry_timeout"`
	InitialDelay     string   `yaml:"initial_retry_delay"`
	MaxDelay         string   `yaml:"max_retry_delay"`
}

const targetStatuses = "pending, blocked, submitted, completed, failed, terminated, skipped"

var rolloutStatuses = []string{"pending", "running", "paused", "completed", "completed_with_failures", "cancelled", "failed"}

var rolloutNoun = noun{
	name:    "rollout",
	aliases: []string{"rollouts", "operation-run"},
	summary: "operation runs: phased, gated firmware rollouts over the site",
	verbs: []verb{
		{name: "create", args: "(-f FILE | --name N ...) [--dry-run] [--allow-overlap] [flags]", summary: "plan and start a rollout (flags override the file's values; --dry-run prints the plan instead)",
			flags: func(fs *pflag.FlagSet) runFunc {
				file := fs.StringP("file", "f", "", "YAML file with the fields below (underscores: max_concurrent, gate_rate, ...); - reads stdin")
				var s rolloutSpec
				fs.StringVar(&s.Name, "name", "", "run name (required)")
				fs.StringVar(&s.Description, "description", "", "description")
				fs.StringSliceVar(&s.Racks, "racks", nil, "the candidate racks (names or UUIDs, comma-separated)")
				fs.BoolVar(&s.All, "all", false, "every rack of the site")
				pct := fs.Int("percentage", 0, "share of the candidates (--racks, else the whole site) to upgrade, 1-100")
				fs.StringVar(&s.Seed, "seed", "", "selection seed (default: generated, shown by get)")
				fs.IntVar(&s.Phases, "phases", 0, "number of equal phases (default 1)")
				fs.IntSliceVar(&s.PhasePercentages, "phase-percentages", nil, "phase sizes in percent, adding up to 100 (e.g. 10,30,60)")
				fs.IntSliceVar(&s.PhaseCounts, "phase-counts", nil, "sizes of the first phases; a last phase takes the rest (e.g. 2,3)")
				fs.BoolVar(&s.AutoAdvance, "auto-advance", false, "open the next phase by itself (default: pause at each phase gate)")
				fs.IntVar(&s.MaxConcurrent, "max-concurrent", 0, "racks upgraded at once (required)")
				fs.IntVar(&s.GateRate, "gate-rate", 0, "pause when this percent of the planned targets failed (a gate is required: --gate-rate, --gate-count or both)")
				fs.IntVar(&s.GateCount, "gate-count", 0, "pause when this many targets failed (a gate is required: --gate-rate, --gate-count or both)")
				fs.StringVar(&s.GateScope, "gate-scope", "", "phase (default) or run: what the gates count over")
				fs.StringVar(&s.Version, "version", "", "firmware version to install (required)")
				fs.StringVar(&s.Version, "target-version", "", "the older name of --version")
				_ = fs.MarkHidden("target-version")
				fs.StringVar(&s.Rule, "rule", "", "operation rule (name or UUID) instead of the resolved one")
				fs.StringSliceVar(&s.Exclude, "exclude", nil, "earlier rollouts (names or UUIDs) whose racks to leave out")
				fs.StringVar(&s.Ordering, "ordering", "", "random (default), row-by-row or round-robin (one rack per row in turn)")
				fs.StringVar(&s.OrderingSeed, "ordering-seed", "", "seed of the random ordering (default: generated)")
				fs.StringVar(&s.RetryTimeout, "retry-timeout", "", "pause when a busy rack blocks a target this long (default 1h)")
				fs.StringVar(&s.InitialDelay, "initial-retry-delay", "", "first wait before retrying a busy rack (default 30s)")
				fs.StringVar(&s.MaxDelay, "max-retry-delay", "", "longest wait between retries (default 5m)")
				dryRun := fs.Bool("dry-run", false, "print the plan (phases and racks, conflicts, overlapping rollouts, open leaks, plan hash) and create nothing")
				allowOverlap := fs.Bool("allow-overlap", false, "create it even when its racks overlap a pending, running or paused rollout")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					spec := rolloutSpec{}
					if *file != "" {
						raw, err := c.readFileArg(*file)
						if err != nil {
							return err
						}
						dec := yaml.NewDecoder(strings.NewReader(string(raw)))
						dec.KnownFields(true)
						if err := dec.Decode(&spec); err != nil && !errors.Is(err, io.EOF) {
							return usageError{fmt.Errorf("%s: %w", *file, err)}
						}
					}
					s.Percentage = pct
					mergeSpec(&spec, s, fs)
					if err := checkSelection(spec); err != nil {
						return err
					}
					req, err := rolloutRequest(ctx, c, spec)
					if err != nil {
						return err
					}
					if *dryRun {
						res, err := c.admin.PreviewOperationRun(ctx, &adminv1.PreviewOperationRunRequest{Request: req})
						if err != nil {
							return err
						}
						return c.emit(res, func(w io.Writer) { printRunPreview(w, res) })
					}
					if !*allowOverlap {
						res, err := c.client.CreateOperationRun(ctx, req)
						if err != nil {
							return err
						}
						// v1's answer is the ID alone: say so when the run
						// waits for a second identity's approval.
						run, err := c.client.GetOperationRun(ctx, &flowv1.GetOperationRunRequest{Id: res.GetId()})
						if err != nil {
							return err
						}
						return c.emit(res, func(w io.Writer) {
							fmt.Fprintf(w, "created rollout %s\n", res.GetId().GetId())
							printAwaitingApproval(w, run.GetOperationRun().GetSummary().GetStatusMessage())
						})
					}
					// Flow's own create carries the flag (v1 cannot).
					res, err := c.admin.CreateOperationRun(ctx, &adminv1.CreateOperationRunRequest{Request: req, AllowOverlap: true})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						fmt.Fprintf(w, "created rollout %s\n", res.GetId())
						if id := res.GetApprovalId(); id != "" {
							fmt.Fprintf(w, "awaiting approval: request %s, plan hash %s (a second operator: flow approval approve %s --hash %s)\n", id, res.GetPlanHash(), id, res.GetPlanHash())
						}
					})
				}
			}},
		{name: "list", args: "[--name N] [--status S,...] [--offset N] [--limit N]", summary: "list rollouts, newest first",
			flags: func(fs *pflag.FlagSet) runFunc {
				name := fs.String("name", "", "only rollouts whose name contains this")
				status := fs.String("status", "", "only these statuses, comma-separated: "+strings.Join(rolloutStatuses, ", "))
				page := pageFlags(fs)
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					req := &flowv1.ListOperationRunsRequest{Filter: &flowv1.OperationRunFilter{}, Pagination: page()}
					if *name != "" {
						req.Filter.Name = stringQuery(*name, true)
					}
					for _, s := range splitList(*status) {
						v, ok := flowv1.OperationRunStatus_value["OPERATION_RUN_STATUS_"+strings.ToUpper(s)]
						if !ok || v == 0 {
							return usageError{fmt.Errorf("--status: unknown status %q (%s)", s, strings.Join(rolloutStatuses, ", "))}
						}
						req.Filter.States = append(req.Filter.States, &flowv1.OperationRunStateFilter{Status: flowv1.OperationRunStatus(v).Enum()})
					}
					res, err := c.client.ListOperationRuns(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						rows := [][]string{}
						for _, r := range res.GetOperationRuns() {
							row := []string{r.GetId().GetId(), r.GetName(), runState(r.GetState()), strconv.Itoa(int(r.GetTotalPhases())), r.GetStatusMessage()}
							if c.wide() {
								row = append(row, r.GetCreatedAt().AsTime().Local().Format(time.DateTime))
							}
							rows = append(rows, row)
						}
						headers := []string{"ID", "NAME", "STATE", "PHASES", "MESSAGE"}
						if c.wide() {
							headers = append(headers, "CREATED")
						}
						printTable(w, headers, rows)
						fmt.Fprintf(w, "%d of %d rollouts\n", len(rows), res.GetTotal())
					})
				}
			}},
		{name: "get", args: "ROLLOUT", summary: "show a rollout: state, configuration and per-phase counts", complete: rolloutNameList,
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "ROLLOUT"); err != nil {
						return err
					}
					id, err := resolveRollout(ctx, c, args[0])
					if err != nil {
						return err
					}
					res, err := c.client.GetOperationRun(ctx, &flowv1.GetOperationRunRequest{Id: id, IncludeStats: true})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printRollout(w, res.GetOperationRun()) })
				}
			}},
		{name: "targets", args: "ROLLOUT [--phases current|completed|all] [--status S]", summary: "list a rollout's targets (default: the current phase)", complete: rolloutNameList,
			flags: func(fs *pflag.FlagSet) runFunc {
				phases := fs.String("phases", "current", "current, completed or all (current and completed; future phases are never listed)")
				status := fs.String("status", "", "only targets in this status: "+targetStatuses)
				page := pageFlags(fs)
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "ROLLOUT"); err != nil {
						return err
					}
					id, err := resolveRollout(ctx, c, args[0])
					if err != nil {
						return err
					}
					req := &flowv1.ListOperationRunTargetsRequest{OperationRunId: id, Pagination: page()}
					switch *phases {
					case "current":
						req.PhaseScope = flowv1.OperationRunTargetPhaseScope_OPERATION_RUN_TARGET_PHASE_SCOPE_CURRENT_PHASE
					case "completed":
						req.PhaseScope = flowv1.OperationRunTargetPhaseScope_OPERATION_RUN_TARGET_PHASE_SCOPE_COMPLETED_PHASES
					case "all":
						req.PhaseScope = flowv1.OperationRunTargetPhaseScope_OPERATION_RUN_TARGET_PHASE_SCOPE_CURRENT_AND_COMPLETED_PHASES
					default:
						return usageError{fmt.Errorf("--phases must be current, completed or all, not %q", *phases)}
					}
					if *status != "" {
						v, ok := flowv1.OperationRunTargetStatus_value["OPERATION_RUN_TARGET_STATUS_"+strings.ToUpper(*status)]
						if !ok || v == 0 {
							return usageError{fmt.Errorf("--status: unknown target status %q (want %s)", *status, targetStatuses)}
						}
						req.Status = flowv1.OperationRunTargetStatus(v)
					}
					res, err := c.client.ListOperationRunTargets(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						printRolloutTargets(w, res.GetTargets(), targetRackNames(ctx, c, res.GetTargets()), c.wide())
						fmt.Fprintf(w, "%d of %d targets\n", len(res.GetTargets()), res.GetTotal())
					})
				}
			}},
		idVerb("pause", "ROLLOUT", "pause a rollout (running children finish)", "paused rollout", resolveRollout, rolloutNameList,
			func(ctx context.Context, c *env, id *flowv1.UUID) (proto.Message, error) {
				return c.client.PauseOperationRun(ctx, &flowv1.PauseOperationRunRequest{Id: id})
			}),
		idVerb("resume", "ROLLOUT", "resume a paused rollout (failures seen so far no longer count toward the gates)", "resumed rollout", resolveRollout, rolloutNameList,
			func(ctx context.Context, c *env, id *flowv1.UUID) (proto.Message, error) {
				return c.client.ResumeOperationRun(ctx, &flowv1.ResumeOperationRunRequest{Id: id})
			}),
		{name: "advance", args: "ROLLOUT [--expect N]", summary: "open the next phase of a rollout paused at a phase gate", complete: rolloutNameList,
			flags: func(fs *pflag.FlagSet) runFunc {
				expect := fs.Int("expect", -1, "refuse unless the phase to open has this index (guards against double advances)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "ROLLOUT"); err != nil {
						return err
					}
					id, err := resolveRollout(ctx, c, args[0])
					if err != nil {
						return err
					}
					req := &flowv1.AdvanceOperationRunPhaseRequest{Id: id}
					if *expect >= 0 {
						req.ExpectedPhaseIndex = ptr(int32(*expect))
					}
					res, err := c.client.AdvanceOperationRunPhase(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						fmt.Fprintf(w, "advanced rollout %s: %s\n", id.GetId(), res.GetSummary().GetStatusMessage())
					})
				}
			}},
		{name: "cancel", args: "ROLLOUT [--reason TEXT]", summary: "cancel a rollout: no more claims, running children cancelled, the rest skipped", complete: rolloutNameList,
			flags: func(fs *pflag.FlagSet) runFunc {
				reason := fs.String("reason", "", "why (recorded in the status message)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "ROLLOUT"); err != nil {
						return err
					}
					id, err := resolveRollout(ctx, c, args[0])
					if err != nil {
						return err
					}
					res, err := c.client.CancelOperationRun(ctx, &flowv1.CancelOperationRunRequest{Id: id, Reason: *reason})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "cancelled rollout %s\n", id.GetId()) })
				}
			}},
		{name: "watch", args: "ROLLOUT [--interval D]", summary: "follow a rollout live (phases, per-phase counts, targets in flight) until it ends or pauses; exit 0 completed, 3 ended otherwise, 4 paused at a phase gate, 5 paused otherwise, 130 Ctrl-C", complete: rolloutNameList,
			flags: func(fs *pflag.FlagSet) runFunc {
				interval := fs.Duration("interval", time.Second, "refresh interval")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "ROLLOUT"); err != nil {
						return err
					}
					id, err := resolveRollout(ctx, c, args[0])
					if err != nil {
						return err
					}
					if *interval <= 0 {
						return usageError{errors.New("--interval must be positive")}
					}
					return watchRollout(ctx, c, id, args[0], *interval)
				}
			}},
	},
}

// mergeSpec sets into s the flags given on the command line.
func mergeSpec(s *rolloutSpec, flags rolloutSpec, fs *pflag.FlagSet) {
	set := func(name string, apply func()) {
		if fs.Changed(name) {
			apply()
		}
	}
	set("name", func() { s.Name = flags.Name })
	set("description", func() { s.Description = flags.Description })
	set("racks", func() { s.Racks = flags.Racks })
	set("all", func() { s.All = flags.All })
	set("percentage", func() { s.Percentage = flags.Percentage })
	set("seed", func() { s.Seed = flags.Seed })
	set("phases", func() { s.Phases = flags.Phases })
	set("phase-percentages", func() { s.PhasePercentages = flags.PhasePercentages })
	set("phase-counts", func() { s.PhaseCounts = flags.PhaseCounts })
	set("auto-advance", func() { s.AutoAdvance = flags.AutoAdvance })
	set("max-concurrent", func() { s.MaxConcurrent = flags.MaxConcurrent })
	set("gate-rate", func() { s.GateRate = flags.GateRate })
	set("gate-count", func() { s.GateCount = flags.GateCount })
	set("gate-scope", func() { s.GateScope = flags.GateScope })
	set("version", func() { s.Version, s.TargetVersion = flags.Version, "" })
	set("target-version", func() { s.Version, s.TargetVersion = flags.Version, "" })
	set("rule", func() { s.Rule = flags.Rule })
	set("exclude", func() { s.Exclude = flags.Exclude })
	set("ordering", func() { s.Ordering = flags.Ordering })
	set("ordering-seed", func() { s.OrderingSeed = flags.OrderingSeed })
	set("retry-timeout", func() { s.RetryTimeout = flags.RetryTimeout })
	set("initial-retry-delay", func() { s.InitialDelay = flags.InitialDelay })
	set("max-retry-delay", func() { s.MaxDelay = flags.MaxDelay })
}

// checkSelection refuses a rollout whose targets are not chosen
// explicitly (--all, --racks or --percentage), a percentage outside 1-100
// (the API's range: 0 is not "the default"), and a firmware rollout
// without a version. It normalises s.Version (version, else the older
// target_version) and leaves a nil percentage at 100.
func checkSelection(s rolloutSpec) error {
	switch {
	case s.All && len(s.Racks) > 0:
		return usageError{errors.New("--all and --racks exclude each other: --all is every rack of the site, --racks only those")}
	case s.All && s.Percentage != nil:
		return usageError{errors.New("--all and --percentage exclude each other: --all is every rack of the site; for a share of the site give --percentage alone")}
	case !s.All && len(s.Racks) == 0 && s.Percentage == nil:
		return usageError{errors.New("choose the targets: --all (every rack of the site), --racks R,... (those racks) or --percentage N (N % of the site, or of --racks); nothing was created")}
	case s.Percentage != nil && (*s.Percentage < 1 || *s.Percentage > 100):
		return usageError{fmt.Errorf("--percentage must be 1-100, not %d (0 is not \"all\": give --all); nothing was created", *s.Percentage)}
	case s.Version == "" && s.TargetVersion == "":
		return usageError{errors.New("want --version V: the firmware version the rollout installs; nothing was created")}
	case s.Version != "" && s.TargetVersion != "" && s.Version != s.TargetVersion:
		return usageError{fmt.Errorf("version %q and target_version %q differ: give one", s.Version, s.TargetVersion)}
	}
	var missing []string
	if s.MaxConcurrent == 0 {
		missing = append(missing, "--max-concurrent N (racks upgraded at once)")
	}
	if s.GateRate == 0 && s.GateCount == 0 {
		missing = append(missing, "a safety gate: --gate-rate PERCENT or --gate-count N (or both)")
	}
	if len(missing) > 0 {
		return usageError{fmt.Errorf("flow rollout create needs %s; nothing was created", strings.Join(missing, " and "))}
	}
	return nil
}

// rolloutRequest builds the create request from a spec checkSelection
// accepted; the server validates the values (and names the field at
// fault), the CLI only their shape.
func rolloutRequest(ctx context.Context, c *env, s rolloutSpec) (*flowv1.CreateOperationRunRequest, error) {
	pct := 100
	if s.Percentage != nil {
		pct = *s.Percentage
	}
	version := cmp.Or(s.Version, s.TargetVersion)
	opts := &flowv1.OperationRunOptions{MaxConcurrentTargets: int32(s.MaxConcurrent), SafetyPolicy: &flowv1.OperationRunSafetyPolicy{}}
	scope := flowv1.OperationRunSafetyGateScope_OPERATION_RUN_SAFETY_GATE_SCOPE_CURRENT_PHASE
	switch s.GateScope {
	case "", "phase":
	case "run":
		scope = flowv1.OperationRunSafetyGateScope_OPERATION_RUN_SAFETY_GATE_SCOPE_CUMULATIVE_RUN
	default:
		return nil, usageError{fmt.Errorf("gate scope must be phase or run, not %q", s.GateScope)}
	}
	if s.GateRate != 0 {
		opts.SafetyPolicy.Gates = append(opts.SafetyPolicy.Gates, &flowv1.OperationRunSafetyGate{Gate: &flowv1.OperationRunSafetyGate_FailureRate{
			FailureRate: &flowv1.OperationRunFailureRateGate{Scope: scope, FailureThresholdPercent: int32(s.GateRate)}}})
	}
	if s.GateCount != 0 {
		opts.SafetyPolicy.Gates = append(opts.SafetyPolicy.Gates, &flowv1.OperationRunSafetyGate{Gate: &flowv1.OperationRunSafetyGate_FailureCount{
			FailureCount: &flowv1.OperationRunFailureCountGate{Scope: scope, FailureThresholdCount: int32(s.GateCount)}}})
	}
	pp := &flowv1.OperationRunPhasePolicy{AdvancePolicy: &flowv1.OperationRunPhaseAdvancePolicy{AutoAdvance: s.AutoAdvance}}
	plans := 0
	if s.Phases != 0 {
		plans++
		pp.Plan = &flowv1.OperationRunPhasePolicy_Equal{Equal: &flowv1.EqualOperationRunPhases{PhaseCount: int32(s.Phases)}}
	}
	if len(s.PhasePercentages) > 0 {
		plans++
		p := &flowv1.PercentageOperationRunPhases{}
		for _, v := range s.PhasePercentages {
			p.Phases = append(p.Phases, &flowv1.OperationRunPercentagePhase{Percentage: int32(v)})
		}
		pp.Plan = &flowv1.OperationRunPhasePolicy_Percentage{Percentage: p}
	}
	if len(s.PhaseCounts) > 0 {
		plans++
		p := &flowv1.CountOperationRunPhases{}
		for _, v := range s.PhaseCounts {
			p.Phases = append(p.Phases, &flowv1.OperationRunCountPhase{Count: int32(v)})
		}
		pp.Plan = &flowv1.OperationRunPhasePolicy_Count{Count: p}
	}
	if plans > 1 {
		return nil, usageError{errors.New("give one of phases, phase percentages or phase counts")}
	}
	opts.PhasePolicy = pp
	switch s.Ordering {
	case "", "random":
		opts.OrderingPolicy = &flowv1.OperationRunOrderingPolicy{Ordering: &flowv1.OperationRunOrderingPolicy_Random{Random: &flowv1.OperationRunRandomOrdering{Seed: s.OrderingSeed}}}
	case "row-by-row", "round-robin":
		st := flowv1.OperationRunPhysicalLocationOrdering_STRATEGY_ROW_BY_ROW
		if s.Ordering == "round-robin" {
			st = flowv1.OperationRunPhysicalLocationOrdering_STRATEGY_ONE_PER_ROW_ROUND_ROBIN
		}
		opts.OrderingPolicy = &flowv1.OperationRunOrderingPolicy{Ordering: &flowv1.OperationRunOrderingPolicy_PhysicalLocation{PhysicalLocation: &flowv1.OperationRunPhysicalLocationOrdering{Strategy: st}}}
	default:
		return nil, usageError{fmt.Errorf("ordering must be random, row-by-row or round-robin, not %q", s.Ordering)}
	}
	if s.RetryTimeout != "" || s.InitialDelay != "" || s.MaxDelay != "" {
		retry := &flowv1.OperationRunConflictRetryPolicy{}
		for _, d := range []struct {
			name, v string
			dst     **durationpb.Duration
		}{{"retry timeout", s.RetryTimeout, &retry.RetryTimeout}, {"initial retry delay", s.InitialDelay, &retry.InitialRetryDelay}, {"max retry delay", s.MaxDelay, &retry.MaxRetryDelay}} {
			if d.v == "" {
				continue
			}
			v, err := time.ParseDuration(d.v)
			if err != nil {
				return nil, usageError{fmt.Errorf("%s: %w", d.name, err)}
			}
			*d.dst = durationpb.New(v)
		}
		opts.ConflictPolicy = &flowv1.OperationRunConflictPolicy{Strategy: &flowv1.OperationRunConflictPolicy_Retry{Retry: retry}}
	}
	fw := &flowv1.UpgradeFirmwareRequest{}
	if version != "" {
		fw.TargetVersion = ptr(version)
	}
	if s.Rule != "" {
		id, err := resolveRule(ctx, c, s.Rule)
		if err != nil {
			return nil, err
		}
		fw.RuleId = id
	}
	if len(s.Racks) > 0 {
		racks := &flowv1.RackTargets{}
		for _, r := range s.Racks {
			id, err := resolveRack(ctx, c, r)
			if err != nil {
				return nil, err
			}
			racks.Targets = append(racks.Targets, &flowv1.RackTarget{Identifier: &flowv1.RackTarget_Id{Id: id}})
		}
		fw.TargetSpec = &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: racks}}
	}
	op := &flowv1.OperationRunOperation{Operation: &flowv1.OperationRunOperation_UpgradeFirmware{UpgradeFirmware: fw}}
	if len(s.Exclude) > 0 {
		op.TargetScope = &flowv1.OperationRunTargetScope{}
		for _, e := range s.Exclude {
			id, err := resolveRollout(ctx, c, e)
			if err != nil {
				return nil, err
			}
			op.TargetScope.ExcludeOperationRunIds = append(op.TargetScope.ExcludeOperationRunIds, id)
		}
	}
	return &flowv1.CreateOperationRunRequest{
		Name: s.Name, Description: s.Description,
		Configuration: &flowv1.OperationRunConfiguration{
			Selector:  &flowv1.OperationRunSelector{Selector: &flowv1.OperationRunSelector_Percentage{Percentage: &flowv1.PercentageSelector{Percentage: int32(pct), Seed: s.Seed}}},
			Options:   opts,
			Operation: op,
		},
	}, nil
}

// resolveRollout turns a ROLLOUT argument into a run UUID: a UUID is used
// as is, anything else must be exactly one rollout's name.
func resolveRollout(ctx context.Context, c *env, s string) (*flowv1.UUID, error) {
	if isUUID(s) {
		return &flowv1.UUID{Id: s}, nil
	}
	var cands []candidate
	for offset := int32(0); ; {
		res, err := c.client.ListOperationRuns(ctx, &flowv1.ListOperationRunsRequest{
			Filter:     &flowv1.OperationRunFilter{Name: &flowv1.StringQueryInfo{Patterns: []string{s}}},
			Pagination: &flowv1.Pagination{Offset: offset, Limit: pageLimit},
		})
		if err != nil {
			return nil, err
		}
		for _, r := range res.GetOperationRuns() {
			cands = append(cands, candidate{id: r.GetId().GetId(), label: runState(r.GetState())})
		}
		offset += int32(len(res.GetOperationRuns()))
		if len(res.GetOperationRuns()) == 0 || offset >= res.GetTotal() {
			break
		}
	}
	return pick("rollout", s, cands)
}

func rolloutNameList(ctx context.Context, c *env) ([]string, error) {
	res, err := c.client.ListOperationRuns(ctx, &flowv1.ListOperationRunsRequest{Pagination: &flowv1.Pagination{Limit: pageLimit}})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range res.GetOperationRuns() {
		out = append(out, r.GetName())
	}
	return out, nil
}

// runState is "status" or "status/reason" in lowercase.
func runState(s *flowv1.OperationRunState) string {
	st := strings.ToLower(strings.TrimPrefix(s.GetStatus().String(), "OPERATION_RUN_STATUS_"))
	re := strings.ToLower(strings.TrimPrefix(s.GetReason().String(), "OPERATION_RUN_STATUS_REASON_"))
	if re == "none" || re == "unknown" {
		return st
	}
	return st + "/" + re
}

func targetStatus(s flowv1.OperationRunTargetStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "OPERATION_RUN_TARGET_STATUS_"))
}

func printRollout(w io.Writer, r *flowv1.OperationRun) {
	s := r.GetSummary()
	o := r.GetConfiguration().GetOptions()
	fmt.Fprintf(w, "ID:          %s\nName:        %s\n", s.GetId().GetId(), s.GetName())
	if s.GetDescription() != "" {
		fmt.Fprintf(w, "Description: %s\n", s.GetDescription())
	}
	fmt.Fprintf(w, "State:       %s\nMessage:     %s\n", runState(s.GetState()), s.GetStatusMessage())
	cur := r.GetStats().GetCurrentPhaseStats()
	fmt.Fprintf(w, "Phase:       %s (auto-advance: %t)\n", phaseLabel(cur.GetPhaseIndex(), s.GetTotalPhases()), o.GetPhasePolicy().GetAdvancePolicy().GetAutoAdvance())
	sel := r.GetConfiguration().GetSelector().GetPercentage()
	fmt.Fprintf(w, "Selection:   %d%% (seed %s)\nConcurrency: %d\n", sel.GetPercentage(), sel.GetSeed(), o.GetMaxConcurrentTargets())
	for i, g := range o.GetSafetyPolicy().GetGates() {
		if fr := g.GetFailureRate(); fr != nil {
			fmt.Fprintf(w, "Gate %d:      %d%% failed (%s)\n", i, fr.GetFailureThresholdPercent(), gateScope(fr.GetScope()))
		} else if fc := g.GetFailureCount(); fc != nil {
			fmt.Fprintf(w, "Gate %d:      %d failed (%s)\n", i, fc.GetFailureThresholdCount(), gateScope(fc.GetScope()))
		}
	}
	for _, p := range []struct {
		label string
		st    *flowv1.OperationRunPhaseStats
	}{{"This phase", cur}, {"Up to now", r.GetStats().GetCumulativePhaseStats()}} {
		oc := p.st.GetOutcomeCounts()
		fmt.Fprintf(w, "%-12s %d targets: %d completed, %d failed, %d terminated, %d skipped\n", p.label+":", p.st.GetSelectedTargets(),
			oc.GetCompleted(), oc.GetFailed(), oc.GetTerminated(), oc.GetSkipped())
	}
	fmt.Fprintf(w, "Created:     %s\n", s.GetCreatedAt().AsTime().Local().Format(time.DateTime))
	if s.GetFinishedAt() != nil {
		fmt.Fprintf(w, "Finished:    %s\n", s.GetFinishedAt().AsTime().Local().Format(time.DateTime))
	}
}

func gateScope(s flowv1.OperationRunSafetyGateScope) string {
	if s == flowv1.OperationRunSafetyGateScope_OPERATION_RUN_SAFETY_GATE_SCOPE_CUMULATIVE_RUN {
		return "whole run"
	}
	return "per phase"
}

func targetRackNames(ctx context.Context, c *env, targets []*flowv1.OperationRunTarget) map[string]string {
	var ids []string
	for _, t := range targets {
		ids = append(ids, t.GetRackId().GetId())
	}
	return rackNamesByID(ctx, c, ids)
}

func printRolloutTargets(w io.Writer, targets []*flowv1.OperationRunTarget, names map[string]string, wide bool) {
	rows := [][]string{}
	for _, t := range targets {
		row := []string{strconv.Itoa(int(t.GetPhaseIndex())), strconv.Itoa(int(t.GetSequenceIndex())), rackLabel(names, t.GetRackId().GetId()),
			targetStatus(t.GetStatus()), t.GetTaskId().GetId(), t.GetMessage()}
		if wide {
			row = append(row, t.GetRackId().GetId(), t.GetUpdatedAt().AsTime().Local().Format(time.DateTime))
		}
		rows = append(rows, row)
	}
	headers := []string{"PHASE", "SEQ", "RACK", "STATUS", "TASK", "MESSAGE"}
	if wide {
		headers = append(headers, "RACK ID", "UPDATED")
	}
	printTable(w, headers, rows)
}

// Exit statuses of rollout watch besides 0 (completed), 1 (a call
// failed), 2 (bad usage) and 130 (Ctrl-C): the run ended without completing
// every target, paused at a phase gate, or paused for another reason.
const (
	exitRolloutEndedBadly = 3
	exitRolloutPhaseGate  = 4
	exitRolloutPaused     = 5
)

// rolloutStopError is how watch reports a run that stopped other than by
// completing: the message says what happened and what to do, code is the
// exit status.
type rolloutStopError struct {
	msg  string
	code int
}

func (e rolloutStopError) Error() string { return e.msg }

// watchRollout redraws the rollout's state every interval until it ends
// or pauses (or ctx does: Ctrl-C): phases so far with their counts, and
// the targets in flight or waiting on a busy rack. It returns nil when the
// run completed, a rolloutStopError when it ended otherwise or paused, an
// interruptedError on Ctrl-C. -o json/yaml prints only the final run.
func watchRollout(ctx context.Context, c *env, id *flowv1.UUID, name string, interval time.Duration) error {
	tty := isTerminal(c.out)
	last := ""
	names := map[string]string{}
	failed := 0
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return rolloutInterrupted(c, name)
			case <-time.After(interval):
			}
		}
		run, targets, err := pollRollout(ctx, c, id)
		if ctx.Err() != nil {
			return rolloutInterrupted(c, name)
		}
		if err != nil {
			code := connect.CodeOf(err)
			if code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded {
				return err
			}
			failed++
			if failed > maxFailedPolls {
				return fmt.Errorf("gave up after %d failed polls of %s: %w\nthe rollout keeps running on the server; %s", maxFailedPolls, c.server, err, rolloutHint(c, name))
			}
			fmt.Fprintf(c.errOut, "%s flow: server %s not answering (%s); retrying every %s (%d of %d)\n",
				now().UTC().Format("15:04:05"), c.server, code, interval, failed, maxFailedPolls)
			continue
		}
		failed = 0
		stop := rolloutStop(run.GetOperationRun(), c, name)
		if !c.structured() {
			for _, t := range targets.GetTargets() {
				if _, ok := names[t.GetRackId().GetId()]; !ok && isActiveTarget(t.GetStatus()) {
					for k, v := range rackNamesByID(ctx, c, []string{t.GetRackId().GetId()}) {
						names[k] = v
					}
				}
			}
			frame := rolloutFrame(run.GetOperationRun(), targets.GetTargets(), names)
			if frame != last {
				if tty {
					fmt.Fprint(c.out, "\033[H\033[2J")
				}
				fmt.Fprint(c.out, frame)
				if !tty {
					fmt.Fprintln(c.out)
				}
				last = frame
			}
		}
		if stop != nil || run.GetOperationRun().GetSummary().GetFinishedAt() != nil {
			if c.structured() {
				if err := c.emit(run, nil); err != nil {
					return err
				}
			}
			if stop != nil {
				return stop
			}
			return nil
		}
	}
}

// pollRollout reads the run with its stats and its targets up to the
// current phase, each call bounded by pollTimeout.
func pollRollout(ctx context.Context, c *env, id *flowv1.UUID) (*flowv1.GetOperationRunResponse, *flowv1.ListOperationRunTargetsResponse, error) {
	pctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	run, err := c.client.GetOperationRun(pctx, &flowv1.GetOperationRunRequest{Id: id, IncludeStats: true})
	if err != nil {
		return nil, nil, err
	}
	if c.structured() {
		return run, &flowv1.ListOperationRunTargetsResponse{}, nil
	}
	targets, err := c.client.ListOperationRunTargets(pctx, &flowv1.ListOperationRunTargetsRequest{OperationRunId: id,
		PhaseScope: flowv1.OperationRunTargetPhaseScope_OPERATION_RUN_TARGET_PHASE_SCOPE_CURRENT_AND_COMPLETED_PHASES,
		Pagination: &flowv1.Pagination{Limit: pageLimit}})
	return run, targets, err
}

// rolloutStop returns the error watch ends with for run's state: nil while
// it is pending or running, and when it completed.
func rolloutStop(run *flowv1.OperationRun, c *env, name string) error {
	s := run.GetSummary()
	state := runState(s.GetState())
	ref := "flow" + serverFlag(c) + " rollout"
	arg := shellQuote(name)
	switch s.GetState().GetStatus() {
	case flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PENDING, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_RUNNING,
		flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_UNKNOWN:
		return nil
	case flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED:
		if s.GetState().GetReason() == flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_PHASE_GATE {
			next := run.GetStats().GetCurrentPhaseStats().GetPhaseIndex() + 1
			return rolloutStopError{code: exitRolloutPhaseGate, msg: fmt.Sprintf("rollout %s paused at the phase gate (%s): %s\n  open phase %d: %s advance %s --expect %d",
				name, state, s.GetStatusMessage(), next, ref, arg, next)}
		}
		return rolloutStopError{code: exitRolloutPaused, msg: fmt.Sprintf("rollout %s paused (%s): %s\n  look:   %s get %s; %s targets %s --status failed\n  go on:  %s resume %s\n  stop:   %s cancel %s",
			name, state, s.GetStatusMessage(), ref, arg, ref, arg, ref, arg, ref, arg)}
	}
	return rolloutStopError{code: exitRolloutEndedBadly, msg: fmt.Sprintf("rollout %s ended %s: %s", name, state, s.GetStatusMessage())}
}

// rolloutInterrupted is the error of a rollout watch stopped by Ctrl-C.
func rolloutInterrupted(c *env, name string) error {
	return interruptedError{"interrupted: stopped watching; the rollout keeps running on the server\n" + rolloutHint(c, name)}
}

// rolloutHint says how to watch, pause or cancel the rollout.
func rolloutHint(c *env, name string) string {
	ref, arg := "flow"+serverFlag(c)+" rollout", shellQuote(name)
	return fmt.Sprintf("  watch it:  %s watch %s\n  pause it:  %s pause %s\n  cancel it: %s cancel %s", ref, arg, ref, arg, ref, arg)
}

// serverFlag is " --server ADDR" when the CLI talks to another server than
// the default, for the commands a hint prints.
func serverFlag(c *env) string {
	if c.server == DefaultServer {
		return ""
	}
	return " --server " + c.server
}

// shellQuote quotes s for a shell when it holds anything but plain
// characters.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// phaseLabel is how the CLI names the current phase: its index as the API
// numbers phases (from 0, as in expected_phase_index, the targets' PHASE
// column and the server's messages), with the range of the run's phases.
func phaseLabel(index, total int32) string {
	switch {
	case total <= 0:
		return fmt.Sprint(index)
	case total == 1:
		return fmt.Sprintf("%d (the only phase)", index)
	}
	return fmt.Sprintf("%d of phases 0-%d", index, total-1)
}

func isActiveTarget(s flowv1.OperationRunTargetStatus) bool {
	return s == flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_SUBMITTED || s == flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_BLOCKED
}

// rolloutFrame is one screen of watch.
func rolloutFrame(run *flowv1.OperationRun, targets []*flowv1.OperationRunTarget, names map[string]string) string {
	var b strings.Builder
	s := run.GetSummary()
	fmt.Fprintf(&b, "%s  %s  phase %s\n%s\n\n", s.GetName(), runState(s.GetState()),
		phaseLabel(run.GetStats().GetCurrentPhaseStats().GetPhaseIndex(), s.GetTotalPhases()), s.GetStatusMessage())
	type counts struct{ total, pending, inFlight, blocked, completed, failed, terminated, skipped int }
	per := map[int32]*counts{}
	var maxPhase int32 = -1
	var active []*flowv1.OperationRunTarget
	for _, t := range targets {
		p := per[t.GetPhaseIndex()]
		if p == nil {
			p = &counts{}
			per[t.GetPhaseIndex()] = p
		}
		maxPhase = max(maxPhase, t.GetPhaseIndex())
		p.total++
		switch t.GetStatus() {
		case flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_SUBMITTED:
			p.inFlight++
			active = append(active, t)
		case flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_BLOCKED:
			p.blocked++
			active = append(active, t)
		case flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_COMPLETED:
			p.completed++
		case flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_FAILED:
			p.failed++
		case flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_TERMINATED:
			p.terminated++
		case flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_SKIPPED:
			p.skipped++
		default:
			p.pending++
		}
	}
	rows := [][]string{}
	for ph := int32(0); ph <= maxPhase; ph++ {
		p := per[ph]
		if p == nil {
			continue
		}
		rows = append(rows, []string{strconv.Itoa(int(ph)), strconv.Itoa(p.total), strconv.Itoa(p.pending), strconv.Itoa(p.inFlight),
			strconv.Itoa(p.blocked), strconv.Itoa(p.completed), strconv.Itoa(p.failed), strconv.Itoa(p.terminated), strconv.Itoa(p.skipped)})
	}
	printTable(&b, []string{"PHASE", "TARGETS", "PENDING", "RUNNING", "BLOCKED", "COMPLETED", "FAILED", "TERMINATED", "SKIPPED"}, rows)
	if len(active) > 0 {
		fmt.Fprintln(&b)
		printRolloutTargets(&b, active, names, false)
	}
	return b.String()
}
