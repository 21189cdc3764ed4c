// Package powerbudget keeps the power budgets of feeds (issue 45,
// docs/operations.md "Feeds, loops and power budgets"): per feed, the most
// power transitions in progress at once on its racks and optionally a kW
// budget. It maps them onto engine resources: a power transition on a rack
// of feed F holds one unit of "power-feed/F/transitions" and its draw
// (trays × FLOW_POWER_TRAY_KW + shelves × FLOW_POWER_SHELF_KW) of
// "power-feed/F/kw" for the rest of its task; a budget is those resources'
// capacities. The engine admits the steps (engine.Hold): counted in
// PostgreSQL under the resources' row locks, released when the task's run
// ends, crash-safe with the run.
package powerbudget

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/powerbudget/internal/dbsqlc"
)

// Errors of the service: ErrInvalid (a bad field, the message names it),
// ErrUnknownFeed (no rack is on the feed and no budget names it),
// ErrNotFound (no budget).
var (
	ErrInvalid     = errors.New("invalid power budget")
	ErrUnknownFeed = errors.New("unknown feed")
	ErrNotFound    = errors.New("power budget not found")
)

// Default draw figures (kW) of a power transition, per compute tray and
// per power shelf, when FLOW_POWER_TRAY_KW and FLOW_POWER_SHELF_KW are not
// set: an NVL72 rack of 18 trays and 8 shelves draws 18 × 6.5 + 8 × 1.5 =
// 129 kW, inside the 120–140 kW such a rack draws.
const (
	DefaultTrayKW  = 6.5
	DefaultShelfKW = 1.5
)

// Budget is a feed, its budget (Set false: none) and its use.
type Budget struct {
	Feed           string
	Set            bool
	MaxTransitions int
	MaxKW          *float64
	// Transitions and KW are in progress now; Waiting counts the racks
	// whose transition waits for the budget.
	Transitions int
	KW          float64
	Waiting     int
	Halls       []string
	Racks       int
	UpdatedBy   string
	UpdatedAt   time.Time
}

// Service keeps the budgets.
type Service struct {
	pool            *pgxpool.Pool
	engine          *engine.Engine
	q               *dbsqlc.Queries
	trayKW, shelfKW float64
}

// New returns the service on pool, writing capacities through e; trayKW
// and shelfKW are the draw figures (0 takes the defaults).
func New(pool *pgxpool.Pool, e *engine.Engine, trayKW, shelfKW float64) *Service {
	if trayKW <= 0 {
		trayKW = DefaultTrayKW
	}
	if shelfKW <= 0 {
		shelfKW = DefaultShelfKW
	}
	return &Service{pool: pool, engine: e, q: dbsqlc.New(), trayKW: trayKW, shelfKW: shelfKW}
}

func transitionsResource(feed string) string { return "power-feed/" + feed + "/transitions" }
func kwResource(feed string) string          { return "power-feed/" + feed + "/kw" }

// Holds is the operations.TransitionHolds of the budgets: what a power
// transition on a rack of feed takes, given the compute trays and power
// shelves it targets.
func (s *Service) Holds(feed string, trays, shelves int) []engine.Hold {
	kw := float64(trays)*s.trayKW + float64(shelves)*s.shelfKW
	return []engine.Hold{
		{Resource: transitionsResource(feed), Amount: 1, Label: "power budget of feed " + feed, Unit: "transitions"},
		{Resource: kwResource(feed), Amount: kw, Label: "kW budget of feed " + feed, Unit: "kW"},
	}
}

// Set creates or replaces feed's budget, by who. Errors: ErrInvalid
// naming the field (feed, max_transitions, max_kw), ErrUnknownFeed.
func (s *Service) Set(ctx context.Context, feed string, maxTransitions int, maxKW *float64, who string) (Budget, error) {
	if feed == "" {
		return Budget{}, fmt.Errorf("%w: feed: required", ErrInvalid)
	}
	if err := inventory.CheckPlacementName("feed", feed); err != nil {
		return Budget{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if maxTransitions < 1 || maxTransitions > math.MaxInt32 {
		return Budget{}, fmt.Errorf("%w: max_transitions: %d; give at least 1 (delete the budget to lift it)", ErrInvalid, maxTransitions)
	}
	if maxKW != nil && !(*maxKW > 0 && !math.IsInf(*maxKW, 1)) {
		return Budget{}, fmt.Errorf("%w: max_kw: %v; give a number of kW above 0, or none", ErrInvalid, *maxKW)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		known, err := s.q.FeedKnown(ctx, tx, feed)
		if err != nil {
			return err
		}
		if !known {
			return fmt.Errorf("%w %q: no rack is on it (set racks' feeds with flow rack set RACK --feed %s)", ErrUnknownFeed, feed, feed)
		}
		if _, err := s.q.BudgetUpsert(ctx, tx, dbsqlc.BudgetUpsertParams{Feed: feed, MaxTransitions: int32(maxTransitions), MaxKw: maxKW, UpdatedBy: who}); err != nil {
			return err
		}
		if err := s.engine.SetCapacity(ctx, tx, transitionsResource(feed), float64(maxTransitions)); err != nil {
			return err
		}
		if maxKW != nil {
			if err := s.engine.SetCapacity(ctx, tx, kwResource(feed), *maxKW); err != nil {
				return err
			}
		} else if _, err := s.engine.DeleteCapacity(ctx, tx, kwResource(feed)); err != nil {
			return err
		}
		// A budget that grew admits waiters now.
		if err := s.engine.WakeWaiters(ctx, tx, transitionsResource(feed)); err != nil {
			return err
		}
		return s.engine.WakeWaiters(ctx, tx, kwResource(feed))
	})
	if err != nil {
		return Budget{}, err
	}
	return s.Get(ctx, feed)
}

// Delete removes feed's budget and returns it as it was. ErrNotFound.
func (s *Service) Delete(ctx context.Context, feed string) (Budget, error) {
	before, err := s.Get(ctx, feed)
	if err != nil {
		return Budget{}, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := s.q.BudgetDelete(ctx, tx, feed); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: feed %q has no budget", ErrNotFound, feed)
		} else if err != nil {
			return err
		}
		for _, r := range []string{transitionsResource(feed), kwResource(feed)} {
			if _, err := s.engine.DeleteCapacity(ctx, tx, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Budget{}, err
	}
	before.Set, before.MaxTransitions, before.MaxKW = false, 0, nil
	return before, nil
}

// Get returns feed's budget and use. ErrNotFound when it has none.
func (s *Service) Get(ctx context.Context, feed string) (Budget, error) {
	all, err := s.List(ctx)
	if err != nil {
		return Budget{}, err
	}
	for _, b := range all {
		if b.Feed == feed && b.Set {
			return b, nil
		}
	}
	return Budget{}, fmt.Errorf("%w: feed %q has no budget", ErrNotFound, feed)
}

// List returns every feed (a rack's or a budget's), by name, with its
// budget and use.
func (s *Service) List(ctx context.Context) ([]Budget, error) {
	return s.list(ctx, s.pool)
}

func (s *Service) list(ctx context.Context, dbtx db.DBTX) ([]Budget, error) {
	feeds, err := s.q.FeedList(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list feeds: %w", err)
	}
	budgets, err := s.q.BudgetList(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", err)
	}
	byFeed := map[string]*Budget{}
	var out []*Budget
	get := func(feed string) *Budget {
		if b, ok := byFeed[feed]; ok {
			return b
		}
		b := &Budget{Feed: feed}
		byFeed[feed] = b
		out = append(out, b)
		return b
	}
	for _, f := range feeds {
		b := get(f.Feed)
		b.Racks, b.Halls = int(f.Racks), f.Halls
	}
	for _, r := range budgets {
		b := get(r.Feed)
		b.Set, b.MaxTransitions, b.MaxKW, b.UpdatedBy, b.UpdatedAt = true, int(r.MaxTransitions), r.MaxKw, r.UpdatedBy, r.UpdatedAt
	}
	names := make([]string, 0, 2*len(out))
	for _, b := range out {
		names = append(names, transitionsResource(b.Feed), kwResource(b.Feed))
	}
	use, err := s.engine.Resources(ctx, dbtx, names)
	if err != nil {
		return nil, fmt.Errorf("read feeds' use: %w", err)
	}
	for _, b := range out {
		for _, u := range use {
			switch u.Name {
			case transitionsResource(b.Feed):
				b.Transitions, b.Waiting = u.Holders, max(b.Waiting, u.Waiting)
			case kwResource(b.Feed):
				b.KW, b.Waiting = u.Used, max(b.Waiting, u.Waiting)
			}
		}
	}
	slices.SortFunc(out, func(a, b *Budget) int { return strings.Compare(a.Feed, b.Feed) })
	res := make([]Budget, len(out))
	for i, b := range out {
		res[i] = *b
	}
	return res, nil
}
