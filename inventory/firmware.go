package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// SubVersions is a device's installed firmware per sub-component, named as
// Core names them ("bmc", "bios", "nvos", "pmc", ...): each holds the
// versions of every instance of it (two NICs: two versions).
type SubVersions map[string][]string

// Equal reports whether v and o hold the same versions.
func (v SubVersions) Equal(o SubVersions) bool {
	return maps.EqualFunc(v, o, func(a, b []string) bool { return slices.Equal(a, b) })
}

// FirmwareReading is one device's installed versions as read from Core.
type FirmwareReading struct {
	ComponentID uuid.UUID
	Versions    SubVersions
}

// InstalledFirmware is what Flow last heard from Core of one device's
// installed firmware. Reported says Core's last read of the device's type
// answered for it; SeenAt is when the versions were last seen (the last
// read while reported); ChangedAt when they last changed.
type InstalledFirmware struct {
	Versions  SubVersions
	Reported  bool
	SeenAt    time.Time
	ChangedAt time.Time
}

// maxDecoded bounds the distinct stored version sets RecordFirmware keeps
// decoded while it compares.
const maxDecoded = 4096

// RecordFirmware stores what one successful read of typ's installed
// versions at readAt found: readings for the devices Core answered for,
// and absent, the live devices of typ it did not answer for. Only rows
// whose content changes are written, so a read that finds nothing new
// writes one row (the type's read time). It returns the device rows
// written.
func (s *Service) RecordFirmware(ctx context.Context, tx pgx.Tx, typ ComponentType, readAt time.Time, readings []FirmwareReading, absent []uuid.UUID) (int64, error) {
	stored, err := s.q.FirmwareInstalledListByType(ctx, tx, string(typ))
	if err != nil {
		return 0, fmt.Errorf("list installed firmware: %w", err)
	}
	type storedRow struct {
		versions SubVersions
		reported bool
	}
	have := make(map[uuid.UUID]storedRow, len(stored))
	// A site's devices of one type share a few sets of versions: each
	// distinct stored value is decoded once (a cycle reads every row).
	decoded := map[string]SubVersions{}
	for _, r := range stored {
		v, ok := decoded[string(r.Versions)]
		if !ok {
			if err := json.Unmarshal(r.Versions, &v); err != nil {
				return 0, fmt.Errorf("installed firmware of %s: %w", r.ComponentID, err)
			}
			if len(decoded) < maxDecoded {
				decoded[string(r.Versions)] = v
			}
		}
		have[r.ComponentID] = storedRow{v, r.Reported}
	}
	type upsert struct {
		ComponentID uuid.UUID   `json:"component_id"`
		Versions    SubVersions `json:"versions"`
	}
	var rows []upsert
	for _, rd := range readings {
		v := rd.Versions
		if v == nil {
			v = SubVersions{}
		}
		if h, ok := have[rd.ComponentID]; ok && h.reported && h.versions.Equal(v) {
			continue
		}
		rows = append(rows, upsert{rd.ComponentID, v})
	}
	var gone []uuid.UUID
	for _, id := range absent {
		if h, ok := have[id]; ok && h.reported {
			gone = append(gone, id)
		}
	}
	var n int64
	if len(gone) > 0 {
		// Before the read time moves: the devices were last seen at the
		// type's previous read.
		m, err := s.q.FirmwareInstalledMarkUnreported(ctx, tx, dbsqlc.FirmwareInstalledMarkUnreportedParams{Type: string(typ), IDs: gone})
		if err != nil {
			return 0, fmt.Errorf("mark unreported firmware: %w", err)
		}
		n += m
	}
	if len(rows) > 0 {
		b, err := json.Marshal(rows)
		if err != nil {
			return 0, err
		}
		m, err := s.q.FirmwareInstalledUpsert(ctx, tx, dbsqlc.FirmwareInstalledUpsertParams{Rows: b, ReadAt: readAt})
		if err != nil {
			return 0, fmt.Errorf("record installed firmware: %w", err)
		}
		n += m
	}
	if err := s.q.FirmwareReadSet(ctx, tx, dbsqlc.FirmwareReadSetParams{ComponentType: string(typ), ReadAt: readAt}); err != nil {
		return 0, fmt.Errorf("record firmware read: %w", err)
	}
	return n, nil
}

// RecordFirmwareRead records a successful read of typ's installed
// versions at readAt that found exactly what is stored: it writes the
// type's read time alone (RecordFirmware writes it too). The caller must
// know that nothing differs; the inventory sync does when it read the same
// as at its last RecordFirmware of typ and FirmwareGenerations' Firmware
// has not moved since (no statement wrote component_firmware), which
// spares it listing the type's stored versions every cycle.
func (s *Service) RecordFirmwareRead(ctx context.Context, tx pgx.Tx, typ ComponentType, readAt time.Time) error {
	if err := s.q.FirmwareReadSet(ctx, tx, dbsqlc.FirmwareReadSetParams{ComponentType: string(typ), ReadAt: readAt}); err != nil {
		return fmt.Errorf("record firmware read: %w", err)
	}
	return nil
}

// RecordFirmwareReadIfUnchanged records, through tx, that typ's installed
// versions were read at readAt (RecordFirmwareRead) when the
// installed-firmware generation (FirmwareGeneration.Firmware) is still
// firmware: one statement where FirmwareGenerations and
// RecordFirmwareRead are two. recorded is false, and nothing written, when
// the generation moved.
func (s *Service) RecordFirmwareReadIfUnchanged(ctx context.Context, tx pgx.Tx, typ ComponentType, readAt time.Time, firmware int64) (recorded bool, err error) {
	r, err := s.q.FirmwareReadSetIfUnchanged(ctx, tx, dbsqlc.FirmwareReadSetIfUnchangedParams{ComponentType: string(typ), ReadAt: readAt, Firmware: firmware})
	if err != nil {
		return false, fmt.Errorf("record firmware read: %w", err)
	}
	return r.Recorded, nil
}

// InstalledFirmware returns what Flow last heard of the component's
// installed firmware; ok is false when Core never reported it.
func (s *Service) InstalledFirmware(ctx context.Context, dbtx db.DBTX, componentID uuid.UUID) (InstalledFirmware, bool, error) {
	r, err := s.q.FirmwareInstalledGet(ctx, dbtx, componentID)
	if errors.Is(err, pgx.ErrNoRows) {
		return InstalledFirmware{}, false, nil
	} else if err != nil {
		return InstalledFirmware{}, false, fmt.Errorf("get installed firmware: %w", err)
	}
	out := InstalledFirmware{Reported: r.Reported, SeenAt: r.SeenAt, ChangedAt: r.ChangedAt}
	if err := json.Unmarshal(r.Versions, &out.Versions); err != nil {
		return InstalledFirmware{}, false, fmt.Errorf("installed firmware of %s: %w", componentID, err)
	}
	if r.Reported && r.TypeReadAt != nil && r.TypeReadAt.After(out.SeenAt) {
		out.SeenAt = *r.TypeReadAt
	}
	return out, true, nil
}

// FirmwareDevice is one compute tray, NVLink switch or power shelf with
// what a compliance report needs. Installed is nil when Core never
// reported the device's versions.
type FirmwareDevice struct {
	ID           uuid.UUID
	Name         string
	Type         ComponentType
	Manufacturer string
	Model        string
	ExternalID   string
	RackID       *uuid.UUID
	RackName     string
	RackProfile  string
	// Hall is the rack's room; Row the row its position names ("" none).
	Hall, Row  string
	DomainID   *uuid.UUID
	DomainName string
	Installed  *InstalledFirmware
}

// FirmwareDeviceFilter narrows FirmwareDevices: Type "" is every type,
// no RackIDs every rack, nil DomainID every domain.
type FirmwareDeviceFilter struct {
	Type         ComponentType
	RackIDs      []uuid.UUID
	DomainID     *uuid.UUID
	ComponentIDs []uuid.UUID // none: every component
}

// FirmwareGeneration identifies a state of what FirmwareDevices returns:
// while FirmwareGenerations returns the same value, the devices, their
// racks and their installed versions have not changed (their seen-at
// times may have: they follow each type's last read).
type FirmwareGeneration struct{ Inventory, Firmware int64 }

// FirmwareGenerations returns the current FirmwareGeneration.
func (s *Service) FirmwareGenerations(ctx context.Context, dbtx db.DBTX) (FirmwareGeneration, error) {
	g, err := s.q.FirmwareGenerations(ctx, dbtx)
	if err != nil {
		return FirmwareGeneration{}, fmt.Errorf("read firmware generations: %w", err)
	}
	return FirmwareGeneration{Inventory: g.Inventory, Firmware: g.Firmware}, nil
}

// MarkFirmwareReadDue makes the installed versions of types due at the
// next sync cycle, whatever its read interval (a firmware task ended).
func (s *Service) MarkFirmwareReadDue(ctx context.Context, tx pgx.Tx, types []ComponentType) error {
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = string(t)
	}
	if err := s.q.FirmwareReadMarkDue(ctx, tx, names); err != nil {
		return fmt.Errorf("mark firmware reads due: %w", err)
	}
	return nil
}

// FirmwareReadsDue returns the types whose versions MarkFirmwareReadDue
// made due since their last read.
func (s *Service) FirmwareReadsDue(ctx context.Context, dbtx db.DBTX) (map[ComponentType]bool, error) {
	types, err := s.q.FirmwareReadDueList(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list firmware reads due: %w", err)
	}
	out := make(map[ComponentType]bool, len(types))
	for _, t := range types {
		out[ComponentType(t)] = true
	}
	return out, nil
}

// FirmwareReads returns, per component type, when the sync last read its
// installed versions.
func (s *Service) FirmwareReads(ctx context.Context, dbtx db.DBTX) (map[ComponentType]time.Time, error) {
	reads, err := s.q.FirmwareReadList(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list firmware reads: %w", err)
	}
	out := make(map[ComponentType]time.Time, len(reads))
	for _, r := range reads {
		out[ComponentType(r.ComponentType)] = r.ReadAt
	}
	return out, nil
}

// FirmwareDevices returns the live compute trays, NVLink switches and
// power shelves of live racks (and rack-less ones) that f selects, in no
// order (SortFirmwareDevices orders them), with their installed firmware.
func (s *Service) FirmwareDevices(ctx context.Context, dbtx db.DBTX, f FirmwareDeviceFilter) ([]FirmwareDevice, error) {
	reads, err := s.q.FirmwareReadList(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list firmware reads: %w", err)
	}
	readAt := make(map[string]time.Time, len(reads))
	for _, r := range reads {
		readAt[r.ComponentType] = r.ReadAt
	}
	racks, err := s.firmwareRacks(ctx, dbtx, f.RackIDs)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.FirmwareDeviceList(ctx, dbtx, dbsqlc.FirmwareDeviceListParams{Type: string(f.Type), RackIDs: f.RackIDs, DomainID: f.DomainID, ComponentIDs: f.ComponentIDs})
	if err != nil {
		return nil, fmt.Errorf("list firmware devices: %w", err)
	}
	out := make([]FirmwareDevice, 0, len(rows))
	for _, r := range rows {
		d := FirmwareDevice{
			ID: r.ID, Name: r.Name, Type: ComponentType(r.Type), Manufacturer: r.Manufacturer, Model: r.Model,
			ExternalID: r.ExternalID, RackID: r.RackID,
		}
		racks.place(&d)
		if r.Versions != nil && r.Reported != nil && r.SeenAt != nil {
			in := &InstalledFirmware{Reported: *r.Reported, SeenAt: *r.SeenAt}
			if in.Versions, err = parseSubVersions(r.Versions); err != nil {
				return nil, fmt.Errorf("installed firmware of %s: %w", r.ID, err)
			}
			if t, ok := readAt[r.Type]; ok && in.Reported && t.After(in.SeenAt) {
				in.SeenAt = t
			}
			d.Installed = in
		}
		out = append(out, d)
	}
	return out, nil
}

// FirmwareDeviceInventory returns every device FirmwareDevices returns
// with no filter, in no order, without their installed firmware
// (Installed is nil, ExternalID empty): a query without the installed
// versions, for a caller that reads them apart (FirmwareTable), as the
// compliance snapshot does when only one of the two changed.
func (s *Service) FirmwareDeviceInventory(ctx context.Context, dbtx db.DBTX) ([]FirmwareDevice, error) {
	racks, err := s.firmwareRacks(ctx, dbtx, nil)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.FirmwareDeviceInventoryList(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list firmware devices: %w", err)
	}
	out := make([]FirmwareDevice, len(rows))
	for i, r := range rows {
		out[i] = FirmwareDevice{ID: r.ID, Name: r.Name, Type: ComponentType(r.Type), Manufacturer: r.Manufacturer, Model: r.Model, RackID: r.RackID}
		racks.place(&out[i])
	}
	return out, nil
}

// firmwareRackInfo is what a FirmwareDevice holds of its rack.
type firmwareRackInfo struct {
	name, profile, hall, row string
	domainID                 *uuid.UUID
	domainName               string
}

type firmwareRackMap map[uuid.UUID]*firmwareRackInfo

// firmwareRacks reads the live racks of ids (none: all) as FirmwareDevices
// places its devices in them.
func (s *Service) firmwareRacks(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (firmwareRackMap, error) {
	racks, err := s.q.FirmwareRackList(ctx, dbtx, ids)
	if err != nil {
		return nil, fmt.Errorf("list firmware racks: %w", err)
	}
	out := make(firmwareRackMap, len(racks))
	for _, r := range racks {
		row, _ := SplitPosition(r.LocationPosition)
		out[r.ID] = &firmwareRackInfo{name: r.Name, profile: r.RackProfile, hall: r.LocationRoom, row: row, domainID: r.NVLDomainID, domainName: r.DomainName}
	}
	return out, nil
}

// place fills in d's rack fields from its RackID.
func (m firmwareRackMap) place(d *FirmwareDevice) {
	if d.RackID == nil {
		return
	}
	if ri := m[*d.RackID]; ri != nil {
		d.RackName, d.RackProfile, d.Hall, d.Row, d.DomainID, d.DomainName = ri.name, ri.profile, ri.hall, ri.row, ri.domainID, ri.domainName
	}
}

// FirmwareTable is every stored installed-firmware row, compactly: the
// distinct version sets once each, and per component which of them it
// runs.
type FirmwareTable struct {
	// Sets are the distinct version sets; they are shared: do not change
	// them.
	Sets []SubVersions
	// ByComponent holds each component's stored row (soft-deleted
	// components' too).
	ByComponent map[uuid.UUID]StoredFirmware
}

// StoredFirmware is one component's stored installed firmware: its
// versions are FirmwareTable.Sets[Set]. SeenAt is as stored: a reported
// device was also seen at its type's last read (FirmwareReads).
type StoredFirmware struct {
	Set      int32
	Reported bool
	SeenAt   time.Time
}

// FirmwareTable returns every stored installed-firmware row, each distinct
// stored value decoded once.
func (s *Service) FirmwareTable(ctx context.Context, dbtx db.DBTX) (FirmwareTable, error) {
	rows, err := s.q.FirmwareInstalledList(ctx, dbtx)
	if err != nil {
		return FirmwareTable{}, fmt.Errorf("list installed firmware: %w", err)
	}
	out := FirmwareTable{ByComponent: make(map[uuid.UUID]StoredFirmware, len(rows))}
	sets := map[string]int32{}
	for _, r := range rows {
		k, ok := sets[string(r.Versions)]
		if !ok {
			v, err := parseSubVersions(r.Versions)
			if err != nil {
				return FirmwareTable{}, fmt.Errorf("installed firmware of %s: %w", r.ComponentID, err)
			}
			k = int32(len(out.Sets))
			out.Sets = append(out.Sets, v)
			sets[string(r.Versions)] = k
		}
		out.ByComponent[r.ComponentID] = StoredFirmware{Set: k, Reported: r.Reported, SeenAt: r.SeenAt}
	}
	return out, nil
}

// parseSubVersions decodes a stored versions object, {"bmc": ["2.0"],
// "nic": ["1.1", "1.1"]}. The common shape (no escapes) is read by hand,
// several times faster than encoding/json on a site's 100,000 rows; any
// other falls back to encoding/json.
func parseSubVersions(b []byte) (SubVersions, error) {
	if v, ok := scanSubVersions(b); ok {
		return v, nil
	}
	var v SubVersions
	err := json.Unmarshal(b, &v)
	return v, err
}

func scanSubVersions(b []byte) (SubVersions, bool) {
	i := 0
	skip := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
			i++
		}
	}
	expect := func(c byte) bool {
		skip()
		if i < len(b) && b[i] == c {
			i++
			return true
		}
		return false
	}
	str := func() (string, bool) {
		skip()
		if i >= len(b) || b[i] != '"' {
			return "", false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' {
				return "", false
			}
			j++
		}
		if j >= len(b) {
			return "", false
		}
		s := string(b[i+1 : j])
		i = j + 1
		return s, true
	}
	out := SubVersions{}
	if !expect('{') {
		return nil, false
	}
	if expect('}') {
		return out, true
	}
	for {
		k, ok := str()
		if !ok || !expect(':') || !expect('[') {
			return nil, false
		}
		var vs []string
		if !expect(']') {
			for {
				v, ok := str()
				if !ok {
					return nil, false
				}
				vs = append(vs, v)
				if expect(']') {
					break
				}
				if !expect(',') {
					return nil, false
				}
			}
		}
		out[k] = vs
		if expect('}') {
			skip()
			return out, i == len(b)
		}
		if !expect(',') {
			return nil, false
		}
	}
}

// SortFirmwareDevices orders devices by rack name, then name, then ID
// (bytewise).
func SortFirmwareDevices[T any](ds []T, dev func(*T) *FirmwareDevice) {
	slices.SortFunc(ds, func(x, y T) int {
		a, b := dev(&x), dev(&y)
		if c := strings.Compare(a.RackName, b.RackName); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return bytes.Compare(a.ID[:], b.ID[:])
	})
}

var rowPosition = regexp.MustCompile(`(?i)^\s*(?:row)?[-_ ]?([a-z]*\d+|[a-z]+)\s*[-_/ ,.]+\s*(?:pos(?:ition)?|slot|rack|p)?[-_ ]?(\d+)\s*$`)

var rowOnly = regexp.MustCompile(`(?i)^\s*(?:row)?[-_ ]?([a-z]*\d+|[a-z]+)\s*$`)

// RowName is row as SplitPosition names rows: "row-03", "ROW 03" and "03"
// are all "03". A name it cannot read is returned trimmed.
func RowName(row string) string {
	if m := rowOnly.FindStringSubmatch(row); m != nil {
		return m[1]
	}
	return strings.TrimSpace(row)
}

// SplitPosition splits a rack position into its row and its place in the
// row: "row-02-pos-03", "R2-3", "B/12" and the like. A position it cannot
// split is all place, in an unnamed row ("").
func SplitPosition(p string) (row, place string) {
	if m := rowPosition.FindStringSubmatch(p); m != nil {
		return m[1], m[2]
	}
	return "", p
}
