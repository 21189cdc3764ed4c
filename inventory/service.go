package inventory

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// The service's methods are split by concept: racks.go, components.go
// (reads) and componentedit.go (writes), bmcs.go, nvldomains.go, and
// resolve.go (target resolution); this file holds what they share.

// Service holds the inventory rules and queries. It keeps no connection:
// every method runs on the db.DBTX or pgx.Tx it is given, and methods that
// write take a pgx.Tx and leave the commit to the caller.
type Service struct {
	q            *dbsqlc.Queries
	taskStats    TaskStatsFunc
	leakHandling LeakHandlingFunc
	// maxComponents bounds a rack's live components when one is added or
	// moved in (0: no bound).
	maxComponents int
	// listed remembers each type's last sync listing length (type → int),
	// to size the next one.
	listed sync.Map
}

// SetMaxComponentsPerRack makes AddComponent and PatchComponent refuse,
// with ErrRackFull, a component that would give its rack more than n live
// components (FLOW_MAX_COMPONENTS_PER_RACK). Requests that carry a whole
// rack are bounded per request at the edge. Call it once at startup.
func (s *Service) SetMaxComponentsPerRack(n int) { s.maxComponents = n }

// checkRoom returns ErrRackFull when rack, locked by the caller, already
// has the most live components it may.
func (s *Service) checkRoom(ctx context.Context, tx pgx.Tx, rack uuid.UUID, field string) error {
	if s.maxComponents <= 0 {
		return nil
	}
	n, err := s.q.ComponentCountLiveByRack(ctx, tx, &rack)
	if err != nil {
		return fmt.Errorf("count components: %w", err)
	}
	if n >= int64(s.maxComponents) {
		return fmt.Errorf("%w: %s %s already has %d components, the limit (FLOW_MAX_COMPONENTS_PER_RACK) is %d", ErrRackFull, field, rack, n, s.maxComponents)
	}
	return nil
}

// NewService returns a Service.
func NewService() *Service {
	return &Service{q: dbsqlc.New()}
}

// TaskStatsFunc counts the unfinished tasks linked to racks and components
// (see TaskStats). The task manager provides it.
type TaskStatsFunc func(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]TaskStats, error)

// SetTaskStats installs the source of task statistics. Call it once at
// startup, before serving.
func (s *Service) SetTaskStats(fn TaskStatsFunc) { s.taskStats = fn }

// TaskStats returns, per rack or component ID, how many unfinished tasks
// (waiting, pending, running) are linked to it: for a rack every active task
// on the rack, for a component the active tasks whose scope includes it.
// ids may mix rack and component UUIDs (they never collide). IDs without
// tasks are absent from the map (their stats are zero). Without a source
// installed (SetTaskStats) the map is empty.
func (s *Service) TaskStats(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]TaskStats, error) {
	if s.taskStats == nil {
		return map[uuid.UUID]TaskStats{}, nil
	}
	return s.taskStats(ctx, dbtx, ids)
}

// addTaskStats sets the task stats, leak status and leak handling of comps
// in place.
func (s *Service) addTaskStats(ctx context.Context, dbtx db.DBTX, comps []Component) error {
	ids := make([]uuid.UUID, len(comps))
	for i := range comps {
		ids[i] = comps[i].ID
	}
	stats, err := s.TaskStats(ctx, dbtx, ids)
	if err != nil {
		return err
	}
	for i := range comps {
		comps[i].TaskStats = stats[comps[i].ID]
	}
	return s.addLeak(ctx, dbtx, comps)
}

func pageLimit(p Page, def int32) (int32, error) {
	if p.Offset < 0 {
		return 0, invalid("pagination.offset", "must not be negative")
	}
	if p.Limit < 0 {
		return 0, invalid("pagination.limit", "must not be negative")
	}
	if p.Limit > MaxPageLimit {
		return 0, invalid("pagination.limit", "must be at most %d", MaxPageLimit)
	}
	if p.Limit == 0 {
		return def, nil
	}
	return p.Limit, nil
}

// likePatterns turns a StringQuery into LIKE patterns (nil: no filter) and
// the ANY/ALL choice.
func likePatterns(q *StringQuery) ([]string, bool) {
	if q == nil || len(q.Patterns) == 0 {
		return nil, false
	}
	out := make([]string, len(q.Patterns))
	for i, p := range q.Patterns {
		if !q.Wildcard {
			out[i] = escapeLike(p)
			continue
		}
		p = strings.NewReplacer("*", "%", "?", "_").Replace(p)
		if !strings.ContainsAny(p, "%_") {
			p = "%" + escapeLike(p) + "%"
		}
		out[i] = p
	}
	return out, q.AnyOf
}

func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(s)
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

func equalPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
