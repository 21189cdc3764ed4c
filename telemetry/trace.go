package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// NewTracerProvider returns a tracer provider for service "flow" with
// exporting option opt (sdktrace.WithBatcher for an exporter, WithSyncer in
// tests).
//
// OTLP export is not wired yet: the OTLP exporters bring in grpc-go's
// generated grpc.health.v1, which collides in the protobuf registry with
// Flow's own copy (proto/gen/grpc/health/v1); see docs/observability.md.
func NewTracerProvider(opt sdktrace.TracerProviderOption, version string) *sdktrace.TracerProvider {
	res := resource.NewSchemaless(attribute.String("service.name", "flow"), attribute.String("service.version", version))
	return sdktrace.NewTracerProvider(opt, sdktrace.WithResource(res))
}
