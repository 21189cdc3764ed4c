package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// rackSetVerb is `flow rack set`: a rack's power feed and coolant loop on
// Flow's admin service (docs/operations.md "Feeds, loops and power
// budgets").
var rackSetVerb = verb{name: "set", complete: rackNameList, args: "RACK [--feed NAME] [--loop NAME]",
	summary: "set a rack's power feed and coolant loop (RACK by name or UUID; an empty value clears; admin)",
	flags: func(fs *pflag.FlagSet) runFunc {
		feed := fs.String("feed", "", `the rack's power feed (busway, PDU or row feed), e.g. hall-a/bw-3; "" clears`)
		loop := fs.String("loop", "", `the rack's coolant loop (its CDU's), e.g. cdu-12; "" clears`)
		return func(ctx context.Context, c *env, args []string) error {
			if err := wantArgs(args, 1, "RACK"); err != nil {
				return err
			}
			req := &adminv1.SetRackPlacementRequest{Rack: args[0]}
			if fs.Changed("feed") {
				req.PowerFeed = feed
			}
			if fs.Changed("loop") {
				req.CoolantLoop = loop
			}
			if req.PowerFeed == nil && req.CoolantLoop == nil {
				return usageError{fmt.Errorf("give --feed or --loop (an empty value clears)")}
			}
			res, err := c.admin.SetRackPlacement(ctx, req)
			if err != nil {
				return err
			}
			return c.emit(res, func(w io.Writer) {
				printTable(w, []string{"RACK", "ID", "FEED", "LOOP"}, [][]string{{res.GetRackName(), res.GetRackId(), dash(res.GetPowerFeed()), dash(res.GetCoolantLoop())}})
			})
		}
	}}

// powerBudgetNoun is `flow power-budget`: feeds' power budgets.
var powerBudgetNoun = noun{
	name:    "power-budget",
	aliases: []string{"power-budgets"},
	summary: "power budgets of feeds: how many power transitions (on, cycle, reset, AC cycle, rebooting firmware) may be in progress at once on a feed's racks (docs/operations.md)",
	verbs: []verb{
		{name: "set", args: "FEED --max-transitions N [--kw K]", summary: "set a feed's budget: at most N (>= 1) transitions at once, and optionally at most K kW (> 0) of their draw (admin)",
			flags: func(fs *pflag.FlagSet) runFunc {
				n := fs.Int("max-transitions", 0, "most power transitions in progress at once on the feed's racks (>= 1)")
				kw := fs.Float64("kw", 0, "most kW the transitions in progress may draw (> 0; FLOW_POWER_TRAY_KW per compute tray, FLOW_POWER_SHELF_KW per shelf)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "FEED"); err != nil {
						return err
					}
					if !fs.Changed("max-transitions") {
						return usageError{fmt.Errorf("--max-transitions is required (at least 1)")}
					}
					if *n < 1 {
						return usageError{fmt.Errorf("--max-transitions must be at least 1, not %d (delete the budget to lift it)", *n)}
					}
					req := &adminv1.SetPowerBudgetRequest{Feed: args[0], MaxTransitions: int32(min(*n, 1<<31-1))}
					if fs.Changed("kw") {
						if !(*kw > 0) {
							return usageError{fmt.Errorf("--kw must be above 0, not %v (leave it out for no kW budget)", *kw)}
						}
						req.MaxKw = kw
					}
					res, err := c.admin.SetPowerBudget(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printPowerBudgets(w, []*adminv1.PowerBudget{res.GetBudget()}) })
				}
			}},
		{name: "list", summary: "list the feeds (of racks or budgets) with their budgets and what is in progress now",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					res, err := c.admin.ListPowerBudgets(ctx, &adminv1.ListPowerBudgetsRequest{})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printPowerBudgets(w, res.GetBudgets()) })
				}
			}},
		{name: "delete", args: "FEED", summary: "remove a feed's budget: its waiting transitions go on (admin)",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "FEED"); err != nil {
						return err
					}
					res, err := c.admin.DeletePowerBudget(ctx, &adminv1.DeletePowerBudgetRequest{Feed: args[0]})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "deleted the power budget of feed %s\n", res.GetBudget().GetFeed()) })
				}
			}},
	},
}

func printPowerBudgets(w io.Writer, bs []*adminv1.PowerBudget) {
	rows := make([][]string, len(bs))
	for i, b := range bs {
		limit, kw := "-", "-"
		if b.GetHasBudget() {
			limit = strconv.Itoa(int(b.GetMaxTransitions()))
		}
		if b.MaxKw != nil {
			kw = fmt.Sprintf("%s / %s", fmtKW(b.GetKwInUse()), fmtKW(b.GetMaxKw()))
		} else if b.GetKwInUse() > 0 {
			kw = fmtKW(b.GetKwInUse()) + " / -"
		}
		rows[i] = []string{b.GetFeed(), dash(strings.Join(b.GetHalls(), ",")), strconv.Itoa(int(b.GetRacks())),
			fmt.Sprintf("%d / %s", b.GetTransitionsInUse(), limit), kw, strconv.Itoa(int(b.GetWaiting()))}
	}
	printTable(w, []string{"FEED", "HALLS", "RACKS", "TRANSITIONS", "KW", "WAITING"}, rows)
}

func fmtKW(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// dash is s, or "-" when empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
