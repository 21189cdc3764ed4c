package dbsqlc_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// TestComponentRackPageFunc checks the hand-written decoder against sqlc's
// generated Scan on rows with and without NULLs, BMCs and blocked
// operations, and that bmc.rack_id follows its component.
func TestComponentRackPageFunc(t *testing.T) {
	t.Parallel()
	ctx := dbtest.Context(t)
	pool := dbtest.NewPool(t)
	rack, other := uuid.New(), uuid.New()
	_, err := pool.Exec(ctx, `INSERT INTO rack (id, name, manufacturer, serial_number) VALUES ($1, 'r', 'M', 'RS'), ($2, 'o', 'M', 'OS')`, rack, other)
	require.NoError(t, err)
	plain, full, bare, moved := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	_, err = pool.Exec(ctx, `INSERT INTO component (id, rack_id, type, name, manufacturer, serial_number, model, description,
		firmware_version, slot_id, tray_idx, host_id, external_id, operation_phase, operation_reason, blocked_operations)
		VALUES ($1, $4, 'Compute', 'plain', 'M', 'S1', NULL, NULL, '', 0, 0, 0, NULL, 'unknown', '', '{}'),
		       ($2, $4, 'NVSwitch', 'fülle', 'Mäker', 'S2', 'GB200', '{"a": 1}', '1.2', -3, 2147483647, 7, 'ext-2', 'error', 'leak', '{power,firmware}'),
		       ($3, $4, 'PowerShelf', '', 'M', 'S3', '', '', 'fw', 1, 2, 3, NULL, 'ready', '', '{}'),
		       ($5, $6, 'Compute', 'moved', 'M', 'S4', NULL, NULL, '', 0, 0, 0, NULL, 'unknown', '', '{}')`,
		plain, full, bare, rack, moved, other)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO bmc (mac_address, component_id, type, ip_address) VALUES
		('aa:00:00:00:00:01', $1, 'Host', NULL), ('aa:00:00:00:00:02', $2, 'Host', '10.0.0.2'), ('aa:00:00:00:00:03', $2, 'DPU', ''),
		('aa:00:00:00:00:04', $3, 'Host', NULL)`,
		plain, full, moved)
	require.NoError(t, err)
	// The moved component's BMC follows it into the rack.
	_, err = pool.Exec(ctx, `UPDATE component SET rack_id = $1 WHERE id = $2`, rack, moved)
	require.NoError(t, err)

	q := dbsqlc.New()
	wantComps, err := q.ComponentListForRackPage(ctx, pool, []uuid.UUID{rack})
	require.NoError(t, err)
	require.Len(t, wantComps, 4)
	wantBMCs, err := q.BMCListForRackPage(ctx, pool, []uuid.UUID{rack})
	require.NoError(t, err)
	require.Len(t, wantBMCs, 4)
	var gotComps []dbsqlc.ComponentListForRackPageRow
	var gotBMCs []dbsqlc.BMCListForRackPageRow
	err = q.ComponentRackPageFunc(ctx, pool, []uuid.UUID{rack}, func(r *dbsqlc.ComponentPageRow) error {
		row := dbsqlc.ComponentListForRackPageRow{
			ID: r.ID, Type: r.Type, Name: r.Name, Manufacturer: r.Manufacturer,
			SerialNumber: r.SerialNumber, Model: r.Model, Description: r.Description, FirmwareVersion: r.FirmwareVersion,
			SlotID: r.SlotID, TrayIdx: r.TrayIdx, HostID: r.HostID, OperationPhase: r.OperationPhase,
			OperationReason: r.OperationReason, BlockedOperations: r.BlockedOperations,
		}
		rackID := r.RackID // r is reused
		row.RackID = &rackID
		if ext := r.ExternalID; ext != "" {
			row.ExternalID = &ext
		}
		if len(row.BlockedOperations) == 0 {
			row.BlockedOperations = []string{} // the generated Scan reads '{}' as empty, not nil
		}
		gotComps = append(gotComps, row)
		return nil
	}, func(r *dbsqlc.BMCPageRow) error {
		gotBMCs = append(gotBMCs, dbsqlc.BMCListForRackPageRow{ComponentID: r.ComponentID, MACAddress: r.MACAddress, Type: r.Type, IPAddress: r.IPAddress})
		return nil
	})
	require.NoError(t, err)
	require.ElementsMatch(t, wantComps, gotComps)
	require.ElementsMatch(t, wantBMCs, gotBMCs)
	require.Contains(t, gotBMCs, dbsqlc.BMCListForRackPageRow{ComponentID: moved, MACAddress: "aa:00:00:00:00:04", Type: "Host"})
}
