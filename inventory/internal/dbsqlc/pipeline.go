package dbsqlc

// Written by hand, not by sqlc: generated queries sent together in one
// round trip (a pgx batch) instead of one after the other.

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
)

// ComponentBlockingBatch runs ComponentBlocking once per params, all in
// one round trip, and returns each one's answer in order.
func (q *Queries) ComponentBlockingBatch(ctx context.Context, s db.BatchSender, params []ComponentBlockingParams) (_ [][]uuid.UUID, err error) {
	b := &pgx.Batch{}
	for _, p := range params {
		b.Queue(componentBlocking, p.Op, p.IDs, p.RackScoped)
	}
	out := make([][]uuid.UUID, len(params))
	err = db.RunBatch(ctx, s, b, func(res db.BatchResults) error {
		for i, p := range params {
			if out[i], err = q.ComponentBlocking(ctx, res, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
