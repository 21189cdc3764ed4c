package db

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// BatchSender is what sends a pgx batch: a pool, a connection or a
// transaction.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// RunBatch sends b through s and has read take its results, one per queued
// statement in order (generated queries read them through BatchResults as
// their DBTX). The batch is closed after read: the error is read's, else
// Close's, which reports the batch's first error again.
func RunBatch(ctx context.Context, s BatchSender, b *pgx.Batch, read func(BatchResults) error) (err error) {
	br := s.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	return read(BatchResults{BatchResults: br})
}

// BatchResults hands a generated (sqlc) query the next result of a sent
// pgx batch, as its DBTX: the query's own SQL and arguments were queued
// with the batch, in order, so that many statements cost one round trip.
type BatchResults struct{ pgx.BatchResults }

// Exec returns the next result as a command tag.
func (b BatchResults) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return b.BatchResults.Exec()
}

// Query returns the next result's rows.
func (b BatchResults) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return b.BatchResults.Query()
}

// QueryRow returns the next result's row.
func (b BatchResults) QueryRow(context.Context, string, ...any) pgx.Row {
	return b.BatchResults.QueryRow()
}

// CopyFrom fails: COPY cannot be part of a batch.
func (b BatchResults) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errors.New("db: COPY cannot be part of a batch")
}
