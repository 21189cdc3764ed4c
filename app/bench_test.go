package app

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
)

// benchServerEnv makes this test binary, started by TestBench as the
// bench's server child, run `flow serve` (TestBenchServerProcess) instead
// of the tests.
const benchServerEnv = "FLOW_BENCH_TEST_SERVER"

// TestBenchServerProcess is the server child of TestBench: with
// FLOW_BENCH_TEST_SERVER set it runs `flow serve --migrate` until SIGTERM
// and exits; otherwise it does nothing.
func TestBenchServerProcess(t *testing.T) {
	if os.Getenv(benchServerEnv) == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, []string{"flow", "serve", "--migrate"}, os.Getenv)
	stop()
	if err != nil {
		os.Stderr.WriteString("flow serve: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

func TestBench(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := benchOptions{
		racks: 2, components: 6, powerDelay: time.Millisecond,
		workload: benchWorkloads["power-on"], databaseURL: dbtest.NewDB(t),
		concurrency: 4, timeout: 20 * time.Second, poll: 20 * time.Millisecond,
		serverCommand: func() (*exec.Cmd, error) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBenchServerProcess$")
			cmd.Env = append(os.Environ(), benchServerEnv+"=1")
			return cmd, nil
		},
	}
	b, err := startBench(ctx, o)
	if b != nil {
		t.Cleanup(func() { require.NoError(t, b.close(context.WithoutCancel(ctx))) })
	}
	require.NoError(t, err)
	res, err := b.run(ctx)
	require.NoError(t, err)

	require.Equal(t, 2, res.Tasks)
	require.Equal(t, 2, res.Completed, res.Failures)
	require.Zero(t, res.Failed)
	require.Zero(t, res.Unfinished)
	require.Positive(t, res.WallSeconds)
	require.Positive(t, res.TasksPerSecond)
	// power_on on shelves, switches and compute trays: three rule steps of
	// two actions (PowerControl, VerifyPowerStatus) per task.
	require.Equal(t, 2*3*2, res.EngineSteps)
	require.Positive(t, res.StepsPerSecond)
	require.GreaterOrEqual(t, res.BackendCalls, res.EngineSteps)
	require.Positive(t, res.FirstCallP50Ms)
	require.LessOrEqual(t, res.FirstCallP50Ms, res.FirstCallP99Ms)
	require.LessOrEqual(t, res.FirstCallP99Ms, res.CompletedP50Ms, "the first backend call comes before the task ends")
	require.LessOrEqual(t, res.CompletedP50Ms, res.CompletedP99Ms)
	require.LessOrEqual(t, res.CompletedP99Ms, res.WallSeconds*1000+1)
	require.Positive(t, res.ServerPeakRSSBytes)
}

func TestBenchRack(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		m    int
		want map[inventory.ComponentType]int
	}{
		{name: "One", m: 1, want: map[inventory.ComponentType]int{inventory.ComponentTypePowerShelf: 1}},
		{name: "OneOfEach", m: 3, want: map[inventory.ComponentType]int{inventory.ComponentTypePowerShelf: 1, inventory.ComponentTypeCompute: 1, inventory.ComponentTypeNVSwitch: 1}},
		{name: "Six", m: 6, want: map[inventory.ComponentType]int{inventory.ComponentTypePowerShelf: 4, inventory.ComponentTypeCompute: 1, inventory.ComponentTypeNVSwitch: 1}},
		{name: "Full", m: 35, want: map[inventory.ComponentType]int{inventory.ComponentTypePowerShelf: 8, inventory.ComponentTypeCompute: 18, inventory.ComponentTypeNVSwitch: 9}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := benchRack(3, tt.m)
			require.Len(t, r.Components, tt.m)
			got := map[inventory.ComponentType]int{}
			for _, c := range r.Components {
				got[c.Type]++
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, inventory.DemoRack(3).Name, r.Name)
		})
	}
}

func TestPercentileMs(t *testing.T) {
	t.Parallel()
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond // 100ms..1ms, unsorted
	}
	require.Equal(t, 50.0, percentileMs(ds, 50))
	require.Equal(t, 99.0, percentileMs(ds, 99))
	require.Equal(t, 7.0, percentileMs([]time.Duration{7 * time.Millisecond}, 99))
	require.Zero(t, percentileMs(nil, 50))
}
