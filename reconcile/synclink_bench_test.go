package reconcile_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/reconcile"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

var syncPeakProfile = flag.String("sync.peakprofile", "", "BenchmarkSyncLink: write the heap profile of the linking cycle's largest live heap to this file")

// BenchmarkSyncLink is the linking cycle flow bench runs before its
// workload (docs/bench.md): -sync.racks demo racks created in Flow without
// Core rack IDs, their devices in the NICo Core simulator without DPUs and
// not expected, so the first cycle links every component (its Core ID,
// power, status and health) and removes every DPU BMC: 213,000 rows at
// 3,000 racks. It reports that cycle's rows written, allocations, and
// link-peak-live-MiB: the largest heap a collection forced every 20 ms
// during the cycle found live, less the heap live before it (Flow's sync
// at its fullest, plus the simulator's replies in flight; the simulator's
// own state is in the heap before). -sync.peakprofile writes the heap
// profile of that moment. Iterations after the first are cycles with
// nothing to change and are not reported.
//
//	go test ./reconcile/ -run '^$' -bench SyncLink -sync.racks 3000 -v
func BenchmarkSyncLink(b *testing.B) {
	ctx := context.Background()
	pool := dbtest.NewPool(b)
	inv := inventory.NewService()
	s := nicosim.New(nicosim.Options{})
	var devs []nicosim.Device
	for i := range *syncRacks {
		r := inventory.DemoRack(i)
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := inv.CreateRack(ctx, tx, r)
			return err
		}))
		for _, c := range r.Components {
			devs = append(devs, nicosim.Device{Kind: strings.ToLower(string(c.Type)), Name: c.Name, Serial: c.SerialNumber,
				BMCMAC: c.BMCs[0].MAC.String(), SlotID: int(c.Position.SlotID), TrayIndex: int(c.Position.TrayIdx), PoweredOff: true})
		}
	}
	require.NoError(b, s.Seed(devs))
	devs = nil
	srv, err := sim.Listen("127.0.0.1:0", s.Handler())
	require.NoError(b, err)
	b.Cleanup(func() { _ = srv.Close(context.Background()) })
	nc, err := nico.NewClient(srv.URL(), nico.WithTimeout(5*time.Minute))
	require.NoError(b, err)
	syncer := reconcile.NewSyncer(reconcile.SyncConfig{Pool: pool, Inv: inv, Core: nc, Expected: true})
	first := true
	for b.Loop() {
		if !first {
			_, err := syncer.Run(ctx, reconcile.TriggerManual)
			require.NoError(b, err)
			continue
		}
		first = false
		b.StopTimer()
		base := liveHeap()
		stop := livePeak(*syncPeakProfile != "")
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		b.StartTimer()
		run, err := syncer.Run(ctx, reconcile.TriggerManual)
		b.StopTimer()
		runtime.ReadMemStats(&ms1)
		peak, profile := stop()
		require.NoError(b, err)
		for _, p := range run.Parts {
			require.True(b, p.OK, "%s: %s", p.Name, p.Error)
		}
		require.EqualValues(b, 71*(*syncRacks), run.Changed(), "every component linked, every DPU BMC removed")
		b.ReportMetric(float64(run.Changed()), "link-rows")
		b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs), "link-allocs")
		b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/mib, "link-alloc-MiB")
		b.ReportMetric(float64(peak-min(peak, base))/mib, "link-peak-live-MiB")
		b.ReportMetric(float64(base)/mib, "base-heap-MiB")
		if *syncPeakProfile != "" {
			require.NoError(b, os.WriteFile(*syncPeakProfile, profile, 0o644))
		}
		b.StartTimer()
	}
}

// livePeak forces a collection every 20 ms until stop is called, which
// returns the largest heap one found live and, when profile is set, the
// heap profile taken then.
func livePeak(profile bool) (stop func() (uint64, []byte)) {
	var (
		peak uint64
		best []byte
		wg   sync.WaitGroup
	)
	done := make(chan struct{})
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			runtime.GC()
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > peak {
				peak = v
				if profile {
					var buf bytes.Buffer
					_ = pprof.Lookup("heap").WriteTo(&buf, 0)
					best = buf.Bytes()
				}
			}
		}
	})
	return func() (uint64, []byte) {
		close(done)
		wg.Wait()
		return peak, best
	}
}
