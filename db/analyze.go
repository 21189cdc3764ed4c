package db

import (
	"context"
	"fmt"

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
// CPU 80 s instead of 27 s for 3,000 tasks (docs/bench.md). AnalyzeChanged
// does what autovacuum would, sooner, for such tables only.

// AnalyzeMinChanges is the least number of changed rows (inserted,
// updated, deleted) since a table's last ANALYZE for AnalyzeChanged to
// analyze it again.
const AnalyzeMinChanges = 1000

// AnalyzedTable is a table AnalyzeChanged analyzed: its name, the rows it
// held by its statistics before, and the rows changed since they were
// taken.
type AnalyzedTable struct {
	Name    string
	Rows    int64
	Changed int64
}

// AnalyzeChanged analyzes the tables of the current schema whose changes
// since their last ANALYZE (pg_stat_user_tables.n_mod_since_analyze)
// reach both minChanges and the rows they held then: tables that at least
// doubled, emptied or turned over since, whose plans are the ones that go
// wrong. Autovacuum analyzes at a tenth of that, a minute later; this only
// catches up with bursts. Tables the connection's role may not analyze
// (owned by another role) are left alone. It returns what it analyzed.
func AnalyzeChanged(ctx context.Context, dbtx DBTX, minChanges int64) ([]AnalyzedTable, error) {
	rows, err := dbtx.Query(ctx, `SELECT s.schemaname, s.relname, greatest(c.reltuples, 0)::bigint, s.n_mod_since_analyze
		FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
		WHERE s.schemaname = current_schema() AND s.n_mod_since_analyze >= greatest($1, c.reltuples)
			AND pg_has_role(c.relowner, 'USAGE')
		ORDER BY s.n_mod_since_analyze DESC
		LIMIT 16`, minChanges)
	if err != nil {
		return nil, fmt.Errorf("db: read table changes: %w", err)
	}
	type table struct {
		schema string
		AnalyzedTable
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (t table, err error) {
		err = r.Scan(&t.schema, &t.Name, &t.Rows, &t.Changed)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("db: read table changes: %w", err)
	}
	var done []AnalyzedTable
	for _, t := range tables {
		if _, err := dbtx.Exec(ctx, "ANALYZE "+pgx.Identifier{t.schema, t.Name}.Sanitize()); err != nil {
			return done, fmt.Errorf("db: analyze %s: %w", t.Name, err)
		}
		done = append(done, t.AnalyzedTable)
	}
	return done, nil
}
