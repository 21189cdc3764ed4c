package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestWaitForDatabase: a start-up step is retried while the database is
// unavailable (a failover in progress), and not when it fails otherwise.
func TestWaitForDatabase(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	tries := 0
	start := time.Now()
	err := waitForDatabase(context.Background(), logger, "test", func() error {
		tries++
		if tries < 3 {
			return &pgconn.PgError{Code: "57P03"} // starting up
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, tries)
	require.Less(t, time.Since(start), 10*time.Second)

	tries = 0
	denied := &pgconn.PgError{Code: "28P01"} // wrong password
	err = waitForDatabase(context.Background(), logger, "test", func() error { tries++; return denied })
	require.True(t, errors.Is(err, denied))
	require.Equal(t, 1, tries, "not the database being away: no retry")
}
