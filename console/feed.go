package console

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Topics are what a page can watch; each is one cheap column of the
// feed's query.
var Topics = []string{"tasks", "steps", "racks", "leaks", "runs", "schedules", "rules", "sync", "firmware", "power"}

// feedQuery reads one fingerprint per topic (in Topics' order): a value
// that changes when anything a page shows for that topic changes ("tasks"
// their rows, "steps" the progress of running ones). Each part reads an index
// or a small table: new tasks by the created_at index, the active tasks
// and their engine steps by the partial active index (a task that ends
// leaves the set), active runs' targets by run, the leak occurrences,
// schedules, event rules, the last sync cycle, the firmware baselines'
// revisions and activations (installed versions change only in a sync),
// and the power budgets with the power feeds' holds and waits (engine
// resources power-feed/…: a transition admitted, waiting or ended). The
// leaks' part also reads the rack isolations (the leak tiers).
const feedQuery = `
SELECT
  concat_ws('|',
    (SELECT max(created_at)::text FROM task),
    (SELECT count(*)::text || ':' || coalesce(sum(hashtext(id::text || status || updated_at::text)), 0)::text
       FROM task WHERE status IN ('waiting', 'pending', 'running'))),
  (SELECT coalesce(sum(hashtext(s.id::text || s.state || s.batch_index::text || ':' || s.polls::text || coalesce(s.progress::text, ''))), 0)::text
     FROM engine_step s WHERE s.run_id IN (SELECT id FROM engine_run WHERE state = 'running')),
  concat_ws('|', (SELECT max(updated_at)::text FROM rack), (SELECT max(id)::text FROM inventory_sync_run)),
  concat_ws('|',
    (SELECT count(*)::text || ':' || coalesce(max(started_at)::text, '') || ':' || coalesce(sum(hashtext(external_id)), 0)::text FROM leak_occurrence),
    (SELECT count(*)::text || ':' || coalesce(sum(hashtext(id::text || sends::text || coalesce(acknowledged_at::text, '') || coalesce(cleared_at::text, ''))), 0)::text
       FROM rack_isolation),
    (SELECT count(*)::text FROM rack_isolation_override)),
  concat_ws('|',
    (SELECT count(*)::text || ':' || coalesce(max(updated_at)::text, '') FROM operation_run),
    (SELECT max(t.updated_at)::text FROM operation_run_target t
       WHERE t.operation_run_id IN (SELECT id FROM operation_run WHERE status IN ('pending', 'running', 'paused')))),
  (SELECT count(*)::text || ':' || coalesce(max(updated_at)::text, '') || ':' || coalesce(max(last_run_at)::text, '') FROM task_schedule),
  (SELECT count(*)::text || ':' || coalesce(max(updated_at)::text, '') FROM event_rule),
  (SELECT max(id)::text FROM inventory_sync_run),
  concat_ws('|',
    (SELECT count(*)::text || ':' || coalesce(sum(revision), 0)::text FROM firmware_baseline),
    (SELECT max(id)::text FROM firmware_baseline_activation)),
  concat_ws('|',
    (SELECT count(*)::text || ':' || coalesce(sum(hashtext(feed || max_transitions::text || coalesce(max_kw::text, '') || updated_at::text)), 0)::text FROM power_budget),
    (SELECT count(*)::text || ':' || coalesce(sum(hashtext(resource || run_id::text)), 0)::text FROM engine_hold WHERE resource LIKE 'power-feed/%'),
    (SELECT count(*)::text || ':' || coalesce(sum(hashtext(resource || step_id::text)), 0)::text FROM engine_wait WHERE resource LIKE 'power-feed/%'))`

// Feed is the console's one change feed: a single poller, running only
// while some page is open, reads the fingerprints of every topic (one
// query per interval, however many pages are open) and tells each open
// page whose topics changed. The page then fetches itself again.
type Feed struct {
	pool     *pgxpool.Pool
	interval time.Duration
	logger   *slog.Logger

	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	closed bool
	// gens counts each topic's changes seen; live says the poller has a
	// baseline (pages are open), so that gens follow the database.
	gens []uint64
	live bool
	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	polls atomic.Int64
}

// Subscription is one open page's interest.
type Subscription struct {
	topics  []string
	C       chan struct{} // a change is waiting (Take it); closed when the feed closes
	mu      sync.Mutex
	pending []string
}

// Take returns the topics changed since the last Take.
func (s *Subscription) Take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending
	s.pending = nil
	return p
}

// NewFeed starts the feed's poller.
func NewFeed(pool *pgxpool.Pool, interval time.Duration, logger *slog.Logger) *Feed {
	f := &Feed{pool: pool, interval: interval, logger: logger, subs: map[*Subscription]struct{}{}, gens: make([]uint64, len(Topics)),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go f.run()
	return f
}

// Polls returns how many times the feed has read the fingerprints.
func (f *Feed) Polls() int64 { return f.polls.Load() }

// Subscribers returns how many pages are watching.
func (f *Feed) Subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// Subscribe registers a page watching topics (unknown ones are ignored).
func (f *Feed) Subscribe(topics []string) *Subscription {
	s := &Subscription{C: make(chan struct{}, 1)}
	for _, t := range topics {
		if slices.Contains(Topics, t) && !slices.Contains(s.topics, t) {
			s.topics = append(s.topics, t)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		close(s.C)
		return s
	}
	f.subs[s] = struct{}{}
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return s
}

// Unsubscribe forgets s.
func (f *Feed) Unsubscribe(s *Subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.subs[s]; ok {
		delete(f.subs, s)
		close(s.C)
	}
}

// Close stops the poller and ends every subscription (the server is
// shutting down: the pages' streams end so that it need not wait).
func (f *Feed) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	for s := range f.subs {
		close(s.C)
	}
	f.subs = map[*Subscription]struct{}{}
	f.mu.Unlock()
	close(f.stop)
	<-f.done
}

func (f *Feed) run() {
	defer close(f.done)
	var last []string
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		if f.Subscribers() == 0 {
			last = nil // start afresh when a page opens
			f.setLive(false)
			select {
			case <-f.stop:
				return
			case <-f.wake:
			}
		}
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		cur, err := f.read()
		if err != nil {
			f.logger.Warn("console change feed", "error", err.Error())
			continue
		}
		if last != nil {
			var changed []string
			for i, v := range cur {
				if v != last[i] {
					changed = append(changed, Topics[i])
				}
			}
			if len(changed) > 0 {
				f.publish(changed)
			}
		}
		last = cur
		f.setLive(true)
	}
}

func (f *Feed) read() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f.polls.Add(1)
	vals := make([]*string, len(Topics))
	dest := make([]any, len(Topics))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := f.pool.QueryRow(ctx, feedQuery).Scan(dest...); err != nil {
		return nil, err
	}
	out := make([]string, len(Topics))
	for i, v := range vals {
		if v != nil {
			out[i] = *v
		}
	}
	return out, nil
}

func (f *Feed) setLive(live bool) {
	f.mu.Lock()
	f.live = live
	f.mu.Unlock()
}

// Generation returns a number that changes whenever one of topics
// changes, and whether it is live: the poller is following the database
// (some page is open). A value read while not live says nothing.
func (f *Feed) Generation(topics ...string) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var g uint64
	for i, t := range Topics {
		if slices.Contains(topics, t) {
			g += f.gens[i]
		}
	}
	return g, f.live
}

func (f *Feed) publish(changed []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, t := range Topics {
		if slices.Contains(changed, t) {
			f.gens[i]++
		}
	}
	for s := range f.subs {
		var hit []string
		for _, t := range changed {
			if slices.Contains(s.topics, t) {
				hit = append(hit, t)
			}
		}
		if len(hit) == 0 {
			continue
		}
		s.mu.Lock()
		for _, t := range hit {
			if !slices.Contains(s.pending, t) {
				s.pending = append(s.pending, t)
			}
		}
		s.mu.Unlock()
		select {
		case s.C <- struct{}{}:
		default:
		}
	}
}

func joinTopics(t []string) string { return strings.Join(t, ",") }
