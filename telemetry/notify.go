package telemetry

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// NotifyMetrics are the notification metrics (docs/notifications.md).
type NotifyMetrics struct {
	// Events counts events written to the outbox, by type.
	Events *prometheus.CounterVec // type
	// Deliveries counts delivery attempts by outcome (delivered, retried,
	// dead).
	Deliveries *prometheus.CounterVec // outcome
	// backlog reads the pending deliveries and the oldest one's age (in
	// seconds) at scrape time; nil reads zeros.
	backlog atomic.Pointer[func() (pending int, oldestSeconds float64)]
}

func newNotifyMetrics(reg *prometheus.Registry, names *[]string, counter func(name, help string, labels ...string) *prometheus.CounterVec) *NotifyMetrics {
	n := &NotifyMetrics{
		Events:     counter("flow_notify_events_total", "Events written to the notification outbox (for at least one subscription), by type.", "type"),
		Deliveries: counter("flow_notify_deliveries_total", "Webhook delivery attempts, by outcome (delivered, retried, dead).", "outcome"),
	}
	*names = append(*names, "flow_notify_pending_deliveries", "flow_notify_oldest_pending_seconds")
	reg.MustRegister(notifyCollector{n})
	return n
}

// Init sets the families' known label values to zero.
func (n *NotifyMetrics) Init(types, outcomes []string) {
	if n == nil {
		return
	}
	for _, t := range types {
		n.Events.WithLabelValues(t)
	}
	for _, o := range outcomes {
		n.Deliveries.WithLabelValues(o)
	}
}

// SetBacklog sets what the backlog gauges read at scrape time.
func (n *NotifyMetrics) SetBacklog(fn func() (pending int, oldestSeconds float64)) {
	if n != nil {
		n.backlog.Store(&fn)
	}
}

var (
	notifyPendingDesc = prometheus.NewDesc("flow_notify_pending_deliveries", "Webhook deliveries not yet delivered nor dead-lettered.", nil, nil)
	notifyOldestDesc  = prometheus.NewDesc("flow_notify_oldest_pending_seconds", "Age of the oldest pending webhook delivery (0: none).", nil, nil)
)

type notifyCollector struct{ n *NotifyMetrics }

func (c notifyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- notifyPendingDesc
	ch <- notifyOldestDesc
}

func (c notifyCollector) Collect(ch chan<- prometheus.Metric) {
	var pending int
	var oldest float64
	if fn := c.n.backlog.Load(); fn != nil {
		pending, oldest = (*fn)()
	}
	ch <- prometheus.MustNewConstMetric(notifyPendingDesc, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(notifyOldestDesc, prometheus.GaugeValue, oldest)
}
