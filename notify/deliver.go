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
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/notify/internal/dbsqlc"
)

// Queue is the River queue of delivery jobs: a receiver's backlog never
// delays engine steps.
const Queue = "notify"

// DeliverArgs is the job that delivers one delivery (and, once it is
// through, the pending ones after it on its subject).
type DeliverArgs struct {
	DeliveryID int64 `json:"delivery_id"`
}

// Kind is the job kind, a stable string.
func (DeliverArgs) Kind() string { return "notify.deliver" }

// InsertOpts puts the job on Queue; delivery counts its own attempts, so
// River's are unbounded in practice (each wait is a snooze).
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 25}
}

// RiverEnqueuer returns the Enqueuer that inserts DeliverArgs jobs with
// client through the caller's transaction.
func RiverEnqueuer(client *river.Client[pgx.Tx]) Enqueuer {
	return func(ctx context.Context, tx pgx.Tx, ids []int64) error {
		params := make([]river.InsertManyParams, len(ids))
		for i, id := range ids {
			params[i] = river.InsertManyParams{Args: DeliverArgs{DeliveryID: id}}
		}
		_, err := client.InsertManyTx(ctx, tx, params)
		return err
	}
}

// Worker works DeliverArgs jobs. Set Service before the River client
// starts.
type Worker struct {
	river.WorkerDefaults[DeliverArgs]
	Service *Service
}

// drainBudget is how long one job keeps delivering the pending deliveries
// after its own on the same subject.
const drainBudget = 2 * time.Minute

// Timeout bounds one job: its drain plus one request.
func (w *Worker) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return drainBudget + 2*w.Service.cfg.Timeout
}

// Work delivers the job's delivery when it is due and no earlier delivery
// of its subject is pending (else it snoozes), then the ones after it.
func (w *Worker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	return w.Service.deliver(ctx, job.Args.DeliveryID)
}

// claimFor is how long a sender holds a delivery: its request's timeout
// and as much again (at most 30 s) to record the outcome. A claim that
// lapses with the delivery still pending means its sender died.
func (s *Service) claimFor() time.Duration {
	return s.cfg.Timeout + min(s.cfg.Timeout, 30*time.Second)
}

// holdPoll is how often a delivery held behind an earlier one looks again
// (the earlier one's job normally delivers it first).
func (s *Service) holdPoll() time.Duration {
	return min(max(s.cfg.BackoffMin, 200*time.Millisecond), 5*time.Second)
}

func (s *Service) deliver(ctx context.Context, id int64) error {
	deadline := time.Now().Add(drainBudget)
	first := true
	for {
		until := time.Now().Add(s.claimFor())
		d, err := s.q.DeliveryClaim(ctx, s.pool, dbsqlc.DeliveryClaimParams{ID: id, ClaimedUntil: &until})
		if errors.Is(err, pgx.ErrNoRows) {
			if !first {
				return nil // the next one's own job delivers it
			}
			return s.notClaimed(ctx, id)
		} else if err != nil {
			return fmt.Errorf("claim delivery %d: %w", id, err)
		}
		first = false
		status, wait, next, err := s.attempt(ctx, d)
		if err != nil {
			return err
		}
		if status == StatusPending {
			return river.JobSnooze(wait)
		}
		if next == 0 || time.Now().After(deadline) {
			return nil
		}
		id = next
	}
}

// notClaimed decides the job of a delivery it could not claim: done (gone,
// delivered or dead), or a snooze until it is due or no longer held.
func (s *Service) notClaimed(ctx context.Context, id int64) error {
	row, err := s.q.DeliveryGetByID(ctx, s.pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // its subscription was deleted
	} else if err != nil {
		return fmt.Errorf("read delivery %d: %w", id, err)
	}
	if row.Status != StatusPending {
		return nil
	}
	wait := s.holdPoll()
	if d := time.Until(row.NextAttemptAt); d > wait {
		wait = d
	}
	// Held behind an earlier delivery: look again when that one is next
	// tried (its job goes on with this one once it is through), at most a
	// minute from now, so a receiver's outage costs few wake-ups.
	head, err := s.q.DeliveryHeadNextAttempt(ctx, s.pool, dbsqlc.DeliveryHeadNextAttemptParams{SubscriptionID: row.SubscriptionID, Subject: row.Subject, ID: row.ID})
	if err == nil {
		if d := min(time.Until(head), time.Minute); d > wait {
			wait = d
		}
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read delivery %d's predecessor: %w", id, err)
	}
	if row.ClaimedUntil != nil {
		if d := time.Until(*row.ClaimedUntil); d > wait {
			wait = min(d, s.claimFor())
		}
	}
	return river.JobSnooze(wait)
}

// attempt sends a claimed delivery once and records the outcome: the
// delivery's new status, when pending how long until its next try, and
// when delivered the next pending delivery of its subject (0: none).
func (s *Service) attempt(ctx context.Context, d dbsqlc.DeliveryClaimRow) (string, time.Duration, int64, error) {
	code, sendErr := s.send(ctx, d)
	if ctx.Err() != nil {
		return "", 0, 0, ctx.Err() // shutting down: the claim lapses and a job retries
	}
	rctx := context.WithoutCancel(ctx)
	if sendErr == nil {
		next, err := s.q.DeliveryDelivered(rctx, s.pool, dbsqlc.DeliveryDeliveredParams{ID: d.ID, LastStatusCode: int32(code)})
		if err != nil {
			return "", 0, 0, fmt.Errorf("record delivery %d: %w", d.ID, err)
		}
		s.observe(OutcomeDelivered)
		return StatusDelivered, 0, next, nil
	}
	attempts := int(d.Attempts) + 1
	dead := permanent(code) || attempts >= s.cfg.MaxAttempts
	wait := s.backoff(attempts)
	status, err := s.q.DeliveryFailed(rctx, s.pool, dbsqlc.DeliveryFailedParams{
		ID: d.ID, LastStatusCode: int32(code), LastError: firstLine(sendErr.Error()), Dead: dead, NextAttemptAt: time.Now().Add(wait),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return StatusDead, 0, 0, nil // deleted meanwhile
	} else if err != nil {
		return "", 0, 0, fmt.Errorf("record delivery %d: %w", d.ID, err)
	}
	if status == StatusDead {
		s.observe(OutcomeDead)
		s.logger.WarnContext(ctx, "webhook delivery dead-lettered", "delivery_id", d.ID, "subscription_id", d.SubscriptionID, "event_id", d.EventID,
			"attempt", attempts, "status_code", code, "error", firstLine(sendErr.Error()))
		return StatusDead, 0, 0, nil
	}
	s.observe(OutcomeRetried)
	s.logger.DebugContext(ctx, "webhook delivery failed, retrying", "delivery_id", d.ID, "subscription_id", d.SubscriptionID, "attempt", attempts,
		"status_code", code, "retry_in", wait, "error", firstLine(sendErr.Error()))
	return StatusPending, wait, 0, nil
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

// body returns the CloudEvent of a claimed delivery's event, as sent.
func (s *Service) body(d dbsqlc.DeliveryClaimRow) ([]byte, error) {
	return json.Marshal(CloudEvent{SpecVersion: "1.0", ID: d.EventID.String(), Source: s.source, Type: d.EventType, Subject: d.Subject,
		Time: d.EventCreatedAt.UTC(), DataContentType: "application/json", Data: d.EventData})
}

// send makes one request; it returns the HTTP status (0: none) and an
// error unless it was a 2xx. The claim brought the subscription's URL and
// sealed secret and the event.
func (s *Service) send(ctx context.Context, d dbsqlc.DeliveryClaimRow) (int, error) {
	secret, err := s.openSecret(d.Secret)
	if err != nil {
		return 0, err
	}
	body, err := s.body(d)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.Url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("request: %w", err)
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("User-Agent", "flow-notify/1")
	req.Header.Set(SignatureHeader, Sign(secret, time.Now(), body))
	req.Header.Set("Flow-Event-Id", d.EventID.String())
	req.Header.Set("Flow-Delivery-Id", strconv.FormatInt(d.ID, 10))
	req.Header.Set("Flow-Delivery-Attempt", strconv.Itoa(int(d.Attempts)+1))
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
		MaxIdleConns:          max(100, 2*cfg.Workers),
		MaxIdleConnsPerHost:   max(16, cfg.Workers),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
	}
	return &http.Client{Transport: t, Timeout: cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
