package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/notify"
)

// startAlertmanager runs a real Alertmanager (Debian's
// prometheus-alertmanager, which .ci/run installs) on a free loopback port
// until the test ends and returns its URL.
func startAlertmanager(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus-alertmanager")
	if err != nil {
		bin, err = exec.LookPath("alertmanager")
	}
	require.NoError(t, err, "Alertmanager is not installed: apt-get install -y prometheus-alertmanager (.ci/run does)")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "alertmanager.yml")
	require.NoError(t, os.WriteFile(cfg, []byte("route:\n  receiver: blackhole\nreceivers:\n  - name: blackhole\n"), 0o600))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr,
		"--cluster.listen-address=", "--log.level=warn")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	u := "http://" + addr
	require.Eventually(t, func() bool {
		res, err := http.Get(u + "/-/ready")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond, "alertmanager ready")
	return u
}

// amAlert is what Alertmanager's GET /api/v2/alerts answers.
type amAlert struct {
	Labels map[string]string `json:"labels"`
	Status struct {
		State string `json:"state"`
	} `json:"status"`
	EndsAt time.Time `json:"endsAt"`
}

func getAlerts(t *testing.T, am, alertname string) []amAlert {
	t.Helper()
	res, err := http.Get(am + "/api/v2/alerts?filter=" + url.QueryEscape(fmt.Sprintf("alertname=%q", alertname)))
	require.NoError(t, err)
	defer res.Body.Close()
	var out []amAlert
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return out
}

// TestAlertmanager: an alert raised in a transaction reaches a real
// Alertmanager, is re-sent while it fires, and resolves once its source
// ends; a rolled-back raise sends nothing.
func TestAlertmanager(t *testing.T) {
	t.Parallel()
	am := startAlertmanager(t)
	b := setupWith(t, notify.DeliveryConfig{}, func(c *notify.Config) {
		c.Alertmanager = notify.Alertmanager{URLs: []string{am}, Resend: 300 * time.Millisecond}
	})
	ctx := context.Background()
	raise := func(name, key string) error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return b.svc.RaiseAlert(ctx, tx, notify.Alert{Key: key + "#rule/alert", SourceKey: key,
				Labels:      map[string]string{"alertname": name, "severity": "critical", "rack": "demo-0007", "component": "demo-0007-ct-10"},
				Annotations: map[string]string{"summary": "coolant leak on demo-0007-ct-10"}})
		})
	}
	errBoom := fmt.Errorf("rolled back")
	require.ErrorIs(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		require.NoError(t, b.svc.RaiseAlert(ctx, tx, notify.Alert{Key: "x", SourceKey: "x", Labels: map[string]string{"alertname": "FlowRolledBack"}}))
		return errBoom
	}), errBoom)

	require.NoError(t, raise("FlowLeakDetected", "compute/tray-1/occ-1"))
	require.NoError(t, raise("FlowLeakDetected", "compute/tray-1/occ-1"), "a second raise is the same alert")
	require.Eventually(t, func() bool {
		got := getAlerts(t, am, "FlowLeakDetected")
		return len(got) == 1 && got[0].Status.State == "active"
	}, 20*time.Second, 50*time.Millisecond)
	got := getAlerts(t, am, "FlowLeakDetected")[0]
	require.Equal(t, "demo-0007-ct-10", got.Labels["component"])
	require.Equal(t, "critical", got.Labels["severity"])
	// Re-sent while firing: the endsAt Alertmanager holds moves on.
	first := got.EndsAt
	require.Eventually(t, func() bool {
		a := getAlerts(t, am, "FlowLeakDetected")
		return len(a) == 1 && a[0].EndsAt.After(first)
	}, 10*time.Second, 50*time.Millisecond, "re-sent")

	var n int
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		n, err = b.svc.ResolveAlerts(ctx, tx, "compute/tray-1/occ-1")
		return err
	}))
	require.Equal(t, 1, n)
	require.Eventually(t, func() bool {
		for _, a := range getAlerts(t, am, "FlowLeakDetected") {
			if a.Status.State == "active" && a.EndsAt.After(time.Now()) {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "resolved")
	require.Empty(t, getAlerts(t, am, "FlowRolledBack"))
}
