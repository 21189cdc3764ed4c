package isolation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/isolation/internal/dbsqlc"
)

// PlacementFunc returns rack's name, feed and loop (inventory.ErrRackNotFound
// when there is no such live rack).
type PlacementFunc func(ctx context.Context, dbtx db.DBTX, rack uuid.UUID) (Placement, error)

// LoopRacksFunc returns the live racks on coolant loop (none: an unknown
// loop).
type LoopRacksFunc func(ctx context.Context, dbtx db.DBTX, loop string) ([]uuid.UUID, error)

// RequestFunc sends a facility request in tx (app: notify.Emit of
// flow.rack.isolation_requested, so the outbox commits with the change); an
// error rolls the change back. It must only write through tx.
type RequestFunc func(ctx context.Context, tx pgx.Tx, r Request) error

// Defaults of Config.
const (
	DefaultThreshold = 2
	DefaultResend    = 5 * time.Minute
	// coolingRecheck is how soon a task the cooling hold keeps waiting is
	// looked at again.
	coolingRecheck = 10 * time.Second
)

// SubmittedBy is who the isolations' power-off tasks are submitted by;
// TriggerType their trigger type (trigger_id: the isolation's ID).
const (
	SubmittedBy = "flow:leak-isolation"
	TriggerType = "rack_isolation"
)

// Config holds what a Service needs. Zero values take the defaults.
type Config struct {
	Pool      *pgxpool.Pool
	Inv       *inventory.Service
	Tasks     *operations.Tasks
	Placement PlacementFunc
	LoopRacks LoopRacksFunc
	OnRequest RequestFunc
	// Threshold is how many open leaks on one rack make it severe
	// (FLOW_LEAK_SEVERE_THRESHOLD, 2).
	Threshold int
	// Resend is how often an unacknowledged request is sent again
	// (FLOW_LEAK_ISOLATION_RESEND, 5m).
	Resend time.Duration
	// NoCooling turns cooling awareness off (FLOW_LEAK_COOLING_HOLD=false):
	// no task waits for a leak on its loop.
	NoCooling bool
	Logger    *slog.Logger
}

// Service keeps isolations and BMS reports.
type Service struct {
	cfg Config
	q   *dbsqlc.Queries
}

// NewService returns a Service.
func NewService(cfg Config) *Service {
	if cfg.Threshold <= 0 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.Resend <= 0 {
		cfg.Resend = DefaultResend
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, q: dbsqlc.New()}
}

// Threshold returns the severe tier's threshold.
func (s *Service) Threshold() int { return s.cfg.Threshold }

// Check is the severe tier, run after each leak-detection cycle: every rack
// whose open, not overridden leaks reach the threshold, not isolated, and
// with a leak detected after its last isolation was cleared, is isolated
// (Isolate). It returns the isolations it opened.
func (s *Service) Check(ctx context.Context) ([]Isolation, error) {
	racks, err := s.cfg.Inv.RacksLeaking(ctx, s.cfg.Pool, s.cfg.Threshold)
	if err != nil || len(racks) == 0 {
		return nil, err
	}
	ids := make([]uuid.UUID, len(racks))
	for i, r := range racks {
		ids[i] = r.RackID
	}
	open, err := s.q.IsolationOpenOfRacks(ctx, s.cfg.Pool, ids)
	if err != nil {
		return nil, fmt.Errorf("open isolations: %w", err)
	}
	cleared, err := s.q.IsolationLastCleared(ctx, s.cfg.Pool, ids)
	if err != nil {
		return nil, fmt.Errorf("cleared isolations: %w", err)
	}
	isolated := map[uuid.UUID]bool{}
	for _, o := range open {
		isolated[o.RackID] = true
	}
	lastClear := map[uuid.UUID]time.Time{}
	for _, c := range cleared {
		lastClear[c.RackID] = c.ClearedAt
	}
	var out []Isolation
	var errs []error
	for _, r := range racks {
		if isolated[r.RackID] {
			continue
		}
		if c, ok := lastClear[r.RackID]; ok && !r.LastDetected.After(c) {
			continue // the leaks an operator already cleared the rack for
		}
		reason := fmt.Sprintf("%d open coolant leaks on the rack reach the severe threshold of %d", len(r.ComponentIDs), s.cfg.Threshold)
		var iso Isolation
		var ok bool
		err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) (err error) {
			iso, ok, err = s.isolate(ctx, tx, r.RackID, TierSevere, reason, r.ComponentIDs, nil, r.LastDetected)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("isolate rack %s: %w", r.RackID, err))
			continue
		}
		if ok {
			s.cfg.Logger.WarnContext(ctx, "rack isolation requested", "rack_id", r.RackID, "isolation_id", iso.ID, "tier", iso.Tier, "reason", reason)
			out = append(out, iso)
		}
	}
	return out, errors.Join(errs...)
}

// isolate opens an isolation of rack through tx, unless it has one open
// (false): it pre-empts the rack's work, submits a forced power-off of
// every component of the rack as a leak response (never held by windows,
// budgets or approvals), and sends the first facility request.
func (s *Service) isolate(ctx context.Context, tx pgx.Tx, rackID uuid.UUID, tier Tier, reason string, comps []uuid.UUID, report *uuid.UUID, observed time.Time) (Isolation, bool, error) {
	if comps == nil {
		comps = []uuid.UUID{}
	}
	row, err := s.q.IsolationInsert(ctx, tx, dbsqlc.IsolationInsertParams{
		ID: uuid.New(), RackID: rackID, Tier: string(tier), Reason: reason, ComponentIDs: comps, ReportID: report,
		ObservedAt: observed, NextSendAt: time.Now().Add(s.cfg.Resend),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Isolation{}, false, nil
	} else if err != nil {
		return Isolation{}, false, fmt.Errorf("insert isolation: %w", err)
	}
	iso := fromRow(row)
	rack, err := s.cfg.Inv.Rack(ctx, tx, rackID, true)
	if err != nil {
		return Isolation{}, false, err
	}
	if len(rack.Components) > 0 {
		all := make([]uuid.UUID, len(rack.Components))
		for i, c := range rack.Components {
			all[i] = c.ID
		}
		why := fmt.Sprintf("Terminated: pre-empted by the %s leak isolation %s of the rack (%s)", tier, iso.ID, reason)
		if _, err := s.cfg.Tasks.Preempt(ctx, tx, rackID, all, why); err != nil {
			return Isolation{}, false, fmt.Errorf("pre-empt the rack's work: %w", err)
		}
		code := operations.CodeForcePowerOff
		req := operations.Request{
			Type: operations.OperationTypePowerControl, Code: code, Preempt: true,
			Description:    fmt.Sprintf("Leak isolation (%s): %s", tier, reason),
			Targets:        inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{ID: rackID}}}},
			RequiredRackID: rackID, IdempotencyKey: "rack-isolation:" + iso.ID.String(),
			TriggerType: TriggerType, TriggerID: iso.ID.String(), SubmittedBy: SubmittedBy,
			Payload: operations.Payload{
				Operation: operations.PayloadOperation(operations.OperationTypePowerControl, code), Forced: true, OverrideReadinessCheck: true,
				Leak: &operations.LeakTrigger{EventID: "rack-isolation/" + iso.ID.String(), ObservedAt: observed.UnixNano()},
			},
		}
		if _, err := s.cfg.Tasks.Submit(ctx, tx, req); err != nil {
			return Isolation{}, false, fmt.Errorf("power the rack off: %w", err)
		}
	}
	if err := s.send(ctx, tx, iso, 1); err != nil {
		return Isolation{}, false, err
	}
	return iso, true, nil
}

// send sends request n of iso through tx.
func (s *Service) send(ctx context.Context, tx pgx.Tx, iso Isolation, n int) error {
	if s.cfg.OnRequest == nil {
		return nil
	}
	p, err := s.placement(ctx, tx, iso.RackID)
	if err != nil {
		return err
	}
	if err := s.cfg.OnRequest(ctx, tx, Request{Isolation: iso, Rack: p, Send: n}); err != nil {
		return fmt.Errorf("send the facility request: %w", err)
	}
	return nil
}

func (s *Service) placement(ctx context.Context, dbtx db.DBTX, rack uuid.UUID) (Placement, error) {
	if s.cfg.Placement == nil {
		r, err := s.cfg.Inv.Rack(ctx, dbtx, rack, false)
		return Placement{Name: r.Name}, err
	}
	return s.cfg.Placement(ctx, dbtx, rack)
}

// Resend sends again up to limit unacknowledged requests that are due, and
// makes each due again after the resend interval; it returns how many.
// Replicas share the work: each due isolation is locked by one.
func (s *Service) Resend(ctx context.Context, limit int) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		rows, err := s.q.IsolationDue(ctx, tx, int32(limit))
		if err != nil {
			return fmt.Errorf("due isolations: %w", err)
		}
		for _, r := range rows {
			if err := s.send(ctx, tx, fromRow(r), int(r.Sends)+1); err != nil {
				return err
			}
			if err := s.q.IsolationSent(ctx, tx, dbsqlc.IsolationSentParams{ID: r.ID, NextSendAt: time.Now().Add(s.cfg.Resend)}); err != nil {
				return err
			}
		}
		n = len(rows)
		return nil
	})
	return n, err
}

// DueNow makes every unacknowledged request due at once (a process
// starting: the facility hears again of what it has not acknowledged);
// it returns how many.
func (s *Service) DueNow(ctx context.Context) (int64, error) {
	return s.q.IsolationDueNow(ctx, s.cfg.Pool)
}

// maxText bounds reasons and notes (bytes).
const maxText = 1024

func checkText(field, s string, required bool) (string, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "" && required:
		return "", invalid(field, "is required")
	case len(s) > maxText:
		return "", invalid(field, "must be at most %d bytes, got %d", maxText, len(s))
	}
	return s, nil
}

// Acknowledge records the facility's acknowledgement of rack's pending
// isolation request through tx, by who with an optional note: no more
// requests are sent. ErrNotPending when the rack has none pending (never
// isolated, cleared, or acknowledged already: the message says which).
func (s *Service) Acknowledge(ctx context.Context, tx pgx.Tx, rackID uuid.UUID, by, note string) (Isolation, error) {
	note, err := checkText("note", note, false)
	if err != nil {
		return Isolation{}, err
	}
	row, err := s.q.IsolationAcknowledge(ctx, tx, dbsqlc.IsolationAcknowledgeParams{RackID: rackID, By: &by, Note: &note})
	if errors.Is(err, pgx.ErrNoRows) {
		open, oerr := s.q.IsolationOpenOfRacks(ctx, tx, []uuid.UUID{rackID})
		switch {
		case oerr != nil:
			return Isolation{}, oerr
		case len(open) == 0:
			return Isolation{}, fmt.Errorf("%w: rack %s has no open isolation", ErrNotPending, rackID)
		default:
			return Isolation{}, fmt.Errorf("%w: isolation %s of rack %s was acknowledged already by %s at %s", ErrNotPending, open[0].ID, rackID,
				deref(open[0].AcknowledgedBy), open[0].AcknowledgedAt.UTC().Format(time.RFC3339))
		}
	} else if err != nil {
		return Isolation{}, fmt.Errorf("acknowledge isolation: %w", err)
	}
	return fromRow(row), nil
}

// Clear ends rack's open isolation through tx, by who for reason (required):
// the rack, and the racks on its loop, may be energised again, and no more
// requests are sent. ErrNotIsolated when it has none. The caller wakes the
// loop's waiting tasks after commit (Wake).
func (s *Service) Clear(ctx context.Context, tx pgx.Tx, rackID uuid.UUID, by, reason string) (Isolation, error) {
	reason, err := checkText("reason", reason, true)
	if err != nil {
		return Isolation{}, err
	}
	row, err := s.q.IsolationClear(ctx, tx, dbsqlc.IsolationClearParams{RackID: rackID, By: &by, Reason: &reason})
	if errors.Is(err, pgx.ErrNoRows) {
		return Isolation{}, fmt.Errorf("%w: rack %s has no open isolation", ErrNotIsolated, rackID)
	} else if err != nil {
		return Isolation{}, fmt.Errorf("clear isolation: %w", err)
	}
	return fromRow(row), nil
}

// Override records an admin's override, through tx, of the power-on
// refusal of rack for every open isolation that refuses it (its own, and
// those on its coolant loop), by who for reason (required); it returns
// those isolations. ErrNotIsolated when none refuses it.
func (s *Service) Override(ctx context.Context, tx pgx.Tx, rackID uuid.UUID, by, reason string) ([]Isolation, error) {
	reason, err := checkText("reason", reason, true)
	if err != nil {
		return nil, err
	}
	open, _, err := s.refusing(ctx, tx, rackID)
	if err != nil {
		return nil, err
	}
	if len(open) == 0 {
		return nil, fmt.Errorf("%w: neither rack %s nor a rack on its coolant loop is isolated", ErrNotIsolated, rackID)
	}
	for _, o := range open {
		if err := s.q.IsolationOverrideUpsert(ctx, tx, dbsqlc.IsolationOverrideUpsertParams{RackID: rackID, IsolationID: o.ID, OverrideBy: by, Reason: reason}); err != nil {
			return nil, fmt.Errorf("override isolation: %w", err)
		}
	}
	return open, nil
}

// List returns isolations, newest first: the open ones only, or all (at
// most limit; 0: 100).
func (s *Service) List(ctx context.Context, dbtx db.DBTX, openOnly bool, limit int) ([]Isolation, error) {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	rows, err := s.q.IsolationList(ctx, dbtx, dbsqlc.IsolationListParams{OpenOnly: openOnly, Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list isolations: %w", err)
	}
	out := make([]Isolation, len(rows))
	for i, r := range rows {
		out[i] = fromRow(r)
	}
	return out, nil
}

// Placement returns rack's name, feed and loop.
func (s *Service) Placement(ctx context.Context, dbtx db.DBTX, rack uuid.UUID) (Placement, error) {
	return s.placement(ctx, dbtx, rack)
}

// Wake starts the waiting tasks of the racks on rack's coolant loop (and
// of rack) that no longer wait for anything: after a clear, or a leak's
// end. Errors are logged.
func (s *Service) Wake(ctx context.Context, rack uuid.UUID) {
	racks := []uuid.UUID{rack}
	if p, err := s.placement(ctx, s.cfg.Pool, rack); err == nil && p.Loop != "" && s.cfg.LoopRacks != nil {
		if on, err := s.cfg.LoopRacks(ctx, s.cfg.Pool, p.Loop); err == nil {
			racks = on
		}
	}
	for _, r := range racks {
		if err := s.cfg.Tasks.PromoteRack(ctx, r); err != nil {
			s.cfg.Logger.WarnContext(ctx, "wake the waiting tasks of a rack", "rack_id", r, "error", err.Error())
		}
	}
}

// refusing returns the open isolations that refuse energising rack (its
// own, and those of the racks on its coolant loop) that no admin overrode
// for it, and the rack's placement.
func (s *Service) refusing(ctx context.Context, dbtx db.DBTX, rack uuid.UUID) ([]Isolation, Placement, error) {
	p, err := s.placement(ctx, dbtx, rack)
	if err != nil {
		return nil, p, err
	}
	racks := []uuid.UUID{rack}
	if p.Loop != "" && s.cfg.LoopRacks != nil {
		on, err := s.cfg.LoopRacks(ctx, dbtx, p.Loop)
		if err != nil {
			return nil, p, err
		}
		racks = append(racks, on...)
	}
	rows, err := s.q.IsolationOpenOfRacks(ctx, dbtx, racks)
	if err != nil || len(rows) == 0 {
		return nil, p, err
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	over, err := s.q.IsolationOverridden(ctx, dbtx, dbsqlc.IsolationOverriddenParams{RackID: rack, IsolationIds: ids})
	if err != nil {
		return nil, p, err
	}
	var out []Isolation
	for _, r := range rows {
		if !slices.Contains(over, r.ID) {
			out = append(out, fromRow(r))
		}
	}
	return out, p, nil
}

var _ operations.EnergiseGuard = (*Service)(nil)

// Refusal implements operations.EnergiseGuard: an open isolation of the
// rack that no admin overrode for it refuses every operation that would
// energise it; an open isolation of a rack on its coolant loop refuses
// powering it on (power_on, force_power_on: its other disruptive work
// waits, Hold). The refusal names the isolation and how to end it.
func (s *Service) Refusal(ctx context.Context, dbtx db.DBTX, rack uuid.UUID, code operations.OperationCode) (string, error) {
	anyOpen, err := s.q.IsolationAnyOpen(ctx, dbtx)
	if err != nil || !anyOpen {
		return "", err
	}
	open, p, err := s.refusing(ctx, dbtx, rack)
	if err != nil || len(open) == 0 {
		return "", err
	}
	powerOn := code == operations.CodePowerOn || code == operations.CodeForcePowerOn
	o := open[0]
	for _, i := range open {
		if i.RackID == rack {
			o = i
		}
	}
	if o.RackID != rack && !powerOn {
		return "", nil
	}
	if o.RackID == rack {
		return fmt.Sprintf("rack %s is isolated (%s leak tier, isolation %s requested at %s: %s); it stays off until an operator clears it (`flow rack isolation clear %s --reason ...`) or an admin overrides it (`flow rack isolation override %s --reason ...`)",
			nameOr(p.Name, rack), o.Tier, o.ID, o.RequestedAt.UTC().Format(time.RFC3339), o.Reason, nameOr(p.Name, rack), nameOr(p.Name, rack)), nil
	}
	other, _ := s.placement(ctx, dbtx, o.RackID)
	return fmt.Sprintf("coolant loop %s has a %s leak: rack %s on the loop is isolated (isolation %s requested at %s); racks on the loop stay off until it is cleared (`flow rack isolation clear %s --reason ...`) or an admin overrides it for this rack (`flow rack isolation override %s --reason ...`)",
		p.Loop, o.Tier, nameOr(other.Name, o.RackID), o.ID, o.RequestedAt.UTC().Format(time.RFC3339), nameOr(other.Name, o.RackID), nameOr(p.Name, rack)), nil
}

func nameOr(name string, id uuid.UUID) string {
	if name == "" {
		return id.String()
	}
	return name
}
