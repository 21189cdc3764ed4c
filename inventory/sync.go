package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// SyncComponent is a live component as the inventory sync with NICo Core
// reads it: what it compares with Core and what it may write back.
type SyncComponent struct {
	ID              uuid.UUID
	RackID          *uuid.UUID
	RackExternalID  string
	Name            string
	SerialNumber    string
	ExternalID      string
	FirmwareVersion string
	PowerState      string
	Position        Position
	Status          OperationStatus
	Health          json.RawMessage // nil: none known
	Description     *string
	// HostMAC is the host BMC's MAC (the first BMC's when none is marked
	// host); "" when the component has no BMC.
	HostMAC MAC
	// DPUs are the component's DPU BMCs, ordered by MAC.
	DPUs []DPUBMC
	// UpdatedAt is the row's version: ApplySync skips a row that changed
	// since it was read.
	UpdatedAt time.Time
}

// SyncComponentPages hands f the live components of type t in ID order,
// at most size at a time, each with its DPUs ordered by MAC, read through
// dbtx a page per statement. Each page is read whole before f runs, so f
// may write through the same transaction; the next page is read after f
// returns (rows f wrote are read as they now are). f must not keep the
// page's slice, which holds the next page; it may keep its components'
// values. An error of f stops the pages and is returned as it is.
func (s *Service) SyncComponentPages(ctx context.Context, dbtx db.DBTX, t ComponentType, size int, f func([]SyncComponent) error) error {
	var after uuid.UUID
	page := make([]SyncComponent, 0, size)
	for {
		rows, err := s.q.ComponentSyncPage(ctx, dbtx, dbsqlc.ComponentSyncPageParams{Type: string(t), After: after, PageSize: int32(size)})
		if err != nil {
			return fmt.Errorf("list %s components for sync: %w", t, err)
		}
		page = page[:0]
		for i := range rows {
			page = append(page, syncComponentOf((*dbsqlc.ComponentSyncListRow)(&rows[i])))
		}
		if len(page) == 0 {
			return nil
		}
		if err := f(page); err != nil {
			return err
		}
		if len(page) < size {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

// syncComponentOf is a ComponentSyncList row as the sync and the mirror
// read it.
func syncComponentOf(r *dbsqlc.ComponentSyncListRow) SyncComponent {
	c := SyncComponent{
		ID: r.ID, RackID: r.RackID, RackExternalID: r.RackExternalID, Name: r.Name, SerialNumber: r.SerialNumber,
		ExternalID: deref(r.ExternalID), FirmwareVersion: r.FirmwareVersion, PowerState: r.PowerState,
		Position: Position{SlotID: r.SlotID, TrayIdx: r.TrayIdx, HostID: r.HostID},
		Status:   OperationStatus{Phase: r.OperationPhase, Reason: r.OperationReason, Blocked: r.BlockedOperations},
		Health:   r.Health, Description: r.Description, HostMAC: MAC(r.HostMac), UpdatedAt: r.UpdatedAt,
	}
	if len(r.DpuMacs) > 0 {
		c.DPUs = make([]DPUBMC, len(r.DpuMacs))
		for k, mac := range r.DpuMacs {
			c.DPUs[k] = DPUBMC{MAC: MAC(mac), IP: r.DpuIps[k]}
		}
	}
	return c
}

// SyncUpdate is the synced state of one component: ApplySync writes every
// field (it is the component's current values with the sync's changes).
type SyncUpdate struct {
	ID              uuid.UUID
	UpdatedAt       time.Time // as read by SyncComponentPages
	ExternalID      string
	PowerState      string
	FirmwareVersion string
	Status          OperationStatus
	Health          json.RawMessage // nil: none
	Description     *string
}

type syncUpdateRow struct {
	ID              uuid.UUID       `json:"id"`
	UpdatedAt       time.Time       `json:"updated_at"`
	ExternalID      string          `json:"external_id"`
	PowerState      string          `json:"power_state"`
	FirmwareVersion string          `json:"firmware_version"`
	Phase           string          `json:"phase"`
	Reason          string          `json:"reason"`
	Blocked         []string        `json:"blocked"`
	Health          json.RawMessage `json:"health"`
	Description     *string         `json:"description"`
}

// ApplySync writes ups through tx, writeChunk rows a statement, and returns
// how many rows it changed. A component deleted, or changed by anyone else
// since SyncComponentPages read it, is left alone (the next cycle sees it
// afresh).
func (s *Service) ApplySync(ctx context.Context, tx pgx.Tx, ups []SyncUpdate) (int64, error) {
	var n int64
	for chunk := range slices.Chunk(ups, writeChunk) {
		rows := make([]syncUpdateRow, len(chunk))
		for i, u := range chunk {
			blocked := u.Status.Blocked
			if blocked == nil {
				blocked = []string{}
			}
			health := u.Health
			if len(health) == 0 {
				health = json.RawMessage("null")
			}
			rows[i] = syncUpdateRow{
				ID: u.ID, UpdatedAt: u.UpdatedAt, ExternalID: u.ExternalID, PowerState: u.PowerState, FirmwareVersion: u.FirmwareVersion,
				Phase: cmpOr(u.Status.Phase, "unknown"), Reason: u.Status.Reason, Blocked: blocked, Health: health, Description: u.Description,
			}
		}
		data, err := json.Marshal(rows)
		if err != nil {
			return 0, fmt.Errorf("encode sync updates: %w", err)
		}
		k, err := s.q.SyncComponentUpdate(ctx, tx, data)
		if err != nil {
			return 0, fmt.Errorf("apply sync updates: %w", err)
		}
		n += k
	}
	return n, nil
}

// writeChunk is how many rows one batched sync or mirror statement
// carries: a cycle that writes a whole site (the first, linking one wrote
// 213,000 rows at 3,000 racks) sends several statements in its
// transaction, not one JSON document of tens of megabytes (issue 29).
const writeChunk = 2000

// execChunked encodes rows writeChunk at a time as a JSON list, runs f on
// each and returns the sum of what f returned.
func execChunked[T any](rows []T, f func([]byte) (int64, error)) (int64, error) {
	var n int64
	for chunk := range slices.Chunk(rows, writeChunk) {
		data, err := json.Marshal(chunk)
		if err != nil {
			return 0, err
		}
		k, err := f(data)
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

// SyncRack is a live rack as the sync reads it.
type SyncRack struct {
	ID          uuid.UUID
	ExternalID  string
	Health      json.RawMessage // nil: none known
	GroupID     string
	NVLDomainID *uuid.UUID
}

// SyncRacks returns every live rack, ordered by ID.
func (s *Service) SyncRacks(ctx context.Context, dbtx db.DBTX) ([]SyncRack, error) {
	rows, err := s.q.SyncRackList(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list racks for sync: %w", err)
	}
	out := make([]SyncRack, len(rows))
	for i, r := range rows {
		out[i] = SyncRack{ID: r.ID, ExternalID: deref(r.ExternalID), Health: r.Health, GroupID: deref(r.RackGroupID), NVLDomainID: r.NVLDomainID}
	}
	return out, nil
}

// RackHealth is a rack's new health report (nil clears it).
type RackHealth struct {
	ID     uuid.UUID       `json:"id"`
	Health json.RawMessage `json:"health"`
}

// SetRackHealth writes the health of the racks in hs through tx and returns
// how many rows changed.
func (s *Service) SetRackHealth(ctx context.Context, tx pgx.Tx, hs []RackHealth) (int64, error) {
	if len(hs) == 0 {
		return 0, nil
	}
	for i := range hs {
		if len(hs[i].Health) == 0 {
			hs[i].Health = json.RawMessage("null")
		}
	}
	data, err := json.Marshal(hs)
	if err != nil {
		return 0, fmt.Errorf("encode rack health: %w", err)
	}
	n, err := s.q.SyncRackSetHealth(ctx, tx, data)
	if err != nil {
		return 0, fmt.Errorf("set rack health: %w", err)
	}
	return n, nil
}

// TopologyGroup is one Core rack group as observed: the Flow racks in it
// and the NMX-C cluster its switches report. KeepCluster leaves the
// domain's cluster as it is (the observation was invalid or conflicting).
type TopologyGroup struct {
	GroupID     string
	Racks       []uuid.UUID
	ClusterID   *uuid.UUID
	KeepCluster bool
}

// ApplyTopology makes every group an NVLink domain (external ID = group
// ID, created unnamed when missing, resurrected when soft-deleted), sets
// its NMX-C cluster, and assigns each group's racks to it, through tx. A
// discovered domain (one with an external ID) outside groups that no live
// rack is in any more is soft-deleted. Only rows that differ are written;
// it returns how many. Manually created domains and racks in no group are
// not touched.
func (s *Service) ApplyTopology(ctx context.Context, tx pgx.Tx, groups []TopologyGroup) (int64, error) {
	doms, err := s.q.SyncDomainList(ctx, tx)
	if err != nil {
		return 0, fmt.Errorf("list domains for sync: %w", err)
	}
	type dom struct {
		id      uuid.UUID
		cluster *uuid.UUID
		deleted bool
	}
	byExt := make(map[string]dom, len(doms))
	live := 0
	for _, d := range doms {
		byExt[deref(d.ExternalID)] = dom{id: d.ID, cluster: d.NmxcClusterID, deleted: d.DeletedAt != nil}
		if d.DeletedAt == nil {
			live++
		}
	}
	if len(groups) == 0 && live == 0 {
		return 0, nil
	}
	racks, err := s.SyncRacks(ctx, tx)
	if err != nil {
		return 0, err
	}
	rackByID := make(map[uuid.UUID]SyncRack, len(racks))
	for _, r := range racks {
		rackByID[r.ID] = r
	}
	var changed int64
	type assign struct {
		ID       uuid.UUID `json:"id"`
		DomainID uuid.UUID `json:"domain_id"`
		GroupID  string    `json:"group_id"`
	}
	var assigns []assign
	keep := make([]uuid.UUID, 0, len(groups))
	for _, g := range groups {
		d, ok := byExt[g.GroupID]
		if ok && d.deleted {
			n, err := s.q.SyncDomainResurrect(ctx, tx, d.id)
			if err != nil {
				return 0, fmt.Errorf("resurrect domain %s: %w", d.id, err)
			}
			changed += n
		}
		switch {
		case !ok:
			d = dom{id: uuid.New()}
			if !g.KeepCluster {
				d.cluster = g.ClusterID
			}
			if err := s.q.SyncDomainInsert(ctx, tx, dbsqlc.SyncDomainInsertParams{ID: d.id, ExternalID: &g.GroupID, NmxcClusterID: d.cluster}); err != nil {
				return 0, fmt.Errorf("create domain for rack group %s: %w", g.GroupID, err)
			}
			changed++
		case !g.KeepCluster && !equalUUIDPtr(d.cluster, g.ClusterID):
			n, err := s.q.SyncDomainSetCluster(ctx, tx, dbsqlc.SyncDomainSetClusterParams{ID: d.id, NmxcClusterID: g.ClusterID})
			if err != nil {
				return 0, fmt.Errorf("set cluster of domain %s: %w", d.id, err)
			}
			changed += n
		}
		keep = append(keep, d.id)
		for _, id := range g.Racks {
			r, ok := rackByID[id]
			if !ok {
				continue
			}
			if r.GroupID != g.GroupID || r.NVLDomainID == nil || *r.NVLDomainID != d.id {
				assigns = append(assigns, assign{ID: id, DomainID: d.id, GroupID: g.GroupID})
			}
		}
	}
	if len(assigns) > 0 {
		data, err := json.Marshal(assigns)
		if err != nil {
			return 0, fmt.Errorf("encode rack groups: %w", err)
		}
		n, err := s.q.SyncRackSetGroup(ctx, tx, data)
		if err != nil {
			return 0, fmt.Errorf("assign racks to domains: %w", err)
		}
		changed += n
	}
	// After the assignments: a discovered domain no group names and no
	// live rack is in was left empty by a regrouping.
	n, err := s.q.SyncDomainSoftDeleteEmpty(ctx, tx, keep)
	if err != nil {
		return 0, fmt.Errorf("soft-delete empty domains: %w", err)
	}
	return changed + n, nil
}

func equalUUIDPtr(a, b *uuid.UUID) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// RackPhase aggregates the operation phases of a rack's live components
// into the rack's operation status: no components → "unknown"; otherwise
// the first of error, deleting, initializing, unknown and in_use that any
// component is in; "ready" when all are ready.
func RackPhase(phases []string) string {
	if len(phases) == 0 {
		return "unknown"
	}
	has := map[string]bool{}
	for _, p := range phases {
		has[p] = true
	}
	for _, p := range []string{"error", "deleting", "initializing", "unknown", "in_use"} {
		if has[p] {
			return p
		}
	}
	return "ready"
}

// RackPhases returns the aggregated operation phase (RackPhase) of each
// rack in ids; racks without live components are "unknown".
func (s *Service) RackPhases(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]string, error) {
	out := make(map[uuid.UUID]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.q.RackPhases(ctx, dbtx, ids)
	if err != nil {
		return nil, fmt.Errorf("rack phases: %w", err)
	}
	for _, id := range ids {
		out[id] = "unknown"
	}
	for _, r := range rows {
		out[r.RackID] = RackPhase(r.Phases)
	}
	return out, nil
}
