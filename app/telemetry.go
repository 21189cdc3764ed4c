package app

import (
	"context"
	"log/slog"
	"net/http"
	"slices"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/notify"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule"
	"github.com/nicoflow/flow/operations/rollout"
	"github.com/nicoflow/flow/operations/schedule"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/psm"
	"github.com/nicoflow/flow/reconcile"
	"github.com/nicoflow/flow/telemetry"
)

// telemetrySetup is the server's metrics and tracing: either may be off
// (FLOW_METRICS=false; no OTLP endpoint), and every method then returns
// what costs nothing.
type telemetrySetup struct {
	metrics *telemetry.Metrics       // nil: off
	tracer  *sdktrace.TracerProvider // nil: off
}

// newTelemetry builds the metrics (FLOW_METRICS) and the tracer provider:
// tp when given (tests), else OTLP when cfg.Tracing (the exporter reads the
// standard OTEL_EXPORTER_OTLP_* variables from the environment).
func newTelemetry(ctx context.Context, cfg Config, tp *sdktrace.TracerProvider) (*telemetrySetup, error) {
	t := &telemetrySetup{tracer: tp}
	if cfg.Metrics {
		t.metrics = telemetry.NewMetrics()
	}
	if t.tracer == nil && cfg.Tracing {
		var err error
		if t.tracer, err = telemetry.NewOTLPTracerProvider(ctx, cfg.otelEnv, ReadBuild().Version); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// shutdown flushes the spans not yet exported.
func (t *telemetrySetup) shutdown(ctx context.Context) {
	if t.tracer != nil {
		_ = t.tracer.Shutdown(ctx)
	}
}

// tracerFor returns the named tracer, or a no-op one when tracing is off.
func (t *telemetrySetup) tracerFor(name string) trace.Tracer {
	if t.tracer == nil {
		return noop.NewTracerProvider().Tracer(name)
	}
	return t.tracer.Tracer(name)
}

// rpcInterceptors are the API's outermost interceptors: a span per RPC,
// then its metrics.
func (t *telemetrySetup) rpcInterceptors() []connect.Interceptor { return t.interceptors("") }

// backendInterceptors are the interceptors of backend's client: a span
// per call, then its metrics.
func (t *telemetrySetup) backendInterceptors(backend string) []connect.Interceptor {
	return t.interceptors(backend)
}

func (t *telemetrySetup) interceptors(backend string) []connect.Interceptor {
	var out []connect.Interceptor
	if t.tracer != nil {
		out = append(out, telemetry.TraceInterceptor(t.tracer))
	}
	if t.metrics != nil {
		if backend == "" {
			out = append(out, t.metrics.RPCInterceptor())
		} else {
			out = append(out, t.metrics.BackendInterceptor(backend))
		}
	}
	return out
}

// riverMiddleware traces River jobs (otelriver): a span per job worked,
// linked to the span that inserted it through the job's metadata.
func (t *telemetrySetup) riverMiddleware() []rivertype.Middleware {
	if t.tracer == nil {
		return nil
	}
	return []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		TracerProvider: t.tracer, MeterProvider: metricnoop.NewMeterProvider(),
		EnableTracePropagation: true, EnableWorkSpanJobKindSuffix: true,
	})}
}

// riverLogger is River's own logger: logger's handler at cfg's River level.
func (t *telemetrySetup) riverLogger(logger *slog.Logger, cfg Config) *slog.Logger {
	return slog.New(levelHandler{Handler: logger.Handler(), level: cfg.riverLogLevel()})
}

// metricsHandler serves /metrics, or nil when metrics are off.
func (t *telemetrySetup) metricsHandler() http.Handler {
	if t.metrics == nil {
		return nil
	}
	return promhttp.HandlerFor(t.metrics.Registry, promhttp.HandlerOpts{})
}

// levelHandler drops records below level before the wrapped handler.
type levelHandler struct {
	slog.Handler
	level slog.Level
}

func (h levelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

func (h levelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return levelHandler{Handler: h.Handler.WithAttrs(attrs), level: h.level}
}

func (h levelHandler) WithGroup(name string) slog.Handler {
	return levelHandler{Handler: h.Handler.WithGroup(name), level: h.level}
}

// knownLabels are the label values this server knows at start, which
// Metrics.Init exports at zero (docs/observability.md: every family is on
// the first scrape).
func knownLabels(e *engine.Engine, system *systemJobs) telemetry.Known {
	k := telemetry.Known{
		Actions: e.ActionKinds(),
		JobKinds: []string{
			engine.RunStepArgs{}.Kind(), engine.RunTimeoutArgs{}.Kind(), queueExpiryArgs{}.Kind(),
			eventrule.ExecutionArgs{}.Kind(), rollout.WakeArgs{}.Kind(), schedule.FireArgs{}.Kind(),
			notify.DeliverArgs{}.Kind(), notify.AlertArgs{}.Kind(),
		},
		SystemJobs: slices.Clone(system.order),
		Backends:   map[string][]string{"nico": nico.Methods(), "psm": psm.Methods()},
		SyncParts: []string{
			reconcile.PartCompute, reconcile.PartNVSwitch, reconcile.PartPowerShelf, reconcile.PartTopology, reconcile.PartRackHealth,
			reconcile.PartExpectedRacks, reconcile.PartExpectedCompute, reconcile.PartExpectedNVSwitch, reconcile.PartExpectedPowerShelf,
		},
		Prune: slices.Clone(pruneTables),
	}
	for _, t := range operations.OperationTypes() {
		for _, c := range t.Codes() {
			k.Operations = append(k.Operations, string(c))
		}
	}
	for _, fd := range []protoreflect.FileDescriptor{flowv1.File_flow_proto, adminv1.File_flow_admin_v1_admin_proto} {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				k.Procedures = append(k.Procedures, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
	}
	return k
}
