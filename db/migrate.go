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
	"slices"
	"sort"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers the pgx5:// scheme
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
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
	if _, err := pool.Exec(ctx, dropRiverIndexes); err != nil {
		return Status{}, fmt.Errorf("db: drop river's args and metadata indexes: %w", err)
	}
	return ReadStatus(ctx, databaseURL)
}

// dropRiverIndexes drops the GIN indexes River's migrations put on its
// jobs' args and metadata, after every River migration (one of River's
// could bring them back). Nothing of Flow's or River's looks a job up by
// its args or metadata through them (River UI filters jobs by kind, queue,
// state and ID), and every change of a job's state (inserted, fetched,
// completed: each a new row version, the state being indexed) adds its
// args' and metadata's keys to both: half of River's WAL in `flow bench
// --racks 3000`, and the GIN pending-list cleanups that made a completion
// statement take 60–90 ms (docs/bench.md). River's reindexer is told they
// are gone (RiverReindexerIndexes).
const dropRiverIndexes = `DROP INDEX IF EXISTS river_job_args_index, river_job_metadata_index`

// RiverReindexerIndexes are the indexes River's reindexer rebuilds: its
// defaults but the two Migrate drops (dropRiverIndexes).
func RiverReindexerIndexes() []string {
	return slices.DeleteFunc(river.ReindexerIndexNamesDefault(), func(name string) bool {
		return name == "river_job_args_index" || name == "river_job_metadata_index"
	})
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
	h.Write([]byte(dropRiverIndexes))
	return strings.ToLower(hex.EncodeToString(h.Sum(nil))[:12]), nil
}

// FlowVersions returns the versions of Flow's migrations in this binary,
// oldest first.
func FlowVersions() ([]uint, error) {
	seen := map[uint]bool{}
	err := fs.WalkDir(Migrations, "migrations", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var v uint
		if _, err := fmt.Sscanf(d.Name(), "%d_", &v); err == nil {
			seen[v] = true
		}
		return nil
	})
	out := make([]uint, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, err
}

// ErrRollback is wrapped by every refusal of Rollback: nothing was changed.
var ErrRollback = errors.New("db: rollback refused")

// Rollback runs Flow's down migrations, newest first: down to version to
// (which stays applied), or, when to is nil, only the newest applied one.
// River's schema is left as it is. It returns the version before and
// after. It refuses (ErrRollback, nothing changed) a database without
// Flow's schema or with a dirty one, a target that is not one of this
// binary's migrations or not older than the applied version, and undoing
// the first migration (that would drop everything: drop the database
// instead).
func Rollback(databaseURL string, to *uint) (from, now uint, err error) {
	versions, err := FlowVersions()
	if err != nil {
		return 0, 0, err
	}
	m, err := newMigrator(databaseURL)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		srcErr, dbErr := m.Close()
		if cerr := errors.Join(srcErr, dbErr); cerr != nil && err == nil {
			err = fmt.Errorf("db: close migrator: %w", cerr)
		}
	}()
	from, dirty, err := m.Version()
	switch {
	case errors.Is(err, migrate.ErrNilVersion):
		return 0, 0, fmt.Errorf("%w: the database has no Flow schema", ErrRollback)
	case err != nil:
		return 0, 0, fmt.Errorf("db: flow migration version: %w", err)
	case dirty:
		return from, from, fmt.Errorf("%w: migration %d failed half-way (dirty): repair the schema first", ErrRollback, from)
	}
	i := slices.Index(versions, from)
	if i < 0 {
		return from, from, fmt.Errorf("%w: the database is at migration %d, which this binary does not have: roll back with the binary that applied it", ErrRollback, from)
	}
	target := uint(0)
	if i > 0 {
		target = versions[i-1]
	}
	if to != nil {
		target = *to
		if !slices.Contains(versions, target) {
			return from, from, fmt.Errorf("%w: %d is not a migration of this binary (%s)", ErrRollback, target, versionList(versions))
		}
		if target >= from {
			return from, from, fmt.Errorf("%w: the database is at migration %d; a rollback target must be older", ErrRollback, from)
		}
	}
	if target == 0 {
		return from, from, fmt.Errorf("%w: %d is Flow's first migration; undoing it would drop every table (drop the database instead)", ErrRollback, from)
	}
	if err := m.Migrate(target); err != nil {
		return from, from, fmt.Errorf("db: roll back from %d to %d: %w", from, target, err)
	}
	return from, target, nil
}

func versionList(vs []uint) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf("%04d", v)
	}
	return strings.Join(s, ", ")
}
