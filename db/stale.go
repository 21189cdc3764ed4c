package db

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Stale pooled connections after a server restart or failover.
//
// When PostgreSQL restarts (or a failover moves the primary), every idle
// connection in a pool is dead, but the pool learns it only when a
// statement fails on each one: pgx pings a connection before handing it
// out only after a second idle. Right after the database came back, a
// replica answered `unavailable` once per dead connection (three calls in
// TestPostgresOutageAnswersUnavailable). Instead, the first statement that
// fails with the connection lost marks the pool suspect for
// staleWindow, and while it is, every connection is pinged before use: a
// dead one is dropped and another (or a fresh one) taken, so one call,
// not one per pooled connection, learns that the server went away.

// staleWindow is how long after a lost connection every acquired
// connection is pinged first. The window costs one round trip per
// acquire; it is long enough for a pool's idle connections to be handed
// out once at any load worth the name.
const staleWindow = 30 * time.Second

// staleGuard marks one pool suspect when a statement finds its connection
// lost.
type staleGuard struct {
	until atomic.Int64 // unix nanoseconds; 0: not suspect
	next  pgx.QueryTracer
	now   func() time.Time
}

// guardStale installs the guard on pc: a query tracer that sees every
// statement's error (ahead of any tracer pc already has) and the pool's
// ShouldPing.
func guardStale(pc *pgxpool.Config) *staleGuard {
	g := &staleGuard{now: time.Now}
	if t, ok := pc.ConnConfig.Tracer.(pgx.QueryTracer); ok {
		g.next = t
	}
	if pc.ConnConfig.Tracer == nil || g.next != nil {
		pc.ConnConfig.Tracer = g
	}
	shouldPing := pc.ShouldPing
	pc.ShouldPing = func(ctx context.Context, p pgxpool.ShouldPingParams) bool {
		if g.suspect() {
			return true
		}
		if shouldPing != nil {
			return shouldPing(ctx, p)
		}
		return p.IdleDuration > time.Second // pgx's default
	}
	return g
}

func (g *staleGuard) suspect() bool {
	u := g.until.Load()
	return u != 0 && g.now().UnixNano() < u
}

func (g *staleGuard) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if g.next != nil {
		return g.next.TraceQueryStart(ctx, conn, data)
	}
	return ctx
}

func (g *staleGuard) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if data.Err != nil && isConnLost(data.Err) {
		g.until.Store(g.now().Add(staleWindow).UnixNano())
	}
	if g.next != nil {
		g.next.TraceQueryEnd(ctx, conn, data)
	}
}

// isConnLost reports whether err means the connection itself is gone (the
// server shut down, restarted or dropped it), so the pool's other idle
// connections are likely gone too. A read-only server, a conflict or a
// timeout leaves the connection good: those are not.
func isConnLost(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return strings.HasPrefix(pg.Code, "08") || pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P03"
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return false
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "broken pipe") || strings.Contains(msg, "unexpected EOF")
}
