package app

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
)

// idleJobWindow is how long TestIdleDevWritesFewJobs watches an idle flow
// dev.
const idleJobWindow = 60 * time.Second

// TestIdleDevWritesFewJobs starts `flow dev --seed 3`, lets it settle, and
// counts the River job rows it writes in a minute with no schedule and no
// task: its own housekeeping (inventory sync every 10 s, leak detection
// every 5 s, the safety nets, the schedule dispatcher) runs on the leader
// without job rows, so the figure is at most 10 (it was 90 when each
// system cycle was a River job, 60 of them the 1-second schedule tick).
func TestIdleDevWritesFewJobs(t *testing.T) {
	t.Parallel()
	devSlot(t)
	dir, err := os.MkdirTemp("", "flow-dev-idle-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithCancel(context.Background())
	r := &devRun{cancel: cancel, done: make(chan error, 1), out: &syncBuffer{}}
	env := map[string]string{"FLOW_LOG_LEVEL": "warn", "FLOW_ADMIN_LISTEN_ADDR": "127.0.0.1:0"}
	go func() {
		r.done <- run(ctx, []string{"flow", "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--seed", "3"}, func(k string) string { return env[k] }, r.out, r.out)
	}()
	r.addr(t)
	defer r.stop(t)
	m := regexp.MustCompile(`Database\s+(\S+)`).FindStringSubmatch(r.out.String())
	require.NotNil(t, m, r.out.String())
	pool, err := db.Open(ctx, m[1], db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()

	// Let the start settle: the first sync and leak cycles, seeding.
	time.Sleep(15 * time.Second)
	var from int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job`).Scan(&from))
	start := time.Now()
	time.Sleep(idleJobWindow)
	var written int
	var kinds []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), coalesce(array_agg(DISTINCT kind), '{}') FROM river_job WHERE id > $1`, from).Scan(&written, &kinds))
	perMinute := float64(written) / time.Since(start).Minutes()
	t.Logf("idle flow dev --seed 3: %d River job rows in %s (%.1f a minute; kinds %v)", written, time.Since(start).Round(time.Second), perMinute, kinds)
	require.LessOrEqual(t, perMinute, 10.0, "kinds written: %v", kinds)
}
