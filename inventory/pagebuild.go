package inventory

import (
	"context"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
)

// pageBuilds lets the calls that find a listing page missing or stale at
// once wait for one build of it instead of each building its own. When a
// page's cache entry went stale (the inventory changed) or the cache was
// cold, every reader of that page used to build it: a hundred readers of
// thirty pages built each page three times or more, and a page with
// components (3,500 components, 2.3 MB of JSON) was encoded to JSON once
// a build (issue 49). A call that finds a build of its page in flight
// waits for it and then looks the page up again like any cached page (the
// generation and a fresh check of its task-derived fields decide whether
// it holds), building it only if it still does not.
type pageBuilds struct {
	mu    sync.Mutex
	m     map[string]chan struct{} // by cache key: closed when the build in flight ends
	waits atomic.Int64             // calls that waited for another's build
}

// do runs build for key unless a build of key is in flight, in which case
// it waits for that build to end and reports built false (the caller then
// looks the page up again). It returns early, with a Canceled or
// DeadlineExceeded Connect error, when ctx ends while it waits.
func (b *pageBuilds) do(ctx context.Context, key string, build func() (*cachedPage, error)) (p *cachedPage, built bool, err error) {
	b.mu.Lock()
	if done, ok := b.m[key]; ok {
		b.mu.Unlock()
		b.waits.Add(1)
		select {
		case <-done:
			return nil, false, nil
		case <-ctx.Done():
			code := connect.CodeCanceled
			if ctx.Err() == context.DeadlineExceeded {
				code = connect.CodeDeadlineExceeded
			}
			return nil, false, connect.NewError(code, context.Cause(ctx))
		}
	}
	done := make(chan struct{})
	if b.m == nil {
		b.m = map[string]chan struct{}{}
	}
	b.m[key] = done
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.m, key)
		b.mu.Unlock()
		close(done)
	}()
	p, err = build()
	return p, true, err
}
