package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/nicoflow/flow/notify/internal/dbsqlc"
)

// Alertmanager sends alerts to Prometheus Alertmanager's v2 API
// (POST /api/v2/alerts) of every URL: a firing alert is re-sent every
// Resend (Alertmanager resolves an alert it stops hearing of at its
// endsAt, which Flow sets to four resends ahead, as Prometheus does), and
// its resolution is sent once with endsAt set.
type Alertmanager struct {
	URLs    []string      // FLOW_ALERTMANAGER_URLS
	Resend  time.Duration // FLOW_ALERTMANAGER_RESEND, 1m
	Timeout time.Duration // per request; 0: 10s
}

// DefaultResend is how often a firing alert is re-sent.
const DefaultResend = time.Minute

// ParseURLs reads FLOW_ALERTMANAGER_URLS: comma-separated http(s) base
// URLs of Alertmanagers (all of a cluster: each gets every alert).
func ParseURLs(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimRight(strings.TrimSpace(f), "/")
		if f == "" {
			continue
		}
		if !strings.HasPrefix(f, "http://") && !strings.HasPrefix(f, "https://") {
			return nil, fmt.Errorf("%q: want an http(s) URL such as http://alertmanager:9093", f)
		}
		out = append(out, f)
	}
	return out, nil
}

// Alert is an alert to raise.
type Alert struct {
	// Key makes two raises one alert; SourceKey is what ResolveAlerts
	// resolves it by (a leak occurrence's key).
	Key, SourceKey string
	// Labels identify it (alertname, severity, site, rack, component,
	// rule...); Annotations describe it (summary, description).
	Labels, Annotations map[string]string
}

// AlertArgs is the job that sends one alert (and re-sends it while it
// fires).
type AlertArgs struct {
	AlertID uuid.UUID `json:"alert_id"`
}

// Kind is the job kind, a stable string.
func (AlertArgs) Kind() string { return "notify.alert" }

// InsertOpts puts the job on Queue.
func (AlertArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 25}
}

// AlertEnqueuer inserts AlertArgs jobs through the caller's transaction
// (RiverAlertEnqueuer).
type AlertEnqueuer func(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) error

// RiverAlertEnqueuer returns the AlertEnqueuer over client.
func RiverAlertEnqueuer(client *river.Client[pgx.Tx]) AlertEnqueuer {
	return func(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) error {
		params := make([]river.InsertManyParams, len(ids))
		for i, id := range ids {
			params[i] = river.InsertManyParams{Args: AlertArgs{AlertID: id}}
		}
		_, err := client.InsertManyTx(ctx, tx, params)
		return err
	}
}

// ErrNoAlertmanager: no Alertmanager is configured.
var ErrNoAlertmanager = errors.New("notify: no Alertmanager is configured (FLOW_ALERTMANAGER_URLS)")

// Alerting reports whether an Alertmanager is configured.
func (s *Service) Alerting() bool { return s != nil && len(s.am.URLs) > 0 }

// RaiseAlert fires a through tx (the transaction of what raised it); the
// caller commits. An alert of the same Key already firing is left alone
// (its job keeps re-sending it); a resolved one fires again.
func (s *Service) RaiseAlert(ctx context.Context, tx pgx.Tx, a Alert) error {
	if !s.Alerting() {
		return ErrNoAlertmanager
	}
	labels, err := json.Marshal(a.Labels)
	if err != nil {
		return err
	}
	ann, err := json.Marshal(a.Annotations)
	if err != nil {
		return err
	}
	id, err := s.q.AlertRaise(ctx, tx, dbsqlc.AlertRaiseParams{ID: uuid.New(), Key: a.Key, SourceKey: a.SourceKey, Labels: labels, Annotations: ann})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // firing already
	} else if err != nil {
		return fmt.Errorf("raise alert: %w", err)
	}
	if s.alertEnq != nil {
		return s.alertEnq(ctx, tx, []uuid.UUID{id})
	}
	return nil
}

// ResolveAlerts resolves, through tx, every firing alert raised for
// sourceKey, and enqueues the posting of their resolution. It returns how
// many it resolved.
func (s *Service) ResolveAlerts(ctx context.Context, tx pgx.Tx, sourceKey string) (int, error) {
	if s == nil {
		return 0, nil
	}
	ids, err := s.q.AlertResolve(ctx, tx, sourceKey)
	if err != nil {
		return 0, fmt.Errorf("resolve alerts: %w", err)
	}
	if len(ids) > 0 && s.alertEnq != nil {
		if err := s.alertEnq(ctx, tx, ids); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}

// AlertWorker works AlertArgs jobs. Set Service before the River client
// starts.
type AlertWorker struct {
	river.WorkerDefaults[AlertArgs]
	Service *Service
}

// Work posts the alert to every Alertmanager; a firing one snoozes until
// its next resend, a resolved one is done once posted.
func (w *AlertWorker) Work(ctx context.Context, job *river.Job[AlertArgs]) error {
	s := w.Service
	a, err := s.q.AlertGetByID(ctx, s.pool, job.Args.AlertID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	} else if err != nil {
		return err
	}
	sendErr := s.postAlert(ctx, a)
	msg := ""
	if sendErr != nil {
		msg = firstLine(sendErr.Error())
	}
	if err := s.q.AlertSent(context.WithoutCancel(ctx), s.pool, dbsqlc.AlertSentParams{ID: a.ID, LastError: msg}); err != nil {
		return err
	}
	if a.Status == "resolved" {
		return sendErr // retried by River until an Alertmanager took it
	}
	if sendErr != nil {
		s.logger.WarnContext(ctx, "send alert to alertmanager", "alert_id", a.ID, "error", msg)
		return river.JobSnooze(min(s.am.Resend, 10*time.Second))
	}
	return river.JobSnooze(s.am.Resend)
}

// amAlert is one alert of Alertmanager's v2 API (postableAlert).
type amAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// postAlert posts a to every Alertmanager; it succeeds when one took it.
func (s *Service) postAlert(ctx context.Context, a dbsqlc.NotifyAlert) error {
	out := amAlert{StartsAt: a.StartsAt.UTC(), EndsAt: time.Now().Add(4 * s.am.Resend).UTC()}
	if err := json.Unmarshal(a.Labels, &out.Labels); err != nil {
		return err
	}
	if err := json.Unmarshal(a.Annotations, &out.Annotations); err != nil {
		return err
	}
	if a.EndsAt != nil {
		out.EndsAt = a.EndsAt.UTC()
	}
	body, err := json.Marshal([]amAlert{out})
	if err != nil {
		return err
	}
	var errs []error
	ok := false
	for _, u := range s.am.URLs {
		if err := s.postOne(ctx, u+"/api/v2/alerts", body); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u, err))
			continue
		}
		ok = true
	}
	if ok {
		return nil
	}
	return errors.Join(errs...)
}

func (s *Service) postOne(ctx context.Context, url string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.am.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := s.amClient.Do(req)
	if err != nil {
		return unwrapURLError(err)
	}
	defer res.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d: %s", res.StatusCode, strings.TrimSpace(string(head[:min(len(head), 200)])))
	}
	return nil
}
