package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/notify/internal/dbsqlc"
)

// Queue is the River queue of delivery jobs: a receiver's backlog never
// delays engine steps.
const Queue = "notify"

// LaneArgs is the job that works one lane of a subscription: a
// subscription's deliveries are split over 16 lanes by subject (a rack's
// events always in one lane), and one job at a time works a lane, batch by
// batch (docs/notifications.md, "How delivery works").
type LaneArgs struct {
	SubscriptionID uuid.UUID `json:"subscription_id"`
	Lane           int16     `json:"lane"`
}

// Kind is the job kind, a stable string.
func (LaneArgs) Kind() string { return "notify.deliver_lane" }

// InsertOpts puts the job on Queue. Delivery counts its own attempts; a
// job that fails (the database) is retried a few times, and the lane's
// sweep gives it a new job after that.
func (LaneArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 5}
}

// key names the lane in the dispatcher's woken set and LaneQueue.
func (a LaneArgs) key() string { return a.SubscriptionID.String() + "/" + strconv.Itoa(int(a.Lane)) }

// DeliverArgs is the job of one delivery that releases before issue 44's
// batching enqueued. Such a job left in the queue at an upgrade completes
// at once: the lanes' sweep delivers its delivery.
type DeliverArgs struct {
	DeliveryID int64 `json:"delivery_id"`
}

// Kind is the job kind, a stable string.
func (DeliverArgs) Kind() string { return "notify.deliver" }

// InsertOpts puts the job on Queue.
func (DeliverArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: Queue} }

// LegacyWorker completes DeliverArgs jobs (see DeliverArgs).
type LegacyWorker struct {
	river.WorkerDefaults[DeliverArgs]
}

// Work does nothing: the sweep finds the delivery.
func (LegacyWorker) Work(context.Context, *river.Job[DeliverArgs]) error { return nil }

// RiverEnqueuer returns the Enqueuer that inserts LaneArgs jobs with
// client through the caller's transaction.
func RiverEnqueuer(client *river.Client[pgx.Tx]) Enqueuer {
	return func(ctx context.Context, tx pgx.Tx, lanes []LaneArgs) error {
		params := make([]river.InsertManyParams, len(lanes))
		for i, l := range lanes {
			params[i] = river.InsertManyParams{Args: l}
		}
		_, err := client.InsertManyTx(ctx, tx, params)
		return err
	}
}

// Worker works LaneArgs jobs. Set Service before the River client
// starts.
type Worker struct {
	river.WorkerDefaults[LaneArgs]
	Service *Service
}

// drainBudget is how long one job works its lane before it hands over to
// a new job (the lane stays due): a lane's sender never holds a River
// worker for long.
const drainBudget = 2 * time.Minute

// Batching: a batch is at most batchSize deliveries, its subjects posted
// at most batchParallel at a time (each subject's in order); an idle lane's
// job looks again every lanePoll, and ends after laneLinger with nothing
// to send.
const (
	batchSize     = 200
	batchParallel = 8
	lanePoll      = 50 * time.Millisecond
	laneLinger    = time.Second
)

// Timeout bounds one job: its drain, its last batch and its lease's
// release.
func (w *Worker) Timeout(*river.Job[LaneArgs]) time.Duration {
	return drainBudget + 2*w.Service.leaseFor() + 30*time.Second
}

// Work works the job's lane (Service.workLane).
func (w *Worker) Work(ctx context.Context, job *river.Job[LaneArgs]) error {
	return w.Service.workLane(ctx, job.ID, job.Args)
}

// leaseFor is how long a lane's sender holds it without renewing: twice
// its request's timeout and 10 s more. A sender starts no request later
// than half of it after renewing, so its last one ends within the lease. A
// lease that lapses means its sender died; the sweep gives the lane a new
// job.
func (s *Service) leaseFor() time.Duration {
	return 2*s.cfg.Timeout + 10*time.Second
}

// workLane leases the lane to holder (the job's ID), then sends batch
// after batch (LaneBatch: a batch takes up to batchSize pending
// deliveries, in order, of the subjects whose first pending delivery is
// due) and records each batch's outcomes in one statement, until the lane
// has been idle for laneLinger or the drain budget is spent; then it
// releases the lane, setting when it is next due. A lane leased by
// another job is left to it.
func (s *Service) workLane(ctx context.Context, holder int64, lane LaneArgs) error {
	lease := func() (bool, error) {
		until := time.Now().Add(s.leaseFor())
		_, err := s.q.LaneLease(ctx, s.pool, dbsqlc.LaneLeaseParams{Holder: &holder, LeasedUntil: &until, SubscriptionID: lane.SubscriptionID, Lane: lane.Lane})
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		} else if err != nil {
			return false, fmt.Errorf("lease lane %s: %w", lane.key(), err)
		}
		return true, nil
	}
	ok, err := lease()
	if err != nil || !ok {
		return err
	}
	leased := time.Now()
	more := false
	release := func() error {
		err := s.q.LaneRelease(context.WithoutCancel(ctx), s.pool, dbsqlc.LaneReleaseParams{More: more, SubscriptionID: lane.SubscriptionID, Lane: lane.Lane, Holder: &holder})
		if err != nil {
			return fmt.Errorf("release lane %s: %w", lane.key(), err)
		}
		return nil
	}
	lim := s.laneLimit(ctx, lane.SubscriptionID)
	deadline := time.Now().Add(drainBudget)
	idleSince := time.Now()
	for {
		if time.Since(leased) > s.leaseFor()/3 {
			if ok, err := lease(); err != nil || !ok {
				return err // lost (we were too slow): the new holder goes on
			}
			leased = time.Now()
		}
		rows, err := s.q.LaneBatch(ctx, s.pool, dbsqlc.LaneBatchParams{SubscriptionID: lane.SubscriptionID, Lane: lane.Lane, Lim: lim})
		if err != nil {
			more = true
			return errors.Join(fmt.Errorf("read lane %s: %w", lane.key(), err), release())
		}
		if len(rows) == 0 {
			if time.Since(idleSince) >= laneLinger || ctx.Err() != nil {
				return release()
			}
			select {
			case <-ctx.Done():
			case <-time.After(lanePoll):
			}
			continue
		}
		if err := s.sendBatch(ctx, rows, leased.Add(s.leaseFor()/2)); err != nil {
			more = true
			return errors.Join(err, release())
		}
		idleSince = time.Now()
		if ctx.Err() != nil || time.Now().After(deadline) {
			more = true
			return release()
		}
	}
}

// laneLimit is how many deliveries one pass of a lane of subscription id
// takes: batchSize, or four requests' worth of a batched subscription's
// (at most 2,000).
func (s *Service) laneLimit(ctx context.Context, id uuid.UUID) int32 {
	subs, err := s.subscriptions(ctx, s.pool)
	if err != nil {
		return batchSize
	}
	for _, sub := range subs {
		if sub.ID == id && sub.Batched() {
			return int32(min(max(batchSize, 4*sub.BatchMax), 2000))
		}
	}
	return batchSize
}

// outcome is one attempt's result, as DeliveryRecord records it.
type outcome struct {
	row    dbsqlc.LaneBatchRow
	status string
	code   int
	err    error
	next   time.Time
	tried  bool
	// batchOf: a failed batched request's first delivery ID (retried as
	// a unit), 0 otherwise.
	batchOf int64
}

// sendBatch posts a batch's deliveries, each subject's in order and at
// most batchParallel subjects at once, and records what was tried in one
// statement. A subject stops at a delivery to be retried (the ones after
// it wait for it); a dead letter does not stop it. Nothing new starts
// after stopBy, nor once a request found the receiver unreachable (no
// answer: its other subjects would wait for the timeout too); what was not
// tried stays pending as it was.
func (s *Service) sendBatch(ctx context.Context, rows []dbsqlc.LaneBatchRow, stopBy time.Time) error {
	secret, err := s.openSecret(rows[0].Secret)
	if err != nil {
		return err
	}
	out := make([]outcome, len(rows))
	if rows[0].BatchMax > 0 {
		for i, r := range rows {
			out[i].row = r
		}
		s.postBatches(ctx, secret, out, stopBy)
		return s.record(ctx, out)
	}
	var subjects []string
	bySubject := map[string][]int{}
	for i, r := range rows {
		out[i].row = r
		if _, ok := bySubject[r.Subject]; !ok {
			subjects = append(subjects, r.Subject)
		}
		bySubject[r.Subject] = append(bySubject[r.Subject], i)
	}
	var unreachable atomic.Bool
	stop := func() bool { return ctx.Err() != nil || unreachable.Load() || time.Now().After(stopBy) }
	var wg sync.WaitGroup
	sem := make(chan struct{}, batchParallel)
	for _, subj := range subjects {
		if stop() {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(idx []int) {
			defer func() { <-sem; wg.Done() }()
			for _, i := range idx {
				if stop() {
					return
				}
				o := &out[i]
				code, sendErr := s.send(ctx, secret, o.row)
				if ctx.Err() != nil {
					return // shutting down: not recorded, sent again
				}
				o.tried, o.code, o.err = true, code, sendErr
				if sendErr == nil {
					o.status = StatusDelivered
					continue
				}
				attempts := int(o.row.Attempts) + 1
				if permanent(code) || attempts >= s.cfg.MaxAttempts {
					o.status = StatusDead
					continue
				}
				o.status, o.next = StatusPending, time.Now().Add(s.backoff(attempts))
				if code == 0 {
					unreachable.Store(true)
				}
				return
			}
		}(bySubject[subj])
	}
	wg.Wait()
	return s.record(ctx, out)
}

// record writes what was tried of a batch in one statement, then counts
// and logs the outcomes.
func (s *Service) record(ctx context.Context, out []outcome) error {
	p := dbsqlc.DeliveryRecordParams{}
	for _, o := range out {
		if !o.tried {
			continue
		}
		msg := ""
		if o.err != nil {
			msg = firstLine(o.err.Error())
		}
		next := o.next
		if next.IsZero() {
			next = time.Now()
		}
		p.IDs = append(p.IDs, o.row.ID)
		p.Statuses = append(p.Statuses, o.status)
		p.Codes = append(p.Codes, int32(o.code))
		p.Errors = append(p.Errors, msg)
		p.NextAttemptAt = append(p.NextAttemptAt, next)
		p.BatchOf = append(p.BatchOf, o.batchOf)
	}
	if len(p.IDs) == 0 {
		return nil
	}
	if err := s.q.DeliveryRecord(context.WithoutCancel(ctx), s.pool, p); err != nil {
		return fmt.Errorf("record %d deliveries: %w", len(p.IDs), err)
	}
	for _, o := range out {
		if !o.tried {
			continue
		}
		switch o.status {
		case StatusDelivered:
			s.observe(OutcomeDelivered)
		case StatusDead:
			s.observe(OutcomeDead)
			s.logger.WarnContext(ctx, "webhook delivery dead-lettered", "delivery_id", o.row.ID, "event_id", o.row.EventID,
				"attempt", o.row.Attempts+1, "status_code", o.code, "error", firstLine(o.err.Error()))
		default:
			s.observe(OutcomeRetried)
			s.logger.DebugContext(ctx, "webhook delivery failed, retrying", "delivery_id", o.row.ID, "attempt", o.row.Attempts+1,
				"status_code", o.code, "retry_at", o.next, "error", firstLine(o.err.Error()))
		}
	}
	return nil
}

func (s *Service) observe(outcome string) {
	if s.obs != nil {
		s.obs.Delivered(outcome)
	}
}

// permanent reports whether an HTTP status means no retry can succeed: a
// redirect (not followed) or a 4xx other than 408, 425 and 429.
func permanent(code int) bool {
	if code >= 300 && code < 400 {
		return true
	}
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooEarly && code != http.StatusTooManyRequests
}

// backoff returns the wait after the attempts-th failed attempt: BackoffMin
// doubled per attempt, capped at BackoffMax, with ±20 % jitter.
func (s *Service) backoff(attempts int) time.Duration {
	d := s.cfg.BackoffMin
	for i := 1; i < attempts && d < s.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, s.cfg.BackoffMax)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// postBatches posts a batched subscription's deliveries (out, in id
// order) as CloudEvents JSON batches, one request at a time: first each
// failed batch due again, exactly as it was (its deliveries share
// batch_of: retried as a unit), then the others in id order, up to the
// subscription's BatchMax events and BatchMaxBytes of body a request (an
// event larger than that goes alone). One request at a time and each
// batch in id order keep every subject's order within and across
// batches. A request's outcome is all of its deliveries': delivered,
// dead (a permanent answer or the last attempt) or pending again from one
// retry time with batch_of set; a retry stops the pass (what was not
// tried stays as it was).
func (s *Service) postBatches(ctx context.Context, secret []byte, out []outcome, stopBy time.Time) {
	var reqs [][]int
	groups := map[int64]int{} // batch_of → its request in reqs
	var fresh []int
	for i, o := range out {
		if o.row.BatchOf == nil {
			fresh = append(fresh, i)
			continue
		}
		k, ok := groups[*o.row.BatchOf]
		if !ok {
			k = len(reqs)
			groups[*o.row.BatchOf] = k
			reqs = append(reqs, nil)
		}
		reqs[k] = append(reqs[k], i)
	}
	bodies := make([][]byte, len(out))
	for i := range out {
		b, err := s.body(out[i].row)
		if err != nil {
			out[i].tried, out[i].status, out[i].err = true, StatusDead, err
			continue
		}
		bodies[i] = b
	}
	maxN, maxBytes := int(out[0].row.BatchMax), int(out[0].row.BatchMaxBytes)
	var cur []int
	size := 2 // "[" and "]"
	for _, i := range fresh {
		if bodies[i] == nil {
			continue
		}
		if len(cur) > 0 && (len(cur) >= maxN || size+len(bodies[i])+1 > maxBytes) {
			reqs = append(reqs, cur)
			cur, size = nil, 2
		}
		cur = append(cur, i)
		size += len(bodies[i]) + 1
	}
	if len(cur) > 0 {
		reqs = append(reqs, cur)
	}
	for _, idx := range reqs {
		if ctx.Err() != nil || time.Now().After(stopBy) {
			return
		}
		var body bytes.Buffer
		body.WriteByte('[')
		attempts := 0
		n := 0
		for _, i := range idx {
			if bodies[i] == nil {
				continue
			}
			if n > 0 {
				body.WriteByte(',')
			}
			body.Write(bodies[i])
			attempts = max(attempts, int(out[i].row.Attempts)+1)
			n++
		}
		body.WriteByte(']')
		if n == 0 {
			continue
		}
		first := out[idx[0]].row
		code, err := s.post(ctx, secret, first.Url, body.Bytes(), BatchContentType, map[string]string{
			"Flow-Batch-Size":       strconv.Itoa(n),
			"Flow-Delivery-Id":      strconv.FormatInt(first.ID, 10),
			"Flow-Delivery-Attempt": strconv.Itoa(attempts),
		})
		if ctx.Err() != nil {
			return // shutting down: not recorded, sent again
		}
		status, next, batchOf := StatusDelivered, time.Time{}, int64(0)
		if err != nil {
			switch {
			case permanent(code) || attempts >= s.cfg.MaxAttempts:
				status = StatusDead
			default:
				status, next, batchOf = StatusPending, time.Now().Add(s.backoff(attempts)), first.ID
			}
		}
		for _, i := range idx {
			if bodies[i] == nil {
				continue
			}
			o := &out[i]
			o.tried, o.code, o.err, o.status, o.next, o.batchOf = true, code, err, status, next, batchOf
		}
		if status == StatusPending {
			return
		}
	}
}

// body returns the CloudEvent of a delivery's event, as sent.
func (s *Service) body(d dbsqlc.LaneBatchRow) ([]byte, error) {
	return json.Marshal(CloudEvent{SpecVersion: "1.0", ID: d.EventID.String(), Source: s.source, Type: d.EventType, Subject: d.Subject,
		Time: d.EventCreatedAt.UTC(), DataContentType: "application/json", Data: d.EventData})
}

// send makes one request, signed with secret; it returns the HTTP status
// (0: none) and an error unless it was a 2xx. The batch brought the
// subscription's URL and the event.
func (s *Service) send(ctx context.Context, secret []byte, d dbsqlc.LaneBatchRow) (int, error) {
	body, err := s.body(d)
	if err != nil {
		return 0, err
	}
	return s.post(ctx, secret, d.Url, body, ContentType, map[string]string{
		"Flow-Event-Id":         d.EventID.String(),
		"Flow-Delivery-Id":      strconv.FormatInt(d.ID, 10),
		"Flow-Delivery-Attempt": strconv.Itoa(int(d.Attempts) + 1),
	})
}

// post makes one request of body (of content type ct, with headers),
// signed with secret; it returns the HTTP status (0: none) and an error
// unless it was a 2xx.
func (s *Service) post(ctx context.Context, secret []byte, url string, body []byte, ct string, headers map[string]string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("request: %w", err)
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("User-Agent", "flow-notify/1")
	req.Header.Set(SignatureHeader, Sign(secret, time.Now(), body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := s.client.Do(req)
	if err != nil {
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			return 0, fmt.Errorf("post: no answer within the timeout (%s, FLOW_NOTIFY_TIMEOUT)", s.cfg.Timeout)
		}
		return 0, fmt.Errorf("post: %w", unwrapURLError(err))
	}
	defer res.Body.Close()
	// Bounded: a receiver answering an endless body costs at most this.
	head, err := io.ReadAll(io.LimitReader(res.Body, s.cfg.MaxResponseBytes))
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return res.StatusCode, nil
	}
	msg := strings.TrimSpace(string(head[:min(len(head), 200)]))
	if !utf8.ValidString(msg) {
		msg = ""
	}
	if err != nil && msg == "" {
		msg = err.Error()
	}
	return res.StatusCode, fmt.Errorf("HTTP %d: %s", res.StatusCode, msg)
}

// unwrapURLError drops *url.Error's "Post \"URL\":" prefix.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func (s *Service) openSecret(sealed []byte) ([]byte, error) {
	if s.keys == nil {
		return nil, ErrNoKey
	}
	var env firmware.Envelope
	if err := json.Unmarshal(sealed, &env); err != nil {
		return nil, fmt.Errorf("read sealed secret: %w", err)
	}
	d, err := s.keys.Open(&env)
	if err != nil {
		return nil, fmt.Errorf("open secret: %w", err)
	}
	if d.Shared == nil {
		return nil, errors.New("open secret: empty")
	}
	return []byte(*d.Shared), nil
}

// firstLine keeps a message to its first line, at most 512 bytes.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 512 {
		s = s[:512]
	}
	return s
}

// httpClient posts webhooks through the guard: no proxy from the
// environment (it would bypass the guard), no redirects followed.
type httpClient = http.Client

func newHTTPClient(g Guard, cfg DeliveryConfig) *httpClient {
	t := &http.Transport{
		Proxy:                 nil,
		DialContext:           g.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          max(100, 2*min(cfg.Workers, 16)*batchParallel),
		MaxIdleConnsPerHost:   max(16, min(cfg.Workers, 16)*batchParallel),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
	}
	return &http.Client{Transport: t, Timeout: cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
