package app

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/inventory"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/sim"
)

// axeSource is axe-core (third_party/axe-core, MPL-2.0), read once.
var axeSource = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile("../third_party/axe-core/axe.min.js")
	return string(b), err
})

// axeViolation is one rule axe-core found broken on a page, with the
// elements that break it.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// axeSerious runs axe-core on the page the browser shows (injected
// through DevTools: the console's CSP allows no foreign script) and
// returns its serious and critical violations (WCAG 2.x A and AA rules
// and axe's best practices), each with up to 5 of its elements'
// selectors.
func axeSerious(t *testing.T, browser context.Context) []axeViolation {
	t.Helper()
	src, err := axeSource()
	require.NoError(t, err, "axe-core is vendored in third_party/axe-core")
	_, err = chromedp.Run(browser, chromedp.Evaluate[bool](src+";true"))
	require.NoError(t, err, "inject axe-core")
	vs, err := chromedp.Run(browser, chromedp.Evaluate[[]axeViolation](`axe.run(document, {resultTypes: ["violations"]}).then(r =>
		r.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v =>
			({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map(n => n.target.join(" "))})))`, chromedp.EvalAwaitPromise))
	require.NoError(t, err, "run axe-core")
	return vs
}

// axeFindings names each serious or critical axe-core violation of the
// page the browser shows (page names it).
func axeFindings(t *testing.T, browser context.Context, page string) []string {
	t.Helper()
	var msgs []string
	for _, v := range axeSerious(t, browser) {
		msgs = append(msgs, fmt.Sprintf("%s: %s (%s): %s: %s", page, v.ID, v.Impact, v.Help, strings.Join(v.Nodes, ", ")))
	}
	sort.Strings(msgs)
	return msgs
}

// requireAccessible fails t naming each serious or critical axe-core
// violation of the page the browser shows.
func requireAccessible(t *testing.T, browser context.Context, page string) {
	t.Helper()
	require.Empty(t, axeFindings(t, browser, page), "axe-core")
}

// TestConsoleAccessibility runs axe-core on every page of the console, as
// an operator (who sees the controls) and as a viewer, over a site with
// something on each page: racks, a finished and a failed task, an open
// leak, a rollout, a schedule, a window, a webhook, a pending approval, a
// search's results, a component, an error page. No page may have a
// serious or critical violation. First, the keyboard alone powers a rack
// on: Tab to the rack page's power-on button, Enter, and the task page
// it leads to. Last, the task page links River UI's pages of its jobs.
func TestConsoleAccessibility(t *testing.T) {
	t.Parallel()
	c := startConsoleE2E(t, map[string]string{"FLOW_APPROVAL_THRESHOLD": "2", "FLOW_DATA_ENCRYPTION_KEY_PATH": newKeyFile(t)})
	ctx := context.Background()

	t.Run("KeyboardPowersOnARack", func(t *testing.T) {
		c.open(t, c.opURL+"/ui/racks/"+url.PathEscape(c.racks[2].Name))
		c.waitJS(t, 10*time.Second, `!!document.getElementById("power-on")`, "an operator sees the power-on button")
		before := c.taskCount(t)
		// Tab from the top of the page until the power-on button has the
		// focus (every control before it is reachable the same way).
		var reached bool
		for i := 0; i < 60 && !reached; i++ {
			require.NoError(t, chromedp.Do(c.browser, chromedp.KeyEvent(kb.Tab)))
			reached = evalIn[string](c.browser, `document.activeElement && document.activeElement.id`) == "power-on"
		}
		require.True(t, reached, "Tab reaches the power-on button")
		// The button asks for confirmation (data-confirm): accepted.
		require.True(t, evalIn[bool](c.browser, `window.confirm = function () { return true; }, true`))
		require.NoError(t, chromedp.Do(c.browser, chromedp.KeyEvent(kb.Enter)))
		c.waitJS(t, 15*time.Second, `location.pathname.startsWith("/ui/tasks/") && !!document.getElementById("task-status")`, "Enter submitted the power-on: the console shows its task")
		require.Equal(t, before+1, c.taskCount(t))
		c.waitJS(t, 60*time.Second, `document.getElementById("task-status").textContent === "completed"`, "the power-on completes")
	})

	// A finished task on rack 0, a rollout over part of the site (paused,
	// so that it stays; under the approval threshold), a schedule, a window, a webhook, a pending approval
	// (a power-off of the whole site: 3 racks, over the threshold of 2).
	on, err := c.admin.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(c.racks[0].Name), Description: "accessibility"})
	require.NoError(t, err)
	task := on.GetTaskIds()[0].GetId()
	require.Eventually(t, func() bool {
		res, err := c.admin.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{{Id: task}}})
		return err == nil && res.GetTasks()[0].GetStatus() == flowv1.TaskStatus_TASK_STATUS_COMPLETED
	}, 3*time.Minute, 100*time.Millisecond, "the power-on completes")
	// A failed task on rack 1 (one switch's power call fails).
	_, err = c.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultItem, Method: "ComponentPowerControl", Device: macOf(c.racks[1], inventory.ComponentTypeNVSwitch, 1),
		Status: "internal_error", Message: "switch 1 PSU fault"})
	require.NoError(t, err)
	bad, err := c.admin.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(c.racks[1].Name), Description: "accessibility, failing"})
	require.NoError(t, err)
	failed := bad.GetTaskIds()[0].GetId()
	require.Eventually(t, func() bool {
		res, err := c.admin.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{{Id: failed}}})
		return err == nil && res.GetTasks()[0].GetStatus() == flowv1.TaskStatus_TASK_STATUS_FAILED
	}, 3*time.Minute, 100*time.Millisecond, "the failing power-on fails") // its retries, and at load 36 a lapsed engine lease (seen)
	var names []string
	for _, r := range c.racks {
		names = append(names, r.Name)
	}
	_, err = c.admin.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(names...), Description: "site power off"})
	require.NoError(t, err)
	run := createRun(t, c.admin, rolloutRequest("a11y-fw", rolloutOpts{pct: 60, concurrency: 1, phases: equalPhases(1, false)}))
	_, err = c.admin.PauseOperationRun(ctx, &flowv1.PauseOperationRunRequest{Id: run})
	require.NoError(t, err)
	_, err = c.admin.CreateTaskSchedule(ctx, scheduleReq("nightly power check", "cron", "0 2 * * *", 0, c.racks[0].Name))
	require.NoError(t, err)
	_, err = c.adminSvc.CreateWindow(ctx, &adminv1.CreateWindowRequest{Kind: "window", Name: "tonight", Scope: &adminv1.WindowScope{Site: true},
		StartsAt: timestamppb.New(time.Now().Add(time.Hour)), EndsAt: timestamppb.New(time.Now().Add(3 * time.Hour))})
	require.NoError(t, err)
	_, err = c.adminSvc.CreateWebhook(ctx, &adminv1.CreateWebhookRequest{Url: "https://hooks.example/flow", EventTypes: []string{"flow.task.failed"}, Secret: "a-secret-of-sixteen-or-more"})
	require.NoError(t, err)
	approvals, err := c.adminSvc.ListApprovals(ctx, &adminv1.ListApprovalsRequest{})
	require.NoError(t, err)
	require.NotEmpty(t, approvals.GetApprovals(), "the site power-off awaits approval")
	tray := readRack(t, c.pool, c.racks[0].ID).Components[0]
	// An open leak on rack 1.
	leaking := readRack(t, c.pool, c.racks[1].ID).component(t, inventory.ComponentTypeCompute, 10)
	require.NoError(t, c.sims.nico.SetLeak(leaking.ExternalID, true))
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*) FROM component_leak WHERE status = 'detected'`).Scan(&n))
		return n > 0
	}, 30*time.Second, 100*time.Millisecond, "the leak is open")

	// Feeds and loops, a budget: rack 2 shares rack 1's loop (its page
	// shows the cooling hold of rack 1's leak).
	for i, p := range [][2]string{{"hall-0/bw-a", "cdu-1"}, {"hall-0/bw-a", "cdu-2"}, {"hall-0/bw-b", "cdu-2"}} {
		_, err := c.adminSvc.SetRackPlacement(ctx, &adminv1.SetRackPlacementRequest{Rack: c.racks[i].Name, PowerFeed: &p[0], CoolantLoop: &p[1]})
		require.NoError(t, err)
	}
	_, err = c.adminSvc.SetPowerBudget(ctx, &adminv1.SetPowerBudgetRequest{Feed: "hall-0/bw-a", MaxTransitions: 4})
	require.NoError(t, err)

	pages := []string{
		"/ui/", "/ui/floor", "/ui/floor?by=leak", "/ui/floor?by=compliance", "/ui/floor?by=feed", "/ui/floor?by=loop", "/ui/power",
		"/ui/search?q=demo", "/ui/search?q=nothing-matches",
		"/ui/racks/" + c.racks[0].Name, "/ui/racks/" + c.racks[1].Name, "/ui/racks/" + c.racks[2].Name, "/ui/components/" + tray.ID.String(),
		"/ui/compliance", "/ui/compliance/apply",
		"/ui/tasks", "/ui/tasks/" + task, "/ui/tasks/" + failed,
		"/ui/rollouts", "/ui/rollouts/" + run.GetId(), "/ui/rollouts/new?racks=" + c.racks[0].Name,
		"/ui/work/upgrade?racks=" + c.racks[0].Name,
		"/ui/schedules", "/ui/windows", "/ui/webhooks",
		"/ui/approvals", "/ui/approvals/" + approvals.GetApprovals()[0].GetId(),
		"/ui/events-rules", "/ui/sync",
		"/ui/racks/demo-9999", // the error page
	}
	for _, who := range []struct{ name, base string }{{"operator", c.opURL}, {"viewer", c.viewURL}} {
		t.Run(who.name, func(t *testing.T) {
			var findings []string
			for _, p := range pages {
				c.open(t, who.base+p)
				c.waitJS(t, 10*time.Second, `document.readyState === "complete" && !!document.querySelector("main")`, p)
				findings = append(findings, axeFindings(t, c.browser, p)...)
			}
			require.Empty(t, findings, "axe-core: serious or critical violations")
		})
	}

	t.Run("RiverUILinkedFromTheTaskPage", func(t *testing.T) {
		// The task page links the task's River jobs and each step's job;
		// River UI (its own pages, under the console's authentication)
		// opens them for an admin.
		admin := authProxy(t, c.url, c.adminTLS, edge.DevSPIFFEID("admin"))
		c.open(t, admin+"/ui/tasks/"+task)
		c.waitJS(t, 10*time.Second, `!!document.getElementById("task-jobs") && document.querySelectorAll(".step a.job").length > 0`, "the task page links its jobs")
		job := evalIn[string](c.browser, `document.querySelector(".step a.job").getAttribute("href")`)
		require.Regexp(t, `^/ui/jobs/jobs/\d+$`, job)
		c.open(t, admin+job)
		c.waitJS(t, 20*time.Second, `document.body.textContent.includes("`+strings.TrimPrefix(job, "/ui/jobs/jobs/")+`") && document.body.textContent.includes("engine")`, "River UI shows the step's job")
		c.open(t, admin+"/ui/tasks/"+task)
		c.follow(t, "#task-jobs", 20*time.Second, `location.pathname.replace(/\/$/, "") === "/ui/jobs/jobs" && document.querySelectorAll("a[href*='/ui/jobs/jobs/']").length > 0`, "River UI lists the task's jobs")
	})
}
