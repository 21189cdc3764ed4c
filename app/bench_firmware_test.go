package app

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
)

func TestBenchFirmwareUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := benchOptions{
		racks: 2, components: 35, powerDelay: time.Millisecond,
		workload: benchWorkloads["firmware-upgrade"], databaseURL: dbtest.NewDB(t),
		concurrency: 4, timeout: 30 * time.Second, poll: 20 * time.Millisecond,
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
	require.Equal(t, 2, res.Completed, res.Failures)
	// The built-in rule: compute trays, then switches, one FirmwareControl each.
	require.Equal(t, 2*2, res.EngineSteps)
	require.Positive(t, res.Polls)
	require.Positive(t, res.PollsPerSecond)
}
