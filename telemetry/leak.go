package telemetry

import "github.com/prometheus/client_golang/prometheus"

// leakBuckets fit a leak response: 100 ms to 30 min (a response should
// power off within seconds; completion waits on the hardware's verify).
var leakBuckets = []float64{.1, .25, .5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300, 600, 1800}

// LeakMetrics are the leak-safety metrics (docs/event-rules.md).
type LeakMetrics struct {
	// Response times a leak response from the leak's first observation,
	// by phase ("first_power_off": its first power-off call; "completed":
	// its end) and outcome (first_power_off: "called"; completed: the
	// task's final status).
	Response *prometheus.HistogramVec // phase, outcome
	// UnknownDevices counts leak occurrences on devices Flow does not
	// hold, by kind (compute, nvswitch) and what was done (power_off_sent,
	// power_off_failed, recorded).
	UnknownDevices *prometheus.CounterVec // kind, outcome
}

func newLeakMetrics(counter func(name, help string, labels ...string) *prometheus.CounterVec,
	histogram func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec) *LeakMetrics {
	return &LeakMetrics{
		Response: histogram("flow_leak_response_seconds",
			"Time from a leak's first observation to its response's first power-off call (phase first_power_off) and to the response's end (phase completed), by outcome.",
			leakBuckets, "phase", "outcome"),
		UnknownDevices: counter("flow_leak_unknown_device_total",
			"Leak occurrences on devices Flow does not hold, by kind and outcome of the forced power-off through Core.", "kind", "outcome"),
	}
}
