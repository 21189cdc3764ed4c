package app

import (
	"context"
	"flag"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/bench"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// BenchmarkRolloutSuccessorLatency measures, in a rollout of 30 racks one
// at a time, the time from a child task's end (the start of the checkpoint
// transaction that ends it) to its successor's first backend call:
// upstream waits for its next 10 s dispatcher poll.
func BenchmarkRolloutSuccessorLatency(b *testing.B) {
	const n = 30
	bench := newRolloutBenchB(b, n)
	srv := bench.serve(b, nil, nil)
	var lat []time.Duration
	for range b.N {
		id := createRun(b, srv.client, rolloutRequest("latency "+uuid.NewString(), rolloutOpts{concurrency: 1}))
		waitRun(b, srv.client, id, 5*time.Minute, func(r *flowv1.OperationRun) bool { return r.GetSummary().GetFinishedAt() != nil })
		lat = append(lat, successorLatencies(b, bench, id)...)
		bench.sims.nico.Journal().Reset()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max_ms")
}

func newRolloutBenchB(tb testing.TB, n int) *rolloutBench {
	tb.Helper()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: time.Millisecond, firmwarePhase: time.Millisecond})
	require.NoError(tb, err)
	tb.Cleanup(func() { sims.Close(context.Background()) })
	b := &rolloutBench{fwBench: &fwBench{sims: sims, dbURL: dbtest.NewDB(tb), inv: inventory.NewService()}}
	for i := range n {
		b.racks = append(b.racks, b.addRack(tb, 600+i, false))
	}
	return b
}

// successorLatencies pairs each child task's end with the first backend
// call on the next target's rack.
func successorLatencies(tb testing.TB, b *rolloutBench, id *flowv1.UUID) []time.Duration {
	tb.Helper()
	ctx := context.Background()
	pool, err := db.Open(ctx, b.dbURL, db.PoolConfig{MaxConns: 1})
	require.NoError(tb, err)
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT k.rack_id, k.finished_at FROM operation_run_target t JOIN task k ON k.id = t.task_id
		WHERE t.operation_run_id = $1 ORDER BY t.sequence_index`, id.GetId())
	require.NoError(tb, err)
	type end struct {
		rack uuid.UUID
		at   time.Time
	}
	var ends []end
	for rows.Next() {
		var e end
		require.NoError(tb, rows.Scan(&e.rack, &e.at))
		ends = append(ends, e)
	}
	require.NoError(tb, rows.Err())
	first := map[string]time.Time{} // device MAC → first call
	for _, c := range b.sims.nico.Journal().Calls() {
		for _, d := range c.Devices {
			if _, ok := first[strings.ToLower(d)]; !ok {
				first[strings.ToLower(d)] = c.Time
			}
		}
	}
	byID := map[uuid.UUID]inventory.Rack{}
	for _, r := range b.racks {
		byID[r.ID] = r
	}
	var out []time.Duration
	for i := 1; i < len(ends); i++ {
		var call time.Time
		for _, c := range byID[ends[i].rack].Components {
			if at, ok := first[strings.ToLower(c.BMCs[0].MAC.String())]; ok && (call.IsZero() || at.Before(call)) {
				call = at
			}
		}
		require.False(tb, call.IsZero(), "rack %s was called", ends[i].rack)
		out = append(out, call.Sub(ends[i-1].at))
	}
	return out
}

// BenchmarkRollout1000Racks: one rollout over 1,000 racks (cap raised,
// simulators without latency, 5 phases, 50 at once) on a `flow serve`
// child process; reports the time to create it (planning, every target
// and the first 50 children: the CreateOperationRun call), the total time,
// the wall time and the server's and its PostgreSQL backends' CPU per
// target, and the server's peak RSS. -rollout.racks changes the number of racks
// (the cap follows), -rollout.create-only stops after the creation (issue
// 29's planning time over 3,000 racks):
//
//	go test ./app -run '^$' -bench Rollout1000Racks -benchtime 1x -rollout.racks 3000 -rollout.create-only
var (
	rolloutRacks      = flag.Int("rollout.racks", 1000, "racks BenchmarkRollout1000Racks rolls out over")
	rolloutCreateOnly = flag.Bool("rollout.create-only", false, "BenchmarkRollout1000Racks stops once the run is created")
)

func BenchmarkRollout1000Racks(b *testing.B) {
	racks := *rolloutRacks
	ctx := context.Background()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: 0, firmwarePhase: time.Millisecond})
	require.NoError(b, err)
	b.Cleanup(func() { sims.Close(context.Background()) })
	dbURL := dbtest.NewDB(b)
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 4})
	require.NoError(b, err)
	defer pool.Close()
	inv := inventory.NewService()
	storeDemoRacks(b, pool, inv, sims, 1000, racks, seedFirmware)
	port, err := pglocal.FreePort()
	require.NoError(b, err)
	url := "http://127.0.0.1:" + itoa(port)
	server := startServerProcess(b, []string{
		"DATABASE_URL=" + dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port),
		"NICO_CORE_API_URL=" + sims.nicoSrv.URL(), "PSM_API_URL=" + sims.psmSrv.URL(),
		"FLOW_LOG_LEVEL=warn", "FLOW_FIRMWARE_POLL_INTERVAL=100ms", "FLOW_OPERATION_RUN_MAX_CANDIDATES=" + itoa(max(racks, 1000)),
	})
	waitHealthy(b, url)
	client := flowv1connect.NewFlowClient(http.DefaultClient, url)
	pid := server.cmd.Process.Pid
	// The engine's cost per target (issue 49: flat from 3,000 to 15,000
	// racks): the server's CPU and its PostgreSQL backends' CPU over the
	// whole rollout, divided by the targets.
	cpu0, pg0 := procCPU(b, pid), backendsCPU(b, dbURL)
	b.ResetTimer()
	start := time.Now()
	id := createRun(b, client, rolloutRequest("site", rolloutOpts{concurrency: 50, phases: equalPhases(5, true)}))
	created := time.Since(start)
	createCPU := procCPU(b, pid) - cpu0
	b.Logf("%d racks: run created (planned) in %s, server CPU %s, server peak RSS %.1f MiB", racks, created.Round(time.Millisecond),
		createCPU, float64(bench.PeakRSS(pid))/(1<<20))
	if *rolloutCreateOnly {
		b.StopTimer()
		run := getRun(b, client, id)
		// Phase 0 of the 5 equal phases holds a fifth of the targets.
		require.Equal(b, int32(racks/5), run.GetStats().GetCumulativePhaseStats().GetSelectedTargets(), "targets planned in phase 0")
		b.ReportMetric(created.Seconds(), "create_s")
		b.ReportMetric(createCPU.Seconds(), "create_server_cpu_s")
		b.ReportMetric(float64(bench.PeakRSS(pid))/(1<<20), "peak_rss_MiB")
		return
	}
	run := waitRun(b, client, id, 2*time.Hour, func(r *flowv1.OperationRun) bool { return r.GetSummary().GetFinishedAt() != nil })
	total := time.Since(start)
	b.StopTimer()
	cpu, pg := procCPU(b, pid)-cpu0, backendsCPUSince(b, dbURL, pg0)
	require.Equal(b, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED, run.GetSummary().GetState().GetStatus(), run.GetSummary().GetStatusMessage())
	b.ReportMetric(created.Seconds(), "create_s")
	b.ReportMetric(createCPU.Seconds(), "create_server_cpu_s")
	b.ReportMetric(total.Seconds(), "total_s")
	b.ReportMetric(float64(total.Microseconds())/1000/float64(racks), "wall_ms/target")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(racks), "server_cpu_ms/target")
	b.ReportMetric(float64(pg.Microseconds())/1000/float64(racks), "pg_cpu_ms/target")
	b.ReportMetric(float64(bench.PeakRSS(pid))/(1<<20), "peak_rss_MiB")
}

// backendsCPUSince is the CPU the PostgreSQL backends connected to
// dbURL's database used since before (backendsCPU's answer then): a
// backend that connected since counts whole, one that disconnected since
// is lost (the server's pool keeps its connections).
func backendsCPUSince(b *testing.B, dbURL string, before map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, c := range backendsCPU(b, dbURL) {
		d += c - before[pid]
	}
	return d
}
