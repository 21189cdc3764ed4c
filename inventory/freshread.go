package inventory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// freshReadTimeout bounds one shared read (freshRead): it runs without its
// starter's cancellation, since other callers wait for it too.
const freshReadTimeout = 30 * time.Second

// freshRead shares a read among concurrent callers without ever answering
// a caller with a read that started before it called: a caller joins the
// read queued to start next, or, when none is queued, queues one (if a read
// is running) or starts one (if none is). However many callers arrive
// while a read runs, at most one more read follows it, and each caller
// gets a value at least as fresh as a read of its own would have given, so
// a client that committed a write and then calls sees that write.
//
// The listings use it for the per-call checks of the page cache (the
// inventory generation, a page's task-derived fields): under load, callers
// of the same page share their checks instead of queueing one each in
// front of the database.
type freshRead[T any] struct {
	mu      sync.Mutex
	running bool
	next    *readFlight[T] // queued to start when the running read ends
	calls   int64          // calls of do, for tests
	reads   int64          // reads started, for tests
}

type readFlight[T any] struct {
	ctx  context.Context // the queuing caller's, without its cancellation
	read func(context.Context) (T, error)
	done chan struct{}
	v    T
	err  error
}

// do returns the result of read as run by a call of do that started it
// after this call began (read may be this caller's or another's). It
// returns early, with a DeadlineExceeded or Canceled Connect error, when
// ctx ends first; the shared read goes on for the others.
func (f *freshRead[T]) do(ctx context.Context, read func(context.Context) (T, error)) (T, error) {
	f.mu.Lock()
	f.calls++
	fl := f.next
	if fl == nil {
		fl = &readFlight[T]{ctx: context.WithoutCancel(ctx), read: read, done: make(chan struct{})}
		if f.running {
			f.next = fl
		} else {
			f.start(fl)
		}
	}
	f.mu.Unlock()
	select {
	case <-fl.done:
		return fl.v, fl.err
	case <-ctx.Done():
		var zero T
		code := connect.CodeCanceled
		if ctx.Err() == context.DeadlineExceeded {
			code = connect.CodeDeadlineExceeded
		}
		return zero, connect.NewError(code, context.Cause(ctx))
	}
}

// start runs fl; f.mu is held.
func (f *freshRead[T]) start(fl *readFlight[T]) {
	f.running = true
	f.reads++
	go func() {
		fl.v, fl.err = fl.run()
		f.mu.Lock()
		f.running = false
		if next := f.next; next != nil {
			f.next = nil
			f.start(next)
		}
		f.mu.Unlock()
		close(fl.done)
	}()
}

// run runs the read under freshReadTimeout. A panic becomes its error: the
// read runs outside the handler's goroutine, where Connect's recovery
// would not reach it.
func (fl *readFlight[T]) run() (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("inventory: shared read panicked: %v", p)
		}
	}()
	ctx, cancel := context.WithTimeout(fl.ctx, freshReadTimeout)
	defer cancel()
	return fl.read(ctx)
}

// counts returns how many calls of do f has had and how many reads it has
// started.
func (f *freshRead[T]) counts() (calls, reads int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.reads
}
