package db

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// CommitHooks are functions to run once a transaction has committed:
// metrics and log lines of what the transaction did, which must not be
// counted or written if it rolls back. The code that begins and commits the
// transaction opens the scope with WithCommitHooks and calls Run after the
// commit; code that writes through the transaction, however deep, adds to
// it with AfterCommit. Only functions travel in the context, never the
// transaction.
type CommitHooks struct {
	mu  sync.Mutex
	fns []func()
}

type commitHooksKey struct{}

// WithCommitHooks returns ctx carrying a new, empty CommitHooks, and the
// hooks. Call Run after the transaction commits; drop the hooks if it
// rolls back.
func WithCommitHooks(ctx context.Context) (context.Context, *CommitHooks) {
	h := &CommitHooks{}
	return context.WithValue(ctx, commitHooksKey{}, h), h
}

// AfterCommit runs fn after the transaction of ctx's innermost commit-hooks
// scope commits, or at once when ctx has no scope (a caller that does not
// track commits, such as a test calling a service directly).
func AfterCommit(ctx context.Context, fn func()) {
	h, _ := ctx.Value(commitHooksKey{}).(*CommitHooks)
	if h == nil {
		fn()
		return
	}
	h.mu.Lock()
	h.fns = append(h.fns, fn)
	h.mu.Unlock()
}

// Run runs the hooks added so far, in the order they were added, and
// forgets them. A nil CommitHooks runs nothing.
func (h *CommitHooks) Run() {
	if h == nil {
		return
	}
	h.mu.Lock()
	fns := h.fns
	h.fns = nil
	h.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// BeginFunc runs fn in a transaction of db, as pgx.BeginFunc does, with a
// commit-hooks scope on the ctx fn receives: the hooks run once the
// transaction has committed, and are dropped if it rolls back.
func BeginFunc(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, fn func(ctx context.Context, tx pgx.Tx) error) error {
	ctx, hooks := WithCommitHooks(ctx)
	if err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return fn(ctx, tx) }); err != nil {
		return err
	}
	hooks.Run()
	return nil
}
