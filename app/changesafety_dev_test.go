package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/edge"
)

var (
	bannerDatabase = regexp.MustCompile(`Database\s+(postgres://\S+)`)
	planHashLine   = regexp.MustCompile(`plan hash: ([0-9a-f]{64})`)
	awaitingLine   = regexp.MustCompile(`awaiting approval: request ([0-9a-f-]{36}), plan hash ([0-9a-f]{64})`)
)

// TestDevTwoPersonApproval is issue 43's "done when" on `flow dev --seed
// 20` served with certificates (CERTDIR: two identities told apart) and a
// threshold of 5 racks: a site-wide rollout's dry run writes no row; the
// run is created pending with the plan hash the dry run showed; its
// requester cannot approve it; a second identity approving that hash
// starts it.
func TestDevTwoPersonApproval(t *testing.T) {
	t.Parallel()
	devSlot(t)
	dir, err := os.MkdirTemp("", "flow-dev-approval-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	certs := filepath.Join(dir, "certs")
	require.NoError(t, edge.WriteDevCerts(certs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	r := &devRun{cancel: cancel, done: make(chan error, 1), out: &syncBuffer{}}
	env := map[string]string{"FLOW_LOG_LEVEL": "warn", "CERTDIR": certs, "FLOW_AUTHZ_POLICY": filepath.Join(certs, "policy.yaml"),
		"FLOW_APPROVAL_THRESHOLD": "5", "FLOW_FIRMWARE_POLL_INTERVAL": "200ms"}
	go func() {
		r.done <- run(ctx, []string{"flow", "dev", "--data-dir", filepath.Join(dir, "state"), "--listen", "127.0.0.1:0", "--seed", "20",
			"--sim-phase", "100ms", "--sim-power-delay", "1ms"}, func(k string) string { return env[k] }, r.out, r.out)
	}()
	addr := r.addr(t)
	defer r.stop(t)
	require.Contains(t, r.out.String(), "API        https://"+addr, "certificates make flow dev serve mutual TLS")
	dbm := bannerDatabase.FindStringSubmatch(r.out.String())
	require.NotNil(t, dbm, r.out.String())
	as := func(role string, args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		tls := []string{"flow", "--server", addr, "--ca", filepath.Join(certs, "ca.crt"), "--cert", filepath.Join(certs, role+".crt"), "--key", filepath.Join(certs, role+".key")}
		err := run(ctx, append(tls, args...), func(string) string { return "" }, &stdout, &stderr)
		if err != nil {
			stderr.WriteString(err.Error())
		}
		return stdout.String() + stderr.String(), err
	}
	counts := func() map[string]int64 {
		all := rowCounts(t, dbm[1])
		out := map[string]int64{}
		for _, tb := range []string{"public.operation_run", "public.operation_run_target", "public.approval_request", "public.task"} {
			out[tb] = all[tb]
		}
		return out
	}
	create := []string{"rollout", "create", "--name", "site", "--all", "--version", "2.0", "--max-concurrent", "4", "--gate-count", "1",
		"--seed", "s1", "--ordering-seed", "o1"}

	before := counts()
	out, err := as("operator", append(create, "--dry-run")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "needs approval")
	shown := planHashLine.FindStringSubmatch(out)
	require.NotNil(t, shown, out)
	require.Equal(t, before, counts(), "a dry run writes no row")

	out, err = as("operator", create...)
	require.NoError(t, err, out)
	m := awaitingLine.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	id, hash := m[1], m[2]
	require.Equal(t, shown[1], hash, "the run froze the plan its dry run showed")
	out, err = as("operator", "approval", "list")
	require.NoError(t, err, out)
	require.Contains(t, out, id)

	out, err = as("operator", "approval", "approve", id, "--hash", hash)
	require.Error(t, err)
	require.Contains(t, out, "the requester cannot approve their own request")
	out, err = as("viewer", "approval", "approve", id, "--hash", hash)
	require.Error(t, err, "a viewer cannot approve: %s", out)

	// The second identity names the request by a prefix, as tasks are.
	out, err = as("admin", "approval", "show", id[:8])
	require.NoError(t, err, out)
	require.Contains(t, out, "plan hash: "+hash)
	out, err = as("admin", "approval", "approve", id[:8], "--hash", hash)
	require.NoError(t, err, out)
	require.Contains(t, out, "approved "+id)
	// The run's state, not its message: "13 pending (max 2 concurrent)"
	// stays in a running run's message while its targets wait their turn
	// (a loaded machine's run is slow to get through them).
	require.Eventually(t, func() bool {
		out, err := as("operator", "rollout", "list")
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); err == nil && len(f) > 2 && f[1] == "site" {
				return f[2] != "pending"
			}
		}
		return false
	}, time.Minute, 200*time.Millisecond, "the approved run starts")
}
