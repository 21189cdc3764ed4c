package cli

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// baselineNoun is `flow baseline`: firmware baselines on Flow's admin
// service (docs/firmware.md).
var baselineNoun = noun{
	name:    "baseline",
	summary: "firmware baselines: the site's desired versions per component type and sub-component (docs/firmware.md)",
	verbs: []verb{
		{name: "create", args: "NAME (-f FILE | --set TYPE.SUB=VERSION...) [--activate]", summary: "create a baseline at revision 1",
			flags: func(fs *pflag.FlagSet) runFunc {
				e := baselineEditFlags(fs)
				activate := fs.Bool("activate", false, "make it the site's active baseline")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "NAME"); err != nil {
						return err
					}
					desc, entries, err := e.read(c)
					if err != nil {
						return err
					}
					res, err := c.admin.CreateBaseline(ctx, &adminv1.CreateBaselineRequest{Name: args[0], Description: desc, Entries: entries, Activate: *activate})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printBaseline(w, res) })
				}
			}},
		{name: "update", args: "NAME --revision N (-f FILE | --set TYPE.SUB=VERSION...) [--activate]", summary: "replace a baseline's entries with a new revision (refused when NAME moved past --revision since you read it)",
			flags: func(fs *pflag.FlagSet) runFunc {
				e := baselineEditFlags(fs)
				rev := fs.Int32("revision", 0, "the revision the change is based on: the newest when you read it (required)")
				activate := fs.Bool("activate", false, "make the new revision the site's active baseline")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "NAME"); err != nil {
						return err
					}
					if *rev <= 0 {
						return usageError{errors.New("--revision is required: the revision your change is based on (flow baseline get NAME shows the newest)")}
					}
					desc, entries, err := e.read(c)
					if err != nil {
						return err
					}
					res, err := c.admin.UpdateBaseline(ctx, &adminv1.UpdateBaselineRequest{Name: args[0], BaseRevision: *rev, Description: desc, Entries: entries, Activate: *activate})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printBaseline(w, res) })
				}
			}},
		{name: "list", summary: "list baselines at their newest revisions; ACTIVE names the active revision",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					res, err := c.admin.ListBaselines(ctx, &adminv1.ListBaselinesRequest{})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						rows := make([][]string, len(res.GetBaselines()))
						for i, b := range res.GetBaselines() {
							active := ""
							if b.GetActiveRevision() > 0 {
								active = fmt.Sprintf("revision %d", b.GetActiveRevision())
							}
							rows[i] = []string{b.GetName(), fmt.Sprint(b.GetRevision()), active, fmt.Sprint(len(b.GetEntries())), b.GetSource(),
								b.GetCreatedAt().AsTime().Local().Format(time.RFC3339), b.GetCreatedBy(), b.GetDescription()}
						}
						printTable(w, []string{"NAME", "REVISION", "ACTIVE", "ENTRIES", "SOURCE", "CHANGED", "BY", "DESCRIPTION"}, rows)
					})
				}
			}},
		{name: "get", args: "[NAME] [--revision N]", summary: "one revision of a baseline (default: the newest; no NAME: the active baseline) with its entries and history",
			flags: func(fs *pflag.FlagSet) runFunc {
				rev := fs.Int32("revision", 0, "the revision (0: the newest, or for the active baseline the active one)")
				return func(ctx context.Context, c *env, args []string) error {
					if len(args) > 1 {
						return usageError{errors.New("want [NAME]")}
					}
					name := ""
					if len(args) == 1 {
						name = args[0]
					}
					res, err := c.admin.GetBaseline(ctx, &adminv1.GetBaselineRequest{Name: name, Revision: *rev})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printBaseline(w, res) })
				}
			}},
		{name: "activate", args: "NAME [--revision N]", summary: "make a revision of a baseline (default: its newest) the site's active baseline",
			flags: func(fs *pflag.FlagSet) runFunc {
				rev := fs.Int32("revision", 0, "the revision to activate (0: the newest)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "NAME"); err != nil {
						return err
					}
					res, err := c.admin.ActivateBaseline(ctx, &adminv1.ActivateBaselineRequest{Name: args[0], Revision: *rev})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printBaseline(w, res) })
				}
			}},
		{name: "import", args: "NAME [--revision N] [--activate]", summary: "read the desired versions NICo Core holds into a baseline: a new one, or with --revision a new revision of NAME",
			flags: func(fs *pflag.FlagSet) runFunc {
				rev := fs.Int32("revision", 0, "revise NAME, based on this revision (0: create NAME)")
				desc := fs.String("description", "", "what this revision is (default: imported from NICo Core)")
				activate := fs.Bool("activate", false, "make it the site's active baseline")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "NAME"); err != nil {
						return err
					}
					res, err := c.admin.ImportBaseline(ctx, &adminv1.ImportBaselineRequest{Name: args[0], BaseRevision: *rev, Description: *desc, Activate: *activate})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						printBaseline(w, res)
						for _, warn := range res.GetWarnings() {
							fmt.Fprintln(c.errOut, "warning:", warn)
						}
					})
				}
			}},
		{name: "apply", args: "[NAME] [--dry-run] [--canary-racks N] [--waves N] [--max-concurrent N] [--max-failures N]", summary: "upgrade exactly the racks whose devices are below the baseline (default: the active one) in one operation run, in waves that keep every NVLink domain whole, the canary first; with nothing to do it creates nothing",
			flags: func(fs *pflag.FlagSet) runFunc {
				dry := fs.Bool("dry-run", false, "print the plan, create nothing")
				canary := fs.Int32("canary-racks", 1, "racks in the first wave, rounded up to whole NVLink domains")
				waves := fs.Int32("waves", 2, "waves after the canary")
				maxConc := fs.Int32("max-concurrent", 10, "racks upgraded at once")
				maxFail := fs.Int32("max-failures", 1, "failed racks that stop a wave (the run's failure-count gate)")
				downgrades := fs.Bool("include-downgrades", false, "also bring devices above the baseline down to it")
				runName := fs.String("name", "", "the run's name (default baseline-NAME-rREVISION)")
				allowOverlap := fs.Bool("allow-overlap", false, "create the run even when its racks overlap an unfinished run's (refused otherwise, naming it)")
				return func(ctx context.Context, c *env, args []string) error {
					if len(args) > 1 {
						return usageError{errors.New("want [NAME]")}
					}
					req := &adminv1.ApplyBaselineRequest{DryRun: *dry, CanaryRacks: *canary, Waves: *waves, MaxConcurrent: *maxConc, MaxFailures: *maxFail,
						IncludeDowngrades: *downgrades, RunName: *runName, AllowOverlap: *allowOverlap}
					if len(args) == 1 {
						req.Baseline = args[0]
					}
					for _, f := range []struct {
						name string
						v    int32
					}{{"--canary-racks", *canary}, {"--waves", *waves}, {"--max-concurrent", *maxConc}, {"--max-failures", *maxFail}} {
						if f.v < 1 {
							return usageError{fmt.Errorf("%s must be at least 1, not %d", f.name, f.v)}
						}
					}
					res, err := c.admin.ApplyBaseline(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						fmt.Fprintln(w, res.GetMessage())
						if len(res.GetWaves()) == 0 {
							return
						}
						fmt.Fprintln(w, "versions:", res.GetTargetVersion())
						rows := make([][]string, len(res.GetWaves()))
						for i, wv := range res.GetWaves() {
							rows[i] = []string{fmt.Sprint(wv.GetPhase()), fmt.Sprint(len(wv.GetRacks())), strings.Join(wv.GetNvlDomains(), ","), strings.Join(wv.GetRacks(), ",")}
						}
						printTable(w, []string{"WAVE", "RACKS", "NVL DOMAINS", "RACK NAMES"}, rows)
					})
				}
			}},
	},
}

// baselineEdit is the entries of a create or update: a file or --set.
type baselineEdit struct {
	file, desc *string
	set        *[]string
}

func baselineEditFlags(fs *pflag.FlagSet) baselineEdit {
	return baselineEdit{
		file: fs.StringP("file", "f", "", "YAML or JSON file: description and entries [{component_type, component, version, vendor, model, rack_profile}] (- for stdin)"),
		set:  fs.StringArray("set", nil, "one entry TYPE.SUB=VERSION, e.g. compute.bmc=2.0 or nvswitch.nvos=25.02 (repeatable; beside -f, added to the file's)"),
		desc: fs.String("description", "", "what this revision is for"),
	}
}

// baselineFile is the -f file's shape.
type baselineFile struct {
	Description string `yaml:"description"`
	Entries     []struct {
		ComponentType string `yaml:"component_type"`
		Component     string `yaml:"component"`
		Version       string `yaml:"version"`
		Vendor        string `yaml:"vendor"`
		Model         string `yaml:"model"`
		RackProfile   string `yaml:"rack_profile"`
	} `yaml:"entries"`
}

func (e baselineEdit) read(c *env) (string, []*adminv1.BaselineEntry, error) {
	desc := *e.desc
	var out []*adminv1.BaselineEntry
	if *e.file != "" {
		b, err := c.readFileArg(*e.file)
		if err != nil {
			return "", nil, err
		}
		var f baselineFile
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil {
			return "", nil, usageError{fmt.Errorf("%s: %w", *e.file, err)}
		}
		if desc == "" {
			desc = f.Description
		}
		for _, x := range f.Entries {
			out = append(out, &adminv1.BaselineEntry{ComponentType: x.ComponentType, Component: x.Component, Version: x.Version,
				Vendor: x.Vendor, Model: x.Model, RackProfile: x.RackProfile})
		}
	}
	for _, s := range *e.set {
		key, version, ok := strings.Cut(s, "=")
		typ, sub, ok2 := strings.Cut(key, ".")
		if !ok || !ok2 || typ == "" || sub == "" {
			return "", nil, usageError{fmt.Errorf("--set %q: want TYPE.SUB=VERSION, e.g. compute.bmc=2.0", s)}
		}
		out = append(out, &adminv1.BaselineEntry{ComponentType: typ, Component: sub, Version: version})
	}
	if len(out) == 0 {
		return "", nil, usageError{errors.New("give the entries: -f FILE or --set TYPE.SUB=VERSION")}
	}
	return desc, out, nil
}

// printBaseline writes a baseline's header, entries and history.
func printBaseline(w io.Writer, res *adminv1.BaselineResponse) {
	b := res.GetBaseline()
	active := "not active"
	if b.GetActiveRevision() > 0 {
		active = fmt.Sprintf("active: revision %d, by %s at %s", b.GetActiveRevision(), or(b.GetActivatedBy(), "-"), b.GetActivatedAt().AsTime().Local().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "baseline %s revision %d of %d (%s)\n", b.GetName(), b.GetRevision(), b.GetLatestRevision(), active)
	fmt.Fprintf(w, "changed by %s at %s (%s)", or(b.GetCreatedBy(), "-"), b.GetCreatedAt().AsTime().Local().Format(time.RFC3339), b.GetSource())
	if b.GetDescription() != "" {
		fmt.Fprintf(w, ": %s", b.GetDescription())
	}
	fmt.Fprintln(w)
	rows := make([][]string, len(b.GetEntries()))
	for i, e := range b.GetEntries() {
		rows[i] = []string{e.GetComponentType(), e.GetComponent(), e.GetVersion(), e.GetVendor(), e.GetModel(), e.GetRackProfile()}
	}
	printTable(w, []string{"TYPE", "COMPONENT", "VERSION", "VENDOR", "MODEL", "RACK PROFILE"}, rows)
	if len(b.GetHistory()) > 1 {
		fmt.Fprintln(w, "\nhistory:")
		rows = make([][]string, len(b.GetHistory()))
		for i, h := range b.GetHistory() {
			rows[i] = []string{fmt.Sprint(h.GetRevision()), h.GetCreatedAt().AsTime().Local().Format(time.RFC3339), h.GetCreatedBy(), h.GetSource(), fmt.Sprint(h.GetEntryCount()), h.GetDescription()}
		}
		printTable(w, []string{"REVISION", "CHANGED", "BY", "SOURCE", "ENTRIES", "DESCRIPTION"}, rows)
	}
}

// complianceNoun is `flow compliance`: every device against the active
// baseline.
var complianceNoun = noun{
	name:    "compliance",
	summary: "firmware compliance: every device's installed versions against the active baseline (docs/firmware.md)",
	verbs: []verb{{name: "", args: "[--state S]... [--type T] [--rack R]... [--nvl-domain D] [--row R] [--hall H] [--by rack|nvl_domain|row|hall] [--all]",
		summary: "prints the site's counts by state, the roll-ups --by asks for, and the devices (by default those not compliant; --all every one, --state picks), a page at a time (--limit, --offset); -o csv prints the devices as CSV, -o json|yaml the whole answer",
		flags: func(fs *pflag.FlagSet) runFunc {
			states := fs.StringArray("state", nil, "only devices in this state: compliant, upgrade, downgrade, unknown, updating, not_covered (repeatable)")
			all := fs.Bool("all", false, "every device, compliant ones included")
			typ := fs.String("type", "", "only this component type: compute, nvswitch, powershelf")
			racks := fs.StringArray("rack", nil, "only this rack, by name or UUID (repeatable)")
			domain := fs.String("nvl-domain", "", "only racks of this NVLink domain, by name or UUID")
			row := fs.String("row", "", "only racks of this row (as the floor map reads it from their position)")
			hall := fs.String("hall", "", "only racks of this hall (their location's room)")
			by := fs.StringArray("by", nil, "roll-ups to print: rack, nvl_domain, row, hall (repeatable)")
			limit := fs.Int32("limit", 100, "devices per page (at most 1000)")
			offset := fs.Int32("offset", 0, "devices to skip")
			baselineName := fs.String("baseline", "", "measure against this baseline instead of the active one")
			return func(ctx context.Context, c *env, args []string) error {
				if err := wantArgs(args, 0, "no arguments"); err != nil {
					return err
				}
				req := &adminv1.GetComplianceRequest{Baseline: *baselineName, States: *states, ComponentType: *typ, Racks: *racks, NvlDomain: *domain,
					Row: *row, Hall: *hall, GroupBy: *by, Limit: *limit, Offset: *offset}
				if len(req.States) == 0 && !*all {
					req.States = []string{"upgrade", "downgrade", "unknown", "updating"}
				}
				res, err := c.admin.GetCompliance(ctx, req)
				if err != nil {
					return err
				}
				if c.format == "csv" {
					return writeComplianceCSV(c.out, res)
				}
				return c.emit(res, func(w io.Writer) { printCompliance(w, res, c.wide()) })
			}
		}}},
}

func printCompliance(w io.Writer, res *adminv1.GetComplianceResponse, wide bool) {
	s := res.GetSite()
	fmt.Fprintf(w, "baseline %s revision %d: %d devices: %d compliant, %d upgrade, %d downgrade, %d unknown, %d updating, %d not covered\n",
		res.GetBaseline(), res.GetRevision(), s.GetTotal(), s.GetCompliant(), s.GetUpgrade(), s.GetDowngrade(), s.GetUnknown(), s.GetUpdating(), s.GetNotCovered())
	if len(res.GetGroups()) > 0 {
		fmt.Fprintln(w)
		rows := make([][]string, len(res.GetGroups()))
		for i, g := range res.GetGroups() {
			n := g.GetCounts()
			rows[i] = []string{g.GetKind(), g.GetName(), g.GetState(), fmt.Sprint(n.GetTotal()), fmt.Sprint(n.GetCompliant()), fmt.Sprint(n.GetUpgrade()),
				fmt.Sprint(n.GetDowngrade()), fmt.Sprint(n.GetUnknown()), fmt.Sprint(n.GetUpdating())}
		}
		printTable(w, []string{"BY", "NAME", "STATE", "DEVICES", "COMPLIANT", "UPGRADE", "DOWNGRADE", "UNKNOWN", "UPDATING"}, rows)
	}
	fmt.Fprintln(w)
	headers := []string{"DEVICE", "TYPE", "RACK", "STATE", "DIFFERENCES"}
	if wide {
		headers = append(headers, "NVL DOMAIN", "ROW", "HALL", "SEEN", "CORE ID")
	}
	rows := make([][]string, len(res.GetDevices()))
	for i, d := range res.GetDevices() {
		rows[i] = []string{d.GetName(), d.GetComponentType(), d.GetRackName(), d.GetState(), differences(d)}
		if wide {
			seen := ""
			if d.GetSeenAt() != nil {
				seen = d.GetSeenAt().AsTime().Local().Format(time.RFC3339)
			}
			rows[i] = append(rows[i], d.GetNvlDomain(), d.GetRow(), d.GetHall(), seen, d.GetExternalId())
		}
	}
	printTable(w, headers, rows)
	if shown := len(res.GetDevices()); int32(shown) < res.GetTotal() {
		fmt.Fprintf(w, "(%d of %d devices shown; --offset and --limit page)\n", shown, res.GetTotal())
	}
}

// differences says what is off on a device: "bmc 1.9→2.0; nic ? (not
// reported)", or its reason.
func differences(d *adminv1.DeviceCompliance) string {
	var parts []string
	for _, x := range d.GetDifferences() {
		if x.GetState() == "unknown" {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", x.GetComponent(), or(strings.Join(x.GetInstalled(), ","), "?"), x.GetReason()))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s→%s", x.GetComponent(), strings.Join(x.GetInstalled(), ","), x.GetDesired()))
	}
	if len(parts) == 0 {
		return d.GetReason()
	}
	return strings.Join(parts, "; ")
}

// writeComplianceCSV writes one row per device and differing
// sub-component (a device at the baseline: one row without one).
func writeComplianceCSV(w io.Writer, res *adminv1.GetComplianceResponse) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"device", "component_id", "type", "rack", "nvl_domain", "row", "hall", "state", "reason", "sub_component", "sub_state", "desired", "installed", "seen_at"})
	for _, d := range res.GetDevices() {
		seen := ""
		if d.GetSeenAt() != nil {
			seen = d.GetSeenAt().AsTime().UTC().Format(time.RFC3339)
		}
		base := []string{d.GetName(), d.GetComponentId(), d.GetComponentType(), d.GetRackName(), d.GetNvlDomain(), d.GetRow(), d.GetHall(), d.GetState(), d.GetReason()}
		if len(d.GetDifferences()) == 0 {
			_ = cw.Write(append(base, "", "", "", "", seen))
			continue
		}
		for _, x := range d.GetDifferences() {
			_ = cw.Write(append(append([]string{}, base...), x.GetComponent(), x.GetState(), x.GetDesired(), strings.Join(x.GetInstalled(), " "), seen))
		}
	}
	cw.Flush()
	return cw.Error()
}
