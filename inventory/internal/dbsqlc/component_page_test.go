package dbsqlc_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// TestComponentListWithBMCsByRacksFunc checks the hand-written decoder
// against sqlc's generated Scan on rows with and without NULLs, BMCs and
// blocked operations.
func TestComponentListWithBMCsByRacksFunc(t *testing.T) {
	t.Parallel()
	ctx := dbtest.Context(t)
	pool := dbtest.NewPool(t)
	rack := uuid.New()
	_, err := pool.Exec(ctx, `INSERT INTO rack (id, name, manufacturer, serial_number) VALUES ($1, 'r', 'M', 'RS')`, rack)
	require.NoError(t, err)
	plain, full, bare := uuid.New(), uuid.New(), uuid.New()
	_, err = pool.Exec(ctx, `INSERT INTO component (id, rack_id, type, name, manufacturer, serial_number, model, description,
		firmware_version, slot_id, tray_idx, host_id, external_id, operation_phase, operation_reason, blocked_operations)
		VALUES ($1, $4, 'Compute', 'plain', 'M', 'S1', NULL, NULL, '', 0, 0, 0, NULL, 'unknown', '', '{}'),
		       ($2, $4, 'NVSwitch', 'fülle', 'Mäker', 'S2', 'GB200', '{"a": 1}', '1.2', -3, 2147483647, 7, 'ext-2', 'error', 'leak', '{power,firmware}'),
		       ($3, $4, 'PowerShelf', '', 'M', 'S3', '', '', 'fw', 1, 2, 3, NULL, 'ready', '', '{}')`,
		plain, full, bare, rack)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO bmc (mac_address, component_id, type, ip_address) VALUES
		('aa:00:00:00:00:01', $1, 'Host', NULL), ('aa:00:00:00:00:02', $2, 'Host', '10.0.0.2'), ('aa:00:00:00:00:03', $2, 'DPU', '')`,
		plain, full)
	require.NoError(t, err)

	q := dbsqlc.New()
	want, err := q.ComponentListWithBMCsByRacks(ctx, pool, []uuid.UUID{rack})
	require.NoError(t, err)
	require.Len(t, want, 4)
	var got []dbsqlc.ComponentListWithBMCsByRacksRow
	err = q.ComponentListWithBMCsByRacksFunc(ctx, pool, []uuid.UUID{rack}, func(r *dbsqlc.ComponentPageRow) error {
		row := dbsqlc.ComponentListWithBMCsByRacksRow{
			ID: r.ID, RackID: &r.RackID, Type: r.Type, Name: r.Name, Manufacturer: r.Manufacturer,
			SerialNumber: r.SerialNumber, Model: r.Model, Description: r.Description, FirmwareVersion: r.FirmwareVersion,
			SlotID: r.SlotID, TrayIdx: r.TrayIdx, HostID: r.HostID, OperationPhase: r.OperationPhase,
			OperationReason: r.OperationReason, BlockedOperations: r.BlockedOperations,
			BMCMACAddress: r.BMCMACAddress, BMCType: r.BMCType, BMCIPAddress: r.BMCIPAddress,
		}
		rackID := r.RackID // r is reused
		row.RackID = &rackID
		if ext := r.ExternalID; ext != "" {
			row.ExternalID = &ext
		}
		if len(row.BlockedOperations) == 0 {
			row.BlockedOperations = []string{} // the generated Scan reads '{}' as empty, not nil
		}
		got = append(got, row)
		return nil
	})
	require.NoError(t, err)
	require.ElementsMatch(t, want, got)
}
