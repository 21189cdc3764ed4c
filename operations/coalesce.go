package operations

import (
	"context"
	"sync"
	"time"
)

// coalescer runs concurrent lookups of single keys as lookups of many:
// the first caller runs its key alone, the callers that come while it runs
// wait, and it runs all their keys together next, until none is left. A
// burst of runs starting at once (each first call marks its task running,
// reads its task and asks the readiness gate) costs a few statements
// instead of three per run, and a lone caller waits for nobody.
type coalescer[K comparable, V any] struct {
	run func(ctx context.Context, keys []K) (map[K]V, error)

	mu      sync.Mutex
	running bool
	waiting map[K][]chan coalesced[V]
}

type coalesced[V any] struct {
	v   V
	ok  bool
	err error
}

// coalesceTimeout bounds one run of many callers' keys: it runs on the
// context of whichever caller runs it, without that caller's cancellation.
const coalesceTimeout = 30 * time.Second

// get returns key's value (ok false: run found none), or run's error.
func (c *coalescer[K, V]) get(ctx context.Context, key K) (V, bool, error) {
	ch := make(chan coalesced[V], 1)
	c.mu.Lock()
	if c.waiting == nil {
		c.waiting = map[K][]chan coalesced[V]{}
	}
	c.waiting[key] = append(c.waiting[key], ch)
	lead := !c.running
	c.running = true
	c.mu.Unlock()
	if lead {
		c.lead(ctx)
	}
	select {
	case r := <-ch:
		return r.v, r.ok, r.err
	case <-ctx.Done():
		var zero V
		return zero, false, ctx.Err()
	}
}

// lead runs the waiting keys until none is left.
func (c *coalescer[K, V]) lead(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), coalesceTimeout)
	defer cancel()
	for {
		c.mu.Lock()
		waiting := c.waiting
		c.waiting = nil
		if len(waiting) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		keys := make([]K, 0, len(waiting))
		for k := range waiting {
			keys = append(keys, k)
		}
		vals, err := c.run(ctx, keys)
		for k, chs := range waiting {
			v, ok := vals[k]
			for _, ch := range chs {
				ch <- coalesced[V]{v: v, ok: ok, err: err}
			}
		}
	}
}

// keyed maps rows by their key, for a coalescer's run.
func keyed[K comparable, T any](rows []T, key func(T) K) map[K]T {
	out := make(map[K]T, len(rows))
	for _, r := range rows {
		out[key(r)] = r
	}
	return out
}
