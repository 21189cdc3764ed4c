package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/notify"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// WebhookResult is what a run with Options.Subscribe saw at its receiver,
// and what its synthetic event stream (Options.EventsPerSecond) wrote.
type WebhookResult struct {
	// Emitted is how many synthetic events the stream wrote (each in its
	// own committed transaction through notify's outbox), EmittedPerSecond
	// their rate over the stream's time (first submit → end of the wait).
	Emitted          int     `json:"synthetic_emitted"`
	EmittedPerSecond float64 `json:"synthetic_emitted_per_second"`
	// EmitErrors counts the stream's failed transactions.
	EmitErrors int `json:"synthetic_emit_errors"`
	// Events is how many distinct events (event IDs) the receiver got,
	// Requests how many requests: Requests − Events are duplicates.
	Events   int `json:"events"`
	Requests int `json:"requests"`
	// DuringRun is how many distinct events first arrived while the stream
	// ran, DeliveredPerSecond that over the stream's time: what was
	// delivered while the bench ran.
	DuringRun          int     `json:"events_during_run"`
	DeliveredPerSecond float64 `json:"delivered_per_second"`
	// DrainSeconds is how long after the end of the wait the last event
	// arrived (negative: before it ended); Expected is how many events
	// were owed (the tasks' end events and the synthetic ones).
	DrainSeconds float64 `json:"drain_seconds"`
	Expected     int     `json:"expected"`
}

// hookSink is a webhook receiver in the bench process: it answers 204 and
// keeps when each event ID first came.
type hookSink struct {
	srv      *httptest.Server
	mu       sync.Mutex
	first    map[string]time.Time
	last     time.Time
	requests int
}

func newHookSink() *hookSink {
	s := &hookSink{first: map[string]time.Time{}}
	s.srv = httptest.NewServer(s)
	return s
}

func (s *hookSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A single event's ID is in a header as well as in the body
	// (docs/notifications.md): reading the header keeps the receiver's CPU
	// out of the comparison. A batch's IDs are read from its body.
	var ids []string
	if r.Header.Get("Content-Type") == notify.BatchContentType {
		var batch []struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&batch); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, e := range batch {
			ids = append(ids, e.ID)
		}
	} else {
		ids = []string{r.Header.Get("Flow-Event-Id")}
		_, _ = io.Copy(io.Discard, r.Body)
	}
	now := time.Now()
	s.mu.Lock()
	s.requests++
	for _, id := range ids {
		if _, ok := s.first[id]; !ok {
			s.first[id] = now
		}
	}
	s.last = now
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *hookSink) events() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.first)
}

// between counts the events that first came within [from, to].
func (s *hookSink) between(from, to time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.first {
		if !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

// eventStream writes synthetic events at a set rate through notify's real
// outbox: perTx events in each transaction (one statement,
// notify.Service.EmitMany; one: Emit), with their delivery rows; the
// stream's own dispatcher (notify.Service.Run, inserting lane jobs with an
// insert-only River client) wakes their lanes as a replica's would, and
// the server's notify workers deliver them like any other. The events are
// flow.webhook.test events (never emitted by a change; subscriptions to
// every type get them) on the bench racks' subjects in turn, so they are
// ordered per rack like real ones. Without a subscription Emit writes
// nothing, and the stream's transactions are empty.
type eventStream struct {
	pool    *pgxpool.Pool
	svc     *notify.Service
	racks   []inventory.Rack
	rate    float64
	perTx   int
	next    atomic.Int64 // the next event's index
	emitted atomic.Int64
	errs    atomic.Int64
	errMu   sync.Mutex
	err     error
	start   time.Time
	end     time.Time
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// streamWriters is how many transactions the stream has open at once: at
// 1,000 a second each may take 24 ms.
const streamWriters = 24

func startEventStream(ctx context.Context, dbURL string, rate float64, perTx int, racks []inventory.Rack) (*eventStream, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("event stream: %w", err)
	}
	cfg.MaxConns = streamWriters
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("event stream: %w", err)
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("event stream: river client: %w", err)
	}
	st := &eventStream{pool: pool, racks: racks, rate: rate, perTx: perTx,
		svc: notify.NewService(notify.Config{Pool: pool, Enqueue: notify.RiverEnqueuer(rc), Site: "bench"})}
	ctx, st.stop = context.WithCancel(ctx)
	st.start = time.Now()
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		st.svc.Run(ctx)
	}()
	for range streamWriters {
		st.wg.Add(1)
		go st.write(ctx)
	}
	return st, nil
}

// write emits the events whose time has come, perTx to a transaction
// (each group when its last event is due), until ctx ends. A writer that
// falls behind catches up without sleeping.
func (st *eventStream) write(ctx context.Context) {
	defer st.wg.Done()
	n := int64(st.perTx)
	for {
		k := st.next.Add(n) - n
		due := st.start.Add(time.Duration(float64(k+n-1) / st.rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			return
		}
		evs := make([]notify.Event, n)
		for i := range evs {
			r := st.racks[int(k+int64(i))%len(st.racks)]
			evs[i] = notify.Event{Type: notify.WebhookTest, RackID: &r.ID, Data: notify.Data{
				Rack: &notify.Ref{ID: r.ID.String(), Name: r.Name}, Message: fmt.Sprintf("flow bench synthetic event %d", k+int64(i))}}
		}
		// A transaction begun runs to its end: the count is exact.
		wctx := context.WithoutCancel(ctx)
		err := db.BeginFunc(wctx, st.pool, func(ctx context.Context, tx pgx.Tx) error {
			if n == 1 {
				return st.svc.Emit(ctx, tx, evs[0])
			}
			return st.svc.EmitMany(ctx, tx, evs)
		})
		if err == nil {
			st.emitted.Add(n)
		} else {
			st.errs.Add(n)
			st.errMu.Lock()
			if st.err == nil {
				st.err = err
			}
			st.errMu.Unlock()
		}
	}
}

// close stops the stream and returns what it wrote and its first error.
func (st *eventStream) close() (emitted, errs int, seconds float64, err error) {
	st.stop()
	st.wg.Wait()
	st.end = time.Now()
	st.pool.Close()
	return int(st.emitted.Load()), int(st.errs.Load()), st.end.Sub(st.start).Seconds(), st.err
}

// subscribe starts a receiver in this process and subscribes a webhook to
// every event type posting to it.
func (b *Bench) subscribe(ctx context.Context, batch int) (*hookSink, error) {
	sink := newHookSink()
	b.onClose(func(context.Context) error { sink.srv.Close(); return nil })
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	if _, err := b.admin.CreateWebhook(ctx, &adminv1.CreateWebhookRequest{Url: sink.srv.URL, EventTypes: []string{notify.AllTypes},
		Secret: base64.StdEncoding.EncodeToString(secret), Description: "flow bench", Batch: batch > 0, BatchMax: int32(batch)}); err != nil {
		return nil, fmt.Errorf("create webhook (the server needs a data key and dev mode): %w", err)
	}
	return sink, nil
}

// drain waits, a minute at most and with the server still up, until the
// receiver has every event owed (every ended task's, and the synthetic
// ones), and fills res.Webhook's receiver figures.
func (b *Bench) drain(res *Result, sink *hookSink, waited time.Time) {
	w := res.Webhook
	w.Expected = res.Completed + res.Failed + res.PreemptedByLeaks + w.Emitted
	deadline := time.Now().Add(time.Minute)
	for sink.events() < w.Expected && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	w.Events, w.Requests = len(sink.first), sink.requests
	if !sink.last.IsZero() {
		w.DrainSeconds = sink.last.Sub(waited).Seconds()
	}
}
