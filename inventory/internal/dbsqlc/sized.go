package dbsqlc

// Written by hand, not by sqlc: ComponentSyncList row by row. The sync
// lists every component of a type each cycle (18,000 rows of about 380
// bytes for 1,000 compute racks); a slice of rows grown by doubling, and
// each row scanned into a copy first, were two thirds of the listing's
// garbage, and the rows were then held beside what the sync made of them.

import "context"

// ComponentSyncListEach is ComponentSyncList handing each row to f as it
// is scanned, so the caller keeps only what it makes of the rows, not the
// rows (issue 29: a 3,000-rack site lists 54,000 compute trays). The row
// is reused for the next one, so f must not keep it; its fields' values
// (strings, slices) are freshly scanned for each row and f may keep those.
func (q *Queries) ComponentSyncListEach(ctx context.Context, db DBTX, type_ string, f func(*ComponentSyncListRow) error) error {
	rows, err := db.Query(ctx, componentSyncList, type_)
	if err != nil {
		return err
	}
	defer rows.Close()
	i := &ComponentSyncListRow{}
	for rows.Next() {
		*i = ComponentSyncListRow{} // nothing of the last row is scanned into
		if err := rows.Scan(
			&i.ID,
			&i.RackID,
			&i.Name,
			&i.Manufacturer,
			&i.SerialNumber,
			&i.Model,
			&i.Description,
			&i.SlotID,
			&i.TrayIdx,
			&i.HostID,
			&i.DeletedAt,
			&i.MirroredAt,
			&i.HostMac,
			&i.HostIp,
			&i.RackExternalID,
			&i.ExternalID,
			&i.FirmwareVersion,
			&i.PowerState,
			&i.OperationPhase,
			&i.OperationReason,
			&i.BlockedOperations,
			&i.Health,
			&i.UpdatedAt,
			&i.DpuMacs,
			&i.DpuIps,
		); err != nil {
			return err
		}
		if err := f(i); err != nil {
			return err
		}
	}
	return rows.Err()
}
