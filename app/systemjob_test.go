package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
)

// newSystemJobProcess is one process's system jobs on the database at url,
// electing its leader quickly.
func newSystemJobProcess(t *testing.T, url string, jobs *systemJobs) *systemJobs {
	t.Helper()
	p, err := db.Open(context.Background(), url, db.PoolConfig{MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	jobs.pool = p
	jobs.electRetry = 100 * time.Millisecond
	jobs.heartbeat = 200 * time.Millisecond
	return jobs
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

// TestSystemJobRunsOnLeaderWithoutOverlap runs two processes' system jobs on
// one database, each registering the same slow job with a short interval:
// the job never runs twice at once (across both processes), it writes no
// River job row, and it keeps running after the leader stops.
func TestSystemJobRunsOnLeaderWithoutOverlap(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDB(t)
	var running, maxRunning, runs atomic.Int32
	var mu sync.Mutex
	ranOn := map[string]int{}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	mk := func(name string) *systemJobs {
		var s systemJobs
		require.NoError(t, s.Add(SystemJob{Name: "slow", Interval: 50 * time.Millisecond, RunOnStart: true, Run: func(ctx context.Context) error {
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
			time.Sleep(300 * time.Millisecond) // longer than the interval
			return nil
		}}))
		return newSystemJobProcess(t, url, &s)
	}
	ctx := context.Background()
	a, b := mk("a"), mk("b")
	stopA := a.start(ctx, logger)
	stopB := b.start(ctx, logger)
	require.Eventually(t, func() bool { return runs.Load() >= 3 }, 60*time.Second, 20*time.Millisecond)
	require.EqualValues(t, 1, maxRunning.Load(), "a system job overlapped itself")
	require.NotEqual(t, a.Leading(), b.Leading(), "exactly one process leads")
	mu.Lock()
	require.Len(t, ranOn, 1, "only the leader runs cycles")
	mu.Unlock()

	// Stop the leader; the other takes over.
	stopLeader, survivor, stopSurvivor := stopA, b, stopB
	if b.Leading() {
		stopLeader, survivor, stopSurvivor = stopB, a, stopA
	}
	stopLeader()
	before := runs.Load()
	require.Eventually(t, func() bool { return runs.Load() >= before+2 }, 90*time.Second, 50*time.Millisecond)
	require.True(t, survivor.Leading())
	stopSurvivor()
	require.EqualValues(t, 1, maxRunning.Load())

	p, err := db.Open(ctx, url, db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	defer p.Close()
	var jobs int
	require.NoError(t, p.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&jobs))
	require.Zero(t, jobs, "system cycles write no River job")
}

// TestSystemJobSleepsUntilNext: a job with Next runs at the time Next
// gives, not one Interval later, and a notification on its WakeOn channel
// makes it look at Next again.
func TestSystemJobSleepsUntilNext(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	var due time.Time // zero: nothing due
	var runs atomic.Int32
	var s systemJobs
	require.NoError(t, s.Add(SystemJob{Name: "dispatch", Interval: time.Hour, WakeOn: "flow_test_wake",
		Next: func(context.Context) (time.Time, bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return due, !due.IsZero(), nil
		},
		Run: func(context.Context) error {
			mu.Lock()
			due = time.Time{}
			mu.Unlock()
			runs.Add(1)
			return nil
		}}))
	newSystemJobProcess(t, url, &s)
	stop := s.start(ctx, slog.New(slog.DiscardHandler))
	defer stop()
	require.Eventually(t, s.Leading, 60*time.Second, 20*time.Millisecond)
	require.Never(t, func() bool { return runs.Load() > 0 }, time.Second, 50*time.Millisecond, "nothing due: it sleeps")

	// Something becomes due in 300 ms; the notification wakes the loop,
	// which then sleeps until that time.
	mu.Lock()
	due = time.Now().Add(300 * time.Millisecond)
	mu.Unlock()
	_, err := s.pool.Exec(ctx, `SELECT pg_notify('flow_test_wake', '')`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return runs.Load() == 1 }, 60*time.Second, 20*time.Millisecond)
	require.Never(t, func() bool { return runs.Load() > 1 }, time.Second, 50*time.Millisecond, "nothing due again")
}

// TestSystemJobNextFailureRetriesSoon: a job whose Next cannot say when
// work is due (its query failed: the database failing over) runs its next
// cycle after the error floor (5 s), not one Interval later: the schedule
// dispatcher's Interval is a minute, a minute of firings left to River's
// own scheduler.
func TestSystemJobNextFailureRetriesSoon(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDB(t)
	ctx := context.Background()
	var nexts, runs atomic.Int32
	var s systemJobs
	require.NoError(t, s.Add(SystemJob{Name: "dispatch", Interval: time.Hour,
		Next: func(context.Context) (time.Time, bool, error) {
			if nexts.Add(1) == 1 {
				return time.Time{}, false, errors.New("the database refused the connection")
			}
			return time.Time{}, false, nil
		},
		Run: func(context.Context) error { runs.Add(1); return nil }}))
	newSystemJobProcess(t, url, &s)
	stop := s.start(ctx, slog.New(slog.DiscardHandler))
	defer stop()
	require.Eventually(t, s.Leading, 60*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return runs.Load() == 1 }, 30*time.Second, 50*time.Millisecond,
		"a cycle after the error floor, not an hour on")
	require.Never(t, func() bool { return runs.Load() > 1 }, time.Second, 50*time.Millisecond, "then it sleeps its Interval")
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
			require.True(t, c.LeakEventRules, "event rules, which pre-empt, not upstream's legacy path")
			require.False(t, c.leakEventRulesSet)
		}},
		{name: "EventRuleLeakPath", env: map[string]string{"FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": " true "}, check: func(t *testing.T, c SystemJobsConfig) {
			require.True(t, c.LeakEventRules)
			require.True(t, c.leakEventRulesSet)
		}},
		{name: "LegacyLeakPathExplicit", env: map[string]string{"FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "0"}, check: func(t *testing.T, c SystemJobsConfig) {
			require.False(t, c.LeakEventRules)
			require.True(t, c.leakEventRulesSet, "flow dev keeps an explicit false")
			require.Equal(t, time.Minute, c.LeakDetectionInterval, "the legacy path polls as upstream does unless told")
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
		{"Legacy", map[string]string{"NICO_CORE_API_URL": "http://127.0.0.1:1", "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "false"}, "", []string{InventorySyncJob, LeakDetectionJob}},
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
			jobs, err := newSystemJobs(cfg, b, nil, noop, nil, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			require.Equal(t, tt.want, jobs.Names())
			if j, ok := jobs.jobs[LeakDetectionJob]; ok {
				require.True(t, j.FromStart, "leak detection keeps its cadence however long a cycle takes")
			}
		})
	}
}

// TestSystemJobOnItsOwnPool: a job registered with a Pool of its own (leak
// detection, on the safety path's pool) keeps running its cycles, and its
// start-to-start intervals are observed, while every connection of the
// system jobs' main pool is held by others (reads, a bulk submission); a
// job without one waits for the main pool and runs once it is free.
func TestSystemJobOnItsOwnPool(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDB(t)
	ctx := context.Background()
	main, err := db.Open(ctx, url, db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(main.Close)
	own, err := db.Open(ctx, url, db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(own.Close)
	var safety, other atomic.Int32
	var mu sync.Mutex
	intervals := map[string]int{}
	s := systemJobs{pool: main, electRetry: 50 * time.Millisecond, heartbeat: 200 * time.Millisecond,
		started: func(name string, since time.Duration) {
			require.Positive(t, since)
			mu.Lock()
			intervals[name]++
			mu.Unlock()
		}}
	require.NoError(t, s.Add(SystemJob{Name: LeakDetectionJob, Interval: 20 * time.Millisecond, RunOnStart: true, Pool: own,
		Run: func(context.Context) error { safety.Add(1); return nil }}))
	require.NoError(t, s.Add(SystemJob{Name: "bulk", Interval: 20 * time.Millisecond, RunOnStart: true, Timeout: 30 * time.Second,
		Run: func(context.Context) error { other.Add(1); return nil }}))

	// The leader's lock holds one of the main pool's two connections once
	// elected; this test holds the other from before the election on.
	held, err := main.Acquire(ctx)
	require.NoError(t, err)
	stop := s.start(ctx, slog.New(slog.DiscardHandler))
	defer stop()
	require.Eventually(t, s.Leading, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return safety.Load() >= 5 }, 30*time.Second, 10*time.Millisecond,
		"the job on its own pool runs while the main pool is exhausted")
	require.Zero(t, other.Load(), "a job on the main pool waits for a connection of it")
	require.Equal(t, int32(2), main.Stat().AcquiredConns(), "the main pool stayed exhausted throughout")
	mu.Lock()
	require.GreaterOrEqual(t, intervals[LeakDetectionJob], 4, "each cycle after the first reports its start-to-start interval")
	mu.Unlock()
	held.Release()
	require.Eventually(t, func() bool { return other.Load() >= 1 }, 30*time.Second, 10*time.Millisecond)
}

// TestSystemJobNextCycle: a job's next cycle is due Interval after its
// last one ended, or after it started with FromStart (so a cycle longer
// than the interval is followed at once, after the floor); a failed cycle
// is not retried before the error floor either way.
func TestSystemJobNextCycle(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 6, 21, 0, 0, 0, time.UTC)
	end := start.Add(2 * time.Second)
	for _, tt := range []struct {
		name        string
		job         SystemJob
		end         time.Time
		err         error
		next, floor time.Time
	}{
		{"from the end", SystemJob{Interval: 3 * time.Second}, end, nil, end.Add(3 * time.Second), end.Add(systemNextFloor)},
		{"from the start", SystemJob{Interval: 3 * time.Second, FromStart: true}, end, nil, start.Add(3 * time.Second), end.Add(systemNextFloor)},
		{"from the start, the cycle outlasting the interval", SystemJob{Interval: time.Second, FromStart: true}, end, nil, start.Add(time.Second), end.Add(systemNextFloor)},
		{"from the start, failed", SystemJob{Interval: 3 * time.Second, FromStart: true}, end, errors.New("core down"), start.Add(3 * time.Second), end.Add(3 * time.Second)},
		{"from the end, failed", SystemJob{Interval: time.Minute}, end, errors.New("core down"), end.Add(time.Minute), end.Add(systemErrorFloor)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			next, floor := nextCycle(tt.job, start, tt.end, tt.err)
			require.Equal(t, tt.next, next, "next")
			require.Equal(t, tt.floor, floor, "floor")
			// loop starts the cycle at the later of the two.
			at := next
			if at.Before(floor) {
				at = floor
			}
			if tt.job.FromStart && tt.err == nil && tt.end.Sub(start) >= tt.job.Interval {
				require.Equal(t, tt.end.Add(systemNextFloor), at, "a cycle that outlasted its interval is followed at once")
			}
		})
	}
}
