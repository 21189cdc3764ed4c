package inventory_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
)

// TestRecordFirmwareReadIfUnchanged: the read time is recorded while the
// installed-firmware generation is the one given, in one statement; once
// a write of installed versions moved it, nothing is recorded.
func TestRecordFirmwareReadIfUnchanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	inv := inventory.NewService()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := inv.CreateRack(ctx, tx, inventory.DemoRack(0))
		return err
	}))
	var comp struct {
		ID  uuid.UUID
		Typ string
	}
	require.NoError(t, pool.QueryRow(ctx, `SELECT id, type FROM component ORDER BY id LIMIT 1`).Scan(&comp.ID, &comp.Typ))
	typ := inventory.ComponentType(comp.Typ)
	record := func(versions string, at time.Time) {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := inv.RecordFirmware(ctx, tx, typ, at, []inventory.FirmwareReading{{ComponentID: comp.ID, Versions: inventory.SubVersions{"bmc": {versions}}}}, nil)
			return err
		}))
	}
	ifUnchanged := func(gen int64, at time.Time) (recorded bool) {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			recorded, err = inv.RecordFirmwareReadIfUnchanged(ctx, tx, typ, at, gen)
			return err
		}))
		return recorded
	}
	readAt := func() time.Time {
		reads, err := inv.FirmwareReads(ctx, pool)
		require.NoError(t, err)
		return reads[typ]
	}
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	record("1.0", t0)
	g, err := inv.FirmwareGenerations(ctx, pool)
	require.NoError(t, err)

	require.True(t, ifUnchanged(g.Firmware, t0.Add(time.Minute)))
	require.True(t, readAt().Equal(t0.Add(time.Minute)), "recorded: %v", readAt())
	g2, err := inv.FirmwareGenerations(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, g.Firmware, g2.Firmware, "a read time moves no generation")

	record("1.1", t0.Add(2*time.Minute))
	require.False(t, ifUnchanged(g.Firmware, t0.Add(3*time.Minute)), "the versions were written since")
	require.True(t, readAt().Equal(t0.Add(2*time.Minute)), "nothing recorded: %v", readAt())
}
