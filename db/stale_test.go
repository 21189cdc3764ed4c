package db_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
)

// TestRestartCostsOneStaleCall: a pool of 8 open connections outlives a
// PostgreSQL restart. Afterwards, the first statement finds its connection
// lost; the pool then pings each connection before use and drops the dead
// ones, so every later statement works. Before, each of the 8 dead
// connections failed one statement in turn.
func TestRestartCostsOneStaleCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, url := dbtest.StartCluster(t, dbtest.RestartableSettings(50))
	const conns = 8
	pool, err := db.Open(ctx, url, db.PoolConfig{MaxConns: conns})
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// Open all 8: hold them at once, then hand them back idle.
	var wg sync.WaitGroup
	hold := make(chan struct{})
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pool.Acquire(ctx)
			if err != nil {
				return
			}
			defer c.Release()
			<-hold
		}()
	}
	require.Eventually(t, func() bool { return pool.Stat().AcquiredConns() == conns }, 30*time.Second, 5*time.Millisecond)
	close(hold)
	wg.Wait()
	require.EqualValues(t, conns, pool.Stat().IdleConns())

	require.NoError(t, cluster.Stop(ctx))
	require.NoError(t, cluster.Start(ctx))

	// Statements one after another, each within a second of the last (so
	// pgx's own ping after a second idle does not hide the dead ones).
	failed := 0
	for range 2 * conns {
		var one int
		if err := pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			require.True(t, db.IsUnavailable(err), "a lost connection is unavailable: %v", err)
			failed++
		}
	}
	t.Logf("statements failed after the restart: %d of %d (pool of %d)", failed, 2*conns, conns)
	require.LessOrEqual(t, failed, 1, "one statement learns the server went away; the pool drops the other dead connections itself")
}
