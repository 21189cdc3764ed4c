package telemetry

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// PowerBudgetUse is one feed's budget as the metric shows it: transitions
// in progress and the budget's limit.
type PowerBudgetUse struct {
	Feed         string
	InUse, Limit float64
}

// PowerMetrics are the power budget gauges (docs/operations.md "Feeds,
// loops and power budgets"), read at scrape time.
type PowerMetrics struct {
	read atomic.Pointer[func() ([]PowerBudgetUse, error)]
}

var powerBudgetDesc = prometheus.NewDesc("flow_power_budget_transitions",
	"Power transitions per feed with a power budget: kind=\"in_use\" in progress now, kind=\"limit\" the budget's max_transitions.", []string{"feed", "kind"}, nil)

func newPowerMetrics(reg *prometheus.Registry, names *[]string) *PowerMetrics {
	p := &PowerMetrics{}
	*names = append(*names, "flow_power_budget_transitions")
	reg.MustRegister(powerCollector{p})
	return p
}

// SetReader sets what the gauges read at scrape time (every configured
// feed's use and limit).
func (p *PowerMetrics) SetReader(fn func() ([]PowerBudgetUse, error)) {
	if p != nil {
		p.read.Store(&fn)
	}
}

type powerCollector struct{ p *PowerMetrics }

func (c powerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- powerBudgetDesc }

func (c powerCollector) Collect(ch chan<- prometheus.Metric) {
	fn := c.p.read.Load()
	if fn == nil {
		return
	}
	uses, err := (*fn)()
	if err != nil {
		return
	}
	for _, u := range uses {
		ch <- prometheus.MustNewConstMetric(powerBudgetDesc, prometheus.GaugeValue, u.InUse, u.Feed, "in_use")
		ch <- prometheus.MustNewConstMetric(powerBudgetDesc, prometheus.GaugeValue, u.Limit, u.Feed, "limit")
	}
}
