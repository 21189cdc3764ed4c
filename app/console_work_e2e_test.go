package app

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/eventrule"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// acceptConfirms makes the page's confirmation dialogs answer yes, noting
// the last question in the tab's session storage, which outlives the
// navigation the confirmed form makes (a real dialog would stop the
// browser test); confirmed returns it.
func (c *consoleE2E) acceptConfirms(t *testing.T) {
	t.Helper()
	require.True(t, evalIn[bool](c.browser, `sessionStorage.removeItem("confirmed"); window.confirm = function (m) { sessionStorage.setItem("confirmed", m); return true; }; true`))
}

func (c *consoleE2E) confirmed() string {
	return evalIn[string](c.browser, `sessionStorage.getItem("confirmed") || ""`)
}

// idle waits for every task to end.
func (c *consoleE2E) idle(t *testing.T, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT count(*) FROM task WHERE status IN ('pending', 'running', 'waiting')`).Scan(&n))
		return n == 0
	}, 120*time.Second, 200*time.Millisecond, what)
}

// text is the text of the element sel names, spaces collapsed ("" when
// there is none).
func (c *consoleE2E) text(sel string) string {
	return evalIn[string](c.browser, `(function () { var e = document.querySelector(`+jsString(sel)+`); return e ? e.innerText.replace(/\s+/g, " ").trim() : ""; })()`)
}

func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

// formToken opens path as the user behind base with a cookie jar and
// returns the client and the form token its page set.
func formToken(t *testing.T, base, path string) (*http.Client, string) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := hc.Get(base + path)
	require.NoError(t, err)
	res.Body.Close()
	u, _ := url.Parse(base + "/ui/")
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "flow_console_csrf" {
			return hc, ck.Value
		}
	}
	t.Fatal("no form token")
	return nil, ""
}

func postForm(t *testing.T, hc *http.Client, u string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := hc.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res.StatusCode, string(body)
}

// TestConsoleRolloutsSchedulesRulesAndWork drives, in headless Chromium,
// the pages of issue 47 this test owns: a whole rollout (every phase and
// target, the planned total, the operation and the gates in words, what
// Advance and Resume do, advancing at the phase gate); the schedules page
// (the cron in its zone and UTC, one operation label, the scope, the last
// firing, delete with confirmation); the event rules page (bindings, each
// leak's rule and handling, an admin's override with a reason); and
// starting work: a firmware upgrade of a selection of racks, component
// power and a new rollout, each through the API's dry run and a confirm
// naming the racks; viewers see no controls and are refused.
func TestConsoleRolloutsSchedulesRulesAndWork(t *testing.T) {
	t.Parallel()
	c := startConsoleE2E(t)
	ctx := context.Background()
	runs := func() int {
		var n int
		require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*) FROM operation_run`).Scan(&n))
		return n
	}

	t.Run("WholeRollout", func(t *testing.T) {
		// Three phases of one rack each, advanced by hand: the page shows
		// the phases to come from the start, and at the gate says what
		// Advance opens.
		req := rolloutRequest("whole-fw", rolloutOpts{concurrency: 1, phases: equalPhases(3, false), gates: []*flowv1.OperationRunSafetyGate{countGate(1)}})
		id := createRun(t, c.admin, req)
		c.open(t, c.opURL+"/ui/rollouts/whole-fw")
		c.waitJS(t, 10*time.Second, `!!document.getElementById("run-planned")`, "the rollout page")
		require.Equal(t, "3 racks in 3 phases", c.text("#run-planned"))
		require.Equal(t, "firmware upgrade to version 2.0", c.text("#run-operation"))
		gates := c.text("#run-gates")
		require.Contains(t, gates, "pauses the run when 1 target failed (counted in the current phase)")
		require.Contains(t, gates, "after each phase the run pauses until an operator advances it")
		require.Equal(t, 3, evalIn[int](c.browser, `document.querySelectorAll("#targets tbody tr").length`), "every planned target, phases not opened yet included")
		require.Equal(t, 3, evalIn[int](c.browser, `document.querySelectorAll("#phases tbody tr").length`))
		require.Equal(t, "waiting", evalIn[string](c.browser, `document.querySelector('#phases tr[data-phase="2"]').dataset.state`))
		require.Contains(t, c.text("#run-pause-what"), "the racks already running finish")

		// Phase 0 ends: the run waits at the phase gate.
		c.waitJS(t, 90*time.Second, `!!document.getElementById("run-advance")`, "the page offers Advance at the phase gate")
		require.Equal(t, "done", evalIn[string](c.browser, `document.querySelector('#phases tr[data-phase="0"]').dataset.state`))
		require.Equal(t, "waiting for Advance", evalIn[string](c.browser, `document.querySelector('#phases tr[data-phase="1"]').dataset.state`))
		require.Equal(t, "Opens phase 1 (1 rack) and starts its racks at once.", c.text("#run-advance-what"))
		require.Contains(t, c.text("#run-resume-what"), "Resume does not apply at a phase gate")
		require.False(t, evalIn[bool](c.browser, `!!document.getElementById("run-resume")`), "no Resume button at a phase gate (the API refuses it)")
		require.Contains(t, c.text("#run-status"), "phase 1 (1 rack) waits for Advance")
		require.Equal(t, []string{"done", "waiting", "waiting"}, evalIn[[]string](c.browser, `Array.from(document.querySelectorAll("#targets tbody tr")).map(r => r.dataset.outcome)`))
		c.screenshot(t, "rollout-gate")
		c.acceptConfirms(t)
		c.click(t, "#run-advance")
		require.Eventually(t, func() bool {
			return getRun(t, c.admin, id).GetSummary().GetState().GetStatus() != flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED
		}, 15*time.Second, 50*time.Millisecond, "the run advanced on the server")
		require.Equal(t, "Open phase 1 of rollout whole-fw (1 rack)?", c.confirmed())
		c.waitJS(t, 20*time.Second, `!!document.querySelector('#phases tr[data-phase="1"][data-state="running"]')`, "phase 1 runs")
		require.Contains(t, c.logs.String(), `"identity":"olivia","method":"/v1.Flow/AdvanceOperationRunPhase"`)
		// Paused by an operator: Resume continues the phase.
		// Followed: a live update can swallow the click (seen at load 12);
		// a second pause of a paused run changes nothing.
		c.follow(t, "#run-pause", 30*time.Second, `!!document.getElementById("run-resume")`, "a paused run offers Resume")
		require.Contains(t, c.text("#run-resume-what"), "Continues phase 1 where it stopped")
		require.Contains(t, c.text("#run-advance-what"), "Advance applies only at a phase gate")
		c.screenshot(t, "rollout-whole")
		_, err := c.admin.CancelOperationRun(ctx, &flowv1.CancelOperationRunRequest{Id: id, Reason: "next subtest"})
		require.NoError(t, err)
		// The run ends once its running tasks are terminated: at load that
		// can take longer than the page's live update is waited on, so the
		// server's word comes first, then the page (reloaded if its live
		// update lags).
		require.Eventually(t, func() bool {
			return getRun(t, c.admin, id).GetSummary().GetState().GetStatus() == flowv1.OperationRunStatus_OPERATION_RUN_STATUS_CANCELLED
		}, 90*time.Second, 100*time.Millisecond, "the run is cancelled on the server")
		c.waitJSReloading(t, 60*time.Second, `document.getElementById("run-state").textContent === "cancelled" && !!document.querySelector('#phases tr[data-phase="2"][data-state="skipped"]')`, "the phase never opened is skipped")
	})

	t.Run("Schedules", func(t *testing.T) {
		c.idle(t, "the rollout's tasks end")
		req := scheduleReq("paris night", "cron", "0 2 * * *", 0, c.racks[0].Name, c.racks[1].Name)
		req.Schedule.Spec.Timezone = "Europe/Paris"
		s, err := c.admin.CreateTaskSchedule(ctx, req)
		require.NoError(t, err)
		fired, err := c.admin.TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: s.GetId()})
		require.NoError(t, err)
		require.Len(t, fired.GetTaskIds(), 2)
		c.open(t, c.opURL+"/ui/schedules")
		row := `#schedule-list tr[data-schedule="paris night"] `
		c.waitJS(t, 10*time.Second, `!!document.querySelector('`+row+`.sched-last a')`, "the schedule and its last firing")
		require.Equal(t, "cron 0 2 * * * in Europe/Paris", c.text(row+".sched-when"))
		require.Equal(t, "Power On", c.text(row+".sched-op"), "one operation label")
		next := c.text(row + ".sched-next")
		require.Regexp(t, `^\d{4}-\d\d-\d\d 02:00 CES?T \(Europe/Paris\) \d{4}-\d\d-\d\d 0[01]:00 UTC \(in `, next, "the next firing at 02:00 in Paris, and in UTC")
		require.Equal(t, "demo-0000, demo-0001", c.text(row+".sched-scope"))
		require.Equal(t, 2, evalIn[int](c.browser, `document.querySelectorAll('`+row+`.sched-last a').length`), "the last firing's two tasks, linked")
		c.screenshot(t, "schedules-zone")

		// A viewer sees no controls.
		c.open(t, c.viewURL+"/ui/schedules")
		c.waitJS(t, 10*time.Second, `!!document.querySelector('`+row+`')`, "the viewer sees the schedule")
		require.False(t, evalIn[bool](c.browser, `!!document.querySelector("main form[method=post], main button")`))

		// Paused, then resumed.
		c.open(t, c.opURL+"/ui/schedules")
		c.waitJS(t, 10*time.Second, `!!document.querySelector('`+row+`.sched-pause')`, "an operator may pause it")
		// Followed: a click a live update swallowed (no PauseTaskSchedule
		// call at all: seen at load 24) is made again while the button is
		// there; once paused, the row offers Resume instead.
		c.follow(t, row+".sched-pause", 30*time.Second, `!!document.querySelector('`+row+`.sched-resume') && document.querySelector('`+row+`').textContent.includes("not while paused")`, "the schedule is paused")
		c.follow(t, row+".sched-resume", 30*time.Second, `!!document.querySelector('`+row+`.sched-pause')`, "the schedule is resumed")
		got, err := c.admin.GetTaskSchedule(ctx, &flowv1.GetTaskScheduleRequest{Id: s.GetId()})
		require.NoError(t, err)
		require.True(t, got.GetEnabled())
		require.Contains(t, c.logs.String(), `"identity":"olivia","method":"/v1.Flow/ResumeTaskSchedule"`)

		// Delete, confirmed.
		c.waitJS(t, 10*time.Second, `!!document.querySelector('`+row+`.sched-delete')`, "an operator may delete it")
		c.acceptConfirms(t)
		c.click(t, row+".sched-delete")
		c.waitJS(t, 15*time.Second, `!!document.querySelector(".notice") && document.querySelector(".notice").textContent.includes('schedule "paris night" deleted') && !document.querySelector('`+row+`')`, "the schedule is gone")
		require.Equal(t, "Delete schedule paris night (Power On on 2 racks)? Its tasks stay; it never fires again.", c.confirmed())
		_, err = c.admin.GetTaskSchedule(ctx, &flowv1.GetTaskScheduleRequest{Id: s.GetId()})
		require.Error(t, err)
		require.Contains(t, c.logs.String(), `"identity":"olivia","method":"/v1.Flow/DeleteTaskSchedule"`)
	})

	t.Run("EventRulesBindingsAndOverride", func(t *testing.T) {
		rule, err := c.admin.CreateEventRule(ctx, &flowv1.CreateEventRuleRequest{
			Name: "log only", EventType: eventrule.EventTypeLeakDetected,
			Actions: []*flowv1.EventRuleAction{{Name: "log_only", Spec: &flowv1.EventRuleAction_Noop{Noop: &flowv1.EventRuleNoopAction{Reason: "drill"}}}},
		})
		require.NoError(t, err)
		_, err = c.admin.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: rule.GetId(), Scope: &flowv1.EventRuleScope{
			Type: flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_RACK, Id: &flowv1.UUID{Id: c.racks[2].ID.String()}}})
		require.NoError(t, err)
		_, err = c.admin.EnableEventRule(ctx, &flowv1.EnableEventRuleRequest{RuleId: rule.GetId()})
		require.NoError(t, err)
		tray := readRack(t, c.pool, c.racks[1].ID).component(t, inventory.ComponentTypeCompute, 11)
		require.NoError(t, c.sims.nico.SetLeak(tray.ExternalID, true))

		c.open(t, c.opURL+"/ui/events-rules")
		leakRow := `#leaks tr[data-component="` + tray.Name + `"] `
		c.waitJS(t, 20*time.Second, `!!document.querySelector('`+leakRow+`')`, "the leak is listed")
		require.Equal(t, "Leakage response", c.text(leakRow+".leak-rule"), "the built-in rule answers demo-0001")
		c.waitJS(t, 30*time.Second, `/^(shutting down|down)/.test(document.querySelector('`+leakRow+`.leak-handling').textContent)`, "the forced power-off handles it")
		require.Contains(t, c.text("#bindings"), "hardware.leak.detected rack demo-0002 log only")
		require.Equal(t, "none (admins override)", c.text(leakRow+".leak-override"), "an operator may not override")
		// The rack page holds power-on while the leak is open.
		c.open(t, c.opURL+"/ui/racks/demo-0001")
		c.waitJS(t, 10*time.Second, `!!document.getElementById("power-on")`, "the rack page")
		require.True(t, evalIn[bool](c.browser, `document.getElementById("power-on").disabled`))

		// An admin overrides it, with a reason.
		adminURL := authProxy(t, c.url, c.adminTLS, "spiffe://flow.dev/ns/flow/sa/admin")
		c.open(t, adminURL+"/ui/events-rules")
		c.waitJS(t, 10*time.Second, `!!document.querySelector('`+leakRow+`button.override')`, "an admin may override")
		c.screenshot(t, "events-override")
		c.acceptConfirms(t)
		c.onFresh(t, "type the reason", chromedp.SendKeys(chromedp.CSS(leakRow+`input[name="reason"]`), "coolant loop isolated by facilities"))
		c.click(t, leakRow+"button.override")
		c.waitJS(t, 15*time.Second, `!!document.querySelector(".notice") && document.querySelector(".notice").textContent.startsWith("leak on `+tray.Name+` overridden")`, "the override is done")
		require.Contains(t, c.text(leakRow+".leak-override"), "overridden by spiffe://flow.dev/ns/flow/sa/admin")
		require.Contains(t, c.text(leakRow+".leak-override"), "coolant loop isolated by facilities")
		require.Contains(t, c.logs.String(), `"msg":"audit","identity":"spiffe://flow.dev/ns/flow/sa/admin","method":"/flow.admin.v1.AdminService/OverrideLeak"`)
		c.open(t, c.opURL+"/ui/racks/demo-0001")
		c.waitJS(t, 10*time.Second, `!!document.getElementById("power-on") && !document.getElementById("power-on").disabled`, "power-on is let through after the override")

		// An operator's forged override is the API's to refuse.
		hc, token := formToken(t, c.opURL, "/ui/events-rules")
		status, body := postForm(t, hc, c.opURL+"/ui/leaks/"+tray.ID.String()+"/override", url.Values{"csrf": {token}, "reason": {"forged"}})
		require.Equal(t, http.StatusForbidden, status, body)
		require.Contains(t, body, "needs role admin")
		require.NoError(t, c.sims.nico.SetLeak(tray.ExternalID, false))
	})

	t.Run("StartWork", func(t *testing.T) {
		// Every earlier task ends first: the plans below are over idle racks.
		c.idle(t, "the earlier subtests' tasks end")

		// A viewer may not start work.
		for _, p := range []string{"/ui/work/upgrade", "/ui/rollouts/new"} {
			res, err := http.Get(c.viewURL + p)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusForbidden, res.StatusCode, p)
		}
		c.open(t, c.viewURL+"/ui/racks/demo-0000")
		c.waitJS(t, 10*time.Second, `!!document.getElementById("components")`, "the viewer sees the rack")
		require.False(t, evalIn[bool](c.browser, `!!document.querySelector('#components input[type=checkbox], #upgrade-rack')`), "no selection, no start")

		// A firmware upgrade of a selection of two racks, from the rack page.
		c.open(t, c.opURL+"/ui/racks/demo-0000")
		c.waitJS(t, 10*time.Second, `!!document.getElementById("upgrade-rack")`, "the rack page offers a firmware upgrade")
		c.follow(t, "#upgrade-rack", 15*time.Second, `location.pathname === "/ui/work/upgrade" && !!document.getElementById("w-racks")`, "the upgrade form")
		require.Equal(t, "demo-0000", evalIn[string](c.browser, `document.getElementById("w-racks").value`))
		c.onFresh(t, "the selection and the version", chromedp.SetValue(chromedp.CSS("#w-racks"), "demo-0000, demo-0002"), chromedp.SetValue(chromedp.CSS("#w-version"), "2.0"),
			chromedp.Click(chromedp.CSS(`input[name="type"][value="compute"]`)))
		before := c.taskCount(t)
		c.click(t, "#work-dry-run")
		c.waitJS(t, 15*time.Second, `!!document.getElementById("work-confirm")`, "the dry run")
		require.ElementsMatch(t, []string{"demo-0000", "demo-0002"}, evalIn[[]string](c.browser, `Array.from(document.querySelectorAll("#work-racks tbody tr")).map(r => r.dataset.rack)`))
		require.Equal(t, "Firmware upgrade of the compute trays to version 2.0 on 2 racks", c.text("#work-confirm"))
		require.Regexp(t, `^2 racks, \d+ components\.$`, c.text("#work-summary"))
		require.Equal(t, before, c.taskCount(t), "a dry run creates nothing")
		c.screenshot(t, "work-upgrade")
		// A confirm of a plan other than the one the site makes now
		// creates nothing.
		hc, token := formToken(t, c.opURL, "/ui/work/upgrade")
		status, body := postForm(t, hc, c.opURL+"/ui/work/upgrade", url.Values{"csrf": {token}, "racks": {"demo-0000, demo-0002"}, "type": {"compute"}, "version": {"2.0"},
			"confirm": {"1"}, "plan": {"stale"}})
		require.Equal(t, http.StatusConflict, status, body)
		require.Contains(t, body, "The plan changed since you reviewed it")
		require.Equal(t, before, c.taskCount(t))
		// A viewer's forged confirm is refused.
		vhc, vtoken := formToken(t, c.viewURL, "/ui/schedules")
		status, _ = postForm(t, vhc, c.viewURL+"/ui/work/upgrade", url.Values{"csrf": {vtoken}, "racks": {"demo-0000"}})
		require.Equal(t, http.StatusForbidden, status)
		c.acceptConfirms(t)
		c.click(t, "#work-confirm")
		c.waitJS(t, 15*time.Second, `location.pathname === "/ui/tasks" && document.querySelector(".notice").textContent === "2 tasks submitted"`, "the tasks page says the two tasks")
		require.Equal(t, "Firmware upgrade of the compute trays to version 2.0 on 2 racks?", c.confirmed())
		require.Equal(t, before+2, c.taskCount(t))
		require.Contains(t, c.logs.String(), `"msg":"audit","identity":"olivia","method":"/v1.Flow/UpgradeFirmware"`)

		// Component power: two trays of demo-0001, ticked on its page.
		rack := readRack(t, c.pool, c.racks[1].ID)
		var trays []inventory.Component
		for _, cm := range rack.Components {
			if cm.Type == inventory.ComponentTypeCompute && cm.Position.SlotID != 11 { // not the tray that leaked
				trays = append(trays, cm)
			}
		}
		require.GreaterOrEqual(t, len(trays), 2)
		a, b := trays[0], trays[1]
		// The stream off (?live=0): a live redraw between the two ticks lost
		// one in a loaded make test.
		c.open(t, c.opURL+"/ui/racks/demo-0001?live=0")
		c.waitJS(t, 10*time.Second, `!!document.getElementById("comp-power-on")`, "the rack page offers component power")
		c.onFresh(t, "tick two trays", chromedp.Click(chromedp.CSS("#pick-"+a.ID.String())), chromedp.Click(chromedp.CSS("#pick-"+b.ID.String())))
		before = c.taskCount(t)
		c.click(t, "#comp-power-on")
		c.waitJS(t, 15*time.Second, `!!document.getElementById("work-confirm")`, "the plan of the component power-on")
		require.Equal(t, "Power on 2 components on 1 rack", c.text("#work-confirm"))
		require.Equal(t, "1 rack, 2 components.", c.text("#work-summary"))
		c.screenshot(t, "work-power")
		c.acceptConfirms(t)
		c.click(t, "#work-confirm")
		c.waitJS(t, 15*time.Second, `location.pathname.startsWith("/ui/tasks/") && !!document.getElementById("task-status")`, "the task's page")
		require.Equal(t, before+1, c.taskCount(t))
		require.Contains(t, c.logs.String(), `"msg":"audit","identity":"olivia","method":"/v1.Flow/PowerOnRack"`)

		// A new rollout over every rack, in three phases.
		c.idle(t, "the upgrade and power tasks end")
		c.open(t, c.opURL+"/ui/rollouts")
		c.follow(t, "#new-rollout", 15*time.Second, `location.pathname === "/ui/rollouts/new" && !!document.getElementById("r-name")`, "the new-rollout form")
		c.onFresh(t, "fill the form", chromedp.SetValue(chromedp.CSS("#r-name"), "console-made"), chromedp.SetValue(chromedp.CSS("#r-version"), "2.0"),
			chromedp.SetValue(chromedp.CSS("#r-phases"), "3"))
		n := runs()
		c.follow(t, "#run-dry-run", 30*time.Second, `!!document.getElementById("run-create")`, "the dry run of the rollout")
		require.Equal(t, "Create the rollout (3 racks, 3 phases)", c.text("#run-create"))
		require.Equal(t, 3, evalIn[int](c.browser, `document.querySelectorAll("#run-plan table.plan-phase").length`))
		require.Equal(t, n, runs(), "a dry run creates nothing")
		c.screenshot(t, "rollout-new")
		c.acceptConfirms(t)
		c.click(t, "#run-create")
		c.waitJS(t, 15*time.Second, `location.pathname.startsWith("/ui/rollouts/") && !!document.getElementById("run-planned")`, "the new run's page")
		require.Equal(t, n+1, runs())
		require.Equal(t, "3 racks in 3 phases", c.text("#run-planned"))
		require.Equal(t, "rollout created: 3 racks in 3 phases", c.text(".notice"))
		require.Contains(t, c.logs.String(), `"msg":"audit","identity":"olivia","method":"/flow.admin.v1.AdminService/CreateOperationRun"`)
	})
}

// TestConsoleStartWorkAwaitsApproval starts work over the approval
// threshold from the console: a firmware upgrade of the racks a search
// found, and a new rollout over them. Each dry run says a second person
// must approve; each confirm leads to its approval request, pending,
// requested by the user.
func TestConsoleStartWorkAwaitsApproval(t *testing.T) {
	t.Parallel()
	c := startConsoleE2E(t, map[string]string{"FLOW_APPROVAL_THRESHOLD": "2"})
	ctx := context.Background()

	// The racks a search finds, upgraded.
	c.open(t, c.opURL+"/ui/search?q=demo-")
	c.waitJS(t, 10*time.Second, `document.querySelectorAll("#search-racks tbody tr").length === 3`, "the search finds the three racks")
	c.follow(t, "#search-upgrade", 15*time.Second, `location.pathname === "/ui/work/upgrade" && !!document.getElementById("w-racks")`, "the upgrade form of the racks found")
	require.Equal(t, "demo-0000, demo-0001, demo-0002", evalIn[string](c.browser, `document.getElementById("w-racks").value`))
	c.onFresh(t, "the version", chromedp.SetValue(chromedp.CSS("#w-version"), "2.0"))
	c.click(t, "#work-dry-run")
	c.waitJS(t, 15*time.Second, `!!document.getElementById("work-confirm")`, "the dry run")
	require.Contains(t, c.text("#work-approval"), "wait for a second person's approval")
	require.Equal(t, "Firmware upgrade to version 2.0 on 3 racks", c.text("#work-confirm"))
	c.acceptConfirms(t)
	c.click(t, "#work-confirm")
	c.waitJS(t, 15*time.Second, `location.pathname.startsWith("/ui/approvals/") && !!document.getElementById("approval-status")`, "the confirm leads to the approval request")
	require.Equal(t, "pending", c.text("#approval-status"))
	require.Equal(t, "olivia", c.text("#approval-requested-by"))
	require.Equal(t, "3 tasks submitted: they wait for a second person's approval of this request", c.text(".notice"))
	upgrade := strings.TrimPrefix(evalIn[string](c.browser, `location.pathname`), "/ui/approvals/")
	var waiting int
	require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*) FROM task WHERE status = 'waiting'`).Scan(&waiting))
	require.Equal(t, 3, waiting, "the tasks wait for the approval")
	// It is withdrawn (the requester may reject their own), so that the
	// rollout below does not meet its tasks.
	c.onFresh(t, "the reason", chromedp.SetValue(chromedp.CSS("#reject-reason"), "planned as a rollout instead"))
	c.click(t, "#reject")
	c.waitJS(t, 15*time.Second, `!!document.getElementById("approval-status") && document.getElementById("approval-status").textContent === "rejected"`, "withdrawn")
	c.idle(t, "the withdrawn request's tasks end")

	// A new rollout over the same racks.
	c.open(t, c.opURL+"/ui/search?q=demo-")
	c.waitJS(t, 10*time.Second, `!!document.getElementById("search-rollout")`, "the search offers a rollout")
	c.follow(t, "#search-rollout", 15*time.Second, `location.pathname === "/ui/rollouts/new" && !!document.getElementById("r-name")`, "the new-rollout form of the racks found")
	c.onFresh(t, "name it", chromedp.SetValue(chromedp.CSS("#r-name"), "needs-two"), chromedp.SetValue(chromedp.CSS("#r-version"), "2.0"))
	c.click(t, "#run-dry-run")
	c.waitJS(t, 15*time.Second, `!!document.getElementById("run-create")`, "the dry run of the rollout")
	require.Contains(t, c.text("#run-approval-needed"), "second person's approval")
	require.Equal(t, "Create the rollout (3 racks, 2 phases)", c.text("#run-create"))
	c.acceptConfirms(t)
	c.click(t, "#run-create")
	c.waitJS(t, 15*time.Second, `location.pathname.startsWith("/ui/approvals/") && !!document.getElementById("approval-status")`, "the rollout's approval request")
	require.NotEqual(t, upgrade, strings.TrimPrefix(evalIn[string](c.browser, `location.pathname`), "/ui/approvals/"))
	require.Equal(t, "pending", c.text("#approval-status"))
	require.Equal(t, `rollout "needs-two" created (3 racks): it starts once a second person approves its plan`, c.text(".notice"))
	require.Contains(t, c.text("#approval-subjects"), "rollout")
	c.follow(t, "#approval-subjects a", 15*time.Second, `location.pathname.startsWith("/ui/rollouts/") && !!document.getElementById("run-approval")`, "the rollout's page offers its approval")
	require.Equal(t, "3 racks in 2 phases", c.text("#run-planned"))
	require.False(t, evalIn[bool](c.browser, `!!document.getElementById("run-pause")`), "nothing to pause before the approval")
}
