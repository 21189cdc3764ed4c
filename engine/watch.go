package engine

import (
	"context"
	"sync"
	"time"
)

// runWatcher cancels running calls whose run has ended. River's remote
// cancel reaches most of them at once; this is the safety net for missed
// notifications. One goroutine polls the runs of all running calls in one
// query every CancelPollInterval, and exits when no call is running.
type runWatcher struct {
	e       *Engine
	mu      sync.Mutex
	calls   map[*watchedCall]struct{}
	polling bool
}

type watchedCall struct {
	run    RunID
	cancel context.CancelCauseFunc
}

// watch registers a running call of run; cancel is called with ErrRunEnded
// once the run is seen ended. The returned func unregisters it.
func (w *runWatcher) watch(run RunID, cancel context.CancelCauseFunc) (unwatch func()) {
	c := &watchedCall{run: run, cancel: cancel}
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
		for c := range w.calls {
			if !seen[c.run] {
				seen[c.run] = true
				ids = append(ids, int64(c.run))
			}
		}
		w.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), w.e.cfg.CancelPollInterval)
		ended, err := w.e.q.RunEndedAmong(ctx, w.e.pool, ids)
		cancel()
		if err != nil || len(ended) == 0 {
			continue // the database is unreachable: try again next tick
		}
		gone := make(map[RunID]bool, len(ended))
		for _, id := range ended {
			gone[RunID(id)] = true
		}
		w.mu.Lock()
		for c := range w.calls {
			if gone[c.run] {
				c.cancel(ErrRunEnded)
			}
		}
		w.mu.Unlock()
	}
}
