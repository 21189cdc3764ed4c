package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/nicoflow/flow/db"
)

// Outcomes kept through a database blip (docs/engine.md).
//
// Once an action has answered, its outcome is the only record of what the
// backend did. The write that records it (the step's checkpoint, a batch
// advance, a failed call, a poll) can fail because the database is
// restarting or failing over; returning that error would let River retry
// the job, and the retry would call the backend again (issue 28's D2: a
// second reset of a tray). Instead the execution keeps the outcome and
// retries the write, still fenced by its token, until it commits, the
// token no longer matches (another process took the step over after this
// one's lease expired: the outcome is unknown to it, and its claim records
// so), or the process stops. Losing the lease does not end the wait: the
// token alone decides whether the outcome may still be recorded, and this
// process never sweeps its own steps, so after an outage longer than the
// lease a lone process still records what its calls did instead of
// calling again.

const (
	keepFirstWait = 50 * time.Millisecond
	keepMaxWait   = 2 * time.Second
	// keepAttemptTimeout bounds each write, the first and every retry: a
	// server that accepts connections but does not answer is not waited on
	// forever.
	keepAttemptTimeout = stmtTimeout
)

// keepOutcome runs write, the write that records a call's outcome, and
// retries it while it fails because the database is unavailable
// (db.IsUnavailable), with or without this process's lease. retried says
// whether the write that succeeded was a retry: a retry may find that an
// earlier attempt had committed before its answer was lost. Any other
// error is returned at once, as before.
func (e *Engine) keepOutcome(ctx context.Context, row stepRow, what string, write func(ctx context.Context) error) (retried bool, err error) {
	fctx, cancel := bounded(ctx)
	err = write(fctx)
	cancel()
	if err == nil || !db.IsUnavailable(err) {
		return false, err
	}
	e.stats.kept.Add(1)
	began := time.Now()
	e.logger.WarnContext(ctx, "engine call outcome kept: its record could not commit, retrying until the database is back",
		"run_id", row.RunID, "step_id", row.ID, "write", what, "error", err.Error())
	wait := keepFirstWait
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil && (!e.lease.started.Load() || e.lease.stopping.Load()) {
			return true, fmt.Errorf("%s not recorded before the process stopped: %w", what, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, keepMaxWait)
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keepAttemptTimeout)
		err = write(actx)
		cancel()
		if err == nil {
			e.stats.keptCommitted.Add(1)
			e.logger.InfoContext(ctx, "engine call outcome recorded after the database came back",
				"run_id", row.RunID, "step_id", row.ID, "write", what, "retries", attempt, "after", time.Since(began).Round(time.Millisecond))
			return true, nil
		}
		if !db.IsUnavailable(err) {
			return true, err
		}
	}
}
