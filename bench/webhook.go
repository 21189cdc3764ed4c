package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nicoflow/flow/cli"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// WebhookComparison is --compare-webhook's result: the same bench without
// a webhook subscription, then with one to every event type (a receiver in
// the bench process), both with a data key and dev mode (loopback http://).
type WebhookComparison struct {
	Off *Result `json:"webhook_off"`
	On  *Result `json:"webhook_on"`
	// TasksPerSecondRatio is On's tasks/s over Off's.
	TasksPerSecondRatio float64 `json:"tasks_per_second_ratio"`
	// Events is how many distinct events the receiver got (Requests: how
	// many requests), EventsPerSecond the rate between the first and the
	// last, and LastAfterRun how long after the run's end the last came.
	Events          int     `json:"events"`
	Requests        int     `json:"requests"`
	EventsPerSecond float64 `json:"events_per_second"`
	LastAfterRun    float64 `json:"last_event_after_run_seconds"`
}

// hookSink counts what a webhook receiver gets.
type hookSink struct {
	mu          sync.Mutex
	ids         map[string]bool
	requests    int
	first, last time.Time
}

func (s *hookSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		ID string `json:"id"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &ev)
	now := time.Now()
	s.mu.Lock()
	if s.first.IsZero() {
		s.first = now
	}
	s.last = now
	s.requests++
	s.ids[ev.ID] = true
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *hookSink) events() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// compareWebhook runs the bench without, then with, a webhook subscribed
// to every event type, and compares task throughput.
func compareWebhook(ctx context.Context, o Options, asJSON bool, stdout, stderr io.Writer) error {
	if o.Keep {
		return cli.UsageError(errors.New("--compare-webhook and --keep do not go together"))
	}
	dir, err := os.MkdirTemp("", "flow-bench-key-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte(base64.StdEncoding.EncodeToString(raw)+"\n"), 0o600); err != nil {
		return err
	}
	sink := &hookSink{ids: map[string]bool{}}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	env := []string{"FLOW_DEV_MODE=true", "FLOW_LOG_LEVEL=info", "FLOW_DATA_ENCRYPTION_KEY_PATH=" + key}
	var runEnd time.Time
	once := func(subscribe bool) (*Result, error) {
		o := o
		o.ServerEnv = append(append([]string(nil), o.ServerEnv...), env...)
		b, err := Start(ctx, o)
		if b != nil {
			defer func() {
				if err := b.Close(context.WithoutCancel(ctx)); err != nil {
					fmt.Fprintf(stderr, "bench: cleanup: %v\n", err)
				}
			}()
		}
		if err != nil {
			return nil, err
		}
		if subscribe {
			if _, err := b.admin.CreateWebhook(ctx, &adminv1.CreateWebhookRequest{Url: srv.URL, EventTypes: []string{"*"},
				Secret: base64.StdEncoding.EncodeToString(raw), Description: "flow bench"}); err != nil {
				return nil, fmt.Errorf("create webhook: %w", err)
			}
		}
		res, err := b.Run(ctx)
		if err != nil || !subscribe {
			return res, err
		}
		runEnd = time.Now()
		// Every task's end is an event: wait (a minute at most) until the
		// receiver has them all, with the server still up.
		deadline := time.Now().Add(time.Minute)
		for sink.events() < res.Completed+res.Failed && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		return res, nil
	}
	var cmp WebhookComparison
	if cmp.Off, err = once(false); err != nil {
		return err
	}
	if cmp.On, err = once(true); err != nil {
		return err
	}
	if cmp.Off.TasksPerSecond > 0 {
		cmp.TasksPerSecondRatio = cmp.On.TasksPerSecond / cmp.Off.TasksPerSecond
	}
	sink.mu.Lock()
	cmp.Events, cmp.Requests = len(sink.ids), sink.requests
	if d := sink.last.Sub(sink.first).Seconds(); d > 0 {
		cmp.EventsPerSecond = float64(len(sink.ids)) / d
	}
	if !sink.last.IsZero() {
		cmp.LastAfterRun = sink.last.Sub(runEnd).Seconds()
	}
	sink.mu.Unlock()
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(cmp); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout, "\n== no webhook ==")
		printBenchResult(stdout, cmp.Off)
		fmt.Fprintln(stdout, "\n== a webhook subscribed to every event type (receiver in this process) ==")
		printBenchResult(stdout, cmp.On)
		fmt.Fprintf(stdout, "\n  tasks/s on ÷ off   %.3f\n  events received    %d (%d requests), %.1f/s, the last %.2fs after the run ended\n",
			cmp.TasksPerSecondRatio, cmp.Events, cmp.Requests, cmp.EventsPerSecond, cmp.LastAfterRun)
	}
	for _, r := range []*Result{cmp.Off, cmp.On} {
		if r.Failed > 0 || r.Unfinished > 0 {
			return fmt.Errorf("bench: %d of %d tasks failed, %d unfinished", r.Failed, r.Tasks, r.Unfinished)
		}
	}
	if cmp.Events < cmp.On.Completed {
		return fmt.Errorf("bench: the receiver got %d events for %d completed tasks", cmp.Events, cmp.On.Completed)
	}
	return nil
}
