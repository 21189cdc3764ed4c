package db

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// registerUUID makes conn encode and decode github.com/google/uuid.UUID
// (Flow's ID type everywhere) as the 16 bytes of PostgreSQL's binary uuid.
// Without it pgx goes through uuid.UUID's database/sql methods: a value is
// formatted as text and parsed back, and a scanned one parsed from text,
// each time; a submission's uuid[] of 35 component IDs alone cost about
// 0.6 ms of CPU that way. Anything else (pgtype.UUID, strings, NULLs
// through pointers) is left to pgx's own uuid codec.
func registerUUID(conn *pgx.Conn) {
	tm := conn.TypeMap()
	t := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}}
	tm.RegisterType(t)
	// The array type holds its element type: register it again over ours.
	tm.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: &pgtype.ArrayCodec{ElementType: t}})
	tm.RegisterDefaultPgType(uuid.UUID{}, "uuid")
	tm.RegisterDefaultPgType([]uuid.UUID{}, "_uuid")
}

// afterConnect chains registerUUID before next (which may be nil).
func afterConnect(next func(context.Context, *pgx.Conn) error) func(context.Context, *pgx.Conn) error {
	return func(ctx context.Context, conn *pgx.Conn) error {
		registerUUID(conn)
		if next != nil {
			return next(ctx, conn)
		}
		return nil
	}
}

// uuidCodec is pgx's uuid codec with direct plans for uuid.UUID.
type uuidCodec struct{ pgtype.UUIDCodec }

func (c uuidCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return encodeUUID{}
	}
	return c.UUIDCodec.PlanEncode(m, oid, format, value)
}

func (c uuidCodec) PlanScan(m *pgtype.Map, oid uint32, format int16, target any) pgtype.ScanPlan {
	if _, ok := target.(*uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return scanUUID{}
	}
	return c.UUIDCodec.PlanScan(m, oid, format, target)
}

type encodeUUID struct{}

func (encodeUUID) Encode(value any, buf []byte) ([]byte, error) {
	u := value.(uuid.UUID)
	return append(buf, u[:]...), nil
}

type scanUUID struct{}

func (scanUUID) Scan(src []byte, dst any) error {
	if src == nil {
		return fmt.Errorf("cannot scan NULL into %T", dst)
	}
	if len(src) != len(uuid.UUID{}) {
		return fmt.Errorf("invalid length for uuid: %d", len(src))
	}
	copy(dst.(*uuid.UUID)[:], src)
	return nil
}
