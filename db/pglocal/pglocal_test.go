package pglocal

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/proctest"
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
	// Not parallel: a process forked meanwhile by another test (pg_ctl,
	// postgres) shares the lock's descriptor until it execs, which may
	// keep the lock held for an instant after Unlock.
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

// tempBase returns a new folder that the postgres user can enter (a
// cluster's folder goes under it), removed when the test ends.
func tempBase(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "pglocal-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(base, 0o755))
	t.Cleanup(func() { os.RemoveAll(base) })
	return base
}

func TestClusterLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := tempBase(t)

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

// TestMain lets TestAttachedServerStopsWithAKilledParent re-run this binary
// as a process that starts an attached cluster and waits to be killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("PGLOCAL_TEST_ATTACHED"); dir != "" {
		c, err := New(dir, 0)
		if err == nil {
			c.Attached = true
			if err = c.Init(context.Background()); err == nil {
				err = c.Start(context.Background())
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("port %d\n", c.Port)
		select {}
	}
	os.Exit(m.Run())
}

// TestAttachedServerStopsWithAKilledParent: an attached server stops when
// the process that started it is killed with SIGKILL, and the next Start
// on the same folder finds the data again.
func TestAttachedServerStopsWithAKilledParent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := tempBase(t)
	dir := filepath.Join(base, "data")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PGLOCAL_TEST_ATTACHED="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var port int
	_, err = fmt.Fscanf(out, "port %d\n", &port)
	require.NoError(t, err, "the child did not start its server")

	c, err := New(dir, port)
	require.NoError(t, err)
	pid := c.PID()
	require.NotZero(t, pid)
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TABLE marker (v int); INSERT INTO marker VALUES (7)`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 10*time.Second, 50*time.Millisecond,
		"the postmaster (pid %d) outlived the process that started it", pid)
	require.False(t, c.Running(ctx))

	c, err = New(dir, 0)
	require.NoError(t, err)
	c.Attached = true
	require.NoError(t, c.Init(ctx))
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	conn, err = pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v int
	require.NoError(t, conn.QueryRow(ctx, `SELECT v FROM marker`).Scan(&v))
	require.Equal(t, 7, v)

	// Stop shuts it down cleanly and reaps it.
	pid = c.PID()
	require.NoError(t, c.Stop(ctx))
	require.False(t, proctest.Alive(pid))
	require.False(t, c.Running(ctx))
}

// TestStartPicksAnotherPortWhenItsChoiceIsTaken: a port Start chose itself
// that another process takes before the server binds it is not an error;
// Start picks another.
func TestStartPicksAnotherPortWhenItsChoiceIsTaken(t *testing.T) {
	// Not parallel: it replaces the package's freePort.
	ctx := context.Background()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	calls := 0
	freePort = func() (int, error) {
		calls++
		if calls == 1 {
			return takenPort, nil
		}
		return FreePort()
	}
	t.Cleanup(func() { freePort = FreePort })

	base := tempBase(t)
	for _, attached := range []bool{true, false} {
		calls = 0
		c, err := New(filepath.Join(base, fmt.Sprint("data-", attached)), 0)
		require.NoError(t, err)
		c.Attached = attached
		require.NoError(t, c.Init(ctx))
		require.NoError(t, c.Start(ctx))
		require.Equal(t, 2, calls)
		require.NotEqual(t, takenPort, c.Port)
		require.NoError(t, c.Stop(ctx))

		// A port the caller chose is the caller's: taken, Start fails,
		// saying so.
		c.Port = takenPort
		err = c.Start(ctx)
		require.ErrorIs(t, err, errPortTaken)
		require.ErrorContains(t, err, "Address already in use")
	}
}
