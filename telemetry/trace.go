package telemetry

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TracingEnabled reports whether getenv configures an OTLP trace exporter:
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set
// and OTEL_TRACES_EXPORTER is not "none".
func TracingEnabled(getenv func(string) string) bool {
	if getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// NewOTLPTracerProvider returns a tracer provider exporting over OTLP as
// the standard variables in getenv say: the endpoint
// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, else OTEL_EXPORTER_OTLP_ENDPOINT
// plus /v1/traces for HTTP) and the protocol (HTTP/protobuf, or gRPC when
// OTEL_EXPORTER_OTLP_PROTOCOL or its _TRACES_ form is "grpc"); the
// exporters read the other OTEL_EXPORTER_OTLP_* variables (headers,
// timeout, certificates) from the process environment themselves. Spans are
// batched; call Shutdown to flush them.
func NewOTLPTracerProvider(ctx context.Context, getenv func(string) string, version string) (*sdktrace.TracerProvider, error) {
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	traces, base := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), strings.TrimRight(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "/")
	var exp sdktrace.SpanExporter
	var err error
	switch strings.ToLower(proto) {
	case "grpc":
		var opts []otlptracegrpc.Option
		if url := cmp.Or(traces, base); url != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(url))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	case "", "http/protobuf":
		var opts []otlptracehttp.Option
		if traces != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(traces))
		} else if base != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(base+"/v1/traces"))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	return NewTracerProvider(sdktrace.WithBatcher(exp), version), nil
}

// NewTracerProvider returns a tracer provider for service "flow" with
// exporting option opt (sdktrace.WithBatcher for an exporter, WithSyncer in
// tests).
func NewTracerProvider(opt sdktrace.TracerProviderOption, version string) *sdktrace.TracerProvider {
	res := resource.NewSchemaless(attribute.String("service.name", "flow"), attribute.String("service.version", version))
	return sdktrace.NewTracerProvider(opt, sdktrace.WithResource(res))
}
