package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/nicoflow/flow/db"
)

// startupDBWait bounds how long flow serve waits, at start, for a
// database that is unavailable (refusing, restarting, failing over, or a
// standby for now): a replica started or restarted during a failover
// waits for the new primary instead of exiting.
const startupDBWait = 2 * time.Minute

// waitForDatabase runs fn (a start-up step that needs the database) until
// it succeeds, fails for a reason other than the database being
// unavailable for now (db.IsUnavailable: a wrong password, a missing
// database, a bug), or startupDBWait has passed since the first try,
// retrying every 500 ms to 5 s; it logs once when it starts waiting and
// once when the database answers. It returns fn's last error.
func waitForDatabase(ctx context.Context, logger *slog.Logger, step string, fn func() error) error {
	start := time.Now()
	delay := 500 * time.Millisecond
	waited := false
	for {
		err := fn()
		if err == nil {
			if waited {
				logger.InfoContext(ctx, "database available", "step", step, "waited", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		why := db.UnavailableReason(err)
		if why == "" || time.Since(start) > startupDBWait {
			return err
		}
		if !waited {
			logger.WarnContext(ctx, "database unavailable at start, waiting", "step", step, "reason", why, "for_at_most", startupDBWait)
			waited = true
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}
