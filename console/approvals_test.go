package console

import (
	"bytes"
	"context"
	"html/template"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/logtest"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/approval"
	"github.com/nicoflow/flow/operations/opstest"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// approvalAPI is the admin service with only its approval methods, the
// handler app mounts for them.
type approvalAPI struct {
	adminv1connect.UnimplementedAdminServiceHandler
	h *approval.Handler
}

func (a approvalAPI) ListApprovals(ctx context.Context, r *adminv1.ListApprovalsRequest) (*adminv1.ListApprovalsResponse, error) {
	return a.h.ListApprovals(ctx, r)
}

func (a approvalAPI) GetApproval(ctx context.Context, r *adminv1.GetApprovalRequest) (*adminv1.Approval, error) {
	return a.h.GetApproval(ctx, r)
}

func (a approvalAPI) Approve(ctx context.Context, r *adminv1.ApproveRequest) (*adminv1.Approval, error) {
	return a.h.Approve(ctx, r)
}

func (a approvalAPI) Reject(ctx context.Context, r *adminv1.RejectRequest) (*adminv1.Approval, error) {
	return a.h.Reject(ctx, r)
}

// approvalBundle is a console over a real task manager and approval
// service on a fresh database, its users named by a trusted proxy's
// header: alice and bob operators, victor a viewer.
type approvalBundle struct {
	m       *opstest.Bundle
	svc     *approval.Service
	console *Console
	logs    *logtest.Buffer
}

func setupApprovals(t *testing.T) *approvalBundle {
	t.Helper()
	m := opstest.NewTasks(t, opstest.Config{})
	svc := approval.NewService(approval.Config{Pool: m.Pool, Threshold: approval.Threshold{Racks: 1}, Expiry: time.Hour})
	m.Tasks.SetApprover(svc)
	svc.Register(operations.ApprovalKindSubmission, m.Tasks)

	policyPath := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policyPath, []byte("identities:\n  alice: operator\n  bob: operator\n  victor: viewer\n"), 0o600))
	policy, err := edge.LoadPolicy(policyPath)
	require.NoError(t, err)
	logs := &logtest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	lim := edge.Limits{
		RequestBytes: 4 << 20, NameBytes: 256, SerialBytes: 128, ManufacturerBytes: 128, MACBytes: 64,
		DescriptionBytes: 16384, DocumentBytes: 1 << 20, StringBytes: 1024,
		Targets: 1000, Components: 256, Patterns: 100, ListItems: 1000, PageSize: 1000, RackComponentsPage: 100,
		Listings: 4, Submits: 2, RequestBytesInFlight: 32 << 20,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
	}
	api := edge.NewHandler(logger, flowv1connect.UnimplementedFlowHandler{}, approvalAPI{h: approval.NewHandler(m.Pool, svc)}, edge.Options{Policy: policy, Limits: lim})
	c, err := New(Options{API: api, Pool: m.Pool, Policy: policy, Logger: logger,
		AuthProxy: AuthProxy{Header: "X-User", Trusted: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &approvalBundle{m: m, svc: svc, console: c, logs: logs}
}

// submit powers on racks as alice: over the threshold of one rack, the
// tasks wait for a request's approval, which it returns.
func (b *approvalBundle) submit(t *testing.T, racks ...inventory.Rack) (approval.Request, []uuid.UUID) {
	t.Helper()
	req := opstest.PowerOn(racks[0])
	for _, r := range racks[1:] {
		req.Targets.Racks = append(req.Targets.Racks, opstest.PowerOn(r).Targets.Racks...)
	}
	req.SubmittedBy = "alice"
	ids, err := b.m.Submit(t, req)
	require.NoError(t, err)
	reqs, err := b.svc.List(context.Background(), b.m.Pool, false)
	require.NoError(t, err)
	for _, r := range reqs {
		if r.SubjectIDs[0] == ids[0] || r.SubjectIDs[1] == ids[0] {
			return r, ids
		}
	}
	t.Fatalf("no approval request for tasks %v", ids)
	return approval.Request{}, nil
}

const testCSRF = "0123456789012345678901234567890123456789abc" // 43 characters, as the console's

// get fetches path as user.
func (b *approvalBundle) get(t *testing.T, user, path string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Header.Set("X-User", user)
	w := httptest.NewRecorder()
	b.console.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// post sends a form from the console's own page as user.
func (b *approvalBundle) post(t *testing.T, user, path string, form url.Values) (int, string, string) {
	t.Helper()
	form.Set("csrf", testCSRF)
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	r.Header.Set("X-User", user)
	r.AddCookie(&http.Cookie{Name: csrfCookie, Value: testCSRF})
	w := httptest.NewRecorder()
	b.console.ServeHTTP(w, r)
	return w.Code, w.Body.String(), w.Header().Get("Location")
}

func (b *approvalBundle) status(t *testing.T, id uuid.UUID) approval.Request {
	t.Helper()
	r, err := b.svc.Get(context.Background(), b.m.Pool, id)
	require.NoError(t, err)
	return r
}

func (b *approvalBundle) tasks(t *testing.T, ids []uuid.UUID) []operations.Task {
	t.Helper()
	tasks, err := b.m.Tasks.Get(context.Background(), ids)
	require.NoError(t, err)
	require.Len(t, tasks, len(ids))
	return tasks
}

// TestApprovalPages drives the approvals pages and forms against a real
// task manager and approval service: the list and a request's plan by
// rack name, the forms for operators only, and the outcomes: the
// requester's own approval, a wrong hash, a stale plan and a viewer's
// forged form are refused with the API's message and change nothing; a
// second operator's approval of the hash shown starts the work; a
// rejection needs a reason and ends the tasks.
func TestApprovalPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupApprovals(t)
	r0, r1, r2, r3 := b.m.AddRack(t, 0), b.m.AddRack(t, 1), b.m.AddRack(t, 2), b.m.AddRack(t, 3)
	reqA, tasksA := b.submit(t, r0, r1)
	reqB, tasksB := b.submit(t, r2, r3)
	for _, task := range b.tasks(t, append(tasksA, tasksB...)) {
		require.Equal(t, operations.TaskWaiting, task.Status)
	}
	var comps0 int
	require.NoError(t, b.m.Pool.QueryRow(ctx, `SELECT count(*) FROM component WHERE rack_id = $1`, r0.ID).Scan(&comps0))
	require.Positive(t, comps0)

	// The list: pending first, every column.
	code, page := b.get(t, "bob", "/ui/approvals")
	require.Equal(t, http.StatusOK, code, page)
	accessible(t, page)
	require.Contains(t, page, `<a href="/ui/approvals" aria-current="page">Approvals</a>`, "in the navigation, lit")
	for _, r := range []approval.Request{reqA, reqB} {
		require.Contains(t, page, `<a href="/ui/approvals/`+r.ID.String()+`">`+r.ID.String()[:8]+`</a>`)
		require.Contains(t, page, `<code class="hash">`+r.PlanHash+`</code>`)
	}
	require.Contains(t, page, "submission (bulk tasks)")
	require.Contains(t, page, "<td>alice</td>")
	require.Contains(t, page, `<span class="st st-pending">pending</span>`)
	require.Contains(t, page, `<td class="num">2</td>`, "two racks each")

	// A request's plan: its racks by name, linked, with their component
	// counts, and the hash; the forms for operators.
	detail := "/ui/approvals/" + reqA.ID.String()
	code, page = b.get(t, "bob", detail)
	require.Equal(t, http.StatusOK, code, page)
	accessible(t, page)
	require.Contains(t, page, `<a href="/ui/racks/`+r0.ID.String()+`">demo-0000</a></td><td class="num">`+strconv.Itoa(comps0)+`</td>`)
	require.Contains(t, page, `<a href="/ui/racks/`+r1.ID.String()+`">demo-0001</a>`)
	require.Contains(t, page, `<code class="hash" id="plan-hash">`+reqA.PlanHash+`</code>`)
	require.Contains(t, page, `name="plan_hash" value="`+reqA.PlanHash+`"`, "the approve form posts the hash shown")
	require.Contains(t, page, `id="reject-reason"`)
	require.Contains(t, page, `<a href="/ui/tasks/`+tasksA[0].String()+`">`)
	require.NotContains(t, page, "You requested this")
	_, own := b.get(t, "alice", detail)
	require.Contains(t, own, "You requested this", "the requester is told a second identity approves")
	code, viewer := b.get(t, "victor", detail)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, viewer, reqA.PlanHash, "a viewer sees the plan")
	require.NotContains(t, viewer, `id="approve"`, "a viewer gets no forms")
	require.NotContains(t, viewer, `id="reject"`)

	refused := func(user, path string, form url.Values, status int, msg string) string {
		t.Helper()
		code, page, _ := b.post(t, user, path, form)
		require.Equal(t, status, code, page)
		require.Contains(t, page, msg)
		return page
	}
	approveA := detail + "/approve"
	// The requester's own approval.
	page = refused("alice", approveA, url.Values{"plan_hash": {reqA.PlanHash}}, http.StatusConflict, "the requester cannot approve their own request")
	require.Contains(t, page, `id="approval-error"`, "on the request's page")
	require.Contains(t, page, `id="plan-hash">`+reqA.PlanHash, "with its plan")
	// A hash that is not the request's.
	refused("bob", approveA, url.Values{"plan_hash": {"deadbeef"}}, http.StatusConflict, "deadbeef is not the plan hash of request "+reqA.ID.String())
	refused("bob", approveA, url.Values{"plan_hash": {""}}, http.StatusConflict, "plan_hash: the hash of the plan you approve is required")
	// A viewer's forged form: the API refuses it before its handler.
	refused("victor", approveA, url.Values{"plan_hash": {reqA.PlanHash}}, http.StatusForbidden, "needs role operator")
	// A form from elsewhere calls nothing.
	r := httptest.NewRequest(http.MethodPost, approveA, strings.NewReader(url.Values{"plan_hash": {reqA.PlanHash}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("X-User", "bob")
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	w := httptest.NewRecorder()
	b.console.ServeHTTP(w, r)
	require.Equal(t, http.StatusForbidden, w.Code)
	// A plan the site changed since: one of B's racks lost a component.
	var comp uuid.UUID
	require.NoError(t, b.m.Pool.QueryRow(ctx, `SELECT id FROM component WHERE rack_id = $1 ORDER BY name LIMIT 1`, r2.ID).Scan(&comp))
	require.NoError(t, pgx.BeginFunc(ctx, b.m.Pool, func(tx pgx.Tx) error { return b.m.Inv.DeleteComponent(ctx, tx, comp) }))
	refused("bob", "/ui/approvals/"+reqB.ID.String()+"/approve", url.Values{"plan_hash": {reqB.PlanHash}}, http.StatusConflict, "the plan changed since it was requested")

	// Nothing changed.
	for _, id := range []uuid.UUID{reqA.ID, reqB.ID} {
		require.Equal(t, approval.StatusPending, b.status(t, id).Status)
	}
	for _, task := range b.tasks(t, append(tasksA, tasksB...)) {
		require.Equal(t, operations.TaskWaiting, task.Status, "nothing changed")
		require.Contains(t, task.Message, "awaiting approval of request")
	}

	// A second operator approves the hash shown: the tasks are released.
	code, _, loc := b.post(t, "bob", approveA, url.Values{"plan_hash": {reqA.PlanHash}})
	require.Equal(t, http.StatusSeeOther, code)
	require.True(t, strings.HasPrefix(loc, detail+"?notice=approved"), loc)
	got := b.status(t, reqA.ID)
	require.Equal(t, approval.StatusApproved, got.Status)
	require.Equal(t, "bob", got.DecidedBy)
	for _, task := range b.tasks(t, tasksA) {
		require.NotContains(t, task.Message, "awaiting approval", "released")
	}
	require.Contains(t, b.logs.String(), `"identity":"bob","method":"/flow.admin.v1.AdminService/Approve"`, "the approval is the API call, audited as the user")
	_, page = b.get(t, "bob", detail)
	require.Contains(t, page, `<span class="st st-approved" id="approval-status">approved</span>`)
	require.Contains(t, page, `<dd id="approval-decided-by">bob`)
	require.NotContains(t, page, `id="approve"`, "decided: no forms")
	refused("bob", approveA, url.Values{"plan_hash": {reqA.PlanHash}}, http.StatusConflict, "was approved by bob")

	// Rejecting needs a reason; then B's tasks end.
	rejectB := "/ui/approvals/" + reqB.ID.String() + "/reject"
	refused("bob", rejectB, url.Values{"reason": {"  "}}, http.StatusConflict, "reason: say why it is rejected")
	code, _, loc = b.post(t, "bob", rejectB, url.Values{"reason": {"plan changed under us"}})
	require.Equal(t, http.StatusSeeOther, code)
	require.True(t, strings.HasPrefix(loc, "/ui/approvals/"+reqB.ID.String()+"?notice=rejected"), loc)
	require.Equal(t, approval.StatusRejected, b.status(t, reqB.ID).Status)
	for _, task := range b.tasks(t, tasksB) {
		require.Equal(t, operations.TaskTerminated, task.Status)
		require.Contains(t, task.Message, "rejected by bob: plan changed under us")
	}

	// The selections.
	_, page = b.get(t, "victor", "/ui/approvals")
	require.Contains(t, page, "No request awaits approval.")
	_, page = b.get(t, "victor", "/ui/approvals?show=decided")
	require.Contains(t, page, reqA.ID.String())
	require.Contains(t, page, reqB.ID.String())
	require.Contains(t, page, `<span class="st st-rejected">rejected</span> by bob`)
	_, page = b.get(t, "victor", "/ui/approvals?show=expired")
	require.Contains(t, page, "No expired requests.")
	require.Contains(t, page, `<strong aria-current="true">expired</strong>`)

	// A malformed ID is a bad request, an unknown one not found (never 409).
	code, _ = b.get(t, "victor", "/ui/approvals/nope")
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = b.get(t, "victor", "/ui/approvals/"+uuid.NewString())
	require.Equal(t, http.StatusNotFound, code)
}

// A run's or a task's message naming the request it awaits links it; the
// overview counts the pending requests.
func TestApprovalLinks(t *testing.T) {
	t.Parallel()
	id := "5d1c0e6a-9f7b-4c1e-8a55-0b9c2d3e4f50"
	require.Equal(t, template.HTML(`Held: awaiting approval of request <a href="/ui/approvals/`+id+`" class="approval-link">`+id+`</a> (plan hash ab&amp;c)`),
		linkApproval("Held: awaiting approval of request "+id+" (plan hash ab&c)"))
	require.Equal(t, template.HTML(`a &lt;b&gt; message`), linkApproval("a <b> message"))

	tmpl, err := parseTemplates()
	require.NoError(t, err)
	render := func(name string, data any) string {
		var b bytes.Buffer
		require.NoError(t, tmpl[name].ExecuteTemplate(&b, "layout", pageData{Title: name, User: User{Identity: "olivia", Role: "operator"}, CSRF: "tok", Data: data, Now: time.Now()}))
		return b.String()
	}
	held := "Held: awaiting approval of request " + id + " (plan hash h)"
	task := render("task", taskData{Task: &flowv1.Task{Id: &flowv1.UUID{Id: "t1"}, RackId: &flowv1.UUID{Id: "r1"},
		Status: flowv1.TaskStatus_TASK_STATUS_WAITING, Message: held}, Message: held})
	require.Contains(t, task, `<dd id="task-message">Held: awaiting approval of request <a href="/ui/approvals/`+id+`"`)
	run := render("rollout", rolloutData{Run: &flowv1.OperationRun{Summary: &flowv1.OperationRunSummary{Id: &flowv1.UUID{Id: "x"}, OperationKind: &flowv1.OperationKind{},
		State: &flowv1.OperationRunState{}, StatusMessage: "awaiting approval of request " + id + " (plan hash h)"}, Stats: &flowv1.OperationRunStats{}}})
	require.Contains(t, run, `<dd id="run-message">awaiting approval of request <a href="/ui/approvals/`+id+`"`)
	require.Contains(t, run, `<a class="button" href="/ui/approvals/`+id+`" id="run-approval">`, "a run awaiting approval offers its decision, not pause")
	require.NotContains(t, run, `id="run-pause"`)
	runs := render("rollouts", []*flowv1.OperationRunSummary{{Id: &flowv1.UUID{Id: "x"}, Name: "site", CreatedAt: timestamppb.Now(), OperationKind: &flowv1.OperationKind{}, State: &flowv1.OperationRunState{},
		StatusMessage: "awaiting approval of request " + id + " (plan hash h)"}})
	require.Contains(t, runs, `<a href="/ui/approvals/`+id+`"`)

	over := render("overview", overviewData{PendingApprovals: 2})
	require.Contains(t, over, `<a class="card" href="/ui/approvals" id="approvals-card"><span class="big" id="approval-count">2</span> approvals pending</a>`)
	require.NotContains(t, render("overview", overviewData{PendingApprovals: -1}), "approvals-card", "unknown: no card")
}

// A rollout's request shows its phases in order, each rack by name with
// its components, and links the run; an expired request offers only
// Reject, a decided one nothing.
func TestApprovalPageRendersARun(t *testing.T) {
	t.Parallel()
	tmpl, err := parseTemplates()
	require.NoError(t, err)
	render := func(u User, d approvalData) string {
		var b bytes.Buffer
		require.NoError(t, tmpl["approval"].ExecuteTemplate(&b, "layout", pageData{Title: "approval", Nav: "approvals", User: u, CSRF: "tok", Data: d, Now: time.Now()}))
		return b.String()
	}
	a := &adminv1.Approval{Id: "5d1c0e6a-9f7b-4c1e-8a55-0b9c2d3e4f50", Kind: "operation_run", SubjectIds: []string{"0b8e0000-0000-0000-0000-000000000001"},
		Summary: "rollout site", Racks: 3, RequestedBy: "olivia", Status: "pending", PlanHash: "abc123",
		RequestedAt: timestamppb.Now(), ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))}
	d := approvalData{Approval: a, Racks: 3, Comps: 6, Phases: []approvalPhase{
		{Index: 0, Comps: 2, Racks: []approvalRack{{ID: "r1", Name: "demo-0001", Comps: 2}}},
		{Index: 1, Comps: 4, Racks: []approvalRack{{ID: "r2", Name: "demo-0002", Comps: 2}, {ID: "r3", Name: "demo-0003", Comps: 2}}},
	}}
	operator := User{Identity: "bob", Role: "operator"}
	page := render(operator, d)
	accessible(t, page)
	require.Contains(t, page, `<a href="/ui/rollouts/0b8e0000-0000-0000-0000-000000000001">rollout 0b8e0000</a>`)
	require.Contains(t, page, "The plan: 2 phases, 3 racks, 6 components")
	require.Contains(t, page, "<caption>Phase 1: 2 racks, 4 components</caption>")
	require.Regexp(t, `(?s)demo-0001.*Phase 1.*demo-0002.*demo-0003`, page)
	require.Contains(t, page, "Rejecting cancels the rollout.")
	require.Contains(t, page, `id="approve"`)

	a.Status = "expired"
	page = render(operator, d)
	require.NotContains(t, page, `id="approve"`, "an expired request cannot be approved")
	require.Contains(t, page, `id="reject"`, "only rejected")

	a.Status, a.DecidedBy, a.Reason = "rejected", "bob", "not now"
	page = render(operator, d)
	require.NotContains(t, page, `id="reject"`)
	require.Contains(t, page, `<dd id="approval-decided-by">bob`)
	require.Contains(t, page, "<dd>not now</dd>")
}
