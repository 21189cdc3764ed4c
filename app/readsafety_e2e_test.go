package app

import (
	"context"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// TestJSONPageFieldIsTheCodecs: the listing cache hands the JSON codec its
// pages under the field number the codec writes as it is.
func TestJSONPageFieldIsTheCodecs(t *testing.T) {
	t.Parallel()
	require.Equal(t, edge.PreencodedJSONField, inventory.JSONPageField)
}

// TestLeakSafetyUnderJSONListings is issue 49's safety path: while 24
// clients list racks with components over Connect JSON as fast as they can
// (on a main pool of 10 connections), leak detection
// keeps running its cycles, and a raised leak gets its forced power-off.
// What is asserted is where the work ran, not how fast: the cycles' and
// the response's database work went through the safety path's own pool,
// the response's engine jobs through the urgent queue, and the power-off
// reached the simulator while the listings were still being answered.
// The only times are generous bounds.
func TestLeakSafetyUnderJSONListings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newFWBench(t, time.Minute)
	var racks []inventory.Rack
	for i := range 6 {
		racks = append(racks, b.addRack(t, 60+i, true))
	}
	cfg := writeFile(t, "flowconfig.yaml", "inventory_run_frequency: 1h\nleak_detection_interval: 1s\n")
	vars := map[string]string{
		"DATABASE_URL": b.dbURL, "FLOW_LISTEN_ADDR": "127.0.0.1:0",
		"NICO_CORE_API_URL": b.sims.nicoSrv.URL(), "PSM_API_URL": b.sims.psmSrv.URL(),
		"FLOW_SHUTDOWN_TIMEOUT": "5s", "ALLOW_INSECURE_GRPC": "true", "FLOW_ADMIN_LISTEN": "off",
		"FLOW_CONFIG_FILE": cfg, "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "true", "FLOW_DB_MAX_CONNS": "10",
	}
	conf, err := LoadConfig(func(k string) string { return vars[k] })
	require.NoError(t, err)
	srvCtx, cancel := context.WithCancel(ctx)
	logs := io.Discard
	if os.Getenv("FLOW_TEST_LOGS") != "" {
		logs = os.Stderr
	}
	srv, err := newServer(srvCtx, conf, newLogger(logs, "json", 0), serveOptions{})
	require.NoError(t, err)
	// Count the leak-detection cycles that start.
	var cycles atomic.Int32
	started := srv.system.started
	srv.system.started = func(name string, since time.Duration) {
		if name == LeakDetectionJob {
			cycles.Add(1)
		}
		started(name, since)
	}
	done := make(chan error, 1)
	go func() { done <- srv.run(srvCtx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	url := "http://" + srv.Addr().String()
	client := flowv1connect.NewFlowClient(http.DefaultClient, url)
	require.Eventually(t, func() bool {
		_, err := client.Version(ctx, &flowv1.VersionRequest{})
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	runSync(t, url)
	pool := openPool(t, b.dbURL)
	rack := readRack(t, pool, racks[0].ID)
	tray := rack.component(t, inventory.ComponentTypeCompute, 10)
	waitPolled(t, client, tray.ID)

	// The listing load.
	loadCtx, stopLoad := context.WithCancel(ctx)
	jsonClient := flowv1connect.NewFlowClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}, url, connect.WithProtoJSON())
	var listed, failed atomic.Int32
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				res, err := jsonClient.GetListOfRacks(loadCtx, &flowv1.GetListOfRacksRequest{WithComponents: true})
				switch {
				case err == nil && len(res.GetRacks()) == len(racks):
					listed.Add(1)
				case loadCtx.Err() == nil:
					failed.Add(1)
				}
			}
		})
	}
	defer func() { stopLoad(); wg.Wait() }()
	require.Eventually(t, func() bool { return listed.Load() >= 50 }, 2*time.Minute, 50*time.Millisecond, "the load runs")

	// Leak detection keeps cycling under the load, on its own pool.
	safety0 := srv.safetyPool.Stat().AcquireCount()
	c0 := cycles.Load()
	require.Eventually(t, func() bool { return cycles.Load() >= c0+3 }, time.Minute, 50*time.Millisecond, "leak detection cycles under the load")
	require.Greater(t, srv.safetyPool.Stat().AcquireCount(), safety0, "the cycles used the safety pool")

	// A leak, and its forced power-off, while the listings go on.
	b.sims.nico.Journal().Reset()
	listedBefore := listed.Load()
	require.NoError(t, b.sims.nico.SetLeak(tray.ExternalID, true))
	require.Eventually(t, func() bool {
		for _, c := range b.sims.nico.Journal().Calls("ComponentPowerControl") {
			for _, d := range c.Devices {
				if d == tray.ExternalID {
					return true
				}
			}
		}
		return false
	}, 2*time.Minute, 50*time.Millisecond, "the leaking tray was forced off")
	require.Greater(t, listed.Load(), listedBefore, "listings were answered while the leak was handled")
	stopLoad()
	wg.Wait()
	require.Zero(t, failed.Load(), "no listing failed")

	// The response's execution was recorded through the safety pool (the
	// event-rule pipeline's), and its engine jobs ran on the urgent queue.
	var queues []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT j.queue), '{}') FROM river_job j
		JOIN engine_step s ON s.id = (j.args->>'step_id')::bigint
		JOIN task t ON t.run_id = s.run_id
		WHERE j.kind = 'engine.run_step' AND t.information->'leak' IS NOT NULL`).Scan(&queues))
	require.Equal(t, []string{engine.UrgentQueue}, queues)
	var execs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM event_action_execution WHERE status = 'completed'`).Scan(&execs))
	require.Positive(t, execs)
}
