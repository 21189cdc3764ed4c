package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// windowNoun is `flow window`, freezeNoun `flow freeze`: maintenance
// windows and freezes on Flow's admin service (docs/change-safety.md).
var (
	windowNoun = windowKindNoun("window", "windows", "maintenance windows: when disruptive operations (power off, cycle, reset, firmware, bring-up, decommission) may start on the racks they cover (docs/change-safety.md)")
	freezeNoun = windowKindNoun("freeze", "freezes", "freezes: when no disruptive operation may start on the racks they cover, whatever the windows (docs/change-safety.md)")
)

func windowKindNoun(kind, plural, summary string) noun {
	return noun{
		name:    kind,
		aliases: []string{plural},
		summary: summary,
		verbs: []verb{
			{name: "create", args: "NAME (--cron EXPR --tz ZONE --duration D | --from TIME --until TIME) (--site | --hall H | --row R | --nvl-domain D | --rack R)...",
				summary: "create a " + kind + ": a recurrence (cron in a time zone, plus a duration) or a one-off interval (RFC 3339), over a scope (admin)",
				flags: func(fs *pflag.FlagSet) runFunc {
					cron := fs.String("cron", "", `a 5-field cron expression of when each occurrence starts, e.g. "0 2 * * SAT"`)
					tz := fs.String("tz", "", "the IANA time zone of --cron, e.g. Europe/Paris or UTC")
					dur := fs.Duration("duration", 0, "how long each occurrence lasts, e.g. 4h")
					from := fs.String("from", "", "a one-off interval's start (RFC 3339, e.g. 2026-12-24T00:00:00Z)")
					until := fs.String("until", "", "a one-off interval's end (RFC 3339)")
					desc := fs.String("description", "", "what it is for")
					site := fs.Bool("site", false, "cover the whole site")
					halls := fs.StringArray("hall", nil, "cover the racks of this hall (their location room); repeatable")
					rows := fs.StringArray("row", nil, "cover the racks of this row (read from their position, e.g. row-03); repeatable")
					domains := fs.StringArray("nvl-domain", nil, "cover the racks of this NVLink domain (name or UUID); repeatable")
					racks := fs.StringArray("rack", nil, "cover this rack (name or UUID); repeatable")
					return func(ctx context.Context, c *env, args []string) error {
						if err := wantArgs(args, 1, "NAME"); err != nil {
							return err
						}
						req := &adminv1.CreateWindowRequest{Kind: kind, Name: args[0], Description: *desc, Cron: *cron, TimeZone: *tz,
							Scope: &adminv1.WindowScope{Site: *site, Halls: *halls, Rows: *rows, NvlDomains: *domains, Racks: *racks}}
						if fs.Changed("duration") {
							req.Duration = durationpb.New(*dur)
						}
						for _, t := range []struct {
							flag, v string
							dst     **timestamppb.Timestamp
						}{{"--from", *from, &req.StartsAt}, {"--until", *until, &req.EndsAt}} {
							if t.v == "" {
								continue
							}
							at, err := time.Parse(time.RFC3339, t.v)
							if err != nil {
								return usageError{fmt.Errorf("%s: want an RFC 3339 time such as 2026-12-24T00:00:00Z, not %q", t.flag, t.v)}
							}
							*t.dst = timestamppb.New(at)
						}
						res, err := c.admin.CreateWindow(ctx, req)
						if err != nil {
							return err
						}
						return c.emit(res, func(w io.Writer) {
							printWindows(w, []*adminv1.Window{res.GetWindow()}, windowRackNames(ctx, c, res.GetWindow()))
						})
					}
				}},
			{name: "list", summary: "list the " + plural + ", with whether each is open now and when it next opens or closes",
				flags: func(fs *pflag.FlagSet) runFunc {
					return func(ctx context.Context, c *env, args []string) error {
						if err := wantArgs(args, 0, "no arguments"); err != nil {
							return err
						}
						res, err := c.admin.ListWindows(ctx, &adminv1.ListWindowsRequest{Kind: kind})
						if err != nil {
							return err
						}
						return c.emit(res, func(w io.Writer) {
							if len(res.GetWindows()) == 0 {
								fmt.Fprintf(w, "no %s\n", plural)
								return
							}
							printWindows(w, res.GetWindows(), windowRackNames(ctx, c, res.GetWindows()...))
						})
					}
				}},
			{name: "get", args: "NAME", summary: "one " + kind + " by name or ID",
				flags: func(fs *pflag.FlagSet) runFunc {
					return func(ctx context.Context, c *env, args []string) error {
						if err := wantArgs(args, 1, "NAME"); err != nil {
							return err
						}
						res, err := c.admin.GetWindow(ctx, &adminv1.GetWindowRequest{Kind: kind, Id: args[0]})
						if err != nil {
							return err
						}
						return c.emit(res, func(w io.Writer) {
							printWindows(w, []*adminv1.Window{res.GetWindow()}, windowRackNames(ctx, c, res.GetWindow()))
						})
					}
				}},
			{name: "delete", args: "NAME", summary: "delete a " + kind + " by name or ID (admin); held tasks are looked at again within 30s",
				flags: func(fs *pflag.FlagSet) runFunc {
					return func(ctx context.Context, c *env, args []string) error {
						if err := wantArgs(args, 1, "NAME"); err != nil {
							return err
						}
						res, err := c.admin.DeleteWindow(ctx, &adminv1.DeleteWindowRequest{Kind: kind, Id: args[0]})
						if err != nil {
							return err
						}
						return c.emit(res, func(w io.Writer) {
							fmt.Fprintf(w, "deleted %s %s (%s)\n", kind, res.GetWindow().GetName(), res.GetWindow().GetId())
						})
					}
				}},
		},
	}
}

// windowRackNames looks up the names of the racks the windows' scopes
// hold by ID, so a table names them as the operator does.
func windowRackNames(ctx context.Context, c *env, ws ...*adminv1.Window) map[string]string {
	var ids []string
	for _, x := range ws {
		ids = append(ids, x.GetScope().GetRacks()...)
	}
	return rackNamesByID(ctx, c, ids)
}

// printWindows prints windows as a table, racks by name where names has
// them.
func printWindows(w io.Writer, ws []*adminv1.Window, names map[string]string) {
	rows := make([][]string, len(ws))
	for i, x := range ws {
		when := ""
		if x.GetCron() != "" {
			when = fmt.Sprintf("%s %s for %s", x.GetCron(), x.GetTimeZone(), x.GetDuration().AsDuration())
		} else {
			when = x.GetStartsAt().AsTime().Local().Format(time.RFC3339) + " to " + x.GetEndsAt().AsTime().Local().Format(time.RFC3339)
		}
		open, next := "no", "-"
		if x.GetOpenNow() {
			open = "yes"
		}
		if x.NextChange != nil {
			next = x.GetNextChange().AsTime().Local().Format(time.RFC3339)
		}
		rows[i] = []string{x.GetName(), x.GetKind(), when, windowScope(x.GetScope(), names), open, next, x.GetDescription()}
	}
	printTable(w, []string{"NAME", "KIND", "WHEN", "SCOPE", "OPEN", "NEXT CHANGE", "DESCRIPTION"}, rows)
}

// windowScope is a scope in one cell: "site", or "hall=A row=r1
// rack=NAME...", a rack by its ID where names lacks it.
func windowScope(s *adminv1.WindowScope, names map[string]string) string {
	if s.GetSite() {
		return "site"
	}
	var parts []string
	for _, l := range []struct {
		key  string
		vals []string
	}{{"hall", s.GetHalls()}, {"row", s.GetRows()}, {"nvl-domain", s.GetNvlDomains()}, {"rack", s.GetRacks()}} {
		for _, v := range l.vals {
			if l.key == "rack" {
				v = rackLabel(names, v)
			}
			parts = append(parts, l.key+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

// taskReleaseVerb is `flow task release`.
var taskReleaseVerb = verb{name: "release", args: "TASK --reason TEXT", summary: "let a task held by maintenance windows or a freeze start now (admin, audited; the reason goes on the task's message)",
	flags: func(fs *pflag.FlagSet) runFunc {
		reason := fs.String("reason", "", "why it may start outside its windows (required; recorded and audited)")
		return func(ctx context.Context, c *env, args []string) error {
			if err := wantArgs(args, 1, "TASK"); err != nil {
				return err
			}
			if strings.TrimSpace(*reason) == "" {
				return usageError{errors.New("--reason is required: say why the task may start outside its maintenance windows")}
			}
			id, err := resolveTask(ctx, c, args[0])
			if err != nil {
				return err
			}
			res, err := c.admin.ReleaseTaskFromWindows(ctx, &adminv1.ReleaseTaskFromWindowsRequest{Id: id.GetId(), Reason: *reason})
			if err != nil {
				return err
			}
			return c.emit(res, func(w io.Writer) {
				// The task may have moved on by the time it is read back
				// (started, running): say what was done, then where it is.
				fmt.Fprintf(w, "task %s released from maintenance windows (%s); now %s (%s)\n", id.GetId(), *reason, res.GetStatus(), res.GetMessage())
			})
		}
	}}

// rolloutReleaseVerb is `flow rollout release`.
var rolloutReleaseVerb = verb{name: "release", args: "ROLLOUT --reason TEXT", summary: "let a rollout claim its targets whatever the maintenance windows and freezes, from now on (admin, audited; the reason goes on its message)",
	complete: rolloutNameList,
	flags: func(fs *pflag.FlagSet) runFunc {
		reason := fs.String("reason", "", "why it may run outside its windows (required; recorded and audited)")
		return func(ctx context.Context, c *env, args []string) error {
			if err := wantArgs(args, 1, "ROLLOUT"); err != nil {
				return err
			}
			if strings.TrimSpace(*reason) == "" {
				return usageError{errors.New("--reason is required: say why the rollout may run outside its maintenance windows")}
			}
			id, err := resolveRollout(ctx, c, args[0])
			if err != nil {
				return err
			}
			res, err := c.admin.ReleaseRunFromWindows(ctx, &adminv1.ReleaseRunFromWindowsRequest{Id: id.GetId(), Reason: *reason})
			if err != nil {
				return err
			}
			return c.emit(res, func(w io.Writer) {
				fmt.Fprintf(w, "rollout %s released: %s (%s)\n", id.GetId(), res.GetStatus(), res.GetMessage())
			})
		}
	}}

// withVerbs is n with more verbs.
func withVerbs(n noun, vs ...verb) noun {
	n.verbs = append(append([]verb(nil), n.verbs...), vs...)
	return n
}
