package db_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
)

func TestGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := dbtest.Context(t)
	pool := dbtest.NewPool(t)
	_, err := pool.Exec(ctx, `CREATE TABLE g (id int PRIMARY KEY,
		d int UNIQUE DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	g := db.GenericPlans{Pool: pool}
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM g`).Scan(&n))
		return n
	}

	t.Run("settings are the statement's transaction's only", func(t *testing.T) {
		var mode, hash string
		require.NoError(t, g.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('enable_hashjoin')`).Scan(&mode, &hash))
		require.Equal(t, "force_generic_plan", mode)
		require.Equal(t, "off", hash)
		require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode))
		require.Equal(t, "auto", mode)
	})

	t.Run("a write is committed", func(t *testing.T) {
		tag, err := g.Exec(ctx, `INSERT INTO g (id, d) VALUES (1, 1), (2, 2)`)
		require.NoError(t, err)
		require.EqualValues(t, 2, tag.RowsAffected())
		require.Equal(t, 2, count())
	})

	t.Run("rows", func(t *testing.T) {
		rows, err := g.Query(ctx, `SELECT id FROM g WHERE id = ANY($1::int[]) ORDER BY id`, []int32{1, 2, 3})
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		require.NoError(t, err)
		require.Equal(t, []int32{1, 2}, ids)
		require.ErrorIs(t, g.QueryRow(ctx, `SELECT id FROM g WHERE id = 9`).Scan(new(int32)), pgx.ErrNoRows)
	})

	t.Run("a failed statement writes nothing and leaves the pool usable", func(t *testing.T) {
		_, err := g.Exec(ctx, `INSERT INTO g (id, d) VALUES (3, 3), (1, 4)`)
		require.True(t, db.IsUniqueViolation(err, "g_pkey"), "%v", err)
		require.Equal(t, 2, count())
	})

	t.Run("a failed commit is the call's error", func(t *testing.T) {
		// d's uniqueness is checked at COMMIT, after the statement succeeded.
		_, err := g.Exec(ctx, `INSERT INTO g (id, d) VALUES (5, 1)`)
		require.True(t, db.IsUniqueViolation(err, "g_d_key"), "%v", err)
		rows, err := g.Query(ctx, `INSERT INTO g (id, d) VALUES (6, 2) RETURNING id`)
		require.NoError(t, err)
		for rows.Next() {
		}
		require.True(t, db.IsUniqueViolation(rows.Err(), "g_d_key"), "%v", rows.Err())
		require.Equal(t, 2, count())
	})

	t.Run("a batch is one transaction", func(t *testing.T) {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO g (id, d) VALUES (7, 7)`)
		b.Queue(`SELECT current_setting('plan_cache_mode')`)
		br := g.SendBatch(ctx, b)
		_, err := br.Exec()
		require.NoError(t, err)
		var mode string
		require.NoError(t, br.QueryRow().Scan(&mode))
		require.Equal(t, "force_generic_plan", mode)
		_, err = br.Exec()
		require.Error(t, err, "no third result")
		require.NoError(t, br.Close())
		require.Equal(t, 3, count())

		b = &pgx.Batch{}
		b.Queue(`INSERT INTO g (id, d) VALUES (8, 8)`)
		b.Queue(`INSERT INTO g (id, d) VALUES (7, 9)`)
		br = g.SendBatch(ctx, b)
		_, err = br.Exec()
		require.NoError(t, err)
		_, err = br.Exec()
		require.True(t, db.IsUniqueViolation(err, "g_pkey"), "%v", err)
		require.Error(t, br.Close())
		require.Equal(t, 3, count(), "the batch's first write is rolled back with it")

		// Closed unread: Close still reads the statements and the commit.
		b = &pgx.Batch{}
		b.Queue(`INSERT INTO g (id, d) VALUES (10, 10)`)
		require.NoError(t, g.SendBatch(ctx, b).Close())
		require.Equal(t, 4, count())
	})
}

// TestGenericPlansPool checks that a pool opened with GenericPlans runs
// every statement with GenericPlanSettings, as its sessions' settings.
func TestGenericPlansPool(t *testing.T) {
	t.Parallel()
	ctx := dbtest.Context(t)
	pool, err := db.Open(ctx, dbtest.NewDB(t), db.PoolConfig{MaxConns: 2, GenericPlans: true})
	require.NoError(t, err)
	defer pool.Close()
	var mode, hash, merge, workers, jit string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('enable_hashjoin'),
		current_setting('enable_mergejoin'), current_setting('max_parallel_workers_per_gather'), current_setting('jit')`).Scan(&mode, &hash, &merge, &workers, &jit))
	require.Equal(t, []string{"force_generic_plan", "off", "off", "0", "off"}, []string{mode, hash, merge, workers, jit})
}
