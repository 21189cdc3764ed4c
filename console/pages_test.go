package console

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/opstest"
	"github.com/nicoflow/flow/operations/powerbudget"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// pagesAPI is the Flow API with the methods the rack and task pages call:
// the inventory's and the task manager's own handlers.
type pagesAPI struct {
	flowv1connect.UnimplementedFlowHandler
	inv   *inventory.Handler
	tasks *operations.TaskHandler
}

func (a pagesAPI) GetRackInfoByID(ctx context.Context, r *flowv1.GetRackInfoByIDRequest) (*flowv1.GetRackInfoResponse, error) {
	return a.inv.GetRackInfoByID(ctx, r)
}

func (a pagesAPI) ListTasks(ctx context.Context, r *flowv1.ListTasksRequest) (*flowv1.ListTasksResponse, error) {
	return a.tasks.ListTasks(ctx, r)
}

func (a pagesAPI) GetTasksByIDs(ctx context.Context, r *flowv1.GetTasksByIDsRequest) (*flowv1.GetTasksByIDsResponse, error) {
	return a.tasks.GetTasksByIDs(ctx, r)
}

func (a pagesAPI) CancelTask(ctx context.Context, r *flowv1.CancelTaskRequest) (*flowv1.CancelTaskResponse, error) {
	return a.tasks.CancelTask(ctx, r)
}

func (a pagesAPI) PowerOnRack(ctx context.Context, r *flowv1.PowerOnRackRequest) (*flowv1.SubmitTaskResponse, error) {
	return a.tasks.PowerOnRack(ctx, r)
}

func (a pagesAPI) PowerOffRack(ctx context.Context, r *flowv1.PowerOffRackRequest) (*flowv1.SubmitTaskResponse, error) {
	return a.tasks.PowerOffRack(ctx, r)
}

// pagesAdmin is Flow's admin service with the methods the pages call:
// the power budgets' own handler.
type pagesAdmin struct {
	adminv1connect.UnimplementedAdminServiceHandler
	budgets *powerbudget.Handler
}

func (a pagesAdmin) ListPowerBudgets(ctx context.Context, r *adminv1.ListPowerBudgetsRequest) (*adminv1.ListPowerBudgetsResponse, error) {
	return a.budgets.ListPowerBudgets(ctx, r)
}

// pagesBundle is a console over the real inventory and task manager on a
// fresh database, its users named by a trusted proxy's header: olivia an
// operator, victor a viewer.
type pagesBundle struct {
	m       *opstest.Bundle
	console *Console
}

func setupPages(t *testing.T) *pagesBundle {
	t.Helper()
	m := opstest.NewTasks(t, opstest.Config{})
	policyPath := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policyPath, []byte("identities:\n  olivia: operator\n  victor: viewer\n"), 0o600))
	policy, err := edge.LoadPolicy(policyPath)
	require.NoError(t, err)
	logger := slog.New(slog.DiscardHandler)
	lim := edge.Limits{
		RequestBytes: 4 << 20, NameBytes: 256, SerialBytes: 128, ManufacturerBytes: 128, MACBytes: 64,
		DescriptionBytes: 16384, DocumentBytes: 1 << 20, StringBytes: 1024,
		Targets: 1000, Components: 256, Patterns: 100, ListItems: 1000, PageSize: 1000, RackComponentsPage: 100,
		Listings: 4, Submits: 2, RequestBytesInFlight: 32 << 20,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
	}
	flow := pagesAPI{inv: inventory.NewHandler(m.Inv, m.Pool), tasks: operations.NewTaskHandler(m.Pool, m.Tasks)}
	admin := pagesAdmin{budgets: powerbudget.NewHandler(powerbudget.New(m.Pool, m.Engine, 0, 0))}
	api := edge.NewHandler(logger, flow, admin, edge.Options{Policy: policy, Limits: lim})
	c, err := New(Options{API: api, Pool: m.Pool, Policy: policy, Logger: logger,
		AuthProxy: AuthProxy{Header: "X-User", Trusted: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &pagesBundle{m: m, console: c}
}

// get fetches path as user, without following redirects.
func (b *pagesBundle) get(t *testing.T, user, path string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Header.Set("X-User", user)
	w := httptest.NewRecorder()
	b.console.ServeHTTP(w, r)
	return w
}

// Every URL that takes an ID takes a name too; a name that matches
// nothing is a 404 naming it, a reference that cannot name anything a
// 400, never the API's 409.
func TestPagesByName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPages(t)
	r0, r1 := b.m.AddRack(t, 0), b.m.AddRack(t, 1)
	ids, err := b.m.Submit(t, opstest.PowerOn(r1))
	require.NoError(t, err)
	task := ids[0].String()
	_, err = b.m.Pool.Exec(ctx, `INSERT INTO operation_run (name, selector, options, operation_template, operation_type, operation_code)
		VALUES ('fw-canary', '{}', '{}', '{}', 'firmware_control', 'FIRMWARE_UPGRADE')`)
	require.NoError(t, err)

	for _, tt := range []struct {
		name, path string
		status     int
		want       string
	}{
		{"RackByName", "/ui/racks/demo-0001", http.StatusOK, "<h1>Rack demo-0001</h1>"},
		{"RackByID", "/ui/racks/" + r0.ID.String(), http.StatusOK, "<h1>Rack demo-0000</h1>"},
		{"RackBySerial", "/ui/racks/DEMO-RACK-00001", http.StatusOK, "<h1>Rack demo-0001</h1>"},
		{"UnknownRack", "/ui/racks/demo-0099", http.StatusNotFound, `no rack is named &#34;demo-0099&#34;`},
		{"UnknownRackID", "/ui/racks/" + uuid.NewString(), http.StatusNotFound, "not found"},
		{"MalformedRack", "/ui/racks/demo%01", http.StatusBadRequest, "control characters"},
		{"TaskByID", "/ui/tasks/" + task, http.StatusOK, "<h1>Task " + task[:8]},
		{"TaskByPrefix", "/ui/tasks/" + task[:8], http.StatusOK, "<h1>Task " + task[:8]},
		{"TaskByUpperPrefix", "/ui/tasks/" + strings.ToUpper(task[:8]), http.StatusOK, "<h1>Task " + task[:8]},
		{"NotATask", "/ui/tasks/nope", http.StatusBadRequest, `&#34;nope&#34; is not a task ID`},
		{"ShortTaskPrefix", "/ui/tasks/ab", http.StatusBadRequest, "too short"},
		{"UnknownTaskPrefix", "/ui/tasks/" + flip(task[:8]), http.StatusNotFound, "no task&#39;s ID starts with"},
		{"UnknownTaskID", "/ui/tasks/" + uuid.NewString(), http.StatusNotFound, "not found"},
		{"UnknownRollout", "/ui/rollouts/no-such-run", http.StatusNotFound, `no rollout is named &#34;no-such-run&#34;`},
		{"UnknownComponent", "/ui/components/demo-0000-xx-99", http.StatusNotFound, `no component is named &#34;demo-0000-xx-99&#34;`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := b.get(t, "victor", tt.path)
			require.Equal(t, tt.status, w.Code, w.Body.String())
			require.Contains(t, w.Body.String(), tt.want)
			require.NotEqual(t, http.StatusConflict, w.Code)
		})
	}

	run, err := b.console.resolveRun(ctx, "fw-canary")
	require.NoError(t, err)
	require.NoError(t, uuid.Validate(run))

	// A component is its rack's page, at its row; by name, serial or
	// BMC MAC.
	var comp string
	require.NoError(t, b.m.Pool.QueryRow(ctx, `SELECT id::text FROM component WHERE name = 'demo-0001-ct-01'`).Scan(&comp))
	for _, ref := range []string{"demo-0001-ct-01", comp, "DEMO00001ct01", "02:00:01:01:01:00", "02-00-01-01-01-00", "020001010100"} {
		w := b.get(t, "victor", "/ui/components/"+ref)
		require.Equal(t, http.StatusSeeOther, w.Code, ref)
		require.Equal(t, "/ui/racks/"+r1.ID.String()+"#c-"+comp, w.Header().Get("Location"), ref)
	}
	w := b.get(t, "victor", "/ui/racks/demo-0001")
	require.Contains(t, w.Body.String(), `<tr id="c-`+comp+`"`, "the row a component link lands on")

	// An open leak no admin overrode disables Power on, saying why; an
	// overridden one does not.
	require.NotContains(t, b.get(t, "olivia", "/ui/racks/demo-0001").Body.String(), "power-on-why")
	_, err = b.m.Pool.Exec(ctx, `INSERT INTO component_leak (component_id, status, detected_at) VALUES ($1, 'detected', now())`, comp)
	require.NoError(t, err)
	require.Contains(t, b.get(t, "olivia", "/ui/racks/demo-0001").Body.String(), `<button type="submit" id="power-on" disabled aria-describedby="power-on-why">`)
	_, err = b.m.Pool.Exec(ctx, `UPDATE component_leak SET override_at = now(), override_by = 'ada', override_reason = 'sensor fault' WHERE component_id = $1`, comp)
	require.NoError(t, err)
	require.Contains(t, b.get(t, "olivia", "/ui/racks/demo-0001").Body.String(), `<button type="submit" id="power-on">Power on</button>`)

	// Actions take names too: power on demo-0000 by name.
	w = b.post(t, "olivia", "/ui/racks/demo-0000/power/on")
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	require.True(t, strings.HasPrefix(w.Header().Get("Location"), "/ui/tasks/"), w.Header().Get("Location"))
}

// post sends an empty form from the console's own page as user.
func (b *pagesBundle) post(t *testing.T, user, path string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader("csrf="+testCSRF))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	r.Header.Set("X-User", user)
	r.AddCookie(&http.Cookie{Name: csrfCookie, Value: testCSRF})
	w := httptest.NewRecorder()
	b.console.ServeHTTP(w, r)
	return w
}

// flip changes a task ID prefix's first digit, so that (most likely) no
// task starts with it.
func flip(p string) string {
	if p[0] == '0' {
		return "f" + p[1:]
	}
	return "0" + p[1:]
}

// One search box on every page; its results are links by kind: racks by
// name or serial, components by name, serial or BMC MAC, tasks by ID
// prefix, rollouts by name, each kind cut at 50.
func TestSearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPages(t)
	r0, r1 := b.m.AddRack(t, 0), b.m.AddRack(t, 1)
	ids, err := b.m.Submit(t, opstest.PowerOn(r1))
	require.NoError(t, err)
	task := ids[0].String()
	_, err = b.m.Pool.Exec(ctx, `INSERT INTO operation_run (name, selector, options, operation_template, operation_type, operation_code)
		VALUES ('demo-canary', '{}', '{}', '{}', 'firmware_control', 'FIRMWARE_UPGRADE')`)
	require.NoError(t, err)

	search := func(q string) string {
		t.Helper()
		w := b.get(t, "victor", "/ui/search?q="+q)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		accessible(t, w.Body.String())
		return w.Body.String()
	}
	page := search("")
	require.Contains(t, page, `<form class="search" role="search" method="get" action="/ui/search">`, "the layout's box")
	require.NotContains(t, page, "search-summary")

	page = search("demo-0001")
	require.Contains(t, page, `<a href="/ui/racks/`+r1.ID.String()+`">demo-0001</a>`)
	require.NotContains(t, page, `<a href="/ui/racks/`+r0.ID.String()+`">demo-0000</a>`)
	require.Contains(t, page, `Components (35)`, "demo-0001's components match by name")

	page = search("DEMO-RACK-00000")
	require.Contains(t, page, `<a href="/ui/racks/`+r0.ID.String()+`">demo-0000</a></td><td>DEMO-RACK-00000</td>`)
	require.Contains(t, page, "<td>serial number</td>")

	page = search("02:00:01:01:03")
	require.Contains(t, page, `>demo-0001-ct-03</a>`, "by part of a BMC MAC")
	require.Contains(t, page, "Components (1)")
	page = search("02-00-01-01-03-01")
	require.Contains(t, page, `>demo-0001-ct-03</a>`, "by a whole MAC with dashes")

	page = search(task[:6])
	require.Contains(t, page, `<a href="/ui/tasks/`+task+`"><code>`+task+`</code></a>`)
	require.Contains(t, page, `<a href="/ui/racks/`+r1.ID.String()+`">demo-0001</a>`)

	page = search("canary")
	require.Contains(t, page, `">demo-canary</a>`)
	require.Contains(t, page, "Rollouts (1)")

	page = search("-0")
	require.Contains(t, page, "Components (50, more not shown)", "cut at 50")

	page = search("%25")
	require.Contains(t, page, "Nothing matches <strong>%</strong>", "LIKE's wildcards are text")

	w := b.get(t, "victor", "/ui/search?q=a%01b")
	require.Equal(t, http.StatusBadRequest, w.Code)
}

// Failures come first: the overview counts and lists the tasks that failed
// in the last day, by operation, each with its rack and error; a rack's
// header names its running task and its last task when that failed; a
// failed task's row says its error.
func TestFailuresFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPages(t)
	r0, r1 := b.m.AddRack(t, 0), b.m.AddRack(t, 1)
	failed, err := b.m.Submit(t, opstest.PowerOn(r0))
	require.NoError(t, err)
	old, err := b.m.Submit(t, opstest.PowerOn(r1))
	require.NoError(t, err)
	_, err = b.m.Pool.Exec(ctx, `UPDATE task SET status = 'failed', message = $2, finished_at = now(), queue_expires_at = NULL WHERE id = $1`,
		failed[0], "power on demo-0000-ct-03: BMC unreachable")
	require.NoError(t, err)
	_, err = b.m.Pool.Exec(ctx, `UPDATE task SET status = 'failed', message = 'long ago', finished_at = now() - interval '25 hours', queue_expires_at = NULL WHERE id = $1`, old[0])
	require.NoError(t, err)
	active, err := b.m.Submit(t, opstest.PowerOn(r1))
	require.NoError(t, err)

	f, err := b.console.failedTasks(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, f.Count, "the last 24 hours only")
	require.Len(t, f.Tasks, 1)
	require.Equal(t, FailedTask{ID: failed[0].String(), RackID: r0.ID.String(), RackName: "demo-0000", Operation: f.Tasks[0].Operation,
		Error: "power on demo-0000-ct-03: BMC unreachable", FinishedAt: f.Tasks[0].FinishedAt}, f.Tasks[0])
	require.Equal(t, []count{{f.Tasks[0].Operation, 1}}, f.ByOperation)

	tmpl, err := parseTemplates()
	require.NoError(t, err)
	var buf strings.Builder
	require.NoError(t, tmpl["overview"].ExecuteTemplate(&buf, "layout", pageData{Title: "overview", User: User{Identity: "victor", Role: "viewer"},
		Data: overviewData{Failed: f}, Now: time.Now()}))
	over := buf.String()
	accessible(t, over)
	require.Contains(t, over, `<span class="big" id="failed-count">1</span> task failed in 24 h`)
	require.Contains(t, over, `<td><a href="/ui/tasks/`+failed[0].String()+`">`+failed[0].String()[:8]+`</a></td><td>`+f.Tasks[0].Operation+`</td><td><a href="/ui/racks/`+r0.ID.String()+`">demo-0000</a></td>`)
	require.Contains(t, over, `<span class="bad">power on demo-0000-ct-03: BMC unreachable</span>`)
	buf.Reset()
	require.NoError(t, tmpl["overview"].ExecuteTemplate(&buf, "layout", pageData{Title: "overview", Data: overviewData{}, Now: time.Now()}))
	require.Contains(t, buf.String(), "No task failed in the last 24 hours.")

	// On the floor map: demo-0000's last task failed; demo-0001 has one
	// queued, which says more.
	racks, err := b.console.racks(ctx)
	require.NoError(t, err)
	require.Len(t, racks, 2)
	require.True(t, racks[0].LastFailed)
	require.Equal(t, "failed", racks[0].State())
	class, label := cellClass("status", racks[0], nil)
	require.Equal(t, [2]string{"c-failed", "last task failed"}, [2]string{class, label})
	class, _ = cellClass("task", racks[0], nil)
	require.Equal(t, "c-failed", class)
	require.True(t, racks[1].LastFailed)
	require.Equal(t, "queued", racks[1].State())

	w := b.get(t, "victor", "/ui/racks/demo-0000")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), `id="rack-failed-task" role="status">Last task failed: <a href="/ui/tasks/`+failed[0].String()+`">`)
	require.Contains(t, w.Body.String(), `: power on demo-0000-ct-03: BMC unreachable</p>`)
	require.NotContains(t, w.Body.String(), `id="rack-active-task"`)

	w = b.get(t, "victor", "/ui/racks/demo-0001")
	require.Contains(t, w.Body.String(), `id="rack-active-task"><span class="st st-pending">pending</span> <a href="/ui/tasks/`+active[0].String()+`">`)
	require.Contains(t, w.Body.String(), `Last task failed: <a href="/ui/tasks/`+old[0].String()+`">`, "the last finished task failed, however long ago, and a new one waits")

	w = b.get(t, "victor", "/ui/tasks")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), `<span class="bad task-error">power on demo-0000-ct-03: BMC unreachable</span>`)
	require.Contains(t, w.Body.String(), `<span class="bad task-error">long ago</span>`)
}

// ?live=0 turns a live page's stream off (no data-topics: the script
// opens none), so that it keeps no request open and renders whole under
// Chromium's --virtual-time-budget; the page says it is not live.
func TestLiveOff(t *testing.T) {
	t.Parallel()
	b := setupPages(t)
	b.m.AddRack(t, 0)
	live := b.get(t, "victor", "/ui/racks/demo-0000").Body.String()
	require.Contains(t, live, `<body data-topics="racks,leaks,tasks,sync,firmware,power">`)
	require.Contains(t, live, `<span class="live-state" id="live-state" aria-live="polite"></span>`)
	off := b.get(t, "victor", "/ui/racks/demo-0000?live=0").Body.String()
	require.Contains(t, off, `<body data-topics="">`)
	require.Contains(t, off, `<span class="live-state" id="live-state" aria-live="polite">not live</span>`)
	require.Contains(t, off, "<h1>Rack demo-0000</h1>")
}

func TestIDRange(t *testing.T) {
	t.Parallel()
	lo, hi := idRange("3F2A-9c")
	require.Equal(t, "3f2a9c00-0000-0000-0000-000000000000", lo)
	require.Equal(t, "3f2a9cff-ffff-ffff-ffff-ffffffffffff", hi)
	id := "3f2a9c01-e9eb-4281-9de6-7c400aa8fba5"
	lo, hi = idRange(id)
	require.Equal(t, id, lo)
	require.Equal(t, id, hi)
}

// A rack's components name their health alerts (one alert, two alerts);
// with a leak open, Power on is disabled and says why.
func TestRackPageAlertsAndLeak(t *testing.T) {
	t.Parallel()
	tmpl, err := parseTemplates()
	require.NoError(t, err)
	comp := func(name string, leak flowv1.LeakStatus, alerts ...*flowv1.HealthProbeAlert) *flowv1.Component {
		return &flowv1.Component{Info: &flowv1.DeviceInfo{Id: &flowv1.UUID{Id: name + "-id"}, Name: name}, Position: &flowv1.RackPosition{},
			Status: &flowv1.ComponentOperationStatus{}, LeakStatus: leak, Health: &flowv1.HealthReport{Alerts: alerts}}
	}
	d := rackData{Rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Name: "demo-0000"}, Location: &flowv1.Location{}}, ID: "r1", Comps: []*flowv1.Component{
		comp("ct-00", flowv1.LeakStatus_LEAK_STATUS_DETECTED, &flowv1.HealthProbeAlert{Id: "Leak", Message: "coolant"}),
		comp("ct-01", flowv1.LeakStatus_LEAK_STATUS_NOT_DETECTED, &flowv1.HealthProbeAlert{Id: "Maintenance"}, &flowv1.HealthProbeAlert{Id: "HostUpdateInProgress"}),
		{Info: &flowv1.DeviceInfo{Id: &flowv1.UUID{Id: "x"}, Name: "ct-02"}, Position: &flowv1.RackPosition{}, Status: &flowv1.ComponentOperationStatus{}},
	}, Leaks: 1, HeldLeaks: 1}
	render := func(d rackData) string {
		var b strings.Builder
		require.NoError(t, tmpl["rack"].ExecuteTemplate(&b, "layout", pageData{Title: "rack", User: User{Identity: "olivia", Role: "operator"}, CSRF: "tok", Data: d, Now: time.Now()}))
		return b.String()
	}
	page := render(d)
	accessible(t, page)
	require.Contains(t, page, `<span class="bad">1 alert: Leak (coolant)</span>`)
	require.Contains(t, page, `<span class="bad">2 alerts: Maintenance; HostUpdateInProgress</span>`)
	require.Contains(t, page, `<button type="submit" id="power-on" disabled aria-describedby="power-on-why">Power on</button>`)
	require.Contains(t, page, "Not while a leak is open: 1 component leaking, not overridden")
	d.HeldLeaks = 0 // overridden
	require.Contains(t, render(d), `<button type="submit" id="power-on">Power on</button>`)
}
