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
	m.SystemJobLeader = m.gauge("flow_system_job_leader", "1 while this process is the system-job leader, else 0.").WithLabelValues()
	m.PruneDeleted = m.counter("flow_prune_rows_deleted_total", "Rows retention pruning deleted, by table.", "table")
	m.PruneOldestKept = m.gauge("flow_prune_oldest_kept_timestamp_seconds", "Creation time (events: last report) of the oldest row kept, by table; 0 when the table is empty.", "table")
	m.PruneLastSuccess = m.gauge("flow_prune_last_success_timestamp_seconds", "When the last pruning cycle succeeded.").WithLabelValues()
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
