package notify_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/notify"
)

const secret = "0123456789abcdef-test-secret"

type testBundle struct {
	pool *pgxpool.Pool
	svc  *notify.Service
	keys *firmware.Keyring
}

func newKeys(t testing.TB) *firmware.Keyring {
	raw := make([]byte, 32)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	keys, err := firmware.NewKeyring(raw)
	require.NoError(t, err)
	return keys
}

// setup returns a notify service on a fresh database whose deliveries a
// River client works (started unless start is false).
func setup(t *testing.T, d notify.DeliveryConfig) *testBundle {
	t.Helper()
	return setupWith(t, d, nil)
}

// setupWith is setup with more of the service's configuration (edit).
func setupWith(t *testing.T, d notify.DeliveryConfig, edit func(*notify.Config)) *testBundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	worker := &notify.Worker{}
	alerts := &notify.AlertWorker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	river.AddWorker(workers, alerts)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{notify.Queue: {MaxWorkers: 8}},
		Workers: workers, Logger: slog.New(slog.DiscardHandler),
		FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	b := &testBundle{pool: pool, keys: newKeys(t)}
	cfg := notify.Config{Pool: pool, Keys: b.keys, Enqueue: notify.RiverEnqueuer(client), Guard: notify.Guard{DevMode: true},
		Site: "test-site", Delivery: d, AlertEnqueue: notify.RiverAlertEnqueuer(client)}
	if edit != nil {
		edit(&cfg)
	}
	b.svc = notify.NewService(cfg)
	worker.Service, alerts.Service = b.svc, b.svc
	require.NoError(t, client.Start(context.Background()))
	dctx, stopDispatch := context.WithCancel(context.Background())
	dispatched := make(chan struct{})
	go func() { defer close(dispatched); b.svc.Run(dctx) }()
	t.Cleanup(func() {
		stopDispatch()
		<-dispatched
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	return b
}

func (b *testBundle) subscribe(t *testing.T, url string, types ...string) notify.Subscription {
	t.Helper()
	var sub notify.Subscription
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		sub, err = b.svc.Create(context.Background(), tx, notify.Input{URL: url, EventTypes: types, Secret: secret})
		return err
	}))
	return sub
}

func (b *testBundle) emit(t *testing.T, ev notify.Event) {
	t.Helper()
	require.NoError(t, db.BeginFunc(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		return b.svc.Emit(ctx, tx, ev)
	}))
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (b *testBundle) deliveries(t *testing.T) []notify.Delivery {
	t.Helper()
	ds, err := b.svc.Deliveries(context.Background(), b.pool, notify.DeliveryFilter{Limit: 1000})
	require.NoError(t, err)
	return ds
}

// received is one request a receiver got.
type received struct {
	ce     notify.CloudEvent
	sig    string
	raw    []byte
	status int
	ct     string
}

// receiver is a real HTTP receiver; answer decides each response.
type receiver struct {
	mu     sync.Mutex
	got    []received
	answer func(n int) int // status for the n-th request (from 1)
	srv    *httptest.Server
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	r := &receiver{answer: answer}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		var ce notify.CloudEvent
		_ = json.Unmarshal(raw, &ce)
		r.mu.Lock()
		n := len(r.got) + 1
		status := http.StatusOK
		if r.answer != nil {
			status = r.answer(n)
		}
		r.got = append(r.got, received{ce: ce, sig: req.Header.Get(notify.SignatureHeader), raw: raw, status: status, ct: req.Header.Get("Content-Type")})
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func rackEvent(rack uuid.UUID, msg string) notify.Event {
	return notify.Event{Type: notify.TaskCompleted, RackID: &rack, Data: notify.Data{
		Rack: &notify.Ref{ID: rack.String(), Name: "rack-" + rack.String()[:4]}, Message: msg,
		Task: &notify.TaskData{ID: uuid.NewString(), OperationType: "power_control", Operation: "power_on", Status: "completed"}}}
}

// TestEmitRolledBack: an event emitted in a transaction that rolls back
// leaves nothing behind and sends nothing; a committed one is delivered.
func TestEmitRolledBack(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{})
	rcv := newReceiver(t, nil)
	b.subscribe(t, rcv.srv.URL, string(notify.TaskCompleted))
	ctx := context.Background()
	rack := uuid.New()
	errBoom := errors.New("the change failed")
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		require.NoError(t, b.svc.Emit(ctx, tx, rackEvent(rack, "rolled back")))
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	require.Zero(t, b.count(t, `SELECT count(*) FROM notify_event`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM notify_delivery`))
	b.emit(t, rackEvent(rack, "committed"))
	require.Eventually(t, func() bool { return len(rcv.requests()) == 1 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	got := rcv.requests()
	require.Len(t, got, 1, "only the committed event is sent")
	var data notify.Data
	require.NoError(t, json.Unmarshal(got[0].ce.Data, &data))
	require.Equal(t, "committed", data.Message)
	require.Equal(t, "1.0", got[0].ce.SpecVersion)
	require.Equal(t, string(notify.TaskCompleted), got[0].ce.Type)
	require.Equal(t, "rack/"+rack.String(), got[0].ce.Subject)
	require.Equal(t, notify.Version, data.Version)
	require.Equal(t, "test-site", data.Site.Name)
	require.Equal(t, rack.String(), data.Rack.ID)
}

// TestEmitFilters: a subscription hears only its types and racks; an event
// nobody wants is not stored; a dedupe key makes one fact one event.
func TestEmitFilters(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{})
	ctx := context.Background()
	rcv := newReceiver(t, nil)
	rackA, rackB := uuid.New(), uuid.New()
	var scoped notify.Subscription
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		scoped, err = b.svc.Create(ctx, tx, notify.Input{URL: rcv.srv.URL, EventTypes: []string{string(notify.TaskFailed)}, RackIDs: []uuid.UUID{rackA}, Secret: secret})
		return err
	}))
	b.emit(t, rackEvent(rackA, "completed, not failed"))
	require.Zero(t, b.count(t, `SELECT count(*) FROM notify_event`), "no subscription wants it")
	failed := rackEvent(rackB, "other rack")
	failed.Type = notify.TaskFailed
	b.emit(t, failed)
	require.Zero(t, b.count(t, `SELECT count(*) FROM notify_event`))
	failed = rackEvent(rackA, "this one")
	failed.Type, failed.DedupeKey = notify.TaskFailed, "task-end/x"
	b.emit(t, failed)
	b.emit(t, failed)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM notify_delivery WHERE subscription_id = $1`, scoped.ID))
	require.Eventually(t, func() bool { return len(rcv.requests()) == 1 }, 10*time.Second, 20*time.Millisecond)
}

// TestReceiverDownThenUp: a receiver down (503) while events for two racks
// are emitted gets every event exactly once when it is back, each rack's in
// the order they were emitted.
func TestReceiverDownThenUp(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, MaxAttempts: 1000})
	var mu sync.Mutex
	down := true
	rcv := newReceiver(t, func(int) int {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	b.subscribe(t, rcv.srv.URL, notify.AllTypes)
	racks := []uuid.UUID{uuid.New(), uuid.New()}
	const perRack = 15
	want := map[string][]string{}
	for i := range perRack {
		for _, r := range racks {
			ev := rackEvent(r, "")
			ev.Data.Message = r.String() + "#" + string(rune('a'+i))
			b.emit(t, ev)
			want["rack/"+r.String()] = append(want["rack/"+r.String()], ev.Data.Message)
		}
	}
	require.Eventually(t, func() bool { return len(rcv.requests()) >= 2 }, 10*time.Second, 20*time.Millisecond, "attempts while down")
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	down = false
	mu.Unlock()
	require.Eventually(t, func() bool {
		for _, d := range b.deliveries(t) {
			if d.Status != notify.StatusDelivered {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond)
	// Of what the receiver accepted: each event once, each rack's in order.
	got := map[string][]string{}
	once := map[string]int{}
	for _, r := range rcv.requests() {
		if r.status != http.StatusNoContent {
			continue
		}
		var data notify.Data
		require.NoError(t, json.Unmarshal(r.ce.Data, &data))
		once[r.ce.ID]++
		got[r.ce.Subject] = append(got[r.ce.Subject], data.Message)
	}
	require.Equal(t, want, got, "every event, in order per rack")
	require.Len(t, once, 2*perRack)
	for id, n := range once {
		require.Equal(t, 1, n, "event %s accepted once", id)
	}
}

// TestRetryDeadLetterTimeout: a 500 is retried until it succeeds; a 4xx is
// dead-lettered at once; a receiver slower than the timeout fails the
// attempt; the last attempt dead-letters; a dead letter can be redriven.
func TestRetryDeadLetterTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("500Retried", func(t *testing.T) {
		t.Parallel()
		b := setup(t, notify.DeliveryConfig{BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
		rcv := newReceiver(t, func(n int) int {
			if n <= 2 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		})
		b.subscribe(t, rcv.srv.URL, notify.AllTypes)
		b.emit(t, rackEvent(uuid.New(), "retried"))
		require.Eventually(t, func() bool {
			ds := b.deliveries(t)
			return len(ds) == 1 && ds[0].Status == notify.StatusDelivered
		}, 10*time.Second, 20*time.Millisecond)
		d := b.deliveries(t)[0]
		require.Equal(t, 3, d.Attempts)
		require.Equal(t, 200, d.LastStatusCode)
		reqs := rcv.requests()
		require.Len(t, reqs, 3)
		require.Equal(t, reqs[0].ce.ID, reqs[2].ce.ID, "one event ID across attempts")
	})
	t.Run("4xxDeadThenRedrive", func(t *testing.T) {
		t.Parallel()
		b := setup(t, notify.DeliveryConfig{BackoffMin: 20 * time.Millisecond})
		var mu sync.Mutex
		status := http.StatusGone
		rcv := newReceiver(t, func(int) int { mu.Lock(); defer mu.Unlock(); return status })
		sub := b.subscribe(t, rcv.srv.URL, notify.AllTypes)
		rack := uuid.New()
		b.emit(t, rackEvent(rack, "first"))
		b.emit(t, rackEvent(rack, "second"))
		require.Eventually(t, func() bool {
			ds := b.deliveries(t)
			return len(ds) == 2 && ds[0].Status == notify.StatusDead && ds[1].Status == notify.StatusDead
		}, 10*time.Second, 20*time.Millisecond, "a dead letter does not hold the next")
		d := b.deliveries(t)[1]
		require.Equal(t, 1, d.Attempts, "a 4xx is not retried")
		require.Equal(t, http.StatusGone, d.LastStatusCode)
		require.Contains(t, d.LastError, "HTTP 410")
		mu.Lock()
		status = http.StatusOK
		mu.Unlock()
		var ids []int64
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
			ids, err = b.svc.Redrive(ctx, tx, nil, sub.ID)
			return err
		}))
		require.Len(t, ids, 2)
		require.Eventually(t, func() bool {
			ds := b.deliveries(t)
			return ds[0].Status == notify.StatusDelivered && ds[1].Status == notify.StatusDelivered
		}, 10*time.Second, 20*time.Millisecond)
	})
	t.Run("SlowTimesOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, notify.DeliveryConfig{Timeout: 200 * time.Millisecond, BackoffMin: 20 * time.Millisecond, MaxAttempts: 2})
		release := make(chan struct{})
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
		}))
		t.Cleanup(slow.Close)
		t.Cleanup(func() { close(release) })
		b.subscribe(t, slow.URL, notify.AllTypes)
		start := time.Now()
		b.emit(t, rackEvent(uuid.New(), "slow"))
		require.Eventually(t, func() bool {
			ds := b.deliveries(t)
			return len(ds) == 1 && ds[0].Status == notify.StatusDead
		}, 10*time.Second, 20*time.Millisecond)
		require.Less(t, time.Since(start), 4*time.Second, "each attempt ends at the timeout")
		d := b.deliveries(t)[0]
		require.Equal(t, 2, d.Attempts)
		require.Contains(t, d.LastError, "timeout")
	})
	t.Run("EndlessBodyBounded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, notify.DeliveryConfig{Timeout: 5 * time.Second})
		endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			chunk := make([]byte, 32<<10)
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}))
		t.Cleanup(endless.Close)
		b.subscribe(t, endless.URL, notify.AllTypes)
		start := time.Now()
		b.emit(t, rackEvent(uuid.New(), "endless"))
		require.Eventually(t, func() bool {
			ds := b.deliveries(t)
			return len(ds) == 1 && ds[0].Status == notify.StatusDelivered
		}, 10*time.Second, 20*time.Millisecond)
		require.Less(t, time.Since(start), 4*time.Second, "the read stops at the bound, not at the timeout")
	})
}

// TestSignature: the receiver verifies the signature with the secret; a
// tampered body, a wrong secret or an old timestamp fail.
func TestSignature(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{})
	rcv := newReceiver(t, nil)
	b.subscribe(t, rcv.srv.URL, notify.AllTypes)
	b.emit(t, rackEvent(uuid.New(), "signed"))
	require.Eventually(t, func() bool { return len(rcv.requests()) == 1 }, 10*time.Second, 20*time.Millisecond)
	r := rcv.requests()[0]
	now := time.Now()
	require.NoError(t, notify.Verify([]byte(secret), r.sig, r.raw, now, notify.ReplayWindow))
	tampered := append([]byte(nil), r.raw...)
	tampered[len(tampered)/2] ^= 1
	require.ErrorIs(t, notify.Verify([]byte(secret), r.sig, tampered, now, notify.ReplayWindow), notify.ErrBadSignature)
	require.ErrorIs(t, notify.Verify([]byte("another secret, long enough"), r.sig, r.raw, now, notify.ReplayWindow), notify.ErrBadSignature)
	require.ErrorIs(t, notify.Verify([]byte(secret), r.sig, r.raw, now.Add(notify.ReplayWindow+time.Minute), notify.ReplayWindow), notify.ErrBadSignature)
	// The secret is stored sealed, not in clear.
	require.Zero(t, b.count(t, `SELECT count(*) FROM notify_subscription WHERE secret::text LIKE '%' || $1 || '%'`, secret))
}

// TestCreateBadInput: a malformed URL, an unknown event type or an empty
// secret is refused naming the field, and nothing is saved.
func TestCreateBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{})
	ctx := context.Background()
	for _, tt := range []struct {
		name, field string
		in          notify.Input
	}{
		{name: "MalformedURL", field: "url", in: notify.Input{URL: "ht!tp://%zz", EventTypes: []string{"*"}, Secret: secret}},
		{name: "NoHost", field: "url", in: notify.Input{URL: "https://", EventTypes: []string{"*"}, Secret: secret}},
		{name: "FTP", field: "url", in: notify.Input{URL: "ftp://example.com/x", EventTypes: []string{"*"}, Secret: secret}},
		{name: "UserInfo", field: "url", in: notify.Input{URL: "https://u:p@example.com/x", EventTypes: []string{"*"}, Secret: secret}},
		{name: "NoTypes", field: "event_types", in: notify.Input{URL: "https://example.com/x", Secret: secret}},
		{name: "UnknownType", field: "event_types[1]", in: notify.Input{URL: "https://example.com/x", EventTypes: []string{"flow.task.failed", "flow.task.exploded"}, Secret: secret}},
		{name: "EmptySecret", field: "secret", in: notify.Input{URL: "https://example.com/x", EventTypes: []string{"*"}}},
		{name: "ShortSecret", field: "secret", in: notify.Input{URL: "https://example.com/x", EventTypes: []string{"*"}, Secret: "short"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				_, err := b.svc.Create(ctx, tx, tt.in)
				return err
			})
			require.ErrorIs(t, err, notify.ErrInvalid)
			var fe *notify.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.field, fe.Field)
		})
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM notify_subscription`))
	// Without a data key, nothing can be sealed.
	noKey := notify.NewService(notify.Config{Pool: b.pool, Guard: notify.Guard{DevMode: true}})
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := noKey.Create(ctx, tx, notify.Input{URL: "https://example.com/x", EventTypes: []string{"*"}, Secret: secret})
		return err
	})
	require.ErrorIs(t, err, notify.ErrNoKey)
}

// TestWebhookTest: Test sends a flow.webhook.test event to one
// subscription.
func TestWebhookTest(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{})
	rcv := newReceiver(t, nil)
	sub := b.subscribe(t, rcv.srv.URL, string(notify.TaskFailed))
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.svc.Test(ctx, tx, sub.ID)
		return err
	}))
	require.Eventually(t, func() bool { return len(rcv.requests()) == 1 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, string(notify.WebhookTest), rcv.requests()[0].ce.Type)
	require.Equal(t, "site", rcv.requests()[0].ce.Subject)
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.svc.Test(ctx, tx, uuid.New())
		return err
	})
	require.ErrorIs(t, err, notify.ErrNotFound)
}

// TestEmitManyInOneTransaction: events written in one transaction for two
// subscriptions (the event and its deliveries are one statement) reach
// each receiver once each and in order, one lane job posting the rack's
// in turn; a dedupe key repeated in the same
// transaction writes nothing the second time.
func TestEmitManyInOneTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{})
	ctx := context.Background()
	rcvs := []*receiver{newReceiver(t, nil), newReceiver(t, nil)}
	for _, r := range rcvs {
		b.subscribe(t, r.srv.URL, notify.AllTypes)
	}
	rack := uuid.New()
	var want []string
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		for i := range 10 {
			ev := rackEvent(rack, fmt.Sprintf("event %02d", i))
			ev.DedupeKey = ev.Data.Message
			want = append(want, ev.Data.Message)
			for range 2 {
				if err := b.svc.Emit(ctx, tx, ev); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	require.Equal(t, 10, b.count(t, `SELECT count(*) FROM notify_event`))
	require.Equal(t, 20, b.count(t, `SELECT count(*) FROM notify_delivery`))
	for _, r := range rcvs {
		require.Eventually(t, func() bool { return len(r.requests()) >= 10 }, 10*time.Second, 20*time.Millisecond)
	}
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'delivered'`) == 20
	}, 10*time.Second, 20*time.Millisecond)
	for _, r := range rcvs {
		var got []string
		ids := map[string]bool{}
		for _, req := range r.requests() {
			var data notify.Data
			require.NoError(t, json.Unmarshal(req.ce.Data, &data))
			got = append(got, data.Message)
			ids[req.ce.ID] = true
		}
		require.Equal(t, want, got, "once each, in order")
		require.Len(t, ids, 10)
	}
}

// TestLaneRetryHoldsOnlyItsSubject: in one lane's batch, a rack whose
// event is answered 500 waits for its retry with the events after it, while
// other racks' events go on; then the rack's arrive in order, once each.
func TestLaneRetryHoldsOnlyItsSubject(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{BackoffMin: 300 * time.Millisecond, BackoffMax: 300 * time.Millisecond})
	ctx := context.Background()
	// Two racks in the same lane (the lane of a subject is fixed:
	// notify_lane_of).
	slow := uuid.New()
	var other uuid.UUID
	for {
		other = uuid.New()
		if b.count(t, `SELECT (notify_lane_of($1) = notify_lane_of($2))::int`, "rack/"+slow.String(), "rack/"+other.String()) == 1 {
			break
		}
	}
	var mu sync.Mutex
	failed := false
	var firstOtherAt, slowAt time.Time
	var got []received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		var ce notify.CloudEvent
		_ = json.Unmarshal(raw, &ce)
		mu.Lock()
		status := http.StatusNoContent
		if ce.Subject == "rack/"+slow.String() && !failed {
			failed, status = true, http.StatusInternalServerError
		}
		if ce.Subject == "rack/"+other.String() && firstOtherAt.IsZero() {
			firstOtherAt = time.Now()
		}
		if ce.Subject == "rack/"+slow.String() && status == http.StatusNoContent && slowAt.IsZero() {
			slowAt = time.Now()
		}
		got = append(got, received{ce: ce, raw: raw, status: status})
		mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	b.subscribe(t, srv.URL, notify.AllTypes)
	want := map[string][]string{}
	require.NoError(t, db.BeginFunc(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
		for i := range 5 {
			for _, r := range []uuid.UUID{slow, other} {
				ev := rackEvent(r, fmt.Sprintf("%s #%d", r, i))
				want["rack/"+r.String()] = append(want["rack/"+r.String()], ev.Data.Message)
				if err := b.svc.Emit(ctx, tx, ev); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'delivered'`) == 10
	}, 20*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, firstOtherAt.Before(slowAt), "the other rack did not wait for the retried one")
	accepted := map[string][]string{}
	for _, r := range got {
		if r.status != http.StatusNoContent {
			continue
		}
		var data notify.Data
		require.NoError(t, json.Unmarshal(r.ce.Data, &data))
		accepted[r.ce.Subject] = append(accepted[r.ce.Subject], data.Message)
	}
	require.Equal(t, want, accepted, "each rack's events once, in order")
}

// TestDeliveredWithoutWake: deliveries written by a process that runs no
// dispatcher (another replica's emit seen by none here, or one whose
// process died before it woke the lane) are found by the sweep and
// delivered.
func TestDeliveredWithoutWake(t *testing.T) {
	t.Parallel()
	b := setup(t, notify.DeliveryConfig{})
	rcv := newReceiver(t, nil)
	b.subscribe(t, rcv.srv.URL, notify.AllTypes)
	ctx := context.Background()
	// An emitter that shares the database and wakes nothing here.
	other := notify.NewService(notify.Config{Pool: b.pool, Keys: b.keys, Guard: notify.Guard{DevMode: true}, Site: "test-site"})
	for i := range 3 {
		require.NoError(t, db.BeginFunc(ctx, b.pool, func(ctx context.Context, tx pgx.Tx) error {
			return other.Emit(ctx, tx, rackEvent(uuid.New(), fmt.Sprintf("unwoken %d", i)))
		}))
	}
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM notify_delivery WHERE status = 'delivered'`) == 3
	}, 15*time.Second, 50*time.Millisecond)
	require.Len(t, rcv.requests(), 3)
}
