package app

import (
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
)

// BenchmarkLeakResponse measures, at a 1s leak-detection interval, the time
// from the simulator reporting a leak (SetLeak on the compute tray in slot
// 10) to the force-power-off call reaching that tray (the simulator's
// journal), one leak per demo rack so no response queues behind another.
// It reports the p50 and p99 in milliseconds (target p50 ≤ 1500 ms).
//
//	go test -run '^$' -bench LeakResponse -benchtime 20x ./app/
func BenchmarkLeakResponse(b *testing.B) {
	e := startLeakE2E(b)
	pool := openPool(b, e.dbURL)
	racks := make([]leakRack, b.N)
	for i := range racks {
		racks[i].Rack = e.addRack(b, 300+i, false)
	}
	runSync(b, e.url)
	for i := range racks {
		racks[i] = readRack(b, pool, racks[i].ID)
	}
	waitPolled(b, e.client, racks[0].component(b, inventory.ComponentTypeCompute, 10).ID)
	var samples []time.Duration
	b.ResetTimer()
	for i := range b.N {
		tray := racks[i].component(b, inventory.ComponentTypeCompute, 10)
		set := time.Now()
		require.NoError(b, e.sims.nico.SetLeak(tray.ExternalID, true))
		var reached time.Time
		require.Eventually(b, func() bool {
			for _, c := range e.sims.nico.Journal().Calls("ComponentPowerControl") {
				if c.Time.After(set) && slices.Contains(c.Devices, tray.ExternalID) {
					reached = c.Time
					return true
				}
			}
			return false
		}, 10*time.Second, 5*time.Millisecond)
		samples = append(samples, reached.Sub(set))
	}
	b.StopTimer()
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	pct := func(p float64) time.Duration { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
	b.ReportMetric(float64(pct(0.50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(pct(0.99).Milliseconds()), "p99-ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d leaks: min %s p50 %s p99 %s max %s", len(samples), samples[0].Round(time.Millisecond),
		pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), samples[len(samples)-1].Round(time.Millisecond))
}
