package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CLI nouns of the other rack operations: firmware upgrade, bring-up,
// ingestion and decommission. Like the power verbs each submits one task
// per rack and prints the task IDs; --wait follows them to the end.
// Firmware credentials come from a file or stdin, never from a flag (flags
// show in ps and shell history).

// rackOp is what a rack-operation verb's common flags say.
type rackOp struct {
	spec        *flowv1.OperationTargetSpec
	description string
	queue       *flowv1.QueueOptions
	ruleID      *flowv1.UUID
	override    bool
	dryRun      bool // --dry-run: preview, submit nothing
}

// rackOpFlags declares what a rack-operation verb offers beyond targets,
// rule and description.
type rackOpFlags struct {
	queue      bool // --queue, --queue-timeout
	override   bool // --override-readiness
	components bool // --component
	dryRun     bool // --dry-run
}

type rackOpSubmitFunc func(ctx context.Context, c *env, r rackOp) (*flowv1.SubmitTaskResponse, error)

// rackOpVerb builds a rack-operation verb. extra declares the verb's own
// flags and returns the submit call that reads them.
func rackOpVerb(name, args, summary string, f rackOpFlags, extra func(fs *pflag.FlagSet) rackOpSubmitFunc) verb {
	return verb{name: name, args: args, summary: summary, complete: rackNameList,
		flags: func(fs *pflag.FlagSet) runFunc {
			var comps []string
			if f.components {
				fs.StringArrayVar(&comps, "component", nil, "target this component (name or UUID) instead of racks; repeatable")
			}
			types := fs.String("type", "", "only these component types of the racks, comma-separated: compute, nvswitch, powershelf, torswitch, ums, cdu")
			queue, queueTimeout := new(bool), new(time.Duration)
			if f.queue {
				queue = fs.Bool("queue", false, "queue behind a conflicting task instead of being rejected")
				queueTimeout = fs.Duration("queue-timeout", 0, "with --queue: how long the task may wait (0: the server's default, 1h)")
			}
			override := new(bool)
			if f.override {
				override = fs.Bool("override-readiness", false, "bypass the readiness gate (logged by the server)")
			}
			rule := fs.String("rule", "", "run this operation rule (name or UUID) instead of the rack's or the default rule")
			descr := fs.String("description", "", "task description")
			dryRun := new(bool)
			if f.dryRun {
				dryRun = fs.Bool("dry-run", false, "print the plan (racks, conflicts, open leaks, plan hash) and submit nothing")
			}
			wait := fs.Bool("wait", false, "wait for every task to end, showing progress; exit 1 unless all completed")
			interval := fs.Duration("interval", defaultPollInterval, "with --wait: how often to poll the server")
			submit := extra(fs)
			return func(ctx context.Context, c *env, args []string) error {
				r := rackOp{description: *descr, override: *override, dryRun: *dryRun}
				var err error
				if r.spec, err = powerTargets(ctx, c, args, comps, *types); err != nil {
					return err
				}
				if *queue {
					if *queueTimeout < 0 {
						return usageError{errors.New("--queue-timeout must not be negative")}
					}
					r.queue = &flowv1.QueueOptions{ConflictStrategy: flowv1.ConflictStrategy_CONFLICT_STRATEGY_QUEUE,
						QueueTimeoutSeconds: int32((*queueTimeout + time.Second - 1) / time.Second)}
				} else if *queueTimeout != 0 {
					return usageError{errors.New("--queue-timeout needs --queue")}
				}
				if *rule != "" {
					if r.ruleID, err = resolveRule(ctx, c, *rule); err != nil {
						return err
					}
				}
				if *interval <= 0 {
					return usageError{errors.New("--interval must be positive")}
				}
				res, err := submit(ctx, c, r)
				if err != nil || r.dryRun {
					return err // a dry run printed its plan
				}
				if *wait {
					return waitTasks(ctx, c, res.GetTaskIds(), *interval)
				}
				if c.structured() {
					return c.emit(res, nil)
				}
				tasks, err := c.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: res.GetTaskIds()})
				if err != nil {
					return err
				}
				names := rackNames(ctx, c, tasks.GetTasks())
				return c.emit(res, func(w io.Writer) { printSubmitted(w, tasks.GetTasks(), names, false) })
			}
		}}
}

var firmwareNoun = noun{
	name:    "firmware",
	summary: "firmware upgrades of racks or components, one task per rack (docs/firmware.md)",
	verbs: []verb{
		rackOpVerb("upgrade",
			"RACK... | --component C... [--type T,...] [--version V] [--sub-target bmc,...] [--start RFC3339] [--end RFC3339] "+
				"[--credentials-file F | --credentials-stdin [--per-component]] [--override-version] [--override-readiness] "+
				"[--queue [--queue-timeout D]] [--rule RULE] [--description D] [--wait]",
			"start a firmware update per component type and poll it to the end (by the rule in force: compute trays, then NVSwitches)",
			rackOpFlags{queue: true, override: true, components: true, dryRun: true}, firmwareUpgradeFlags(os.Stdin)),
	},
}

// firmwareUpgradeFlags declares upgrade's own flags; credentials are read
// from stdin when --credentials-stdin is given.
func firmwareUpgradeFlags(stdin io.Reader) func(fs *pflag.FlagSet) rackOpSubmitFunc {
	return func(fs *pflag.FlagSet) rackOpSubmitFunc {
		version := fs.String("version", "", `target version; a JSON object such as {"compute":"1.2","nvswitch":"3.4"} gives one per component type (empty: the backend decides)`)
		var subs []string
		fs.StringArrayVar(&subs, "sub-target", nil, "firmware parts to update, comma-separated or repeated (compute: bmc, bios, cec, nic, cpld_mb, cpld_pdb, hgx_bmc, combined_bmc_uefi, gpu, cx7; switch: bmc, cpld, bios, nvos; shelf: pmc, psu); empty: the whole bundle")
		start := fs.String("start", "", "window start, RFC 3339")
		end := fs.String("end", "", "window end, RFC 3339")
		credFile := fs.String("credentials-file", "", "file holding the download credentials (the token; with --per-component a JSON object with compute, nvswitch and powershelf keys)")
		credStdin := fs.Bool("credentials-stdin", false, "read the credentials from stdin instead of a file")
		perComponent := fs.Bool("per-component", false, "the credentials are a JSON object of one token per component type")
		overrideVersion := fs.Bool("override-version", false, "skip version checks (re-apply the same version or downgrade where the backend allows)")
		return func(ctx context.Context, c *env, r rackOp) (*flowv1.SubmitTaskResponse, error) {
			req := &flowv1.UpgradeFirmwareRequest{
				TargetSpec: r.spec, Description: r.description, QueueOptions: r.queue, RuleId: r.ruleID,
				OverrideReadinessCheck: r.override, OverrideVersionCheck: *overrideVersion,
			}
			if *version != "" {
				req.TargetVersion = version
			}
			for _, s := range subs {
				for _, p := range strings.Split(s, ",") {
					if p = strings.TrimSpace(p); p != "" {
						req.SubTargets = append(req.SubTargets, p)
					}
				}
			}
			var err error
			if req.StartTime, err = timeFlag("--start", *start); err != nil {
				return nil, err
			}
			if req.EndTime, err = timeFlag("--end", *end); err != nil {
				return nil, err
			}
			if req.AuthenticationData, err = readCredentials(*credFile, *credStdin, *perComponent, stdin); err != nil {
				return nil, err
			}
			if r.dryRun {
				return nil, previewSubmission(ctx, c, &adminv1.PreviewSubmissionRequest{Request: &adminv1.PreviewSubmissionRequest_UpgradeFirmware{UpgradeFirmware: req}})
			}
			return c.client.UpgradeFirmware(ctx, req)
		}
	}
}

func timeFlag(name, v string) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: want RFC 3339 such as 2026-01-02T15:04:05Z: %v", name, err)}
	}
	return timestamppb.New(t), nil
}

// readCredentials reads firmware credentials from a file or stdin: the
// whole (trimmed) content is the shared token, or with perComponent a JSON
// object {"compute": …, "nvswitch": …, "powershelf": …}.
func readCredentials(file string, fromStdin, perComponent bool, stdin io.Reader) (*flowv1.FirmwareAuthenticationData, error) {
	var raw []byte
	var err error
	switch {
	case file != "" && fromStdin:
		return nil, usageError{errors.New("give --credentials-file or --credentials-stdin, not both")}
	case file != "":
		if raw, err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("read credentials: %w", err)
		}
	case fromStdin:
		if raw, err = io.ReadAll(stdin); err != nil {
			return nil, fmt.Errorf("read credentials from stdin: %w", err)
		}
	case perComponent:
		return nil, usageError{errors.New("--per-component needs --credentials-file or --credentials-stdin")}
	default:
		return nil, nil
	}
	text := strings.TrimSpace(string(raw))
	if text == "" {
		return nil, usageError{errors.New("the credentials are empty")}
	}
	if !perComponent {
		return &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_Shared{Shared: text}}, nil
	}
	var m struct {
		Compute    *string `json:"compute"`
		NVSwitch   *string `json:"nvswitch"`
		PowerShelf *string `json:"powershelf"`
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		// Never echo the content: it is a secret.
		return nil, usageError{errors.New(`--per-component credentials must be a JSON object with keys compute, nvswitch and/or powershelf`)}
	}
	return &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_PerComponent{
		PerComponent: &flowv1.PerComponentFirmwareAuthenticationData{Compute: m.Compute, Nvswitch: m.NVSwitch, Powershelf: m.PowerShelf},
	}}, nil
}

// Bring-up, ingestion and decommission are one-verb nouns: `flow bringup
// RACK...`.
var (
	bringUpNoun = noun{
		name:    "bringup",
		summary: "bring racks up: power on, compute firmware, switch firmware consistency, compute power cycle (by the rule in force); no queueing",
		verbs: []verb{rackOpVerb("", "RACK... | --component C... [--type T,...] [--override-readiness] [--rule RULE] [--description D] [--wait]",
			"submit bring-up tasks, one per rack", rackOpFlags{override: true, components: true},
			func(fs *pflag.FlagSet) rackOpSubmitFunc {
				return func(ctx context.Context, c *env, r rackOp) (*flowv1.SubmitTaskResponse, error) {
					return c.client.BringUpRack(ctx, &flowv1.BringUpRackRequest{TargetSpec: r.spec, Description: r.description, RuleId: r.ruleID, OverrideReadinessCheck: r.override})
				}
			})},
	}
	ingestNoun = noun{
		name:    "ingest",
		summary: "ingest racks: declare their compute trays and NVSwitches to NICo Core (expected inventory); no queueing",
		verbs: []verb{rackOpVerb("", "RACK... | --component C... [--type T,...] [--rule RULE] [--description D] [--wait]",
			"submit ingestion tasks, one per rack", rackOpFlags{components: true},
			func(fs *pflag.FlagSet) rackOpSubmitFunc {
				return func(ctx context.Context, c *env, r rackOp) (*flowv1.SubmitTaskResponse, error) {
					return c.client.IngestRack(ctx, &flowv1.IngestRackRequest{TargetSpec: r.spec, Description: r.description, RuleId: r.ruleID})
				}
			})},
	}
	decommissionNoun = noun{
		name:    "decommission",
		summary: "decommission racks in NICo Core and wait until done: compute trays, then NVSwitches, then power shelves",
		verbs: []verb{rackOpVerb("", "RACK... [--type T,...] [--queue [--queue-timeout D]] [--rule RULE] [--description D] [--wait]",
			"submit decommission tasks, one per rack", rackOpFlags{queue: true},
			func(fs *pflag.FlagSet) rackOpSubmitFunc {
				return func(ctx context.Context, c *env, r rackOp) (*flowv1.SubmitTaskResponse, error) {
					return c.client.DecommissionRack(ctx, &flowv1.DecommissionRackRequest{TargetSpec: r.spec, Description: r.description, QueueOptions: r.queue, RuleId: r.ruleID})
				}
			})},
	}
)
