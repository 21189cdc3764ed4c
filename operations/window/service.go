package window

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/rollout"
	"github.com/nicoflow/flow/operations/window/internal/dbsqlc"
)

// ErrRunNotFound: a release named no operation run.
var ErrRunNotFound = errors.New("window: operation run not found")

// cacheTTL is how long a process reuses the windows it read: a window
// written on another replica holds (or stops holding) tasks there within
// this time; this process's own writes take effect at once.
const cacheTTL = 2 * time.Second

// Service stores windows and freezes and decides admissions. It implements
// operations.StartGate and rollout.WindowGate.
type Service struct {
	q   *dbsqlc.Queries
	inv *inventory.Service
	ops []string

	mu     sync.Mutex
	cached []Window
	readAt time.Time
}

var (
	_ operations.StartGate = (*Service)(nil)
	_ rollout.WindowGate   = (*Service)(nil)
)

// Config holds what Service needs. Operations are the operation codes and
// types held (ParseOperations; nil: DefaultOperations).
type Config struct {
	Inv        *inventory.Service
	Operations []string
}

// NewService returns a Service.
func NewService(cfg Config) *Service {
	ops := cfg.Operations
	if ops == nil {
		ops = DefaultOperations
	}
	return &Service{q: dbsqlc.New(), inv: cfg.Inv, ops: ops}
}

// Operations returns the operation codes and types windows hold.
func (s *Service) Operations() []string { return slices.Clone(s.ops) }

// Input is a window or freeze to create. Give either Cron (with TimeZone
// and Duration) or StartsAt and EndsAt; the scope names the site or at
// least one hall, row, NVLink domain or rack.
type Input struct {
	Kind        Kind
	Name        string
	Description string
	Cron        string
	TimeZone    string
	Duration    time.Duration
	StartsAt    *time.Time
	EndsAt      *time.Time
	Site        bool
	Halls       []string
	Rows        []string
	NVLDomains  []inventory.NVLDomainRef
	Racks       []inventory.RackRef
	CreatedBy   string
}

// Create validates in, resolves its racks and NVLink domains to IDs and
// stores the window through tx; the caller commits. Bad input is a
// *FieldError naming the field, with nothing written; a taken name is
// ErrExists.
func (s *Service) Create(ctx context.Context, tx pgx.Tx, in Input) (Window, error) {
	if !in.Kind.Valid() {
		return Window{}, invalid("kind", "must be window or freeze, not %q", in.Kind)
	}
	in.Name = strings.TrimSpace(in.Name)
	if in.Name == "" {
		return Window{}, invalid("name", "is required")
	}
	p := dbsqlc.WindowInsertParams{ID: uuid.New(), Kind: string(in.Kind), Name: in.Name, Description: in.Description, CreatedBy: in.CreatedBy,
		Halls: []string{}, RackRows: []string{}, NVLDomainIDs: []uuid.UUID{}, RackIDs: []uuid.UUID{}}
	oneOff := in.StartsAt != nil || in.EndsAt != nil
	switch {
	case in.Cron != "" && oneOff:
		return Window{}, invalid("cron", "give either cron (with time_zone and duration) or starts_at and ends_at, not both")
	case in.Cron != "":
		if _, err := parseCron(in.Cron, in.TimeZone); err != nil {
			return Window{}, err
		}
		if in.Duration <= 0 {
			return Window{}, invalid("duration", "must be positive, not %s", in.Duration)
		}
		if in.Duration%time.Second != 0 {
			return Window{}, invalid("duration", "must be whole seconds, not %s", in.Duration)
		}
		p.Cron, p.TimeZone, p.DurationSeconds = strings.TrimSpace(in.Cron), in.TimeZone, int64(in.Duration/time.Second)
	case oneOff:
		if in.StartsAt == nil {
			return Window{}, invalid("starts_at", "is required with ends_at")
		}
		if in.EndsAt == nil {
			return Window{}, invalid("ends_at", "is required with starts_at")
		}
		if !in.EndsAt.After(*in.StartsAt) {
			return Window{}, invalid("ends_at", "%s is not after starts_at %s", in.EndsAt.UTC().Format(time.RFC3339), in.StartsAt.UTC().Format(time.RFC3339))
		}
		if in.Duration != 0 || in.TimeZone != "" {
			return Window{}, invalid("duration", "duration and time_zone go with cron, not with starts_at and ends_at")
		}
		p.StartsAt, p.EndsAt = in.StartsAt, in.EndsAt
	default:
		return Window{}, invalid("cron", "give either cron (with time_zone and duration) or starts_at and ends_at")
	}
	p.Site = in.Site
	for i, h := range in.Halls {
		if h = strings.TrimSpace(h); h == "" {
			return Window{}, invalid(fmt.Sprintf("scope.halls[%d]", i), "is empty")
		}
		p.Halls = append(p.Halls, h)
	}
	for i, r := range in.Rows {
		if r = strings.TrimSpace(r); r == "" {
			return Window{}, invalid(fmt.Sprintf("scope.rows[%d]", i), "is empty")
		}
		p.RackRows = append(p.RackRows, r)
	}
	for i, ref := range in.NVLDomains {
		d, err := s.inv.NVLDomain(ctx, tx, ref)
		if err != nil {
			return Window{}, scopeError(fmt.Sprintf("scope.nvl_domains[%d]", i), err)
		}
		if !slices.Contains(p.NVLDomainIDs, d.ID) {
			p.NVLDomainIDs = append(p.NVLDomainIDs, d.ID)
		}
	}
	for i, ref := range in.Racks {
		r, err := s.inv.ResolveRack(ctx, tx, ref)
		if err != nil {
			return Window{}, scopeError(fmt.Sprintf("scope.racks[%d]", i), err)
		}
		if !slices.Contains(p.RackIDs, r.ID) {
			p.RackIDs = append(p.RackIDs, r.ID)
		}
	}
	if len(p.Halls)+len(p.RackRows) > 0 {
		if err := s.checkPlaces(ctx, tx, p.Halls, p.RackRows); err != nil {
			return Window{}, err
		}
	}
	if (Scope{Site: p.Site, Halls: p.Halls, Rows: p.RackRows, NVLDomainIDs: p.NVLDomainIDs, RackIDs: p.RackIDs}).Empty() {
		return Window{}, invalid("scope", "names nothing: give the site, or halls, rows, NVLink domains or racks")
	}
	row, err := s.q.WindowInsert(ctx, tx, p)
	if db.IsUniqueViolation(err, "maintenance_window_kind_name_key") {
		return Window{}, fmt.Errorf("%w: a %s named %q", ErrExists, in.Kind, in.Name)
	} else if err != nil {
		return Window{}, fmt.Errorf("insert window: %w", err)
	}
	s.invalidate()
	return fromRow(row)
}

// checkPlaces refuses a hall or a row that no live rack is in: a typo
// would otherwise make a window or a freeze that covers nothing.
func (s *Service) checkPlaces(ctx context.Context, tx db.DBTX, halls, rows []string) error {
	places, err := s.q.WindowPlaces(ctx, tx)
	if err != nil {
		return fmt.Errorf("read the racks' halls and rows: %w", err)
	}
	known := func(names []string) string {
		if len(names) == 0 {
			return "none"
		}
		slices.Sort(names)
		if len(names) > 10 {
			return strings.Join(names[:10], ", ") + ", …"
		}
		return strings.Join(names, ", ")
	}
	for i, h := range halls {
		if !slices.Contains(places.Halls, h) {
			return invalid(fmt.Sprintf("scope.halls[%d]", i), "no rack is in hall %q (halls: %s)", h, known(places.Halls))
		}
	}
	var have []string
	for _, pos := range places.Positions {
		if row, _ := inventory.SplitPosition(pos); row != "" && !slices.Contains(have, row) {
			have = append(have, row)
		}
	}
	for i, r := range rows {
		if !slices.ContainsFunc(have, func(x string) bool { return strings.EqualFold(x, inventory.RowName(r)) }) {
			return invalid(fmt.Sprintf("scope.rows[%d]", i), "no rack is in row %q (rows: %s)", r, known(have))
		}
	}
	return nil
}

// scopeError is the *FieldError of a scope entry that resolves to nothing.
func scopeError(field string, err error) error {
	var fe *inventory.FieldError
	switch {
	case errors.Is(err, inventory.ErrRackNotFound), errors.Is(err, inventory.ErrNVLDomainNotFound), errors.Is(err, inventory.ErrAmbiguous):
		return invalid(field, "%s", operations.FirstLine(err.Error()))
	case errors.As(err, &fe):
		return invalid(field, "%s", fe.Reason)
	}
	return err
}

func fromRow(r dbsqlc.MaintenanceWindow) (Window, error) {
	w := Window{ID: r.ID, Kind: Kind(r.Kind), Name: r.Name, Description: r.Description, Cron: r.Cron, TimeZone: r.TimeZone,
		Duration: time.Duration(r.DurationSeconds) * time.Second, StartsAt: r.StartsAt, EndsAt: r.EndsAt, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt,
		Scope: Scope{Site: r.Site, Halls: r.Halls, Rows: r.RackRows, NVLDomainIDs: r.NVLDomainIDs, RackIDs: r.RackIDs}}
	if r.Cron != "" {
		sched, err := parseCron(r.Cron, r.TimeZone)
		if err != nil {
			return w, fmt.Errorf("window %q: %w", r.Name, err)
		}
		w.sched = sched
	}
	return w, nil
}

// List returns the windows of kind ("" both), by kind then name.
func (s *Service) List(ctx context.Context, dbtx db.DBTX, kind Kind) ([]Window, error) {
	var k *string
	if kind != "" {
		v := string(kind)
		k = &v
	}
	rows, err := s.q.WindowList(ctx, dbtx, k)
	if err != nil {
		return nil, fmt.Errorf("list windows: %w", err)
	}
	out := make([]Window, 0, len(rows))
	for _, r := range rows {
		w, err := fromRow(r)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// Get returns the window of kind whose ID or name is ref. ErrNotFound.
func (s *Service) Get(ctx context.Context, dbtx db.DBTX, kind Kind, ref string) (Window, error) {
	if strings.TrimSpace(ref) == "" {
		return Window{}, invalid("id", "give the ID or the name")
	}
	var row dbsqlc.MaintenanceWindow
	var err error
	if id, perr := uuid.Parse(ref); perr == nil {
		row, err = s.q.WindowGetByID(ctx, dbtx, id)
		if err == nil && kind != "" && Kind(row.Kind) != kind {
			err = pgx.ErrNoRows
		}
	} else {
		row, err = s.q.WindowGetByName(ctx, dbtx, dbsqlc.WindowGetByNameParams{Kind: string(cmpKind(kind)), Name: ref})
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Window{}, fmt.Errorf("%w: %s %q", ErrNotFound, cmpKind(kind), ref)
	} else if err != nil {
		return Window{}, fmt.Errorf("get window: %w", err)
	}
	return fromRow(row)
}

func cmpKind(k Kind) Kind {
	if k == "" {
		return KindWindow
	}
	return k
}

// Delete deletes the window of kind whose ID or name is ref, through tx.
// ErrNotFound.
func (s *Service) Delete(ctx context.Context, tx pgx.Tx, kind Kind, ref string) (Window, error) {
	w, err := s.Get(ctx, tx, kind, ref)
	if err != nil {
		return Window{}, err
	}
	if _, err := s.q.WindowDelete(ctx, tx, w.ID); err != nil {
		return Window{}, fmt.Errorf("delete window: %w", err)
	}
	s.invalidate()
	return w, nil
}

// ReleaseRun releases operation run runID from windows and freezes (an
// admin's override): from now on it claims its targets whatever the
// windows, and its child tasks are not held. by and reason are recorded.
// ErrRunNotFound; a *FieldError without a reason.
func (s *Service) ReleaseRun(ctx context.Context, tx pgx.Tx, runID uuid.UUID, by, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return invalid("reason", "is required")
	}
	err := s.q.WindowRunReleaseUpsert(ctx, tx, dbsqlc.WindowRunReleaseUpsertParams{OperationRunID: runID, ReleasedBy: by, Reason: strings.TrimSpace(reason)})
	if db.IsForeignKeyViolation(err, "maintenance_window_run_release_operation_run_id_fkey") {
		return fmt.Errorf("%w: %s", ErrRunNotFound, runID)
	}
	return err
}

func (s *Service) invalidate() {
	s.mu.Lock()
	s.cached, s.readAt = nil, time.Time{}
	s.mu.Unlock()
}

// all returns every window and freeze, read at most cacheTTL ago.
func (s *Service) all(ctx context.Context, dbtx db.DBTX) ([]Window, error) {
	s.mu.Lock()
	if s.cached != nil && time.Since(s.readAt) < cacheTTL {
		defer s.mu.Unlock()
		return s.cached, nil
	}
	s.mu.Unlock()
	ws, err := s.List(ctx, dbtx, "")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.cached, s.readAt = ws, time.Now()
	s.mu.Unlock()
	return ws, nil
}

// holds reports whether windows hold operation typ/code.
func (s *Service) holds(typ operations.OperationType, code operations.OperationCode) bool {
	return slices.Contains(s.ops, string(code)) || slices.Contains(s.ops, string(typ))
}

// Hold implements operations.StartGate: a disruptive operation on a rack
// outside every window covering it, or in a freeze covering it, is held
// until the next opening. A child task of a released run is not held.
func (s *Service) Hold(ctx context.Context, dbtx db.DBTX, sub operations.GateSubject) (operations.GateHold, error) {
	if !s.holds(sub.Type, sub.Code) {
		return operations.GateHold{}, nil
	}
	all, err := s.all(ctx, dbtx)
	if err != nil || len(all) == 0 {
		return operations.GateHold{}, err
	}
	var rack inventory.Rack
	if slices.ContainsFunc(all, func(w Window) bool { return !w.Scope.siteOnly() }) {
		if rack, err = s.inv.Rack(ctx, dbtx, sub.RackID, false); err != nil {
			return operations.GateHold{}, fmt.Errorf("read rack %s: %w", sub.RackID, err)
		}
	}
	rack.ID = sub.RackID
	var windows, freezes []Window
	for _, w := range all {
		if !w.Scope.Covers(rack) {
			continue
		}
		if w.Kind == KindFreeze {
			freezes = append(freezes, w)
		} else {
			windows = append(windows, w)
		}
	}
	d := decide(windows, freezes, sub.At)
	if d.at.Equal(sub.At) {
		from, until := openWindow(windows, freezes, sub.At)
		return operations.GateHold{OpenFrom: from, OpenUntil: until}, nil
	}
	if sub.TriggerType == rollout.TriggerOperationRun {
		if id, err := uuid.Parse(sub.TriggerID); err == nil {
			if _, err := s.q.WindowRunReleaseGet(ctx, dbtx, id); err == nil {
				return operations.GateHold{}, nil
			} else if !errors.Is(err, pgx.ErrNoRows) {
				return operations.GateHold{}, err
			}
		}
	}
	return operations.GateHold{Reason: d.reason(), Next: d.at}, nil
}

// HoldTarget implements rollout.WindowGate: whether run runID may claim a
// target (a firmware upgrade) on rack at at.
func (s *Service) HoldTarget(ctx context.Context, dbtx db.DBTX, runID, rackID uuid.UUID, at time.Time) (operations.GateHold, error) {
	return s.Hold(ctx, dbtx, operations.GateSubject{RackID: rackID, Type: operations.OperationTypeFirmwareControl, Code: operations.CodeUpgrade,
		TriggerType: rollout.TriggerOperationRun, TriggerID: runID.String(), At: at})
}

// RunRelease returns who released run runID from windows and why; false
// when nobody did.
func (s *Service) RunRelease(ctx context.Context, dbtx db.DBTX, runID uuid.UUID) (by, reason string, ok bool, err error) {
	r, err := s.q.WindowRunReleaseGet(ctx, dbtx, runID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	} else if err != nil {
		return "", "", false, err
	}
	return r.ReleasedBy, r.Reason, true, nil
}
