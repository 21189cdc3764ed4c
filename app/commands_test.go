package app

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
)

// cliBundle runs flow commands with env as the environment (the client
// commands are tested in package cli).
type cliBundle struct {
	env map[string]string
}

// flow runs `flow args...` and returns stdout, stderr and the error.
func (b *cliBundle) flow(args ...string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), append([]string{"flow"}, args...), func(k string) string { return b.env[k] }, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// mustFlow runs flow and returns its trimmed stdout, failing on error.
func (b *cliBundle) mustFlow(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := b.flow(args...)
	require.NoError(t, err, "flow %s: %s", strings.Join(args, " "), stderr)
	return strings.TrimSpace(out)
}

func ptr[T any](v T) *T { return &v }

// writeFile writes body to a file named name in a fresh temporary folder
// and returns its path.
func writeFile(t testing.TB, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func TestServerCommandsHelp(t *testing.T) {
	t.Parallel()
	b := &cliBundle{env: map[string]string{}}
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}, {"dev", "--help"}, {"db", "--help"}, {"db", "status", "--help"},
		{"simulate", "--help"}, {"simulate", "fault", "--help"}, {"bench", "--help"}, {"key", "--help"}, {"config", "--help"}, {"version", "--help"}} {
		out, errOut, err := b.flow(args...)
		require.NoError(t, err, "%v", args)
		require.Contains(t, out, "Usage:", "%v", args)
		require.Empty(t, errOut, "%v", args)
	}
	out := b.mustFlow(t, "--help")
	require.Contains(t, out, "Server commands:")
	require.Contains(t, out, "Client commands")
	_, _, err := b.flow("serve", "--listen")
	require.ErrorContains(t, err, "flag needs an argument: --listen\nRun 'flow serve --help' for usage.")
	require.Equal(t, 2, ExitCode(err))
	_, _, err = b.flow("db", "status", "extra")
	require.Equal(t, 2, ExitCode(err))
	require.Equal(t, b.mustFlow(t, "version"), b.mustFlow(t, "--version"))
}

func TestDBStatusExitCode(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDB(t)
	b := &cliBundle{env: map[string]string{"DATABASE_URL": url}}
	out := b.mustFlow(t, "db", "status")
	require.Contains(t, out, "status    up to date")

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "UPDATE flow_schema_migrations SET version = version - 1")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	stdout, _, err := b.flow("db", "status")
	require.ErrorIs(t, err, errSchemaBehind)
	require.Equal(t, 1, ExitCode(err))
	require.Contains(t, stdout, "status    behind: run `flow db migrate`")
}

// TestDBStatusSampleInOperationsDoc keeps docs/operations.md's sample of
// flow db status in step with what it prints on a current schema (all but
// the database line, which names the doc's own server).
func TestDBStatusSampleInOperationsDoc(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	b := &cliBundle{env: map[string]string{"DATABASE_URL": dbtest.NewDB(t)}}
	out := b.mustFlow(t, "db", "status")
	lines := strings.Split(out, "\n")
	require.Len(t, lines, 6, out)
	require.True(t, strings.HasPrefix(lines[0], "database  postgres://"), out)
	require.Contains(t, string(doc), "   database  postgres://flow:xxxxx@db:5432/flow?sslmode=prefer\n")
	for _, line := range lines[1:] {
		require.Contains(t, string(doc), "   "+line+"\n", "docs/operations.md's flow db status sample")
	}
}

func TestConfigShowsValuesInEffect(t *testing.T) {
	t.Parallel()
	b := &cliBundle{env: map[string]string{"DATABASE_URL": "postgres://flow:s3cret@db:5432/flow", "DB_PASSWORD": "hunter2", "FLOW_LOG_LEVEL": "debug"}}
	out := b.mustFlow(t, "config")
	require.Regexp(t, `^VARIABLE\s+VALUE\s+DEFAULT\s+MEANING\n`, out)
	require.Regexp(t, `\nFLOW_LOG_LEVEL\s+debug\s+info\s`, out)
	require.Regexp(t, `\nFLOW_LOG_FORMAT\s+json \(default\)\s+json\s`, out)
	require.Regexp(t, `\nDATABASE_URL\s+postgres://flow:xxxxx@db:5432/flow\s`, out)
	require.Regexp(t, `\nDB_PASSWORD\s+xxxxx\s`, out)
	require.NotContains(t, out, "s3cret")
	require.NotContains(t, out, "hunter2")
}

// TestDBMigrateRollback: flow db migrate --rollback (upstream's surface,
// numbered targets) undoes the newest migration or every migration newer
// than a version, refuses while tasks are active unless forced, refuses bad
// targets changing nothing, and flow db migrate goes forward again.
func TestDBMigrateRollback(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDB(t)
	b := &cliBundle{env: map[string]string{"DATABASE_URL": url}}
	ctx := context.Background()
	versions, err := db.FlowVersions()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(versions), 4)
	latest, prev := versions[len(versions)-1], versions[len(versions)-2]
	flowVersion := func() uint {
		st, err := db.ReadStatus(ctx, url)
		require.NoError(t, err)
		require.False(t, st.FlowDirty)
		return st.FlowVersion
	}
	require.Equal(t, latest, flowVersion())

	// Bad targets: usage errors, nothing changed.
	for _, tt := range []struct{ target, want string }{
		{"2026-09-28T00:00:00", "upstream's migrations are named by time, Flow's by number"},
		{"yesterday", `--rollback "yesterday": want last, or a migration version`},
		{"", "--rollback needs a target"},
	} {
		_, _, err := b.flow("db", "migrate", "--rollback", tt.target)
		require.ErrorContains(t, err, tt.want)
		require.Equal(t, 2, ExitCode(err))
	}
	_, _, err = b.flow("db", "migrate", "--force")
	require.Equal(t, 2, ExitCode(err))
	for _, tt := range []struct{ target, want string }{
		{strconv.Itoa(int(latest)), "a rollback target must be older"},
		{strconv.Itoa(int(latest) + 1), "is not a migration of this binary"},
	} {
		_, _, err := b.flow("db", "migrate", "-r", tt.target)
		require.ErrorIs(t, err, db.ErrRollback)
		require.ErrorContains(t, err, tt.want)
		require.Equal(t, 1, ExitCode(err))
	}
	require.Equal(t, latest, flowVersion())

	// An active task blocks it, unless forced.
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	rack := uuid.New()
	_, err = conn.Exec(ctx, `INSERT INTO rack (id, name, manufacturer, serial_number) VALUES ($1, 'rb', 'M', 'RB1')`, rack)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO task (operation_type, operation_code, rack_id, components, component_ids, targets, rule, status, queue_expires_at)
		VALUES ('power_control', 'power_on', $1, '{}', '{}', '[]', '{}', 'waiting', now() + interval '1 hour')`, rack)
	require.NoError(t, err)
	_, _, err = b.flow("db", "migrate", "--rollback", "last")
	require.ErrorContains(t, err, "1 task(s) are waiting, pending or running")
	require.Equal(t, 1, ExitCode(err))
	require.Equal(t, latest, flowVersion(), "refused: nothing changed")
	out := b.mustFlow(t, "db", "migrate", "--rollback", "last", "--force")
	require.Contains(t, out, fmt.Sprintf("flow      %d (rolled back from %d; latest %d)", prev, latest, latest))
	require.Equal(t, prev, flowVersion())
	// flow serve refuses the older schema; status says behind.
	_, _, err = b.flow("db", "status")
	require.ErrorIs(t, err, errSchemaBehind)

	// To a version: every newer migration is undone.
	_, err = conn.Exec(ctx, `UPDATE task SET status = 'terminated', queue_expires_at = NULL`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	mid := versions[len(versions)-4]
	out = b.mustFlow(t, "db", "migrate", "--rollback", strconv.Itoa(int(mid)))
	require.Contains(t, out, fmt.Sprintf("flow      %d (rolled back from %d;", mid, prev))
	require.Equal(t, mid, flowVersion())

	// Forward again, with the data kept.
	b.mustFlow(t, "db", "migrate")
	require.Equal(t, latest, flowVersion())
	conn, err = pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM rack WHERE id = $1`, rack).Scan(&n))
	require.Equal(t, 1, n)

	// The first migration is never undone.
	_, _, err = b.flow("db", "migrate", "--rollback", strconv.Itoa(int(versions[0])))
	require.NoError(t, err, "to the first migration is allowed")
	require.Equal(t, versions[0], flowVersion())
	_, _, err = b.flow("db", "migrate", "--rollback", "last")
	require.ErrorContains(t, err, "undoing it would drop every table")
	require.Equal(t, versions[0], flowVersion())
	b.mustFlow(t, "db", "migrate")
	require.Equal(t, latest, flowVersion())
}
