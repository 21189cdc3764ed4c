package reconcile_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/reconcile"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

// simProcessEnv makes this test binary, started by
// BenchmarkSyncVersionReads, serve the NICo Core simulator of that many
// demo racks (TestSyncBenchSimProcess) instead of running the tests.
const simProcessEnv = "FLOW_SYNC_BENCH_SIM_RACKS"

// benchSite is BenchmarkSyncCycle's site of n demo racks: Flow's racks,
// and Core's devices (every GB200 firmware sub-component) and racks.
func benchSite(n int) ([]inventory.Rack, []nicosim.Device, []nicosim.Rack) {
	var racks []inventory.Rack
	var devs []nicosim.Device
	var simRacks []nicosim.Rack
	for i := range n {
		r := inventory.DemoRack(i)
		r.ExternalID = fmt.Sprintf("core-rack-%d", i)
		racks = append(racks, r)
		sr := expectedSimRack(r)
		sr.GroupID = fmt.Sprintf("group-%d", i/8)
		simRacks = append(simRacks, sr)
		for k, c := range r.Components {
			d := expectedSimDevice(c, r.ExternalID)
			d.ID = fmt.Sprintf("core-%d-%02d", i, k)
			withSubComponents(&d)
			devs = append(devs, d)
		}
	}
	return racks, devs, simRacks
}

// TestSyncBenchSimProcess is BenchmarkSyncVersionReads's simulator: with
// FLOW_SYNC_BENCH_SIM_RACKS set it seeds the NICo Core simulator with
// benchSite's devices, prints its URL and serves until its stdin closes;
// otherwise it does nothing.
func TestSyncBenchSimProcess(t *testing.T) {
	v := os.Getenv(simProcessEnv)
	if v == "" {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_, devs, simRacks := benchSite(n)
	s := nicosim.New(nicosim.Options{})
	if err := s.Seed(devs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := s.SeedRacks(simRacks); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	devs, simRacks = nil, nil
	runtime.GC()
	srv, err := sim.Listen("127.0.0.1:0", s.Handler())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(srv.URL())
	_, _ = bufio.NewReader(os.Stdin).ReadString(0) // until the benchmark closes it
	_ = srv.Close(context.Background())
	os.Exit(0)
}

// BenchmarkSyncVersionReads prices the inventory sync's installed-version
// reads on Flow's side (docs/bench.md, "Installed versions"): the NICo
// Core simulator runs in a process of its own (this test binary, as
// TestSyncBenchSimProcess), as flow bench runs it, so that this process's
// CPU is Flow's sync alone, and the simulator's is measured apart. Each
// round runs two no-change cycles over -sync.racks demo racks, in turn
// first: one that reads every type's installed versions (a manual cycle)
// and one that reads none (a scheduled cycle, no type's read due). It
// reports each side's Flow CPU, wall, simulator CPU, PostgreSQL CPU (this
// database's backends) and statements per cycle (medians over the
// rounds), and the median of the rounds' ratios reading ÷ not reading,
// with their spread for Flow CPU (quartiles, and the ratio of the totals);
// -v logs every round's and a summary with the load average's range.
//
//	go test -run '^$' -bench SyncVersionReads -benchtime 15x -v ./reconcile/
func BenchmarkSyncVersionReads(b *testing.B) {
	n := *syncRacks
	ctx := context.Background()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSyncBenchSimProcess$")
	cmd.Env = append(os.Environ(), simProcessEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(b, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(b, err, "the simulator process's URL")
	simURL := strings.TrimSpace(line)
	simPID := cmd.Process.Pid

	url := dbtest.NewDB(b)
	pc, err := pgxpool.ParseConfig(url)
	require.NoError(b, err)
	counter := &statementCounter{}
	pc.ConnConfig.Tracer = counter
	db.Tune(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	inv := inventory.NewService()
	racks, _, _ := benchSite(n)
	for _, r := range racks {
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := inv.CreateRack(ctx, tx, r)
			return err
		}))
	}
	racks = nil
	nc, err := nico.NewClient(simURL, nico.WithTimeout(5*time.Minute))
	require.NoError(b, err)
	reads := reconcile.NewSyncer(reconcile.SyncConfig{Pool: pool, Inv: inv, Core: nc, Expected: true})
	off := reconcile.NewSyncer(reconcile.SyncConfig{Pool: pool, Inv: inv, Core: nc, Expected: true, FirmwareReadInterval: 1000 * time.Hour})
	first, err := reads.Run(ctx, reconcile.TriggerManual) // links every component, reads every version
	require.NoError(b, err)
	for _, p := range first.Parts {
		require.True(b, p.OK, "%s: %s", p.Name, p.Error)
	}
	// The scheduled syncer's first cycle: every type's read time is the
	// manual cycle's, so none is due.
	_, err = off.Run(ctx, reconcile.TriggerSchedule)
	require.NoError(b, err)

	type cost struct {
		flow, sim, pg, wall time.Duration
		alloc, mallocs      uint64 // bytes and objects Flow's process allocated
	}
	var sides [2][]cost // 0: reading, 1: not
	var statements [2]int64
	cycle := func(i int) {
		s, trigger := reads, reconcile.TriggerManual
		if i == 1 {
			s, trigger = off, reconcile.TriggerSchedule
		}
		runtime.GC()
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		st := counter.n.Load()
		start, flow0, sim0, pg0 := time.Now(), processCPU(), procCPU(simPID), databaseCPU(b, pool)
		var run reconcile.SyncRun
		var err error
		// Labelled, so that a CPU profile (-cpuprofile) tells the two apart:
		// go tool pprof -tagfocus cycle=reads.
		pprof.Do(ctx, pprof.Labels("cycle", map[bool]string{true: "reads", false: "off"}[i == 0]), func(ctx context.Context) {
			run, err = s.Run(ctx, trigger)
		})
		c := cost{wall: time.Since(start), flow: processCPU() - flow0, sim: procCPU(simPID) - sim0}
		runtime.ReadMemStats(&ms1)
		c.alloc, c.mallocs = ms1.TotalAlloc-ms0.TotalAlloc, ms1.Mallocs-ms0.Mallocs
		c.pg = databaseCPU(b, pool) - pg0
		statements[i] += counter.n.Load() - st
		require.NoError(b, err)
		require.Zero(b, run.Changed())
		for _, p := range run.Parts {
			require.True(b, p.OK, "%s: %s", p.Name, p.Error)
		}
		sides[i] = append(sides[i], c)
	}
	round := 0
	var loads []float64
	for b.Loop() {
		load := loadAverage()
		loads = append(loads, load)
		cycle(round % 2)
		cycle(1 - round%2)
		r, o := sides[0][round], sides[1][round]
		b.Logf("round %d (load %.1f, %s first): Flow CPU %v / %v = %.3f, wall %v / %v = %.3f, simulator CPU %v / %v, PostgreSQL CPU %v / %v",
			round+1, load, map[bool]string{true: "reading", false: "not reading"}[round%2 == 0],
			r.flow.Round(time.Millisecond), o.flow.Round(time.Millisecond), ratio(r.flow, o.flow),
			r.wall.Round(time.Millisecond), o.wall.Round(time.Millisecond), ratio(r.wall, o.wall),
			r.sim.Round(time.Millisecond), o.sim.Round(time.Millisecond), r.pg.Round(time.Millisecond), o.pg.Round(time.Millisecond))
		round++
	}
	med := func(i int, f func(cost) time.Duration) time.Duration {
		var v []time.Duration
		for _, c := range sides[i] {
			v = append(v, f(c))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	// rounds is the rounds' ratios reading ÷ not reading of f, sorted.
	rounds := func(f func(cost) time.Duration) []float64 {
		var v []float64
		for k := range sides[0] {
			v = append(v, ratio(f(sides[0][k]), f(sides[1][k])))
		}
		slices.Sort(v)
		return v
	}
	perRound := func(f func(cost) time.Duration) float64 {
		v := rounds(f)
		return v[len(v)/2]
	}
	// total is the ratio of f summed over the rounds.
	total := func(f func(cost) time.Duration) float64 {
		var r, o time.Duration
		for k := range sides[0] {
			r += f(sides[0][k])
			o += f(sides[1][k])
		}
		return ratio(r, o)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	flow := func(c cost) time.Duration { return c.flow }
	wall := func(c cost) time.Duration { return c.wall }
	b.ReportMetric(ms(med(0, flow)), "reads-flow-cpu-ms")
	b.ReportMetric(ms(med(1, flow)), "off-flow-cpu-ms")
	b.ReportMetric(perRound(flow), "flow-cpu-ratio")
	// The spread of the rounds' Flow CPU ratios: the quartiles (the middle
	// half of the rounds), and the ratio of the totals.
	fr := rounds(flow)
	b.ReportMetric(fr[len(fr)/4], "flow-cpu-ratio-q1")
	b.ReportMetric(fr[(3*len(fr))/4], "flow-cpu-ratio-q3")
	b.ReportMetric(total(flow), "flow-cpu-ratio-total")
	slices.Sort(loads)
	b.Logf("%d rounds, load %.1f–%.1f: Flow CPU ratio median %.3f (quartiles %.3f–%.3f, range %.3f–%.3f, totals %.3f), wall ratio median %.3f",
		len(fr), loads[0], loads[len(loads)-1], perRound(flow), fr[len(fr)/4], fr[(3*len(fr))/4], fr[0], fr[len(fr)-1], total(flow), perRound(wall))
	b.ReportMetric(ms(med(0, wall)), "reads-wall-ms")
	b.ReportMetric(ms(med(1, wall)), "off-wall-ms")
	b.ReportMetric(perRound(wall), "wall-ratio")
	b.ReportMetric(ms(med(0, func(c cost) time.Duration { return c.sim })), "reads-sim-cpu-ms")
	b.ReportMetric(ms(med(1, func(c cost) time.Duration { return c.sim })), "off-sim-cpu-ms")
	b.ReportMetric(ms(med(0, func(c cost) time.Duration { return c.pg })), "reads-pg-cpu-ms")
	b.ReportMetric(ms(med(1, func(c cost) time.Duration { return c.pg })), "off-pg-cpu-ms")
	// Allocations do not depend on the machine's load: what the reads
	// allocate is what the collector has to pay for.
	allocs := func(i int, f func(cost) uint64) float64 {
		var total uint64
		for _, c := range sides[i] {
			total += f(c)
		}
		return float64(total) / float64(len(sides[i]))
	}
	b.ReportMetric(allocs(0, func(c cost) uint64 { return c.alloc })/(1<<20), "reads-alloc-MiB")
	b.ReportMetric(allocs(1, func(c cost) uint64 { return c.alloc })/(1<<20), "off-alloc-MiB")
	b.ReportMetric(allocs(0, func(c cost) uint64 { return c.mallocs }), "reads-allocs")
	b.ReportMetric(allocs(1, func(c cost) uint64 { return c.mallocs }), "off-allocs")
	b.ReportMetric(float64(statements[0])/float64(len(sides[0])), "reads-statements")
	b.ReportMetric(float64(statements[1])/float64(len(sides[1])), "off-statements")
	b.ReportMetric(0, "ns/op")
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// procCPU is process pid's user and system CPU time, from /proc.
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// databaseCPU is the CPU time of the PostgreSQL backends connected to
// pool's database (the benchmark's own: the cluster is shared with other
// tests, whose backends postgresCPU would count), from /proc.
func databaseCPU(tb testing.TB, pool *pgxpool.Pool) time.Duration {
	rows, err := pool.Query(context.Background(), "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
	require.NoError(tb, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(tb, err)
	var total time.Duration
	for _, pid := range pids {
		total += procCPU(int(pid))
	}
	return total
}

// loadAverage is the machine's 1-minute load average (0 when unknown).
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return v
}
