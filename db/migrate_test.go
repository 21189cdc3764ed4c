package db_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := dbtest.Context(t)
	url := dbtest.NewDB(t)

	st, err := db.ReadStatus(ctx, url)
	require.NoError(t, err)
	require.True(t, st.UpToDate(), "template is fully migrated: %+v", st)
	require.NotZero(t, st.FlowLatest)
	require.NotZero(t, st.RiverLatest)

	again, err := db.Migrate(ctx, url)
	require.NoError(t, err)
	require.Equal(t, st, again)

	// River's GIN indexes on args and metadata are gone, its others kept,
	// and River's reindexer is told which remain.
	pool, err := db.Open(ctx, url, db.PoolConfig{MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	var indexes []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(indexname::text ORDER BY indexname) FROM pg_indexes
		WHERE tablename = 'river_job' AND schemaname = current_schema()`).Scan(&indexes))
	require.Equal(t, indexes, db.RiverReindexerIndexes())
	require.NotContains(t, indexes, "river_job_args_index")
	require.NotContains(t, indexes, "river_job_metadata_index")
	require.Contains(t, indexes, "river_job_prioritized_fetching_index")
}

func TestSchemaHashIsStable(t *testing.T) {
	t.Parallel()
	a, err := db.SchemaHash()
	require.NoError(t, err)
	b, err := db.SchemaHash()
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Len(t, a, 12)
}

func TestIsUniqueViolation(t *testing.T) {
	t.Parallel()
	ctx := dbtest.Context(t)
	pool := dbtest.NewPool(t)
	_, err := pool.Exec(ctx, `CREATE TABLE u (k text PRIMARY KEY)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO u VALUES ('a')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO u VALUES ('a')`)
	require.True(t, db.IsUniqueViolation(err, ""))
	require.True(t, db.IsUniqueViolation(err, "u_pkey"))
	require.False(t, db.IsUniqueViolation(err, "other"))
	require.False(t, db.IsForeignKeyViolation(err, ""))
}

// TestMigrateConcurrently runs flow db migrate from three processes'
// worth of callers at once on an empty database, as the chart's migrate
// init containers do when two replicas start together: every one succeeds
// and the schema ends current.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := dbtest.Context(t)
	url := dbtest.NewDB(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	st, err := db.ReadStatus(ctx, url)
	require.NoError(t, err)
	require.Zero(t, st.FlowVersion, "the schema was emptied")

	const callers = 3
	errs := make(chan error, callers)
	for range callers {
		go func() {
			_, err := db.Migrate(ctx, url)
			errs <- err
		}()
	}
	for range callers {
		require.NoError(t, <-errs)
	}
	st, err = db.ReadStatus(ctx, url)
	require.NoError(t, err)
	require.True(t, st.UpToDate(), "%+v", st)
}
