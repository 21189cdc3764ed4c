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
	// MinConns connections are opened at once and kept open, so a burst
	// after the server starts (or fails over) finds them ready.
	MinConns int32
	// Warm has each new connection read the catalog entries of the tables
	// a request touches before it is used (warmQuery).
	Warm bool
	// GenericPlans has every connection run with GenericPlanSettings, as
	// its session's settings: the pool of statements that reach rows by
	// key from a list of IDs, with none of the three extra statements
	// GenericPlans adds to each call. Nothing else may run on it.
	GenericPlans bool
	// ApplicationName is the connections' application_name, unless the
	// database URL sets one: pg_stat_activity and PostgreSQL's log (with
	// log_connections, or %a in log_line_prefix) then tell this pool's
	// sessions from the others' (a lock wait's holder, say).
	ApplicationName string
}

// genericParams are GenericPlanSettings as a connection's settings.
var genericParams = map[string]string{
	"plan_cache_mode": "force_generic_plan", "enable_hashjoin": "off", "enable_mergejoin": "off",
	"max_parallel_workers_per_gather": "0",
}

// warmQuery plans a read of each table on Flow's request path (tasks,
// engine runs and steps, River's jobs, racks, components, BMCs, rules),
// so a new connection's server process loads their catalog entries and
// indexes when it connects. Otherwise the first statements of a burst on
// each fresh connection pay for it: 4 to 10 ms per statement, measured.
const warmQuery = `SELECT FROM task LIMIT 0; SELECT FROM engine_run LIMIT 0; SELECT FROM engine_step LIMIT 0;
SELECT FROM river_job LIMIT 0; SELECT FROM rack LIMIT 0; SELECT FROM component LIMIT 0; SELECT FROM bmc LIMIT 0;
SELECT FROM operation_rule LIMIT 0; SELECT FROM rack_rule_association LIMIT 0`

// Open connects a pool to url and checks the connection with a ping.
func Open(ctx context.Context, url string, cfg PoolConfig) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("db: parse database url: %w", err)
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	pc.MinConns = min(cfg.MinConns, pc.MaxConns)
	Tune(pc)
	if _, set := pc.ConnConfig.RuntimeParams["application_name"]; cfg.ApplicationName != "" && !set {
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.ApplicationName
	}
	if cfg.GenericPlans {
		for k, v := range genericParams {
			pc.ConnConfig.RuntimeParams[k] = v
		}
	}
	if cfg.Warm {
		next := pc.AfterConnect
		pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if err := next(ctx, conn); err != nil {
				return err
			}
			// A failure here (a table renamed by a newer schema, say) costs
			// the warm start only: the connection is good either way.
			_ = conn.PgConn().Exec(ctx, warmQuery).Close()
			return nil
		}
	}
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
// gets a binary codec for github.com/google/uuid.UUID (registerUUID), and
// the pool pings its connections before use for a while after one was
// found lost (guardStale), and connections give up on a server that stops
// answering (tuneDial: a connect timeout, keepalives, a user timeout).
func Tune(pc *pgxpool.Config) {
	tuneDial(pc)
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, ok := pc.ConnConfig.RuntimeParams["jit"]; !ok {
		pc.ConnConfig.RuntimeParams["jit"] = "off"
	}
	pc.AfterConnect = afterConnect(pc.AfterConnect)
	guardStale(pc)
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
