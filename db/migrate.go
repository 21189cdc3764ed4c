package db

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers the pgx5:// scheme
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// Migrations holds Flow's SQL migrations (golang-migrate layout:
// NNNN_name.up.sql / NNNN_name.down.sql).
//
//go:embed migrations/*.sql
var Migrations embed.FS

// Status is the schema state of a database.
type Status struct {
	FlowVersion  uint // last applied Flow migration; 0 when none
	FlowDirty    bool // a Flow migration failed half-way and needs attention
	FlowLatest   uint // newest Flow migration in this binary
	RiverVersion int  // last applied River migration; 0 when none
	RiverLatest  int  // newest River migration in this binary
}

// migrateLockKey names the session advisory lock Migrate holds: callers on
// one database take turns (hashtextextended of this text).
const migrateLockKey = "flow db migrate"

// Migrate applies Flow's migrations, then River's. It is idempotent, and
// safe to call from several processes at once (two replicas starting
// together): they take turns under a session advisory lock, because
// golang-migrate locks only its own half and River's migrator not at all
// (two River migrations at once fail on a duplicate type).
func Migrate(ctx context.Context, databaseURL string) (Status, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return Status{}, fmt.Errorf("db: connect to migrate: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, migrateLockKey); err != nil {
		return Status{}, fmt.Errorf("db: take the migration lock: %w", err)
	}
	// Closing the connection releases the lock too; unlocking first lets
	// the next caller in without waiting for the session to end.
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, migrateLockKey) //nolint:errcheck
	return migrateLocked(ctx, databaseURL)
}

// migrateLocked is Migrate under the migration lock.
func migrateLocked(ctx context.Context, databaseURL string) (Status, error) {
	m, err := newMigrator(databaseURL)
	if err != nil {
		return Status{}, err
	}
	err = m.Up()
	srcErr, dbErr := m.Close()
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return Status{}, fmt.Errorf("db: flow migrations: %w", err)
	}
	if err := errors.Join(srcErr, dbErr); err != nil {
		return Status{}, fmt.Errorf("db: close migrator: %w", err)
	}
	pool, err := Open(ctx, databaseURL, PoolConfig{MaxConns: 2})
	if err != nil {
		return Status{}, err
	}
	defer pool.Close()
	rm, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return Status{}, err
	}
	if _, err := rm.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return Status{}, fmt.Errorf("db: river migrations: %w", err)
	}
	return ReadStatus(ctx, databaseURL)
}

// ReadStatus reports which Flow and River migrations databaseURL has.
func ReadStatus(ctx context.Context, databaseURL string) (Status, error) {
	var st Status
	latest, err := latestFlowVersion()
	if err != nil {
		return st, err
	}
	st.FlowLatest = latest
	m, err := newMigrator(databaseURL)
	if err != nil {
		return st, err
	}
	v, dirty, err := m.Version()
	_, _ = m.Close()
	if err != nil && !errors.Is(err, migrate.ErrNilVersion) {
		return st, fmt.Errorf("db: flow migration version: %w", err)
	}
	st.FlowVersion, st.FlowDirty = v, dirty

	pool, err := Open(ctx, databaseURL, PoolConfig{MaxConns: 2})
	if err != nil {
		return st, err
	}
	defer pool.Close()
	rm, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return st, err
	}
	all := rm.AllVersions()
	if len(all) > 0 {
		st.RiverLatest = all[len(all)-1].Version
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('river_migration') IS NOT NULL`).Scan(&exists); err != nil {
		return st, fmt.Errorf("db: river migration table: %w", err)
	}
	if exists {
		applied, err := rm.ExistingVersions(ctx)
		if err != nil {
			return st, fmt.Errorf("db: river migration version: %w", err)
		}
		if len(applied) > 0 {
			st.RiverVersion = applied[len(applied)-1].Version
		}
	}
	return st, nil
}

// UpToDate reports whether both schemas are at the newest version this binary
// knows.
func (s Status) UpToDate() bool {
	return !s.FlowDirty && s.FlowVersion == s.FlowLatest && s.RiverVersion == s.RiverLatest
}

func newMigrator(databaseURL string) (*migrate.Migrate, error) {
	src, err := iofs.New(Migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("db: read embedded migrations: %w", err)
	}
	u, err := migrateURL(databaseURL)
	if err != nil {
		return nil, err
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, u)
	if err != nil {
		return nil, fmt.Errorf("db: open migrator: %w", err)
	}
	return m, nil
}

// migrateURL turns a postgres:// URL into golang-migrate's pgx5:// form, with
// Flow's own version table.
func migrateURL(databaseURL string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", fmt.Errorf("db: parse database url: %w", err)
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		u.Scheme = "pgx5"
	default:
		return "", fmt.Errorf("db: database url must start with postgres:// (got %q)", u.Scheme+"://")
	}
	q := u.Query()
	q.Set("x-migrations-table", "flow_schema_migrations")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func latestFlowVersion() (uint, error) {
	var latest uint
	err := fs.WalkDir(Migrations, "migrations", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var v uint
		if _, err := fmt.Sscanf(d.Name(), "%d_", &v); err == nil && v > latest {
			latest = v
		}
		return nil
	})
	return latest, err
}

// SchemaHash returns a short hash of every Flow migration and of River's
// migrations, so a test template can be reused exactly while the schema is
// unchanged.
func SchemaHash() (string, error) {
	h := sha256.New()
	var names []string
	if err := fs.WalkDir(Migrations, "migrations", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, path)
		}
		return err
	}); err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := Migrations.ReadFile(n)
		if err != nil {
			return "", err
		}
		h.Write([]byte(n))
		h.Write(b)
	}
	rm, err := rivermigrate.New(riverpgxv5.New((*pgxpool.Pool)(nil)), nil)
	if err != nil {
		return "", err
	}
	for _, m := range rm.AllVersions() {
		h.Write([]byte(m.Name))
		h.Write([]byte(m.SQLUp))
	}
	return strings.ToLower(hex.EncodeToString(h.Sum(nil))[:12]), nil
}
