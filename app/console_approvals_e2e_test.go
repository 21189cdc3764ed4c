package app

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// TestConsoleApprovalsInABrowser: a power-on of the whole 3-rack site
// (over a threshold of 2 racks), submitted by the admin's certificate,
// waits for approval; in headless Chromium the operator olivia sees it
// counted on the overview, follows the link in a held task's message to
// the request's plan (its racks by name, its hash), and approves it there:
// the AdminService Approve call, audited as olivia, after which the tasks
// are released. A viewer sees the plan without the forms. It takes the
// approvals' screenshots of docs/console.md.
func TestConsoleApprovalsInABrowser(t *testing.T) {
	t.Parallel()
	c := startConsoleE2E(t, map[string]string{"FLOW_APPROVAL_THRESHOLD": "2"})
	ctx := context.Background()
	var names []string
	for _, r := range c.racks {
		names = append(names, r.Name)
	}
	res, err := c.admin.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(names...), Description: "site power on"})
	require.NoError(t, err)
	require.Len(t, res.GetTaskIds(), 3)
	list, err := c.adminSvc.ListApprovals(ctx, &adminv1.ListApprovalsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetApprovals(), 1)
	req := list.GetApprovals()[0]
	detail := "/ui/approvals/" + req.GetId()

	c.open(t, c.opURL+"/ui/")
	c.waitJS(t, 10*time.Second, `!!document.getElementById("approval-count") && document.getElementById("approval-count").textContent === "1"`, "the overview counts the pending request")
	c.open(t, c.opURL+"/ui/approvals")
	c.waitJS(t, 10*time.Second, `!!document.querySelector('tr[data-approval="`+req.GetId()+`"]')`, "the list shows the request")
	c.screenshot(t, "approvals")

	// A held task's message links its request.
	c.open(t, c.opURL+"/ui/tasks/"+res.GetTaskIds()[0].GetId())
	c.waitJS(t, 10*time.Second, `!!document.querySelector("#task-message a.approval-link")`, "the held task links its request")
	// Followed by its address, not a click: the task page's live updates
	// may swap the message under a click on a loaded machine (seen at
	// load 13: the click was lost).
	href := evalIn[string](c.browser, `document.querySelector("#task-message a.approval-link").getAttribute("href")`)
	require.True(t, strings.HasSuffix(href, detail), "the held task links its request: %s", href)
	c.open(t, c.opURL+detail)
	c.waitJS(t, 10*time.Second, `location.pathname === "`+detail+`" && !!document.getElementById("plan-hash")`, "the link opens the request")
	require.Equal(t, req.GetPlanHash(), evalIn[string](c.browser, `document.getElementById("plan-hash").textContent`))
	require.ElementsMatch(t, names, evalIn[[]string](c.browser, `Array.from(document.querySelectorAll(".plan-phase tbody a")).map(a => a.textContent)`), "the plan's racks by name")
	require.Equal(t, req.GetPlanHash(), evalIn[string](c.browser, `document.getElementById("approve-hash").value`), "the form holds the hash shown")
	c.screenshot(t, "approval")

	// A viewer sees the plan, and no forms.
	res2, err := http.Get(c.viewURL + detail)
	require.NoError(t, err)
	b, err := io.ReadAll(res2.Body)
	res2.Body.Close()
	require.NoError(t, err)
	body := string(b)
	require.Equal(t, http.StatusOK, res2.StatusCode)
	require.Contains(t, body, req.GetPlanHash())
	require.NotContains(t, body, `id="approve"`)

	// olivia approves (the page asks first; the test says yes).
	require.True(t, evalIn[bool](c.browser, `window.confirm = function () { return true; }, true`))
	c.click(t, "#approve")
	c.waitJS(t, 15*time.Second, `!!document.getElementById("approval-status") && document.getElementById("approval-status").textContent === "approved"`, "the page shows the request approved")
	require.Contains(t, evalIn[string](c.browser, `document.querySelector(".notice").textContent`), "approved")
	got, err := c.adminSvc.GetApproval(ctx, &adminv1.GetApprovalRequest{Id: req.GetId()})
	require.NoError(t, err)
	require.Equal(t, "approved", got.GetStatus())
	require.Equal(t, "olivia", got.GetDecidedBy())
	require.Contains(t, c.logs.String(), `"identity":"olivia","method":"/flow.admin.v1.AdminService/Approve"`, "the approval is the API call, audited as the user")
	tasks, err := c.admin.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: res.GetTaskIds()})
	require.NoError(t, err)
	for _, task := range tasks.GetTasks() {
		require.False(t, strings.Contains(task.GetMessage(), "awaiting approval"), "released: %s", task.GetMessage())
	}
}
