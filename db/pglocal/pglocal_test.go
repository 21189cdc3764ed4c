package pglocal

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestFindBinDirWithoutPostgres(t *testing.T) {
	// Not parallel: it changes PATH and the package's search glob.
	t.Setenv("PATH", t.TempDir())
	old := distroBinGlob
	distroBinGlob = filepath.Join(t.TempDir(), "*", "bin")
	t.Cleanup(func() { distroBinGlob = old })

	_, err := FindBinDir()
	require.ErrorIs(t, err, ErrNoBinaries)
	require.Contains(t, err.Error(), "apt-get install postgresql")
}

func TestFindBinDirPrefersNewestDistroVersion(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"13", "16", "9.6"} {
		dir := filepath.Join(root, v, "bin")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, n := range []string{"initdb", "pg_ctl", "postgres"} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, n), nil, 0o755))
		}
	}
	t.Setenv("PATH", t.TempDir())
	old := distroBinGlob
	distroBinGlob = filepath.Join(root, "*", "bin")
	t.Cleanup(func() { distroBinGlob = old })

	dir, err := FindBinDir()
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "16", "bin"), dir)
}

func TestLockExclusiveNamesTheHolder(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	l, err := LockExclusive(path)
	require.NoError(t, err)
	_, err = LockExclusive(path)
	require.ErrorIs(t, err, ErrLocked)
	require.Contains(t, err.Error(), "held by pid")
	require.NoError(t, l.Unlock())
	l2, err := LockExclusive(path)
	require.NoError(t, err)
	require.NoError(t, l2.Unlock())
}

func TestClusterLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, err := os.MkdirTemp("", "pglocal-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })

	c, err := New(filepath.Join(base, "data"), 0)
	require.NoError(t, err)
	require.False(t, c.Initialized())
	require.NoError(t, c.Init(ctx))
	require.True(t, c.Initialized())
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	require.True(t, c.Running(ctx))

	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TABLE marker (v int); INSERT INTO marker VALUES (42)`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	require.NoError(t, c.Stop(ctx))
	require.False(t, c.Running(ctx))

	// A restart finds the data again.
	require.NoError(t, c.Init(ctx)) // no-op on an existing cluster
	require.NoError(t, c.Start(ctx))
	conn, err = pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v int
	require.NoError(t, conn.QueryRow(ctx, `SELECT v FROM marker`).Scan(&v))
	require.Equal(t, 42, v)
}

func TestUnreachableDataDirIsExplained(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		// Only root hands the folder to another user; as any other user the
		// server runs as ourselves and can always reach our folders.
		c, err := New(t.TempDir(), 0)
		require.NoError(t, err)
		require.Nil(t, c.cred)
		return
	}
	private := t.TempDir() // mode 0700, owned by root
	require.False(t, ServerUserCanReach(filepath.Join(private, "data")))
	c, err := New(filepath.Join(private, "data"), 0)
	require.NoError(t, err)
	err = c.Init(context.Background())
	require.Error(t, err)
	require.Contains(t, err.Error(), "cannot enter")
}
