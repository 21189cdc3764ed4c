package db

import (
	"context"
	"fmt"
	"time"
)

// PruneStat is what one pruning rule (docs/operations.md#sizing-and-retention)
// has done: rows deleted since the database was made, its last cycle, and
// the time of the oldest row it kept (nil: none left).
type PruneStat struct {
	Name       string
	RowsPruned int64
	LastRunAt  time.Time
	OldestKept *time.Time
}

// RecordPrune adds rows to rule name's count of rows pruned and records its
// cycle's time and the oldest row it kept.
func RecordPrune(ctx context.Context, dbtx DBTX, name string, rows int64, oldestKept *time.Time) error {
	_, err := dbtx.Exec(ctx, `INSERT INTO prune_stat (name, rows_pruned, last_run_at, oldest_kept) VALUES ($1, $2, now(), $3)
		ON CONFLICT (name) DO UPDATE SET rows_pruned = prune_stat.rows_pruned + EXCLUDED.rows_pruned,
			last_run_at = EXCLUDED.last_run_at, oldest_kept = EXCLUDED.oldest_kept`, name, rows, oldestKept)
	if err != nil {
		return fmt.Errorf("db: record prune %s: %w", name, err)
	}
	return nil
}

// ReadPruneStats returns every pruning rule's record, by name.
func ReadPruneStats(ctx context.Context, dbtx DBTX) ([]PruneStat, error) {
	rows, err := dbtx.Query(ctx, `SELECT name, rows_pruned, last_run_at, oldest_kept FROM prune_stat ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("db: read prune stats: %w", err)
	}
	defer rows.Close()
	var out []PruneStat
	for rows.Next() {
		var s PruneStat
		if err := rows.Scan(&s.Name, &s.RowsPruned, &s.LastRunAt, &s.OldestKept); err != nil {
			return nil, fmt.Errorf("db: read prune stats: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
