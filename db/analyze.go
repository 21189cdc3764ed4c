package db

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Table statistics after a burst.
//
// PostgreSQL plans from the row counts and value statistics ANALYZE last
// took. A table that grew from nothing in seconds (the first burst of
// tasks on a new site, 3,000 racks imported at once) keeps the statistics
// of when it was small until autovacuum's next look at the database
// (autovacuum_naptime, a minute by default). Plans made meanwhile, and
// cached for a connection's life as generic plans (River's fetch; the
// checkpoint's statements, db.GenericPlans), take it for a table of a few
// rows: a nested loop over the whole table for each input row. Measured
// with `flow bench --racks 3000`: River's fetch and completion and the
// engine's checkpoint at 20–90 ms a call instead of 1–6 ms, PostgreSQL
// CPU 80 s instead of 17 s for 3,000 tasks (docs/bench.md). AnalyzeResized
// does what autovacuum would, sooner, for such tables only.

// AnalyzeMinRows is the least number of rows by which a table's size must
// have moved since its last ANALYZE for AnalyzeResized to analyze it
// again.
const AnalyzeMinRows = 1000

// AnalyzedTable is a table AnalyzeResized analyzed: its name, the rows it
// held by its statistics, and the rows it holds now.
type AnalyzedTable struct {
	Name string
	Rows int64
	Now  int64
}

// AnalyzeResized analyzes the tables of the current schema whose size moved
// far from what their statistics say: at least minRows rows more and at
// least double (a burst filled it), or at least minRows rows fewer and at
// most half (a bulk delete). Those are the tables whose plans go wrong;
// rows that change in place (a step's state, a run's counters) leave the
// plans' shapes alone and are autovacuum's to catch up with (at a tenth
// of the table changed, within a minute). Sizes are PostgreSQL's live-row
// counts (pg_stat_user_tables.n_live_tup) against the statistics'
// (pg_class.reltuples). Tables the connection's role may not analyze
// (owned by another role) are left alone. It returns what it analyzed.
//
// It analyzes a table's columns but its payloads and arrays: a json,
// jsonb or bytea column, or any array, is skipped unless a btree index has
// it as a key. ANALYZE records the table's size either way, which is what
// a burst moved, and the scalar keys' statistics are what plans choose
// indexes by. A payload is never filtered on (Flow's own wide columns
// have no statistics at all, migration 0190; River's job args, metadata
// and errors do), and an array's element statistics are fractions of the
// rows, which growth does not move. Those were most of the cost: at 3,000
// racks, ANALYZE of task took 176 ms, 165 of them the elements of
// component_ids; of river_job 248 ms against 70 without its payloads.
// Autovacuum's own ANALYZE, later, still covers every column.
func AnalyzeResized(ctx context.Context, dbtx DBTX, minRows int64) ([]AnalyzedTable, error) {
	rows, err := dbtx.Query(ctx, `SELECT s.schemaname, s.relname, greatest(c.reltuples, 0)::bigint, s.n_live_tup,
			array(SELECT a.attname::text FROM pg_attribute a
				WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
					AND (a.atttypid NOT IN ('json'::regtype, 'jsonb'::regtype, 'bytea'::regtype) AND a.attndims = 0
							AND NOT EXISTS (SELECT FROM pg_type t WHERE t.oid = a.atttypid AND t.typcategory = 'A')
						OR EXISTS (SELECT FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
							WHERE i.indrelid = c.oid AND am.amname = 'btree' AND a.attnum = ANY (i.indkey)))
				ORDER BY a.attnum)
		FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
		WHERE s.schemaname = current_schema() AND pg_has_role(c.relowner, 'USAGE')
			AND ((s.n_live_tup >= 2 * greatest(c.reltuples, 0) AND s.n_live_tup - greatest(c.reltuples, 0) >= $1)
				OR (s.n_live_tup <= c.reltuples / 2 AND c.reltuples - s.n_live_tup >= $1))
		ORDER BY abs(s.n_live_tup - greatest(c.reltuples, 0)) DESC
		LIMIT 16`, minRows)
	if err != nil {
		return nil, fmt.Errorf("db: read table sizes: %w", err)
	}
	type table struct {
		schema  string
		columns []string
		AnalyzedTable
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (t table, err error) {
		err = r.Scan(&t.schema, &t.Name, &t.Rows, &t.Now, &t.columns)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("db: read table sizes: %w", err)
	}
	var done []AnalyzedTable
	for _, t := range tables {
		sql := "ANALYZE " + pgx.Identifier{t.schema, t.Name}.Sanitize()
		if len(t.columns) > 0 {
			cols := make([]string, len(t.columns))
			for i, c := range t.columns {
				cols[i] = pgx.Identifier{c}.Sanitize()
			}
			sql += " (" + strings.Join(cols, ", ") + ")"
		}
		if _, err := dbtx.Exec(ctx, sql); err != nil {
			return done, fmt.Errorf("db: analyze %s: %w", t.Name, err)
		}
		done = append(done, t.AnalyzedTable)
	}
	return done, nil
}
