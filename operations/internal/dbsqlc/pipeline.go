package dbsqlc

// Written by hand, not by sqlc: generated queries sent together in one
// round trip (a pgx pipeline) instead of one after the other.

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
)

// TaskLockRackThenActive is TaskLockRack then TaskActiveOnRack, sent in one
// round trip. PostgreSQL runs a pipeline's statements in order, each with
// its own snapshot, so the read still sees every task committed before the
// lock was granted, as when the two are sent one after the other.
func (q *Queries) TaskLockRackThenActive(ctx context.Context, tx pgx.Tx, rackKey string, rackID uuid.UUID) (_ []Task, err error) {
	b := &pgx.Batch{}
	b.Queue(taskLockRack, rackKey)
	b.Queue(taskActiveOnRack, rackID)
	br := tx.SendBatch(ctx, b)
	defer func() {
		// Close reports the batch's first error again: keep the one the
		// failing query returned, else Close's own.
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	res := db.BatchResults{BatchResults: br}
	if err := q.TaskLockRack(ctx, res, rackKey); err != nil {
		return nil, err
	}
	return q.TaskActiveOnRack(ctx, res, rackID)
}

// TaskLockRacksThenActive is TaskLockRacks then TaskActiveOnRacks, sent
// in one round trip, as TaskLockRackThenActive is for one rack.
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
