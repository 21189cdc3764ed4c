package console

import (
	"cmp"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// Two-person approval (docs/change-safety.md "Two-person approval"): the
// pending requests with their frozen plans, and the Approve and Reject
// forms, each the AdminService call itself under the user's identity.

// approvalShows are the list's selections: pending (the default), every
// request, the decided (approved or rejected) and the expired ones.
var approvalShows = []string{"pending", "all", "decided", "expired"}

// approvalsTopics refresh the list: every request, decision and expiry
// writes its work (a run, or the submission's tasks) in the same
// transaction.
var approvalsTopics = []string{"runs", "tasks"}

type approvalsData struct {
	Show      string
	Shows     []string
	Approvals []*adminv1.Approval
	Pending   int
}

// approvals lists the requests: the pending ones, or with ?show= all,
// decided or expired; pending ones first, then newest first.
func (c *Console) approvals(r *http.Request) (view, error) {
	show := r.URL.Query().Get("show")
	if !slices.Contains(approvalShows, show) {
		show = "pending"
	}
	res, err := c.admin.ListApprovals(apiCtx(r), &adminv1.ListApprovalsRequest{All: show != "pending"})
	if err != nil {
		return view{}, err
	}
	d := approvalsData{Show: show, Shows: approvalShows}
	for _, a := range res.GetApprovals() {
		st := a.GetStatus()
		if st == "pending" {
			d.Pending++
		}
		switch {
		case show == "all",
			show == st,
			show == "decided" && (st == "approved" || st == "rejected"):
			d.Approvals = append(d.Approvals, a)
		}
	}
	// The API answers newest first; pending ones lead.
	slices.SortStableFunc(d.Approvals, func(a, b *adminv1.Approval) int {
		return cmp.Compare(approvalRank(a.GetStatus()), approvalRank(b.GetStatus()))
	})
	return view{"approvals", "Approvals", "approvals", approvalsTopics, d}, nil
}

func approvalRank(status string) int {
	if status == "pending" {
		return 0
	}
	return 1
}

type approvalData struct {
	Approval *adminv1.Approval
	Phases   []approvalPhase
	Racks    int
	Comps    int
	// Err is the API's refusal of the form just posted (nothing changed).
	Err string
	// Reason is the rejection reason the user gave, kept after a refusal.
	Reason string
	// Own says the user requested it (they may reject, not approve).
	Own bool
}

type approvalPhase struct {
	Index int32
	Racks []approvalRack
	Comps int
}

type approvalRack struct {
	ID, Name string
	Comps    int
}

// approval shows request id with its plan: phases of racks by name, each
// with its component count, and the plan hash; Approve and Reject for
// operators while it is pending.
func (c *Console) approval(r *http.Request) (view, error) {
	return c.approvalView(r, "", "")
}

func (c *Console) approvalView(r *http.Request, errMsg, reason string) (view, error) {
	id := r.PathValue("id")
	a, err := c.admin.GetApproval(apiCtx(r), &adminv1.GetApprovalRequest{Id: id})
	if err != nil {
		return view{}, err
	}
	names, err := c.rackNames(r.Context())
	if err != nil {
		return view{}, err
	}
	d := approvalData{Approval: a, Err: errMsg, Reason: reason, Own: a.GetRequestedBy() == userFrom(r.Context()).Identity}
	for _, p := range a.GetPhases() {
		ph := approvalPhase{Index: p.GetIndex()}
		for _, rk := range p.GetRacks() {
			name := cmp.Or(names[rk.GetRackId()], rk.GetRack(), rk.GetRackId())
			ph.Racks = append(ph.Racks, approvalRack{ID: rk.GetRackId(), Name: name, Comps: len(rk.GetComponentIds())})
			ph.Comps += len(rk.GetComponentIds())
		}
		d.Racks += len(ph.Racks)
		d.Comps += ph.Comps
		d.Phases = append(d.Phases, ph)
	}
	// No live topics: the plan is frozen, and a refresh would wipe a
	// reason being typed.
	return view{"approval", "Approval " + shortID(a.GetId()), "approvals", nil, d}, nil
}

// approvalAction posts Approve (the plan hash the page showed) or Reject
// (a reason) as the user: the AdminService call itself, so its role check
// (operator), its audit line and the service's refusals apply. A refusal
// is shown on the request's page with the API's message; nothing changed.
func (c *Console) approvalAction(w http.ResponseWriter, r *http.Request) {
	u := userFrom(r.Context())
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !c.sameSiteOr403(w, r, u) {
		return
	}
	id := r.PathValue("id")
	ctx := apiCtx(r)
	var err error
	var notice, reason string
	switch op := r.PathValue("op"); op {
	case "approve":
		var a *adminv1.Approval
		if a, err = c.admin.Approve(ctx, &adminv1.ApproveRequest{Id: id, PlanHash: r.PostFormValue("plan_hash")}); err == nil {
			notice = fmt.Sprintf("approved: %s (plan hash %s)", a.GetSummary(), a.GetPlanHash())
		}
	case "reject":
		reason = r.PostFormValue("reason")
		var a *adminv1.Approval
		if a, err = c.admin.Reject(ctx, &adminv1.RejectRequest{Id: id, Reason: reason}); err == nil {
			notice = "rejected: " + a.GetSummary()
		}
	default:
		c.fail(w, r, u, http.StatusNotFound, fmt.Errorf("approval action %q: want approve or reject", op))
		return
	}
	if err != nil {
		status := statusOf(err)
		v, verr := c.approvalView(r, connectMessage(err), reason)
		if verr != nil {
			c.fail(w, r, u, status, err)
			return
		}
		if status >= 500 {
			c.logger.Error("console", "path", r.URL.Path, "error", connectMessage(err))
		}
		c.render(w, r, status, v.name, pageData{Title: v.title, Nav: v.nav, User: u, CSRF: csrfToken(w, r), Open: c.opts.Open,
			Data: v.data, Now: time.Now()})
		return
	}
	http.Redirect(w, r, Prefix+"approvals/"+id+"?notice="+url.QueryEscape(notice), http.StatusSeeOther)
}

// pendingApprovals counts the requests awaiting a decision (-1 when the
// API would not say).
func (c *Console) pendingApprovals(r *http.Request) int {
	res, err := c.admin.ListApprovals(apiCtx(r), &adminv1.ListApprovalsRequest{})
	if err != nil {
		if connect.CodeOf(err) != connect.CodeUnimplemented {
			c.logger.Warn("console: list approvals", "error", connectMessage(err))
		}
		return -1
	}
	n := 0
	for _, a := range res.GetApprovals() {
		if a.GetStatus() == "pending" {
			n++
		}
	}
	return n
}

// awaitingApproval finds the request ID in a run's or a task's message
// ("awaiting approval of request ID (plan hash …)").
var awaitingApproval = regexp.MustCompile(`(awaiting approval of request )([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})`)

// awaitedApproval returns the ID of the approval request msg says its
// run or task awaits, or "".
func awaitedApproval(msg string) string {
	if m := awaitingApproval.FindStringSubmatch(msg); m != nil {
		return strings.ToLower(m[2])
	}
	return ""
}

// linkApproval is msg, escaped, with the ID of the approval request it
// awaits linked to the request's page.
func linkApproval(msg string) template.HTML {
	loc := awaitingApproval.FindStringSubmatchIndex(msg)
	if loc == nil {
		return template.HTML(template.HTMLEscapeString(msg))
	}
	id := msg[loc[4]:loc[5]]
	var b strings.Builder
	b.WriteString(template.HTMLEscapeString(msg[:loc[4]]))
	fmt.Fprintf(&b, `<a href="/ui/approvals/%s" class="approval-link">%s</a>`, template.HTMLEscapeString(strings.ToLower(id)), template.HTMLEscapeString(id))
	b.WriteString(template.HTMLEscapeString(msg[loc[5]:]))
	return template.HTML(b.String())
}
