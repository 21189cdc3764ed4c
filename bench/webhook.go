package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nicoflow/flow/cli"
)

// WebhookComparison is --compare-webhook's result: rounds of the same
// bench without a webhook subscription and with one to every event type (a
// receiver in the bench process), each on a fresh cluster with a data key
// and dev mode (loopback http://), and with the same synthetic event
// stream when EventsPerSecond is set.
type WebhookComparison struct {
	EventsPerSecond float64 `json:"synthetic_events_per_second"`
	// EventsPerStatement is how many synthetic events one transaction
	// wrote; Batch the receiver's batch size (0: one event a request).
	EventsPerStatement int            `json:"synthetic_events_per_statement"`
	Batch              int            `json:"webhook_batch"`
	Rounds             []WebhookRound `json:"rounds"`
	// MedianRatio is the median of the rounds' tasks/s ratios (with ÷
	// without), MedianCPURatio the median of their server+PostgreSQL CPU
	// per completed task ratios, MedianDeliveredPerSecond the median of
	// the "with" runs' delivered events/s while the run went on.
	MedianRatio              float64 `json:"median_tasks_per_second_ratio"`
	MedianCPURatio           float64 `json:"median_cpu_per_task_ratio"`
	MedianDeliveredPerSecond float64 `json:"median_delivered_per_second"`
}

// WebhookRound is one without/with pair, run in Order.
type WebhookRound struct {
	Order string  `json:"order"` // "off,on" or "on,off"
	Off   *Result `json:"webhook_off"`
	On    *Result `json:"webhook_on"`
	// Load is the 1-minute load average when the round started.
	Load float64 `json:"load_average"`
	// Ratio is On's tasks/s over Off's; CPURatio On's server+PostgreSQL
	// CPU seconds per completed task over Off's.
	Ratio    float64 `json:"tasks_per_second_ratio"`
	CPURatio float64 `json:"cpu_per_task_ratio"`
}

// compareWebhook runs o.Rounds without/with pairs, alternating which goes
// first, and compares task throughput.
func compareWebhook(ctx context.Context, o Options, asJSON bool, stdout, stderr io.Writer) error {
	if o.Keep {
		return cli.UsageError(errors.New("--compare-webhook and --keep do not go together"))
	}
	if o.DatabaseURL != "" {
		return cli.UsageError(errors.New("--compare-webhook needs fresh private clusters (no --database-url)"))
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
	env := []string{"FLOW_DEV_MODE=true", "FLOW_LOG_LEVEL=info", "FLOW_DATA_ENCRYPTION_KEY_PATH=" + key}
	once := func(subscribe bool) (*Result, error) {
		o := o
		o.ServerEnv = append(append([]string(nil), o.ServerEnv...), env...)
		o.Subscribe = subscribe
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
		return b.Run(ctx)
	}
	cmp := WebhookComparison{EventsPerSecond: o.EventsPerSecond, EventsPerStatement: max(o.EventsPerStatement, 1), Batch: o.WebhookBatch}
	for i := range max(o.Rounds, 1) {
		r := WebhookRound{Order: "off,on", Load: loadAverage()}
		if i%2 == 1 {
			r.Order = "on,off"
		}
		for _, on := range []bool{i%2 == 1, i%2 == 0} {
			res, err := once(on)
			if err != nil {
				return err
			}
			if on {
				r.On = res
			} else {
				r.Off = res
			}
		}
		if r.Off.TasksPerSecond > 0 {
			r.Ratio = r.On.TasksPerSecond / r.Off.TasksPerSecond
		}
		if off := cpuPerTask(r.Off); off > 0 {
			r.CPURatio = cpuPerTask(r.On) / off
		}
		cmp.Rounds = append(cmp.Rounds, r)
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "bench: round %d (%s, load %.1f): tasks/s ratio %.3f, delivered %.0f/s\n", i+1, r.Order, r.Load, r.Ratio, r.On.Webhook.DeliveredPerSecond)
		}
	}
	var ratios, cpus, rates []float64
	for _, r := range cmp.Rounds {
		ratios, cpus, rates = append(ratios, r.Ratio), append(cpus, r.CPURatio), append(rates, r.On.Webhook.DeliveredPerSecond)
	}
	cmp.MedianRatio, cmp.MedianCPURatio, cmp.MedianDeliveredPerSecond = median(ratios), median(cpus), median(rates)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(cmp); err != nil {
			return err
		}
	} else {
		printWebhookComparison(stdout, cmp)
	}
	for _, r := range cmp.Rounds {
		for _, res := range []*Result{r.Off, r.On} {
			if res.Failed > 0 || res.Unfinished > 0 {
				return fmt.Errorf("bench: %d of %d tasks failed, %d unfinished", res.Failed, res.Tasks, res.Unfinished)
			}
		}
		if w := r.On.Webhook; w.Events < w.Expected {
			return fmt.Errorf("bench: the receiver got %d of the %d events owed", w.Events, w.Expected)
		}
	}
	return nil
}

func printWebhookComparison(w io.Writer, cmp WebhookComparison) {
	for i, r := range cmp.Rounds {
		fmt.Fprintf(w, "\n== round %d (%s, load average %.1f): no webhook ==", i+1, r.Order, r.Load)
		printBenchResult(w, r.Off)
		fmt.Fprintf(w, "\n== round %d: a webhook subscribed to every event type (receiver in this process) ==", i+1)
		printBenchResult(w, r.On)
	}
	batch := "one event a request"
	if cmp.Batch > 0 {
		batch = fmt.Sprintf("batches of up to %d events", cmp.Batch)
	}
	fmt.Fprintf(w, "\nsynthetic events: %.0f/s requested, %d a transaction; receiver: %s\n", cmp.EventsPerSecond, cmp.EventsPerStatement, batch)
	fmt.Fprintln(w, "round  order   load  tasks/s off    on  ratio  cpu/task ratio  emitted/s  delivered/s  events (requests) of owed  drain")
	for i, r := range cmp.Rounds {
		h := r.On.Webhook
		fmt.Fprintf(w, "%5d  %-6s %5.1f  %11.1f %5.1f  %5.3f  %14.3f  %9.0f  %11.0f  %d (%d) of %d  %+.2fs\n", i+1, r.Order, r.Load,
			r.Off.TasksPerSecond, r.On.TasksPerSecond, r.Ratio, r.CPURatio, h.EmittedPerSecond, h.DeliveredPerSecond, h.Events, h.Requests, h.Expected, h.DrainSeconds)
	}
	fmt.Fprintf(w, "median tasks/s on ÷ off %.3f, cpu/task on ÷ off %.3f, delivered %.0f/s\n", cmp.MedianRatio, cmp.MedianCPURatio, cmp.MedianDeliveredPerSecond)
}

// cpuPerTask is the server's and PostgreSQL's CPU seconds per completed
// task.
func cpuPerTask(r *Result) float64 {
	if r.Completed == 0 {
		return 0
	}
	return (r.ServerCPUSeconds + r.PostgresCPUSeconds) / float64(r.Completed)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// loadAverage is the machine's 1-minute load average (0 when unknown).
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var v float64
	_, _ = fmt.Sscan(strings.Fields(string(data))[0], &v)
	return v
}
