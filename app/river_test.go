package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/engine"
)

func TestServeRunsEngineAndMountsRiverUI(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		devMode, flag bool
		pprof         bool
		wantUI        bool
	}{
		{name: "DevMode", devMode: true, wantUI: true},
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
			if tt.wantUI {
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
			// Never on the API port: not River UI (whose API pauses the
			// queues of every replica), not the profiler.
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
	_, err = LoadConfig(func(k string) string {
		if k == "FLOW_RIVERUI_ENABLED" {
			return "maybe"
		}
		return ""
	})
	require.ErrorContains(t, err, "FLOW_RIVERUI_ENABLED")
}
