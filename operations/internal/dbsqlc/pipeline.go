package dbsqlc

// Written by hand, not by sqlc: generated queries sent together in one
// round trip (a pgx pipeline) instead of one after the other.

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
)

// TaskLockRacksThenActive is TaskLockRacks then TaskActiveOnRacks, sent in
// one round trip. PostgreSQL runs a pipeline's statements in order, each
// with its own snapshot, so the read still sees every task committed
// before the last lock was granted, as when the two are sent one after
// the other.
func (q *Queries) TaskLockRacksThenActive(ctx context.Context, tx pgx.Tx, rackKeys []string, rackIDs []uuid.UUID) (_ []Task, err error) {
	b := &pgx.Batch{}
	b.Queue(taskLockRacks, rackKeys)
	b.Queue(taskActiveOnRacks, rackIDs)
	br := tx.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	res := db.BatchResults{BatchResults: br}
	if err := q.TaskLockRacks(ctx, res, rackKeys); err != nil {
		return nil, err
	}
	return q.TaskActiveOnRacks(ctx, res, rackIDs)
}
