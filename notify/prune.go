package notify

import (
	"context"
	"fmt"
	"time"

	"github.com/nicoflow/flow/notify/internal/dbsqlc"
)

// PruneCounts is what Prune deleted.
type PruneCounts struct {
	Deliveries, Events int64
}

// Prune deletes, in batches of at most batch deliveries each in its own
// statement (the prune job, app/prune.go), the deliveries delivered before
// deliveredBefore and the dead letters last changed before deadBefore
// (a zero time keeps that kind forever), and each event whose last
// delivery went. Pending deliveries are never deleted, nor an event a
// delivery of which is left. It walks the deliveries in id order and
// stops at the first batch that reaches deliveries written after the
// later of the two times (none of those can be due yet), so a cycle reads
// what it deletes and the letters it keeps, not the whole table.
func (s *Service) Prune(ctx context.Context, deliveredBefore, deadBefore time.Time, batch int) (PruneCounts, error) {
	var c PruneCounts
	if deliveredBefore.IsZero() && deadBefore.IsZero() {
		return c, nil
	}
	until := deliveredBefore
	if deadBefore.After(until) {
		until = deadBefore
	}
	// A zero time matches nothing: "before year 1".
	p := dbsqlc.DeliveryPruneParams{WalkUntil: until, Lim: int32(batch), DeliveredBefore: deliveredBefore, DeadBefore: deadBefore}
	for ctx.Err() == nil {
		r, err := s.q.DeliveryPrune(ctx, s.pool, p)
		if err != nil {
			return c, fmt.Errorf("prune webhook deliveries: %w", err)
		}
		c.Deliveries += r.Deliveries
		c.Events += r.Events
		if r.LastID == 0 || r.Reached {
			break
		}
		p.After = r.LastID
	}
	return c, ctx.Err()
}
