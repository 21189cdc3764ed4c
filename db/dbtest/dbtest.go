// Package dbtest gives every test its own fresh, migrated PostgreSQL database.
//
// The database server comes from TEST_DATABASE_URL when set (any database on
// the server works; dbtest creates its own). Otherwise dbtest starts one
// private cluster from the machine's PostgreSQL binaries in
// $TMPDIR/flow-dbtest-<uid>, shared by every test process of a `go test
// ./...` run; it stops by itself about 30 seconds after the last test process
// exits. Without PostgreSQL, tests fail with a message that says how to get
// it; they never skip.
//
// A template database, named after a hash of the migrations, is migrated once
// (Flow's and River's migrations) and each test gets a clone of it, dropped in
// Cleanup.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/pglocal"
)

var (
	setupOnce sync.Once
	setupErr  error
	adminURL  string // URL of the maintenance database on the test server
	template  string // name of the migrated template database
	cloneSQL  string // CREATE DATABASE suffix (strategy) for clones
	usersLock *pglocal.Lock
)

// NewDB creates a fresh database cloned from the migrated template and
// returns its URL. The database is dropped when the test ends.
func NewDB(t testing.TB) string {
	t.Helper()
	setupOnce.Do(func() { setupErr = setup() })
	if setupErr != nil {
		t.Fatalf("dbtest: %v", setupErr)
	}
	ctx := context.Background()
	name := "flow_test_" + randomHex(8)
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("dbtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s%s`, name, template, cloneSQL)); err != nil {
		t.Fatalf("dbtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Errorf("dbtest: connect for cleanup: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, name)); err != nil {
			t.Errorf("dbtest: drop database: %v", err)
		}
	})
	return withDatabase(adminURL, name)
}

// NewPool returns a pool on a fresh database (see NewDB), closed when the
// test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := NewDB(t)
	pool, err := db.Open(context.Background(), url, db.PoolConfig{MaxConns: 20})
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func setup() error {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		adminURL = u
	} else {
		u, err := startSharedCluster()
		if err != nil {
			return err
		}
		adminURL = u
	}
	return ensureTemplate(context.Background())
}

// startSharedCluster starts (or joins) the run-wide private cluster.
func startSharedCluster() (string, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("flow-dbtest-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	_ = os.Chmod(dir, 0o755)
	startPath := filepath.Join(dir, "start.lock")
	usersPath := filepath.Join(dir, "users.lock")
	for _, p := range []string{startPath, usersPath} {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o666)
		if err != nil {
			return "", err
		}
		f.Close()
		_ = os.Chmod(p, 0o666)
	}
	start, err := pglocal.LockBlocking(startPath)
	if err != nil {
		return "", err
	}
	defer start.Unlock()

	c, err := pglocal.New(filepath.Join(dir, "pgdata"), 0)
	if err != nil {
		return "", err
	}
	ctx := context.Background()
	portFile := filepath.Join(dir, "port")
	if b, err := os.ReadFile(portFile); err == nil && c.Running(ctx) {
		c.Port, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	} else {
		if err := c.Init(ctx); err != nil {
			return "", err
		}
		// Durability is pointless for throwaway test data; speed is not.
		// Every test process of the machine shares the cluster (several
		// flow serve pools each in the app tests): 800 connections leave
		// room for a loaded run (400 ran out when two suites overlapped).
		c.Settings = map[string]string{
			"fsync":                     "off",
			"synchronous_commit":        "off",
			"full_page_writes":          "off",
			"max_connections":           "800",
			"shared_buffers":            "128MB",
			"max_locks_per_transaction": "256",
			"log_min_messages":          "warning",
		}
		if err := c.Start(ctx); err != nil {
			return "", err
		}
		if err := os.WriteFile(portFile, []byte(strconv.Itoa(c.Port)), 0o644); err != nil {
			return "", err
		}
		if err := startWatchdog(c, dir); err != nil {
			return "", err
		}
	}
	// Held until this process exits: the watchdog stops the cluster only
	// when nobody holds it.
	usersLock, err = pglocal.LockShared(usersPath)
	if err != nil {
		return "", err
	}
	return c.URL("postgres"), nil
}

// startWatchdog starts a detached shell that stops the cluster once no test
// process has held users.lock for a while.
func startWatchdog(c *pglocal.Cluster, dir string) error {
	script := fmt.Sprintf(`
idle=0
while sleep 5; do
  if [ ! -d %[1]q ]; then exit 0; fi
  if flock -n -x %[2]q true; then idle=$((idle+5)); else idle=0; fi
  if [ $idle -ge 30 ]; then
    flock -x %[3]q sh -c 'flock -n -x %[2]s true && %[4]q stop -m fast -D %[1]q >/dev/null 2>&1' && exit 0
    idle=0
  fi
done`, c.DataDir, filepath.Join(dir, "users.lock"), filepath.Join(dir, "start.lock"), filepath.Join(c.BinDir, "pg_ctl"))
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if os.Geteuid() == 0 {
		// pg_ctl refuses root; the watchdog runs as the server's user.
		cmd = exec.Command("runuser", "-u", "postgres", "--", "sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start cluster watchdog: %w", err)
	}
	return cmd.Process.Release()
}

func ensureTemplate(ctx context.Context) error {
	hash, err := db.SchemaHash()
	if err != nil {
		return err
	}
	template = "flow_tmpl_" + hash
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to test server: %w", err)
	}
	defer conn.Close(ctx)
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return err
	}
	if version >= 150000 {
		cloneSQL = " STRATEGY FILE_COPY"
	}
	// One process builds the template; the others wait on the lock.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(7254711)`); err != nil {
		return err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(7254711)`) //nolint:errcheck
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, template).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	building := template + "_building"
	if _, err := conn.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, building)); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s`, building)); err != nil {
		return err
	}
	if _, err := db.Migrate(ctx, withDatabase(adminURL, building)); err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	// The rename marks the template complete; a crash before it leaves only
	// the _building copy, which the next run replaces.
	if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s RENAME TO %s`, building, template)); err != nil {
		return fmt.Errorf("finish template: %w", err)
	}
	return nil
}

func withDatabase(rawURL, name string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(errors.New("dbtest: bad TEST_DATABASE_URL: " + err.Error()))
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Context returns a context that is cancelled when the test ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
