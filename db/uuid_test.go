package db_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
)

// TestUUIDRoundTrips: uuid.UUID values, pointers, slices and NULLs travel
// through Flow's pool (its binary uuid codec) as they did through pgx's
// database/sql fallback, in both protocols, and other Go types still scan.
func TestUUIDRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := dbtest.Context(t)
	pool := dbtest.NewPool(t)
	a, b := uuid.New(), uuid.New()

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	tm := conn.Conn().TypeMap()
	for _, oid := range []uint32{pgtype.UUIDOID, pgtype.UUIDArrayOID} {
		typ, ok := tm.TypeForOID(oid)
		require.True(t, ok)
		require.NotEqual(t, "pgtype.UUIDCodec", fmt.Sprintf("%T", typ.Codec), "oid %d: Flow's codec is not registered", oid)
	}
	arr, _ := tm.TypeForOID(pgtype.UUIDArrayOID)
	require.Equal(t, "db.uuidCodec", fmt.Sprintf("%T", arr.Codec.(*pgtype.ArrayCodec).ElementType.Codec))
	conn.Release()

	var got uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, a).Scan(&got))
	require.Equal(t, a, got)

	var text string
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid::text`, a).Scan(&text))
	require.Equal(t, a.String(), text, "encoded as the same 16 bytes")
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, a).Scan(&text))
	require.Equal(t, a.String(), text, "a uuid still scans into a string")

	var pg pgtype.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, a).Scan(&pg))
	require.Equal(t, [16]byte(a), pg.Bytes)

	var ptr *uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT NULL::uuid`).Scan(&ptr))
	require.Nil(t, ptr)
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, &b).Scan(&ptr))
	require.Equal(t, b, *ptr)
	var isNull bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid IS NULL`, (*uuid.UUID)(nil)).Scan(&isNull))
	require.True(t, isNull)
	require.Error(t, pool.QueryRow(ctx, `SELECT NULL::uuid`).Scan(&got), "NULL into a non-pointer")

	var ids []uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid[]`, []uuid.UUID{a, b}).Scan(&ids))
	require.Equal(t, []uuid.UUID{a, b}, ids)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT cardinality($1::uuid[])`, []uuid.UUID{}).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, pool.QueryRow(ctx, `SELECT ARRAY[$1::uuid, $2::uuid]::text`, a, b).Scan(&text))
	require.Equal(t, "{"+a.String()+","+b.String()+"}", text)

	// The simple protocol sends and reads text: the database/sql methods.
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, pgx.QueryExecModeSimpleProtocol, a).Scan(&got))
	require.Equal(t, a, got)
}
