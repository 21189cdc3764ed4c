// Package telemetry holds Flow's Prometheus metrics, its OpenTelemetry
// tracer setup and the Connect interceptors that measure RPCs and backend
// calls. It knows no domain: app feeds it from the engine's and the task
// manager's observers (docs/observability.md lists every metric).
package telemetry

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Buckets of Flow's latency histograms, in seconds.
var (
	// callBuckets fit RPCs, backend calls and checkpoints: 1 ms to 1 min.
	callBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// taskBuckets fit whole tasks and steps: 10 ms to 2 h.
	taskBuckets = []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200}
)

// Metrics are Flow's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	Registry *prometheus.Registry

	TasksSubmitted   *prometheus.CounterVec   // operation
	TasksEnded       *prometheus.CounterVec   // operation, status
	TaskStartLatency *prometheus.HistogramVec // operation
	TaskDuration     *prometheus.HistogramVec // operation, status

	StepsEnded      *prometheus.CounterVec   // action, outcome
	StepDuration    *prometheus.HistogramVec // action
	StepCalls       *prometheus.HistogramVec // action
	Calls           *prometheus.CounterVec   // action, outcome
	CallDuration    *prometheus.HistogramVec // action
	CheckpointTime  prometheus.Observer
	CheckpointSize  prometheus.Observer
	CheckpointFails prometheus.Counter
	JobWait         *prometheus.HistogramVec // kind
	JobRun          *prometheus.HistogramVec // kind

	BackendCalls    *prometheus.CounterVec   // backend, method, code
	BackendDuration *prometheus.HistogramVec // backend, method

	RPCs        *prometheus.CounterVec   // method, code
	RPCDuration *prometheus.HistogramVec // method

	Leak   *LeakMetrics   // telemetry/leak.go
	Notify *NotifyMetrics // telemetry/notify.go
	Power  *PowerMetrics  // telemetry/power.go
	jobMetrics
	autoMetrics

	names []string
}

// NewMetrics returns Flow's metrics registered in a new registry, with the
// Go runtime's and the process's own collectors.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{Registry: reg}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		m.names = append(m.names, name)
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		m.names = append(m.names, name)
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		reg.MustRegister(h)
		return h
	}
	m.TasksSubmitted = counter("flow_tasks_submitted_total", "Tasks written (pending or waiting), by operation.", "operation")
	m.TasksEnded = counter("flow_tasks_ended_total", "Tasks that ended, by operation and final status (completed, failed, terminated).", "operation", "status")
	m.TaskStartLatency = histogram("flow_task_start_latency_seconds", "Time from a task's submission to its first backend call, by operation.", taskBuckets, "operation")
	m.TaskDuration = histogram("flow_task_duration_seconds", "Time from a task's submission to its end, by operation and final status.", taskBuckets, "operation", "status")
	m.StepsEnded = counter("flow_engine_steps_ended_total", "Engine steps that ended, by action and outcome (completed, failed, cancelled).", "action", "outcome")
	m.StepDuration = histogram("flow_engine_step_duration_seconds", "Time from a step's start (its stage's) to its checkpoint, by action.", taskBuckets, "action")
	m.StepCalls = histogram("flow_engine_step_attempts", "Calls the last batch of an ended step took (1 = no retry), by action.", []float64{1, 2, 3, 5, 10}, "action")
	m.Calls = counter("flow_engine_calls_total", "Action calls, by action and outcome (ok, error).", "action", "outcome")
	m.CallDuration = histogram("flow_engine_call_duration_seconds", "Duration of one action call, by action.", callBuckets, "action")
	m.CheckpointTime = histogram("flow_engine_checkpoint_duration_seconds", "Duration of one checkpoint transaction (it may commit several steps).", callBuckets).WithLabelValues()
	m.CheckpointSize = histogram("flow_engine_checkpoint_steps", "Steps committed by one checkpoint transaction (group commit).", []float64{1, 2, 5, 10, 20, 50, 100}).WithLabelValues()
	m.CheckpointFails = counter("flow_engine_checkpoint_errors_total", "Checkpoint transactions that failed (their steps retry).").WithLabelValues()
	m.JobWait = histogram("flow_river_job_wait_seconds", "Time a River job waited between becoming available and starting, by kind.", callBuckets, "kind")
	m.JobRun = histogram("flow_river_job_run_seconds", "Time River spent working a job, by kind.", taskBuckets, "kind")
	m.BackendCalls = counter("flow_backend_calls_total", "Calls to the hardware backends, by backend (nico, psm), method and gRPC code.", "backend", "method", "code")
	m.BackendDuration = histogram("flow_backend_call_duration_seconds", "Duration of backend calls, by backend and method.", callBuckets, "backend", "method")
	m.RPCs = counter("flow_rpc_requests_total", "RPCs served on the API port, by procedure and gRPC code.", "method", "code")
	m.RPCDuration = histogram("flow_rpc_duration_seconds", "Duration of RPCs served, by procedure.", callBuckets, "method")
	m.Leak = newLeakMetrics(counter, histogram)
	m.Notify = newNotifyMetrics(reg, &m.names, counter)
	m.Power = newPowerMetrics(reg, &m.names)
	m.addJobMetrics()
	m.addAutoMetrics()
	return m
}

// Names returns the names of Flow's own metrics in m (not the Go runtime's
// or the process's).
func (m *Metrics) Names() []string {
	return append([]string(nil), m.names...)
}

// Register adds c (a collector that reads state at scrape time: the DB
// pool, queue depths) to m's registry.
func (m *Metrics) Register(c prometheus.Collector) {
	if m != nil {
		m.Registry.MustRegister(c)
	}
}

// Code returns the gRPC code name of err ("ok" for nil), as the metrics
// label it: "ok", "unavailable", "deadline_exceeded"...
func Code(err error) string {
	if err == nil {
		return "ok"
	}
	if errors.Is(err, context.Canceled) {
		return connect.CodeCanceled.String()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.CodeDeadlineExceeded.String()
	}
	return connect.CodeOf(err).String()
}

// BackendInterceptor returns a Connect client interceptor that counts and
// times each unary call to backend (nico or psm) by method and code.
func (m *Metrics) BackendInterceptor(backend string) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			began := time.Now()
			res, err := next(ctx, req)
			if m != nil {
				method := procedureMethod(req.Spec().Procedure)
				m.BackendCalls.WithLabelValues(backend, method, Code(err)).Inc()
				m.BackendDuration.WithLabelValues(backend, method).Observe(time.Since(began).Seconds())
			}
			return res, err
		}
	})
}

// RPCInterceptor returns a Connect handler interceptor that counts and
// times each unary RPC by procedure and code.
func (m *Metrics) RPCInterceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			began := time.Now()
			res, err := next(ctx, req)
			if m != nil {
				method := req.Spec().Procedure
				m.RPCs.WithLabelValues(method, Code(err)).Inc()
				m.RPCDuration.WithLabelValues(method).Observe(time.Since(began).Seconds())
			}
			return res, err
		}
	})
}

// procedureMethod is the method name of a Connect procedure
// ("/forge.Forge/InvokeInstancePower" → "InvokeInstancePower").
func procedureMethod(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}
