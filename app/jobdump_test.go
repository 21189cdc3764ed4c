package app

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// dumpJobsOnFailure logs the unfinished River jobs (with their steps) and
// the engine leases of the database at url when the test fails.
func dumpJobsOnFailure(t *testing.T, url string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		p, err := pgxpool.New(context.Background(), url)
		if err != nil {
			return
		}
		defer p.Close()
		rows, _ := p.Query(context.Background(), `SELECT j.id, j.kind, j.state, j.attempt, j.attempted_by, j.scheduled_at, j.errors::text, s.state AS step_state, s.job_id AS step_job, s.process_id, s.exec_token, s.deadline_at FROM river_job j LEFT JOIN engine_step s ON s.id = (j.args->>'step_id')::bigint WHERE j.state NOT IN ('completed','cancelled') ORDER BY j.id LIMIT 40`)
		m, _ := pgx.CollectRows(rows, pgx.RowToMap)
		for _, r := range m {
			t.Logf("job %v", r)
		}
		rows, _ = p.Query(context.Background(), `SELECT * FROM engine_process`)
		m, _ = pgx.CollectRows(rows, pgx.RowToMap)
		for _, r := range m {
			t.Logf("lease %v", r)
		}
	})
}
