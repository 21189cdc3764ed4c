package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// syncNoun is `flow sync`: the inventory sync with NICo Core, through
// Flow's admin service (flow.admin.v1.AdminService).
var syncNoun = noun{
	name:    "sync",
	summary: "inventory sync with NICo Core (docs/inventory-sync.md)",
	verbs: []verb{
		{name: "run", summary: "run one sync cycle now and print what changed",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					res, err := c.admin.RunSync(ctx, &adminv1.RunSyncRequest{})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printCycle(w, res.GetCycle()) })
				}
			}},
		{name: "status", summary: "the last sync cycle: start, duration, each part ok or failed with its error, rows changed",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					res, err := c.admin.GetSyncStatus(ctx, &adminv1.GetSyncStatusRequest{})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printCycle(w, res.GetCycle()) })
				}
			}},
	},
}

// printCycle writes a cycle's summary line and one row per part.
func printCycle(w io.Writer, c *adminv1.SyncCycle) {
	fmt.Fprintf(w, "cycle %d (%s) started %s, took %s, %d rows changed\n", c.GetId(), c.GetTrigger(),
		c.GetStartedAt().AsTime().Local().Format(time.RFC3339), c.GetDuration().AsDuration().Round(time.Millisecond), c.GetRowsChanged())
	rows := make([][]string, len(c.GetParts()))
	for i, p := range c.GetParts() {
		status := "ok"
		if !p.GetOk() {
			status = "FAILED"
		}
		drift := ""
		if p.GetName() == "compute" || p.GetName() == "nvswitch" || p.GetName() == "powershelf" {
			drift = fmt.Sprint(p.GetDrifts())
			if p.GetDriftChanged() {
				drift += " (replaced)"
			}
		}
		note := p.GetError()
		if note == "" {
			note = strings.Join(p.GetWarnings(), "; ")
		}
		changed := fmt.Sprint(p.GetRowsChanged())
		var parts []string
		for _, x := range []struct {
			n    int64
			what string
		}{{p.GetInserted(), "new"}, {int64(p.GetAdopted()), "adopted"}, {int64(p.GetResurrected()), "resurrected"}, {p.GetSoftDeleted(), "soft-deleted"}} {
			if x.n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", x.n, x.what))
			}
		}
		if len(parts) > 0 {
			changed += " (" + strings.Join(parts, ", ") + ")"
		}
		rows[i] = []string{p.GetName(), status, changed, drift, note}
	}
	printTable(w, []string{"PART", "STATUS", "CHANGED", "DRIFTS", "ERROR"}, rows)
}
