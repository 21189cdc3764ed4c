package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/engine"
)

// TestOrphanFoundByTheHeartbeatProbe: with the default rescue window (a
// full pass every 30 s), a step job fetched by this process and never
// worked (its fetch's answer lost at a failover) is rescheduled by the
// first heartbeat after it has gone unworked for the orphan window (10 s),
// through the heartbeat's cheap probe, not a full pass a minute later:
// make ha-test's fault 16 saw such a step wait 79 s while its rack's queue
// filled and the rack's schedule had eleven firings refused (issue 46). A
// job fetched just now is left alone.
func TestOrphanFoundByTheHeartbeatProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := openPool(t, dbtest.NewDB(t), 10)
	_, err := pool.Exec(ctx, callTableSQL)
	require.NoError(t, err)
	e := newEngine(pool, engine.Config{}) // no worker: the fetch is played by hand
	newClient(t, pool, e)

	var id engine.RunID
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		id, err = e.Start(ctx, tx, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{step("power-on", testParams{}, "t1")}}}})
		return err
	}))
	before := stepJobs(ctx, t, pool, id)
	require.Len(t, before, 1)
	var orphan int64
	for _, j := range before {
		orphan = j
	}
	// River's fetch committed: running, attempted by this process, which
	// never heard of it.
	fetched := func(ago time.Duration) {
		_, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_by = ARRAY[$2::text],
			attempted_at = now() - $3::bigint * interval '1 millisecond' WHERE id = $1`, orphan, e.ProcessName(), ago.Milliseconds())
		require.NoError(t, err)
	}
	fetched(time.Second)
	res, err := engine.SweepTick(e, false)
	require.NoError(t, err)
	require.Equal(t, engine.SweepResult{}, res, "a job fetched a second ago is not an orphan")
	_, scans := engine.SweepStats(e)
	require.Zero(t, scans, "the probe found nothing to scan")

	fetched(11 * time.Second)
	res, err = engine.SweepTick(e, false)
	require.NoError(t, err)
	require.Equal(t, 1, res.Steps, "the heartbeat's probe reschedules the orphan, no full pass due")
	require.Equal(t, 1, res.Orphans)
	after := stepJobs(ctx, t, pool, id)
	require.Len(t, after, 1)
	for s, j := range after {
		require.NotEqual(t, before[s], j, "a fresh job")
	}
	var state, why string
	require.NoError(t, pool.QueryRow(ctx, `SELECT state, errors[array_upper(errors, 1)]->>'error' FROM river_job WHERE id = $1`, orphan).Scan(&state, &why))
	require.Equal(t, "cancelled", state)
	require.Contains(t, why, "never worked by its process")

	// Nothing left: the next probe finds nothing.
	res, err = engine.SweepTick(e, false)
	require.NoError(t, err)
	require.Equal(t, engine.SweepResult{}, res)

	// The fresh job runs the step, once.
	startWithLease(t, pool, e)
	rep := waitRun(t, pool, e, id, 30*time.Second)
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
	require.Len(t, listCalls(t, pool, id), 1)
}

// TestStepWithEndedJobIsRescheduled: a running step whose River job was
// finalized for a reason of River's own (completed, discarded, cancelled)
// or is missing altogether (deleted) is run by nothing, and no sweep of
// running jobs sees it. A full pass of the sweep reschedules it (a new
// token, a fresh job) and the step then runs once; a probe does not look
// for them. A step whose claim may still be in flight (claimed within its
// call timeout) is left for a later pass, and a step of an ended run is
// left alone.
func TestStepWithEndedJobIsRescheduled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := openPool(t, dbtest.NewDB(t), 10)
	_, err := pool.Exec(ctx, callTableSQL)
	require.NoError(t, err)
	e := newEngine(pool, engine.Config{}) // no worker until the end
	newClient(t, pool, e)

	start := func() engine.RunID {
		var id engine.RunID
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			id, err = e.Start(ctx, tx, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{step("power-on", testParams{}, "t1")}}}})
			return err
		}))
		return id
	}
	jobOf := func(id engine.RunID) int64 {
		var job int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(job_id, 0) FROM engine_step WHERE run_id = $1`, id).Scan(&job))
		return job
	}
	end := func(id engine.RunID, state string) {
		_, err := pool.Exec(ctx, `UPDATE river_job SET state = $2::river_job_state, attempt = 1, attempted_at = now(),
			finalized_at = now() - interval '5 seconds' WHERE id = $1`, jobOf(id), state)
		require.NoError(t, err)
	}
	lost := map[string]engine.RunID{}
	for _, state := range []string{"completed", "discarded", "cancelled"} {
		lost[state] = start()
		end(lost[state], state)
	}
	lost["deleted"] = start()
	_, err = pool.Exec(ctx, `DELETE FROM river_job WHERE id = $1`, jobOf(lost["deleted"]))
	require.NoError(t, err)
	// Claimed a moment ago, its job then cancelled: its call may still be
	// in flight (a cancel from River UI interrupts it).
	inFlight := start()
	end(inFlight, "cancelled")
	_, err = pool.Exec(ctx, `UPDATE engine_step SET claimed_at = now(), exec_token = exec_token + 1 WHERE run_id = $1`, inFlight)
	require.NoError(t, err)
	// A healthy step, its job waiting: untouched.
	healthy := start()
	healthyJob := jobOf(healthy)

	res, err := engine.SweepTick(e, false)
	require.NoError(t, err)
	require.Equal(t, engine.SweepResult{}, res, "the heartbeat's probe does not look for them")

	old := map[string]int64{}
	for name, id := range lost {
		old[name] = jobOf(id)
	}
	res, err = engine.SweepTick(e, true)
	require.NoError(t, err)
	require.Equal(t, 4, res.Steps, "%+v", res)
	require.Equal(t, 4, res.Lost)
	require.Zero(t, res.Orphans)
	for name, id := range lost {
		job := jobOf(id)
		require.NotZero(t, job, "%s: a fresh job", name)
		require.NotEqual(t, old[name], job, "%s: a fresh job", name)
		var state string
		require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, job).Scan(&state))
		require.Equal(t, "available", state, name)
	}
	if st := old["completed"]; st != 0 {
		var state string
		require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, st).Scan(&state))
		require.Equal(t, "completed", state, "an ended job stays as it ended")
	}
	require.Equal(t, healthyJob, jobOf(healthy), "a step with a live job is left alone")
	inFlightJob := jobOf(inFlight)

	// Nothing more on the next pass but the claim still in flight.
	res, err = engine.SweepTick(e, true)
	require.NoError(t, err)
	require.Zero(t, res.Steps)
	require.Equal(t, inFlightJob, jobOf(inFlight), "a claim within its call timeout is left alone")

	// Its claim older than the call timeout plus the orphan window: the
	// next pass takes it, the open claim's call recorded as of unknown
	// outcome.
	_, err = pool.Exec(ctx, `UPDATE engine_step SET claimed_at = now() - (spec->>'timeout_ms')::bigint * interval '1 millisecond' - interval '11 seconds'
		WHERE run_id = $1`, inFlight)
	require.NoError(t, err)
	res, err = engine.SweepTick(e, true)
	require.NoError(t, err)
	require.Equal(t, 1, res.Lost)
	require.NotEqual(t, inFlightJob, jobOf(inFlight))

	// A run that ended: its steps are not running, nothing to take.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return e.Cancel(ctx, tx, healthy) }))
	res, err = engine.SweepTick(e, true)
	require.NoError(t, err)
	require.Zero(t, res.Steps)

	startWithLease(t, pool, e)
	for name, id := range lost {
		rep := waitRun(t, pool, e, id, 30*time.Second)
		require.Equal(t, engine.StateCompleted, rep.State, "%s: %s", name, rep.Error)
		require.Len(t, listCalls(t, pool, id), 1, name)
		require.Empty(t, rep.Stages[0].Steps[0].UnknownOutcomes, "%s: no claim was open", name)
	}
	rep := waitRun(t, pool, e, inFlight, 30*time.Second)
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
	require.Len(t, rep.Stages[0].Steps[0].UnknownOutcomes, 1, "the open claim's call")
}
