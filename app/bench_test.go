package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/bench"
	"github.com/nicoflow/flow/db/dbtest"
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

// runBench runs flow bench on two racks of m components, its server child
// being this test binary (TestBenchServerProcess).
func runBench(t *testing.T, workload string, m int, timeout time.Duration, opts ...func(*bench.Options)) *bench.Result {
	t.Helper()
	ctx := context.Background()
	o := bench.Options{
		Racks: 2, Components: m, PowerDelay: time.Millisecond,
		Workload: workload, DatabaseURL: dbtest.NewDB(t),
		Concurrency: 4, Timeout: timeout, Poll: 20 * time.Millisecond,
		ServerCommand: func() (*exec.Cmd, error) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBenchServerProcess$")
			cmd.Env = append(os.Environ(), benchServerEnv+"=1")
			return cmd, nil
		},
	}
	for _, f := range opts {
		f(&o)
	}
	b, err := bench.Start(ctx, o)
	if b != nil {
		t.Cleanup(func() { require.NoError(t, b.Close(context.WithoutCancel(ctx))) })
	}
	require.NoError(t, err)
	res, err := b.Run(ctx)
	require.NoError(t, err)
	return res
}

func TestBench(t *testing.T) {
	t.Parallel()
	res := runBench(t, "power-on", 6, 20*time.Second)

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
	// Each task's first call comes before its end, so each percentile of
	// the first calls is at most the same percentile of the ends.
	require.LessOrEqual(t, res.FirstCallP50Ms, res.CompletedP50Ms, "the first backend call comes before the task ends")
	require.LessOrEqual(t, res.FirstCallP99Ms, res.CompletedP99Ms, "the first backend call comes before the task ends")
	require.LessOrEqual(t, res.CompletedP50Ms, res.CompletedP99Ms)
	require.LessOrEqual(t, res.CompletedP99Ms, res.WallSeconds*1000+1)
	require.Positive(t, res.ServerPeakRSSBytes)
}

// TestBenchPGStats: --pg-stats loads pg_stat_statements into the private
// PostgreSQL and reports the run's statements, the engine's among them.
func TestBenchPGStats(t *testing.T) {
	t.Parallel()
	res := runBench(t, "power-on", 3, 30*time.Second, func(o *bench.Options) {
		o.DatabaseURL = ""
		o.PGStats = 200
		o.PGSettings = []string{"track_io_timing=on"}
	})
	require.Equal(t, 2, res.Completed, res.Failures)
	require.NotEmpty(t, res.Statements)
	require.LessOrEqual(t, len(res.Statements), 200)
	var claims int64
	for i, s := range res.Statements {
		require.NotEmpty(t, s.Query)
		if i > 0 {
			require.LessOrEqual(t, s.TotalMs, res.Statements[i-1].TotalMs, "ordered by total time")
		}
		if strings.Contains(s.Query, "name: StepClaimMany") {
			claims += s.Rows
		}
	}
	// Every engine step is claimed once at least: the statements are the
	// run's, not the setup's alone.
	require.GreaterOrEqual(t, claims, int64(res.EngineSteps))
}

func TestBenchFirmwareUpgrade(t *testing.T) {
	t.Parallel()
	res := runBench(t, "firmware-upgrade", 35, 30*time.Second)
	require.Equal(t, 2, res.Completed, res.Failures)
	// The built-in rule: compute trays, then switches, one FirmwareControl
	// and its read-back of the installed versions each.
	require.Equal(t, 2*2*2, res.EngineSteps)
	require.Positive(t, res.Polls)
	require.Positive(t, res.PollsPerSecond)
}

// TestBenchWebhookEvents: with a subscription, the synthetic event stream
// goes through the outbox and the server's delivery jobs to the bench's
// receiver, which gets every event owed (the tasks' and the synthetic
// ones) once; without one, the stream's transactions write nothing.
func TestBenchWebhookEvents(t *testing.T) {
	t.Parallel()
	raw := make([]byte, 32)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	key := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(key, []byte(base64.StdEncoding.EncodeToString(raw)+"\n"), 0o600))
	env := []string{"FLOW_DEV_MODE=true", "FLOW_DATA_ENCRYPTION_KEY_PATH=" + key}
	for _, subscribe := range []bool{true, false} {
		t.Run(map[bool]string{true: "Subscribed", false: "NoSubscription"}[subscribe], func(t *testing.T) {
			t.Parallel()
			url := dbtest.NewDB(t)
			res := runBench(t, "power-on", 6, 30*time.Second, func(o *bench.Options) {
				o.DatabaseURL, o.ServerEnv, o.Subscribe, o.EventsPerSecond = url, env, subscribe, 200
			})
			require.Equal(t, 2, res.Completed, res.Failures)
			w := res.Webhook
			require.NotNil(t, w)
			require.Positive(t, w.Emitted)
			require.Zero(t, w.EmitErrors)
			require.Positive(t, w.EmittedPerSecond)
			conn, err := pgx.Connect(context.Background(), url)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			var events int
			require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM notify_event`).Scan(&events))
			if !subscribe {
				require.Zero(t, events, "nobody subscribed: nothing stored")
				return
			}
			require.Equal(t, res.Completed+w.Emitted, w.Expected)
			require.Equal(t, w.Expected, events, "the tasks' end events and the synthetic ones")
			require.Equal(t, w.Expected, w.Events, "every event owed arrived")
			require.Equal(t, w.Events, w.Requests, "once each")
			require.Positive(t, w.DuringRun)
			require.Positive(t, w.DeliveredPerSecond)
		})
	}
}
