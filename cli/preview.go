package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// Plan previews (docs/change-safety.md "Plan preview"): --dry-run of the
// power and firmware verbs and of rollout create asks the admin service
// for the plan the request would freeze, prints it and writes nothing. The
// last line is always "plan hash: HASH", the hash a second person approves.

// previewSubmission prints the plan of a power or firmware submission.
func previewSubmission(ctx context.Context, c *env, req *adminv1.PreviewSubmissionRequest) error {
	res, err := c.admin.PreviewSubmission(ctx, req)
	if err != nil {
		return err
	}
	return c.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "%s %s: %d racks (nothing submitted)\n", res.GetOperationType(), res.GetOperationCode(), len(res.GetRacks()))
		printPlannedRacks(w, res.GetRacks(), true)
		if r := res.GetRefusal(); r != "" {
			fmt.Fprintf(w, "would be refused: %s\n", r)
		}
		if res.GetApprovalRequired() {
			fmt.Fprintln(w, "needs approval: a second operator approves it by this hash (flow approval)")
		}
		fmt.Fprintf(w, "plan hash: %s\n", res.GetPlanHash())
	})
}

// printRunPreview prints the plan of an operation run.
func printRunPreview(w io.Writer, res *adminv1.PreviewOperationRunResponse) {
	n := 0
	for _, p := range res.GetPhases() {
		n += len(p.GetRacks())
	}
	fmt.Fprintf(w, "%s in %s (nothing created); selection seed %s, ordering seed %s\n",
		count(n, "rack"), count(len(res.GetPhases()), "phase"), res.GetSelectorSeed(), orDash(res.GetOrderingSeed()))
	for _, p := range res.GetPhases() {
		fmt.Fprintf(w, "phase %d: %s\n", p.GetIndex(), count(len(p.GetRacks()), "rack"))
		printPlannedRacks(w, p.GetRacks(), false)
	}
	for _, o := range res.GetOverlappingRuns() {
		fmt.Fprintf(w, "overlaps %s\n", o)
	}
	if len(res.GetOverlappingRuns()) > 0 {
		fmt.Fprintln(w, "would be refused unless --allow-overlap")
	}
	if s := res.GetWindows(); s != "" {
		fmt.Fprintf(w, "windows: %s\n", s)
	}
	if res.GetApprovalRequired() {
		fmt.Fprintln(w, "needs approval: a second operator approves it by this hash (flow approval)")
	}
	fmt.Fprintf(w, "plan hash: %s\n", res.GetPlanHash())
}

// printPlannedRacks prints one line per rack, then its conflicts and leaks
// indented below it.
func printPlannedRacks(w io.Writer, racks []*adminv1.PlannedRack, withRule bool) {
	for _, r := range racks {
		line := fmt.Sprintf("  %s  %d components", r.GetRack(), len(r.GetComponentIds()))
		if withRule && r.GetRule() != "" {
			line += "  rule " + r.GetRule()
		}
		if r.GetWaiting() {
			line += "  WAITING"
		}
		fmt.Fprintln(w, line)
		for _, c := range r.GetConflicts() {
			fmt.Fprintf(w, "    conflicts with %s\n", c)
		}
		if len(r.GetLeaks()) > 0 {
			fmt.Fprintf(w, "    held by open leaks: %s\n", strings.Join(r.GetLeaks(), ", "))
		}
		if h := r.GetHeld(); h != "" {
			fmt.Fprintf(w, "    held: %s\n", h)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// count is n and the noun, plural unless n is 1 ("1 phase", "20 racks").
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
