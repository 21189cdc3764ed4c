package db_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
)

// frozenServer is a PostgreSQL server frozen by SIGSTOP, as its clients
// see it: the kernel accepts connections (into the listen backlog) and
// their startup messages, and nothing ever answers.
func frozenServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().String()
}

// TestOpenSkipsAFrozenFirstHost: with a multi-host URL whose first host is
// a frozen primary (make ha-test's freeze, issue 46), a pool connects to
// the next host once its connect timeout (5 s by default) gives up on the
// frozen one. Before, pgx set no connect timeout: the attempt waited on
// the frozen host for as long as the freeze lasted, and so did every new
// connection of the pool.
func TestOpenSkipsAFrozenFirstHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, err := url.Parse(dbtest.NewDB(t))
	require.NoError(t, err)
	if u.Host == "" {
		t.Fatalf("dbtest's URL names no TCP host: %s", u.Redacted())
	}
	u.Host = frozenServer(t) + "," + u.Host
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()

	began := time.Now()
	pool, err := db.Open(ctx, u.String(), db.PoolConfig{MaxConns: 2})
	require.NoError(t, err, "connected past the frozen host")
	t.Cleanup(pool.Close)
	took := time.Since(began)
	require.Less(t, took, 30*time.Second, "Open waited on the frozen host for %s", took)

	// A connect_timeout in the URL wins over the default.
	q.Set("connect_timeout", "1")
	u.RawQuery = q.Encode()
	began = time.Now()
	pool2, err := db.Open(ctx, u.String(), db.PoolConfig{MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(pool2.Close)
	t.Logf("past a frozen first host: %s with the default connect timeout, %s with connect_timeout=1",
		took.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}
