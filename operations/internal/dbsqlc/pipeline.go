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
	var tasks []Task
	err = db.RunBatch(ctx, tx, b, func(res db.BatchResults) error {
		if err := q.TaskLockRacks(ctx, res, rackKeys); err != nil {
			return err
		}
		tasks, err = q.TaskActiveOnRacks(ctx, res, rackIDs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return tasks, nil
}

// TaskListActiveCounted is TaskListActive then TaskCountActiveAll, sent in
// one round trip through s (db.GenericPlans: both run as generic plans).
func (q *Queries) TaskListActiveCounted(ctx context.Context, s db.BatchSender, arg TaskListActiveParams) (_ []Task, _ int32, err error) {
	b := &pgx.Batch{}
	b.Queue(taskListActive, arg.RowOffset, arg.RowLimit)
	b.Queue(taskCountActiveAll)
	return listCounted(ctx, s, b, func(res db.BatchResults) ([]Task, error) { return q.TaskListActive(ctx, res, arg) },
		func(res db.BatchResults) (int32, error) { return q.TaskCountActiveAll(ctx, res) })
}

// TaskListByRackCounted is TaskListByRack then TaskCountByRack, sent in
// one round trip through s (db.GenericPlans: both run as generic plans).
func (q *Queries) TaskListByRackCounted(ctx context.Context, s db.BatchSender, arg TaskListByRackParams) (_ []Task, _ int32, err error) {
	b := &pgx.Batch{}
	b.Queue(taskListByRack, arg.RackID, arg.RowOffset, arg.RowLimit)
	b.Queue(taskCountByRack, arg.RackID)
	return listCounted(ctx, s, b, func(res db.BatchResults) ([]Task, error) { return q.TaskListByRack(ctx, res, arg) },
		func(res db.BatchResults) (int32, error) { return q.TaskCountByRack(ctx, res, arg.RackID) })
}

// listCounted sends b, a page's statement then its count's, and reads
// them with list and count.
func listCounted(ctx context.Context, s db.BatchSender, b *pgx.Batch,
	list func(db.BatchResults) ([]Task, error), count func(db.BatchResults) (int32, error)) (rows []Task, n int32, err error) {
	err = db.RunBatch(ctx, s, b, func(res db.BatchResults) error {
		if rows, err = list(res); err != nil {
			return err
		}
		n, err = count(res)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return rows, n, nil
}
