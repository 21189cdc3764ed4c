package engine_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/engine"
)

// stepJobs returns the River job of each running step of run id, by step.
func stepJobs(ctx context.Context, t *testing.T, q *pgxpool.Pool, id engine.RunID) map[int64]int64 {
	t.Helper()
	rows, err := q.Query(ctx, `SELECT id, job_id FROM engine_step WHERE run_id = $1 AND state = 'running' ORDER BY id`, id)
	require.NoError(t, err)
	jobs := map[int64]int64{}
	var step, job int64
	_, err = pgx.ForEachRow(rows, []any{&step, &job}, func() error { jobs[step] = job; return nil })
	require.NoError(t, err)
	return jobs
}

// TestSweepProbeFindsADeadProcess: in steady state (every process alive) a
// heartbeat's sweep only probes, it scans no step; the first heartbeat
// after a killed process's lease expires reschedules its steps, though no
// full pass is due. The survivor here sweeps by hand (engine.SweepTick,
// what its heartbeat runs) so each heartbeat is observed.
func TestSweepProbeFindsADeadProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewDB(t)
	pool := openPool(t, url, 10)
	_, err := pool.Exec(ctx, callTableSQL)
	require.NoError(t, err)
	survivor := newEngine(pool, engine.Config{}) // no lease loop, no worker: it only sweeps
	newClient(t, pool, survivor)

	victim := exec.Command(os.Args[0], "-test.run=^$")
	victim.Env = append(os.Environ(), crashChildEnv+"="+url)
	victim.Stderr = os.Stderr
	require.NoError(t, victim.Start())
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	var victimName string
	require.Eventually(t, func() bool {
		return pool.QueryRow(ctx, `SELECT name FROM engine_process WHERE expires_at > now() AND name LIKE '%\_' || $1::text || '\_%'`,
			strconv.Itoa(victim.Process.Pid)).Scan(&victimName) == nil
	}, 30*time.Second, 20*time.Millisecond)

	var steps []engine.Step
	for _, name := range []string{"a", "b", "c"} {
		st := step(name, testParams{Hang: true}, "t1")
		st.Timeout = 10 * time.Minute
		steps = append(steps, st)
	}
	var id engine.RunID
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		id, err = survivor.Start(ctx, tx, engine.Plan{Stages: []engine.Stage{{Steps: steps}}})
		return err
	}))
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM test_call WHERE run_id = $1 AND process = $2 AND outcome = 'running'`, id, victimName).Scan(&n))
		return n == 3
	}, 30*time.Second, 20*time.Millisecond, "the victim calls the 3 steps")
	before := stepJobs(ctx, t, pool, id)
	require.Len(t, before, 3)

	// Steady state: the probe finds nothing, no step is scanned.
	_, scans0 := engine.SweepStats(survivor)
	res, err := engine.SweepTick(survivor, false)
	require.NoError(t, err)
	require.Equal(t, engine.SweepResult{}, res)
	probes, scans := engine.SweepStats(survivor)
	require.Equal(t, int64(1), probes)
	require.Equal(t, scans0, scans, "no candidate scan while every process is alive")

	require.NoError(t, victim.Process.Kill())
	_ = victim.Wait()
	require.Eventually(t, func() bool {
		var expired bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT expires_at < now() FROM engine_process WHERE name = $1`, victimName).Scan(&expired))
		return expired
	}, 30*time.Second, 50*time.Millisecond, "the victim's lease expires")

	// The first heartbeat after the expiry, no full pass due: rescheduled.
	res, err = engine.SweepTick(survivor, false)
	require.NoError(t, err)
	require.Equal(t, 3, res.Steps, "the dead process's steps are rescheduled")
	require.Equal(t, 1, res.Leases, "its lease is removed")
	probes, scans = engine.SweepStats(survivor)
	require.Equal(t, int64(2), probes)
	require.Equal(t, scans0+1, scans, "the probe called for one scan")

	after := stepJobs(ctx, t, pool, id)
	require.Len(t, after, 3)
	for s, job := range before {
		require.NotEqual(t, job, after[s], "step %d has a fresh job", s)
		var state string
		require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, job).Scan(&state))
		require.Equal(t, "cancelled", state, "step %d's orphaned job is ended", s)
	}
	rep, err := survivor.Run(ctx, pool, id)
	require.NoError(t, err)
	for _, s := range rep.Stages[0].Steps {
		require.Len(t, s.UnknownOutcomes, 1, "step %s: the call in flight at the kill", s.Name)
		require.Contains(t, s.UnknownOutcomes[0].Why, "lease expired")
	}

	// Nothing left: the next heartbeat only probes.
	res, err = engine.SweepTick(survivor, false)
	require.NoError(t, err)
	require.Equal(t, engine.SweepResult{}, res)
	_, scans2 := engine.SweepStats(survivor)
	require.Equal(t, scans, scans2)
}

// TestSweepRescuesAHungCall: a call that runs on, in a live process, past
// its timeout plus the rescue window is rescheduled by the next full pass;
// the probe of the heartbeats in between leaves it (it looks for dead
// processes only), and the process keeps its lease.
func TestSweepRescuesAHungCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, engine.Config{RescueStuckJobsAfter: time.Hour}) // full passes every 30 s
	sweeper := newEngine(b.pool, engine.Config{RescueStuckJobsAfter: time.Hour})
	newClient(t, b.pool, sweeper)

	// The engine's first heartbeat makes a full pass; the next is 30 s on.
	require.Eventually(t, func() bool {
		_, scans := engine.SweepStats(b.engine)
		return scans >= 1
	}, 30*time.Second, 20*time.Millisecond, "the engine's first full pass")

	st := step("stuck", testParams{Block: 5 * time.Minute}, "t1")
	st.Timeout = 10 * time.Minute
	id := b.start(t, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{st}}}})
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM engine_step WHERE run_id = $1 AND claimed_at IS NOT NULL`, id).Scan(&n))
		return n == 1
	}, 30*time.Second, 20*time.Millisecond, "the call starts")
	before := stepJobs(ctx, t, b.pool, id)
	require.Len(t, before, 1)
	// The call (and its job's attempt) began longer ago than its timeout
	// plus the rescue window.
	_, err := b.pool.Exec(ctx, `UPDATE engine_step SET claimed_at = claimed_at - interval '2 hours' WHERE run_id = $1`, id)
	require.NoError(t, err)
	for _, job := range before {
		_, err := b.pool.Exec(ctx, `UPDATE river_job SET attempted_at = attempted_at - interval '2 hours' WHERE id = $1`, job)
		require.NoError(t, err)
	}

	res, err := engine.SweepTick(sweeper, false)
	require.NoError(t, err)
	require.Equal(t, engine.SweepResult{}, res, "a probe leaves a hung call in a live process")
	_, scans := engine.SweepStats(sweeper)
	require.Zero(t, scans)

	// The engine's own lease loop makes its next full pass 30 s after its
	// first; this one's comes first (or, on a stalled machine, that one
	// did: either way the step is rescheduled once).
	_, err = engine.SweepTick(sweeper, true)
	require.NoError(t, err)
	after := stepJobs(ctx, t, b.pool, id)
	require.Len(t, after, 1)
	for s, job := range before {
		require.NotEqual(t, job, after[s], "the hung step has a fresh job")
	}
	rep, err := b.engine.Run(ctx, b.pool, id)
	require.NoError(t, err)
	require.Len(t, rep.Stages[0].Steps[0].UnknownOutcomes, 1, "the hung call's outcome is unknown")
	var live bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT expires_at > now() FROM engine_process WHERE name = $1`, b.engine.ProcessName()).Scan(&live))
	require.True(t, live, "the process keeps its lease")
}
