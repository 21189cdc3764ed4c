package baseline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/firmware/baseline/internal/dbsqlc"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/operations"
)

// DesiredReader reads the desired versions NICo Core holds; nico.Client
// satisfies it.
type DesiredReader interface {
	DesiredFirmware(ctx context.Context) ([]nico.DesiredFirmware, error)
}

// Config is what a Service needs.
type Config struct {
	Inventory  *inventory.Service
	Operations *operations.Service
	// Core reads Core's desired versions (nil: import is unavailable).
	Core DesiredReader
	// StaleAfter: a device whose versions were last seen longer ago is
	// unknown (FLOW_FIRMWARE_UNREPORTED_AFTER; 0: never).
	StaleAfter time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Service keeps baselines and measures compliance. It keeps no
// connection: reads take a db.DBTX, writes a pgx.Tx the caller commits.
type Service struct {
	cfg Config
	q   *dbsqlc.Queries

	mu    sync.Mutex // guards snap
	snap  *snapshot  // the last site snapshot built
	build sync.Mutex // one snapshot build at a time; guards fw
	// fw is the installed firmware the last snapshot was measured from.
	fw *siteFirmware
}

// NewService returns a Service.
func NewService(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, q: dbsqlc.New()}
}

// Ref names a baseline by name or UUID ("" the active one) and a revision
// (0: the newest, or for the active baseline its active revision).
type Ref struct {
	Name     string
	Revision int
}

// Create writes a new baseline at revision 1 (activated when activate).
// ErrExists when the name is taken; *FieldError for bad input.
func (s *Service) Create(ctx context.Context, tx pgx.Tx, name, description string, entries []Entry, source, by string, activate bool) (Baseline, error) {
	name = strings.TrimSpace(name)
	if err := CheckName("name", name); err != nil {
		return Baseline{}, err
	}
	if _, err := uuid.Parse(name); err == nil {
		return Baseline{}, invalid("name", "%q is a UUID; a name must not be", name)
	}
	entries, err := NormalizeEntries("entries", entries)
	if err != nil {
		return Baseline{}, err
	}
	id := uuid.New()
	if err := s.q.BaselineInsert(ctx, tx, dbsqlc.BaselineInsertParams{ID: id, Name: name}); err != nil {
		if db.IsUniqueViolation(err, "firmware_baseline_name_key") {
			return Baseline{}, fmt.Errorf("%w: %q", ErrExists, name)
		}
		return Baseline{}, fmt.Errorf("insert baseline: %w", err)
	}
	if err := s.insertRevision(ctx, tx, id, 1, description, entries, source, by); err != nil {
		return Baseline{}, err
	}
	if activate {
		if err := s.activate(ctx, tx, id, 1, by); err != nil {
			return Baseline{}, err
		}
	}
	return s.Get(ctx, tx, Ref{Name: id.String(), Revision: 1})
}

// Update writes a new revision of the baseline ref names, replacing its
// entries. baseRevision must be the baseline's newest revision: ErrStale
// otherwise, and nothing is written. ErrNotFound for an unknown baseline.
func (s *Service) Update(ctx context.Context, tx pgx.Tx, ref string, baseRevision int, description string, entries []Entry, source, by string, activate bool) (Baseline, error) {
	b, err := s.lookup(ctx, tx, ref)
	if err != nil {
		return Baseline{}, err
	}
	if baseRevision <= 0 {
		return Baseline{}, invalid("base_revision", "is required: the revision the change is based on (the newest is %d)", b.Revision)
	}
	entries, err = NormalizeEntries("entries", entries)
	if err != nil {
		return Baseline{}, err
	}
	rev, err := s.q.BaselineBumpRevision(ctx, tx, dbsqlc.BaselineBumpRevisionParams{ID: b.ID, BaseRevision: int32(baseRevision)})
	if errors.Is(err, pgx.ErrNoRows) {
		return Baseline{}, fmt.Errorf("%w: %s is at revision %d, the change was based on revision %d: read it again and redo the change", ErrStale, b.Name, b.Revision, baseRevision)
	} else if err != nil {
		return Baseline{}, fmt.Errorf("bump baseline revision: %w", err)
	}
	if err := s.insertRevision(ctx, tx, b.ID, int(rev), description, entries, source, by); err != nil {
		return Baseline{}, err
	}
	if activate {
		if err := s.activate(ctx, tx, b.ID, int(rev), by); err != nil {
			return Baseline{}, err
		}
	}
	return s.Get(ctx, tx, Ref{Name: b.ID.String(), Revision: int(rev)})
}

func (s *Service) insertRevision(ctx context.Context, tx pgx.Tx, id uuid.UUID, rev int, description string, entries []Entry, source, by string) error {
	if len(description) > 1024 {
		return invalid("description", "at most 1024 characters")
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	err = s.q.BaselineRevisionInsert(ctx, tx, dbsqlc.BaselineRevisionInsertParams{
		BaselineID: id, Revision: int32(rev), Description: strings.TrimSpace(description), Entries: b, Source: source, CreatedBy: by,
	})
	if err != nil {
		return fmt.Errorf("insert baseline revision: %w", err)
	}
	return nil
}

// Activate makes a revision of the baseline ref names (0: its newest) the
// site's active baseline. ErrNotFound for an unknown baseline or revision.
func (s *Service) Activate(ctx context.Context, tx pgx.Tx, ref Ref, by string) (Baseline, error) {
	if strings.TrimSpace(ref.Name) == "" {
		return Baseline{}, invalid("name", "is required")
	}
	b, err := s.Get(ctx, tx, ref)
	if err != nil {
		return Baseline{}, err
	}
	if err := s.activate(ctx, tx, b.ID, b.Revision.Revision, by); err != nil {
		return Baseline{}, err
	}
	return s.Get(ctx, tx, Ref{Name: b.ID.String(), Revision: b.Revision.Revision})
}

func (s *Service) activate(ctx context.Context, tx pgx.Tx, id uuid.UUID, rev int, by string) error {
	if _, err := s.q.BaselineActivationInsert(ctx, tx, dbsqlc.BaselineActivationInsertParams{BaselineID: id, Revision: int32(rev), ActivatedBy: by}); err != nil {
		return fmt.Errorf("activate baseline: %w", err)
	}
	return nil
}

// lookup finds a baseline by name or UUID.
func (s *Service) lookup(ctx context.Context, dbtx db.DBTX, ref string) (dbsqlc.FirmwareBaseline, error) {
	ref = strings.TrimSpace(ref)
	var row dbsqlc.FirmwareBaseline
	var err error
	if id, perr := uuid.Parse(ref); perr == nil {
		var r dbsqlc.BaselineGetByIDRow
		r, err = s.q.BaselineGetByID(ctx, dbtx, id)
		row = dbsqlc.FirmwareBaseline{ID: r.ID, Name: r.Name, Revision: r.Revision}
	} else {
		var r dbsqlc.BaselineGetByNameRow
		r, err = s.q.BaselineGetByName(ctx, dbtx, ref)
		row = dbsqlc.FirmwareBaseline{ID: r.ID, Name: r.Name, Revision: r.Revision}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return row, fmt.Errorf("%w: no baseline is named %q", ErrNotFound, ref)
	} else if err != nil {
		return row, fmt.Errorf("get baseline: %w", err)
	}
	return row, nil
}

// active returns the site's active baseline and revision; ok is false when
// none is active.
func (s *Service) active(ctx context.Context, dbtx db.DBTX) (dbsqlc.BaselineActiveRow, bool, error) {
	a, err := s.q.BaselineActive(ctx, dbtx)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, false, nil
	} else if err != nil {
		return a, false, fmt.Errorf("get active baseline: %w", err)
	}
	return a, true, nil
}

// Get returns one revision of a baseline with its history; ref.Name ""
// is the active baseline (ErrNoActive when none). ErrNotFound for an
// unknown baseline or revision.
func (s *Service) Get(ctx context.Context, dbtx db.DBTX, ref Ref) (Baseline, error) {
	act, hasActive, err := s.active(ctx, dbtx)
	if err != nil {
		return Baseline{}, err
	}
	name := strings.TrimSpace(ref.Name)
	rev := ref.Revision
	if rev < 0 {
		return Baseline{}, invalid("revision", "must not be negative")
	}
	if name == "" {
		if !hasActive {
			return Baseline{}, ErrNoActive
		}
		name = act.BaselineID.String()
		if rev == 0 {
			rev = int(act.Revision)
		}
	}
	row, err := s.lookup(ctx, dbtx, name)
	if err != nil {
		return Baseline{}, err
	}
	if rev == 0 {
		rev = int(row.Revision)
	}
	r, err := s.q.BaselineRevisionGet(ctx, dbtx, dbsqlc.BaselineRevisionGetParams{BaselineID: row.ID, Revision: int32(rev)})
	if errors.Is(err, pgx.ErrNoRows) {
		return Baseline{}, fmt.Errorf("%w: %s has no revision %d (its newest is %d)", ErrNotFound, row.Name, rev, row.Revision)
	} else if err != nil {
		return Baseline{}, fmt.Errorf("get baseline revision: %w", err)
	}
	b := Baseline{ID: row.ID, Name: row.Name, LatestRevision: int(row.Revision), Revision: Revision{
		Revision: int(r.Revision), Description: r.Description, Source: r.Source, CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy,
	}}
	if err := json.Unmarshal(r.Entries, &b.Entries); err != nil {
		return Baseline{}, fmt.Errorf("baseline %s revision %d: %w", row.Name, rev, err)
	}
	if hasActive && act.BaselineID == row.ID {
		b.ActiveRevision, b.ActivatedAt, b.ActivatedBy = int(act.Revision), act.ActivatedAt, act.ActivatedBy
	}
	hist, err := s.q.BaselineRevisionHistory(ctx, dbtx, row.ID)
	if err != nil {
		return Baseline{}, fmt.Errorf("baseline history: %w", err)
	}
	for _, h := range hist {
		b.History = append(b.History, Revision{Revision: int(h.Revision), Description: h.Description, Source: h.Source,
			CreatedAt: h.CreatedAt, CreatedBy: h.CreatedBy, Entries: make([]Entry, h.EntryCount)})
	}
	return b, nil
}

// List returns every baseline at its newest revision, by name.
func (s *Service) List(ctx context.Context, dbtx db.DBTX) ([]Baseline, error) {
	act, hasActive, err := s.active(ctx, dbtx)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.BaselineList(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list baselines: %w", err)
	}
	out := make([]Baseline, 0, len(rows))
	for _, r := range rows {
		b := Baseline{ID: r.ID, Name: r.Name, LatestRevision: int(r.Revision), Revision: Revision{
			Revision: int(r.Revision), Description: r.Description, Source: r.Source, CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy,
		}}
		if err := json.Unmarshal(r.Entries, &b.Entries); err != nil {
			return nil, fmt.Errorf("baseline %s: %w", r.Name, err)
		}
		if hasActive && act.BaselineID == r.ID {
			b.ActiveRevision, b.ActivatedAt, b.ActivatedBy = int(act.Revision), act.ActivatedAt, act.ActivatedBy
		}
		out = append(out, b)
	}
	return out, nil
}

// coreKeyAliases maps other spellings of Core's desired-version keys to
// sub-component names.
var coreKeyAliases = map[string]string{"uefi": "bios", "hostbmc": "bmc", "host_bmc": "bmc", "bmc_uefi": "combined_bmc_uefi", "cpld": "cpld"}

// Import reads Core's desired versions into entries: one entry per Core
// key that names a sub-component, narrowed to the entry's vendor and
// model. An entry's component type is the type of the inventory's devices
// of that vendor and model (compute when none is held, or when the keys
// only fit compute); keys no type knows are left out and named in the
// warnings.
func (s *Service) Import(ctx context.Context, dbtx db.DBTX) ([]Entry, []string, error) {
	if s.cfg.Core == nil {
		return nil, nil, fmt.Errorf("%w: NICo Core is not configured (NICO_CORE_API_URL)", ErrNothingToImport)
	}
	desired, err := s.cfg.Core.DesiredFirmware(ctx)
	if err != nil {
		return nil, nil, err
	}
	devs, err := s.cfg.Inventory.FirmwareDevices(ctx, dbtx, inventory.FirmwareDeviceFilter{})
	if err != nil {
		return nil, nil, err
	}
	typeByModel := map[string]string{}
	for _, d := range devs {
		typeByModel[strings.ToLower(d.Manufacturer)+"\x00"+d.Model] = typeOf(d.Type)
	}
	var entries []Entry
	var warnings []string
	for i, e := range desired {
		t := typeByModel[strings.ToLower(e.Vendor)+"\x00"+e.Model]
		if t == "" {
			t = guessType(e.Components)
		}
		for _, k := range slices.Sorted(mapKeys(e.Components)) {
			c := strings.ToLower(strings.TrimSpace(k))
			if a, ok := coreKeyAliases[c]; ok {
				c = a
			}
			v := strings.TrimSpace(e.Components[k])
			switch {
			case !slices.Contains(SubComponents[t], c):
				warnings = append(warnings, fmt.Sprintf("Core entry %d (%s %s): key %q is no %s sub-component; left out", i, e.Vendor, e.Model, k, t))
			case checkVersion(v) != nil:
				warnings = append(warnings, fmt.Sprintf("Core entry %d (%s %s): %s version %q: %v; left out", i, e.Vendor, e.Model, k, v, checkVersion(v)))
			default:
				entries = append(entries, Entry{ComponentType: t, Component: c, Version: v, Vendor: e.Vendor, Model: e.Model})
			}
		}
	}
	if len(entries) == 0 {
		return nil, warnings, fmt.Errorf("%w: NICo Core holds no desired version Flow can use (%d entries read)", ErrNothingToImport, len(desired))
	}
	return entries, warnings, nil
}

// guessType is the component type whose sub-components cover the most of
// keys (compute on a tie).
func guessType(keys map[string]string) string {
	best, bestN := TypeCompute, -1
	for _, t := range Types {
		n := 0
		for k := range keys {
			if slices.Contains(SubComponents[t], strings.ToLower(k)) {
				n++
			}
		}
		if n > bestN {
			best, bestN = t, n
		}
	}
	return best
}
