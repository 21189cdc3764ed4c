package notify_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/notify"
)

// TestPruneKeepsPendingAndRecent: retention deletes delivered deliveries
// and dead letters past their cutoffs, in batches, and an event only once
// no delivery of it is left; a pending delivery (however old) keeps itself
// and its event, and recent ones stay. Deleting a subscription takes the
// events only it had.
func TestPruneKeepsPendingAndRecent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, notify.DeliveryConfig{BackoffMin: time.Hour, BackoffMax: time.Hour})
	ok := newReceiver(t, nil)
	gone := newReceiver(t, func(int) int { return http.StatusGone })
	down := newReceiver(t, func(int) int { return http.StatusServiceUnavailable })
	subOK := b.subscribe(t, ok.srv.URL, notify.AllTypes)
	subDead := b.subscribe(t, gone.srv.URL, notify.AllTypes)
	rack := uuid.New()
	for i := range 5 {
		b.emit(t, rackEvent(rack, "old "+string(rune('a'+i))))
	}
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'delivered'`) == 5 &&
			b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'dead'`) == 5
	}, 10*time.Second, 20*time.Millisecond)
	// The five events are 3 days old, delivered (or dead) 2 days ago.
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := b.pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`UPDATE notify_event SET created_at = created_at - interval '3 days'`)
	exec(`UPDATE notify_delivery SET created_at = created_at - interval '3 days',
		delivered_at = delivered_at - interval '2 days', updated_at = updated_at - interval '2 days'`)
	// A subscription whose receiver is down: the next two events stay
	// pending for it (however old), so they stay too.
	subDown := b.subscribe(t, down.srv.URL, notify.AllTypes)
	for range 2 {
		b.emit(t, rackEvent(rack, "held"))
	}
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM notify_delivery WHERE subscription_id = $1 AND attempts > 0`, subDown.ID) >= 1 &&
			b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'delivered'`) == 7 &&
			b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'dead'`) == 7
	}, 10*time.Second, 20*time.Millisecond)
	exec(`UPDATE notify_event SET created_at = created_at - interval '3 days' WHERE created_at > now() - interval '1 day'`)
	exec(`UPDATE notify_delivery SET created_at = created_at - interval '3 days',
		delivered_at = delivered_at - interval '2 days', updated_at = updated_at - interval '2 days' WHERE created_at > now() - interval '1 day'`)
	// And one recent event, delivered just now.
	b.emit(t, rackEvent(rack, "recent"))
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'delivered'`) == 8
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 8, b.count(t, `SELECT count(*) FROM notify_event`))

	// Dead letters are kept 30 days: only delivered ones go; no event
	// goes (each has a dead letter left).
	now := time.Now()
	c, err := b.svc.Prune(ctx, now.Add(-24*time.Hour), now.Add(-30*24*time.Hour), 2)
	require.NoError(t, err)
	require.Equal(t, notify.PruneCounts{Deliveries: 7, Events: 0}, c)
	require.Equal(t, 8, b.count(t, `SELECT count(*) FROM notify_event`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'delivered'`), "the recent one stays")

	// Dead letters kept a day: they go too, and with them the five
	// events nothing else is left of; the two held by a pending delivery
	// stay, and the recent one.
	c, err = b.svc.Prune(ctx, now.Add(-24*time.Hour), now.Add(-24*time.Hour), 2)
	require.NoError(t, err)
	require.Equal(t, notify.PruneCounts{Deliveries: 7, Events: 5}, c)
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM notify_event`))
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'pending'`), "pending deliveries are never pruned")
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM notify_delivery d JOIN notify_event e ON e.id = d.event_id WHERE d.status = 'pending'`))

	// Nothing more to do; zero times keep everything.
	c, err = b.svc.Prune(ctx, now.Add(-24*time.Hour), now.Add(-24*time.Hour), 2)
	require.NoError(t, err)
	require.Zero(t, c)
	c, err = b.svc.Prune(ctx, time.Time{}, time.Time{}, 2)
	require.NoError(t, err)
	require.Zero(t, c)

	// Deleting the down subscription takes its pending deliveries and the
	// two events only it had; the recent event stays (subOK's delivery).
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.svc.Delete(ctx, tx, subDown.ID)
		return err
	}))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM notify_event`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM notify_delivery WHERE subscription_id = $1`, subOK.ID))
	_ = subDead
}
