package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

func TestServeRunsEngineAndMountsRiverUI(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		devMode, flag bool
		pprof         bool
		wantUI        bool
	}{
		{name: "DevMode", devMode: true, flag: true, wantUI: true},
		{name: "Enabled", flag: true, wantUI: true, pprof: true},
		{name: "Off", wantUI: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(func(string) string { return "" })
			require.NoError(t, err)
			cfg.DatabaseURL = dbtest.NewDB(t)
			cfg.ListenAddr = "127.0.0.1:0"
			cfg.DevMode, cfg.RiverUIEnabled = tt.devMode, tt.flag
			cfg.ShutdownTimeout = 5 * time.Second
			cfg.AllowInsecure, cfg.AdminAddr, cfg.PProf = true, "127.0.0.1:0", tt.pprof
			logger := slog.New(slog.NewTextHandler(io.Discard, nil))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			srv, err := newServer(ctx, cfg, logger, serveOptions{})
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- srv.run(ctx) }()

			// The engine works: a sleep run started through the server's
			// engine completes on its River client.
			var id engine.RunID
			require.NoError(t, pgx.BeginFunc(ctx, srv.pool, func(tx pgx.Tx) (err error) {
				id, err = srv.engine.Start(ctx, tx, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{
					{Name: "nap", Action: engine.SleepKind, Params: engine.SleepParams{Duration: "10ms"}},
				}}}})
				return err
			}))
			require.Eventually(t, func() bool {
				rep, err := srv.engine.Run(ctx, srv.pool, id)
				require.NoError(t, err)
				return rep.State == engine.StateCompleted
			}, 30*time.Second, 20*time.Millisecond)

			status := func(method, url string) int {
				req, err := http.NewRequest(method, url, nil)
				require.NoError(t, err)
				res, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				res.Body.Close()
				return res.StatusCode
			}
			api, admin := "http://"+srv.Addr().String(), "http://"+srv.AdminAddr()
			require.True(t, edge.IsLoopback(srv.AdminAddr()))
			// River UI: behind the console on the API port when enabled
			// (this server is open: its caller is admin), and on the admin
			// listener in dev mode only.
			if tt.wantUI {
				require.Equal(t, http.StatusOK, status("GET", api+"/ui/jobs/"))
				require.Equal(t, http.StatusOK, status("GET", api+"/ui/jobs/api/queues"))
			} else {
				require.Equal(t, http.StatusNotFound, status("GET", api+"/ui/jobs/"))
			}
			if tt.devMode {
				require.Equal(t, http.StatusOK, status("GET", admin+"/riverui/"))
			} else {
				require.Equal(t, http.StatusNotFound, status("GET", admin+"/riverui/"))
			}
			// The profiler only with FLOW_PPROF=true; the operator
			// endpoints always.
			if tt.pprof {
				require.Equal(t, http.StatusOK, status("GET", admin+"/debug/pprof/"))
			} else {
				require.Equal(t, http.StatusNotFound, status("GET", admin+"/debug/pprof/"))
			}
			require.Equal(t, http.StatusOK, status("GET", admin+"/healthz"))
			require.Equal(t, http.StatusOK, status("GET", admin+"/readyz"))
			require.Equal(t, http.StatusOK, status("GET", admin+"/metrics"))
			require.Equal(t, http.StatusNotFound, status("GET", api+"/metrics"))
			// Never on the API port without the console's authentication:
			// not River UI at /riverui/ (whose API pauses the queues of
			// every replica), not the profiler.
			require.Equal(t, http.StatusNotFound, status("GET", api+"/riverui/"))
			require.Equal(t, http.StatusNotFound, status("PUT", api+"/riverui/api/queues/engine/pause"))
			require.Equal(t, http.StatusNotFound, status("GET", api+"/debug/pprof/"))

			cancel()
			require.NoError(t, <-done)
		})
	}
}

func TestConfigRiverUIEnabled(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(func(k string) string {
		if k == "FLOW_RIVERUI_ENABLED" {
			return "true"
		}
		return ""
	})
	require.NoError(t, err)
	require.True(t, cfg.RiverUIEnabled)
	cfg, err = LoadConfig(func(string) string { return "" })
	require.NoError(t, err)
	require.True(t, cfg.RiverUIEnabled, "on by default (behind the console's authentication)")
	cfg, err = LoadConfig(func(k string) string {
		if k == "FLOW_RIVERUI_ENABLED" {
			return "false"
		}
		return ""
	})
	require.NoError(t, err)
	require.False(t, cfg.RiverUIEnabled)
	_, err = LoadConfig(func(k string) string {
		if k == "FLOW_RIVERUI_ENABLED" {
			return "maybe"
		}
		return ""
	})
	require.ErrorContains(t, err, "FLOW_RIVERUI_ENABLED")
}

// TestHostAllowListRefusesRebinding: a DNS-rebinding page reaches the
// loopback listeners with Host: evil.example. The admin listener (dev
// mode) and the cleartext API answer it 421, River UI's pause through that
// host included, on either, and a cross-origin pause with the right Host
// gets 403; the same pause from a script (no Origin) works.
func TestHostAllowListRefusesRebinding(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(func(string) string { return "" })
	require.NoError(t, err)
	cfg.DatabaseURL = dbtest.NewDB(t)
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.DevMode, cfg.RiverUIEnabled, cfg.AllowInsecure, cfg.AdminAddr = true, true, true, "127.0.0.1:0"
	cfg.ShutdownTimeout = 5 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := newServer(ctx, cfg, slog.New(slog.DiscardHandler), serveOptions{})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	api, admin := "http://"+srv.Addr().String(), "http://"+srv.AdminAddr()

	status := func(method, url, host string, header http.Header) int {
		req, err := http.NewRequest(method, url, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Host = host
		req.Header = header
		if req.Header == nil {
			req.Header = http.Header{}
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	pause := admin + "/riverui/api/queues/" + engine.QueueName + "/pause"
	require.Eventually(t, func() bool { return status("GET", admin+"/readyz", "", nil) == http.StatusOK }, 30*time.Second, 50*time.Millisecond)

	require.Equal(t, http.StatusMisdirectedRequest, status("GET", admin+"/riverui/", "evil.example", nil))
	require.Equal(t, http.StatusMisdirectedRequest, status("GET", admin+"/metrics", "evil.example:80", nil))
	require.Equal(t, http.StatusMisdirectedRequest, status("PUT", pause, "evil.example", http.Header{"Origin": {"http://evil.example"}}))
	require.Equal(t, http.StatusMisdirectedRequest, status("POST", api+flowv1connect.FlowGetListOfRacksProcedure, "evil.example", nil))
	require.Equal(t, http.StatusForbidden, status("PUT", pause, "", http.Header{"Origin": {"http://evil.example"}}))
	require.Equal(t, http.StatusForbidden, status("PUT", pause, "", http.Header{"Sec-Fetch-Site": {"cross-site"}}))
	apiPause := api + "/ui/jobs/api/queues/" + engine.QueueName + "/pause"
	require.Equal(t, http.StatusMisdirectedRequest, status("PUT", apiPause, "evil.example", http.Header{"Origin": {"http://evil.example"}}))
	require.Equal(t, http.StatusForbidden, status("PUT", apiPause, "", http.Header{"Origin": {"http://evil.example"}}))
	require.Equal(t, http.StatusForbidden, status("PUT", apiPause, "", http.Header{"Sec-Fetch-Site": {"cross-site"}}))
	paused := func() bool {
		var at *time.Time
		require.NoError(t, srv.pool.QueryRow(ctx, `SELECT paused_at FROM river_queue WHERE name = $1`, engine.QueueName).Scan(&at))
		return at != nil
	}
	require.False(t, paused(), "a refused pause paused the queue")

	// The right Host, by name or address, is served.
	require.Equal(t, http.StatusOK, status("POST", api+flowv1connect.FlowGetListOfRacksProcedure, "localhost", nil))
	require.Equal(t, http.StatusOK, status("GET", admin+"/riverui/", "localhost", nil))
	require.Less(t, status("PUT", pause, "", nil), 300)
	require.True(t, paused())

	cancel()
	require.NoError(t, <-done)
}
