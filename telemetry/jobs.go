package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// jobMetrics are the metrics of what runs on its own: system jobs and
// pruning (schedules, rollouts and the sync have theirs in auto.go).
type jobMetrics struct {
	SystemJobRuns     *prometheus.CounterVec   // job, outcome
	SystemJobDuration *prometheus.HistogramVec // job
	SystemJobInterval *prometheus.HistogramVec // job
	SystemJobLeader   prometheus.Gauge

	PruneDeleted     *prometheus.CounterVec // table
	PruneOldestKept  *prometheus.GaugeVec   // table
	PruneLastSuccess prometheus.Gauge
}

func (m *Metrics) gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	m.names = append(m.names, name)
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	m.Registry.MustRegister(g)
	return g
}

func (m *Metrics) counter(name, help string, labels ...string) *prometheus.CounterVec {
	m.names = append(m.names, name)
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	m.Registry.MustRegister(c)
	return c
}

func (m *Metrics) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	m.names = append(m.names, name)
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	m.Registry.MustRegister(h)
	return h
}

func (m *Metrics) addJobMetrics() {
	m.SystemJobRuns = m.counter("flow_system_job_runs_total", "Cycles of the leader's system jobs (inventory-sync, leak-detection, schedule-tick, prune…), by job and outcome (ok, error).", "job", "outcome")
	m.SystemJobDuration = m.histogram("flow_system_job_duration_seconds", "Duration of one system-job cycle, by job.", taskBuckets, "job")
	m.SystemJobInterval = m.histogram("flow_system_job_interval_seconds",
		"Time from one system-job cycle's start to the next one's on this leader (the interval plus the cycle and any lock wait: a job due every 3 s that shows 12 s was delayed), by job.",
		intervalBuckets, "job")
	m.SystemJobLeader = m.gauge("flow_system_job_leader", "1 while this process is the system-job leader, else 0.").WithLabelValues()
	m.PruneDeleted = m.counter("flow_prune_rows_deleted_total", "Rows retention pruning deleted, by table.", "table")
	m.PruneOldestKept = m.gauge("flow_prune_oldest_kept_timestamp_seconds", "Creation time (events: last report) of the oldest row kept, by table; 0 when the table is empty.", "table")
	m.PruneLastSuccess = m.gauge("flow_prune_last_success_timestamp_seconds", "When the last pruning cycle succeeded.").WithLabelValues()
}

// intervalBuckets resolve the start-to-start interval of system jobs around
// their usual intervals (leak detection's 3 s, the sweeps' 30 s, the sync's
// minutes).
var intervalBuckets = []float64{0.5, 1, 2, 3, 3.25, 3.5, 4, 5, 6, 8, 10, 15, 30, 45, 60, 120, 300, 600, 1800, 3600}

// SystemJobStarted records the time since the previous cycle of job
// started on this leader.
func (m *Metrics) SystemJobStarted(job string, sincePrevious time.Duration) {
	if m == nil {
		return
	}
	m.SystemJobInterval.WithLabelValues(job).Observe(sincePrevious.Seconds())
}

// SystemJobEnded records one system-job cycle.
func (m *Metrics) SystemJobEnded(job string, d time.Duration, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.SystemJobRuns.WithLabelValues(job, outcome).Inc()
	m.SystemJobDuration.WithLabelValues(job).Observe(d.Seconds())
}

// SetSystemJobLeader records whether this process leads the system jobs.
func (m *Metrics) SetSystemJobLeader(leading bool) {
	if m == nil {
		return
	}
	v := 0.0
	if leading {
		v = 1
	}
	m.SystemJobLeader.Set(v)
}

// AddPruned counts n rows pruned from table.
func (m *Metrics) AddPruned(table string, n int64) {
	if m == nil {
		return
	}
	m.PruneDeleted.WithLabelValues(table).Add(float64(n))
}

// SetPruneOldestKept records the time of the oldest row of table kept
// (zero: none).
func (m *Metrics) SetPruneOldestKept(table string, at time.Time) {
	if m == nil {
		return
	}
	v := 0.0
	if !at.IsZero() {
		v = float64(at.Unix())
	}
	m.PruneOldestKept.WithLabelValues(table).Set(v)
}

// SetPruneSuccess records a successful pruning cycle at at.
func (m *Metrics) SetPruneSuccess(at time.Time) {
	if m == nil {
		return
	}
	m.PruneLastSuccess.Set(float64(at.Unix()))
}

// autoMetrics are the metrics of schedules and the inventory sync (the
// operation runs' are read at scrape time by app's state collector).
type autoMetrics struct {
	ScheduleFirings   *prometheus.CounterVec   // outcome
	ScheduleFiringLag *prometheus.HistogramVec // (none)

	SyncCycles      *prometheus.CounterVec   // trigger, outcome
	SyncDuration    *prometheus.HistogramVec // trigger
	SyncRowsChanged *prometheus.CounterVec   // part
	SyncDrift       *prometheus.GaugeVec     // part
	SyncLastSuccess prometheus.Gauge
}

// lagBuckets fit a firing's lag behind its due time: 10 ms to 10 min.
var lagBuckets = []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120, 300, 600}

func (m *Metrics) addAutoMetrics() {
	m.ScheduleFirings = m.counter("flow_schedule_firings_total", "Schedule firings, by outcome: submitted (at least one task), none_eligible (every scope entry busy under the overlap policy), refused (every submission refused), not_due (paused, changed, deleted or already fired), error.", "outcome")
	m.ScheduleFiringLag = m.histogram("flow_schedule_firing_lag_seconds", "Time from a firing's due time to its transaction (due firings only).", lagBuckets)
	m.SyncCycles = m.counter("flow_sync_cycles_total", "Inventory-sync cycles, by trigger (schedule, manual) and outcome (ok: every part ok; partial; error).", "trigger", "outcome")
	m.SyncDuration = m.histogram("flow_sync_cycle_duration_seconds", "Duration of one inventory-sync cycle, by trigger.", taskBuckets, "trigger")
	m.SyncRowsChanged = m.counter("flow_sync_rows_changed_total", "Inventory rows the sync wrote, by part.", "part")
	m.SyncDrift = m.gauge("flow_sync_drift_rows", "Drift rows held after the last cycle, by part.", "part")
	m.SyncLastSuccess = m.gauge("flow_sync_last_success_timestamp_seconds", "When the last inventory-sync cycle whose every part succeeded ended.").WithLabelValues()
}

// ScheduleFired records one firing's outcome and, for a due firing, its
// lag behind its due time (lag < 0: not due, not observed).
func (m *Metrics) ScheduleFired(outcome string, lag time.Duration) {
	if m == nil {
		return
	}
	m.ScheduleFirings.WithLabelValues(outcome).Inc()
	if lag >= 0 {
		m.ScheduleFiringLag.WithLabelValues().Observe(lag.Seconds())
	}
}

// SyncPartResult is one part of a sync cycle, as the metrics see it.
type SyncPartResult struct {
	Name    string
	OK      bool
	Changed int64
	Drifts  int
}

// SyncEnded records one inventory-sync cycle (err: it did not run).
func (m *Metrics) SyncEnded(trigger string, d time.Duration, parts []SyncPartResult, err error, end time.Time) {
	if m == nil {
		return
	}
	outcome := "ok"
	for _, p := range parts {
		m.SyncRowsChanged.WithLabelValues(p.Name).Add(float64(p.Changed))
		if p.OK {
			m.SyncDrift.WithLabelValues(p.Name).Set(float64(p.Drifts))
		} else {
			outcome = "partial"
		}
	}
	if err != nil {
		outcome = "error"
	}
	m.SyncCycles.WithLabelValues(trigger, outcome).Inc()
	m.SyncDuration.WithLabelValues(trigger).Observe(d.Seconds())
	if outcome == "ok" {
		m.SyncLastSuccess.Set(float64(end.Unix()))
	}
}
