package reconcile_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
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

// statementCounter counts the statements a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapPeak samples the Go heap every millisecond until stop is called,
// which returns the largest samples of the bytes in heap objects (live or
// not yet swept: what the heap peaked at, within a millisecond's
// allocation) and of the heap marked live by the latest collection (what
// the process held at its fullest, less dependent on when collections
// ran).
func heapPeak() (stop func() (objects, live uint64)) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	var peak, peakLive atomic.Uint64
	read := func() {
		metrics.Read(sample)
		if v := sample[0].Value.Uint64(); v > peak.Load() {
			peak.Store(v)
		}
		if v := sample[1].Value.Uint64(); v > peakLive.Load() {
			peakLive.Store(v)
		}
	}
	read()
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() (uint64, uint64) {
		close(done)
		<-finished
		read()
		return peak.Load(), peakLive.Load()
	}
}

// liveHeap is the heap live after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

const mib = 1 << 20

// BenchmarkSyncCycle is one inventory-sync cycle over 1,000 demo racks (35
// components each: 35,000 components with 36,000 DPUs, 1,000 racks with
// Core rack IDs), every rack and component also in Core's expected
// inventory (so the mirror compares all of them), against the NICo Core
// simulator over loopback gRPC, with nothing changed and with 10 % of the
// devices changed (firmware and power) before each cycle. Every device
// carries a GB200 device's firmware sub-components (trays seven, two of
// them NICs; switches four; shelves two), whose installed versions the
// cycle reads and records. It reports statements issued and inventory
// rows written per cycle.
//
//	go test -run '^$' -bench SyncCycle -benchtime 5x ./reconcile/
//
// -sync.racks sets the number of racks (issue 29 measures 3,000). Besides
// the sync's own count of rows changed, inventory-writes/op is how much
// the inventory generation grew per cycle (migration 0180: every committed
// transaction that wrote a rack, component, BMC, NVLink domain or leak row,
// even one writing a row unchanged, grows it by one): 0 proves a cycle
// wrote nothing to the inventory. peak-heap-MiB/op is the process's peak
// Go heap during a cycle (sampled every millisecond; the simulator's state
// included; about twice the largest live heap, the collector's goal),
// peak-live-MiB/op the largest heap a collection during the cycle found
// live, and base-heap-MiB/op the heap live before it, so peak-live less
// base is what a cycle holds at its fullest (Flow's sync and the
// simulator's replies). The first cycle, which links every component to its
// Core device, is logged the same way.
var syncRacks = flag.Int("sync.racks", 1000, "demo racks (35 components each) BenchmarkSyncCycle syncs")

func BenchmarkSyncCycle(b *testing.B) {
	racks := *syncRacks
	ctx := context.Background()
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
	s := nicosim.New(nicosim.Options{})
	flowRacks, devs, simRacks := benchSite(racks)
	for _, r := range flowRacks {
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := inv.CreateRack(ctx, tx, r)
			return err
		}))
	}
	require.NoError(b, s.Seed(devs))
	require.NoError(b, s.SeedRacks(simRacks))
	srv, err := sim.Listen("127.0.0.1:0", s.Handler())
	require.NoError(b, err)
	b.Cleanup(func() { _ = srv.Close(context.Background()) })
	nc, err := nico.NewClient(srv.URL(), nico.WithTimeout(5*time.Minute))
	require.NoError(b, err)
	syncer := reconcile.NewSyncer(reconcile.SyncConfig{Pool: pool, Inv: inv, Core: nc, Expected: true})
	base := liveHeap()
	var msBefore runtime.MemStats
	runtime.ReadMemStats(&msBefore)
	cpuBefore, stopPeak := processCPU(), heapPeak()
	first, err := syncer.Run(ctx, reconcile.TriggerManual)
	cpu := processCPU() - cpuBefore
	peak, peakLive := stopPeak()
	var msAfter runtime.MemStats
	runtime.ReadMemStats(&msAfter)
	require.NoError(b, err)
	b.Logf("first (linking) cycle: %d rows written, Go CPU %v, %d allocations, %.0f MiB allocated, peak heap %.0f MiB, peak live heap %.0f MiB (live before %.0f MiB)",
		first.Changed(), cpu.Round(time.Millisecond), msAfter.Mallocs-msBefore.Mallocs, float64(msAfter.TotalAlloc-msBefore.TotalAlloc)/mib,
		float64(peak)/mib, float64(peakLive)/mib, float64(base)/mib)
	for _, p := range first.Parts {
		require.True(b, p.OK, "%s: %s", p.Name, p.Error)
	}

	bench := func(b *testing.B, syncer *reconcile.Syncer, trigger string, change float64) {
		var statements, rows, writes int64
		generation := func() int64 {
			var g int64
			require.NoError(b, pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0)::bigint FROM inventory_generation`).Scan(&g))
			return g
		}
		var cpu, pgCPU time.Duration
		var peakHeap, peakLive, baseHeap uint64
		partTime := map[string]time.Duration{}
		round := 0
		for b.Loop() {
			b.StopTimer()
			round++
			step := int(1 / change)
			if change > 0 {
				for i := 0; i < len(devs); i += step {
					off := round%2 == 1
					require.NoError(b, s.Update(devs[i].ID, nicosim.DevicePatch{Firmware: map[string]string{"bmc": fmt.Sprintf("FW round %d", round), "pmc": fmt.Sprintf("PS round %d", round)}, PoweredOff: &off}))
				}
			}
			genBefore := generation() // not counted in statements
			before := counter.n.Load()
			baseHeap = max(baseHeap, liveHeap())
			cpuBefore, pgBefore := processCPU(), postgresCPU()
			stopPeak := heapPeak()
			b.StartTimer()
			run, err := syncer.Run(ctx, trigger)
			b.StopTimer()
			objects, live := stopPeak()
			peakHeap, peakLive = max(peakHeap, objects), max(peakLive, live)
			cpu += processCPU() - cpuBefore
			pgCPU += postgresCPU() - pgBefore
			require.NoError(b, err)
			for _, p := range run.Parts {
				require.True(b, p.OK, "%s: %s", p.Name, p.Error)
				require.False(b, p.DriftChanged, p.Name)
				partTime[p.Name] += p.Duration
			}
			statements += counter.n.Load() - before
			writes += generation() - genBefore
			rows += run.Changed()
			b.StartTimer()
		}
		b.ReportMetric(float64(statements)/float64(b.N), "statements/op")
		b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
		b.ReportMetric(float64(writes)/float64(b.N), "inventory-writes/op")
		// The Go side's CPU (Flow's sync and the simulator, one process),
		// which a loaded machine does not inflate the way it does wall time.
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "go-cpu-ms/op")
		b.ReportMetric(float64(pgCPU.Milliseconds())/float64(b.N), "pg-cpu-ms/op")
		b.ReportMetric(float64(peakHeap)/mib, "peak-heap-MiB/op")
		b.ReportMetric(float64(peakLive)/mib, "peak-live-MiB/op")
		b.ReportMetric(float64(baseHeap)/mib, "base-heap-MiB/op")
		// Where a cycle's wall time goes, part by part.
		for name, d := range partTime {
			b.ReportMetric(float64(d.Milliseconds())/float64(b.N), name+"-ms/op")
		}
	}
	// The same cycle with the expected-inventory mirror off
	// (FLOW_EXPECTED_INVENTORY_SYNC_ENABLED=false) prices the mirror under
	// the same load.
	noMirror := reconcile.NewSyncer(reconcile.SyncConfig{Pool: pool, Inv: inv, Core: nc})
	// Scheduled cycles whose types' installed versions are not due
	// (FirmwareReadInterval, read by the first cycle) price the version
	// reads: no Core versions call, no comparison, nothing recorded.
	versionsOff := reconcile.NewSyncer(reconcile.SyncConfig{Pool: pool, Inv: inv, Core: nc, Expected: true, FirmwareReadInterval: 1000 * time.Hour})
	b.Run("NoChange", func(b *testing.B) { bench(b, syncer, reconcile.TriggerManual, 0) })
	b.Run("NoChangeVersionsOff", func(b *testing.B) { bench(b, versionsOff, reconcile.TriggerSchedule, 0) })
	b.Run("NoChangeMirrorOff", func(b *testing.B) { bench(b, noMirror, reconcile.TriggerManual, 0) })
	b.Run("TenPercent", func(b *testing.B) { bench(b, syncer, reconcile.TriggerManual, 0.1) })
	// VersionReads alternates a no-change cycle that reads every type's
	// installed versions (NoChange's) with one that reads none
	// (NoChangeVersionsOff's), in turn first, so that a shared machine's
	// load falls on both alike: reads-ms/op and off-ms/op are their wall
	// times, reads-go-cpu-ms/op and off-go-cpu-ms/op their Go CPU, and
	// overhead-% what the reads add to the cycle's wall time.
	b.Run("VersionReads", func(b *testing.B) {
		var wall, cpu [2]time.Duration
		cycle := func(i int) {
			s, trigger := syncer, reconcile.TriggerManual
			if i == 1 {
				s, trigger = versionsOff, reconcile.TriggerSchedule
			}
			runtime.GC()
			start, cpuBefore := time.Now(), processCPU()
			run, err := s.Run(ctx, trigger)
			wall[i] += time.Since(start)
			cpu[i] += processCPU() - cpuBefore
			require.NoError(b, err)
			require.Zero(b, run.Changed())
		}
		round := 0
		for b.Loop() {
			cycle(round % 2)
			cycle(1 - round%2)
			round++
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
		b.ReportMetric(ms(wall[0]), "reads-ms/op")
		b.ReportMetric(ms(wall[1]), "off-ms/op")
		b.ReportMetric(ms(cpu[0]), "reads-go-cpu-ms/op")
		b.ReportMetric(ms(cpu[1]), "off-go-cpu-ms/op")
		b.ReportMetric(100*(float64(wall[0])/float64(wall[1])-1), "overhead-%")
	})
}

// expectedSimRack is r as Core expects it: its rack ID, name, chassis and
// location labels.
func expectedSimRack(r inventory.Rack) nicosim.Rack {
	labels := map[string]string{
		"chassis.manufacturer": r.Manufacturer, "chassis.serial-number": r.SerialNumber,
		"location.region": r.Location.Region, "location.datacenter": r.Location.Datacenter,
		"location.room": r.Location.Room, "location.position": r.Location.Position,
	}
	if r.Model != nil {
		labels["chassis.model"] = *r.Model
	}
	return nicosim.Rack{ID: r.ExternalID, Name: r.Name, Labels: labels}
}

// expectedSimDevice is c as the simulated hardware and as Core expects it
// (Expected, with the same serial, name, manufacturer, model, position,
// rack, BMC MAC, firmware and DPUs).
func expectedSimDevice(c inventory.Component, rackExt string) nicosim.Device {
	d := nicosim.Device{RackID: rackExt, Name: c.Name, Serial: c.SerialNumber, BMCMAC: reconcile.HostMAC(c), Manufacturer: c.Manufacturer,
		Firmware: map[string]string{"bmc": c.FirmwareVersion}, SlotID: int(c.Position.SlotID), TrayIndex: int(c.Position.TrayIdx),
		HostID: int(c.Position.HostID), DPUs: simDPUs(c), Expected: true}
	if c.Model != nil {
		d.Model = *c.Model
	}
	switch c.Type {
	case inventory.ComponentTypeCompute:
		d.Kind = nicosim.KindCompute
	case inventory.ComponentTypeNVSwitch:
		d.Kind = nicosim.KindNVSwitch
	default:
		d.Kind, d.Firmware = nicosim.KindPowerShelf, map[string]string{"pmc": c.FirmwareVersion}
	}
	return d
}

// withSubComponents gives d every firmware sub-component of a GB200
// device of its kind (a tray's two NICs), its BMC (PMC) version kept.
func withSubComponents(d *nicosim.Device) {
	for _, c := range nicosim.SubComponents(d.Kind) {
		if _, ok := d.Firmware[c]; !ok {
			d.Firmware[c] = "1.0." + c
		}
	}
	d.Instances = nicosim.DefaultInstances(d.Kind)
}

// postgresCPU is the user and system CPU time the machine's postgres
// processes have used (from /proc; zero where /proc is not readable), so
// a cycle's database work is priced beside the Go side's.
func postgresCPU() time.Duration {
	entries, _ := os.ReadDir("/proc")
	var ticks int64
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != "postgres" {
			continue
		}
		// Fields after the command: state is 3rd overall, utime 14th, stime 15th.
		f := strings.Fields(s[end+2:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + st
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
