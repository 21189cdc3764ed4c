package app

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/notify"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// TestNotifyKillBetweenCommitAndDelivery: Flow is killed (SIGKILL) after a
// task's end committed its event and while the receiver holds the request
// unanswered; after a restart the event is delivered again, and a receiver
// that deduplicates on the event ID has it once.
func TestNotifyKillBetweenCommitAndDelivery(t *testing.T) {
	t.Parallel()
	soakOnly(t)
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: time.Millisecond, firmwarePhase: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	dbURL := dbtest.NewDB(t)
	pool := openPool(t, dbURL)
	names, _ := storeDemoRacks(t, pool, inventory.NewService(), sims, 40, 1, seedAsIs)
	key := newKeyFile(t)

	// The receiver: the first request is held unanswered (Flow dies
	// meanwhile); later ones are answered. It deduplicates on the ID.
	var mu sync.Mutex
	var requests int
	seen := map[string]int{}
	got := make(chan struct{}, 1)
	release := make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		require.NoError(t, notify.Verify([]byte("kill-test-secret-0123456789"), r.Header.Get(notify.SignatureHeader), body, time.Now(), notify.ReplayWindow))
		mu.Lock()
		requests++
		n := requests
		seen[r.Header.Get("Flow-Event-Id")]++
		mu.Unlock()
		if n == 1 {
			got <- struct{}{}
			<-release
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)
	t.Cleanup(func() { close(release) })

	start := func() (*serverProcess, string) {
		port, err := pglocal.FreePort()
		require.NoError(t, err)
		url := "http://127.0.0.1:" + itoa(port)
		proc := startServerProcess(t, []string{
			"DATABASE_URL=" + dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port),
			"NICO_CORE_API_URL=" + sims.nicoSrv.URL(), "PSM_API_URL=" + sims.psmSrv.URL(),
			"FLOW_DATA_ENCRYPTION_KEY_PATH=" + key, "FLOW_DEV_MODE=true", "FLOW_LOG_LEVEL=warn",
			"FLOW_NOTIFY_TIMEOUT=1s", "FLOW_NOTIFY_BACKOFF_MIN=100ms",
		})
		waitHealthy(t, url)
		return proc, url
	}
	ctx := context.Background()
	proc, url := start()
	admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, url)
	_, err = admin.CreateWebhook(ctx, &adminv1.CreateWebhookRequest{Url: rcv.URL, EventTypes: []string{string(notify.TaskCompleted)}, Secret: "kill-test-secret-0123456789"})
	require.NoError(t, err)
	_, err = flowv1connect.NewFlowClient(http.DefaultClient, url).PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(names[0])})
	require.NoError(t, err)
	select {
	case <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("the event never reached the receiver")
	}
	proc.kill(t)
	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM notify_delivery`).Scan(&status))
	require.Equal(t, "pending", status, "killed before it recorded the delivery")

	start()
	require.Eventually(t, func() bool {
		var s string
		require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM notify_delivery`).Scan(&s))
		return s == "delivered"
	}, 90*time.Second, 100*time.Millisecond, "delivered after the restart")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 1, "one event, deduplicated by its ID")
	for id, n := range seen {
		require.False(t, strings.TrimSpace(id) == "")
		require.Equal(t, 2, n, "sent again after the restart")
	}
}
