package db_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
)

// TestBMCRackMigration takes a migrated database down to just before
// migration 52, writes
// BMCs without bmc.rack_id as an older Flow would, and migrates up again:
// the column is backfilled, and the triggers keep it right afterwards.
func TestBMCRackMigration(t *testing.T) {
	t.Parallel()
	ctx := dbtest.Context(t)
	url := dbtest.NewDB(t)
	m, err := db.NewMigrator(url)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = m.Close() })
	// Down from the newest migration to 52 (bmc.rack_id), which also runs
	// every newer down migration, then one step further.
	require.NoError(t, m.Migrate(52))
	v, _, err := m.Version()
	require.NoError(t, err)
	require.EqualValues(t, 52, v)
	require.NoError(t, m.Steps(-1))

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	r1, r2, c1, c2 := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	_, err = pool.Exec(ctx, `INSERT INTO rack (id, name, manufacturer, serial_number) VALUES ($1, 'r1', 'M', 'R1'), ($2, 'r2', 'M', 'R2')`, r1, r2)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO component (id, rack_id, type, manufacturer, serial_number) VALUES ($1, $3, 'Compute', 'M', 'C1'), ($2, NULL, 'Compute', 'M', 'C2')`, c1, c2, r1)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO bmc (mac_address, component_id, type) VALUES ('aa:00:00:00:00:01', $1, 'Host'), ('aa:00:00:00:00:02', $2, 'Host')`, c1, c2)
	require.NoError(t, err)

	require.NoError(t, m.Steps(1))
	pool.Reset() // drop cached statements planned against the old table
	rackOf := func(mac string) *uuid.UUID {
		var id *uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT rack_id FROM bmc WHERE mac_address = $1`, mac).Scan(&id))
		return id
	}
	require.Equal(t, &r1, rackOf("aa:00:00:00:00:01"))
	require.Nil(t, rackOf("aa:00:00:00:00:02"))

	// Moves follow the component; a value written by hand is overruled.
	_, err = pool.Exec(ctx, `UPDATE component SET rack_id = $1 WHERE id = $2`, r2, c2)
	require.NoError(t, err)
	require.Equal(t, &r2, rackOf("aa:00:00:00:00:02"))
	_, err = pool.Exec(ctx, `INSERT INTO bmc (mac_address, component_id, type, rack_id) VALUES ('aa:00:00:00:00:03', $1, 'DPU', $2)`, c1, r2)
	require.NoError(t, err)
	require.Equal(t, &r1, rackOf("aa:00:00:00:00:03"))
	_, err = pool.Exec(ctx, `UPDATE bmc SET component_id = $1 WHERE mac_address = 'aa:00:00:00:00:03'`, c2)
	require.NoError(t, err)
	require.Equal(t, &r2, rackOf("aa:00:00:00:00:03"))
}
