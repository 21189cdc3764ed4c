package pglocal

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestStandbyFollowsAndIsPromoted: a standby cloned from a primary follows
// it synchronously, refuses writes, and takes them once promoted.
func TestStandbyFollowsAndIsPromoted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := tempBase(t)
	primary, err := New(filepath.Join(base, "primary"), 0)
	require.NoError(t, err)
	require.NoError(t, primary.Init(ctx))
	primary.Settings = map[string]string{"fsync": "off"}
	require.NoError(t, primary.Start(ctx))
	t.Cleanup(func() { _ = primary.Stop(context.Background()) })

	standby, err := New(filepath.Join(base, "standby"), 0)
	require.NoError(t, err)
	require.NoError(t, standby.InitStandby(ctx, primary, "standby1"))
	standby.Settings = map[string]string{"fsync": "off"}
	require.NoError(t, standby.Start(ctx))
	t.Cleanup(func() { _ = standby.Stop(context.Background()) })

	p, err := pgx.Connect(ctx, primary.URL("postgres"))
	require.NoError(t, err)
	defer p.Close(ctx)
	_, err = p.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = 'standby1'`)
	require.NoError(t, err)
	_, err = p.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var st string
		_ = p.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'`).Scan(&st)
		return st == "sync"
	}, 30*time.Second, 50*time.Millisecond)
	_, err = p.Exec(ctx, `CREATE TABLE marker (v int); INSERT INTO marker VALUES (42)`)
	require.NoError(t, err)

	s, err := pgx.Connect(ctx, standby.URL("postgres"))
	require.NoError(t, err)
	defer s.Close(ctx)
	var v int
	require.NoError(t, s.QueryRow(ctx, `SELECT v FROM marker`).Scan(&v), "a synchronous commit is on the standby")
	require.Equal(t, 42, v)
	_, err = s.Exec(ctx, `INSERT INTO marker VALUES (1)`)
	require.ErrorContains(t, err, "read-only")

	require.NoError(t, primary.Stop(ctx))
	require.NoError(t, standby.Promote(ctx))
	_, err = s.Exec(ctx, `INSERT INTO marker VALUES (43)`)
	require.NoError(t, err, "the promoted standby takes writes")
}
