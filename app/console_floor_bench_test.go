package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
)

var consoleFloorRacks = flag.Int("console.floor-racks", 15000, "racks BenchmarkConsoleFloor seeds (35 components each)")

// The site BenchmarkConsoleFloor seeds: floorHalls halls of floorRows
// rows, racks spread evenly over them.
const floorHalls, floorRows = 10, 30

// seedFloor loads racks × 35 components by COPY (as inventory's
// seedBulk does): rack-00000… in halls hall-01… ("row-07-pos-12"),
// each with 18 compute trays, 9 NVLink switches and 8 power shelves,
// most powered on, every 7th rack off, every 11th mixed, and a leak on
// every 1,000th rack's first tray.
func seedFloor(tb testing.TB, ctx context.Context, pool *pgxpool.Pool, racks int) {
	tb.Helper()
	var rackRows, compRows, leakRows [][]any
	perRow := max(1, (racks+floorHalls*floorRows-1)/(floorHalls*floorRows))
	for r := range racks {
		rid := uuid.New()
		hall, row, pos := r/(floorRows*perRow)+1, (r/perRow)%floorRows+1, r%perRow+1
		rackRows = append(rackRows, []any{rid, fmt.Sprintf("rack-%05d", r), "Bench", fmt.Sprintf("FR-%05d", r),
			fmt.Sprintf("hall-%02d", hall), fmt.Sprintf("row-%02d-pos-%02d", row, pos)})
		for c := range 35 {
			cid := uuid.New()
			typ := "Compute"
			switch {
			case c >= 27:
				typ = "PowerShelf"
			case c >= 18:
				typ = "NVSwitch"
			}
			power := "on"
			if r%7 == 0 || (r%11 == 0 && c%2 == 0) {
				power = "off"
			}
			compRows = append(compRows, []any{cid, rid, typ, fmt.Sprintf("rack-%05d-c%02d", r, c), "Bench", fmt.Sprintf("FC-%05d-%02d", r, c), "1.0", int32(c), power})
			if r%1000 == 0 && c == 0 {
				leakRows = append(leakRows, []any{cid, "detected"})
			}
		}
	}
	_, err := pool.CopyFrom(ctx, pgx.Identifier{"rack"}, []string{"id", "name", "manufacturer", "serial_number", "location_room", "location_position"}, pgx.CopyFromRows(rackRows))
	require.NoError(tb, err)
	_, err = pool.CopyFrom(ctx, pgx.Identifier{"component"}, []string{"id", "rack_id", "type", "name", "manufacturer", "serial_number", "firmware_version", "slot_id", "power_state"}, pgx.CopyFromRows(compRows))
	require.NoError(tb, err)
	_, err = pool.CopyFrom(ctx, pgx.Identifier{"component_leak"}, []string{"component_id", "status"}, pgx.CopyFromRows(leakRows))
	require.NoError(tb, err)
	_, err = pool.Exec(ctx, "VACUUM ANALYZE")
	require.NoError(tb, err)
}

// pageCPU measures the CPU pages cost: the server process's, and
// PostgreSQL's (the backends connected to the benchmark's database:
// the server's pool and the benchmark's own, whose few updates cost
// little).
type pageCPU struct {
	tb   testing.TB
	pid  int
	pool *pgxpool.Pool
}

func (c pageCPU) now() (server, pg time.Duration) {
	var pids []int32
	require.NoError(c.tb, c.pool.QueryRow(context.Background(), `SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&pids))
	for _, p := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(int(p))); err == nil {
			pg += procCPU(c.tb, int(p))
		}
	}
	return procCPU(c.tb, c.pid), pg
}

// measure runs f n times and reports its CPU per run as name-cpu-ms
// (the server's) and name-pg-cpu-ms (PostgreSQL's).
func (c pageCPU) measure(b *testing.B, name string, n int, f func(i int)) {
	s0, p0 := c.now()
	for i := range n {
		f(i)
	}
	s1, p1 := c.now()
	b.ReportMetric(float64((s1-s0).Microseconds())/1000/float64(n), name+"-cpu-ms")
	b.ReportMetric(float64((p1-p0).Microseconds())/1000/float64(n), name+"-pg-cpu-ms")
}

// BenchmarkConsoleFloor measures the overview and the floor map at
// -console.floor-racks racks × 35 components (15,000 by default, issue
// 49), seeded by COPY, served by a `flow serve` child:
//
//	go test ./app -run '^$' -bench ConsoleFloor -benchtime 1x
//
// For each page (the overview; the floor map's default view; one row,
// ?hall=hall-03&row=07; a name search, ?q=rack-0421) it reports the
// server's time per page, -ms (the median of 10 whole-page fetches,
// nothing changed between them) and -changed-ms (the median of 5, each
// after a component's power changed, so that nothing read before can be
// reused), with their CPU per page, -cpu-ms and -changed-cpu-ms (the
// server's) and -pg-cpu-ms and -changed-pg-cpu-ms (PostgreSQL's: the
// machine's load inflates the wall times, not these), and -fcp-ms, first contentful paint in headless Chromium
// (?live=0, median of 3 loads). leak-to-row-ms is a live update on a
// filtered view: from a leak's commit on a rack of the open row view to
// the page showing it (the page's own clock), worst of three.
func BenchmarkConsoleFloor(b *testing.B) {
	ctx := context.Background()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0"})
	require.NoError(b, err)
	b.Cleanup(func() { sims.Close(context.Background()) })
	dbURL := dbtest.NewDB(b)
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 4})
	require.NoError(b, err)
	defer pool.Close()
	seedStart := time.Now()
	seedFloor(b, ctx, pool, *consoleFloorRacks)
	b.Logf("seeded %d racks × 35 components in %s", *consoleFloorRacks, time.Since(seedStart).Round(time.Second))
	port, err := pglocal.FreePort()
	require.NoError(b, err)
	url := "http://127.0.0.1:" + itoa(port)
	srv := startServerProcess(b, []string{"DATABASE_URL=" + dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port), "FLOW_LOG_LEVEL=warn",
		"NICO_CORE_API_URL=" + sims.nicoSrv.URL(), "PSM_API_URL=" + sims.psmSrv.URL(),
		"FLOW_CONFIG_FILE=" + writeFile(b, "flowconfig.yaml", "inventory_run_frequency: 24h\n")})
	waitHealthy(b, url)
	cpu := pageCPU{b, srv.cmd.Process.Pid, pool}

	size := map[string]int64{}
	get := func(path string) time.Duration {
		t0 := time.Now()
		res, err := http.Get(url + path)
		require.NoError(b, err)
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(b, http.StatusOK, res.StatusCode, path)
		require.Positive(b, n)
		size[path] = n
		return time.Since(t0)
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	flipPower := func(i int) {
		_, err := pool.Exec(ctx, `UPDATE component SET power_state = CASE power_state WHEN 'on' THEN 'off' ELSE 'on' END
			WHERE id = (SELECT id FROM component WHERE name = $1)`, fmt.Sprintf("rack-%05d-c%02d", (i*137)%*consoleFloorRacks, 3))
		require.NoError(b, err)
	}
	pages := []struct{ path, name string }{
		{"/ui/", "overview"}, {"/ui/floor", "floor"}, {"/ui/floor?hall=hall-03&row=07", "floor-row"}, {"/ui/floor?q=rack-0421", "floor-search"},
	}
	b.ResetTimer()
	for range b.N {
		for _, pg := range pages {
			first := get(pg.path)
			var ds []time.Duration
			cpu.measure(b, pg.name, 10, func(int) { ds = append(ds, get(pg.path)) })
			var changed []time.Duration
			cpu.measure(b, pg.name+"-changed", 5, func(i int) {
				flipPower(i)
				changed = append(changed, get(pg.path))
			})
			b.Logf("%s: first %s, %d bytes", pg.path, first.Round(time.Millisecond), size[pg.path])
			b.ReportMetric(median(ds), pg.name+"-ms")
			b.ReportMetric(median(changed), pg.name+"-changed-ms")
		}

		browser := newBrowser(b)
		for _, pg := range pages {
			sep := "?"
			if slices.Contains([]byte(pg.path), '?') {
				sep = "&"
			}
			b.ReportMetric(median(firstPaints(b, browser, url+pg.path+sep+"live=0", 3, 60*time.Second)), pg.name+"-fcp-ms")
		}

		// A live row view: a leak raised on one of its racks shows
		// without a reload.
		require.NoError(b, chromedp.Do(browser, chromedp.Navigate(url+"/ui/floor?hall=hall-03&row=07&by=leak")))
		var targets []string
		require.NoError(b, pool.QueryRow(ctx, `SELECT array_agg(name ORDER BY name) FROM (SELECT name FROM rack
			WHERE location_room = 'hall-03' AND location_position LIKE 'row-07-%' ORDER BY name LIMIT 3) r`).Scan(&targets))
		require.Len(b, targets, 3)
		time.Sleep(2 * time.Second) // the page's stream opens
		var worst time.Duration
		for i, rack := range targets {
			var committed time.Time
			require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO component_leak (component_id, status)
					SELECT id, 'detected' FROM component WHERE name = $1
					ON CONFLICT (component_id) DO UPDATE SET status = 'detected', updated_at = now()`, rack+"-c01"); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO leak_occurrence (component_kind, external_id, source_key) VALUES ('compute', $1, $1)`, fmt.Sprintf("bench-%s-%d", rack, i)); err != nil {
					return err
				}
				committed = time.Now()
				return nil
			}))
			var shown float64
			sel := fmt.Sprintf(`a.rack[data-rack=%q]`, rack)
			require.Eventually(b, func() bool {
				if evalIn[bool](browser, `(document.querySelector(`+fmt.Sprintf("%q", sel)+`) || {classList: {contains: () => false}}).classList.contains("c-leak")`) {
					shown = evalIn[float64](browser, `Number(document.body.dataset.refreshed || 0)`)
					return true
				}
				return false
			}, time.Minute, 20*time.Millisecond)
			require.Positive(b, shown, "the page showed it by a live update, not a load")
			lag := time.UnixMilli(int64(shown)).Sub(committed)
			b.Logf("leak on %s → open row view in %s", rack, lag.Round(time.Millisecond))
			worst = max(worst, lag)
		}
		b.ReportMetric(float64(worst.Milliseconds()), "leak-to-row-ms")
	}
}
