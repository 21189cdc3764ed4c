package notify_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/notify"
)

// subscribeBatched subscribes url to every type with batched delivery.
func (b *testBundle) subscribeBatched(t *testing.T, url string, maxN, maxBytes int) notify.Subscription {
	t.Helper()
	var sub notify.Subscription
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		sub, err = b.svc.Create(context.Background(), tx, notify.Input{URL: url, EventTypes: []string{notify.AllTypes}, Secret: secret,
			Batch: true, BatchMax: maxN, BatchMaxBytes: maxBytes})
		return err
	}))
	return sub
}

// emitAll emits evs in one transaction.
func (b *testBundle) emitAll(t *testing.T, evs ...notify.Event) {
	t.Helper()
	require.NoError(t, db.BeginFunc(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		for _, ev := range evs {
			if err := b.svc.Emit(ctx, tx, ev); err != nil {
				return err
			}
		}
		return nil
	}))
}

// batchOf decodes a batched request: its events' messages, checking that
// it is a CloudEvents JSON batch signed over the whole body.
func batchOf(t *testing.T, r received) (msgs []string, ids []string) {
	t.Helper()
	require.Equal(t, notify.BatchContentType, r.ct)
	require.NoError(t, notify.Verify([]byte(secret), r.sig, r.raw, time.Now(), notify.ReplayWindow), "signed over the whole batch")
	var evs []notify.CloudEvent
	require.NoError(t, json.Unmarshal(r.raw, &evs))
	require.NotEmpty(t, evs)
	for _, ce := range evs {
		require.Equal(t, "1.0", ce.SpecVersion)
		var d notify.Data
		require.NoError(t, json.Unmarshal(ce.Data, &d))
		msgs = append(msgs, ce.Subject+" "+d.Message)
		ids = append(ids, ce.ID)
	}
	return msgs, ids
}

// TestBatchedDeliveryOrderAndSignature: a batched subscription gets
// CloudEvents batches of at most its limits (events and bytes), signed
// over the whole body, with every rack's events in order within and
// across batches, each event once.
func TestBatchedDeliveryOrderAndSignature(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{})
	byCount := newReceiver(t, nil)
	byBytes := newReceiver(t, nil)
	b.subscribeBatched(t, byCount.srv.URL, 3, 0)
	b.subscribeBatched(t, byBytes.srv.URL, 0, 1024)
	racks := []uuid.UUID{uuid.New(), uuid.New()}
	var want []string
	var evs []notify.Event
	for i := range 10 {
		r := racks[i%2]
		msg := "event " + string(rune('a'+i))
		evs = append(evs, rackEvent(r, msg))
		want = append(want, "rack/"+r.String()+" "+msg)
	}
	b.emitAll(t, evs[:4]...)
	b.emitAll(t, evs[4:]...)
	for _, tt := range []struct {
		name string
		rcv  *receiver
		ok   func(r received, n int)
	}{
		{"3 events", byCount, func(r received, n int) { require.LessOrEqual(t, n, 3) }},
		{"1 KiB", byBytes, func(r received, n int) {
			if n > 1 {
				require.LessOrEqual(t, len(r.raw), 1024)
			}
		}},
	} {
		require.Eventually(t, func() bool {
			n := 0
			for _, r := range tt.rcv.requests() {
				m, _ := batchOf(t, r)
				n += len(m)
			}
			return n >= 10
		}, 10*time.Second, 20*time.Millisecond, tt.name)
		perRack := map[string][]string{}
		seen := map[string]bool{}
		reqs := tt.rcv.requests()
		require.Greater(t, len(reqs), 1, tt.name+": more than one batch")
		for _, r := range reqs {
			msgs, ids := batchOf(t, r)
			tt.ok(r, len(msgs))
			for i, m := range msgs {
				require.False(t, seen[ids[i]], tt.name+": each event once")
				seen[ids[i]] = true
				perRack[m[:len("rack/")+36]] = append(perRack[m[:len("rack/")+36]], m)
			}
		}
		for _, r := range racks {
			var w []string
			for _, m := range want {
				if m[:len("rack/")+36] == "rack/"+r.String() {
					w = append(w, m)
				}
			}
			require.Equal(t, w, perRack["rack/"+r.String()], tt.name+": a rack's events in order")
		}
	}
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'delivered' AND batch_of IS NULL`) == 20
	}, 10*time.Second, 20*time.Millisecond)
}

// TestBatchedRetryAsAUnit: a batch the receiver fails (500) is sent again
// with exactly the same events in the same order, before the events
// after it; a permanent 4xx makes every delivery of its batch a dead
// letter.
func TestBatchedRetryAsAUnit(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{BackoffMin: 50 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	rcv := newReceiver(t, func(n int) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	b.subscribeBatched(t, rcv.srv.URL, 3, 0)
	rack := uuid.New()
	var evs []notify.Event
	for i := range 5 {
		evs = append(evs, rackEvent(rack, string(rune('a'+i))))
	}
	b.emitAll(t, evs...)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'delivered'`) == 5
	}, 10*time.Second, 20*time.Millisecond)
	reqs := rcv.requests()
	require.Len(t, reqs, 3)
	m1, ids1 := batchOf(t, reqs[0])
	m2, ids2 := batchOf(t, reqs[1])
	m3, _ := batchOf(t, reqs[2])
	p := "rack/" + rack.String() + " "
	require.Equal(t, []string{p + "a", p + "b", p + "c"}, m1)
	require.Equal(t, ids1, ids2, "the failed batch is retried as a unit: the same event IDs")
	require.Equal(t, []string{p + "d", p + "e"}, m3, "then the events after it")
	_ = m2
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM notify_delivery WHERE attempts = 2`))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM notify_delivery WHERE batch_of IS NOT NULL`), "a delivered batch is no longer one to retry")

	// Two failed batches of one lane due together are each sent again as
	// it was ([a] then [c d]), not regrouped by id ([a c] then [d]).
	t.Run("EachBatchAsItWas", func(t *testing.T) {
		t.Parallel()
		b := setup(t, notify.DeliveryConfig{BackoffMin: time.Hour, BackoffMax: time.Hour})
		rcv := newReceiver(t, func(n int) int {
			if n <= 2 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		})
		b.subscribeBatched(t, rcv.srv.URL, 2, 0)
		laneOf := func(r uuid.UUID) int {
			return b.count(t, `SELECT notify_lane_of('rack/' || $1::text)`, r.String())
		}
		r1, r2 := uuid.New(), uuid.New()
		for laneOf(r2) != laneOf(r1) {
			r2 = uuid.New()
		}
		b.emitAll(t, rackEvent(r1, "a"))
		require.Eventually(t, func() bool {
			return b.count(t, `SELECT count(*) FROM notify_delivery WHERE attempts = 1`) == 1
		}, 10*time.Second, 20*time.Millisecond)
		b.emitAll(t, rackEvent(r2, "c"), rackEvent(r2, "d"))
		require.Eventually(t, func() bool {
			return b.count(t, `SELECT count(*) FROM notify_delivery WHERE attempts = 1`) == 3
		}, 10*time.Second, 20*time.Millisecond)
		_, err := b.pool.Exec(context.Background(), `UPDATE notify_delivery SET next_attempt_at = now() WHERE status = 'pending'`)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			return b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'delivered'`) == 3
		}, 10*time.Second, 20*time.Millisecond)
		reqs := rcv.requests()
		require.Len(t, reqs, 4)
		_, first := batchOf(t, reqs[0])
		_, second := batchOf(t, reqs[1])
		_, third := batchOf(t, reqs[2])
		_, fourth := batchOf(t, reqs[3])
		require.Len(t, first, 1)
		require.Len(t, second, 2)
		require.Equal(t, first, third)
		require.Equal(t, second, fourth)
	})
	t.Run("4xxDeadTogether", func(t *testing.T) {
		t.Parallel()
		b := setup(t, notify.DeliveryConfig{})
		gone := newReceiver(t, func(int) int { return http.StatusGone })
		b.subscribeBatched(t, gone.srv.URL, 10, 0)
		b.emitAll(t, rackEvent(rack, "x"), rackEvent(rack, "y"))
		require.Eventually(t, func() bool {
			return b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'dead' AND attempts = 1 AND last_status_code = 410`) == 2
		}, 10*time.Second, 20*time.Millisecond)
		require.Len(t, gone.requests(), 1)
	})
}

// TestBatchedBadInput: batch limits out of range, or without batch, are
// refused naming the field; nothing is saved. The API returns the limits.
func TestBatchedBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{})
	ctx := context.Background()
	for _, tt := range []struct {
		in    notify.Input
		field string
	}{
		{notify.Input{BatchMax: 5}, "batch_max"},
		{notify.Input{BatchMaxBytes: 4096}, "batch_max_bytes"},
		{notify.Input{Batch: true, BatchMax: 1001}, "batch_max"},
		{notify.Input{Batch: true, BatchMax: -1}, "batch_max"},
		{notify.Input{Batch: true, BatchMaxBytes: 100}, "batch_max_bytes"},
		{notify.Input{Batch: true, BatchMaxBytes: 17 << 20}, "batch_max_bytes"},
	} {
		tt.in.URL, tt.in.EventTypes, tt.in.Secret = "http://127.0.0.1:9/", []string{notify.AllTypes}, secret
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.svc.Create(ctx, tx, tt.in)
			return err
		})
		var fe *notify.FieldError
		require.ErrorAs(t, err, &fe, tt.field)
		require.Equal(t, tt.field, fe.Field)
		require.ErrorIs(t, err, notify.ErrInvalid)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM notify_subscription`))
	sub := b.subscribeBatched(t, "http://127.0.0.1:9/", 0, 0)
	got, err := b.svc.Get(ctx, b.pool, sub.ID)
	require.NoError(t, err)
	require.True(t, got.Batched())
	require.Equal(t, notify.DefaultBatchMax, got.BatchMax)
	require.Equal(t, notify.DefaultBatchMaxBytes, got.BatchMaxBytes)
}

// TestEmitMany: several events in one statement are delivered like
// single emits: each once, in order per rack; a dedupe key seen (before,
// or earlier in the same call) writes nothing; an unknown type writes
// nothing at all.
func TestEmitMany(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{})
	rcv := newReceiver(t, nil)
	b.subscribe(t, rcv.srv.URL, notify.AllTypes)
	ctx := context.Background()
	rack := uuid.New()
	dup := rackEvent(rack, "once")
	dup.DedupeKey = "fact-1"
	err := db.BeginFunc(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
		return b.svc.EmitMany(ctx, tx, []notify.Event{rackEvent(rack, "a"), {Type: "flow.nope"}})
	})
	require.ErrorIs(t, err, notify.ErrInvalid)
	require.Zero(t, b.count(t, `SELECT count(*) FROM notify_event`))
	require.NoError(t, db.BeginFunc(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
		return b.svc.EmitMany(ctx, tx, []notify.Event{rackEvent(rack, "a"), dup, rackEvent(rack, "b"), dup, rackEvent(rack, "c")})
	}))
	require.NoError(t, db.BeginFunc(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
		return b.svc.EmitMany(ctx, tx, []notify.Event{dup, rackEvent(rack, "d")})
	}))
	require.Eventually(t, func() bool { return len(rcv.requests()) >= 5 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	var got []string
	for _, r := range rcv.requests() {
		var d notify.Data
		require.NoError(t, json.Unmarshal(r.ce.Data, &d))
		got = append(got, d.Message)
	}
	require.Equal(t, []string{"a", "once", "b", "c", "d"}, got)
}
