package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DeleteEndedRuns deletes, through tx, those of the runs ids that have
// ended, with their steps (retention: the owner of a run deletes it with
// its own record). A run still running is left alone. It returns how many
// runs and steps went.
func (e *Engine) DeleteEndedRuns(ctx context.Context, tx pgx.Tx, ids []int64) (runs, steps int64, err error) {
	if len(ids) == 0 {
		return 0, 0, nil
	}
	row, err := e.q.RunDeleteEnded(ctx, tx, ids)
	if err != nil {
		return 0, 0, fmt.Errorf("engine: delete ended runs: %w", err)
	}
	return row.Runs, row.Steps, nil
}
