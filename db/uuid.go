package db

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

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
	tm.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID, Codec: uuidArrayCodec{&pgtype.ArrayCodec{ElementType: t}}})
	tm.RegisterDefaultPgType(uuid.UUID{}, "uuid")
	tm.RegisterDefaultPgType([]uuid.UUID{}, "_uuid")
}

// uuidArrayCodec is pgx's uuid[] codec with a direct binary plan for
// []uuid.UUID. pgx's own plan reaches each element through reflection and
// boxes it in an interface: about 0.2 µs and an allocation per ID, 0.8 ms
// of CPU for the 3,600 IDs of a listing page's racks and components, which
// the page cache checks on every call (inventory/pagecache.go).
type uuidArrayCodec struct{ *pgtype.ArrayCodec }

func (c uuidArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.([]uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return encodeUUIDArray{}
	}
	return c.ArrayCodec.PlanEncode(m, oid, format, value)
}

// encodeUUIDArray writes a []uuid.UUID as PostgreSQL's binary array
// (array_send): a nil slice is NULL, an empty one an array of no
// dimensions, like pgx's own plan.
type encodeUUIDArray struct{}

func (encodeUUIDArray) Encode(value any, buf []byte) ([]byte, error) {
	ids := value.([]uuid.UUID)
	if ids == nil {
		return nil, nil
	}
	if len(ids) == 0 {
		// Dimensions 0, no NULLs, the element type.
		return binary.BigEndian.AppendUint32(append(buf, 0, 0, 0, 0, 0, 0, 0, 0), pgtype.UUIDOID), nil
	}
	buf = slices.Grow(buf, 20+20*len(ids))
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, 0) // no NULLs
	buf = binary.BigEndian.AppendUint32(buf, pgtype.UUIDOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(ids)))
	buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	for i := range ids {
		buf = binary.BigEndian.AppendUint32(buf, 16)
		buf = append(buf, ids[i][:]...)
	}
	return buf, nil
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
