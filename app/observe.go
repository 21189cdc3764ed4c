package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/firmware/baseline"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/rollout"
	"github.com/nicoflow/flow/reconcile"
	"github.com/nicoflow/flow/telemetry"
)

// observer turns what the engine and the task manager report into metrics
// and the log lines that tell a task's story (docs/observability.md): one
// line per lifecycle point, each naming task_id, rack and operation, with
// the engine's own IDs beside them.
type observer struct {
	m       *telemetry.Metrics // nil: no metrics
	logger  *slog.Logger
	tracing bool // name the task and rack on each call's span
	// tracer starts the spans of the steps a job goes on with after its
	// first (engine.ChainObserver); nil without tracing.
	tracer trace.Tracer
}

var (
	_ engine.Observer         = (*observer)(nil)
	_ operations.TaskObserver = (*observer)(nil)
)

func taskAttrs(ev operations.TaskEvent) []any {
	return []any{"task_id", ev.TaskID.String(), "rack", ev.Rack, "operation", string(ev.Operation)}
}

// TaskEvent logs and counts a task's submission, start or end.
func (o *observer) TaskEvent(ctx context.Context, ev operations.TaskEvent) {
	op := string(ev.Operation)
	switch ev.Kind {
	case operations.TaskSubmitted:
		o.logger.InfoContext(ctx, "task submitted", append(taskAttrs(ev), "status", string(ev.Status), "operation_type", string(ev.Type))...)
		if o.m != nil {
			o.m.TasksSubmitted.WithLabelValues(op).Inc()
		}
	case operations.TaskStarted:
		waited := ev.At.Sub(ev.SubmittedAt)
		o.logger.InfoContext(ctx, "task started", append(taskAttrs(ev), "since_submit", waited)...)
		if o.m != nil {
			o.m.TaskStartLatency.WithLabelValues(op).Observe(waited.Seconds())
			if !ev.LeakObservedAt.IsZero() {
				o.m.Leak.Response.WithLabelValues("first_power_off", "called").Observe(ev.At.Sub(ev.LeakObservedAt).Seconds())
			}
		}
	case operations.TaskEnded:
		took := ev.At.Sub(ev.SubmittedAt)
		level := slog.LevelInfo
		if ev.Status == operations.TaskFailed {
			level = slog.LevelWarn
		}
		o.logger.Log(ctx, level, "task ended", append(taskAttrs(ev), "status", string(ev.Status), "message", ev.Message, "duration", took)...)
		if o.m != nil {
			o.m.TasksEnded.WithLabelValues(op, string(ev.Status)).Inc()
			o.m.TaskDuration.WithLabelValues(op, string(ev.Status)).Observe(took.Seconds())
			if !ev.LeakObservedAt.IsZero() {
				o.m.Leak.Response.WithLabelValues("completed", string(ev.Status)).Observe(ev.At.Sub(ev.LeakObservedAt).Seconds())
			}
		}
	}
}

// StepHandedOn starts the span of a step a job goes on with after its
// first (chained steps): "engine.step", a child of the job's span, which
// CallEnded names as it names the job's for its first step.
func (o *observer) StepHandedOn(ctx context.Context, run engine.RunID, step engine.StepID) (context.Context, func()) {
	if o.tracer == nil {
		return ctx, func() {}
	}
	ctx, span := o.tracer.Start(ctx, "engine.step", trace.WithAttributes(
		attribute.Int64("flow.run_id", int64(run)), attribute.Int64("flow.step_id", int64(step))))
	return ctx, func() { span.End() }
}

// CallEnded counts and times one action call; a failed call is logged by
// the engine with its retry, or by StepEnded when it fails the step.
func (o *observer) CallEnded(ctx context.Context, ev engine.CallEvent) {
	if o.tracing {
		// ctx is the step's: the River job's span (otelriver's) for the
		// job's first step, StepHandedOn's for the steps after it.
		trace.SpanFromContext(ctx).SetAttributes(
			attribute.String("flow.task_id", ev.Labels["task_id"]), attribute.String("flow.rack", ev.Labels["rack"]),
			attribute.String("flow.operation", ev.Labels["operation"]), attribute.String("flow.stage", ev.StageName),
			attribute.String("flow.step", ev.Step), attribute.String("flow.action", ev.Action),
			attribute.Int("flow.attempt", ev.Attempt), attribute.Int64("flow.run_id", int64(ev.RunID)))
	}
	if ev.Attempt == 1 && ev.Batch == 0 {
		o.logger.DebugContext(ctx, "step called", ev.LogAttrs()...)
	}
	if o.m == nil {
		return
	}
	outcome := "ok"
	if ev.Err != nil {
		outcome = "error"
	}
	o.m.Calls.WithLabelValues(ev.Action, outcome).Inc()
	o.m.CallDuration.WithLabelValues(ev.Action).Observe(ev.Duration.Seconds())
}

// StepEnded logs a failed step with its error (the backend's message) at
// WARN, other ends at DEBUG, and counts it.
func (o *observer) StepEnded(ctx context.Context, ev engine.StepEvent) {
	attrs := append(ev.LogAttrs(), "state", string(ev.State), "duration", ev.Duration)
	switch ev.State {
	case engine.StateFailed:
		o.logger.WarnContext(ctx, "step failed", append(attrs, "attempts", ev.Calls, "error", ev.Error)...)
	default:
		o.logger.DebugContext(ctx, "step ended", attrs...)
	}
	if o.m == nil {
		return
	}
	o.m.StepsEnded.WithLabelValues(ev.Action, string(ev.State)).Inc()
	o.m.StepDuration.WithLabelValues(ev.Action).Observe(ev.Duration.Seconds())
	if ev.Calls > 0 {
		o.m.StepCalls.WithLabelValues(ev.Action).Observe(float64(ev.Calls))
	}
}

// StageStarted logs the end of the previous stage and the start of this
// one (a stage starts only once the one before it ended well).
func (o *observer) StageStarted(ctx context.Context, ev engine.StageEvent) {
	attrs := labelAttrs(ev.Labels)
	o.logger.InfoContext(ctx, "stage ended", append(attrs, "stage", ev.Ended, "state", "completed", "run_id", int64(ev.RunID))...)
	o.logger.InfoContext(ctx, "stage started", append(attrs, "stage", ev.StageName, "stage_index", ev.Stage, "run_id", int64(ev.RunID))...)
}

// RunEnded logs runs that are not a task's (a task's end is TaskEvent's).
func (o *observer) RunEnded(ctx context.Context, run engine.RunSummary) {
	if run.Labels["task_id"] == "" {
		o.logger.DebugContext(ctx, "run ended", "run_id", int64(run.ID), "owner", run.Owner, "state", string(run.State), "error", run.Error)
	}
}

// CheckpointCommitted times checkpoint transactions.
func (o *observer) CheckpointCommitted(steps int, d time.Duration, err error) {
	if o.m == nil {
		return
	}
	if err != nil {
		o.m.CheckpointFails.Inc()
		return
	}
	o.m.CheckpointTime.Observe(d.Seconds())
	o.m.CheckpointSize.Observe(float64(steps))
}

func labelAttrs(labels map[string]string) []any {
	var attrs []any
	for _, k := range []string{"task_id", "rack", "operation"} {
		if v, ok := labels[k]; ok {
			attrs = append(attrs, k, v)
		}
	}
	return attrs
}

// watchRiverJobs times River jobs by kind (queue wait and run time) from
// the client's event stream, until ctx ends. Subscribe before Start.
func watchRiverJobs(ctx context.Context, client *river.Client[pgx.Tx], m *telemetry.Metrics) {
	if m == nil {
		return
	}
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled, river.EventKindJobSnoozed)
	go func() {
		defer cancel()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					return
				}
				if ev.Job == nil || ev.JobStats == nil {
					continue
				}
				m.JobWait.WithLabelValues(ev.Job.Kind).Observe(ev.JobStats.QueueWaitDuration.Seconds())
				m.JobRun.WithLabelValues(ev.Job.Kind).Observe(ev.JobStats.RunDuration.Seconds())
			}
		}
	}()
}

// stateCollector reads, at each scrape, what is true now: the database
// pool, the unfinished tasks by status and River's queue depths.
type stateCollector struct {
	pool   *pgxpool.Pool
	tasks  *operations.Tasks
	queues []string

	poolConns, poolMax, poolWaits, poolWaitTime *prometheus.Desc
	tasksNow, queueJobs, scrapeErr              *prometheus.Desc
}

func newStateCollector(pool *pgxpool.Pool, tasks *operations.Tasks, queues []string) *stateCollector {
	return &stateCollector{
		pool: pool, tasks: tasks, queues: queues,
		poolConns:    prometheus.NewDesc("flow_db_pool_connections", "Database pool connections by state (in_use, idle).", []string{"state"}, nil),
		poolMax:      prometheus.NewDesc("flow_db_pool_max_connections", "Size of the database pool (FLOW_DB_MAX_CONNS).", nil, nil),
		poolWaits:    prometheus.NewDesc("flow_db_pool_acquire_waits_total", "Connection acquisitions that had to wait for a free connection.", nil, nil),
		poolWaitTime: prometheus.NewDesc("flow_db_pool_acquire_wait_seconds_total", "Total time acquisitions waited for a free connection.", nil, nil),
		tasksNow:     prometheus.NewDesc("flow_tasks", "Unfinished tasks now, by status (waiting, pending, running).", []string{"status"}, nil),
		queueJobs:    prometheus.NewDesc("flow_river_queue_jobs", "River jobs now, by queue and state (available: waiting for a worker; running).", []string{"queue", "state"}, nil),
		scrapeErr:    prometheus.NewDesc("flow_state_scrape_errors", "1 when reading the task or queue counts failed during this scrape.", []string{"source"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.poolConns, c.poolMax, c.poolWaits, c.poolWaitTime, c.tasksNow, c.queueJobs, c.scrapeErr} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(c.poolConns, prometheus.GaugeValue, float64(st.AcquiredConns()), "in_use")
	ch <- prometheus.MustNewConstMetric(c.poolConns, prometheus.GaugeValue, float64(st.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(c.poolMax, prometheus.GaugeValue, float64(st.MaxConns()))
	ch <- prometheus.MustNewConstMetric(c.poolWaits, prometheus.CounterValue, float64(st.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(c.poolWaitTime, prometheus.CounterValue, st.EmptyAcquireWaitTime().Seconds())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	taskErr, queueErr := 0.0, 0.0
	if c.tasks != nil {
		if n, err := c.tasks.CountActive(ctx); err != nil {
			taskErr = 1
		} else {
			for status, v := range n {
				ch <- prometheus.MustNewConstMetric(c.tasksNow, prometheus.GaugeValue, float64(v), string(status))
			}
		}
	}
	counts, err := riverpgxv5.New(c.pool).GetExecutor().JobCountByQueueAndState(ctx, &riverdriver.JobCountByQueueAndStateParams{QueueNames: c.queues})
	if err != nil {
		queueErr = 1
	} else {
		for _, q := range counts {
			ch <- prometheus.MustNewConstMetric(c.queueJobs, prometheus.GaugeValue, float64(q.CountAvailable), q.Queue, "available")
			ch <- prometheus.MustNewConstMetric(c.queueJobs, prometheus.GaugeValue, float64(q.CountRunning), q.Queue, "running")
		}
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeErr, prometheus.GaugeValue, taskErr, "tasks")
	ch <- prometheus.MustNewConstMetric(c.scrapeErr, prometheus.GaugeValue, queueErr, "queues")
}

// syncObserver records inventory-sync cycles in m.
func syncObserver(m *telemetry.Metrics) func(reconcile.SyncRun, error) {
	if m == nil {
		return nil
	}
	return func(run reconcile.SyncRun, err error) {
		parts := make([]telemetry.SyncPartResult, 0, len(run.Parts))
		for _, p := range run.Parts {
			parts = append(parts, telemetry.SyncPartResult{Name: p.Name, OK: p.OK, Changed: p.Changed, Drifts: p.Drifts})
		}
		m.SyncEnded(run.Trigger, run.Duration, parts, err, run.StartedAt.Add(run.Duration))
	}
}

// runCollector reads, at each scrape, the operation runs by status, the
// targets of unfinished runs by status, and each unfinished run's phase.
type runCollector struct {
	runs                       *rollout.Service
	runsNow, targetsNow, phase *prometheus.Desc
	scrapeErr                  *prometheus.Desc
}

// listingCollector reports the listing cache's hits and builds
// (inventory.Handler.ListingCacheStats) at scrape.
type listingCollector struct {
	h                    *inventory.Handler
	hits, misses         *prometheus.Desc
	genReads, pageChecks *prometheus.Desc
	jsonEncodes          *prometheus.Desc
	buildWaits           *prometheus.Desc
}

func newListingCollector(h *inventory.Handler) *listingCollector {
	return &listingCollector{
		h:      h,
		hits:   prometheus.NewDesc("flow_listing_cache_hits_total", "GetListOfRacks pages answered from the listing cache.", nil, nil),
		misses: prometheus.NewDesc("flow_listing_cache_builds_total", "GetListOfRacks pages built for the listing cache (not found, or no longer valid).", nil, nil),
		genReads: prometheus.NewDesc("flow_listing_cache_generation_reads_total",
			"Inventory generation reads run for listing cache calls (shared among concurrent calls).", nil, nil),
		pageChecks: prometheus.NewDesc("flow_listing_cache_page_checks_total",
			"Checks of a cached page's task-derived fields run for listing cache calls (shared among concurrent calls of the page).", nil, nil),
		jsonEncodes: prometheus.NewDesc("flow_listing_cache_json_encodes_total",
			"Cached GetListOfRacks pages encoded as JSON for Connect JSON calls (once a page; later JSON calls of the page get those bytes).", nil, nil),
		buildWaits: prometheus.NewDesc("flow_listing_cache_build_waits_total",
			"GetListOfRacks calls that found their page being built by another call and waited for that build instead of building it again.", nil, nil),
	}
}

func (c *listingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.hits
	ch <- c.misses
	ch <- c.genReads
	ch <- c.pageChecks
	ch <- c.jsonEncodes
	ch <- c.buildWaits
}

func (c *listingCollector) Collect(ch chan<- prometheus.Metric) {
	hits, misses := c.h.ListingCacheStats()
	ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(hits))
	ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(misses))
	genReads, pageChecks := c.h.ListingCheckStats()
	ch <- prometheus.MustNewConstMetric(c.genReads, prometheus.CounterValue, float64(genReads))
	ch <- prometheus.MustNewConstMetric(c.pageChecks, prometheus.CounterValue, float64(pageChecks))
	ch <- prometheus.MustNewConstMetric(c.jsonEncodes, prometheus.CounterValue, float64(c.h.ListingJSONEncodes()))
	ch <- prometheus.MustNewConstMetric(c.buildWaits, prometheus.CounterValue, float64(c.h.ListingBuildWaits()))
}

func newRunCollector(runs *rollout.Service) *runCollector {
	return &runCollector{
		runs:       runs,
		runsNow:    prometheus.NewDesc("flow_operation_runs", "Operation runs kept, by status.", []string{"status"}, nil),
		targetsNow: prometheus.NewDesc("flow_operation_run_targets", "Targets of unfinished operation runs (pending, running, paused), by status.", []string{"status"}, nil),
		phase:      prometheus.NewDesc("flow_operation_run_phase", "The current phase (0-based) of each unfinished operation run, by run ID and name.", []string{"run_id", "name"}, nil),
		scrapeErr:  prometheus.NewDesc("flow_operation_run_scrape_errors", "1 when reading the operation-run counts failed during this scrape.", nil, nil),
	}
}

func (c *runCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.runsNow, c.targetsNow, c.phase, c.scrapeErr} {
		ch <- d
	}
}

func (c *runCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.runs.Counts(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.scrapeErr, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeErr, prometheus.GaugeValue, 0)
	for status, n := range st.Runs {
		ch <- prometheus.MustNewConstMetric(c.runsNow, prometheus.GaugeValue, float64(n), status)
	}
	for status, n := range st.Targets {
		ch <- prometheus.MustNewConstMetric(c.targetsNow, prometheus.GaugeValue, float64(n), status)
	}
	for _, p := range st.Phases {
		ch <- prometheus.MustNewConstMetric(c.phase, prometheus.GaugeValue, float64(p.Phase), p.ID.String(), p.Name)
	}
}

// complianceCollector exports the active firmware baseline's compliance:
// devices per state and component type (every combination, zero included,
// from the first scrape; all zero while no baseline is active). The counts
// are computed at most every 30 s (baseline.Service.SiteCounts).
type complianceCollector struct {
	pool    *pgxpool.Pool
	svc     *baseline.Service
	devices *prometheus.Desc
	active  *prometheus.Desc
	errs    *prometheus.Desc
}

func newComplianceCollector(pool *pgxpool.Pool, svc *baseline.Service) *complianceCollector {
	return &complianceCollector{
		pool: pool, svc: svc,
		devices: prometheus.NewDesc("flow_firmware_compliance_devices", "Devices by firmware compliance state against the active baseline and component type.", []string{"state", "component_type"}, nil),
		active:  prometheus.NewDesc("flow_firmware_baseline_active", "1 when a firmware baseline is active.", nil, nil),
		errs:    prometheus.NewDesc("flow_firmware_compliance_scrape_errors", "1 when computing the compliance counts failed during this scrape.", nil, nil),
	}
}

func (c *complianceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.devices
	ch <- c.active
	ch <- c.errs
}

func (c *complianceCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	counts, ok, err := c.svc.SiteCounts(ctx, c.pool)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.errs, prometheus.GaugeValue, 1)
		counts = nil
	} else {
		ch <- prometheus.MustNewConstMetric(c.errs, prometheus.GaugeValue, 0)
	}
	v := 0.0
	if ok {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, v)
	for _, t := range baseline.Types {
		for _, st := range baseline.States {
			ch <- prometheus.MustNewConstMetric(c.devices, prometheus.GaugeValue, float64(counts[t].Of(st)), st, t)
		}
	}
}
