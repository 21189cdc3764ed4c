package app

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

var (
	siteRacks    = flag.Int("sitelist.racks", 3000, "racks (35 components each) BenchmarkSiteListings seeds")
	siteClients  = flag.Int("sitelist.clients", 100, "concurrent clients of BenchmarkSiteListings")
	siteDuration = flag.Duration("sitelist.duration", 10*time.Second, "how long BenchmarkSiteListings' clients call, per iteration")
	siteGzip     = flag.Bool("sitelist.gzip", false, "BenchmarkSiteListings' clients accept gzip answers (as connect-go clients do; gRPC clients do not by default)")
	siteTimeline = flag.Bool("sitelist.timeline", false, "BenchmarkSiteListings logs, per 500 ms of the run, the calls that ended in it and their p50, p99 and max latency, and the slowest calls with when they started and which client made them (to tell a periodic tail from a starved client)")
	siteWarm     = flag.Int("sitelist.warm", 0, "calls each BenchmarkSiteListings client makes, all clients at once, before the measured run (0: the measured run starts on cold connections, as 100 clients starting together would)")
	siteEnv      = flag.String("sitelist.env", "", "extra server settings for BenchmarkSiteListings, NAME=value[,NAME=value…] (the figures before the cache: FLOW_LISTING_CACHE_BYTES=0,FLOW_MAX_CONCURRENT_LISTINGS=4)")
)

// BenchmarkSiteListings is issue 29's listing at site scale: a `flow serve`
// child holding -sitelist.racks demo racks of 35 components (3,000 by
// default) and -sitelist.clients clients (100) in a closed loop, each
// calling GetListOfRacks with components (pages of 100 racks, ~1.5 MB of
// protobuf) as fast as it can for -sitelist.duration, client k's call n
// asking page (k+n) mod the number of pages, so every page is read by many
// clients at once. A call's latency is from sending the request to reading
// the last byte of the answer; the client reads the bytes but does not
// decode them (decoding 1.5 MB pages is the client's CPU, on the same 2
// cores). Metrics: calls/s, p50 and p99 latency, MB/s of answers and the
// server's peak RSS (VmHWM). Run:
//
//	go test ./app -run '^$' -bench SiteListings -benchtime 1x
//
// A sub-benchmark GetComponents does the same with GetComponents pages of
// 1,000 components.
func BenchmarkSiteListings(b *testing.B) {
	ctx := context.Background()
	dbURL := dbtest.NewDB(b)
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 8})
	require.NoError(b, err)
	t0 := time.Now()
	require.NoError(b, inventory.NewService().CreateDemoRacks(ctx, pool, *siteRacks, 4))
	b.Logf("seeded %d racks of 35 components in %s", *siteRacks, time.Since(t0).Round(time.Millisecond))
	_, err = pool.Exec(ctx, "ANALYZE")
	require.NoError(b, err)
	pool.Close()

	port, err := pglocal.FreePort()
	require.NoError(b, err)
	url := "http://127.0.0.1:" + itoa(port)
	env := []string{"DATABASE_URL=" + dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port), "FLOW_LOG_LEVEL=warn"}
	if *siteEnv != "" {
		env = append(env, strings.Split(*siteEnv, ",")...)
	}
	p := startServerProcess(b, env)
	waitHealthy(b, url)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *siteClients, DisableCompression: !*siteGzip}}

	pages := (*siteRacks + 99) / 100
	b.Run("GetListOfRacks", func(b *testing.B) {
		siteListingLoad(b, client, url+flowv1connect.FlowGetListOfRacksProcedure, p.cmd.Process.Pid, dbURL, pages, func(page int) proto.Message {
			return &flowv1.GetListOfRacksRequest{WithComponents: true, Pagination: &flowv1.Pagination{Offset: int32(page * 100), Limit: 100}}
		})
	})
	comps := *siteRacks * 35
	b.Run("GetComponents", func(b *testing.B) {
		siteListingLoad(b, client, url+flowv1connect.FlowGetComponentsProcedure, p.cmd.Process.Pid, dbURL, (comps+999)/1000, func(page int) proto.Message {
			return &flowv1.GetComponentsRequest{Pagination: &flowv1.Pagination{Offset: int32(page * 1000), Limit: 1000}}
		})
	})
}

func siteListingLoad(b *testing.B, client *http.Client, url string, pid int, dbURL string, pages int, req func(page int) proto.Message) {
	bodies := make([][]byte, pages)
	for i := range bodies {
		var err error
		bodies[i], err = proto.Marshal(req(i))
		require.NoError(b, err)
	}
	call := func(page int) (int64, error) {
		hr, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(bodies[page]))
		if err != nil {
			return 0, err
		}
		hr.Header.Set("Content-Type", "application/proto")
		if *siteGzip {
			hr.Header.Set("Accept-Encoding", "gzip")
		}
		res, err := client.Do(hr)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		n, err := io.Copy(io.Discard, res.Body)
		if err == nil && res.StatusCode != http.StatusOK {
			err = fmt.Errorf("page %d: HTTP %d", page, res.StatusCode)
		}
		return n, err
	}
	// Warm up: every page once, and check the first one decodes.
	for i := range pages {
		_, err := call(i)
		require.NoError(b, err)
	}

	type sample struct {
		start  time.Duration // since the run started
		d      time.Duration
		client int
	}
	if *siteWarm > 0 {
		var wg sync.WaitGroup
		for k := range *siteClients {
			wg.Go(func() {
				for n := range *siteWarm {
					if _, err := call((k + n) % pages); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	var mu sync.Mutex
	var lat []time.Duration
	var samples []sample
	var bytesRead atomic.Int64
	var wg sync.WaitGroup
	cpu0 := procCPU(b, pid)
	dbCPU0 := backendsCPU(b, dbURL)
	b.ResetTimer()
	start := time.Now()
	deadline := start.Add(time.Duration(b.N) * *siteDuration)
	for k := range *siteClients {
		wg.Go(func() {
			for n := 0; time.Now().Before(deadline); n++ {
				t0 := time.Now()
				size, err := call((k + n) % pages)
				d := time.Since(t0)
				if err != nil {
					b.Error(err)
					return
				}
				bytesRead.Add(size)
				mu.Lock()
				lat = append(lat, d)
				samples = append(samples, sample{start: t0.Sub(start), d: d, client: k})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := procCPU(b, pid) - cpu0
	dbCPU1 := backendsCPU(b, dbURL)
	var dbCPU time.Duration
	for backend, c := range dbCPU1 {
		dbCPU += c - dbCPU0[backend]
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	if *siteTimeline {
		logTimeline(b, samples, func(s sample) (time.Duration, time.Duration, int) { return s.start, s.d, s.client })
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "calls/s")
	b.ReportMetric(cpu.Seconds()*1000/float64(len(lat)), "server-cpu-ms/call")
	b.ReportMetric(dbCPU.Seconds()*1000/float64(len(lat)), "db-cpu-ms/call")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(bytesRead.Load())/float64(len(lat))/(1<<20), "MB/call")
	b.ReportMetric(float64(procStatus(b, pid, "VmHWM")>>20), "peak-rss-MB")
}

// logTimeline logs, per 500 ms bucket of call ends, the calls and their
// p50, p99 and max latency, then the 20 slowest calls.
func logTimeline[S any](b *testing.B, samples []S, get func(S) (start, d time.Duration, client int)) {
	const bucket = 500 * time.Millisecond
	byBucket := map[int][]time.Duration{}
	last := 0
	for _, s := range samples {
		st, d, _ := get(s)
		i := int((st + d) / bucket)
		byBucket[i] = append(byBucket[i], d)
		last = max(last, i)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for i := 0; i <= last; i++ {
		ds := byBucket[i]
		if len(ds) == 0 {
			b.Logf("t=%5.1fs calls=0", float64(i)*bucket.Seconds())
			continue
		}
		slices.Sort(ds)
		b.Logf("t=%5.1fs calls=%4d p50=%6.1f p99=%6.1f max=%6.1f ms", float64(i)*bucket.Seconds(), len(ds), ms(ds[len(ds)/2]), ms(ds[len(ds)*99/100]), ms(ds[len(ds)-1]))
	}
	perClient := map[int]int{}
	for _, s := range samples {
		_, _, c := get(s)
		perClient[c]++
	}
	counts := slices.Sorted(maps.Values(perClient))
	b.Logf("calls per client: min %d, median %d, max %d", counts[0], counts[len(counts)/2], counts[len(counts)-1])
	slow := slices.Clone(samples)
	slices.SortFunc(slow, func(a, c S) int {
		_, da, _ := get(a)
		_, dc, _ := get(c)
		return int(dc - da)
	})
	for _, s := range slow[:min(20, len(slow))] {
		st, d, client := get(s)
		b.Logf("slow: start=%.3fs latency=%.1f ms client=%d", st.Seconds(), ms(d), client)
	}
}

// backendsCPU returns the CPU time used so far by each PostgreSQL backend
// connected to dbURL's database (the server's pool), by process ID; the
// benchmark's own connection is left out.
func backendsCPU(b *testing.B, dbURL string) map[int]time.Duration {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(b, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
	require.NoError(b, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(b, err)
	out := map[int]time.Duration{}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(int(pid))); err == nil {
			out[int(pid)] = procCPU(b, int(pid))
		}
	}
	return out
}

// procCPU returns the user and system CPU time process pid has used.
func procCPU(b testing.TB, pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	require.NoError(b, err)
	// Fields after the command (in parentheses): state is field 3, utime
	// and stime fields 14 and 15, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	ut, err := strconv.ParseInt(f[11], 10, 64)
	require.NoError(b, err)
	st, err := strconv.ParseInt(f[12], 10, 64)
	require.NoError(b, err)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
