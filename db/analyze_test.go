package db_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
)

// TestAnalyzeResized shows the failure AnalyzeResized exists for, a
// generic plan cached while its table was small and kept as the table
// grows, and that analyzing the grown table replans it.
func TestAnalyzeResized(t *testing.T) {
	t.Parallel()
	ctx := dbtest.Context(t)
	pool := dbtest.NewPool(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := conn.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`CREATE TABLE burst (id bigint PRIMARY KEY, v int, state text NOT NULL DEFAULT 'running',
		payload jsonb NOT NULL DEFAULT '{"spec": "a step parameters"}', key jsonb NOT NULL DEFAULT '"k"',
		members uuid[] NOT NULL DEFAULT '{}', path text[] NOT NULL DEFAULT '{a,b}')
		WITH (autovacuum_enabled = off)`) // autovacuum's own ANALYZE would replan too, at a moment of its choosing
	exec(`CREATE INDEX burst_key ON burst (key)`)
	exec(`CREATE INDEX burst_members ON burst USING gin (members)`)
	exec(`CREATE INDEX burst_path ON burst (path)`)
	exec(`ANALYZE burst`)                            // as a new database is: analyzed empty
	exec(`SET plan_cache_mode = force_generic_plan`) // as db.GenericPlanSettings
	exec(`SET enable_hashjoin = off`)
	exec(`SET enable_mergejoin = off`)
	exec(`PREPARE probe(bigint[]) AS SELECT b.v FROM burst b JOIN unnest($1) i(id) ON b.id = i.id WHERE b.state = 'running'`)
	plan := func() string {
		t.Helper()
		rows, err := conn.Query(ctx, `EXPLAIN EXECUTE probe('{1,2}')`)
		require.NoError(t, err)
		var lines []string
		for rows.Next() {
			var l string
			require.NoError(t, rows.Scan(&l))
			lines = append(lines, l)
		}
		require.NoError(t, rows.Err())
		return strings.Join(lines, "\n")
	}
	changed := func() []db.AnalyzedTable {
		t.Helper()
		exec(`SELECT pg_stat_force_next_flush()`)
		got, err := db.AnalyzeResized(ctx, conn, db.AnalyzeMinRows)
		require.NoError(t, err)
		var ours []db.AnalyzedTable
		for _, a := range got {
			if a.Name == "burst" {
				ours = append(ours, a)
			}
		}
		return ours
	}

	exec(`INSERT INTO burst SELECT g, g FROM generate_series(1, 10) g`)
	small := plan() // cached now, for a table of no rows
	require.Contains(t, small, "Seq Scan on burst", "the plan of an empty table reads all of it")
	require.Empty(t, changed(), "10 rows more is under the minimum")

	exec(`INSERT INTO burst SELECT g, g FROM generate_series(11, 50000) g`)
	// The cached plan outlives the table's growth, unless something else
	// invalidated it meanwhile: in CI the cluster is shared with tests
	// running DDL, and an overflowing invalidation queue resets every
	// backend's caches, replanning with the table's current size. So the
	// stale plan is logged, not required; the analyze below is what is
	// checked.
	if stale := plan(); stale != small {
		t.Logf("the cached plan was replanned before the analyze (a cache reset):\n%s", stale)
	}

	require.Equal(t, []db.AnalyzedTable{{Name: "burst", Rows: 0, Now: 50000}}, changed())
	grown := plan()
	require.Contains(t, grown, "Index Scan using burst_pkey", "analyzed, the probe goes through the key:\n%s", grown)
	require.NotContains(t, grown, "Seq Scan on burst")
	var analyzed []string
	require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(array_agg(attname::text ORDER BY attname), '{}') FROM pg_stats
		WHERE schemaname = current_schema() AND tablename = 'burst'`).Scan(&analyzed))
	require.Equal(t, []string{"id", "key", "path", "state", "v"}, analyzed,
		"payloads and arrays are left out unless a btree index has them as a key")

	require.Empty(t, changed(), "nothing changed since")
	exec(`UPDATE burst SET v = v + 1`)
	exec(`INSERT INTO burst SELECT g, g FROM generate_series(50001, 90000) g`)
	require.Empty(t, changed(), "every row changed in place and 80% more: autovacuum's to see")
	exec(`DELETE FROM burst WHERE id > 20000`)
	require.Equal(t, []db.AnalyzedTable{{Name: "burst", Rows: 50000, Now: 20000}}, changed(), "emptied to under half")
}
