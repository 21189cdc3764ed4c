// Package db holds Flow's schema migrations, the connection pool, small
// PostgreSQL helpers and (in dbtest) the test database harness.
package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DBTX is what sqlc queries run on: *pgxpool.Pool, *pgx.Conn and pgx.Tx all
// satisfy it. CopyFrom is there for sqlc's :copyfrom queries (bulk inserts).
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}

// PoolConfig tunes Open. Zero values take pgx's defaults.
type PoolConfig struct {
	MaxConns int32
}

// Open connects a pool to url and checks the connection with a ping.
func Open(ctx context.Context, url string, cfg PoolConfig) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("db: parse database url: %w", err)
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	Tune(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("db: open pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("db: connect to %s:%d/%s: %w", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database, err)
	}
	return pool, nil
}

// Tune sets the session settings Flow's connections run with, unless the
// database URL sets them: jit=off, because Flow's statements are short
// OLTP reads and writes, and PostgreSQL's JIT compiles any statement whose
// estimated cost is high (a sync's full listing of one component type)
// for tens of milliseconds it never earns back. Every connection also
// gets a binary codec for github.com/google/uuid.UUID (registerUUID).
func Tune(pc *pgxpool.Config) {
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, ok := pc.ConnConfig.RuntimeParams["jit"]; !ok {
		pc.ConnConfig.RuntimeParams["jit"] = "off"
	}
	pc.AfterConnect = afterConnect(pc.AfterConnect)
}

// PostgreSQL error codes Flow reacts to.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
	codeCheckViolation      = "23514"
)

// IsUniqueViolation reports whether err is a unique-constraint violation,
// optionally of the named constraint (empty matches any).
func IsUniqueViolation(err error, constraint string) bool {
	return isCode(err, codeUniqueViolation, constraint)
}

// IsForeignKeyViolation reports whether err is a foreign-key violation,
// optionally of the named constraint (empty matches any).
func IsForeignKeyViolation(err error, constraint string) bool {
	return isCode(err, codeForeignKeyViolation, constraint)
}

// IsCheckViolation reports whether err is a check-constraint violation,
// optionally of the named constraint (empty matches any).
func IsCheckViolation(err error, constraint string) bool {
	return isCode(err, codeCheckViolation, constraint)
}

func isCode(err error, code, constraint string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != code {
		return false
	}
	return constraint == "" || pgErr.ConstraintName == constraint
}
