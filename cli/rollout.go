package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

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
	Racks            []string `yaml:"racks"` // empty: the whole site
	Percentage       int      `yaml:"percentage"`
	Seed             string   `yaml:"seed"`
	Phases           int      `yaml:"phases"`
	PhasePercentages []int    `yaml:"phase_percentages"`
	PhaseCounts      []int    `yaml:"phase_counts"`
	AutoAdvance      bool     `yaml:"auto_advance"`
	MaxConcurrent    int      `yaml:"max_concurrent"`
	GateRate         int      `yaml:"gate_rate"`
	GateCount        int      `yaml:"gate_count"`
	GateScope        string   `yaml:"gate_scope"`
	TargetVersion    string   `yaml:"target_version"`
	Rule             string   `yaml:"rule"`
	Exclude          []string `yaml:"exclude"`
	Ordering         string   `yaml:"ordering"`
	OrderingSeed     string   `yaml:"ordering_seed"`
	RetryTimeout     string   `yaml:"retry_timeout"`
	InitialDelay     string   `yaml:"initial_retry_delay"`
	MaxDelay         string   `yaml:"max_retry_delay"`
}

var rolloutStatuses = []string{"pending", "running", "paused", "completed", "completed_with_failures", "cancelled", "failed"}

var rolloutNoun = noun{
	name:    "rollout",
	aliases: []string{"rollouts", "operation-run"},
	summary: "operation runs: phased, gated firmware rollouts over the site",
	verbs: []verb{
		{name: "create", args: "(-f FILE | --name N ...) [flags]", summary: "plan and start a rollout (flags override the file's values)",
			flags: func(fs *pflag.FlagSet) runFunc {
				file := fs.StringP("file", "f", "", "YAML file with the fields below (underscores: max_concurrent, gate_rate, ...); - reads stdin")
				var s rolloutSpec
				fs.StringVar(&s.Name, "name", "", "run name (required)")
				fs.StringVar(&s.Description, "description", "", "description")
				fs.StringSliceVar(&s.Racks, "racks", nil, "racks (names or UUIDs, comma-separated); default: the whole site")
				fs.IntVar(&s.Percentage, "percentage", 0, "share of the candidate racks to upgrade, 1-100 (default 100)")
				fs.StringVar(&s.Seed, "seed", "", "selection seed (default: generated, shown by get)")
				fs.IntVar(&s.Phases, "phases", 0, "number of equal phases (default 1)")
				fs.IntSliceVar(&s.PhasePercentages, "phase-percentages", nil, "phase sizes in percent, adding up to 100 (e.g. 10,30,60)")
				fs.IntSliceVar(&s.PhaseCounts, "phase-counts", nil, "sizes of the first phases; a last phase takes the rest (e.g. 2,3)")
				fs.BoolVar(&s.AutoAdvance, "auto-advance", false, "open the next phase by itself (default: pause at each phase gate)")
				fs.IntVar(&s.MaxConcurrent, "max-concurrent", 0, "racks upgraded at once (required)")
				fs.IntVar(&s.GateRate, "gate-rate", 0, "pause when this percent of the planned targets failed")
				fs.IntVar(&s.GateCount, "gate-count", 0, "pause when this many targets failed")
				fs.StringVar(&s.GateScope, "gate-scope", "", "phase (default) or run: what the gates count over")
				fs.StringVar(&s.TargetVersion, "target-version", "", "firmware version to install")
				fs.StringVar(&s.Rule, "rule", "", "operation rule (name or UUID) instead of the resolved one")
				fs.StringSliceVar(&s.Exclude, "exclude", nil, "earlier rollouts (names or UUIDs) whose racks to leave out")
				fs.StringVar(&s.Ordering, "ordering", "", "random (default), row-by-row or round-robin (one rack per row in turn)")
				fs.StringVar(&s.OrderingSeed, "ordering-seed", "", "seed of the random ordering (default: generated)")
				fs.StringVar(&s.RetryTimeout, "retry-timeout", "", "pause when a busy rack blocks a target this long (default 1h)")
				fs.StringVar(&s.InitialDelay, "initial-retry-delay", "", "first wait before retrying a busy rack (default 30s)")
				fs.StringVar(&s.MaxDelay, "max-retry-delay", "", "longest wait between retries (default 5m)")
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
					mergeSpec(&spec, s, fs)
					req, err := rolloutRequest(ctx, c, spec)
					if err != nil {
						return err
					}
					res, err := c.client.CreateOperationRun(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "created rollout %s\n", res.GetId().GetId()) })
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
						if !ok {
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
				status := fs.String("status", "", "only targets in this status: pending, blocked, submitted, completed, failed, terminated, skipped")
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
						if !ok {
							return usageError{fmt.Errorf("--status: unknown target status %q", *status)}
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
		{name: "watch", args: "ROLLOUT [--interval D]", summary: "follow a rollout live: phases, per-phase counts, targets in flight; ends with the rollout", complete: rolloutNameList,
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
					return watchRollout(ctx, c, id, *interval)
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
	set("target-version", func() { s.TargetVersion = flags.TargetVersion })
	set("rule", func() { s.Rule = flags.Rule })
	set("exclude", func() { s.Exclude = flags.Exclude })
	set("ordering", func() { s.Ordering = flags.Ordering })
	set("ordering-seed", func() { s.OrderingSeed = flags.OrderingSeed })
	set("retry-timeout", func() { s.RetryTimeout = flags.RetryTimeout })
	set("initial-retry-delay", func() { s.InitialDelay = flags.InitialDelay })
	set("max-retry-delay", func() { s.MaxDelay = flags.MaxDelay })
}

// rolloutRequest builds the create request; the server validates the
// values (and names the field at fault), the CLI only their shape.
func rolloutRequest(ctx context.Context, c *env, s rolloutSpec) (*flowv1.CreateOperationRunRequest, error) {
	if s.Percentage == 0 {
		s.Percentage = 100
	}
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
	if s.TargetVersion != "" {
		fw.TargetVersion = ptr(s.TargetVersion)
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
			Selector:  &flowv1.OperationRunSelector{Selector: &flowv1.OperationRunSelector_Percentage{Percentage: &flowv1.PercentageSelector{Percentage: int32(s.Percentage), Seed: s.Seed}}},
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
	fmt.Fprintf(w, "Phase:       %d of %d (auto-advance: %t)\n", cur.GetPhaseIndex()+1, s.GetTotalPhases(), o.GetPhasePolicy().GetAdvancePolicy().GetAutoAdvance())
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

// watchRollout redraws the rollout's state every interval until it ends
// (or ctx does): phases so far with their counts, and the targets in
// flight or waiting on a busy rack.
func watchRollout(ctx context.Context, c *env, id *flowv1.UUID, interval time.Duration) error {
	tty := isTerminal(c.out)
	last := ""
	names := map[string]string{}
	for {
		res, err := c.client.GetOperationRun(ctx, &flowv1.GetOperationRunRequest{Id: id, IncludeStats: true})
		if err != nil {
			return err
		}
		run := res.GetOperationRun()
		targets, err := c.client.ListOperationRunTargets(ctx, &flowv1.ListOperationRunTargetsRequest{OperationRunId: id,
			PhaseScope: flowv1.OperationRunTargetPhaseScope_OPERATION_RUN_TARGET_PHASE_SCOPE_CURRENT_AND_COMPLETED_PHASES,
			Pagination: &flowv1.Pagination{Limit: pageLimit}})
		if err != nil {
			return err
		}
		for _, t := range targets.GetTargets() {
			if _, ok := names[t.GetRackId().GetId()]; !ok && isActiveTarget(t.GetStatus()) {
				for k, v := range rackNamesByID(ctx, c, []string{t.GetRackId().GetId()}) {
					names[k] = v
				}
			}
		}
		frame := rolloutFrame(run, targets.GetTargets(), names)
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
		if run.GetSummary().GetFinishedAt() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

func isActiveTarget(s flowv1.OperationRunTargetStatus) bool {
	return s == flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_SUBMITTED || s == flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_BLOCKED
}

// rolloutFrame is one screen of watch.
func rolloutFrame(run *flowv1.OperationRun, targets []*flowv1.OperationRunTarget, names map[string]string) string {
	var b strings.Builder
	s := run.GetSummary()
	fmt.Fprintf(&b, "%s  %s  phase %d/%d\n%s\n\n", s.GetName(), runState(s.GetState()),
		run.GetStats().GetCurrentPhaseStats().GetPhaseIndex()+1, s.GetTotalPhases(), s.GetStatusMessage())
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
		rows = append(rows, []string{strconv.Itoa(int(ph + 1)), strconv.Itoa(p.total), strconv.Itoa(p.pending), strconv.Itoa(p.inFlight),
			strconv.Itoa(p.blocked), strconv.Itoa(p.completed), strconv.Itoa(p.failed), strconv.Itoa(p.terminated), strconv.Itoa(p.skipped)})
	}
	printTable(&b, []string{"PHASE", "TARGETS", "PENDING", "RUNNING", "BLOCKED", "COMPLETED", "FAILED", "TERMINATED", "SKIPPED"}, rows)
	if len(active) > 0 {
		fmt.Fprintln(&b)
		printRolloutTargets(&b, active, names, false)
	}
	return b.String()
}
