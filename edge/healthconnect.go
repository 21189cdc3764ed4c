package edge

import (
	"context"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Flow serves the standard gRPC health-checking protocol with grpc-go's
// generated messages (google.golang.org/grpc/health/grpc_health_v1) rather
// than a copy of its own: two copies of grpc.health.v1 cannot share one
// protobuf registry, and grpc-go's is linked in anyway by the OpenTelemetry
// OTLP exporter. This file is the Connect glue protoc-gen-connect-go would
// generate for it.

// Procedures of grpc.health.v1.Health.
const (
	healthCheckProcedure = "/grpc.health.v1.Health/Check"
	healthWatchProcedure = "/grpc.health.v1.Health/Watch"
)

// healthHandler is an implementation of grpc.health.v1.Health.
type healthHandler interface {
	// Check answers the current status; an unknown service is NOT_FOUND.
	Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error)
	// Watch streams the status, then every change until the call ends.
	Watch(context.Context, *healthpb.HealthCheckRequest, *connect.ServerStream[healthpb.HealthCheckResponse]) error
}

// newHealthHandler returns the path and HTTP handler of svc, for the
// Connect, gRPC and gRPC-Web protocols.
func newHealthHandler(svc healthHandler, opts ...connect.HandlerOption) (string, http.Handler) {
	methods := healthpb.File_grpc_health_v1_health_proto.Services().ByName("Health").Methods()
	check := connect.NewUnaryHandlerSimple(healthCheckProcedure, svc.Check,
		connect.WithSchema(methods.ByName("Check")), connect.WithHandlerOptions(opts...))
	watch := connect.NewServerStreamHandlerSimple(healthWatchProcedure, svc.Watch,
		connect.WithSchema(methods.ByName("Watch")), connect.WithHandlerOptions(opts...))
	return "/grpc.health.v1.Health/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case healthCheckProcedure:
			check.ServeHTTP(w, r)
		case healthWatchProcedure:
			watch.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// HealthClient calls grpc.health.v1.Health over Connect (tests, probes).
type HealthClient struct {
	check *connect.Client[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse]
	watch *connect.Client[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse]
}

// NewHealthClient returns a client of the health service at baseURL.
func NewHealthClient(httpClient connect.HTTPClient, baseURL string, opts ...connect.ClientOption) *HealthClient {
	baseURL = strings.TrimRight(baseURL, "/")
	methods := healthpb.File_grpc_health_v1_health_proto.Services().ByName("Health").Methods()
	return &HealthClient{
		check: connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](httpClient, baseURL+healthCheckProcedure,
			connect.WithSchema(methods.ByName("Check")), connect.WithClientOptions(opts...)),
		watch: connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](httpClient, baseURL+healthWatchProcedure,
			connect.WithSchema(methods.ByName("Watch")), connect.WithClientOptions(opts...)),
	}
}

// Check calls grpc.health.v1.Health/Check.
func (c *HealthClient) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	res, err := c.check.CallUnary(ctx, connect.NewRequest(req))
	if res != nil {
		return res.Msg, err
	}
	return nil, err
}

// Watch calls grpc.health.v1.Health/Watch.
func (c *HealthClient) Watch(ctx context.Context, req *healthpb.HealthCheckRequest) (*connect.ServerStreamForClient[healthpb.HealthCheckResponse], error) {
	return c.watch.CallServerStream(ctx, connect.NewRequest(req))
}
