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
