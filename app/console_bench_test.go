package app

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

var consoleBenchRacks = flag.Int("console.racks", 3000, "racks BenchmarkConsole seeds")

// BenchmarkConsole measures the console at site scale: a `flow serve`
// child holding -console.racks demo racks (3,000 by default), its
// simulators holding the first three:
//
//	go test ./app -run '^$' -bench Console -benchtime 1x
//
// It reports overview-ms and floor-ms, the server's time per page (the
// median of 20 whole-page fetches), and -changed-ms (the median of 5,
// each right after a component's power changed), each with its CPU per
// page (-cpu-ms the server's, -pg-cpu-ms PostgreSQL's; pageCPU); overview-fcp-ms and floor-fcp-ms,
// first contentful paint in headless Chromium (median of 5 loads);
// change-to-page-ms, from a task's state change (its row's updated_at
// when it ends) to its open task page showing it (the page's own clock
// when it swapped the new state in), worst of three tasks watched in
// three tabs; rss-50-pages-MB, the server's RSS with 50 live pages open
// (50 event streams, each fetching its page again on every change, as
// the pages' script does) while those tasks run, and base-rss-MB before.
func BenchmarkConsole(b *testing.B) {
	ctx := context.Background()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: time.Second, firmwarePhase: time.Second})
	require.NoError(b, err)
	b.Cleanup(func() { sims.Close(context.Background()) })
	dbURL := dbtest.NewDB(b)
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 4})
	require.NoError(b, err)
	defer pool.Close()
	seedStart := time.Now()
	_, err = seedDemoRacks(ctx, pool, *consoleBenchRacks)
	require.NoError(b, err)
	b.Logf("seeded %d racks in %s", *consoleBenchRacks, time.Since(seedStart).Round(time.Second))
	inv := inventory.NewService()
	var watched []inventory.Rack
	for i := range 3 {
		d := inventory.DemoRack(i)
		r, err := inv.RackBySerial(ctx, pool, d.Manufacturer, d.SerialNumber, true)
		require.NoError(b, err)
		require.NoError(b, sims.Seed(simDevices(r.Components)))
		watched = append(watched, r)
	}
	port, err := pglocal.FreePort()
	require.NoError(b, err)
	url := "http://127.0.0.1:" + itoa(port)
	p := startServerProcess(b, []string{"DATABASE_URL=" + dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port), "FLOW_LOG_LEVEL=warn",
		"NICO_CORE_API_URL=" + sims.nicoSrv.URL(), "PSM_API_URL=" + sims.psmSrv.URL(),
		"FLOW_CONFIG_FILE=" + writeFile(b, "flowconfig.yaml", "inventory_run_frequency: 24h\n")})
	waitHealthy(b, url)
	pid := p.cmd.Process.Pid
	client := flowv1connect.NewFlowClient(http.DefaultClient, url)

	get := func(path string, partial bool) time.Duration {
		req, err := http.NewRequest(http.MethodGet, url+path, nil)
		require.NoError(b, err)
		if partial {
			req.Header.Set("X-Console-Partial", "1")
		}
		t0 := time.Now()
		res, err := http.DefaultClient.Do(req)
		require.NoError(b, err)
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(b, http.StatusOK, res.StatusCode)
		require.Positive(b, n)
		return time.Since(t0)
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ResetTimer()
	cpu := pageCPU{b, pid, pool}
	flipPower := func(i int) {
		_, err := pool.Exec(ctx, `UPDATE component SET power_state = CASE power_state WHEN 'on' THEN 'off' ELSE 'on' END
			WHERE id = (SELECT id FROM component WHERE name = $1)`, fmt.Sprintf("demo-%04d-ct-03", 100+(i*137)%(*consoleBenchRacks-100)))
		require.NoError(b, err)
	}
	for range b.N {
		for _, pg := range []struct{ path, name string }{{"/ui/", "overview"}, {"/ui/floor", "floor"}} {
			get(pg.path, false) // warm
			var ds []time.Duration
			cpu.measure(b, pg.name, 20, func(int) { ds = append(ds, get(pg.path, false)) })
			b.ReportMetric(median(ds), pg.name+"-ms")
			var changed []time.Duration
			cpu.measure(b, pg.name+"-changed", 5, func(i int) {
				flipPower(i)
				changed = append(changed, get(pg.path, false))
			})
			b.ReportMetric(median(changed), pg.name+"-changed-ms")
		}

		browser := newBrowser(b)
		for _, pg := range []struct{ path, name string }{{"/ui/", "overview"}, {"/ui/floor", "floor"}} {
			b.ReportMetric(median(firstPaints(b, browser, url+pg.path, 5, 30*time.Second)), pg.name+"-fcp-ms")
		}

		// 50 live pages: each holds an event stream and fetches its page
		// again on every change, as console.js does.
		base := procStatus(b, pid, "VmRSS")
		pagesCtx, stopPages := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var mu sync.Mutex
		refetches := 0
		paths := []string{"/ui/", "/ui/floor", "/ui/tasks"}
		for i := range 50 {
			path := paths[i%len(paths)]
			topics := map[string]string{"/ui/": "tasks,racks,leaks,runs,sync", "/ui/floor": "racks,leaks,tasks,sync", "/ui/tasks": "tasks"}[path]
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(pagesCtx, http.MethodGet, url+"/ui/live?topics="+topics, nil)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				defer res.Body.Close()
				sc := bufio.NewScanner(res.Body)
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "event: change") {
						preq, _ := http.NewRequestWithContext(pagesCtx, http.MethodGet, url+path, nil)
						preq.Header.Set("X-Console-Partial", "1")
						if pres, err := http.DefaultClient.Do(preq); err == nil {
							_, _ = io.Copy(io.Discard, pres.Body)
							pres.Body.Close()
							mu.Lock()
							refetches++
							mu.Unlock()
						}
					}
				}
			})
		}

		// Three tasks, each watched on its page in its own tab.
		var tabs []context.Context
		var ids []string
		for _, r := range watched {
			res, err := client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(r.Name), Description: "console bench"})
			require.NoError(b, err)
			id := res.GetTaskIds()[0].GetId()
			ids = append(ids, id)
			tab, cancel := chromedp.NewContext(browser)
			b.Cleanup(cancel)
			require.NoError(b, chromedp.Do(tab, chromedp.Navigate(url+"/ui/tasks/"+id)))
			tabs = append(tabs, tab)
		}
		var worst time.Duration
		for i, tab := range tabs {
			var shown float64
			require.Eventually(b, func() bool {
				done := evalIn[bool](tab, `document.getElementById("task-status").textContent === "completed"`)
				if done {
					shown = evalIn[float64](tab, `Number(document.body.dataset.refreshed || 0)`)
				}
				return done
			}, 3*time.Minute, 20*time.Millisecond)
			var changed time.Time
			require.NoError(b, pool.QueryRow(ctx, `SELECT updated_at FROM task WHERE id = $1`, ids[i]).Scan(&changed))
			require.Positive(b, shown, "the page showed it by a live update, not a load")
			lag := time.UnixMilli(int64(shown)).Sub(changed)
			b.Logf("task %d: state change → page %s", i, lag.Round(time.Millisecond))
			worst = max(worst, lag)
		}
		b.ReportMetric(float64(worst.Milliseconds()), "change-to-page-ms")
		rss := procStatus(b, pid, "VmRSS")
		mu.Lock()
		n := refetches
		mu.Unlock()
		b.ReportMetric(float64(base>>20), "base-rss-MB")
		b.ReportMetric(float64(rss>>20), "rss-50-pages-MB")
		b.ReportMetric(float64(n), "page-refetches")
		stopPages()
		wg.Wait()
		fmt.Fprint(io.Discard)
	}
}

// firstPaints opens page n times and returns each load's first contentful
// paint, as the browser's performance timeline records it, waiting up to
// within for each.
func firstPaints(b *testing.B, browser context.Context, page string, n int, within time.Duration) []time.Duration {
	b.Helper()
	var fcp []time.Duration
	for range n {
		require.NoError(b, chromedp.Do(browser, chromedp.Navigate(page)))
		var ms float64
		require.Eventually(b, func() bool {
			ms = evalIn[float64](browser, `(performance.getEntriesByName("first-contentful-paint")[0] || {startTime: 0}).startTime`)
			return ms > 0
		}, within, 20*time.Millisecond)
		fcp = append(fcp, time.Duration(ms*float64(time.Millisecond)))
	}
	return fcp
}
