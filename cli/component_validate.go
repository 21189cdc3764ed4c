package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// componentValidateVerb is `flow component validate`: ValidateComponents,
// Flow's inventory against what NICo Core / PSM report.
var componentValidateVerb = verb{
	name:    "validate",
	args:    "[--rack ID|NAME,...] [--type T,...] [--order name|type] [--desc] [--offset N] [--limit N] [--live]",
	summary: "compare the inventory with NICo Core: missing, unexpected and mismatched components, as the last inventory sync found them (--live: ask the component managers now)",
	flags: func(fs *pflag.FlagSet) runFunc {
		racks := fs.String("rack", "", "only these racks (UUIDs or names, comma-separated)")
		types := fs.String("type", "", "only these types: compute, nvswitch, powershelf")
		order := fs.String("order", "name", "order the diffs by name or type")
		desc := fs.Bool("desc", false, "descending order")
		page := pageFlags(fs)
		live := fs.Bool("live", false, "ask the component managers (NICo Core, PSM) now instead of reading the last sync's drift")
		return func(ctx context.Context, c *env, args []string) error {
			if err := wantArgs(args, 0, "no arguments"); err != nil {
				return err
			}
			req := &flowv1.ValidateComponentsRequest{Pagination: page()}
			if *racks != "" {
				req.TargetSpec = rackListSpec(*racks)
			}
			if *types != "" {
				f, err := componentTypeFilter(*types)
				if err != nil {
					return err
				}
				req.Filters = append(req.Filters, f)
			}
			var field flowv1.ComponentOrderByField
			switch *order {
			case "name":
				field = flowv1.ComponentOrderByField_COMPONENT_ORDER_BY_FIELD_NAME
			case "type":
				field = flowv1.ComponentOrderByField_COMPONENT_ORDER_BY_FIELD_TYPE
			default:
				return usageError{fmt.Errorf("--order must be name or type")}
			}
			req.OrderBy = &flowv1.OrderBy{Field: &flowv1.OrderBy_ComponentField{ComponentField: field}, Direction: direction(*desc)}
			ctx, call := connect.NewClientContext(ctx)
			if *live {
				call.RequestHeader().Set(validateModeHeader, "live")
			}
			res, err := c.client.ValidateComponents(ctx, req)
			if err != nil {
				return err
			}
			source := "checked live"
			if at := call.ResponseHeader().Get(driftCheckedAtHeader); at != "" {
				source = "as of the inventory sync at " + at
			}
			return c.emit(res, func(w io.Writer) {
				printDiffs(w, res.GetDiffs())
				fmt.Fprintf(w, "(%d of %d diffs: %d missing, %d unexpected, %d mismatch; %d match; %s)\n",
					len(res.GetDiffs()), res.GetTotalDiffs(), res.GetMissingCount(), res.GetUnexpectedCount(), res.GetMismatchCount(), res.GetMatchCount(), source)
			})
		}
	},
}

// The headers of ValidateComponents beyond the v1 contract (the server's
// reconcile.ValidateModeHeader and reconcile.DriftCheckedAtHeader).
const (
	validateModeHeader   = "Flow-Validate-Mode"
	driftCheckedAtHeader = "Flow-Drift-Checked-At"
)

// printDiffs writes one row per diff; a mismatch lists its fields as
// field: expected → actual.
func printDiffs(w io.Writer, diffs []*flowv1.ComponentDiff) {
	rows := make([][]string, len(diffs))
	for i, d := range diffs {
		c := d.GetExpected()
		if c == nil {
			c = d.GetActual()
		}
		var fields []string
		for _, f := range d.GetFieldDiffs() {
			fields = append(fields, fmt.Sprintf("%s: %q → %q", f.GetFieldName(), f.GetExpectedValue(), f.GetActualValue()))
		}
		rows[i] = []string{
			strings.TrimPrefix(d.GetType().String(), "DIFF_TYPE_"),
			strings.ToLower(strings.TrimPrefix(c.GetType().String(), "COMPONENT_TYPE_")),
			c.GetInfo().GetName(),
			d.GetId().GetId(),
			d.GetComponentId(),
			d.GetComponentMacAddress(),
			strings.Join(fields, "; "),
		}
	}
	printTable(w, []string{"DIFF", "TYPE", "NAME", "ID", "COMPONENT ID", "MAC", "FIELDS"}, rows)
}
