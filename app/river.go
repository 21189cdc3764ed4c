package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"riverqueue.com/riverui"

	"github.com/nicoflow/flow/engine"
)

// newEngine builds the engine, registers its actions and builds the River
// client that works its jobs. The engine needs the client to insert and
// cancel jobs and the client needs the engine's workers, so the client is
// handed to the engine after both exist. Domains register their actions here
// as they arrive (explicitly, never in init).
func newEngine(pool *pgxpool.Pool, logger *slog.Logger) (*engine.Engine, *river.Client[pgx.Tx], error) {
	e := engine.New(pool, engine.Config{Logger: logger})
	engine.RegisterSleep(e)
	client, err := river.NewClient(riverpgxv5.New(pool), e.RiverConfig())
	if err != nil {
		return nil, nil, fmt.Errorf("river client: %w", err)
	}
	e.SetClient(client)
	return e, client, nil
}

// newRiverUI returns River UI mounted at /riverui/, started with ctx. River
// UI has no authentication of its own: it is mounted only in dev mode or
// when FLOW_RIVERUI_ENABLED is set, behind whatever protects the port.
func newRiverUI(ctx context.Context, client *river.Client[pgx.Tx], logger *slog.Logger) (http.Handler, error) {
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    logger,
		Prefix:    "/riverui",
	})
	if err != nil {
		return nil, fmt.Errorf("river ui: %w", err)
	}
	if err := h.Start(ctx); err != nil {
		return nil, fmt.Errorf("start river ui: %w", err)
	}
	return h, nil
}

// stopRiver stops the River client: running jobs get up to timeout to
// finish, then their contexts are cancelled (a cancelled call is retried by
// whichever process picks the job up next; nothing is lost).
func stopRiver(ctx context.Context, client *river.Client[pgx.Tx], timeout time.Duration, logger *slog.Logger) {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := client.Stop(stopCtx)
	if err == nil {
		return
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		logger.WarnContext(ctx, "river stop", "error", err.Error())
	}
	logger.WarnContext(ctx, "river jobs still running at shutdown timeout, cancelling them")
	hardCtx, cancelHard := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelHard()
	if err := client.StopAndCancel(hardCtx); err != nil {
		logger.WarnContext(ctx, "river stop and cancel", "error", err.Error())
	}
}
