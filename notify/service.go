package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/notify/internal/dbsqlc"
)

// Enqueuer inserts the jobs of lanes through the caller's transaction
// (RiverEnqueuer).
type Enqueuer func(ctx context.Context, tx pgx.Tx, lanes []LaneArgs) error

// Config holds what a Service needs. Zero durations take the defaults
// below.
type Config struct {
	Pool *pgxpool.Pool
	// Keys seals and opens the signing secrets (nil: webhooks are refused
	// with ErrNoKey).
	Keys    *firmware.Keyring
	Enqueue Enqueuer
	Guard   Guard
	// Site names the site in every payload (FLOW_SITE_NAME).
	Site string
	// Source is the CloudEvents source of every event ("/flow/<site>"
	// when empty).
	Source   string
	Delivery DeliveryConfig
	Logger   *slog.Logger
	// Observer, if set, hears of emissions and delivery outcomes
	// (metrics), after their transaction commits.
	Observer Observer
	// Alertmanager is where alerts go (no URLs: RaiseAlert is refused);
	// AlertEnqueue inserts their jobs.
	Alertmanager Alertmanager
	AlertEnqueue AlertEnqueuer
}

// DeliveryConfig tunes delivery (FLOW_NOTIFY_*).
type DeliveryConfig struct {
	// Timeout bounds one request, connection to last byte read.
	Timeout time.Duration // FLOW_NOTIFY_TIMEOUT, 10s
	// MaxAttempts is when a delivery becomes a dead letter.
	MaxAttempts int // FLOW_NOTIFY_MAX_ATTEMPTS, 12
	// BackoffMin and BackoffMax bound the exponential backoff between
	// attempts (doubling from BackoffMin, with jitter).
	BackoffMin time.Duration // FLOW_NOTIFY_BACKOFF_MIN, 1s
	BackoffMax time.Duration // FLOW_NOTIFY_BACKOFF_MAX, 10m
	// MaxResponseBytes bounds the response body read (the rest is
	// dropped with the connection).
	MaxResponseBytes int64
	// Workers is how many lanes the process works at once
	// (FLOW_NOTIFY_WORKERS, the notify queue's River workers); each lane
	// posts up to 8 subjects' events at once, and the HTTP client keeps
	// as many idle connections per receiver, so that none is dialled
	// again.
	Workers int
}

// Defaults of DeliveryConfig.
const (
	DefaultTimeout          = 10 * time.Second
	DefaultMaxAttempts      = 12
	DefaultBackoffMin       = time.Second
	DefaultBackoffMax       = 10 * time.Minute
	DefaultMaxResponseBytes = 64 << 10
)

func (c DeliveryConfig) withDefaults() DeliveryConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = c.BackoffMin
	}
	if c.MaxResponseBytes <= 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return c
}

// Observer hears of emissions and delivery outcomes; it must return
// quickly.
type Observer interface {
	// Emitted: one event of typ was written for n deliveries.
	Emitted(typ Type, deliveries int)
	// Delivered: one attempt ended with outcome (delivered, retried, dead).
	Delivered(outcome string)
}

// Delivery outcomes, as the Observer hears them.
const (
	OutcomeDelivered = "delivered"
	OutcomeRetried   = "retried"
	OutcomeDead      = "dead"
)

// Outcomes lists the delivery outcomes (metrics start them at zero).
func Outcomes() []string { return []string{OutcomeDelivered, OutcomeRetried, OutcomeDead} }

// cacheTTL is how long a process reuses the subscriptions it read for Emit:
// a subscription created on another replica starts receiving there within
// this time; this process's own writes take effect at once.
const cacheTTL = 2 * time.Second

// Service keeps subscriptions, writes the outbox and delivers.
type Service struct {
	pool   *pgxpool.Pool
	q      *dbsqlc.Queries
	keys   *firmware.Keyring
	enq    Enqueuer
	guard  Guard
	site   string
	source string
	cfg    DeliveryConfig
	logger *slog.Logger
	obs    Observer
	client *httpClient

	am       Alertmanager
	alertEnq AlertEnqueuer
	amClient *http.Client

	mu     sync.Mutex
	cached []Subscription
	readAt time.Time

	// woken are the lanes this process's committed emits gave new
	// deliveries (LaneArgs.key), which Run gives a job; kick tells Run.
	wakeMu sync.Mutex
	woken  map[string]struct{}
	kick   chan struct{}
}

// NewService returns a Service.
func NewService(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	site := cfg.Site
	if site == "" {
		site = "default"
	}
	src := cfg.Source
	if src == "" {
		src = "/flow/" + site
	}
	d := cfg.Delivery.withDefaults()
	am := cfg.Alertmanager
	if am.Resend <= 0 {
		am.Resend = DefaultResend
	}
	if am.Timeout <= 0 {
		am.Timeout = DefaultTimeout
	}
	return &Service{pool: cfg.Pool, q: dbsqlc.New(), keys: cfg.Keys, enq: cfg.Enqueue, guard: cfg.Guard, site: site, source: src,
		cfg: d, logger: cfg.Logger, obs: cfg.Observer, client: newHTTPClient(cfg.Guard, d),
		am: am, alertEnq: cfg.AlertEnqueue, amClient: &http.Client{Timeout: am.Timeout},
		woken: map[string]struct{}{}, kick: make(chan struct{}, 1)}
}

// Subscription is a webhook subscription. Its secret is never held here.
type Subscription struct {
	ID          uuid.UUID
	URL         string
	EventTypes  []string // catalogue types, or AllTypes
	RackIDs     []uuid.UUID
	Description string
	CreatedBy   string
	CreatedAt   time.Time
	// BatchMax, when positive, makes delivery batched: each request a
	// CloudEvents JSON batch of up to BatchMax events and BatchMaxBytes of
	// body (docs/notifications.md "Batched delivery").
	BatchMax      int
	BatchMaxBytes int
}

// Batched reports whether s's deliveries go in CloudEvents batches.
func (s Subscription) Batched() bool { return s.BatchMax > 0 }

// Batch limits (CreateWebhook's batch_max and batch_max_bytes).
const (
	DefaultBatchMax      = 100
	MaxBatchMax          = 1000
	DefaultBatchMaxBytes = 1 << 20
	MinBatchMaxBytes     = 1 << 10
	MaxBatchMaxBytes     = 16 << 20
)

// matches reports whether s wants an event of typ on rack (nil: site-wide).
func (s Subscription) matches(typ Type, rack *uuid.UUID) bool {
	if !slices.Contains(s.EventTypes, AllTypes) && !slices.Contains(s.EventTypes, string(typ)) {
		return false
	}
	if len(s.RackIDs) == 0 {
		return true
	}
	return rack != nil && slices.Contains(s.RackIDs, *rack)
}

// Input is a subscription to create.
type Input struct {
	URL         string
	EventTypes  []string
	RackIDs     []uuid.UUID
	Secret      string
	Description string
	CreatedBy   string
	// Batch asks for batched delivery, of up to BatchMax events (0:
	// DefaultBatchMax) and BatchMaxBytes of body (0:
	// DefaultBatchMaxBytes); without Batch both must be 0.
	Batch         bool
	BatchMax      int
	BatchMaxBytes int
}

// Create validates in and stores the subscription through tx with its
// secret sealed; the caller commits. Bad input is a *FieldError naming the
// field (url, event_types, secret), with nothing written; no key is
// ErrNoKey.
func (s *Service) Create(ctx context.Context, tx pgx.Tx, in Input) (Subscription, error) {
	u, err := s.guard.CheckURL("url", in.URL)
	if err != nil {
		return Subscription{}, err
	}
	if len(in.EventTypes) == 0 {
		return Subscription{}, invalid("event_types", "name at least one event type (or %q for all): %s", AllTypes, typeList())
	}
	var types []string
	for i, t := range in.EventTypes {
		t = strings.TrimSpace(t)
		if t != AllTypes && !Type(t).Valid() {
			return Subscription{}, invalid(fmt.Sprintf("event_types[%d]", i), "unknown event type %q (known: %s)", t, typeList())
		}
		if !slices.Contains(types, t) {
			types = append(types, t)
		}
	}
	if in.Secret == "" {
		return Subscription{}, invalid("secret", "is required (the receiver verifies the HMAC-SHA256 signature with it)")
	}
	if len(in.Secret) < 16 {
		return Subscription{}, invalid("secret", "is too short: use at least 16 characters (32 random bytes, base64, is best)")
	}
	batchMax, batchBytes, err := batchLimits(in)
	if err != nil {
		return Subscription{}, err
	}
	if s.keys == nil {
		return Subscription{}, ErrNoKey
	}
	env, err := s.keys.Seal(firmware.AuthData{Shared: &in.Secret})
	if err != nil {
		return Subscription{}, fmt.Errorf("seal secret: %w", err)
	}
	sealed, err := json.Marshal(env)
	if err != nil {
		return Subscription{}, err
	}
	racks := in.RackIDs
	if racks == nil {
		racks = []uuid.UUID{}
	}
	row, err := s.q.SubscriptionInsert(ctx, tx, dbsqlc.SubscriptionInsertParams{
		ID: uuid.New(), Url: u.String(), EventTypes: types, RackIDs: racks, Secret: sealed, Description: in.Description, CreatedBy: in.CreatedBy,
		BatchMax: int32(batchMax), BatchMaxBytes: int32(batchBytes),
	})
	if err != nil {
		return Subscription{}, fmt.Errorf("insert subscription: %w", err)
	}
	if err := s.q.LaneInsert(ctx, tx, row.ID); err != nil {
		return Subscription{}, fmt.Errorf("insert subscription's lanes: %w", err)
	}
	db.AfterCommit(ctx, s.forget)
	s.forget() // this transaction's own emissions see it
	return fromRow(row), nil
}

// batchLimits validates in's batch settings and returns the limits to
// store (0, 0: not batched).
func batchLimits(in Input) (int, int, error) {
	if !in.Batch {
		if in.BatchMax != 0 {
			return 0, 0, invalid("batch_max", "is only for batched delivery (set batch)")
		}
		if in.BatchMaxBytes != 0 {
			return 0, 0, invalid("batch_max_bytes", "is only for batched delivery (set batch)")
		}
		return 0, 0, nil
	}
	n, b := in.BatchMax, in.BatchMaxBytes
	if n == 0 {
		n = DefaultBatchMax
	}
	if b == 0 {
		b = DefaultBatchMaxBytes
	}
	if n < 1 || n > MaxBatchMax {
		return 0, 0, invalid("batch_max", "must be 1 to %d events, not %d", MaxBatchMax, in.BatchMax)
	}
	if b < MinBatchMaxBytes || b > MaxBatchMaxBytes {
		return 0, 0, invalid("batch_max_bytes", "must be %d to %d bytes, not %d", MinBatchMaxBytes, MaxBatchMaxBytes, in.BatchMaxBytes)
	}
	return n, b, nil
}

func typeList() string {
	var b []string
	for _, t := range Types() {
		b = append(b, string(t))
	}
	return strings.Join(b, ", ")
}

func fromRow(r dbsqlc.NotifySubscription) Subscription {
	return Subscription{ID: r.ID, URL: r.Url, EventTypes: r.EventTypes, RackIDs: r.RackIDs, Description: r.Description, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt,
		BatchMax: int(r.BatchMax), BatchMaxBytes: int(r.BatchMaxBytes)}
}

// Get returns one subscription, or ErrNotFound.
func (s *Service) Get(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (Subscription, error) {
	row, err := s.q.SubscriptionGetByID(ctx, dbtx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Subscription{}, fmt.Errorf("%w: subscription %s", ErrNotFound, id)
	} else if err != nil {
		return Subscription{}, fmt.Errorf("get subscription: %w", err)
	}
	return fromRow(row), nil
}

// List returns every subscription, oldest first.
func (s *Service) List(ctx context.Context, dbtx db.DBTX) ([]Subscription, error) {
	rows, err := s.q.SubscriptionList(ctx, dbtx)
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	out := make([]Subscription, len(rows))
	for i, r := range rows {
		out[i] = fromRow(r)
	}
	return out, nil
}

// Delete deletes a subscription and its deliveries through tx, and the
// events of those that no other subscription has a delivery of
// (ErrNotFound when there is none).
func (s *Service) Delete(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Subscription, error) {
	sub, err := s.Get(ctx, tx, id)
	if err != nil {
		return Subscription{}, err
	}
	// Its deliveries, and the events no other subscription has one of
	// (no key cascades from an event: migration 0346).
	if _, err := s.q.SubscriptionDeleteDeliveries(ctx, tx, id); err != nil {
		return Subscription{}, fmt.Errorf("delete subscription's deliveries: %w", err)
	}
	if _, err := s.q.SubscriptionDelete(ctx, tx, id); err != nil {
		return Subscription{}, fmt.Errorf("delete subscription: %w", err)
	}
	db.AfterCommit(ctx, s.forget)
	s.forget()
	return sub, nil
}

func (s *Service) forget() {
	s.mu.Lock()
	s.readAt = time.Time{}
	s.mu.Unlock()
}

// subscriptions returns the subscriptions, read through dbtx at most every
// cacheTTL.
func (s *Service) subscriptions(ctx context.Context, dbtx db.DBTX) ([]Subscription, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.readAt.IsZero() && time.Since(s.readAt) < cacheTTL {
		return s.cached, nil
	}
	subs, err := s.List(ctx, dbtx)
	if err != nil {
		return nil, err
	}
	s.cached, s.readAt = subs, time.Now()
	return subs, nil
}

// Wanted reports whether any subscription wants an event of one of types
// (on any rack): emitters skip building events nobody wants.
func (s *Service) Wanted(ctx context.Context, dbtx db.DBTX, types ...Type) (bool, error) {
	if s == nil {
		return false, nil
	}
	subs, err := s.subscriptions(ctx, dbtx)
	if err != nil {
		return false, err
	}
	for _, sub := range subs {
		for _, t := range types {
			if slices.Contains(sub.EventTypes, AllTypes) || slices.Contains(sub.EventTypes, string(t)) {
				return true, nil
			}
		}
	}
	return false, nil
}

// Emit writes ev to the outbox through tx, the transaction of the change it
// reports, with one delivery per matching subscription (one statement, no
// job: Run gives the deliveries' lanes a job once tx commits); the caller
// commits, so a rolled-back change sends nothing and a committed one
// is delivered even if the process dies right after. An event no
// subscription wants is not stored; one whose DedupeKey was emitted before
// writes nothing. Unknown types are ErrInvalid.
func (s *Service) Emit(ctx context.Context, tx pgx.Tx, ev Event) error {
	if s == nil {
		return nil
	}
	if !ev.Type.Valid() && ev.Type != WebhookTest {
		return invalid("type", "unknown event type %q", ev.Type)
	}
	subs, err := s.subscriptions(ctx, tx)
	if err != nil {
		return err
	}
	var ids []uuid.UUID
	for _, sub := range subs {
		if sub.matches(ev.Type, ev.RackID) {
			ids = append(ids, sub.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err = s.emitTo(ctx, tx, ev, ids)
	return err
}

// emitTo writes ev for the subscriptions ids and, once tx commits, wakes
// its deliveries' lanes; it returns the delivery IDs (none when DedupeKey
// was seen).
func (s *Service) emitTo(ctx context.Context, tx pgx.Tx, ev Event, ids []uuid.UUID) ([]int64, error) {
	ev.Data.Version = Version
	ev.Data.Site = Ref{ID: s.site, Name: s.site}
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	// A version 7 ID: time-ordered, so the outbox's index grows at its end.
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("event id: %w", err)
	}
	p := dbsqlc.EventInsertParams{ID: id, Type: string(ev.Type), Subject: ev.subject(), Data: data, SubscriptionIds: ids}
	if ev.DedupeKey != "" {
		p.DedupeKey = &ev.DedupeKey
	}
	// The event and its deliveries: one statement, no rows when the dedupe
	// key was seen before.
	rows, err := s.q.EventInsert(ctx, tx, p)
	if err != nil {
		return nil, fmt.Errorf("insert event: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil // emitted before
	}
	dids := make([]int64, len(rows))
	lanes := make([]string, len(rows))
	for i, r := range rows {
		dids[i] = r.ID
		lanes[i] = LaneArgs{SubscriptionID: r.SubscriptionID, Lane: *r.Lane}.key()
	}
	db.AfterCommit(ctx, func() { s.wake(lanes) })
	if s.obs != nil {
		typ, n := ev.Type, len(dids)
		db.AfterCommit(ctx, func() { s.obs.Emitted(typ, n) })
	}
	return dids, nil
}

// EmitMany is Emit of several events through tx in one statement (their
// deliveries in the order of evs): for a change that reports many facts
// at once. Unknown types are ErrInvalid, with nothing written.
func (s *Service) EmitMany(ctx context.Context, tx pgx.Tx, evs []Event) error {
	if s == nil || len(evs) == 0 {
		return nil
	}
	subs, err := s.subscriptions(ctx, tx)
	if err != nil {
		return err
	}
	var p dbsqlc.EventInsertManyParams
	counts := map[Type]int{}
	for i, ev := range evs {
		if !ev.Type.Valid() && ev.Type != WebhookTest {
			return invalid(fmt.Sprintf("events[%d].type", i), "unknown event type %q", ev.Type)
		}
		var ids []uuid.UUID
		for _, sub := range subs {
			if sub.matches(ev.Type, ev.RackID) {
				ids = append(ids, sub.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		ev.Data.Version = Version
		ev.Data.Site = Ref{ID: s.site, Name: s.site}
		data, err := json.Marshal(ev.Data)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("event id: %w", err)
		}
		p.IDs = append(p.IDs, id)
		p.Types = append(p.Types, string(ev.Type))
		p.Subjects = append(p.Subjects, ev.subject())
		p.DedupeKeys = append(p.DedupeKeys, ev.DedupeKey)
		p.Datas = append(p.Datas, string(data))
		for _, sid := range ids {
			p.EventOf = append(p.EventOf, id)
			p.SubscriptionOf = append(p.SubscriptionOf, sid)
		}
		counts[ev.Type] += len(ids)
	}
	if len(p.IDs) == 0 {
		return nil
	}
	rows, err := s.q.EventInsertMany(ctx, tx, p)
	if err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	if len(rows) == 0 {
		return nil
	}
	woken := map[string]struct{}{}
	for _, r := range rows {
		woken[LaneArgs{SubscriptionID: r.SubscriptionID, Lane: *r.Lane}.key()] = struct{}{}
	}
	lanes := make([]string, 0, len(woken))
	for l := range woken {
		lanes = append(lanes, l)
	}
	db.AfterCommit(ctx, func() { s.wake(lanes) })
	if s.obs != nil {
		db.AfterCommit(ctx, func() {
			for typ, n := range counts {
				s.obs.Emitted(typ, n)
			}
		})
	}
	return nil
}

// Test emits a WebhookTest event to subscription id alone through tx and
// returns its delivery's ID.
func (s *Service) Test(ctx context.Context, tx pgx.Tx, id uuid.UUID) (int64, error) {
	if _, err := s.Get(ctx, tx, id); err != nil {
		return 0, err
	}
	dids, err := s.emitTo(ctx, tx, Event{Type: WebhookTest, Data: Data{Message: "a test event sent by flow webhook test"}}, []uuid.UUID{id})
	if err != nil {
		return 0, err
	}
	return dids[0], nil
}

// Delivery is one delivery of an event to a subscription.
type Delivery struct {
	ID             int64
	EventID        uuid.UUID
	EventType      string
	SubscriptionID uuid.UUID
	Subject        string
	Status         string // pending, delivered, dead
	Attempts       int
	LastStatusCode int
	LastError      string
	NextAttemptAt  time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	DeliveredAt    *time.Time
}

// Delivery statuses.
const (
	StatusPending   = "pending"
	StatusDelivered = "delivered"
	StatusDead      = "dead"
)

// DeliveryFilter selects deliveries for Deliveries.
type DeliveryFilter struct {
	SubscriptionID *uuid.UUID
	Status         string // "" any
	Limit          int    // 0: 100
}

// Deliveries lists deliveries, newest first.
func (s *Service) Deliveries(ctx context.Context, dbtx db.DBTX, f DeliveryFilter) ([]Delivery, error) {
	if f.Status != "" && f.Status != StatusPending && f.Status != StatusDelivered && f.Status != StatusDead {
		return nil, invalid("status", "must be pending, delivered or dead, not %q", f.Status)
	}
	if f.Limit <= 0 || f.Limit > 1000 {
		f.Limit = 100
	}
	p := dbsqlc.DeliveryListParams{SubscriptionID: f.SubscriptionID, Lim: int32(f.Limit)}
	if f.Status != "" {
		p.Status = &f.Status
	}
	rows, err := s.q.DeliveryList(ctx, dbtx, p)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	out := make([]Delivery, len(rows))
	for i, r := range rows {
		out[i] = Delivery{ID: r.ID, EventID: r.EventID, EventType: r.EventType, SubscriptionID: r.SubscriptionID, Subject: r.Subject, Status: r.Status,
			Attempts: int(r.Attempts), LastStatusCode: int(r.LastStatusCode), LastError: r.LastError, NextAttemptAt: r.NextAttemptAt,
			CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, DeliveredAt: r.DeliveredAt}
	}
	return out, nil
}

// Redrive makes dead deliveries pending again, with fresh attempts, through
// tx (their lanes woken once it commits): the deliveries ids, and every dead delivery of
// subscription all when it is not uuid.Nil. It returns the IDs redriven
// (a delivery that is not dead is left alone).
func (s *Service) Redrive(ctx context.Context, tx pgx.Tx, ids []int64, all uuid.UUID) ([]int64, error) {
	if len(ids) == 0 && all == uuid.Nil {
		return nil, invalid("ids", "name deliveries, or a subscription whose dead letters to redrive")
	}
	if ids == nil {
		ids = []int64{}
	}
	rows, err := s.q.DeliveryRedrive(ctx, tx, dbsqlc.DeliveryRedriveParams{IDs: ids, AllOf: all})
	if err != nil {
		return nil, fmt.Errorf("redrive: %w", err)
	}
	got := make([]int64, len(rows))
	lanes := make([]string, len(rows))
	for i, r := range rows {
		got[i] = r.ID
		lanes[i] = LaneArgs{SubscriptionID: r.SubscriptionID, Lane: *r.Lane}.key()
	}
	if len(rows) > 0 {
		db.AfterCommit(ctx, func() { s.wake(lanes) })
	}
	return got, nil
}

// Backlog returns the pending deliveries and the age of the oldest.
func (s *Service) Backlog(ctx context.Context) (int, time.Duration, error) {
	r, err := s.q.DeliveryBacklog(ctx, s.pool)
	if err != nil {
		return 0, 0, fmt.Errorf("read delivery backlog: %w", err)
	}
	return int(r.Pending), time.Duration(r.OldestSeconds * float64(time.Second)), nil
}

// Site returns the site's name (FLOW_SITE_NAME).
func (s *Service) Site() string { return s.site }
