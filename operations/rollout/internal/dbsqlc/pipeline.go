package dbsqlc

// Written by hand, not by sqlc: generated queries sent together in one
// round trip (a pgx pipeline) instead of one after the other.

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
)

// OperationRunGetWithPhaseCounts is OperationRunGetByID then
// OperationRunTargetPhaseCounts, sent in one round trip through s.
func (q *Queries) OperationRunGetWithPhaseCounts(ctx context.Context, s db.BatchSender, id uuid.UUID) (_ OperationRun, _ []OperationRunTargetPhaseCountsRow, err error) {
	b := &pgx.Batch{}
	b.Queue(operationRunGetByID, id)
	b.Queue(operationRunTargetPhaseCounts, id)
	var row OperationRun
	var counts []OperationRunTargetPhaseCountsRow
	err = db.RunBatch(ctx, s, b, func(res db.BatchResults) error {
		if row, err = q.OperationRunGetByID(ctx, res, id); err != nil {
			return err
		}
		counts, err = q.OperationRunTargetPhaseCounts(ctx, res, id)
		return err
	})
	if err != nil {
		return OperationRun{}, nil, err
	}
	return row, counts, nil
}
