package app

import (
	"context"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// BenchmarkLeakResponse measures, with the default leak settings
// (detection every 3 s, event rules), the time from the simulator
// reporting a leak (SetLeak on the compute tray in slot 10) to the
// force-power-off call reaching that tray (the simulator's journal), one
// leak per demo rack. Idle: the racks run nothing. Busy: each rack runs a
// firmware upgrade (each simulator firmware phase lasts a minute), which
// the response pre-empts. Each leak is raised at a random point of the
// poll cycle. It reports the p50 and p99 in milliseconds.
//
//	go test -run '^$' -bench LeakResponse -benchtime 20x ./app/
func BenchmarkLeakResponse(b *testing.B) {
	b.Run("Idle", func(b *testing.B) { benchLeakResponse(b, false) })
	b.Run("Busy", func(b *testing.B) { benchLeakResponse(b, true) })
}

func benchLeakResponse(b *testing.B, busy bool) {
	ctx := context.Background()
	bench := newFWBench(b, time.Minute)
	racks := make([]leakRack, b.N)
	for i := range racks {
		racks[i].Rack = bench.addRack(b, 300+i, true)
	}
	cfg := writeFile(b, "flowconfig.yaml", "inventory_run_frequency: 1h\n")
	srv := bench.serve(b, map[string]string{"FLOW_CONFIG_FILE": cfg, "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "true", "FLOW_LOG_LEVEL": "warn"}, nil)
	pool := openPool(b, bench.dbURL)
	for i := range racks {
		racks[i] = readRack(b, pool, racks[i].ID)
	}
	if busy {
		var ids []*flowv1.UUID
		for _, r := range racks {
			res, err := srv.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), TargetVersion: ptr(`{"compute":"2.0","nvswitch":"3.0"}`)})
			require.NoError(b, err)
			ids = append(ids, res.GetTaskIds()...)
		}
		require.Eventually(b, func() bool {
			res, err := srv.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: ids})
			require.NoError(b, err)
			for _, t := range res.GetTasks() {
				if t.GetStatus() != flowv1.TaskStatus_TASK_STATUS_RUNNING {
					return false
				}
			}
			return true
		}, time.Minute, 50*time.Millisecond, "every rack runs its firmware upgrade")
	}
	waitPolled(b, srv.client, racks[0].component(b, inventory.ComponentTypeCompute, 10).ID)
	var samples []time.Duration
	b.ResetTimer()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range b.N {
		tray := racks[i].component(b, inventory.ComponentTypeCompute, 10)
		// A random point of the poll cycle: set right after the previous
		// response's power-off, every leak would wait nearly a whole
		// interval.
		time.Sleep(time.Duration(rng.Int64N(int64(defaultLeakDetectionInterval))))
		set := time.Now()
		require.NoError(b, bench.sims.nico.SetLeak(tray.ExternalID, true))
		var reached time.Time
		require.Eventually(b, func() bool {
			for _, c := range bench.sims.nico.Journal().Calls("ComponentPowerControl") {
				if c.Time.After(set) && slices.Contains(c.Devices, tray.ExternalID) {
					reached = c.Time
					return true
				}
			}
			return false
		}, 60*time.Second, 5*time.Millisecond)
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
