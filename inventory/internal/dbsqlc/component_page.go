package dbsqlc

// Written by hand, not by sqlc: a streaming reader for the rack page's
// component query. A page of 100 racks is thousands of rows; pgx's
// reflection-driven Scan into the generated row struct, and collecting every
// row in a slice first, made up about half of the page's Go time and most of
// its garbage (about 6 MB of 11 MB allocated per page).

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// ComponentPageRow is one row of ComponentListForRackPage as
// ComponentRackPageFunc decodes it: the generated row's columns, with a NULL
// rack ID as uuid.Nil and a NULL external ID as "". An empty
// blocked_operations array reads as nil.
type ComponentPageRow struct {
	ID                uuid.UUID
	RackID            uuid.UUID
	Type              string
	Name              string
	Manufacturer      string
	SerialNumber      string
	Model             *string
	Description       *string
	FirmwareVersion   string
	SlotID            int32
	TrayIdx           int32
	HostID            int32
	ExternalID        string
	OperationPhase    string
	OperationReason   string
	BlockedOperations []string
	PowerState        string
	Health            []byte // json; nil when NULL
}

// BMCPageRow is one row of BMCListForRackPage as ComponentRackPageFunc
// decodes it.
type BMCPageRow struct {
	ComponentID uuid.UUID
	MACAddress  string
	Type        string
	IPAddress   *string
}

// ComponentRackPageFunc reads the live components of racks
// (ComponentListForRackPage), calling component for each row as it
// arrives, then their BMCs (BMCListForRackPage), calling bmc for each. The
// callbacks may keep the strings and slices they are given but not the row
// itself, which is reused. An error from a callback stops the read and is
// returned.
func (q *Queries) ComponentRackPageFunc(ctx context.Context, db DBTX, rackIDs []uuid.UUID,
	component func(row *ComponentPageRow) error, bmc func(row *BMCPageRow) error) error {
	// As [16]byte, pgx sends the IDs in binary; as uuid.UUID (a
	// driver.Valuer) it formats each as text and parses it back, which cost
	// 0.4 ms for 100 racks.
	ids := make([][16]byte, len(rackIDs))
	for i, id := range rackIDs {
		ids[i] = id
	}
	var d rawDecoder
	var crow ComponentPageRow
	err := d.each(ctx, db, componentListForRackPage, ids, 18, func() {
		crow = ComponentPageRow{
			ID:                d.uuid(0),
			RackID:            d.uuid(1),
			Type:              d.text(2),
			Name:              d.text(3),
			Manufacturer:      d.text(4),
			SerialNumber:      d.text(5),
			Model:             d.textPtr(6),
			Description:       d.textPtr(7),
			FirmwareVersion:   d.text(8),
			SlotID:            d.int4(9),
			TrayIdx:           d.int4(10),
			HostID:            d.int4(11),
			ExternalID:        d.text(12),
			OperationPhase:    d.text(13),
			OperationReason:   d.text(14),
			BlockedOperations: d.textArray(15),
			PowerState:        d.text(16),
			Health:            d.bytes(17),
		}
	}, func() error { return component(&crow) })
	if err != nil {
		return fmt.Errorf("component page: %w", err)
	}
	var brow BMCPageRow
	err = d.each(ctx, db, bMCListForRackPage, ids, 4, func() {
		brow = BMCPageRow{
			ComponentID: d.uuid(0),
			MACAddress:  d.text(1),
			Type:        d.text(2),
			IPAddress:   d.textPtr(3),
		}
	}, func() error { return bmc(&brow) })
	if err != nil {
		return fmt.Errorf("component page BMCs: %w", err)
	}
	return nil
}

// each runs query with arg and, for every row as it arrives, makes it d's
// current row, decodes it and emits it; a decoding error stops it.
func (d *rawDecoder) each(ctx context.Context, db DBTX, query string, arg any, columns int, decode func(), emit func() error) error {
	rows, err := db.Query(ctx, query, arg)
	if err != nil {
		return err
	}
	defer rows.Close()
	d.rows, d.fields = rows, rows.FieldDescriptions()
	if len(d.fields) != columns {
		// A query that failed before its first row (a cancelled or timed
		// out statement, a lost connection) has no fields: its error is
		// the one to report, not the column count.
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return fmt.Errorf("got %d columns, want %d", len(d.fields), columns)
	}
	for rows.Next() {
		d.values = rows.RawValues()
		if decode(); d.err != nil {
			return d.err
		}
		if err := emit(); err != nil {
			return err
		}
	}
	return rows.Err()
}

// rawDecoder decodes the current row's raw values. The common cases (binary
// uuid and int4, text in either format, empty arrays) are decoded here;
// anything else goes to pgx's type map. The first error sticks in err.
type rawDecoder struct {
	rows   pgx.Rows
	fields []pgconn.FieldDescription
	values [][]byte
	err    error
	// strs holds the text of many rows in one allocation: a page has tens
	// of thousands of short strings, and allocating each on its own cost
	// more than decoding them.
	strs strings.Builder
}

func (d *rawDecoder) text(i int) string {
	src := d.values[i]
	if len(src) == 0 {
		return ""
	}
	if d.strs.Cap()-d.strs.Len() < len(src) {
		d.strs = strings.Builder{}
		d.strs.Grow(max(len(src), 32<<10))
	}
	n := d.strs.Len()
	d.strs.Write(src)
	// The builder never changes bytes it has written, so earlier strings
	// stay valid as it grows.
	return d.strs.String()[n:]
}

// bytes copies a json column's value (its text in either format); nil for
// NULL.
func (d *rawDecoder) bytes(i int) []byte {
	if d.values[i] == nil {
		return nil
	}
	return append([]byte(nil), d.values[i]...)
}

func (d *rawDecoder) textPtr(i int) *string {
	if d.values[i] == nil {
		return nil
	}
	s := d.text(i)
	return &s
}

func (d *rawDecoder) uuid(i int) uuid.UUID {
	src := d.values[i]
	switch {
	case src == nil:
		return uuid.Nil
	case d.fields[i].Format == pgtype.BinaryFormatCode && len(src) == 16:
		return uuid.UUID(src)
	}
	id, err := uuid.ParseBytes(src)
	d.fail(i, err)
	return id
}

func (d *rawDecoder) int4(i int) int32 {
	src := d.values[i]
	if d.fields[i].Format == pgtype.BinaryFormatCode && len(src) == 4 {
		return int32(binary.BigEndian.Uint32(src))
	}
	n, err := strconv.ParseInt(string(src), 10, 32)
	d.fail(i, err)
	return int32(n)
}

func (d *rawDecoder) textArray(i int) []string {
	src := d.values[i]
	switch {
	case src == nil:
		return nil
	case d.fields[i].Format == pgtype.BinaryFormatCode && len(src) >= 4 && binary.BigEndian.Uint32(src) == 0:
		return nil // no dimensions: empty
	case d.fields[i].Format == pgtype.TextFormatCode && string(src) == "{}":
		return nil
	}
	var out []string
	d.fail(i, d.rows.TypeMap().Scan(d.fields[i].DataTypeOID, d.fields[i].Format, src, &out))
	return out
}

func (d *rawDecoder) fail(i int, err error) {
	if err != nil && d.err == nil {
		d.err = fmt.Errorf("column %s: %w", d.fields[i].Name, err)
	}
}
