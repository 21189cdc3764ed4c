package app

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	"github.com/jackc/pgx/v5/pgxpool"
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
	require.NoError(b, seedRacksConcurrently(ctx, pool, *siteRacks, 4))
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
		siteListingLoad(b, client, url+flowv1connect.FlowGetListOfRacksProcedure, p.cmd.Process.Pid, pages, func(page int) proto.Message {
			return &flowv1.GetListOfRacksRequest{WithComponents: true, Pagination: &flowv1.Pagination{Offset: int32(page * 100), Limit: 100}}
		})
	})
	comps := *siteRacks * 35
	b.Run("GetComponents", func(b *testing.B) {
		siteListingLoad(b, client, url+flowv1connect.FlowGetComponentsProcedure, p.cmd.Process.Pid, (comps+999)/1000, func(page int) proto.Message {
			return &flowv1.GetComponentsRequest{Pagination: &flowv1.Pagination{Offset: int32(page * 1000), Limit: 1000}}
		})
	})
}

func siteListingLoad(b *testing.B, client *http.Client, url string, pid, pages int, req func(page int) proto.Message) {
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

	var mu sync.Mutex
	var lat []time.Duration
	var bytesRead atomic.Int64
	var wg sync.WaitGroup
	cpu0 := procCPU(b, pid)
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
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := procCPU(b, pid) - cpu0
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "calls/s")
	b.ReportMetric(cpu.Seconds()*1000/float64(len(lat)), "server-cpu-ms/call")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(bytesRead.Load())/float64(len(lat))/(1<<20), "MB/call")
	b.ReportMetric(float64(procStatus(b, pid, "VmHWM")>>20), "peak-rss-MB")
}

// procCPU returns the user and system CPU time process pid has used.
func procCPU(b *testing.B, pid int) time.Duration {
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

// seedRacksConcurrently stores demo racks 0…n-1 (inventory.DemoRack), over
// workers transactions at once.
func seedRacksConcurrently(ctx context.Context, pool *pgxpool.Pool, n, workers int) error {
	svc := inventory.NewService()
	var next atomic.Int64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := svc.CreateRack(ctx, tx, inventory.DemoRack(i))
					return err
				})
				if err != nil {
					errs[w] = fmt.Errorf("demo rack %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
