package telemetry

import (
	"context"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Propagator carries trace context in W3C traceparent headers.
var Propagator = propagation.TraceContext{}

// TraceInterceptor returns a Connect interceptor that puts each unary call
// in a span named by its procedure, with the rpc.* attributes and the
// gRPC code: a server span continuing the caller's traceparent on a
// handler, a client span injecting it on a client. (otelconnect does this
// for Connect v2; Flow is on Connect v1.)
func TraceInterceptor(tp trace.TracerProvider) connect.Interceptor {
	tracer := tp.Tracer("github.com/nicoflow/flow/telemetry")
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			spec := req.Spec()
			service, method := splitProcedure(spec.Procedure)
			kind := trace.SpanKindClient
			if !spec.IsClient {
				kind = trace.SpanKindServer
				ctx = Propagator.Extract(ctx, propagation.HeaderCarrier(req.Header()))
			}
			ctx, span := tracer.Start(ctx, spec.Procedure[1:], trace.WithSpanKind(kind), trace.WithAttributes(
				attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", service), attribute.String("rpc.method", method)))
			defer span.End()
			if spec.IsClient {
				Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header()))
			}
			res, err := next(ctx, req)
			span.SetAttributes(attribute.String("rpc.grpc.status_code", Code(err)))
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
			return res, err
		}
	})
}

// splitProcedure splits "/pkg.Service/Method".
func splitProcedure(p string) (service, method string) {
	m := procedureMethod(p)
	s := p[:len(p)-len(m)]
	if len(s) > 1 {
		s = s[1 : len(s)-1]
	}
	return s, m
}
