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
	br := s.SendBatch(ctx, b)
	defer func() {
		// Close reports the batch's first error again: keep the one the
		// failing query returned, else Close's own.
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	res := db.BatchResults{BatchResults: br}
	out := make([][]uuid.UUID, len(params))
	for i, p := range params {
		if out[i], err = q.ComponentBlocking(ctx, res, p); err != nil {
			return nil, err
		}
	}
	return out, nil
}
