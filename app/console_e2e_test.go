package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/nicoflow/flow/cli"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/inventory"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim/nicosim"
)

// consoleE2E is a Flow server as a site runs it (mutual TLS, a policy
// with an operator and a viewer) with the console behind an
// authenticating proxy (one per user, as the proxy would name them), the
// simulators and three demo racks, and one headless Chromium.
type consoleE2E struct {
	*e2e
	pool  *pgxpool.Pool
	admin flowv1connect.FlowClient // admin's certificate, straight to the API
	// adminSvc is Flow's own admin service with the admin's certificate;
	// adminTLS that certificate.
	adminSvc adminv1connect.AdminServiceClient
	adminTLS *tls.Config
	opURL    string // the console through the proxy, as olivia (operator)
	viewURL  string // as victor (viewer)
	racks    []inventory.Rack
	browser  context.Context
	logs     *syncBuffer
}

// chromiumPath finds Chromium; its absence fails the test (the console's
// tests need a real browser: .ci/run installs it).
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium on PATH: the console's browser tests need it; install it with `apt-get install chromium` (Debian; chromium-browser on Ubuntu) — .ci/run does")
	return ""
}

// newBrowser starts one headless Chromium for the whole test, at 1280×900.
func newBrowser(t testing.TB) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate("about:blank")), "start Chromium")
	return bctx
}

// startConsoleE2E starts it; overrides set or replace its environment
// (FLOW_APPROVAL_THRESHOLD for the approvals' test).
func startConsoleE2E(t *testing.T, overrides ...map[string]string) *consoleE2E {
	t.Helper()
	certs := t.TempDir()
	require.NoError(t, edge.WriteDevCerts(certs, nil))
	policy, err := os.ReadFile(filepath.Join(certs, "policy.yaml"))
	require.NoError(t, err)
	policyPath := filepath.Join(certs, "console-policy.yaml")
	require.NoError(t, os.WriteFile(policyPath, append(policy, "  olivia: operator\n  victor: viewer\n"...), 0o600))

	// Power changes take a second, firmware phases two: long enough to
	// watch a task's steps turn complete and to pause a rollout.
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: time.Second, firmwarePhase: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	dbURL := dbtest.NewDB(t)
	vars := map[string]string{
		"DATABASE_URL": dbURL, "FLOW_LISTEN_ADDR": "127.0.0.1:0", "FLOW_ADMIN_LISTEN": "off",
		"NICO_CORE_API_URL": sims.nicoSrv.URL(), "PSM_API_URL": sims.psmSrv.URL(),
		"FLOW_SHUTDOWN_TIMEOUT": "5s", "CERTDIR": certs, "FLOW_AUTHZ_POLICY": policyPath,
		"FLOW_CONSOLE_AUTH_PROXY_HEADER": "X-Forwarded-User", "FLOW_CONSOLE_AUTH_PROXY_ADDRESSES": "127.0.0.1, ::1",
		"FLOW_CONFIG_FILE":                       writeFile(t, "flowconfig.yaml", "leak_detection_interval: 1s\ninventory_run_frequency: 2s\n"),
		"FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "true", "FLOW_FIRMWARE_POLL_INTERVAL": "200ms",
		// Every rollout here is over most of a 3-rack site: with mutual TLS
		// identities each would await a second identity's approval
		// (docs/change-safety.md), which is not what these pages test.
		"FLOW_APPROVAL_THRESHOLD": "0",
	}
	for _, o := range overrides {
		for k, v := range o {
			vars[k] = v
		}
	}
	cfg, err := LoadConfig(env(vars))
	require.NoError(t, err)
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := newServer(ctx, cfg, newLogger(logs, "json", slogInfo), serveOptions{})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	api := "https://" + srv.Addr().String()
	tlsFor := func(role string) *tls.Config {
		c, err := cli.TLSConfig(cli.TLSFiles{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, role+".crt"), Key: filepath.Join(certs, role+".key")})
		require.NoError(t, err)
		return c
	}
	c := &consoleE2E{
		e2e:      &e2e{sims: sims, url: api, inv: inventory.NewService(), dbURL: dbURL, srv: srv, logs: logs},
		pool:     openPool(t, dbURL),
		admin:    flowv1connect.NewFlowClient(tlsHTTPClient(tlsFor("admin")), api),
		adminSvc: adminv1connect.NewAdminServiceClient(tlsHTTPClient(tlsFor("admin")), api),
		adminTLS: tlsFor("admin"),
		logs:     logs,
	}
	// The proxy authenticates its users its own way and reaches Flow with
	// its own certificate; Flow trusts its header because it comes from
	// 127.0.0.1.
	proxyTLS := tlsFor("viewer")
	c.opURL = authProxy(t, api, proxyTLS, "olivia")
	c.viewURL = authProxy(t, api, proxyTLS, "victor")
	for i := range 3 {
		c.racks = append(c.racks, c.addRack(t, i, true))
	}
	_, err = flowAdminRunSync(c, tlsFor("admin"))
	require.NoError(t, err)
	c.browser = newBrowser(t)
	return c
}

const slogInfo = 0

// flowAdminRunSync runs one inventory-sync cycle (links components to
// their Core IDs and reads power).
func flowAdminRunSync(c *consoleE2E, cfg *tls.Config) (int, error) {
	res, err := tlsHTTPClient(cfg).Post(c.url+"/flow.admin.v1.AdminService/RunSync", "application/json", strings.NewReader(`{}`))
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return res.StatusCode, fmt.Errorf("RunSync: %s", res.Status)
	}
	return res.StatusCode, nil
}

// authProxy is an authenticating reverse proxy that has authenticated
// user: it passes every request to the API port with X-Forwarded-User.
func authProxy(t *testing.T, api string, cfg *tls.Config, user string) string {
	t.Helper()
	target, err := url.Parse(api)
	require.NoError(t, err)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
			r.Out.Header.Set("X-Forwarded-User", user)
		},
		Transport:     tlsHTTPClient(cfg).Transport,
		FlushInterval: -1,
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// eval runs js in the page; an error (the page navigating) is the zero value.
func evalIn[T any](ctx context.Context, js string) T {
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		var zero T
		return zero
	}
	return v
}

func (c *consoleE2E) open(t *testing.T, u string) {
	t.Helper()
	require.NoError(t, chromedp.Do(c.browser, chromedp.Navigate(u)))
}

// click clicks the element sel names. A live update may swap the
// element for its fresh copy between the query and the click (the
// browser then reports that it cannot find the node): the click is tried
// again on the new element, a few times.
func (c *consoleE2E) click(t *testing.T, sel string) {
	t.Helper()
	c.onFresh(t, "click "+sel, chromedp.Click(chromedp.CSS(sel)))
}

// follow clicks sel, a link or a form button whose repeat is harmless (a
// filter, a dry run), and waits up to within for js, which says the page
// it leads to is there; a click a live update swallowed (the element
// swapped for its fresh copy as the click landed: seen at load 12) is made
// again while sel is still on the page.
func (c *consoleE2E) follow(t *testing.T, sel string, within time.Duration, js, msg string) {
	t.Helper()
	present := "!!document.querySelector(" + strconv.Quote(sel) + ")"
	for range 3 {
		if evalIn[bool](c.browser, present) {
			c.click(t, sel)
		}
		if waitFor(within/3, func() bool { return evalIn[bool](c.browser, js) }) {
			return
		}
	}
	c.waitJS(t, within, js, msg)
}

// onFresh runs actions that query an element, again (a few times) while
// the browser says it cannot find the node: a live update swapped the
// element for its fresh copy between the query and the action.
func (c *consoleE2E) onFresh(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	var err error
	for range 5 {
		// Chromium says either, depending on when the swap happened.
		if err = chromedp.Do(c.browser, actions...); err == nil || !strings.Contains(err.Error(), "Could not find node") && !strings.Contains(err.Error(), "No node with given id found") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err, what)
}

// waitFor polls cond every 50 ms for up to within and reports whether it
// became true.
func waitFor(within time.Duration, cond func() bool) bool {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// waitJS polls js in the page until it is true.
func (c *consoleE2E) waitJS(t *testing.T, within time.Duration, js, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return evalIn[bool](c.browser, js) }, within, 50*time.Millisecond, msg)
}

// waitJSReloading polls js like waitJS, reloading the page when a live
// update has not brought the change within a few seconds: for a state the
// server has already confirmed, where the test is about what the page
// shows and not about how fast the stream delivers it.
func (c *consoleE2E) waitJSReloading(t *testing.T, within time.Duration, js, msg string) {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); {
		if waitFor(5*time.Second, func() bool { return evalIn[bool](c.browser, js) }) {
			return
		}
		require.NoError(t, chromedp.Do(c.browser, chromedp.Reload()), "reload")
	}
	c.waitJS(t, 5*time.Second, js, msg)
}

// screenshot captures the page as name.png: into docs/console, the
// pictures of docs/console.md, when FLOW_CONSOLE_SCREENSHOTS=1; otherwise
// into the test's temporary folder, so that a test run does not change
// the tree it runs in.
func (c *consoleE2E) screenshot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(c.browser, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NotEmpty(t, png)
	dir := "../docs/console"
	if os.Getenv("FLOW_CONSOLE_SCREENSHOTS") != "1" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// taskCount counts the tasks submitted directly (no trigger), as the
// console's actions are: leak responses (an event rule's or an
// isolation's), a rollout's targets and schedule firings are left out,
// because an earlier subtest's leak or rollout goes on in the background
// and, on a loaded machine, adds its tasks in the middle of a later
// subtest's count (seen: a cross-site post's "nothing written" at load 36).
func (c *consoleE2E) taskCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT count(*) FROM task WHERE trigger_type = ''`).Scan(&n))
	return n
}

// TestConsoleInABrowser drives the console in headless Chromium: the
// overview and the floor map show the racks; a power-on started from the
// console as an operator shows on its task page, whose steps turn
// complete without a reload; a rollout is paused and resumed from its
// page; a raised leak shows on the open floor map within seconds; a
// viewer sees no controls, and a viewer's forged action is refused with
// nothing written; a cross-site POST is refused; the compliance page, the
// floor map's compliance colouring and a rack's devices show a site some
// of whose devices are below the active baseline, and an operator applies
// it (dry run, then the run). It takes the screenshots of docs/console.md.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	c := startConsoleE2E(t)
	ctx := context.Background()

	t.Run("OverviewAndFloorMapShowTheRacks", func(t *testing.T) {
		c.open(t, c.opURL+"/ui/")
		c.waitJS(t, 10*time.Second, `document.getElementById("rack-count").textContent === "3"`, "the overview counts 3 racks")
		require.Equal(t, "olivia", evalIn[string](c.browser, `document.querySelector(".who .id").textContent`))
		require.Equal(t, "operator", evalIn[string](c.browser, `document.querySelector(".who .role").textContent`))
		c.open(t, c.opURL+"/ui/floor")
		names := evalIn[[]string](c.browser, `Array.from(document.querySelectorAll("a.rack")).map(a => a.dataset.rack)`)
		require.Equal(t, []string{"demo-0000", "demo-0001", "demo-0002"}, names)
		c.waitJS(t, 15*time.Second, `Array.from(document.querySelectorAll("a.rack")).every(a => a.classList.contains("c-off"))`, "after the sync, the floor shows the racks powered off")
		c.screenshot(t, "floor")
		// The keyboard reaches every rack: Tab to one, arrows along the row.
		c.onFresh(t, "focus demo-0000, arrow right", chromedp.Focus(chromedp.CSS(`a.rack[data-rack="demo-0000"]`)), chromedp.KeyEvent(kb.ArrowRight))
		require.Equal(t, "demo-0001, row-00-pos-01: power off", evalIn[string](c.browser, `document.activeElement.getAttribute("aria-label")`))
		require.NoError(t, chromedp.Do(c.browser, chromedp.KeyEvent(kb.ArrowLeft)))
		require.Equal(t, "demo-0000", evalIn[string](c.browser, `document.activeElement.dataset.rack`), "focus stays on the racks, live updates or not")
		c.open(t, c.opURL+"/ui/")
		c.screenshot(t, "overview")

		res, err := http.Get(c.opURL + "/ui/")
		require.NoError(t, err)
		res.Body.Close()
		require.Contains(t, res.Header.Get("Content-Security-Policy"), "script-src 'self'")
		require.Contains(t, res.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	})

	t.Run("SearchAndNames", func(t *testing.T) {
		// The layout's search box finds a rack by name; its URL takes the
		// name; an unknown one is a 404 page naming it.
		c.open(t, c.opURL+"/ui/floor")
		// Typed again if a live update of the floor swapped the box as the
		// keys went in.
		searched := `location.pathname === "/ui/search" && !!document.querySelector("#search-racks a")`
		for i := 0; i < 3 && !evalIn[bool](c.browser, searched); i++ {
			if evalIn[bool](c.browser, `location.pathname !== "/ui/search"`) {
				c.onFresh(t, "search demo-0002", chromedp.SendKeys(chromedp.CSS("#search-q"), "demo-0002\n"))
			}
			waitFor(5*time.Second, func() bool { return evalIn[bool](c.browser, searched) })
		}
		c.waitJS(t, 10*time.Second, searched, "the search lists the rack")
		c.follow(t, "#search-racks a", 15*time.Second, `location.pathname === "/ui/racks/`+c.racks[2].ID.String()+`" && document.querySelector("h1").textContent === "Rack demo-0002"`, "the result opens the rack")
		res, err := http.Get(c.opURL + "/ui/racks/demo-0001")
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		res, err = http.Get(c.opURL + "/ui/racks/demo-0099")
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusNotFound, res.StatusCode)
		require.Contains(t, string(body), "no rack is named &#34;demo-0099&#34;")
	})

	t.Run("VirtualTimeBudgetRendersWithLiveOff", func(t *testing.T) {
		// The command docs/console.md gives: with ?live=0 the page keeps
		// no stream open, so virtual time runs out and Chromium prints the
		// whole page (with the stream open it would wait for ever).
		ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, chromiumPath(t), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--virtual-time-budget=5000", "--dump-dom", c.viewURL+"/ui/?live=0").Output()
		require.NoError(t, err, "Chromium finished within 90 s")
		require.Contains(t, string(out), `<span class="big" id="rack-count">3</span>`)
		require.Contains(t, string(out), `<body data-topics="">`)
	})

	var taskPath string
	t.Run("PowerOnFromTheConsoleRunsLive", func(t *testing.T) {
		rack := c.racks[0]
		c.open(t, c.opURL+"/ui/racks/"+rack.ID.String())
		c.waitJS(t, 10*time.Second, `!!document.getElementById("power-on")`, "an operator sees the power-on button")
		c.screenshot(t, "rack")
		before := c.taskCount(t)
		c.click(t, "#power-on")
		c.waitJS(t, 15*time.Second, `location.pathname.startsWith("/ui/tasks/") && !!document.getElementById("task-status")`, "the console goes to the new task's page")
		taskPath = evalIn[string](c.browser, `location.pathname`)
		require.Equal(t, before+1, c.taskCount(t))
		// The page stays: from here on it changes only by the live feed.
		require.True(t, evalIn[bool](c.browser, `window.__stayed = true`))
		first := evalIn[string](c.browser, `document.getElementById("task-status").textContent`)
		require.NotEqual(t, "completed", first, "the task has only just started")
		require.Equal(t, "olivia", evalIn[string](c.browser, `document.getElementById("submitted-by").textContent`))
		c.screenshot(t, "task-running")
		var sawRunningStep bool
		require.Eventually(t, func() bool {
			if evalIn[bool](c.browser, `!!document.querySelector('.step[data-status="running"]')`) {
				sawRunningStep = true
			}
			return evalIn[bool](c.browser, `window.__stayed === true && document.getElementById("task-status").textContent === "completed" &&
				Array.from(document.querySelectorAll(".step")).every(s => s.dataset.status === "completed")`)
		}, 90*time.Second, 50*time.Millisecond, "the task page shows every step complete, without a reload")
		require.True(t, sawRunningStep, "the page showed a step running before it completed")
		c.screenshot(t, "task")
		require.Contains(t, c.logs.String(), `"msg":"audit","identity":"olivia","method":"/v1.Flow/PowerOnRack"`, "the action is the API call, audited as the user")
	})

	t.Run("RolloutPausedAndResumed", func(t *testing.T) {
		// One phase of the three racks, one at a time: while paused no
		// other target is claimed, so the phase cannot end (and the run
		// reach its phase gate) before the resume, however slow the page.
		req := rolloutRequest("console-fw", rolloutOpts{concurrency: 1, phases: equalPhases(1, false)})
		id := createRun(t, c.admin, req)
		c.open(t, c.opURL+"/ui/rollouts/"+id.GetId())
		c.waitJS(t, 30*time.Second, `!!document.getElementById("run-pause")`, "a running rollout offers pause")
		// Followed: a live update can swallow the click; pausing a paused
		// run changes nothing.
		c.follow(t, "#run-pause", 45*time.Second, `document.getElementById("run-state") && document.getElementById("run-state").textContent === "paused" && !!document.getElementById("run-resume")`, "the page shows the rollout paused")
		require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED, getRun(t, c.admin, id).GetSummary().GetState().GetStatus())
		c.screenshot(t, "rollout-paused")
		// The click's effect is the server's: wait for the run to leave
		// paused there, then for the page to say so (on a loaded machine
		// the live feed may take a while); a click the page lost (a live
		// update swapped the button as it landed) is made again.
		resumed := func() bool {
			return getRun(t, c.admin, id).GetSummary().GetState().GetStatus() != flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED
		}
		for i := range 3 {
			if i > 0 && !evalIn[bool](c.browser, `!!document.getElementById("run-resume")`) {
				break // the page moved on: the click was taken
			}
			c.click(t, "#run-resume")
			if waitFor(10*time.Second, resumed) {
				break
			}
		}
		require.True(t, resumed(), "the rollout resumed on the server")
		c.waitJSReloading(t, 45*time.Second, `document.getElementById("run-state") && document.getElementById("run-state").textContent !== "paused"`, "the page shows the rollout resumed")
		require.Contains(t, c.logs.String(), `"identity":"olivia","method":"/v1.Flow/ResumeOperationRun"`)
		// By its name too, with its targets.
		c.open(t, c.opURL+"/ui/rollouts/console-fw")
		c.waitJS(t, 10*time.Second, `document.querySelector("h1").textContent.startsWith("Rollout console-fw") && document.querySelectorAll("#targets tbody tr").length === 3`, "the rollout by name lists its 3 targets")
		c.screenshot(t, "rollout")
		c.open(t, c.opURL+"/ui/rollouts")
		c.screenshot(t, "rollouts")
	})

	t.Run("RaisedLeakShowsOnTheFloorMap", func(t *testing.T) {
		rack := readRack(t, c.pool, c.racks[1].ID)
		tray := rack.component(t, inventory.ComponentTypeCompute, 10)
		require.NotEmpty(t, tray.ExternalID)
		c.open(t, c.opURL+"/ui/floor?by=leak")
		require.True(t, evalIn[bool](c.browser, `window.__stayed = true`))
		set := time.Now()
		require.NoError(t, c.sims.nico.SetLeak(tray.ExternalID, true))
		c.waitJS(t, 20*time.Second, `window.__stayed === true && document.querySelector('a.rack[data-rack="demo-0001"]').classList.contains("c-leak")`,
			"the floor map shows the leak without a reload")
		t.Logf("leak raised → on the open floor map in %s", time.Since(set).Round(time.Millisecond))
		require.False(t, evalIn[bool](c.browser, `document.querySelector('a.rack[data-rack="demo-0002"]').classList.contains("c-leak")`))
		c.screenshot(t, "floor-leak")
		c.open(t, c.opURL+"/ui/events-rules")
		c.waitJS(t, 10*time.Second, `document.querySelector("#leaks tbody").textContent.includes("`+tray.Name+`")`, "the leak is listed")
		c.screenshot(t, "events")
	})

	t.Run("ViewerSeesNoControlsAndCannotAct", func(t *testing.T) {
		rack := c.racks[2]
		c.open(t, c.viewURL+"/ui/racks/"+rack.ID.String())
		c.waitJS(t, 10*time.Second, `document.querySelector(".who .role").textContent === "viewer"`, "the viewer is a viewer")
		require.False(t, evalIn[bool](c.browser, `!!document.querySelector("main form[method=post], main button")`), "a viewer sees no controls")
		c.open(t, c.viewURL+taskPath)
		c.waitJS(t, 10*time.Second, `!!document.getElementById("task-status")`, "")
		require.False(t, evalIn[bool](c.browser, `!!document.querySelector("main form[method=post]")`))

		// A forged request: a viewer's own session, a valid token, same
		// origin. The console makes the call as the viewer; the API refuses
		// it before its handler runs.
		jar, err := cookiejar.New(nil)
		require.NoError(t, err)
		hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := hc.Get(c.viewURL + "/ui/racks/" + rack.ID.String())
		require.NoError(t, err)
		res.Body.Close()
		u, _ := url.Parse(c.viewURL + "/ui/")
		var token string
		for _, ck := range jar.Cookies(u) {
			if ck.Name == "flow_console_csrf" {
				token = ck.Value
			}
		}
		require.NotEmpty(t, token)
		before := c.taskCount(t)
		req, err := http.NewRequest(http.MethodPost, c.viewURL+"/ui/racks/"+rack.ID.String()+"/power/on", strings.NewReader(url.Values{"csrf": {token}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		res, err = hc.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusForbidden, res.StatusCode, string(body))
		require.Contains(t, string(body), "needs role operator")
		require.Equal(t, before, c.taskCount(t), "nothing written")
		require.Contains(t, c.logs.String(), `"method":"/v1.Flow/PowerOnRack","identity":"victor"`, "the refusal is the API's")
		c.open(t, c.viewURL+"/ui/rollouts")
		c.screenshot(t, "viewer")
	})

	t.Run("CrossSitePostIsRefused", func(t *testing.T) {
		rack := c.racks[2]
		// Another site's page that posts a power-on to the console at once.
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/ui/racks/%s/power/on"><input name="csrf" value="guess"></form><script>document.getElementById("f").submit()</script>`, c.opURL, rack.ID)
		}))
		defer evil.Close()
		before := c.taskCount(t)
		c.open(t, strings.Replace(evil.URL, "127.0.0.1", "localhost", 1))
		c.waitJS(t, 15*time.Second, `location.pathname.endsWith("/power/on") && !!document.getElementById("error")`, "the console answers the cross-site post")
		require.Contains(t, evalIn[string](c.browser, `document.getElementById("error").textContent`), "cross-site request refused")
		require.Equal(t, before, c.taskCount(t), "nothing written")
	})

	t.Run("OtherPages", func(t *testing.T) {
		_, err := c.admin.CreateTaskSchedule(ctx, scheduleReq("nightly power check", "cron", "0 2 * * *", 0, c.racks[0].Name))
		require.NoError(t, err)
		for _, p := range []struct{ path, name, want string }{
			{"/ui/schedules", "schedules", "nightly power check"},
			{"/ui/tasks", "tasks", "power_on"},
			{"/ui/sync", "sync", "Cycle #"},
		} {
			c.open(t, c.opURL+p.path)
			c.waitJS(t, 10*time.Second, `document.getElementById("main").textContent.includes(`+fmt.Sprintf("%q", p.want)+`)`, p.path)
			c.screenshot(t, p.name)
		}
	})

	t.Run("ComplianceAgainstTheBaseline", func(t *testing.T) {
		c.firmwareSite(t)
		// The page: the active baseline, the counts, the roll-ups, the table.
		c.open(t, c.opURL+"/ui/compliance")
		c.waitJS(t, 10*time.Second, `!!document.getElementById("active-baseline")`, "the page names the active baseline")
		require.Contains(t, evalIn[string](c.browser, `document.getElementById("active-baseline").textContent`), "gb200 revision 2")
		require.Contains(t, evalIn[string](c.browser, `document.getElementById("active-baseline").textContent`), "activated by spiffe://flow.dev/ns/flow/sa/admin")
		count := func(state string) string {
			return evalIn[string](c.browser, `document.querySelector('#state-counts a[data-state="`+state+`"] .big').textContent`)
		}
		require.Equal(t, []string{"2", "1", "1", "101", "0"}, []string{count("upgrade"), count("downgrade"), count("unknown"), count("compliant"), count("updating")})
		require.Equal(t, []string{"demo-0001", "demo-0002", "demo-0000"}, evalIn[[]string](c.browser, `Array.from(document.querySelectorAll("#rollup-rack tbody tr")).map(r => r.dataset.group)`),
			"racks most urgent first: below the baseline, then above it, then compliant")
		require.Equal(t, "below baseline", evalIn[string](c.browser, `document.querySelector('#rollup-rack tr[data-group="demo-0001"] .cs').textContent`))
		require.Equal(t, "history", evalIn[string](c.browser, `document.querySelector("details.history") ? "history" : ""`))

		// A count filters the table, in the URL.
		c.follow(t, `#state-counts a[data-state="upgrade"]`, 15*time.Second, `location.search === "?state=upgrade" && document.querySelectorAll("#devices tbody tr[data-state]").length === 2`, "the table shows the two trays below the baseline")
		rows := evalIn[[]string](c.browser, `Array.from(document.querySelectorAll("#devices tbody tr")).map(r => r.textContent.replace(/\s+/g, " ").trim())`)
		require.Len(t, rows, 2)
		for _, r := range rows {
			require.Contains(t, r, "demo-0001")
			require.Contains(t, r, "bmc 1.9 → 2.0 below")
		}
		require.Contains(t, evalIn[string](c.browser, `document.querySelector("#devices tbody a").getAttribute("href")`), "/ui/racks/"+c.racks[1].ID.String())
		// Every device not at the baseline, each saying why.
		c.follow(t, "#off-count", 15*time.Second, `document.querySelectorAll("#devices tbody tr[data-state]").length === 4`, "the table shows the four devices not at the baseline")
		require.ElementsMatch(t, []string{"upgrade", "upgrade", "downgrade", "unknown"}, evalIn[[]string](c.browser, `Array.from(document.querySelectorAll("#devices tbody tr")).map(r => r.dataset.state)`))
		require.Equal(t, "updating,upgrade,downgrade,unknown", evalIn[string](c.browser, `document.getElementById("f-state").value`), "the filter form says the selection")
		c.screenshot(t, "compliance")

		// The filter form writes the URL too; the unknown tray says why.
		// A live update can swap the form between setting its value and
		// the click, which then submits the fresh form's own value: set
		// and submit again until the URL says the filter.
		for range 3 {
			c.onFresh(t, "filter unknown", chromedp.SetValue(chromedp.CSS(`#f-state`), "unknown"), chromedp.Click(chromedp.CSS(`#f-apply`)))
			if waitFor(5*time.Second, func() bool { return evalIn[bool](c.browser, `location.search.includes("state=unknown")`) }) {
				break
			}
		}
		c.waitJS(t, 10*time.Second, `location.search.includes("state=unknown") && document.querySelectorAll("#devices tbody tr[data-state=unknown]").length === 1`, "the filter form narrows to the unknown tray")
		require.Contains(t, evalIn[string](c.browser, `document.querySelector("#devices tbody tr").textContent`), "demo-0002-ct-04")
		require.Contains(t, evalIn[string](c.browser, `document.querySelector("#devices tbody tr").textContent`), `"TBD" cannot be ordered against "1.5"`)
		c.open(t, c.opURL+"/ui/compliance?rack=nonesuch")
		c.waitJS(t, 10*time.Second, `!!document.getElementById("filter-error")`, "an unknown rack is said beside the filters")

		// The floor map coloured by compliance, in words too.
		c.open(t, c.opURL+"/ui/floor?by=compliance")
		c.waitJS(t, 10*time.Second, `!!document.querySelector('a.rack[data-rack="demo-0001"].cs-upgrade')`, "the rack below the baseline is coloured so")
		label := func(rack string) string {
			return evalIn[string](c.browser, `document.querySelector('a.rack[data-rack="`+rack+`"]').getAttribute("aria-label")`)
		}
		require.Equal(t, "demo-0001, row-00-pos-01: compliance below baseline: 2 of 35 devices below the baseline", label("demo-0001"))
		require.Equal(t, "demo-0002, row-00-pos-02: compliance above baseline: 1 of 35 devices above the baseline", label("demo-0002"))
		require.Equal(t, "demo-0000, row-00-pos-00: compliance compliant: all 35 devices compliant", label("demo-0000"))
		require.Contains(t, evalIn[string](c.browser, `document.querySelector(".legend").textContent`), "below baseline")
		require.Contains(t, evalIn[string](c.browser, `document.getElementById("floor-note").textContent`), "baseline gb200 revision 2")
		c.screenshot(t, "floor-compliance")
		// A new revision shows on the open map without a reload: it leaves
		// NVOS out, so demo-0002's switch above it no longer counts and
		// the rack is left with its unknown tray.
		require.True(t, evalIn[bool](c.browser, `window.__stayed = true`))
		_, err := c.adminSvc.UpdateBaseline(ctx, &adminv1.UpdateBaselineRequest{Name: "gb200", BaseRevision: 2, Activate: true,
			Description: "NVOS left out", Entries: baselineEntries("2.0", "")})
		require.NoError(t, err)
		c.waitJS(t, 20*time.Second, `window.__stayed === true && !!document.querySelector('a.rack[data-rack="demo-0002"].cs-unknown')`, "the map follows the new revision live")

		// The rack page: its devices' compliance.
		c.open(t, c.opURL+"/ui/racks/"+c.racks[1].ID.String())
		c.waitJS(t, 10*time.Second, `!!document.getElementById("rack-compliance")`, "the rack says its compliance")
		require.Contains(t, evalIn[string](c.browser, `document.getElementById("rack-compliance").textContent`), "below baseline 2 of 35 devices below the baseline")
		require.Equal(t, 2, evalIn[int](c.browser, `Array.from(document.querySelectorAll("#components tbody tr")).filter(r => r.textContent.includes("bmc 1.9 → 2.0")).length`))

		// A viewer sees no apply control, and the form is refused them.
		c.open(t, c.viewURL+"/ui/compliance")
		c.waitJS(t, 10*time.Second, `!!document.getElementById("state-counts")`, "the viewer sees the page")
		require.False(t, evalIn[bool](c.browser, `!!document.getElementById("apply-plan")`))
		res, err := http.Get(c.viewURL + "/ui/compliance/apply")
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusForbidden, res.StatusCode)

		// An operator applies it: a dry run that creates nothing, then the run.
		runs := func() int {
			var n int
			require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*) FROM operation_run`).Scan(&n))
			return n
		}
		// The rollout an earlier subtest left waiting at a phase gate
		// holds demo-0001: apply would overlap it (refused), so it goes.
		unfinished, err := c.pool.Query(ctx, `SELECT id FROM operation_run WHERE status IN ('pending', 'running', 'paused')`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(unfinished, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		for _, id := range ids {
			_, err := c.admin.CancelOperationRun(ctx, &flowv1.CancelOperationRunRequest{Id: &flowv1.UUID{Id: id.String()}, Reason: "the baseline's run would overlap it"})
			require.NoError(t, err)
		}
		before := runs()
		c.open(t, c.opURL+"/ui/compliance")
		c.waitJS(t, 10*time.Second, `!!document.getElementById("apply-plan")`, "an operator may apply the baseline")
		c.follow(t, "#apply-plan", 15*time.Second, `location.pathname === "/ui/compliance/apply" && !!document.getElementById("apply-dry-run")`, "the apply form")
		c.follow(t, "#apply-dry-run", 15*time.Second, `!!document.getElementById("apply-waves")`, "the dry run shows the waves")
		require.Equal(t, []string{"canary (0) 1 demo-0001 none"}, evalIn[[]string](c.browser, `Array.from(document.querySelectorAll("#apply-waves tbody tr")).map(r => Array.from(r.cells).map(c => c.textContent).join(" "))`))
		require.Equal(t, before, runs(), "a dry run creates nothing")
		c.screenshot(t, "compliance-apply")
		// A confirm of a plan other than the one the site makes now
		// creates nothing and shows the new plan.
		jar, err := cookiejar.New(nil)
		require.NoError(t, err)
		hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err = hc.Get(c.opURL + "/ui/compliance/apply")
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		u, _ := url.Parse(c.opURL + "/ui/")
		var token string
		for _, ck := range jar.Cookies(u) {
			if ck.Name == "flow_console_csrf" {
				token = ck.Value
			}
		}
		req, err := http.NewRequest(http.MethodPost, c.opURL+"/ui/compliance/apply", strings.NewReader(url.Values{"csrf": {token}, "confirm": {"1"}, "plan": {"0123456789abcdef0123456789abcdef"}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		res, err = hc.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusConflict, res.StatusCode, string(body))
		require.Contains(t, string(body), "The plan changed since you reviewed it")
		require.Contains(t, string(body), `id="apply-confirm"`)
		require.Equal(t, before, runs(), "a stale confirm creates nothing")
		c.click(t, "#apply-confirm")
		// The apply is one API call; at load 36 it once took 30 s (the
		// database starved of CPU), so the wait is the call's, not a page's.
		c.waitJS(t, time.Minute, `location.pathname.startsWith("/ui/rollouts/") && !!document.getElementById("run-state")`, "the confirm goes to the new run's page")
		require.Equal(t, before+1, runs())
		require.Contains(t, c.logs.String(), `"identity":"olivia","method":"/flow.admin.v1.AdminService/ApplyBaseline"`, "the apply is the API call, audited as the user")
		id := strings.TrimPrefix(evalIn[string](c.browser, `location.pathname`), "/ui/rollouts/")
		run := getRun(t, c.admin, &flowv1.UUID{Id: id})
		require.Contains(t, run.GetSummary().GetName(), "gb200")
		c.open(t, c.opURL+"/ui/rollouts")
		c.waitJS(t, 10*time.Second, `!!document.querySelector('#rollout-list a[href="/ui/rollouts/`+id+`"]')`, "the run is listed on the rollouts page")
	})

	t.Run("FeedsLoopsAndBudgets", func(t *testing.T) {
		// Racks 0 and 1 on feed hall-0/bw-a and loop cdu-1 (rack 1's leak,
		// raised above, is still open), rack 2 on hall-0/bw-b and cdu-2;
		// bw-a has a budget.
		place := func(rack, feed, loop string) {
			t.Helper()
			_, err := c.adminSvc.SetRackPlacement(ctx, &adminv1.SetRackPlacementRequest{Rack: rack, PowerFeed: &feed, CoolantLoop: &loop})
			require.NoError(t, err)
		}
		place(c.racks[0].Name, "hall-0/bw-a", "cdu-1")
		place(c.racks[1].Name, "hall-0/bw-a", "cdu-1")
		place(c.racks[2].Name, "hall-0/bw-b", "cdu-2")
		kw := 300.0
		_, err := c.adminSvc.SetPowerBudget(ctx, &adminv1.SetPowerBudgetRequest{Feed: "hall-0/bw-a", MaxTransitions: 2, MaxKw: &kw})
		require.NoError(t, err)

		// The rack page: feed with its budget, loop, and the cooling hold
		// of rack 1's open leak.
		c.open(t, c.opURL+"/ui/racks/"+c.racks[0].Name)
		c.waitJS(t, 10*time.Second, `!!document.getElementById("rack-feed") && document.getElementById("rack-feed").textContent === "hall-0/bw-a"`, "the rack page names its feed")
		placement := evalIn[string](c.browser, `document.getElementById("rack-placement").textContent`)
		require.Contains(t, placement, "(budget: 0 of 2 transitions in progress, 0 of 300 kW)")
		require.Contains(t, placement, "Coolant loop: cdu-1")
		require.Contains(t, evalIn[string](c.browser, `document.getElementById("rack-cooling-hold").textContent`), "coolant loop cdu-1 has an open leak on rack demo-0001")
		c.screenshot(t, "rack-placement")
		// Its feed links to the budget page.
		c.follow(t, "#rack-feed", 10*time.Second, `location.pathname === "/ui/power" && !!document.querySelector('tr[data-feed="hall-0/bw-a"]')`, "the feed's link opens the budget page")
		require.Equal(t, "2 transitions at once, 300 kW", evalIn[string](c.browser, `document.querySelector('tr[data-feed="hall-0/bw-a"] td.budget').textContent`))
		require.Equal(t, "no budget", evalIn[string](c.browser, `document.querySelector('tr[data-feed="hall-0/bw-b"] td.budget').textContent`))
		c.screenshot(t, "power")

		// The floor map by feed and by loop: the words, a colour per name,
		// the legend with the counts.
		label := func(rack string) string {
			return evalIn[string](c.browser, `document.querySelector('a.rack[data-rack="`+rack+`"]').getAttribute("aria-label")`)
		}
		class := func(rack string) string {
			return evalIn[string](c.browser, `Array.from(document.querySelector('a.rack[data-rack="`+rack+`"]').classList).find(k => k.startsWith("pl-")) || ""`)
		}
		legend := func() string { return evalIn[string](c.browser, `document.querySelector("ul.legend").textContent`) }
		c.open(t, c.opURL+"/ui/floor?by=feed")
		c.waitJS(t, 10*time.Second, `!!document.querySelector('a.rack[data-rack="demo-0002"]')`, "the floor map by feed")
		require.Equal(t, "demo-0000, row-00-pos-00: feed hall-0/bw-a", label("demo-0000"))
		require.Equal(t, "demo-0002, row-00-pos-02: feed hall-0/bw-b", label("demo-0002"))
		require.NotEmpty(t, class("demo-0000"))
		require.Equal(t, class("demo-0000"), class("demo-0001"), "one feed, one colour")
		require.Contains(t, legend(), "hall-0/bw-a (2 racks)")
		require.Contains(t, legend(), "hall-0/bw-b (1 rack)")
		c.screenshot(t, "floor-feed")
		// Live: rack 2 moved to bw-a through the API shows on the open map
		// (its cells' cache follows the inventory generation).
		require.True(t, evalIn[bool](c.browser, `window.__stayed = true`))
		place(c.racks[2].Name, "hall-0/bw-a", "cdu-2")
		c.waitJSReloading(t, 20*time.Second, `document.querySelector('a.rack[data-rack="demo-0002"]').getAttribute("aria-label").endsWith("feed hall-0/bw-a")`, "the moved rack shows on its new feed")
		require.Equal(t, class("demo-0000"), class("demo-0002"))
		require.Contains(t, legend(), "hall-0/bw-a (3 racks)")
		c.open(t, c.opURL+"/ui/floor?by=loop")
		c.waitJS(t, 10*time.Second, `!!document.querySelector('a.rack[data-rack="demo-0002"]')`, "the floor map by loop")
		require.Equal(t, "demo-0001, row-00-pos-01: loop cdu-1", label("demo-0001"))
		require.Equal(t, "demo-0002, row-00-pos-02: loop cdu-2", label("demo-0002"))
		require.Contains(t, legend(), "cdu-1 (2 racks)")
		require.Contains(t, legend(), "cdu-2 (1 rack)")

		// A viewer reads the budget page; it has no controls.
		c.open(t, c.viewURL+"/ui/power")
		c.waitJS(t, 10*time.Second, `!!document.querySelector('tr[data-feed="hall-0/bw-a"]')`, "a viewer sees the budgets")
		require.Equal(t, 0, evalIn[int](c.browser, `document.querySelectorAll('main form, main button').length`))
	})
}

// baselineEntries are the demo site's baseline: compute trays' BMC at
// bmc and BIOS 1.5, switches' NVOS at nvos ("" none) and BMC 1.3,
// shelves' PMC 3.1.
func baselineEntries(bmc, nvos string) []*adminv1.BaselineEntry {
	out := []*adminv1.BaselineEntry{
		{ComponentType: "compute", Component: "bmc", Version: bmc},
		{ComponentType: "compute", Component: "bios", Version: "1.5"},
		{ComponentType: "nvswitch", Component: "bmc", Version: "1.3"},
		{ComponentType: "powershelf", Component: "pmc", Version: "3.1"},
	}
	if nvos != "" {
		out = append(out, &adminv1.BaselineEntry{ComponentType: "nvswitch", Component: "nvos", Version: nvos})
	}
	return out
}

// firmwareSite gives the simulated devices installed versions, every one
// at the baseline but two of demo-0001's trays (BMC 1.9: below), one of
// demo-0002's switches (NVOS 25.03: above) and one of its trays (a BIOS
// "TBD", which no version orders against: unknown), activates the baseline (revision 2 of gb200), and waits
// for a sync to read the versions. The tasks earlier subtests started end
// first, so that none is updating a device.
func (c *consoleE2E) firmwareSite(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, c.pool.QueryRow(ctx, `SELECT count(*) FROM task WHERE status IN ('pending', 'running', 'waiting')`).Scan(&n))
		return n == 0
	}, 120*time.Second, 200*time.Millisecond, "the earlier subtests' tasks end")
	for i, r := range c.racks {
		for _, cm := range r.Components {
			p := nicosim.DevicePatch{}
			switch cm.Type {
			case inventory.ComponentTypeCompute:
				p.Firmware = map[string]string{"bmc": "2.0", "bios": "1.5"}
				if i == 1 && (cm.Position.TrayIdx == 3 || cm.Position.TrayIdx == 12) {
					p.Firmware["bmc"] = "1.9"
				}
				if i == 2 && cm.Position.TrayIdx == 4 {
					p.Firmware["bios"] = "TBD"
				}
			case inventory.ComponentTypeNVSwitch:
				p.Firmware = map[string]string{"nvos": "25.02", "bmc": "1.3"}
				if i == 2 && cm.Position.TrayIdx == 0 {
					p.Firmware["nvos"] = "25.03"
				}
			case inventory.ComponentTypePowerShelf:
				p.Firmware = map[string]string{"pmc": "3.1"}
			}
			require.NoError(t, c.sims.nico.Update(cm.BMCs[0].MAC.String(), p), cm.Name)
		}
	}
	_, err := c.adminSvc.CreateBaseline(ctx, &adminv1.CreateBaselineRequest{Name: "gb200", Description: "first cut", Entries: baselineEntries("1.9", "25.02")})
	require.NoError(t, err)
	_, err = c.adminSvc.UpdateBaseline(ctx, &adminv1.UpdateBaselineRequest{Name: "gb200", BaseRevision: 1, Description: "BMC 2.0", Entries: baselineEntries("2.0", "25.02"), Activate: true})
	require.NoError(t, err)
	var last *adminv1.GetComplianceResponse
	ok := waitFor(60*time.Second, func() bool {
		_, err := flowAdminRunSync(c, c.adminTLS)
		require.NoError(t, err)
		res, err := c.adminSvc.GetCompliance(ctx, &adminv1.GetComplianceRequest{States: []string{"upgrade", "downgrade", "unknown", "updating", "not_covered"}})
		require.NoError(t, err)
		last = res
		s := res.GetSite()
		return s.GetUpgrade() == 2 && s.GetDowngrade() == 1 && s.GetUnknown() == 1 && s.GetCompliant() == 101
	})
	require.True(t, ok, "a sync reads the versions the simulator reports: %v", protojson.Format(last))
}
