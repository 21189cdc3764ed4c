package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/schedule"
)

// BenchmarkScheduleBurst fires 10,000 schedules due at the same instant over
// 1,000 racks (ten schedules per rack, each on its own compute tray, so
// their power-on tasks do not conflict) on River's schedule queue, and
// reports the time from due to all 10,000 child tasks written and the
// firings per second. Run it alone: go test -run '^$' -bench ScheduleBurst
// -benchtime 1x ./operations/schedule/
func BenchmarkScheduleBurst(b *testing.B) {
	const racks, perRack = 1000, 10
	ctx := context.Background()
	bundle := setupSchedules(b, nil)
	pool := bundle.pool
	inv := inventory.NewService()
	for i := range racks {
		r := inventory.DemoRack(1000 + i)
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			_, err = inv.CreateRack(ctx, tx, r)
			return err
		}))
	}
	// 10,000 schedules, written directly: one scope entry each, a compute
	// tray of its own.
	_, err := pool.Exec(ctx, `
		WITH trays AS (
			SELECT c.id, c.rack_id, row_number() OVER (PARTITION BY c.rack_id ORDER BY c.name) AS n
			FROM component c JOIN rack r ON r.id = c.rack_id
			WHERE c.type = 'Compute' AND r.name >= 'demo-1000'
		), chosen AS (SELECT id, rack_id, gen_random_uuid() AS sid FROM trays WHERE n <= $1),
		s AS (
			INSERT INTO task_schedule (id, name, spec_type, spec, operation_template, overlap_policy, next_run_at)
			SELECT sid, 'burst-' || sid, 'interval', '24h', '{"type":"power_control","code":"power_on","information":{"operation":1}}', 'skip', now()
			FROM chosen RETURNING id
		)
		INSERT INTO task_schedule_scope (schedule_id, rack_id, component_filter)
		SELECT sid, rack_id, jsonb_build_object('kind', 'components', 'components', jsonb_build_array(id)) FROM chosen`, perRack)
	require.NoError(b, err)
	var n int
	require.NoError(b, pool.QueryRow(ctx, `SELECT count(*) FROM task_schedule`).Scan(&n))
	require.Equal(b, racks*perRack, n)

	// A process that works only the schedule queue: the engine's step jobs
	// stay queued, so the figure is the firing path alone.
	rc := bundle.engine.RiverConfig()
	rc.Queues = map[string]river.QueueConfig{schedule.Queue: {MaxWorkers: 20}}
	river.AddWorker(rc.Workers, &schedule.Worker{Service: bundle.svc})
	rc.FetchPollInterval, rc.FetchCooldown = 20*time.Millisecond, 5*time.Millisecond
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	require.NoError(b, err)
	require.NoError(b, client.Start(ctx))
	defer func() { require.NoError(b, client.Stop(ctx)) }()

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		_, err := pool.Exec(ctx, `UPDATE task_schedule_scope SET last_task_id = NULL`)
		require.NoError(b, err)
		_, err = pool.Exec(ctx, `DELETE FROM task`)
		require.NoError(b, err)
		due := time.Now().Truncate(time.Second).Add(-time.Second)
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `UPDATE task_schedule SET next_run_at = $1, enabled = true RETURNING id`, due)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil {
				return err
			}
			params := make([]river.InsertManyParams, len(ids))
			for j, id := range ids {
				params[j] = river.InsertManyParams{Args: schedule.FireArgs{ScheduleID: id, At: due}}
			}
			_, err = client.InsertManyFastTx(ctx, tx, params)
			return err
		}))
		b.StartTimer()
		start := time.Now()
		for {
			require.NoError(b, pool.QueryRow(ctx, `SELECT count(*) FROM task WHERE trigger_type = 'task_schedule'`).Scan(&n))
			if n == racks*perRack {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		elapsed := time.Since(start)
		b.ReportMetric(elapsed.Seconds(), "s/burst")
		b.ReportMetric(float64(racks*perRack)/elapsed.Seconds(), "firings/s")
	}
}
