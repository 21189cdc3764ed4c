package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// GenericPlanSettings are the SET LOCAL settings of a transaction whose
// statements each reach a few rows by key from a short list: generic plans,
// because planning such a statement afresh costs more than running it
// (PostgreSQL plans each of a prepared statement's first five executions
// on every connection, and every later one whenever a custom plan looks
// cheaper, which a list argument always does); and no hash or merge joins,
// which a generic plan would otherwise pick for a list it guesses long,
// scanning a whole table to join a few rows; and no parallel plans: a
// generic plan that guesses a partial index large (the readiness gate's
// component_blocking_idx, whose predicate PostgreSQL rates at a third of
// the table) would start two parallel workers to read a few rows on every
// call, 24 ms a call at 3,000 racks (the top statement by total time).
const GenericPlanSettings = "SET LOCAL plan_cache_mode = force_generic_plan; " +
	"SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; SET LOCAL max_parallel_workers_per_gather = 0"

// genericSettings is GenericPlanSettings as one statement, for a pipeline
// (the extended protocol takes one statement per message).
const genericSettings = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true), " +
	"set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true), " +
	"set_config('max_parallel_workers_per_gather', '0', true)"

// GenericPlans runs statements on a pool with GenericPlanSettings, each
// call in one round trip: BEGIN, the settings, the statement (or a batch's
// statements) and COMMIT go in one pipeline. It is a DBTX for a generated
// query and a BatchSender for a batch of them. Only for statements that
// reach rows by key or through a small partial index: a statement whose
// best plan depends on its arguments (an optional filter, a listing) must
// not run here.
//
// A statement that fails leaves its transaction aborted, so the pool closes
// the connection instead of reusing it: a cost paid on errors only.
type GenericPlans struct{ Pool *pgxpool.Pool }

var (
	_ DBTX        = GenericPlans{}
	_ BatchSender = GenericPlans{}
)

// SendBatch sends b's statements as one transaction with generic plans.
// The results read are b's own; Close reads the commit's.
func (g GenericPlans) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	w := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+3)}
	w.Queue("BEGIN")
	w.Queue(genericSettings)
	w.QueuedQueries = append(w.QueuedQueries, b.QueuedQueries...)
	w.Queue("COMMIT")
	br := g.Pool.SendBatch(ctx, w)
	r := &genericResults{BatchResults: br, left: len(b.QueuedQueries)}
	if _, err := br.Exec(); err != nil {
		r.err = err
	} else if _, err := br.Exec(); err != nil {
		r.err = err
	}
	return r
}

// genericResults are a GenericPlans batch's results: the prefix already
// read (err its failure), left of the caller's statements unread, then the
// commit.
type genericResults struct {
	pgx.BatchResults
	err    error
	left   int
	closed bool
}

func (r *genericResults) next() error {
	if r.err != nil {
		return r.err
	}
	if r.left == 0 {
		return errors.New("db: no more results in batch")
	}
	r.left--
	return nil
}

func (r *genericResults) Exec() (pgconn.CommandTag, error) {
	if err := r.next(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.BatchResults.Exec()
}

func (r *genericResults) Query() (pgx.Rows, error) {
	if err := r.next(); err != nil {
		return nil, err
	}
	return r.BatchResults.Query()
}

func (r *genericResults) QueryRow() pgx.Row {
	if err := r.next(); err != nil {
		return errRow{err}
	}
	return r.BatchResults.QueryRow()
}

// Close reads what is left (the commit last) and returns the first error:
// a statement's, or the commit's.
func (r *genericResults) Close() error {
	if r.closed {
		return r.err
	}
	r.closed = true
	for ; r.left > 0 && r.err == nil; r.left-- {
		if _, err := r.BatchResults.Exec(); err != nil {
			r.err = err
		}
	}
	if r.err == nil {
		if _, err := r.BatchResults.Exec(); err != nil {
			r.err = fmt.Errorf("db: commit: %w", err)
		}
	}
	if err := r.BatchResults.Close(); r.err == nil {
		r.err = err
	}
	return r.err
}

// Exec runs one statement.
func (g GenericPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := g.SendBatch(ctx, b)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query runs one statement; its rows' Err reports the commit's failure
// too, once they are read to the end.
func (g GenericPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := g.query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// QueryRow runs one statement for one row.
func (g GenericPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := g.query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return genericRow{rows}
}

func (g GenericPlans) query(ctx context.Context, sql string, args ...any) (*genericRows, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := g.SendBatch(ctx, b)
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &genericRows{Rows: rows, br: br}, nil
}

// CopyFrom fails: COPY cannot be part of a pipeline.
func (g GenericPlans) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errors.New("db: COPY cannot run with GenericPlans")
}

// genericRows are one statement's rows; when they end (Next false, or
// Close), the batch is closed, which reads the commit.
type genericRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
	end bool
}

func (r *genericRows) finish() {
	if r.end {
		return
	}
	r.end = true
	r.Rows.Close()
	r.err = r.Rows.Err()
	if cerr := r.br.Close(); r.err == nil {
		r.err = cerr
	}
}

func (r *genericRows) Next() bool {
	if r.end {
		return false
	}
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *genericRows) Close() { r.finish() }

func (r *genericRows) Err() error {
	if r.end {
		return r.err
	}
	return r.Rows.Err()
}

// genericRow is QueryRow's row: the first row of its rows.
type genericRow struct{ rows *genericRows }

func (r genericRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
