package db_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
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
	require.Equal(t, "db.uuidArrayCodec", fmt.Sprintf("%T", arr.Codec))
	require.Equal(t, "db.uuidCodec", fmt.Sprintf("%T", db.UUIDArrayElementCodec(arr.Codec)))
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

	// []uuid.UUID goes by Flow's direct plan: NULL for nil, no dimensions
	// for empty, and thousands of IDs (a listing page's) in order.
	var isNullArr bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid[] IS NULL, cardinality($2::uuid[]), array_ndims($2::uuid[]) IS NULL`, []uuid.UUID(nil), []uuid.UUID{}).Scan(&isNullArr, &n, &isNull))
	require.True(t, isNullArr, "nil slice")
	require.Zero(t, n)
	require.True(t, isNull, "an empty array has no dimensions")
	many := make([]uuid.UUID, 3600)
	for i := range many {
		many[i] = uuid.New()
	}
	var texts []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(x::text ORDER BY i) FROM unnest($1::uuid[]) WITH ORDINALITY AS u(x, i)`, many).Scan(&texts))
	require.Len(t, texts, len(many))
	for i := range many {
		require.Equal(t, many[i].String(), texts[i], "element %d", i)
	}
	var lower, upper int
	require.NoError(t, pool.QueryRow(ctx, `SELECT array_lower($1::uuid[], 1), array_upper($1::uuid[], 1)`, many).Scan(&lower, &upper))
	require.Equal(t, [2]int{1, 3600}, [2]int{lower, upper})
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid[]`, many).Scan(&ids))
	require.Equal(t, many, ids)
	ptrs := []*uuid.UUID{&a, nil}
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid[]::text`, ptrs).Scan(&text))
	require.Equal(t, "{"+a.String()+",NULL}", text, "other slices still go by pgx's plan")

	// The simple protocol sends and reads text: the database/sql methods.
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, pgx.QueryExecModeSimpleProtocol, a).Scan(&got))
	require.Equal(t, a, got)
}

// BenchmarkUUIDArrayEncode: a listing page's 3,600 IDs as a uuid[]
// argument, Flow's plan against pgx's own (the same codec without it).
func BenchmarkUUIDArrayEncode(b *testing.B) {
	ctx := dbtest.Context(b)
	pool := dbtest.NewPool(b)
	conn, err := pool.Acquire(ctx)
	require.NoError(b, err)
	defer conn.Release()
	ids := make([]uuid.UUID, 3600)
	for i := range ids {
		ids[i] = uuid.New()
	}
	tm := conn.Conn().TypeMap()
	arr, _ := tm.TypeForOID(pgtype.UUIDArrayOID)
	pgxMap := pgtype.NewMap()
	elem := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: db.UUIDArrayElementCodec(arr.Codec)}
	pgxMap.RegisterType(elem)
	pgxMap.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: elem}})
	for _, bb := range []struct {
		name string
		m    *pgtype.Map
	}{
		{"flow", tm},
		{"pgx", pgxMap},
	} {
		b.Run(bb.name, func(b *testing.B) {
			plan := bb.m.PlanEncode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids)
			require.NotNil(b, plan)
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				buf, err = plan.Encode(ids, buf[:0])
				require.NoError(b, err)
			}
		})
	}
}
