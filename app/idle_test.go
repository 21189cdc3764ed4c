package app

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
)

// idleWindow is how long TestIdleDev watches an idle flow dev.
const idleWindow = 60 * time.Second

// TestIdleDev starts `flow dev --seed 3` at its default level (debug for
// Flow's own lines) with FLOW_LOG_FORMAT=json, lets it settle, and watches
// it for one idle minute with no schedule and no task; its subtests check
// what that one minute shows (one flow dev and one minute for both, not
// one each):
//
//   - WritesFewJobs: the River job rows it writes: its own housekeeping
//     (inventory sync every 10 s, leak detection every 5 s, the safety nets,
//     the schedule dispatcher) runs on the leader without job rows, so the
//     figure is at most 10 a minute (it was 90 when each system cycle was a
//     River job, 60 of them the 1-second schedule tick).
//   - IsQuietAndJSONOnRequest: what it logs: fewer than 5 lines in the idle
//     minute, and every line it ever wrote to stderr is a JSON object.
func TestIdleDev(t *testing.T) {
	soakOnly(t)
	t.Parallel()
	// The slot bounds flow dev starts; the idle minute needs none.
	release := devStartSlot(t)
	dir, err := os.MkdirTemp("", "flow-dev-idle-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	env := map[string]string{"FLOW_LOG_FORMAT": "json", "FLOW_ADMIN_LISTEN_ADDR": "127.0.0.1:0"}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"flow", "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--seed", "3"}, func(k string) string { return env[k] }, stdout, stderr)
	}()
	r := &devRun{cancel: cancel, done: done, out: stdout}
	r.addr(t)
	release()
	stopped := false
	defer func() {
		if !stopped {
			r.stop(t)
		}
	}()
	banner := stdout.String()
	m := regexp.MustCompile(`Database\s+(\S+)`).FindStringSubmatch(banner)
	require.NotNil(t, m, banner)
	pool, err := db.Open(ctx, m[1], db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()

	// Let the start settle: migrations, leader election, seeding, the
	// first sync and leak cycles.
	time.Sleep(15 * time.Second)
	var from int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job`).Scan(&from))
	settled := strings.Count(stderr.String(), "\n")
	start := time.Now()
	time.Sleep(idleWindow)
	idle := strings.Split(strings.TrimSpace(stderr.String()), "\n")[settled:]
	var written int
	var kinds []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), coalesce(array_agg(DISTINCT kind), '{}') FROM river_job WHERE id > $1`, from).Scan(&written, &kinds))
	window := time.Since(start)
	pool.Close()
	r.stop(t)
	stopped = true

	t.Run("WritesFewJobs", func(t *testing.T) {
		perMinute := float64(written) / window.Minutes()
		t.Logf("idle flow dev --seed 3: %d River job rows in %s (%.1f a minute; kinds %v)", written, window.Round(time.Second), perMinute, kinds)
		require.LessOrEqual(t, perMinute, 10.0, "kinds written: %v", kinds)
	})
	t.Run("IsQuietAndJSONOnRequest", func(t *testing.T) {
		require.Regexp(t, `Admin\s+http://\S+/riverui/`, banner)
		require.Regexp(t, `http://\S+/metrics`, banner)
		require.Regexp(t, `Simulators http://\S+/admin/`, banner)
		require.Less(t, len(idle), 5, "idle flow dev logged in one minute:\n%s", strings.Join(idle, "\n"))
		for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &v), "not a JSON line: %s", line)
			require.Contains(t, v, "msg")
		}
	})
}
