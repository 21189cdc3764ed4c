package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// approvalNoun is `flow approval`: two-person approval of site-wide work
// (docs/change-safety.md "Two-person approval").
var approvalNoun = noun{
	name:    "approval",
	summary: "two-person approval of large rollouts: list, show, approve by plan hash, reject (docs/change-safety.md)",
	verbs: []verb{
		{name: "list", args: "[--all]", summary: "pending approval requests (--all: decided and expired ones too), newest first",
			flags: func(fs *pflag.FlagSet) runFunc {
				all := fs.Bool("all", false, "decided and expired requests too")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					res, err := c.admin.ListApprovals(ctx, &adminv1.ListApprovalsRequest{All: *all})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						rows := make([][]string, len(res.GetApprovals()))
						for i, a := range res.GetApprovals() {
							rows[i] = []string{a.GetId(), a.GetStatus(), a.GetRequestedBy(), fmt.Sprint(a.GetRacks()),
								a.GetExpiresAt().AsTime().Local().Format(time.RFC3339), a.GetSummary()}
						}
						printTable(w, []string{"ID", "STATUS", "REQUESTED BY", "RACKS", "EXPIRES", "SUMMARY"}, rows)
					})
				}
			}},
		{name: "show", args: "ID", summary: "a request with the plan it approves, ending with its plan hash",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "want ID"); err != nil {
						return err
					}
					id, err := resolveApproval(ctx, c, args[0])
					if err != nil {
						return err
					}
					a, err := c.admin.GetApproval(ctx, &adminv1.GetApprovalRequest{Id: id})
					if err != nil {
						return err
					}
					return c.emit(a, func(w io.Writer) { printApproval(w, a) })
				}
			}},
		{name: "approve", args: "ID --hash HASH", summary: "approve a request by the plan hash you saw (flow approval show ID); the work starts",
			flags: func(fs *pflag.FlagSet) runFunc {
				hash := fs.String("hash", "", "the plan hash of the plan you approve (required)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "want ID"); err != nil {
						return err
					}
					if strings.TrimSpace(*hash) == "" {
						return usageError{errors.New("want --hash HASH: the plan hash flow approval show printed")}
					}
					id, err := resolveApproval(ctx, c, args[0])
					if err != nil {
						return err
					}
					a, err := c.admin.Approve(ctx, &adminv1.ApproveRequest{Id: id, PlanHash: *hash})
					if err != nil {
						return err
					}
					return c.emit(a, func(w io.Writer) { fmt.Fprintf(w, "approved %s: %s\n", a.GetId(), a.GetSummary()) })
				}
			}},
		{name: "reject", args: "ID --reason TEXT", summary: "reject a request (its requester withdraws it so); its rollout is cancelled",
			flags: func(fs *pflag.FlagSet) runFunc {
				reason := fs.String("reason", "", "why (required)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "want ID"); err != nil {
						return err
					}
					if strings.TrimSpace(*reason) == "" {
						return usageError{errors.New("want --reason TEXT")}
					}
					id, err := resolveApproval(ctx, c, args[0])
					if err != nil {
						return err
					}
					a, err := c.admin.Reject(ctx, &adminv1.RejectRequest{Id: id, Reason: *reason})
					if err != nil {
						return err
					}
					return c.emit(a, func(w io.Writer) { fmt.Fprintf(w, "%s %s: %s\n", a.GetStatus(), a.GetId(), a.GetSummary()) })
				}
			}},
	},
}

// printApproval prints a request, its plan phase by phase, and its hash
// last.
func printApproval(w io.Writer, a *adminv1.Approval) {
	fmt.Fprintf(w, "Request:      %s (%s)\n", a.GetId(), a.GetKind())
	fmt.Fprintf(w, "Summary:      %s\n", a.GetSummary())
	fmt.Fprintf(w, "Status:       %s\n", a.GetStatus())
	fmt.Fprintf(w, "Requested by: %s at %s\n", a.GetRequestedBy(), a.GetRequestedAt().AsTime().Local().Format(time.RFC3339))
	fmt.Fprintf(w, "Expires:      %s\n", a.GetExpiresAt().AsTime().Local().Format(time.RFC3339))
	if a.GetDecidedBy() != "" {
		fmt.Fprintf(w, "Decided by:   %s at %s %s\n", a.GetDecidedBy(), a.GetDecidedAt().AsTime().Local().Format(time.RFC3339), a.GetReason())
	}
	for _, p := range a.GetPhases() {
		fmt.Fprintf(w, "phase %d: %d racks\n", p.GetIndex(), len(p.GetRacks()))
		printPlannedRacks(w, p.GetRacks(), false)
	}
	fmt.Fprintf(w, "plan hash: %s\n", a.GetPlanHash())
}

// resolveApproval takes an approval request's UUID, or a prefix of at
// least minTaskPrefix of its characters that one request (pending or
// decided) starts with, as tasks are named.
func resolveApproval(ctx context.Context, c *env, s string) (string, error) {
	if isUUID(s) {
		return s, nil
	}
	s, err := idPrefix("approval request", "its UUID", s)
	if err != nil {
		return "", err
	}
	res, err := c.admin.ListApprovals(ctx, &adminv1.ListApprovalsRequest{All: true})
	if err != nil {
		return "", err
	}
	var cands []candidate
	for _, a := range res.GetApprovals() {
		if strings.HasPrefix(a.GetId(), s) {
			cands = append(cands, candidate{id: a.GetId(), label: a.GetStatus() + " " + a.GetSummary()})
		}
	}
	if len(cands) == 0 {
		return "", connect.NewError(connect.CodeNotFound, fmt.Errorf("no approval request ID starts with %q", s))
	}
	id, err := pick("approval request", s, cands)
	if err != nil {
		return "", err
	}
	return id.GetId(), nil
}
