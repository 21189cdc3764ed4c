package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // cron timezones resolve even where the host lacks tzdata

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/schedule/internal/dbsqlc"
)

// Service keeps task schedules and fires them (spec/orchestration.md §1,
// docs/schedules.md). A firing runs in one transaction that checks the
// schedule is still due at exactly that time, submits each eligible scope
// entry's task through the task manager (a savepoint each), records
// last_task_id, advances next_run_at and arranges the next firing: a crash
// anywhere loses no firing and repeats none.
type Service struct {
	pool   *pgxpool.Pool
	q      *dbsqlc.Queries
	tasks  Tasks
	inv    *inventory.Service
	keys   *firmware.Keyring
	logger *slog.Logger
	now    func() time.Time
	fire   FireScheduler
	// observe hears of each firing Fire handles (metrics); nil: none.
	observe func(outcome string, lag time.Duration)
	// refused hears of refused scope entries (Config.OnRefused).
	refused RefusedFunc
}

// Config holds what Service needs. Now defaults to time.Now;
// Fire is required for schedules to fire on their own.
type Config struct {
	Pool   *pgxpool.Pool
	Tasks  Tasks
	Inv    *inventory.Service
	Keys   *firmware.Keyring
	Logger *slog.Logger
	Now    func() time.Time
	Fire   FireScheduler
	// Observe, when set, hears of each firing's outcome (Fire*) and, for
	// a due firing, its lag behind its due time (else -1).
	Observe func(outcome string, lag time.Duration)
	// OnRefused, when set, hears of each scope entry a firing could not
	// submit, in the firing's transaction (notifications).
	OnRefused RefusedFunc
}

// Refusal is a scope entry a firing could not submit: its rack (nil when
// nothing could be submitted at all, such as credentials that cannot be
// opened) and why.
type Refusal struct {
	ScheduleID uuid.UUID
	Name       string
	At         time.Time
	Manual     bool
	RackID     *uuid.UUID
	Reason     string
}

// RefusedFunc hears of a Refusal inside the firing's transaction; an error
// rolls the firing back (its job retries). It must only write through tx
// and must not do network I/O.
type RefusedFunc func(ctx context.Context, tx pgx.Tx, r Refusal) error

// NewService returns the schedule service.
func NewService(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{pool: cfg.Pool, q: dbsqlc.New(), tasks: cfg.Tasks, inv: cfg.Inv, keys: cfg.Keys, logger: cfg.Logger, now: cfg.Now, fire: cfg.Fire, observe: cfg.Observe,
		refused: cfg.OnRefused}
}

// invalidRequest is operations.ErrInvalidRequest naming the field, as the
// task manager words its own.
func invalidRequest(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", operations.ErrInvalidRequest, field, fmt.Sprintf(format, args...))
}

// ---- timing ---------------------------------------------------------------

// parsedSpec is a validated spec, ready to compute firing times.
type parsedSpec struct {
	spec     Spec
	interval time.Duration
	cron     cron.Schedule
	loc      *time.Location
	at       time.Time
}

// ParseSpec validates spec and returns it as stored and echoed, which is as
// upstream stores and echoes it: the spec string as given (a one-time time
// keeps the offset it was written with), a cron schedule's timezone the
// IANA name given ("UTC" when empty), an interval or one-time schedule's
// timezone as given (it means nothing to them; upstream keeps it too, ""
// when none). Errors are operations.ErrInvalidRequest naming the field
// under prefix (e.g. "schedule.spec").
func ParseSpec(spec Spec, prefix string) (Spec, error) {
	p, err := parseSpec(spec, prefix)
	return p.spec, err
}

func parseSpec(spec Spec, prefix string) (parsedSpec, error) {
	p := parsedSpec{spec: spec, loc: time.UTC}
	s := strings.TrimSpace(spec.Spec)
	if s == "" {
		return p, invalidRequest(prefix+".spec", "is required")
	}
	if len(spec.Timezone) > maxTimezone {
		return p, invalidRequest(prefix+".timezone", "must be at most %d characters", maxTimezone)
	}
	switch spec.Type {
	case SpecInterval:
		d, err := time.ParseDuration(s)
		if err != nil {
			return p, invalidRequest(prefix+".spec", "invalid interval %q: want a Go duration such as 6h or 30m", s)
		}
		if d <= 0 {
			return p, invalidRequest(prefix+".spec", "interval must be greater than zero, got %s", s)
		}
		p.interval = d
	case SpecCron:
		if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
			return p, invalidRequest(prefix+".spec", "give the timezone in %s.timezone, not in the cron line", prefix)
		}
		sched, err := cron.ParseStandard(s)
		if err != nil {
			return p, invalidRequest(prefix+".spec", "invalid cron expression %q: %v", s, err)
		}
		tz := strings.TrimSpace(spec.Timezone)
		if tz == "" {
			tz = "UTC"
		}
		loc, err := time.LoadLocation(tz)
		if err != nil || tz == "Local" {
			return p, invalidRequest(prefix+".timezone", "unknown IANA timezone %q", spec.Timezone)
		}
		p.cron, p.loc, p.spec.Timezone = sched, loc, tz
	case SpecOneTime:
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return p, invalidRequest(prefix+".spec", "invalid one-time spec %q: want an RFC 3339 time with an offset, such as 2026-12-24T02:00:00+01:00", s)
		}
		p.at = t.UTC().Truncate(time.Microsecond)
	default:
		return p, invalidRequest(prefix+".type", "must be INTERVAL, CRON or ONE_TIME")
	}
	return p, nil
}

// maxTimezone is the length of task_schedule.timezone (varchar(64)).
const maxTimezone = 64

// first is the first firing time of a new or resumed schedule: never now.
func (p parsedSpec) first(now time.Time) time.Time {
	switch p.spec.Type {
	case SpecInterval:
		return ceilSecond(now.Add(p.interval))
	case SpecCron:
		return p.cron.Next(now.In(p.loc)).UTC()
	}
	return p.at
}

// after is the firing time that follows a firing due at at and dispatched at
// now; ok is false for a one-time schedule (consumed). Missed occurrences
// are not replayed: an interval keeps its cadence while it can and
// otherwise restarts from now; a cron takes its next match after now.
func (p parsedSpec) after(at, now time.Time) (time.Time, bool) {
	switch p.spec.Type {
	case SpecInterval:
		next := ceilSecond(at.Add(p.interval))
		if !next.After(now) {
			next = ceilSecond(now.Add(p.interval))
		}
		return next, true
	case SpecCron:
		next := p.cron.Next(now.In(p.loc))
		// When clocks fall back, an hour's wall-clock times come twice;
		// a firing at 01:30 does not fire again at the second 01:30.
		if wallClock(next) == wallClock(at.In(p.loc)) {
			next = p.cron.Next(next)
		}
		return next.UTC(), true
	}
	return time.Time{}, false
}

func wallClock(t time.Time) string { return t.Format("2006-01-02 15:04:05") }

// ceilSecond rounds t up to a whole second: firing times are whole seconds,
// so a firing's RFC 3339 time in its tasks' descriptions names it exactly.
func ceilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second).UTC()
	}
	return t.UTC()
}

// ---- rows -----------------------------------------------------------------

func scheduleFromRow(r dbsqlc.TaskSchedule) (Schedule, error) {
	s := Schedule{
		ID: r.ID, Name: r.Name, Spec: Spec{Type: SpecType(r.SpecType), Spec: r.Spec, Timezone: r.Timezone},
		Overlap: OverlapPolicy(r.OverlapPolicy), Enabled: r.Enabled, NextRunAt: r.NextRunAt, LastRunAt: r.LastRunAt,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, CreatedBy: r.CreatedBy,
	}
	if err := json.Unmarshal(r.OperationTemplate, &s.Template); err != nil {
		return Schedule{}, fmt.Errorf("decode schedule %s template: %w", r.ID, err)
	}
	s.NextRunAt, s.LastRunAt = utcPtr(s.NextRunAt), utcPtr(s.LastRunAt)
	return s, nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func scopeFromRow(r dbsqlc.TaskScheduleScope) (Scope, error) {
	sc := Scope{ID: r.ID, ScheduleID: r.ScheduleID, RackID: r.RackID, LastTaskID: r.LastTaskID, CreatedAt: r.CreatedAt}
	if len(r.ComponentFilter) > 0 && string(r.ComponentFilter) != "null" {
		var f ComponentFilter
		if err := json.Unmarshal(r.ComponentFilter, &f); err != nil {
			return sc, fmt.Errorf("decode scope %s filter: %w", r.ID, err)
		}
		sc.Filter = &f
	}
	return sc, nil
}

func filterJSON(f *ComponentFilter) []byte {
	if f == nil {
		return nil
	}
	b, _ := json.Marshal(f)
	return b
}

func scopesFromRows(rows []dbsqlc.TaskScheduleScope) ([]Scope, error) {
	out := make([]Scope, 0, len(rows))
	for _, r := range rows {
		sc, err := scopeFromRow(r)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// ---- config RPCs ----------------------------------------------------------

// validName checks a schedule name, which is kept as given (as upstream
// keeps it): required and not blank, at most 255 characters.
func validName(name string) (string, error) {
	if strings.TrimSpace(name) == "" {
		return "", invalidRequest("schedule.name", "is required")
	}
	if len(name) > 255 {
		return "", invalidRequest("schedule.name", "must be at most 255 characters")
	}
	return name, nil
}

func validOverlap(p OverlapPolicy) (OverlapPolicy, error) {
	switch p {
	case "":
		return OverlapSkip, nil
	case OverlapSkip, OverlapQueue:
		return p, nil
	}
	return "", invalidRequest("schedule.overlap_policy", "must be SKIP or QUEUE")
}

// Create validates ns, resolves its targets to scope entries (at least one
// rack), seals its credentials and writes the schedule, its scopes and its
// first firing through tx; the caller commits. Creation never fires at once
// (a one-time time in the past is due at once, though). Errors:
// operations.ErrInvalidRequest naming the field, ErrExists,
// operations.ErrNoEncryptionKey, the inventory's not-found errors for
// targets.
func (s *Service) Create(ctx context.Context, tx pgx.Tx, ns Input) (Schedule, error) {
	name, err := validName(ns.Name)
	if err != nil {
		return Schedule{}, err
	}
	p, err := parseSpec(ns.Spec, "schedule.spec")
	if err != nil {
		return Schedule{}, err
	}
	overlap, err := validOverlap(ns.Overlap)
	if err != nil {
		return Schedule{}, err
	}
	if err := operations.ValidateRequest(operations.Request{Type: ns.Template.Type, Code: ns.Template.Code}); err != nil {
		return Schedule{}, err
	}
	tmpl := ns.Template
	if !ns.Auth.Empty() {
		if s.keys == nil {
			return Schedule{}, operations.ErrNoEncryptionKey
		}
		env, err := s.keys.Seal(ns.Auth)
		if err != nil {
			return Schedule{}, fmt.Errorf("seal credentials: %w", err)
		}
		tmpl.Information.AuthenticationData = env
	}
	scopes, err := s.resolveScopes(ctx, tx, ns.Targets)
	if err != nil {
		return Schedule{}, err
	}
	raw, err := json.Marshal(tmpl)
	if err != nil {
		return Schedule{}, err
	}
	next := p.first(s.now())
	row, err := s.q.ScheduleInsert(ctx, tx, dbsqlc.ScheduleInsertParams{
		Name: name, SpecType: string(p.spec.Type), Spec: p.spec.Spec, Timezone: p.spec.Timezone,
		OperationTemplate: raw, OverlapPolicy: string(overlap), NextRunAt: &next, CreatedBy: ns.CreatedBy,
	})
	if db.IsUniqueViolation(err, "task_schedule_name_key") {
		return Schedule{}, fmt.Errorf("%w: %q", ErrExists, name)
	} else if err != nil {
		return Schedule{}, fmt.Errorf("insert schedule: %w", err)
	}
	for _, sc := range scopes {
		if _, err := s.q.ScopeInsert(ctx, tx, dbsqlc.ScopeInsertParams{ScheduleID: row.ID, RackID: sc.RackID, ComponentFilter: filterJSON(sc.Filter)}); err != nil {
			return Schedule{}, fmt.Errorf("insert scope: %w", err)
		}
	}
	if err := s.arm(ctx, tx, row.ID, next); err != nil {
		return Schedule{}, err
	}
	return scheduleFromRow(row)
}

// arm arranges the schedule's firing at at.
func (s *Service) arm(ctx context.Context, tx pgx.Tx, id uuid.UUID, at time.Time) error {
	if s.fire == nil {
		return nil
	}
	if err := s.fire(ctx, tx, id, at, 0); err != nil {
		return fmt.Errorf("schedule firing: %w", err)
	}
	return nil
}

// resolveScopes turns targets into one scope entry per rack: rack and
// NVLink-domain targets keep their type filter (none: the whole rack),
// component targets become a components filter on their rack.
func (s *Service) resolveScopes(ctx context.Context, dbtx db.DBTX, targets inventory.TargetSpec) ([]Scope, error) {
	sels, err := s.inv.ResolveTargets(ctx, dbtx, targets)
	if err != nil {
		return nil, err
	}
	out := make([]Scope, 0, len(sels))
	for _, sel := range sels {
		sc := Scope{RackID: sel.Rack.ID}
		switch {
		case len(targets.Components) > 0:
			f := &ComponentFilter{Kind: filterComponents}
			for _, c := range sel.Components {
				f.Components = append(f.Components, c.ID)
			}
			sortIDs(f.Components)
			sc.Filter = f
		case len(sel.Types) > 0:
			f := &ComponentFilter{Kind: filterTypes}
			for _, t := range sel.Types {
				f.Types = append(f.Types, operations.ComponentType(t))
			}
			slices.Sort(f.Types)
			f.Types = slices.Compact(f.Types)
			sc.Filter = f
		}
		out = append(out, sc)
	}
	if len(out) == 0 {
		return nil, invalidRequest("target_spec", "resolves to no rack")
	}
	return out, nil
}

func sortIDs(ids []uuid.UUID) {
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
}

// Get returns schedule id, or ErrNotFound.
func (s *Service) Get(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (Schedule, error) {
	row, err := s.q.ScheduleGetByID(ctx, dbtx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Schedule{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	} else if err != nil {
		return Schedule{}, fmt.Errorf("get schedule %s: %w", id, err)
	}
	return scheduleFromRow(row)
}

func (s *Service) lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (dbsqlc.TaskSchedule, error) {
	row, err := s.q.ScheduleGetByIDForUpdate(ctx, tx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, fmt.Errorf("%w: %s", ErrNotFound, id)
	} else if err != nil {
		return row, fmt.Errorf("lock schedule %s: %w", id, err)
	}
	return row, nil
}

// List returns one page of schedules ordered by creation time then ID, and
// the matching count before paging.
func (s *Service) List(ctx context.Context, dbtx db.DBTX, f Filter) ([]Schedule, int, error) {
	var limit *int32
	if f.Limit > 0 {
		l := int32(f.Limit)
		limit = &l
	}
	rows, err := s.q.ScheduleList(ctx, dbtx, dbsqlc.ScheduleListParams{RackID: f.RackID, EnabledOnly: f.EnabledOnly, RowOffset: int32(f.Offset), RowLimit: limit})
	if err != nil {
		return nil, 0, fmt.Errorf("list schedules: %w", err)
	}
	total, err := s.q.ScheduleCount(ctx, dbtx, dbsqlc.ScheduleCountParams{RackID: f.RackID, EnabledOnly: f.EnabledOnly})
	if err != nil {
		return nil, 0, fmt.Errorf("count schedules: %w", err)
	}
	out := make([]Schedule, 0, len(rows))
	for _, r := range rows {
		sc, err := scheduleFromRow(r)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, sc)
	}
	return out, int(total), nil
}

func updateParams(r dbsqlc.TaskSchedule) dbsqlc.ScheduleUpdateParams {
	return dbsqlc.ScheduleUpdateParams{
		ID: r.ID, Name: r.Name, SpecType: r.SpecType, Spec: r.Spec, Timezone: r.Timezone,
		OverlapPolicy: r.OverlapPolicy, Enabled: r.Enabled, NextRunAt: r.NextRunAt, LastRunAt: r.LastRunAt,
	}
}

func (s *Service) write(ctx context.Context, tx pgx.Tx, p dbsqlc.ScheduleUpdateParams) (Schedule, error) {
	row, err := s.q.ScheduleUpdate(ctx, tx, p)
	if db.IsUniqueViolation(err, "task_schedule_name_key") {
		return Schedule{}, fmt.Errorf("%w: %q", ErrExists, p.Name)
	} else if err != nil {
		return Schedule{}, fmt.Errorf("update schedule %s: %w", p.ID, err)
	}
	return scheduleFromRow(row)
}

// Update applies ch to schedule id under its row lock: a new spec (or a cron
// schedule's new timezone) recomputes next_run_at from now and, when the
// schedule is enabled, arranges that firing. The operation and scope never
// change here. Errors: ErrNotFound, operations.ErrInvalidRequest naming the
// field, ErrExists, ErrConsumed for a new spec of a fired
// one-time schedule.
func (s *Service) Update(ctx context.Context, tx pgx.Tx, id uuid.UUID, ch Change) (Schedule, error) {
	row, err := s.lock(ctx, tx, id)
	if err != nil {
		return Schedule{}, err
	}
	cur, err := scheduleFromRow(row)
	if err != nil {
		return Schedule{}, err
	}
	p := updateParams(row)
	if ch.Name != nil {
		if p.Name, err = validName(*ch.Name); err != nil {
			return Schedule{}, err
		}
	}
	if ch.Overlap != nil {
		if *ch.Overlap == "" {
			return Schedule{}, invalidRequest("schedule.overlap_policy", "must be SKIP or QUEUE")
		}
		o, err := validOverlap(*ch.Overlap)
		if err != nil {
			return Schedule{}, err
		}
		p.OverlapPolicy = string(o)
	}
	if ch.Spec != nil || ch.Timezone != nil {
		spec := cur.Spec
		if ch.Spec != nil {
			if cur.Consumed() {
				return Schedule{}, fmt.Errorf("%w: schedule %s; its spec cannot change", ErrConsumed, id)
			}
			spec.Type, spec.Spec = ch.Spec.Type, ch.Spec.Spec
		}
		if ch.Timezone != nil {
			spec.Timezone = *ch.Timezone
		}
		if spec.Type != SpecCron && ch.Spec == nil {
			// A timezone alone means nothing to an interval or one-time
			// schedule (upstream ignores it too).
			return s.write(ctx, tx, p)
		}
		parsed, err := parseSpec(spec, "schedule.spec")
		if err != nil {
			return Schedule{}, err
		}
		p.SpecType, p.Spec = string(parsed.spec.Type), parsed.spec.Spec
		// As upstream: the stored timezone changes only when one is given
		// for a schedule that is (now) cron; a new spec alone keeps it.
		if ch.Timezone != nil && parsed.spec.Type == SpecCron {
			p.Timezone = parsed.spec.Timezone
		}
		next := parsed.first(s.now())
		p.NextRunAt = &next
		if p.Enabled {
			if err := s.arm(ctx, tx, id, next); err != nil {
				return Schedule{}, err
			}
		}
	}
	return s.write(ctx, tx, p)
}

// Pause disables schedule id; pausing a paused schedule changes nothing.
// Errors: ErrNotFound, ErrConsumed.
func (s *Service) Pause(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Schedule, error) {
	row, err := s.lock(ctx, tx, id)
	if err != nil {
		return Schedule{}, err
	}
	if row.SpecType == string(SpecOneTime) && row.NextRunAt == nil {
		return Schedule{}, fmt.Errorf("%w: schedule %s", ErrConsumed, id)
	}
	if !row.Enabled {
		return scheduleFromRow(row)
	}
	p := updateParams(row)
	p.Enabled = false
	return s.write(ctx, tx, p)
}

// Resume re-enables schedule id: interval and cron schedules get a fresh
// next_run_at counted from now (no instant firing; occurrences missed
// while paused never fire), an unfired one-time schedule keeps its time.
// Resuming an enabled schedule changes nothing. Errors: ErrNotFound,
// ErrConsumed.
func (s *Service) Resume(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Schedule, error) {
	row, err := s.lock(ctx, tx, id)
	if err != nil {
		return Schedule{}, err
	}
	if row.SpecType == string(SpecOneTime) && row.NextRunAt == nil {
		return Schedule{}, fmt.Errorf("%w: schedule %s", ErrConsumed, id)
	}
	if row.Enabled {
		return scheduleFromRow(row)
	}
	parsed, err := parseSpec(Spec{Type: SpecType(row.SpecType), Spec: row.Spec, Timezone: row.Timezone}, "schedule.spec")
	if err != nil {
		return Schedule{}, fmt.Errorf("stored spec of schedule %s: %v", id, err) //nolint:errorlint // internal, not the caller's argument
	}
	p := updateParams(row)
	p.Enabled = true
	if parsed.spec.Type != SpecOneTime {
		next := parsed.first(s.now())
		p.NextRunAt = &next
	}
	if err := s.arm(ctx, tx, id, *p.NextRunAt); err != nil {
		return Schedule{}, err
	}
	return s.write(ctx, tx, p)
}

// Delete removes schedule id and its scope entries; tasks already submitted
// keep running. Errors: ErrNotFound.
func (s *Service) Delete(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	n, err := s.q.ScheduleDelete(ctx, tx, id)
	if err != nil {
		return fmt.Errorf("delete schedule %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return nil
}

// ---- scopes ---------------------------------------------------------------

// Scopes returns schedule id's scope entries in creation order, or
// ErrNotFound.
func (s *Service) Scopes(ctx context.Context, dbtx db.DBTX, id uuid.UUID) ([]Scope, error) {
	if _, err := s.Get(ctx, dbtx, id); err != nil {
		return nil, err
	}
	rows, err := s.q.ScopeListBySchedule(ctx, dbtx, id)
	if err != nil {
		return nil, fmt.Errorf("list scopes: %w", err)
	}
	return scopesFromRows(rows)
}

// mergeFilters merges a new filter into a rack's existing one (spec §1.7):
// no filter absorbs anything, types join types, components join
// components; types against components is an error.
func mergeFilters(cur, add *ComponentFilter) (*ComponentFilter, error) {
	if cur == nil || add == nil {
		return nil, nil
	}
	if cur.Kind != add.Kind {
		return nil, invalidRequest("target_spec", "a rack already filtered by component %s cannot also be filtered by component %s", cur.Kind, add.Kind)
	}
	out := &ComponentFilter{Kind: cur.Kind}
	switch cur.Kind {
	case filterTypes:
		out.Types = append(slices.Clone(cur.Types), add.Types...)
		slices.Sort(out.Types)
		out.Types = slices.Compact(out.Types)
	default:
		out.Components = append(slices.Clone(cur.Components), add.Components...)
		sortIDs(out.Components)
		out.Components = slices.Compact(out.Components)
	}
	return out, nil
}

func sameFilter(a, b *ComponentFilter) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Kind == b.Kind && slices.Equal(a.Types, b.Types) && slices.Equal(a.Components, b.Components)
}

// AddScopes merges targets into schedule id's scope under its row lock: new
// racks get entries, racks already in scope get their filter merged, and a
// merge that is not allowed aborts the whole request. It returns the
// entries created or changed. Errors: ErrNotFound,
// operations.ErrInvalidRequest, the inventory's not-found errors.
func (s *Service) AddScopes(ctx context.Context, tx pgx.Tx, id uuid.UUID, targets inventory.TargetSpec) ([]Scope, error) {
	if _, err := s.lock(ctx, tx, id); err != nil {
		return nil, err
	}
	want, err := s.resolveScopes(ctx, tx, targets)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.ScopeListBySchedule(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	have, err := scopesFromRows(rows)
	if err != nil {
		return nil, err
	}
	byRack := map[uuid.UUID]Scope{}
	for _, sc := range have {
		byRack[sc.RackID] = sc
	}
	type change struct {
		scope  Scope
		filter *ComponentFilter
		insert bool
	}
	var changes []change
	for _, w := range want {
		cur, ok := byRack[w.RackID]
		if !ok {
			changes = append(changes, change{scope: w, filter: w.Filter, insert: true})
			continue
		}
		merged, err := mergeFilters(cur.Filter, w.Filter)
		if err != nil {
			return nil, err
		}
		if !sameFilter(merged, cur.Filter) {
			changes = append(changes, change{scope: cur, filter: merged})
		}
	}
	out := make([]Scope, 0, len(changes))
	for _, c := range changes {
		var row dbsqlc.TaskScheduleScope
		if c.insert {
			row, err = s.q.ScopeInsert(ctx, tx, dbsqlc.ScopeInsertParams{ScheduleID: id, RackID: c.scope.RackID, ComponentFilter: filterJSON(c.filter)})
		} else {
			row, err = s.q.ScopeSetFilter(ctx, tx, dbsqlc.ScopeSetFilterParams{ID: c.scope.ID, ComponentFilter: filterJSON(c.filter)})
		}
		if err != nil {
			return nil, fmt.Errorf("write scope: %w", err)
		}
		sc, err := scopeFromRow(row)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// ReconcileScopes makes schedule id's scope exactly desired under its row
// lock: missing racks are added, racks no longer wanted removed, changed
// filters replaced. It returns the resulting scope and the counts.
func (s *Service) ReconcileScopes(ctx context.Context, tx pgx.Tx, id uuid.UUID, desired inventory.TargetSpec) ([]Scope, ScopeChanges, error) {
	var ch ScopeChanges
	if _, err := s.lock(ctx, tx, id); err != nil {
		return nil, ch, err
	}
	want, err := s.resolveScopes(ctx, tx, desired)
	if err != nil {
		return nil, ch, err
	}
	rows, err := s.q.ScopeListBySchedule(ctx, tx, id)
	if err != nil {
		return nil, ch, err
	}
	have, err := scopesFromRows(rows)
	if err != nil {
		return nil, ch, err
	}
	wanted := map[uuid.UUID]Scope{}
	for _, w := range want {
		wanted[w.RackID] = w
	}
	for _, h := range have {
		w, ok := wanted[h.RackID]
		switch {
		case !ok:
			if _, err := s.q.ScopeDelete(ctx, tx, h.ID); err != nil {
				return nil, ch, err
			}
			ch.Removed++
		case !sameFilter(h.Filter, w.Filter):
			if _, err := s.q.ScopeSetFilter(ctx, tx, dbsqlc.ScopeSetFilterParams{ID: h.ID, ComponentFilter: filterJSON(w.Filter)}); err != nil {
				return nil, ch, err
			}
			ch.Updated++
		}
		delete(wanted, h.RackID)
	}
	for _, w := range want {
		if _, ok := wanted[w.RackID]; !ok {
			continue
		}
		if _, err := s.q.ScopeInsert(ctx, tx, dbsqlc.ScopeInsertParams{ScheduleID: id, RackID: w.RackID, ComponentFilter: filterJSON(w.Filter)}); err != nil {
			return nil, ch, err
		}
		ch.Added++
	}
	rows, err = s.q.ScopeListBySchedule(ctx, tx, id)
	if err != nil {
		return nil, ch, err
	}
	out, err := scopesFromRows(rows)
	return out, ch, err
}

// RemoveScope deletes one scope entry under its schedule's row lock; the
// last entry of a schedule is not removed (ErrLastScope). Errors:
// ErrScopeNotFound.
func (s *Service) RemoveScope(ctx context.Context, tx pgx.Tx, scopeID uuid.UUID) error {
	row, err := s.q.ScopeGetByID(ctx, tx, scopeID)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", ErrScopeNotFound, scopeID)
	} else if err != nil {
		return err
	}
	if _, err := s.lock(ctx, tx, row.ScheduleID); err != nil {
		return err
	}
	n, err := s.q.ScopeCount(ctx, tx, row.ScheduleID)
	if err != nil {
		return err
	}
	if n <= 1 {
		return fmt.Errorf("%w: scope %s of schedule %s", ErrLastScope, scopeID, row.ScheduleID)
	}
	if d, err := s.q.ScopeDelete(ctx, tx, scopeID); err != nil {
		return err
	} else if d == 0 {
		return fmt.Errorf("%w: %s", ErrScopeNotFound, scopeID)
	}
	return nil
}

// ---- conflicts ------------------------------------------------------------

// coarseConflict is the advisory check's pairing (spec §1.8), by operation
// type alone, as the task manager's conflict table pairs them when
// component filters are left out: bring-up (ingestion included: it is a
// bring_up task, code ingest) and decommission conflict with everything,
// and any two power or firmware operations conflict. Upstream pairs them
// the same way.
func coarseConflict(a, b operations.OperationType) bool {
	everything := func(t operations.OperationType) bool {
		return t == operations.OperationTypeBringUp || t == operations.OperationTypeDecommission
	}
	hardware := func(t operations.OperationType) bool {
		return t == operations.OperationTypePowerControl || t == operations.OperationTypeFirmwareControl
	}
	return everything(a) || everything(b) || (hardware(a) && hardware(b))
}

// Conflicts returns the enabled schedules, other than exclude, that have a
// scope entry on a rack targets resolves to and whose operation may
// conflict with (typ, code) at execution time, by operation alone
// (component filters are not compared: false positives are expected).
func (s *Service) Conflicts(ctx context.Context, dbtx db.DBTX, typ operations.OperationType, targets inventory.TargetSpec, exclude uuid.UUID) ([]Schedule, error) {
	scopes, err := s.resolveScopes(ctx, dbtx, targets)
	if err != nil {
		return nil, err
	}
	racks := make([]uuid.UUID, len(scopes))
	for i, sc := range scopes {
		racks[i] = sc.RackID
	}
	rows, err := s.q.ScheduleEnabledOnRacks(ctx, dbtx, racks)
	if err != nil {
		return nil, fmt.Errorf("schedules on racks: %w", err)
	}
	var out []Schedule
	for _, r := range rows {
		if r.ID == exclude {
			continue
		}
		sc, err := scheduleFromRow(r)
		if err != nil {
			return nil, err
		}
		if coarseConflict(typ, sc.Template.Type) {
			out = append(out, sc)
		}
	}
	return out, nil
}
