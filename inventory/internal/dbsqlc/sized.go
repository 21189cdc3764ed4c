package dbsqlc

// Written by hand, not by sqlc: ComponentSyncList with its slice sized up
// front. The sync lists every component of a type each cycle (18,000 rows
// of about 380 bytes for 1,000 compute racks); growing the slice by
// doubling, and scanning each row into a copy first, were two thirds of the
// listing's garbage.

import "context"

// ComponentSyncListSized is ComponentSyncList with room for n rows made
// first (n is a hint: more rows still fit) and each row scanned in place.
func (q *Queries) ComponentSyncListSized(ctx context.Context, db DBTX, type_ string, n int) ([]ComponentSyncListRow, error) {
	rows, err := db.Query(ctx, componentSyncList, type_)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	items := make([]ComponentSyncListRow, 0, max(n, 0))
	for rows.Next() {
		items = append(items, ComponentSyncListRow{})
		i := &items[len(items)-1]
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
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}
