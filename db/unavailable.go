package db

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports whether err means the database could not be
// reached or could not take writes for now, so the same statement may
// succeed once it comes back: a connection refused, reset or closed, a
// server shutting down or starting up (57P01–57P03, class 08), a
// connection to a server that has become a standby (25006, read-only: a
// failover in progress), a serialization failure or deadlock (40001,
// 40P01), or a timeout of ctx's own deadline. A statement error (a
// constraint, a bug) or an error of the caller's is not.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case strings.HasPrefix(pg.Code, "08"), strings.HasPrefix(pg.Code, "57P"),
			pg.Code == "25006", pg.Code == "40001", pg.Code == "40P01", pg.Code == "53300":
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.As(err, &ne), pgconn.SafeToRetry(err), pgconn.Timeout(err),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// pgx's own words for a connection lost mid-statement.
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "broken pipe") || strings.Contains(msg, "unexpected EOF")
}

// UnavailableReason returns why err means the database is unavailable for
// now (IsUnavailable), in words fit for a client: what happened, never
// which host or socket (a connection error's text names both). An error
// that does not come from pgx (a bare timeout or network error) is worded
// for "a service" rather than the database. It returns "" when err is not
// such an error.
func UnavailableReason(err error) string {
	if !IsUnavailable(err) {
		return ""
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code == "25006":
			return "the database is read-only (a standby: a failover is in progress)"
		case pg.Code == "57P01":
			return "the database server is shutting down (57P01)"
		case pg.Code == "57P03":
			return "the database server is starting up (57P03)"
		case pg.Code == "53300":
			return "the database has no connection slot free (53300)"
		case pg.Code == "40001", pg.Code == "40P01":
			return "the database transaction conflicted with another (" + pg.Code + ")"
		}
		return "the database connection failed (" + pg.Code + ")"
	}
	what := "a service the server depends on"
	var ce *pgconn.ConnectError
	var retry interface{ SafeToRetry() bool }
	if errors.As(err, &ce) || errors.As(err, &retry) || pgconn.Timeout(err) || strings.Contains(err.Error(), "conn closed") {
		what = "the database"
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return what + " refused the connection"
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err), errors.As(err, &ne) && ne.Timeout():
		return what + " did not answer in time"
	}
	return "the connection to " + what + " was lost"
}
