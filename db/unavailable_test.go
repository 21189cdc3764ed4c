package db_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
)

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"starting up", fmt.Errorf("checkpoint: %w", &pgconn.PgError{Code: "57P03"}), true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"read-only after a failover", &pgconn.PgError{Code: "25006"}, true},
		{"deadlock", &pgconn.PgError{Code: "40P01"}, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"syntax error", &pgconn.PgError{Code: "42601"}, false},
		{"connection refused", fmt.Errorf("end steps: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), true},
		{"unexpected EOF", fmt.Errorf("lock runs: %w", io.ErrUnexpectedEOF), true},
		{"a timeout", context.DeadlineExceeded, true},
		{"cancelled by the caller", context.Canceled, false},
		{"no rows", pgx.ErrNoRows, false},
		{"a hook's own error", errors.New("hook refused"), false},
	} {
		require.Equal(t, tt.want, db.IsUnavailable(tt.err), tt.name)
	}
}

// TestIsUnavailableOnARealConnection: the error of a statement on a
// server that is gone counts.
func TestIsUnavailableOnARealConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	_, err = pgx.Connect(ctx, "postgres://u@"+addr+"/d?sslmode=disable&connect_timeout=2")
	require.Error(t, err)
	require.True(t, db.IsUnavailable(err), "%v", err)
}

// TestUnavailableReason: the words a client gets name what happened,
// never a host or socket.
func TestUnavailableReason(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 5432}, Err: syscall.ECONNREFUSED}
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"not unavailable", &pgconn.PgError{Code: "23505"}, ""},
		{"caller cancelled", context.Canceled, ""},
		{"read-only", fmt.Errorf("insert task: %w", &pgconn.PgError{Code: "25006"}), "the database is read-only (a standby: a failover is in progress)"},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, "the database server is shutting down (57P01)"},
		{"connection exception", &pgconn.PgError{Code: "08006"}, "the database connection failed (08006)"},
		{"refused, bare", fmt.Errorf("list: %w", refused), "a service the server depends on refused the connection"},
		{"a bare timeout", context.DeadlineExceeded, "a service the server depends on did not answer in time"},
		{"lost", io.ErrUnexpectedEOF, "the connection to a service the server depends on was lost"},
	} {
		require.Equal(t, tt.want, db.UnavailableReason(tt.err), tt.name)
	}

	// A real refused connection, through pgx: named as the database's, with
	// no address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	_, err = pgx.Connect(context.Background(), "postgres://u@"+addr+"/d?sslmode=disable&connect_timeout=2")
	require.Contains(t, err.Error(), addr)
	require.Equal(t, "the database refused the connection", db.UnavailableReason(err))
}
