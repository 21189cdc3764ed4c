package engine

import (
	"context"
	"sync"
	"time"

	"github.com/nicoflow/flow/engine/internal/dbsqlc"
)

// runWatcher cancels running calls whose run has ended or whose execution
// was superseded (its step rescheduled elsewhere). River's remote cancel
// reaches most ended runs at once; this is the safety net for missed
// notifications. One goroutine polls the runs and steps of all running
// calls, in two queries every CancelPollInterval, and exits when no call is
// running. The lease cancels them all at once (cancelAll) when it is lost.
type runWatcher struct {
	e       *Engine
	mu      sync.Mutex
	calls   map[*watchedCall]struct{}
	polling bool
}

type watchedCall struct {
	run    RunID
	step   int64
	token  int64
	cancel context.CancelCauseFunc
}

// watch registers a running call of run, in the execution token of step;
// cancel is called with ErrRunEnded once the run is seen ended, with
// ErrSuperseded once the execution is. The returned func unregisters it.
func (w *runWatcher) watch(run RunID, step, token int64, cancel context.CancelCauseFunc) (unwatch func()) {
	c := &watchedCall{run: run, step: step, token: token, cancel: cancel}
	w.mu.Lock()
	if w.calls == nil {
		w.calls = map[*watchedCall]struct{}{}
	}
	w.calls[c] = struct{}{}
	if !w.polling {
		w.polling = true
		go w.poll()
	}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.calls, c)
		w.mu.Unlock()
	}
}

func (w *runWatcher) poll() {
	t := time.NewTicker(w.e.cfg.CancelPollInterval)
	defer t.Stop()
	for range t.C {
		w.mu.Lock()
		if len(w.calls) == 0 {
			w.polling = false
			w.mu.Unlock()
			return
		}
		seen := map[RunID]bool{}
		var ids []int64
		var sp dbsqlc.StepSupersededAmongParams
		for c := range w.calls {
			if !seen[c.run] {
				seen[c.run] = true
				ids = append(ids, int64(c.run))
			}
			sp.IDs, sp.Tokens = append(sp.IDs, c.step), append(sp.Tokens, c.token)
		}
		w.mu.Unlock()

		// Each query has its own budget, and either answer is used without
		// the other (a slow database must not hold back run cancels).
		ctx, cancel := context.WithTimeout(context.Background(), w.e.cfg.CancelPollInterval)
		ended, _ := w.e.q.RunEndedAmong(ctx, w.e.pool, ids)
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), w.e.cfg.CancelPollInterval)
		superseded, _ := w.e.q.StepSupersededAmong(ctx, w.e.pool, sp)
		cancel()
		if len(ended)+len(superseded) == 0 {
			continue // nothing ended, or the database is unreachable: try again next tick
		}
		gone := make(map[RunID]bool, len(ended))
		for _, id := range ended {
			gone[RunID(id)] = true
		}
		moved := make(map[int64]bool, len(superseded))
		for _, id := range superseded {
			moved[id] = true
		}
		w.mu.Lock()
		for c := range w.calls {
			switch {
			case gone[c.run]:
				c.cancel(ErrRunEnded)
			case moved[c.step]:
				c.cancel(ErrSuperseded)
			}
		}
		w.mu.Unlock()
	}
}

// cancelAll cancels every running call with cause.
func (w *runWatcher) cancelAll(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c := range w.calls {
		c.cancel(cause)
	}
}
