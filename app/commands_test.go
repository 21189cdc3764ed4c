package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

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
