package app

import (
	"context"
	"flag"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// BenchmarkHeavyReadLoad is issue 19's heavy read: 200 clients calling
// GetListOfRacks with components (the default page: 100 racks of 35
// components, ~1.5 MB; FLOW_MAX_CONCURRENT_LISTINGS serves 32 at once,
// FLOW_MAX_CONCURRENT_LISTING_BUILDS builds 4, the listing cache keeps them)
// against a `flow serve` child holding 100 demo racks
// (the dev fleet's shape), as fast as they can for -readload.duration
// (default 10s; each b.N iteration is one such run). It reports calls/s,
// the p50 and p99 latencies and the server's peak RSS (VmHWM):
//
//	go test ./app -run '^$' -bench HeavyReadLoad -benchtime 1x -readload.duration=60s
var readLoadDuration = flag.Duration("readload.duration", 10*time.Second, "how long BenchmarkHeavyReadLoad's clients call, per iteration")

func BenchmarkHeavyReadLoad(b *testing.B) {
	const clients, racks = 200, 100
	ctx := context.Background()
	dbURL := dbtest.NewDB(b)
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 4})
	require.NoError(b, err)
	_, err = seedDemoRacks(ctx, pool, racks)
	require.NoError(b, err)
	pool.Close()
	port, err := pglocal.FreePort()
	require.NoError(b, err)
	url := "http://127.0.0.1:" + itoa(port)
	p := startServerProcess(b, []string{"DATABASE_URL=" + dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port), "FLOW_LOG_LEVEL=warn"})
	waitHealthy(b, url)
	client := flowv1connect.NewFlowClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}, url)
	res, err := client.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{WithComponents: true})
	require.NoError(b, err)
	require.Len(b, res.GetRacks(), racks)

	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	deadline := start.Add(time.Duration(b.N) * *readLoadDuration)
	for range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				t0 := time.Now()
				_, err := client.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{WithComponents: true})
				d := time.Since(t0)
				if err != nil {
					b.Error(err)
					continue
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pid := p.cmd.Process.Pid
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "calls/s")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(float64(procStatus(b, pid, "VmHWM")>>20), "peak-rss-MB")
}
