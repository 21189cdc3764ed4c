package app

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
)

// newSystemJobClient is a River client that runs only the given system jobs,
// electing its leader quickly.
func newSystemJobClient(t *testing.T, url string, jobs *systemJobs) *river.Client[pgx.Tx] {
	t.Helper()
	rc := &river.Config{Workers: river.NewWorkers(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	jobs.install(rc, rc.Logger)
	p, err := db.Open(context.Background(), url, db.PoolConfig{MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	jobs.pool = p // the running cycle's advisory lock
	c, err := river.NewClient(riverpgxv5.New(p), rc)
	require.NoError(t, err)
	return c
}

func TestSystemJobAddRejectsBadJobs(t *testing.T) {
	t.Parallel()
	run := func(context.Context) error { return nil }
	var s systemJobs
	require.NoError(t, s.Add(SystemJob{Name: "a", Interval: time.Second, Run: run}))
	require.ErrorContains(t, s.Add(SystemJob{Name: "a", Interval: time.Second, Run: run}), "registered twice")
	require.ErrorContains(t, s.Add(SystemJob{Name: "", Interval: time.Second, Run: run}), "empty name")
	require.ErrorContains(t, s.Add(SystemJob{Name: "b", Run: run}), "interval must be positive")
	require.ErrorContains(t, s.Add(SystemJob{Name: "c", Interval: time.Second}), "no Run")
	require.Equal(t, []string{"a"}, s.Names())
}

// TestSystemJobRunsOnLeaderWithoutOverlap runs two River clients on one
// database, each registering the same slow job with a short interval: the
// job never runs twice at once (across both processes), and it keeps
// running after the leader stops.
func TestSystemJobRunsOnLeaderWithoutOverlap(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDB(t)
	var running, maxRunning, runs atomic.Int32
	var mu sync.Mutex
	ranOn := map[string]int{}
	mk := func(name string) *river.Client[pgx.Tx] {
		var s systemJobs
		require.NoError(t, s.Add(SystemJob{Name: "slow", Interval: 50 * time.Millisecond, Run: func(ctx context.Context) error {
			n := running.Add(1)
			defer running.Add(-1)
			for {
				m := maxRunning.Load()
				if n <= m || maxRunning.CompareAndSwap(m, n) {
					break
				}
			}
			mu.Lock()
			ranOn[name]++
			mu.Unlock()
			runs.Add(1)
			time.Sleep(300 * time.Millisecond) // longer than the interval: ticks must be skipped
			return nil
		}}))
		return newSystemJobClient(t, url, &s)
	}
	ctx := context.Background()
	a, b := mk("a"), mk("b")
	require.NoError(t, a.Start(ctx))
	require.NoError(t, b.Start(ctx))
	require.Eventually(t, func() bool { return runs.Load() >= 3 }, 60*time.Second, 20*time.Millisecond)
	require.EqualValues(t, 1, maxRunning.Load(), "a system job overlapped itself")

	// Stop whichever ran it; the other takes over once it is elected.
	mu.Lock()
	first := "a"
	if ranOn["b"] > ranOn["a"] {
		first = "b"
	}
	mu.Unlock()
	leader, survivor := a, b
	if first == "b" {
		leader, survivor = b, a
	}
	require.NoError(t, leader.Stop(ctx))
	before := runs.Load()
	require.Eventually(t, func() bool { return runs.Load() >= before+2 }, 90*time.Second, 50*time.Millisecond)
	require.NoError(t, survivor.Stop(ctx))
	require.EqualValues(t, 1, maxRunning.Load())
}

func TestSystemJobsConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	good := write("good.yaml", "inventory_run_frequency: 30s\ndisable_inventory: false\nleak_detection_interval: 2m\ndisable_leak_detection: true\ngrpc_timeout: 5s\n")
	for _, tt := range []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, c SystemJobsConfig)
		wantErr string
	}{
		{name: "Defaults", env: map[string]string{"FLOW_CONFIG_FILE": ""}, check: func(t *testing.T, c SystemJobsConfig) {
			require.Equal(t, time.Minute, c.InventoryInterval)
			require.Equal(t, 3*time.Second, c.LeakDetectionInterval, "a few seconds, not upstream's minute")
			require.False(t, c.InventoryDisabled)
			require.True(t, c.ExpectedInventorySync)
			require.False(t, c.LeakEventRules, "upstream's default: the legacy leak path")
			require.False(t, c.leakEventRulesSet)
		}},
		{name: "EventRuleLeakPath", env: map[string]string{"FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": " true "}, check: func(t *testing.T, c SystemJobsConfig) {
			require.True(t, c.LeakEventRules)
			require.True(t, c.leakEventRulesSet)
		}},
		{name: "LegacyLeakPathExplicit", env: map[string]string{"FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "0"}, check: func(t *testing.T, c SystemJobsConfig) {
			require.False(t, c.LeakEventRules)
			require.True(t, c.leakEventRulesSet, "flow dev keeps an explicit false")
		}},
		{name: "File", env: map[string]string{"FLOW_CONFIG_FILE": good, "FLOW_EXPECTED_INVENTORY_SYNC_ENABLED": "false"}, check: func(t *testing.T, c SystemJobsConfig) {
			require.Equal(t, good, c.File)
			require.Equal(t, 30*time.Second, c.InventoryInterval)
			require.True(t, c.inventoryIntervalSet)
			require.Equal(t, 2*time.Minute, c.LeakDetectionInterval)
			require.True(t, c.LeakDetectionDisabled)
			require.False(t, c.ExpectedInventorySync)
		}},
		{name: "ZeroDuration", env: map[string]string{"FLOW_CONFIG_FILE": write("zero.yaml", "inventory_run_frequency: 0s\n")}, wantErr: "inventory_run_frequency must be a positive duration"},
		{name: "BadDuration", env: map[string]string{"FLOW_CONFIG_FILE": write("bad.yaml", "leak_detection_interval: soon\n")}, wantErr: "leak_detection_interval must be a positive duration"},
		{name: "BadBool", env: map[string]string{"FLOW_CONFIG_FILE": write("bool.yaml", "disable_inventory: perhaps\n")}, wantErr: "bool.yaml"},
		{name: "MissingFile", env: map[string]string{"FLOW_CONFIG_FILE": filepath.Join(dir, "nope.yaml")}, wantErr: "FLOW_CONFIG_FILE"},
		{name: "BadLeakFlag", env: map[string]string{"FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "yes please"}, wantErr: "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED must be true or false"},
		{name: "BadExpectedFlag", env: map[string]string{"FLOW_EXPECTED_INVENTORY_SYNC_ENABLED": "on-ish"}, wantErr: "FLOW_EXPECTED_INVENTORY_SYNC_ENABLED"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Equal(t, 2, ExitCode(err))
				return
			}
			require.NoError(t, err)
			tt.check(t, cfg.SystemJobs)
		})
	}
}

// TestLeakDetectionJobRegistration: leak-detection is registered when NICo
// Core is configured and disable_leak_detection is off, on either path.
func TestLeakDetectionJobRegistration(t *testing.T) {
	t.Parallel()
	noop := func(context.Context) error { return nil }
	for _, tt := range []struct {
		name string
		env  map[string]string
		file string
		want []string
	}{
		{"Legacy", map[string]string{"NICO_CORE_API_URL": "http://127.0.0.1:1"}, "", []string{InventorySyncJob, LeakDetectionJob}},
		{"EventRules", map[string]string{"NICO_CORE_API_URL": "http://127.0.0.1:1", "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "true"}, "", []string{InventorySyncJob, LeakDetectionJob}},
		{"Disabled", map[string]string{"NICO_CORE_API_URL": "http://127.0.0.1:1", "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "true"}, "disable_leak_detection: true\n", []string{InventorySyncJob}},
		{"NoCore", map[string]string{}, "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"DATABASE_URL": "postgres://localhost/x"}
			for k, v := range tt.env {
				env[k] = v
			}
			if tt.file != "" {
				env["FLOW_CONFIG_FILE"] = writeFile(t, "flowconfig.yaml", tt.file)
			}
			cfg, err := LoadConfig(func(k string) string { return env[k] })
			require.NoError(t, err)
			b, err := newBackends(cfg, nil)
			require.NoError(t, err)
			jobs, err := newSystemJobs(cfg, b, nil, noop, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			require.Equal(t, tt.want, jobs.Names())
		})
	}
}
