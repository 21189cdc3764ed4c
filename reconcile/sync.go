package reconcile

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/reconcile/internal/dbsqlc"
)

// Core is what the inventory sync reads from NICo Core; *nico.Client
// satisfies it.
type Core interface {
	Configured() bool
	MachineIDs(ctx context.Context, includeDPUs bool, rackID string) ([]string, error)
	Machines(ctx context.Context, ids []string) ([]nico.Machine, error)
	PowerStates(ctx context.Context, ids []string) (map[string]nico.PowerState, error)
	Positions(ctx context.Context, ids []string) (map[string]nico.Position, error)
	Inventory(ctx context.Context, t nico.Target) ([]nico.Inventory, error)
	FirmwareVersionsRaw(ctx context.Context, machineIDs []string) ([]nico.VersionsEntry, error)
	SwitchIDs(ctx context.Context) ([]string, error)
	Switches(ctx context.Context, ids []string) ([]nico.Switch, error)
	PowerShelfIDs(ctx context.Context) ([]string, error)
	PowerShelves(ctx context.Context, ids []string) ([]nico.PowerShelf, error)
	Racks(ctx context.Context, ids []string) ([]nico.Rack, error)
	ExpectedRacks(ctx context.Context) ([]nico.ExpectedRack, error)
	ExpectedMachines(ctx context.Context) ([]nico.ExpectedMachine, error)
	ExpectedSwitches(ctx context.Context) ([]nico.ExpectedSwitch, error)
	ExpectedPowerShelves(ctx context.Context) ([]nico.ExpectedPowerShelf, error)
}

// Parts of a sync cycle, in the order a SyncRun lists them (SyncPart.Name);
// the first three run side by side (Run).
const (
	PartCompute    = "compute"
	PartNVSwitch   = "nvswitch"
	PartPowerShelf = "powershelf"
	PartTopology   = "nvlink_topology"
	PartRackHealth = "rack_health"
)

// Triggers of a cycle.
const (
	TriggerSchedule = "schedule"
	TriggerManual   = "manual"
)

// SyncPart is the outcome of one part of a cycle. A failed part changed
// nothing and kept its previous drift rows.
type SyncPart struct {
	Name    string `json:"name"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
	Changed int64  `json:"changed"` // inventory rows written
	// Inserted, SoftDeleted, Adopted and Resurrected break down an
	// expected-inventory mirror part's Changed (adopted and resurrected
	// rows are updates).
	Inserted    int64 `json:"inserted,omitempty"`
	SoftDeleted int64 `json:"soft_deleted,omitempty"`
	Adopted     int   `json:"adopted,omitempty"`
	Resurrected int   `json:"resurrected,omitempty"`
	Drifts      int   `json:"drifts"` // drift rows now held (component types)
	// DriftChanged says the part replaced its drift rows.
	DriftChanged bool `json:"drift_changed,omitempty"`
	// Warnings are best-effort reads that failed (power, inventory…).
	Warnings []string `json:"warnings,omitempty"`
	// Duration is how long the part took.
	Duration time.Duration `json:"duration"`
}

// SyncRun is one sync cycle.
type SyncRun struct {
	ID        int64
	StartedAt time.Time
	Duration  time.Duration
	Trigger   string
	Parts     []SyncPart
}

// Changed returns the inventory rows the cycle wrote over all parts.
func (r SyncRun) Changed() int64 {
	var n int64
	for _, p := range r.Parts {
		n += p.Changed
	}
	return n
}

// ErrNoSyncYet: no sync cycle has been recorded.
var ErrNoSyncYet = errors.New("no inventory sync has run yet")

// SyncConfig configures a Syncer.
type SyncConfig struct {
	Pool   *pgxpool.Pool
	Inv    *inventory.Service
	Core   Core
	Logger *slog.Logger
	// Expected turns the expected-inventory mirror on
	// (FLOW_EXPECTED_INVENTORY_SYNC_ENABLED).
	Expected bool
	// Keep is how many cycles inventory_sync_run keeps (default 1000).
	// Observe, when set, hears of every cycle Run ends (metrics): err is
	// Run's error.
	Observe func(run SyncRun, err error)
	Keep    int
	// Page is how many Core devices, and how many of Flow's components, a
	// part reads at once (default DefaultSyncPage).
	Page int
	// HandOff is the most live components of a type whose listing the
	// expected mirror, when it wrote nothing, hands on to the type's
	// actual sync (default DefaultSyncHandOff; negative: none). A larger
	// type's actual sync reads its components again, a page at a time,
	// rather than hold the listing while it reads Core.
	HandOff int
	// FirmwareReadInterval is how often scheduled cycles read each type's
	// installed versions (FLOW_FIRMWARE_READ_INTERVAL): a scheduled cycle
	// reads a type's versions when its last successful read
	// (component_firmware_read) is at least this old, or it has none; a
	// manual cycle reads every type's. 0 reads them every cycle. Between
	// reads the stored versions and their seen-at times stay as they are,
	// so it must stay well below the compliance report's
	// FLOW_FIRMWARE_UNREPORTED_AFTER.
	FirmwareReadInterval time.Duration
	// OnDrift, when set, hears of each drift a cycle finds or no longer
	// finds, in the transaction that records it (app emits
	// flow.sync.drift_found and flow.sync.drift_cleared).
	OnDrift DriftFunc
}

// DefaultSyncPage is SyncConfig.Page's default: the details, DPUs,
// positions, power and exploration reports of one page of Core devices
// are read side by side and reduced to what the match needs before the
// next page is read, so a part holds one page of Core's replies, not its
// whole listing (issue 29).
const DefaultSyncPage = 1000

// DefaultSyncHandOff is SyncConfig.HandOff's default: every listing the
// mirror returns (inventory.MirrorLiveMax, 20,000 components). A listing
// handed on is held, beside the other types', until the type's actual
// sync has read all of Core (about 12 MiB at 20,000 rows) and saves
// reading the type again; a 3,000-rack site's types are read again
// instead, a page at a time (issue 29).
const DefaultSyncHandOff = inventory.MirrorLiveMax

// Syncer runs the inventory sync with NICo Core (docs/inventory-sync.md).
type Syncer struct {
	cfg SyncConfig
	q   *dbsqlc.Queries

	// recorded is, per component type, what this process's last
	// committed RecordFirmware of the type recorded (firmwareMemo).
	recordedMu sync.Mutex
	recorded   map[inventory.ComponentType]firmwareMemo

	// entries is, per compute host (Core ID), the set of installed
	// versions its ListComponentFirmwareVersions entry decoded to when
	// last read (entryMemo): an entry with the same bytes is not decoded
	// again. Read and written by the compute part only.
	entriesMu sync.Mutex
	entries   map[string]*entryMemo
	entryRead uint64 // the compute parts that read versions, for pruning the hosts gone
}

// entryMemo is what a compute host's versions entry decoded to: sum,
// the hash of the entry's bytes (versionsSeed: 64 bits, seeded at random
// per process, as the recording's sum in firmwareMemo), and the set it
// made, which nothing changes once made; id
// is the host's Core ID (the map's key, kept so that a hit makes no
// string) and read the compute part (Syncer.entryRead) that last saw it.
type entryMemo struct {
	id   string
	sum  uint64
	set  *versionSet
	read uint64
}

// firmwareMemo is what a part recorded of its type's installed versions:
// sum, the hash of the readings and absent devices it passed, and the
// installed-firmware generation (inventory.FirmwareGeneration.Firmware)
// after it committed. A later read with the same sum while the generation
// has not moved (no statement wrote component_firmware since) would write
// nothing: the part then records the read time alone
// (inventory.Service.RecordFirmwareRead) instead of listing the type's
// stored versions.
type firmwareMemo struct {
	sum uint64
	gen int64
}

func (s *Syncer) firmwareMemo(t inventory.ComponentType) (firmwareMemo, bool) {
	s.recordedMu.Lock()
	defer s.recordedMu.Unlock()
	m, ok := s.recorded[t]
	return m, ok
}

func (s *Syncer) setFirmwareMemo(t inventory.ComponentType, m firmwareMemo) {
	s.recordedMu.Lock()
	defer s.recordedMu.Unlock()
	if s.recorded == nil {
		s.recorded = map[inventory.ComponentType]firmwareMemo{}
	}
	s.recorded[t] = m
}

// NewSyncer returns a Syncer.
func NewSyncer(cfg SyncConfig) *Syncer {
	if cfg.Keep <= 0 {
		cfg.Keep = 1000
	}
	if cfg.Page <= 0 {
		cfg.Page = DefaultSyncPage
	}
	if cfg.HandOff == 0 {
		cfg.HandOff = DefaultSyncHandOff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Syncer{cfg: cfg, q: dbsqlc.New()}
}

// syncLockKey is the advisory lock that serialises cycles across processes
// (a manual RunSync waits for a scheduled cycle and vice versa).
const syncLockKey int64 = 0x466c6f7753796e63 // "FlowSync"

// Run runs one cycle: the expected-inventory mirror when configured
// (racks, then compute, NVLink switches and power shelves side by side),
// then compute, NVLink switches and power shelves side by side, then the
// observed NVLink topology and rack health. A failed
// Core call fails only its part (logged and recorded); nothing aborts the
// cycle. Each part writes in its own
// transaction. The cycle is recorded in inventory_sync_run. Run returns an
// error only when the cycle could not run or be recorded at all (database
// down, ctx cancelled).
func (s *Syncer) Run(ctx context.Context, trigger string) (run SyncRun, err error) {
	if s.cfg.Observe != nil {
		start := time.Now()
		defer func() {
			if run.Duration == 0 {
				run.Duration = time.Since(start)
			}
			if run.Trigger == "" {
				run.Trigger = trigger
			}
			s.cfg.Observe(run, err)
		}()
	}
	return s.run(ctx, trigger)
}

func (s *Syncer) run(ctx context.Context, trigger string) (SyncRun, error) {
	conn, err := s.cfg.Pool.Acquire(ctx)
	if err != nil {
		return SyncRun{}, fmt.Errorf("sync: acquire connection: %w", err)
	}
	defer conn.Release()
	if err := s.q.SyncLock(ctx, conn, syncLockKey); err != nil {
		return SyncRun{}, fmt.Errorf("sync: lock: %w", err)
	}
	defer func() { _ = s.q.SyncUnlock(context.WithoutCancel(ctx), conn, syncLockKey) }()

	run := SyncRun{StartedAt: time.Now().UTC().Truncate(time.Microsecond), Trigger: trigger}
	c := &cycle{s: s, now: run.StartedAt}
	c.readVersions = s.versionsDue(ctx, conn, trigger, run.StartedAt)
	// The parts of one type touch only that type's component and drift
	// rows, so the three types' parts run side by side: the expected
	// mirror's after its racks (their components need them), the actual
	// sync's after the mirror (it matches what the mirror wrote), then the
	// topology (it assigns compute trays and reads the switch listing) and
	// the rack health, which read every type.
	if s.cfg.Expected {
		run.Parts = append(run.Parts, c.part(ctx, PartExpectedRacks, c.expectedRacks))
		run.Parts = append(run.Parts, c.parallel(ctx,
			namedPart{PartExpectedCompute, c.expectedCompute},
			namedPart{PartExpectedNVSwitch, c.expectedSwitches},
			namedPart{PartExpectedPowerShelf, c.expectedShelves})...)
	}
	run.Parts = append(run.Parts, c.parallel(ctx,
		namedPart{PartCompute, c.compute},
		namedPart{PartNVSwitch, c.nvswitches},
		namedPart{PartPowerShelf, c.shelves})...)
	run.Parts = append(run.Parts, c.part(ctx, PartTopology, c.topology))
	run.Parts = append(run.Parts, c.part(ctx, PartRackHealth, c.rackHealth))
	run.Duration = time.Since(run.StartedAt)
	if ctx.Err() != nil {
		return run, ctx.Err()
	}
	parts, err := json.Marshal(run.Parts)
	if err != nil {
		return run, fmt.Errorf("sync: encode parts: %w", err)
	}
	run.ID, err = s.q.SyncRunInsert(ctx, s.cfg.Pool, dbsqlc.SyncRunInsertParams{
		StartedAt: run.StartedAt, FinishedAt: run.StartedAt.Add(run.Duration), Trigger: trigger, Parts: parts,
	})
	if err != nil {
		return run, fmt.Errorf("sync: record cycle: %w", err)
	}
	if _, err := s.q.SyncRunPrune(ctx, s.cfg.Pool, int32(s.cfg.Keep)); err != nil {
		s.cfg.Logger.WarnContext(ctx, "prune sync runs", "error", err.Error())
	}
	// A scheduled cycle that found nothing to do is not logged (it is
	// recorded, and an idle server stays quiet: docs/observability.md).
	if failed := failedParts(run.Parts); trigger != "schedule" || run.Changed() > 0 || len(failed) > 0 {
		s.cfg.Logger.InfoContext(ctx, "inventory sync", "trigger", trigger, "duration", run.Duration, "changed", run.Changed(), "failed_parts", failed)
	}
	return run, nil
}

func failedParts(ps []SyncPart) []string {
	var out []string
	for _, p := range ps {
		if !p.OK {
			out = append(out, p.Name)
		}
	}
	return out
}

// versionsDue returns the component types whose installed versions a
// cycle started at now by trigger reads (SyncConfig.FirmwareReadInterval).
// When the last reads cannot be read it reads them all.
func (s *Syncer) versionsDue(ctx context.Context, dbtx db.DBTX, trigger string, now time.Time) map[inventory.ComponentType]bool {
	types := []inventory.ComponentType{inventory.ComponentTypeCompute, inventory.ComponentTypeNVSwitch, inventory.ComponentTypePowerShelf}
	due := make(map[inventory.ComponentType]bool, len(types))
	var reads map[inventory.ComponentType]time.Time
	var marked map[inventory.ComponentType]bool
	if trigger != TriggerManual && s.cfg.FirmwareReadInterval > 0 {
		var err error
		if reads, err = s.cfg.Inv.FirmwareReads(ctx, dbtx); err == nil {
			// A firmware task ended since: its types are due now.
			marked, err = s.cfg.Inv.FirmwareReadsDue(ctx, dbtx)
		}
		if err != nil {
			s.cfg.Logger.WarnContext(ctx, "read firmware read times", "error", err.Error())
			reads = nil
		}
	}
	for _, t := range types {
		last, ok := reads[t]
		due[t] = reads == nil || !ok || marked[t] || now.Sub(last) >= s.cfg.FirmwareReadInterval
	}
	return due
}

// Latest returns the newest recorded cycle. Errors: ErrNoSyncYet.
func (s *Syncer) Latest(ctx context.Context) (SyncRun, error) {
	r, err := s.q.SyncRunLatest(ctx, s.cfg.Pool)
	if errors.Is(err, pgx.ErrNoRows) {
		return SyncRun{}, ErrNoSyncYet
	} else if err != nil {
		return SyncRun{}, fmt.Errorf("latest sync run: %w", err)
	}
	out := SyncRun{ID: r.ID, StartedAt: r.StartedAt, Duration: r.FinishedAt.Sub(r.StartedAt), Trigger: r.Trigger}
	if err := json.Unmarshal(r.Parts, &out.Parts); err != nil {
		return SyncRun{}, fmt.Errorf("decode sync run %d: %w", r.ID, err)
	}
	return out, nil
}

// cycle is the state one Run shares between its parts.
type cycle struct {
	s   *Syncer
	now time.Time
	// seenSwitches are the racks and NMX-C clusters of this cycle's switch
	// listing (nil when it failed), which the topology part reads.
	seenSwitches []switchSeen
	switchesOK   bool
	// racks is Core's view of Flow's racks with an external ID (read once
	// for topology and health; nil when it failed or was not read).
	racks    map[string]nico.Rack
	racksErr error
	flowRack []inventory.SyncRack
	// listed are the live components of the types whose mirror pass wrote
	// nothing this cycle, as that pass read them, when there were at most
	// SyncConfig.HandOff: the type's actual sync uses them instead of
	// listing the type again.
	listedMu sync.Mutex
	listed   map[inventory.ComponentType][]inventory.SyncComponent
	// readVersions are the types whose installed versions this cycle
	// reads (Syncer.versionsDue); the others' stay as recorded.
	readVersions map[inventory.ComponentType]bool
}

// setListed records the live components of t that the mirror read.
func (c *cycle) setListed(t inventory.ComponentType, comps []inventory.SyncComponent) {
	c.listedMu.Lock()
	defer c.listedMu.Unlock()
	if c.listed == nil {
		c.listed = map[inventory.ComponentType][]inventory.SyncComponent{}
	}
	c.listed[t] = comps
}

// takeListed returns the live components of t the mirror handed on this
// cycle, if it did; the cycle holds them no longer than the type's sync.
func (c *cycle) takeListed(t inventory.ComponentType) ([]inventory.SyncComponent, bool) {
	c.listedMu.Lock()
	defer c.listedMu.Unlock()
	comps, ok := c.listed[t]
	delete(c.listed, t)
	return comps, ok
}

// namedPart is a part of the cycle: its name and what it does.
type namedPart struct {
	name string
	f    func(context.Context, *SyncPart) error
}

// parallel runs ps side by side and returns their results in ps's order.
// The parts must not share state of the cycle (each touches its own
// component type).
func (c *cycle) parallel(ctx context.Context, ps ...namedPart) []SyncPart {
	out := make([]SyncPart, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { out[i] = c.part(ctx, p.name, p.f) })
	}
	wg.Wait()
	return out
}

func (c *cycle) part(ctx context.Context, name string, f func(context.Context, *SyncPart) error) (p SyncPart) {
	p.Name = name
	start := time.Now()
	defer func() { p.Duration = time.Since(start) }()
	if !c.s.cfg.Core.Configured() {
		p.Error = nico.ErrNotConfigured.Error()
		return p
	}
	if err := f(ctx, &p); err != nil {
		p.OK, p.Error = false, err.Error()
		p.Changed, p.DriftChanged = 0, false
		p.Inserted, p.SoftDeleted, p.Adopted, p.Resurrected = 0, 0, 0, 0
		c.s.cfg.Logger.WarnContext(ctx, "inventory sync part failed", "part", name, "error", err.Error())
		return p
	}
	p.OK = true
	for _, w := range p.Warnings {
		c.s.cfg.Logger.WarnContext(ctx, "inventory sync read failed", "part", name, "error", w)
	}
	return p
}

// drift is one drift row to persist.
type drift struct {
	kind       string // missing_in_actual, missing_in_expected, mismatch
	component  *uuid.UUID
	externalID string
	mac        string
	name       string
	serial     string
	firmware   string
	rackExt    string
	diffs      []backend.FieldDiff
}

type fieldDiffJSON struct {
	FieldName     string `json:"field_name"`
	ExpectedValue string `json:"expected_value"`
	ActualValue   string `json:"actual_value"`
}

func (d drift) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%v|%s|%s|%s|%s|%s|%s", d.kind, d.component, d.externalID, d.mac, d.name, d.serial, d.firmware, d.rackExt)
	for _, f := range d.diffs {
		fmt.Fprintf(&b, "|%s=%s/%s", f.Field, f.Expected, f.Actual)
	}
	return b.String()
}

func driftOfRow(r dbsqlc.ComponentDrift) drift {
	d := drift{kind: r.DriftType, component: r.ComponentID, externalID: deref(r.ExternalID), mac: r.MACAddress, name: r.Name,
		serial: r.SerialNumber, firmware: r.FirmwareVersion, rackExt: r.RackExternalID}
	var fs []fieldDiffJSON
	_ = json.Unmarshal(r.Diffs, &fs)
	for _, f := range fs {
		d.diffs = append(d.diffs, backend.FieldDiff{Field: f.FieldName, Expected: f.ExpectedValue, Actual: f.ActualValue})
	}
	return d
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// DriftChange is a drift of a component type that a cycle found (Found)
// or no longer finds: Kind is missing_in_actual, missing_in_expected or
// mismatch; Component is Flow's component when it has one; Fields name
// the mismatched fields.
type DriftChange struct {
	Found        bool
	Type         inventory.ComponentType
	Kind         string
	Component    *uuid.UUID
	Name         string
	ExternalID   string
	MAC          string
	RackExternal string
	Fields       []string
	CheckedAt    time.Time
}

// DriftFunc is told of the drift changes of one component type, through tx.
type DriftFunc func(ctx context.Context, tx pgx.Tx, changes []DriftChange) error

func (d drift) change(t inventory.ComponentType, found bool, at time.Time) DriftChange {
	c := DriftChange{Found: found, Type: t, Kind: d.kind, Component: d.component, Name: d.name, ExternalID: d.externalID, MAC: d.mac,
		RackExternal: d.rackExt, CheckedAt: at}
	for _, f := range d.diffs {
		c.Fields = append(c.Fields, f.Field)
	}
	return c
}

// driftChanges are the drifts of ds not in old (found) and of old not in
// ds (cleared), by their keys (oldKeys and newKeys, in their order).
func driftChanges(t inventory.ComponentType, old []drift, oldKeys []string, ds []drift, newKeys []string, at time.Time) []DriftChange {
	was := make(map[string]bool, len(old))
	for _, k := range oldKeys {
		was[k] = true
	}
	is := make(map[string]bool, len(ds))
	for _, k := range newKeys {
		is[k] = true
	}
	var out []DriftChange
	for i, d := range ds {
		if !was[newKeys[i]] {
			out = append(out, d.change(t, true, at))
		}
	}
	for i, d := range old {
		if !is[oldKeys[i]] {
			out = append(out, d.change(t, false, at))
		}
	}
	return out
}

// replaceDrift replaces t's drift rows with ds through tx when they differ
// from the stored ones, and reports whether it did.
func (c *cycle) replaceDrift(ctx context.Context, tx pgx.Tx, t inventory.ComponentType, ds []drift) (bool, error) {
	old, err := c.s.q.DriftListByType(ctx, tx, string(t))
	if err != nil {
		return false, fmt.Errorf("read %s drift: %w", t, err)
	}
	olds := make([]drift, len(old))
	oldKeys := make([]string, len(old))
	for i, r := range old {
		olds[i] = driftOfRow(r)
		oldKeys[i] = olds[i].key()
	}
	newKeys := make([]string, len(ds))
	for i, d := range ds {
		newKeys[i] = d.key()
	}
	if slices.Equal(slices.Sorted(slices.Values(oldKeys)), slices.Sorted(slices.Values(newKeys))) {
		return false, nil
	}
	if _, err := c.s.q.DriftDeleteByType(ctx, tx, string(t)); err != nil {
		return false, fmt.Errorf("delete %s drift: %w", t, err)
	}
	rows := make([]dbsqlc.DriftInsertParams, len(ds))
	for i, d := range ds {
		fs := make([]fieldDiffJSON, len(d.diffs))
		for j, f := range d.diffs {
			fs[j] = fieldDiffJSON{FieldName: f.Field, ExpectedValue: f.Expected, ActualValue: f.Actual}
		}
		diffs, _ := json.Marshal(fs)
		rows[i] = dbsqlc.DriftInsertParams{
			ComponentType: string(t), DriftType: d.kind, ComponentID: d.component, ExternalID: optString(d.externalID),
			MACAddress: d.mac, Name: d.name, SerialNumber: d.serial, FirmwareVersion: d.firmware, RackExternalID: d.rackExt,
			Diffs: diffs, CheckedAt: c.now,
		}
	}
	if _, err := c.s.q.DriftInsert(ctx, tx, rows); err != nil {
		return false, fmt.Errorf("insert %s drift: %w", t, err)
	}
	if fn := c.s.cfg.OnDrift; fn != nil {
		if err := fn(ctx, tx, driftChanges(t, olds, oldKeys, ds, newKeys, c.now)); err != nil {
			return false, fmt.Errorf("%s drift hook: %w", t, err)
		}
	}
	return true, nil
}

// device is one Core device of the type being synced, normalised: what
// the match and the comparison need of Core's replies, and nothing more (a
// part keeps one per device of its type while it reads the next pages).
// Its strings that Core repeats (state, power, firmware, rack, health)
// are shared between the part's devices (healthEncoder.share), and mac is
// normalised.
type device struct {
	id, mac, state, rackID, nvosIP string
	// health is Core's report as JSON when hasHealth (else Core sent
	// none); healthKeep says it could not be encoded, so Flow's snapshot
	// stays.
	health                string
	hasHealth, healthKeep bool
	power                 string // "" unknown
	firmware              string // "" unknown
	position              devicePosition
	// dpus are a compute host's DPU BMCs (compute only), ordered by MAC.
	dpus []inventory.DPUBMC
	// versions are the installed firmware per sub-component Core answered
	// with; nil when it did not answer for the device (shared between the
	// part's devices with equal versions: healthEncoder.shareVersions).
	versions *versionSet
}

// versionSet is one set of installed versions, shared by a part's devices
// that run it, with sum, a hash of its content: equal sets hash the same
// within a process.
type versionSet struct {
	v   inventory.SubVersions
	sum uint64
}

// versionsSeed seeds the hashes of version sets and of what a part
// records (firmwareMemo).
var versionsSeed = maphash.MakeSeed()

// devicePosition is Core's position of a compute host, held in place:
// ok says Core reported one, and the has bits which of its values it
// sent (slot, tray, topology).
type devicePosition struct {
	slot, tray, topology int32
	ok                   bool
	has                  uint8
}

const (
	hasSlot = 1 << iota
	hasTray
	hasTopology
)

// positionOf is p held in place.
func positionOf(p nico.Position) devicePosition {
	out := devicePosition{ok: true}
	if p.SlotID != nil {
		out.slot, out.has = *p.SlotID, out.has|hasSlot
	}
	if p.TrayIndex != nil {
		out.tray, out.has = *p.TrayIndex, out.has|hasTray
	}
	if p.TopologyID != nil {
		out.topology, out.has = *p.TopologyID, out.has|hasTopology
	}
	return out
}

// setHealth records h as the device's report, encoded once (the reports
// themselves are dropped with their page).
func (d *device) setHealth(he *healthEncoder, h *nico.Health) {
	if h == nil {
		return
	}
	data, err := he.encode(h)
	if err != nil {
		d.healthKeep = true
		return
	}
	d.health, d.hasHealth = he.shareBytes(data), true
}

// pagesOf splits ids into pages of SyncConfig.Page. A listing that names
// an ID twice is one page, so that Core's client rejects it whole as
// before.
func (c *cycle) pagesOf(ids []string) [][]string {
	size := c.s.cfg.Page
	if len(ids) <= size {
		return [][]string{ids}
	}
	seen := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		if _, dup := seen[id]; dup {
			return [][]string{ids}
		}
		seen[id] = struct{}{}
	}
	return slices.Collect(slices.Chunk(ids, size))
}

// addWarning appends w to p's warnings unless it is there already (a read
// that fails on every page warns once).
func addWarning(p *SyncPart, ws ...string) {
	for _, w := range ws {
		if !slices.Contains(p.Warnings, w) {
			p.Warnings = append(p.Warnings, w)
		}
	}
}

// syncType matches Core's devices of type t to Flow's components by host
// BMC MAC (then by external ID), writes what changed and replaces the
// type's drift, all in one transaction. When versionsOK (every read of
// the installed versions succeeded) it also records them
// (inventory.Service.RecordFirmware, which writes only what changed): the
// matched components Core answered for are readings, and the live
// components with a Core ID it did not answer for (item error, left out
// of the reply or of the listing) are absent; when they are what the
// part last recorded and no statement has written component_firmware
// since (firmwareMemo), only the read time is written. Core's devices are all read by
// then; Flow's components are compared a page at a time (the mirror's
// listing when it handed one on, else pages read in the transaction), and
// each page's changes are written before the next page is read, so the
// part holds Core's devices, one page of components and its drift, never
// the type's whole listing beside all its updates (issue 29).
func (c *cycle) syncType(ctx context.Context, p *SyncPart, t inventory.ComponentType, devs []device, versionsOK bool) error {
	byMAC := newDeviceIndex(devs, func(d *device) string { return d.mac })
	byID := newDeviceIndex(devs, func(d *device) string { return d.id })
	matched := make([]bool, len(devs))
	var ds []drift
	var readings []inventory.FirmwareReading
	var absent []uuid.UUID
	// recording hashes readings and absent devices in their order (the
	// components' ID order), one record each: 1, ID, set sum; 2, ID.
	var recording maphash.Hash
	var record [25]byte
	if versionsOK {
		readings = make([]inventory.FirmwareReading, 0, len(devs))
		recording.SetSeed(versionsSeed)
	}
	addAbsent := func(id uuid.UUID) {
		absent = append(absent, id)
		record[0] = 2
		copy(record[1:], id[:])
		_, _ = recording.Write(record[:17])
	}
	var ups []inventory.SyncUpdate
	dpus, dpusNow := map[uuid.UUID][]inventory.DPUBMC{}, map[uuid.UUID][]inventory.DPUBMC{}
	listed, handed := c.takeListed(t)
	var recorded firmwareMemo
	err := pgx.BeginFunc(ctx, c.s.cfg.Pool, func(tx pgx.Tx) error {
		// page compares comps (in ID order, after every earlier page) and
		// writes their changes through tx.
		page := func(comps []inventory.SyncComponent) error {
			ups = ups[:0]
			clear(dpus)
			clear(dpusNow)
			for _, comp := range comps {
				i, ok := -1, false
				if comp.HostMAC != "" {
					i, ok = byMAC.find(string(comp.HostMAC))
				}
				if !ok && comp.ExternalID != "" {
					i, ok = byID.find(comp.ExternalID)
				}
				if !ok || matched[i] {
					id := comp.ID
					ds = append(ds, drift{kind: "missing_in_actual", component: &id, externalID: comp.ExternalID, mac: string(comp.HostMAC),
						name: comp.Name, serial: comp.SerialNumber, firmware: comp.FirmwareVersion, rackExt: comp.RackExternalID})
					if versionsOK && comp.ExternalID != "" {
						addAbsent(comp.ID)
					}
					continue
				}
				matched[i] = true
				d := &devs[i]
				if versionsOK {
					if d.versions != nil {
						readings = append(readings, inventory.FirmwareReading{ComponentID: comp.ID, Versions: d.versions.v})
						record[0] = 1
						copy(record[1:], comp.ID[:])
						binary.LittleEndian.PutUint64(record[17:], d.versions.sum)
						_, _ = recording.Write(record[:])
					} else {
						addAbsent(comp.ID)
					}
				}
				if up, changed := c.update(t, comp, d); changed {
					ups = append(ups, up)
				}
				if t == inventory.ComponentTypeCompute && !slices.Equal(d.dpus, comp.DPUs) {
					dpus[comp.ID], dpusNow[comp.ID] = d.dpus, comp.DPUs
				}
				if t == inventory.ComponentTypeCompute && d.position.ok {
					if fs := positionDiffs(comp.Position, d.position); len(fs) > 0 {
						id := comp.ID
						ds = append(ds, drift{kind: "mismatch", component: &id, externalID: d.id, mac: string(comp.HostMAC),
							name: comp.Name, serial: comp.SerialNumber, rackExt: comp.RackExternalID, diffs: fs})
					}
				}
			}
			n, err := c.s.cfg.Inv.ApplySync(ctx, tx, ups)
			if err != nil {
				return err
			}
			p.Changed += n
			if n, err = c.s.cfg.Inv.ApplyDPUs(ctx, tx, dpus, dpusNow); err != nil {
				return err
			}
			p.Changed += n
			return nil
		}
		if handed {
			for comps := range slices.Chunk(listed, c.s.cfg.Page) {
				if err := page(comps); err != nil {
					return err
				}
				clear(comps) // what the page's drift needs it has copied
			}
		} else if err := c.s.cfg.Inv.SyncComponentPages(ctx, tx, t, c.s.cfg.Page, page); err != nil {
			return err
		}
		for i, d := range devs {
			if !matched[i] {
				ds = append(ds, drift{kind: "missing_in_expected", externalID: d.id, mac: d.mac, rackExt: d.rackID, firmware: d.firmware})
			}
		}
		p.Drifts = len(ds)
		var err error
		if p.DriftChanged, err = c.replaceDrift(ctx, tx, t, ds); err != nil {
			return err
		}
		if !versionsOK {
			return nil
		}
		recorded, err = c.recordFirmware(ctx, tx, p, t, readings, absent, recording.Sum64())
		return err
	})
	if err == nil && versionsOK {
		c.s.setFirmwareMemo(t, recorded)
	}
	return err
}

// recordFirmware records a read of t's installed versions through tx
// (syncType) and returns the firmwareMemo to keep once tx commits: the
// read time alone when the read is what the part last recorded (sum) and
// the installed-firmware generation has not moved since, else
// RecordFirmware's writes, counted in p.Changed.
func (c *cycle) recordFirmware(ctx context.Context, tx pgx.Tx, p *SyncPart, t inventory.ComponentType, readings []inventory.FirmwareReading, absent []uuid.UUID, sum uint64) (firmwareMemo, error) {
	inv := c.s.cfg.Inv
	if last, ok := c.s.firmwareMemo(t); ok && last.sum == sum {
		// The read is what the part last recorded: the read time alone,
		// when the generation has not moved (one statement).
		if recorded, err := inv.RecordFirmwareReadIfUnchanged(ctx, tx, t, c.now, last.gen); err != nil || recorded {
			return last, err
		}
	}
	gen, err := inv.FirmwareGenerations(ctx, tx)
	if err != nil {
		return firmwareMemo{}, err
	}
	memo := firmwareMemo{sum: sum, gen: gen.Firmware}
	n, err := inv.RecordFirmware(ctx, tx, t, c.now, readings, absent)
	if err != nil {
		return firmwareMemo{}, err
	}
	p.Changed += n
	if n > 0 {
		// The writes moved the generation (once per statement).
		if gen, err = inv.FirmwareGenerations(ctx, tx); err != nil {
			return firmwareMemo{}, err
		}
		memo.gen = gen.Firmware
	}
	return memo, nil
}

// deviceIndex finds a part's devices by a key (normalised MAC, Core ID)
// through their indexes sorted by it: 4 bytes a device, where a map held
// about ten times that (issue 29).
type deviceIndex struct {
	devs  []device
	key   func(*device) string
	order []int32
}

// newDeviceIndex indexes the devices whose key is not empty.
func newDeviceIndex(devs []device, key func(*device) string) deviceIndex {
	order := make([]int32, 0, len(devs))
	for i := range devs {
		if key(&devs[i]) != "" {
			order = append(order, int32(i))
		}
	}
	slices.SortStableFunc(order, func(a, b int32) int { return strings.Compare(key(&devs[a]), key(&devs[b])) })
	return deviceIndex{devs: devs, key: key, order: order}
}

// find returns the device whose key is k: of several, the last in the
// part's order (as a map filled in that order would).
func (x deviceIndex) find(k string) (int, bool) {
	j, _ := slices.BinarySearchFunc(x.order, k, func(i int32, k string) int {
		if c := strings.Compare(x.key(&x.devs[i]), k); c != 0 {
			return c
		}
		return -1 // past every equal key: the last of them is at j-1
	})
	if j == 0 || x.key(&x.devs[x.order[j-1]]) != k {
		return -1, false
	}
	return int(x.order[j-1]), true
}

// sortedDPUs returns ds ordered by MAC, as SyncComponentPages orders a
// component's DPUs.
func sortedDPUs(ds []inventory.DPUBMC) []inventory.DPUBMC {
	out := slices.Clone(ds)
	slices.SortFunc(out, func(a, b inventory.DPUBMC) int { return strings.Compare(string(a.MAC), string(b.MAC)) })
	return out
}

// update is comp with what Core reports of it, and whether anything
// changed. Unknown values (power, firmware) keep Flow's.
func (c *cycle) update(t inventory.ComponentType, comp inventory.SyncComponent, d *device) (inventory.SyncUpdate, bool) {
	up := inventory.SyncUpdate{
		ID: comp.ID, UpdatedAt: comp.UpdatedAt, ExternalID: d.id, PowerState: comp.PowerState, FirmwareVersion: comp.FirmwareVersion,
		Status: statusOf(t, d.state), Health: comp.Health, Description: comp.Description,
	}
	if d.power != "" {
		up.PowerState = d.power
	}
	if d.firmware != "" {
		up.FirmwareVersion = d.firmware
	}
	// An explicit empty report clears the snapshot; a present one replaces
	// it when it differs (compared as JSON values).
	switch {
	case d.healthKeep:
	case !d.hasHealth:
		up.Health = nil
	case !healthEqual(d.health, comp.Health):
		up.Health = json.RawMessage(d.health)
	}
	if d.nvosIP != "" {
		up.Description = withNVOSIP(comp.Description, d.nvosIP)
	}
	changed := up.ExternalID != comp.ExternalID || up.PowerState != comp.PowerState || up.FirmwareVersion != comp.FirmwareVersion ||
		up.Status.Phase != comp.Status.Phase || up.Status.Reason != comp.Status.Reason || !slices.Equal(up.Status.Blocked, comp.Status.Blocked) ||
		!jsonEqual(up.Health, comp.Health) || deref(up.Description) != deref(comp.Description)
	return up, changed
}

// healthEncoder encodes health reports into one reused buffer: nearly
// every report equals the stored one, and its bytes are then dropped. It
// also shares equal strings between one part's devices (share).
type healthEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
	// shared holds one copy of each value seen, up to maxShared values (a
	// site's devices repeat few states, firmware versions, power states
	// and racks; a value seen once more after that is kept as it is).
	shared map[string]string
	// sets holds one copy of each set of installed versions seen, by
	// versionsKey, up to maxShared sets: a site's devices of one type
	// mostly run one set, so a part holds a few maps, not one a device.
	sets map[string]*versionSet
	// reports holds the installed versions of the switch and shelf
	// reports seen, by what decides them (shareReport), up to maxShared.
	reports map[string]*versionSet
	key     []byte // the keys' buffer
	// last and lastReport are the sets shareVersions and shareReport last
	// returned (lastFW, lastBMC: what decided the report's): the devices
	// of a page mostly run the set of the device before them, which is
	// cheaper to compare than to key.
	last, lastReport *versionSet
	lastFW           map[string]string
	lastBMC          string
}

const maxShared = 4096

// shareVersions returns the copy of v already held, else v (held when
// there is room).
func (e *healthEncoder) shareVersions(v map[string][]string) *versionSet {
	if e.last != nil && e.last.v.Equal(v) {
		return e.last
	}
	k := e.versionsKey(v)
	if x, ok := e.sets[string(k)]; ok {
		e.last = x
		return x
	}
	if e.sets == nil {
		e.sets = map[string]*versionSet{}
	}
	for _, vs := range v {
		for i, x := range vs {
			vs[i] = e.share(x)
		}
	}
	x := &versionSet{v: v, sum: maphash.Bytes(versionsSeed, k)}
	if len(e.sets) < maxShared {
		e.sets[string(k)] = x
	}
	e.last = x
	return x
}

// shareComponents is shareVersions of a compute host's versions as Core
// lists them (nico.DeviceVersions.Components; a sub-component listed twice
// has both entries' versions, as nico.Client.InstalledVersions merges
// them): when they are the set of the host before, which they mostly
// are, that set, without a map made for them.
func (e *healthEncoder) shareComponents(cvs []nico.ComponentVersions) *versionSet {
	if e.last != nil && len(cvs) == len(e.last.v) {
		same := true
		for i, cv := range cvs {
			have, ok := e.last.v[cv.Component]
			// A name listed twice makes fewer sub-components than entries:
			// the slow path merges them.
			for _, prev := range cvs[:i] {
				if prev.Component == cv.Component {
					ok = false
				}
			}
			if !ok || !slices.Equal(have, cv.Versions) {
				same = false
				break
			}
		}
		if same {
			return e.last
		}
	}
	v := make(map[string][]string, len(cvs))
	for _, cv := range cvs {
		if have, ok := v[cv.Component]; ok {
			v[cv.Component] = append(have, cv.Versions...)
		} else {
			// The reply's own slice, clipped so that a second entry of the
			// component appends to a copy.
			v[cv.Component] = slices.Clip(cv.Versions)
		}
	}
	return e.shareVersions(v)
}

// shareReport returns the installed versions in a switch's or shelf's
// exploration report (nico.Inventory.InstalledComponents), shared with the
// part's devices whose reports hold the same; a report like one seen
// before costs no map.
func (e *healthEncoder) shareReport(inv nico.Inventory, kind nico.Kind) *versionSet {
	// InstalledComponents falls back on a switch's BMC version when its
	// report names no "bmc" version.
	var bmc string
	if inv.FirmwareVersions["bmc"] == "" && kind == nico.KindSwitch {
		bmc = inv.BMCFirmware()
	}
	if e.lastReport != nil && bmc == e.lastBMC && maps.Equal(inv.FirmwareVersions, e.lastFW) {
		return e.lastReport
	}
	sv := e.reportSet(inv, kind, bmc)
	e.lastReport, e.lastFW, e.lastBMC = sv, inv.FirmwareVersions, bmc
	return sv
}

// reportSet is shareReport by the report's key: its firmware_versions and
// bmc, the BMC version InstalledComponents falls back on.
func (e *healthEncoder) reportSet(inv nico.Inventory, kind nico.Kind, bmc string) *versionSet {
	k := e.key[:0]
	names := make([]string, 0, 16)
	for c := range inv.FirmwareVersions {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		k = append(k, c...)
		k = append(k, 1)
		k = append(k, inv.FirmwareVersions[c]...)
		k = append(k, 0)
	}
	k = append(k, 2)
	k = append(k, bmc...)
	e.key = k
	if x, ok := e.reports[string(k)]; ok {
		return x
	}
	key := string(k) // shareVersions reuses the buffer
	sv := e.shareVersions(inv.InstalledComponents(kind))
	if e.reports == nil {
		e.reports = map[string]*versionSet{}
	}
	if len(e.reports) < maxShared {
		e.reports[key] = sv
	}
	return sv
}

// versionsKey is v as bytes that equal sets share (sub-components in
// order, each with its versions), in a buffer valid until the next call.
func (e *healthEncoder) versionsKey(v map[string][]string) []byte {
	k := e.key[:0]
	names := make([]string, 0, 16)
	for c := range v {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		k = append(k, c...)
		for _, x := range v[c] {
			k = append(k, 1)
			k = append(k, x...)
		}
		k = append(k, 0)
	}
	e.key = k
	return k
}

// share returns the copy of v already held, else v (held when there is
// room).
func (e *healthEncoder) share(v string) string {
	if x, ok := e.shared[v]; ok {
		return x
	}
	if e.shared == nil {
		e.shared = map[string]string{}
	}
	if len(e.shared) < maxShared {
		e.shared[v] = v
	}
	return v
}

// shareBytes is share of b as a string (b is not kept).
func (e *healthEncoder) shareBytes(b []byte) string {
	if x, ok := e.shared[string(b)]; ok {
		return x
	}
	return e.share(string(b))
}

// encode returns h as json.Marshal would, in bytes valid until the next
// call.
func (e *healthEncoder) encode(h *nico.Health) ([]byte, error) {
	if e.enc == nil {
		e.enc = json.NewEncoder(&e.buf)
	}
	e.buf.Reset()
	if err := e.enc.Encode(h); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")), nil
}

// healthEqual is jsonEqual of a Core report held as a string (never
// empty) and Flow's snapshot, without copying the report when the bytes
// are equal.
func healthEqual(core string, flow []byte) bool {
	if string(flow) == core {
		return true
	}
	return jsonEqual([]byte(core), flow)
}

// jsonEqual reports whether a and b hold the same JSON value (empty and
// null are equal). The stored health is the text the sync wrote, so equal
// bytes settle nearly every comparison.
func jsonEqual(a, b []byte) bool {
	isNull := func(x []byte) bool { return len(x) == 0 || string(x) == "null" }
	if isNull(a) || isNull(b) {
		return isNull(a) == isNull(b)
	}
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// withNVOSIP sets nvos_ip in a JSON-object description; a description that
// is not a JSON object is left as it is (it belongs to the operator).
func withNVOSIP(desc *string, ip string) *string {
	obj := map[string]any{}
	if desc != nil && strings.TrimSpace(*desc) != "" {
		if json.Unmarshal([]byte(*desc), &obj) != nil {
			return desc
		}
	}
	if cur, ok := obj["nvos_ip"].(string); ok && cur == ip {
		return desc
	}
	obj["nvos_ip"] = ip
	data, err := json.Marshal(obj)
	if err != nil {
		return desc
	}
	s := string(data)
	return &s
}

// positionDiffs compares Flow's position with Core's; -1 (Flow) and absent
// (Core) are unknown and not compared.
func positionDiffs(f inventory.Position, c devicePosition) []backend.FieldDiff {
	var out []backend.FieldDiff
	for _, x := range [...]struct {
		name       string
		flow, core int32
		has        bool
	}{
		{"position.slot_id", f.SlotID, c.slot, c.has&hasSlot != 0},
		{"position.tray_idx", f.TrayIdx, c.tray, c.has&hasTray != 0},
		{"position.host_id", f.HostID, c.topology, c.has&hasTopology != 0},
	} {
		if x.flow >= 0 && x.has && x.core >= 0 && x.flow != x.core {
			out = append(out, backend.FieldDiff{Field: x.name, Expected: strconv.Itoa(int(x.flow)), Actual: strconv.Itoa(int(x.core))})
		}
	}
	return out
}

// inventoryOf reads the exploration reports of ids (best effort): firmware
// version by the precedence rule, power and (switches, shelves) the
// installed versions per sub-component. ok is false when the read failed
// (a warning in p); a device whose item failed is left out.
func (c *cycle) inventoryOf(ctx context.Context, p *SyncPart, kind nico.Kind, ids []string) (invs map[string]nico.Inventory, ok bool) {
	if len(ids) == 0 {
		return map[string]nico.Inventory{}, true
	}
	got, err := c.s.cfg.Core.Inventory(ctx, nico.Target{Kind: kind, IDs: ids})
	if err != nil {
		p.Warnings = append(p.Warnings, err.Error())
		return map[string]nico.Inventory{}, false
	}
	out := make(map[string]nico.Inventory, len(got))
	for _, inv := range got {
		if inv.Err == nil {
			out[cmpOr(inv.ID, inv.Key)] = inv
		}
	}
	return out, true
}

// installedOf reads the installed versions per sub-component of compute
// hosts ids (best effort, ListComponentFirmwareVersions): the sets of the
// hosts Core answered for, by Core ID. A host whose entry in the reply
// has the bytes it had at its last read gets the set it decoded to then
// (Syncer.entries), without decoding; the others are decoded and shared
// (healthEncoder.shareComponents). ok is false when the read failed (a
// warning in p).
func (c *cycle) installedOf(ctx context.Context, p *SyncPart, ids []string, he *healthEncoder) (map[string]*versionSet, bool) {
	if len(ids) == 0 {
		return map[string]*versionSet{}, true
	}
	entries, err := c.s.cfg.Core.FirmwareVersionsRaw(ctx, ids)
	if err != nil {
		p.Warnings = append(p.Warnings, err.Error())
		return nil, false
	}
	s := c.s
	s.entriesMu.Lock()
	defer s.entriesMu.Unlock()
	if s.entries == nil {
		s.entries = make(map[string]*entryMemo, len(ids))
	}
	read := s.entryRead
	out := make(map[string]*versionSet, len(ids))
	for _, e := range entries {
		sum := maphash.Bytes(versionsSeed, e.Bytes)
		if len(e.ID) > 0 {
			if m, ok := s.entries[string(e.ID)]; ok && m.sum == sum {
				m.read = read
				out[m.id] = m.set
				continue
			}
		}
		dv, err := e.Decode()
		if err != nil {
			p.Warnings = append(p.Warnings, err.Error())
			return nil, false
		}
		if dv.Err != nil {
			continue
		}
		set := he.shareComponents(dv.Components)
		out[cmpOr(dv.ID, dv.Key)] = set
		if dv.ID != "" {
			s.entries[dv.ID] = &entryMemo{id: dv.ID, sum: sum, set: set, read: read}
		}
	}
	return out, true
}

// pruneEntries forgets the hosts the last compute part that read every
// page's versions did not see (gone from Core, or not answered for).
func (s *Syncer) pruneEntries() {
	s.entriesMu.Lock()
	defer s.entriesMu.Unlock()
	for id, m := range s.entries {
		if m.read != s.entryRead {
			delete(s.entries, id)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// reportPower maps an exploration report's power: on and powering on are
// on, off and powering off are off, anything else as Core names it.
func reportPower(p nico.PowerState) string {
	switch p {
	case nico.PowerStateOn, nico.PowerStatePoweringOn:
		return "on"
	case nico.PowerStateOff, nico.PowerStatePoweringOff:
		return "off"
	case nico.PowerStateUnknown, "":
		return ""
	}
	return string(p)
}

func (c *cycle) compute(ctx context.Context, p *SyncPart) error {
	core := c.s.cfg.Core
	ids, err := core.MachineIDs(ctx, false, "")
	if err != nil {
		return err
	}
	devs := make([]device, 0, len(ids))
	var he healthEncoder
	// Without a versions read this cycle, nothing of them is recorded, as
	// after a failed read (but with no warning).
	versionsOK := c.readVersions[inventory.ComponentTypeCompute]
	if versionsOK {
		c.s.entriesMu.Lock()
		c.s.entryRead++
		c.s.entriesMu.Unlock()
	}
	for _, page := range c.pagesOf(ids) {
		if devs, err = c.computePage(ctx, p, page, devs, &he, &versionsOK); err != nil {
			return err
		}
	}
	if versionsOK {
		c.s.pruneEntries()
	}
	return c.syncType(ctx, p, inventory.ComponentTypeCompute, devs, versionsOK)
}

// computePage reads one page of machine IDs and appends its hosts to devs;
// it reads their installed versions when *versionsOK (not read this
// cycle: false), and a failed read clears it.
func (c *cycle) computePage(ctx context.Context, p *SyncPart, ids []string, devs []device, he *healthEncoder, versionsOK *bool) ([]device, error) {
	core := c.s.cfg.Core
	ms, err := core.Machines(ctx, ids)
	if err != nil {
		return nil, err
	}
	hosts, hostIDs := make([]nico.Machine, 0, len(ms)), make([]string, 0, len(ms))
	for _, m := range ms {
		if m.Host {
			hosts = append(hosts, m)
			hostIDs = append(hostIDs, m.ID)
		}
	}
	// The five reads of the hosts need only their IDs: they run side by
	// side, each with its own warnings, merged below in a fixed order.
	var (
		positions                 map[string]nico.Position
		power                     map[string]nico.PowerState
		dpus                      map[string][]inventory.DPUBMC
		invs                      map[string]nico.Inventory
		installed                 map[string]*versionSet
		installedOK               = *versionsOK
		posErr, powErr            error
		dpuErr                    error
		dpuPart, invPart, verPart SyncPart
		wg                        sync.WaitGroup
	)
	if len(hostIDs) > 0 {
		wg.Go(func() { positions, posErr = core.Positions(ctx, hostIDs) })
		wg.Go(func() { power, powErr = core.PowerStates(ctx, hostIDs) })
	}
	wg.Go(func() { dpus, dpuErr = c.dpusOf(ctx, &dpuPart, hosts) })
	wg.Go(func() { invs, _ = c.inventoryOf(ctx, &invPart, nico.KindCompute, hostIDs) })
	if *versionsOK {
		// he is this goroutine's alone until wg.Wait.
		wg.Go(func() { installed, installedOK = c.installedOf(ctx, &verPart, hostIDs, he) })
	}
	wg.Wait()
	if posErr != nil {
		return nil, posErr
	}
	if powErr != nil {
		addWarning(p, powErr.Error())
	}
	if dpuErr != nil {
		return nil, dpuErr
	}
	addWarning(p, dpuPart.Warnings...)
	addWarning(p, invPart.Warnings...)
	addWarning(p, verPart.Warnings...)
	*versionsOK = *versionsOK && installedOK
	for _, m := range hosts {
		d := device{id: m.ID, mac: backend.NormalizeMAC(m.BMCMAC), state: he.share(m.State), firmware: he.share(invs[m.ID].BMCFirmware()), dpus: sortedDPUs(dpus[m.ID])}
		d.setHealth(he, m.Health)
		if set, ok := installed[m.ID]; ok {
			d.versions = set
		}
		if pw, ok := power[m.ID]; ok {
			d.power = he.share(string(pw))
		}
		if pos, ok := positions[m.ID]; ok {
			d.position = positionOf(pos)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// readWithInventory runs read beside the exploration-report read of ids
// (both need only the IDs) and returns the reports, with their warnings
// added to p after read's result is known; a failed report read clears
// *invOK.
func (c *cycle) readWithInventory(ctx context.Context, p *SyncPart, kind nico.Kind, ids []string, invOK *bool, read func() error) (map[string]nico.Inventory, error) {
	var (
		invs    map[string]nico.Inventory
		ok      bool
		invPart SyncPart
		wg      sync.WaitGroup
	)
	wg.Go(func() { invs, ok = c.inventoryOf(ctx, &invPart, kind, ids) })
	err := read()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	addWarning(p, invPart.Warnings...)
	*invOK = *invOK && ok
	return invs, nil
}

// switchSeen is what the topology part needs of a switch of this cycle.
type switchSeen struct {
	rackID, nvlinkDomain string
}

func (c *cycle) nvswitches(ctx context.Context, p *SyncPart) error {
	core := c.s.cfg.Core
	ids, err := core.SwitchIDs(ctx)
	if err != nil {
		return err
	}
	devs := make([]device, 0, len(ids))
	seen := make([]switchSeen, 0, len(ids))
	var he healthEncoder
	// A switch's installed versions are in its exploration report, read
	// for its power and BMC firmware anyway; they are taken in the cycles
	// that read the type's versions.
	versionsOK := c.readVersions[inventory.ComponentTypeNVSwitch]
	for _, page := range c.pagesOf(ids) {
		var ss []nico.Switch
		invs, err := c.readWithInventory(ctx, p, nico.KindSwitch, page, &versionsOK, func() (err error) {
			ss, err = core.Switches(ctx, page)
			return err
		})
		if err != nil {
			return err
		}
		for _, s := range ss {
			inv, answered := invs[s.ID]
			d := device{id: s.ID, mac: backend.NormalizeMAC(s.BMCMAC), state: he.share(s.ControllerState), rackID: he.share(s.RackID), nvosIP: s.NVOSIP,
				firmware: he.share(inv.BMCFirmware()), power: he.share(reportPower(inv.Power))}
			d.setHealth(&he, s.Health)
			if answered && versionsOK {
				d.versions = he.shareReport(inv, nico.KindSwitch)
			}
			devs = append(devs, d)
			seen = append(seen, switchSeen{rackID: s.RackID, nvlinkDomain: s.NVLinkDomain})
		}
	}
	if err := c.syncType(ctx, p, inventory.ComponentTypeNVSwitch, devs, versionsOK); err != nil {
		return err
	}
	c.seenSwitches, c.switchesOK = seen, true
	return nil
}

func (c *cycle) shelves(ctx context.Context, p *SyncPart) error {
	core := c.s.cfg.Core
	ids, err := core.PowerShelfIDs(ctx)
	if err != nil {
		return err
	}
	devs := make([]device, 0, len(ids))
	var he healthEncoder
	// A shelf's installed versions are in its exploration report, read for
	// its power and PMC firmware anyway; they are taken in the cycles that
	// read the type's versions.
	versionsOK := c.readVersions[inventory.ComponentTypePowerShelf]
	for _, page := range c.pagesOf(ids) {
		var ps []nico.PowerShelf
		invs, err := c.readWithInventory(ctx, p, nico.KindPowerShelf, page, &versionsOK, func() (err error) {
			ps, err = core.PowerShelves(ctx, page)
			return err
		})
		if err != nil {
			return err
		}
		for _, s := range ps {
			inv, answered := invs[s.ID]
			fw := inv.FirmwareVersions["pmc"]
			if fw == "" {
				fw = inv.BMCFirmware()
			}
			d := device{id: s.ID, mac: backend.NormalizeMAC(s.BMCMAC), state: he.share(s.ControllerState), rackID: he.share(s.RackID),
				firmware: he.share(fw), power: he.share(reportPower(inv.Power))}
			d.setHealth(&he, s.Health)
			if answered && versionsOK {
				d.versions = he.shareReport(inv, nico.KindPowerShelf)
			}
			devs = append(devs, d)
		}
	}
	return c.syncType(ctx, p, inventory.ComponentTypePowerShelf, devs, versionsOK)
}

// coreRacks reads Core's view of Flow's racks with an external ID, once per
// cycle.
func (c *cycle) coreRacks(ctx context.Context) (map[string]nico.Rack, []inventory.SyncRack, error) {
	if c.racks != nil || c.racksErr != nil {
		return c.racks, c.flowRack, c.racksErr
	}
	racks, err := c.s.cfg.Inv.SyncRacks(ctx, c.s.cfg.Pool)
	if err != nil {
		c.racksErr = err
		return nil, nil, err
	}
	var ext []string
	for _, r := range racks {
		if r.ExternalID != "" {
			ext = append(ext, r.ExternalID)
		}
	}
	got := map[string]nico.Rack{}
	if len(ext) > 0 {
		rs, err := c.s.cfg.Core.Racks(ctx, ext)
		if err != nil {
			c.racksErr = err
			return nil, nil, err
		}
		for _, r := range rs {
			got[r.ID] = r
		}
	}
	c.racks, c.flowRack = got, racks
	return got, racks, nil
}

// topology applies the observed NVLink topology (§7): every Core rack group
// of Flow's racks becomes a domain holding those racks, with the NMX-C
// cluster its switches report.
func (c *cycle) topology(ctx context.Context, p *SyncPart) error {
	if !c.switchesOK {
		return errors.New("switch listing failed this cycle; topology kept")
	}
	core, flow, err := c.coreRacks(ctx)
	if err != nil {
		return err
	}
	clusters := map[string]map[string]bool{} // Core rack ID → observed cluster UUIDs
	for _, s := range c.seenSwitches {
		if s.rackID == "" {
			continue
		}
		if clusters[s.rackID] == nil {
			clusters[s.rackID] = map[string]bool{}
		}
		if s.nvlinkDomain != "" {
			clusters[s.rackID][s.nvlinkDomain] = true
		}
	}
	groups := map[string]*inventory.TopologyGroup{}
	var order []string
	seen := map[string]map[string]bool{}
	for _, r := range flow {
		cr, ok := core[r.ExternalID]
		if r.ExternalID == "" || !ok || cr.GroupID == "" {
			continue
		}
		g := groups[cr.GroupID]
		if g == nil {
			g = &inventory.TopologyGroup{GroupID: cr.GroupID}
			groups[cr.GroupID] = g
			order = append(order, cr.GroupID)
			seen[cr.GroupID] = map[string]bool{}
		}
		g.Racks = append(g.Racks, r.ID)
		for cl := range clusters[r.ExternalID] {
			seen[cr.GroupID][cl] = true
		}
	}
	var list []inventory.TopologyGroup
	for _, id := range order {
		g := groups[id]
		switch cls := seen[id]; len(cls) {
		case 0:
			g.ClusterID = nil
		case 1:
			for cl := range cls {
				if u, err := uuid.Parse(cl); err == nil {
					g.ClusterID = &u
				} else {
					g.KeepCluster = true
				}
			}
		default:
			g.KeepCluster = true
		}
		list = append(list, *g)
	}
	return pgx.BeginFunc(ctx, c.s.cfg.Pool, func(tx pgx.Tx) error {
		n, err := c.s.cfg.Inv.ApplyTopology(ctx, tx, list)
		p.Changed = n
		return err
	})
}

// rackHealth refreshes the health of Flow's racks with an external ID: a
// rack Core omits keeps its snapshot, an explicit empty report clears it.
func (c *cycle) rackHealth(ctx context.Context, p *SyncPart) error {
	core, flow, err := c.coreRacks(ctx)
	if err != nil {
		return err
	}
	var hs []inventory.RackHealth
	for _, r := range flow {
		cr, ok := core[r.ExternalID]
		if r.ExternalID == "" || !ok {
			continue
		}
		var data []byte
		if cr.Health != nil {
			if data, err = json.Marshal(cr.Health); err != nil {
				return err
			}
		}
		if !jsonEqual(data, r.Health) {
			hs = append(hs, inventory.RackHealth{ID: r.ID, Health: data})
		}
	}
	return pgx.BeginFunc(ctx, c.s.cfg.Pool, func(tx pgx.Tx) error {
		n, err := c.s.cfg.Inv.SetRackHealth(ctx, tx, hs)
		p.Changed = n
		return err
	})
}
