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

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// CLI noun rack isolation: the leak tiers' rack isolations
// (docs/operations.md "Rack isolation"), and the BMS's leak reports (flow
// leak report).

var rackIsolationNoun = noun{
	name:    "isolation",
	summary: "rack isolations after a severe or critical coolant leak: the facility's acknowledgement, an operator's clear, an admin's override",
	verbs: []verb{
		{name: "list", args: "[--all] [--limit N]", summary: "open isolations, newest first (--all: cleared ones too)",
			flags: func(fs *pflag.FlagSet) runFunc {
				all := fs.Bool("all", false, "cleared isolations too")
				limit := fs.Int32("limit", 0, "at most this many (0: 100)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					res, err := c.admin.ListIsolations(ctx, &adminv1.ListIsolationsRequest{All: *all, Limit: *limit})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printIsolations(w, res.GetIsolations()) })
				}
			}},
		{name: "ack", complete: rackNameList, args: "RACK [--note TEXT]", summary: "record the facility's acknowledgement of the rack's isolation request: Flow stops re-sending it (operator)",
			flags: func(fs *pflag.FlagSet) runFunc {
				note := fs.String("note", "", "recorded with the acknowledgement")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "RACK"); err != nil {
						return err
					}
					res, err := c.admin.AcknowledgeIsolation(ctx, &adminv1.AcknowledgeIsolationRequest{Rack: args[0], Note: *note})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						i := res.GetIsolation()
						fmt.Fprintf(w, "isolation %s of rack %s acknowledged by %s after %d request(s)\n", i.GetId(), or(i.GetRackName(), i.GetRackId()), i.GetAcknowledgedBy(), i.GetSends())
					})
				}
			}},
		{name: "clear", complete: rackNameList, args: "RACK --reason TEXT", summary: "end the rack's isolation: it and the racks on its coolant loop may be powered on again (operator, audited)",
			flags: func(fs *pflag.FlagSet) runFunc {
				reason := fs.String("reason", "", "why the rack is safe again (required; recorded and audited)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "RACK"); err != nil {
						return err
					}
					if strings.TrimSpace(*reason) == "" {
						return errors.New("--reason is required: say why the rack is safe to power on again")
					}
					res, err := c.admin.ClearIsolation(ctx, &adminv1.ClearIsolationRequest{Rack: args[0], Reason: *reason})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						i := res.GetIsolation()
						fmt.Fprintf(w, "isolation %s of rack %s cleared by %s: %s\n", i.GetId(), or(i.GetRackName(), i.GetRackId()), i.GetClearedBy(), i.GetClearReason())
					})
				}
			}},
		{name: "override", complete: rackNameList, args: "RACK --reason TEXT", summary: "let power-on of RACK through despite the open isolations that refuse it (its own, or its loop's) until they are cleared (admin, audited)",
			flags: func(fs *pflag.FlagSet) runFunc {
				reason := fs.String("reason", "", "why powering the rack on is safe (required; recorded and audited)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "RACK"); err != nil {
						return err
					}
					if strings.TrimSpace(*reason) == "" {
						return errors.New("--reason is required: say why powering the rack on is safe")
					}
					res, err := c.admin.OverrideIsolation(ctx, &adminv1.OverrideIsolationRequest{Rack: args[0], Reason: *reason})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						for _, i := range res.GetIsolations() {
							fmt.Fprintf(w, "isolation %s (rack %s) overridden for rack %s\n", i.GetId(), or(i.GetRackName(), i.GetRackId()), args[0])
						}
					})
				}
			}},
	},
}

func printIsolations(w io.Writer, list []*adminv1.Isolation) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no isolations")
		return
	}
	rows := make([][]string, len(list))
	for i, o := range list {
		state := "requested"
		switch {
		case o.GetClearedAt() != nil:
			state = "cleared by " + o.GetClearedBy()
		case o.GetAcknowledgedAt() != nil:
			state = "acknowledged by " + o.GetAcknowledgedBy()
		}
		rows[i] = []string{or(o.GetRackName(), o.GetRackId()), o.GetTier(), or(o.GetPowerFeed(), "-"), or(o.GetCoolantLoop(), "-"),
			o.GetRequestedAt().AsTime().Local().Format(time.RFC3339), strconv.Itoa(int(o.GetSends())), state, o.GetReason()}
	}
	printTable(w, []string{"RACK", "TIER", "FEED", "LOOP", "REQUESTED", "SENDS", "STATE", "REASON"}, rows)
}

var leakReportVerb = verb{name: "report", args: "--loop L | --rack RACK [--summary TEXT]", summary: "report a leak the BMS sees on a coolant loop or a rack (role bms, or admin): Flow powers off and isolates every rack of the loop",
	flags: func(fs *pflag.FlagSet) runFunc {
		loop := fs.String("loop", "", "the coolant loop")
		rack := fs.String("rack", "", "the rack (name or UUID)")
		summary := fs.String("summary", "", "the BMS's own words")
		return func(ctx context.Context, c *env, args []string) error {
			if err := wantArgs(args, 0, "no arguments"); err != nil {
				return err
			}
			res, err := c.admin.ReportFacilityLeak(ctx, &adminv1.ReportFacilityLeakRequest{CoolantLoop: *loop, Rack: *rack, Summary: *summary})
			if err != nil {
				return err
			}
			return c.emit(res, func(w io.Writer) {
				fmt.Fprintf(w, "report %s: %d rack(s) isolated\n", res.GetId(), len(res.GetRackIds()))
			})
		}
	}}

var leakReportsVerb = verb{name: "reports", args: "[--limit N]", summary: "the BMS's leak reports, newest first (role bms: its own)",
	flags: func(fs *pflag.FlagSet) runFunc {
		limit := fs.Int32("limit", 0, "at most this many (0: 100)")
		return func(ctx context.Context, c *env, args []string) error {
			if err := wantArgs(args, 0, "no arguments"); err != nil {
				return err
			}
			res, err := c.admin.ListFacilityLeakReports(ctx, &adminv1.ListFacilityLeakReportsRequest{Limit: *limit})
			if err != nil {
				return err
			}
			return c.emit(res, func(w io.Writer) {
				if len(res.GetReports()) == 0 {
					fmt.Fprintln(w, "no reports")
					return
				}
				rows := make([][]string, len(res.GetReports()))
				for i, r := range res.GetReports() {
					rows[i] = []string{r.GetId(), r.GetReportedAt().AsTime().Local().Format(time.RFC3339), r.GetReportedBy(),
						or(r.GetCoolantLoop(), "-"), or(r.GetRackId(), "-"), strconv.Itoa(len(r.GetRackIds())), r.GetSummary()}
				}
				printTable(w, []string{"ID", "REPORTED", "BY", "LOOP", "RACK", "ISOLATED", "SUMMARY"}, rows)
			})
		}
	}}
