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
