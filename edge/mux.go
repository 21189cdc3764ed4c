package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// Options says what NewHandler mounts.
type Options struct {
	DevMode bool    // server reflection
	Health  *Health // grpc.health.v1; a fresh SERVING one when nil
	Policy  *Policy // FLOW_AUTHZ_POLICY; nil: every identity is admin
	// Interceptors run outermost on every call (tracing, metrics).
	Interceptors []connect.Interceptor
	// Limits bound each request (limits.go); every field must be set.
	Limits Limits
	// Unavailable returns why err means something the server depends on
	// (the database) is unavailable for now, in words fit for a client
	// (no host, no socket), or "" when it does not: such an error is
	// answered CodeUnavailable (HTTP 503, retryable) with that reason
	// instead of internal. Nil: none is.
	Unavailable func(err error) string
}

// compressMinBytes is the smallest answer sent compressed to a client that
// accepts compression.
const compressMinBytes = 4 << 10

// reflectedServices are the services server reflection lists, sorted by
// name as upstream's gRPC server lists them: its own reflection services
// (v1 and v1alpha) beside v1.Flow, plus the health service and Flow's own
// admin service (flow.admin.v1), which upstream does not have. The contract's file answers by upstream's name, flow.proto.
var reflectedServices = []string{
	adminv1connect.AdminServiceName,
	healthpb.Health_ServiceDesc.ServiceName,
	grpcreflect.ReflectV1ServiceName,
	grpcreflect.ReflectV1AlphaServiceName,
	flowv1connect.FlowName,
}

// NewHandler mounts v1.Flow (svc) and Flow's admin service (admin) for
// gRPC, gRPC-Web and Connect, gRPC health and, in dev mode, server
// reflection, behind the caller middleware, the request limits and the
// interceptors: opts.Interceptors, then the ignored-fields header and
// warning (ignoredfields.go), the rpc log line, the audit line,
// authorization (opts.Policy) and the internal-error guard, outermost
// first. River UI and pprof are never here: they live on the admin
// listener (adminlistener.go).
func NewHandler(logger *slog.Logger, svc flowv1connect.FlowHandler, admin adminv1connect.AdminServiceHandler, opts Options) http.Handler {
	mux := http.NewServeMux()
	lim := opts.Limits
	handlerOpts := []connect.HandlerOption{
		// Compressing a small answer costs more CPU than the bytes it saves
		// (a serial look-up spent ~0.1 ms gzipping ~1 KB); large pages still
		// go compressed to clients that ask.
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithInterceptors(opts.Interceptors...),
		connect.WithInterceptors(newIgnoredFieldsInterceptor(logger, ignoredFieldsLogEvery), newLogInterceptor(logger, slog.LevelInfo), newAuditInterceptor(logger), authorizer{policy: opts.Policy, logger: logger}, newErrorInterceptor(logger, opts.Unavailable)),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			logger.ErrorContext(ctx, "handler panic", "method", spec.Procedure, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
	}
	handlerOpts = append(handlerOpts, lim.handlerOptions()...)
	mux.Handle(flowv1connect.NewFlowHandler(svc, handlerOpts...))
	mux.Handle(adminv1connect.NewAdminServiceHandler(admin, handlerOpts...))
	if opts.Health == nil {
		opts.Health = NewHealth()
	}
	// Health checks and reflection are logged at debug: a load balancer's
	// probes would drown the rest.
	quiet := connect.WithInterceptors(newLogInterceptor(logger, slog.LevelDebug))
	mux.Handle(newHealthHandler(opts.Health, quiet))
	if opts.DevMode {
		reflector := grpcreflect.NewStaticReflector(reflectedServices...)
		mux.Handle(grpcreflect.NewHandlerV1(reflector, quiet))
		mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, quiet))
	}
	return withCaller(lim.limitBody(lim.limitInFlight(lim.limitListings(mux))))
}

// NewHTTPServer serves handler on addr over HTTP/1.1 and HTTP/2: over TLS
// with tlsConfig (serve with ServeTLS(ln, "", "")), or cleartext HTTP/2
// (h2c), which gRPC clients need without TLS, when tlsConfig is nil.
func NewHTTPServer(addr string, handler http.Handler, tlsConfig *tls.Config, logger *slog.Logger) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	if tlsConfig != nil {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Server{
		TLSConfig:         tlsConfig,
		Addr:              addr,
		Handler:           handler,
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// newLogInterceptor writes one log line per call at level (errors higher):
// method, identity, request ID, code and duration.
func newLogInterceptor(logger *slog.Logger, okLevel slog.Level) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			res, err := next(ctx, req)
			code := "ok"
			level := okLevel
			if err != nil {
				code = connect.CodeOf(err).String()
				if connect.CodeOf(err) == connect.CodeInternal || connect.CodeOf(err) == connect.CodeUnknown {
					level = slog.LevelError
				}
			}
			attrs := []slog.Attr{
				slog.String("method", req.Spec().Procedure),
				slog.String("identity", caller.Identity(ctx)),
				slog.String("request_id", caller.RequestID(ctx)),
				slog.String("protocol", req.Peer().Protocol),
				slog.String("code", code),
				slog.Duration("duration", time.Since(start)),
			}
			if err != nil && level < slog.LevelError {
				attrs = append(attrs, slog.String("error", Truncate(err.Error(), MaxLoggedError)))
			}
			logger.LogAttrs(ctx, level, "rpc", attrs...)
			return res, err
		}
	}
}

// newErrorInterceptor turns any error that is neither a *connect.Error nor a
// context error into CodeInternal "internal error", logging the real one:
// SQL text and stack traces never reach clients. An error unavailable
// names (the database unreachable, read-only, restarting; a timeout of the
// server's own while the call's deadline has not passed) is answered
// CodeUnavailable with its reason instead, internal or unknown
// *connect.Errors too: clients retry those.
func newErrorInterceptor(logger *slog.Logger, unavailable func(error) string) connect.UnaryInterceptorFunc {
	if unavailable == nil {
		unavailable = func(error) string { return "" }
	}
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			if err == nil {
				return res, nil
			}
			var ce *connect.Error
			switch {
			case errors.As(err, &ce):
				if code := ce.Code(); code == connect.CodeInternal || code == connect.CodeUnknown {
					if why := unavailable(ce.Unwrap()); why != "" {
						return nil, unavailableError(ctx, logger, req, err, why)
					}
				}
				return nil, boundedError(ce)
			case errors.Is(err, context.Canceled) && ctx.Err() != nil:
				return nil, connect.NewError(connect.CodeCanceled, errors.New("request canceled"))
			case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
				return nil, connect.NewError(connect.CodeDeadlineExceeded, errors.New("deadline exceeded"))
			}
			if why := unavailable(err); why != "" {
				return nil, unavailableError(ctx, logger, req, err, why)
			}
			switch {
			case errors.Is(err, context.Canceled):
				return nil, connect.NewError(connect.CodeCanceled, errors.New("request canceled"))
			case errors.Is(err, context.DeadlineExceeded):
				return nil, connect.NewError(connect.CodeDeadlineExceeded, errors.New("deadline exceeded"))
			}
			logger.ErrorContext(ctx, "internal error", "method", req.Spec().Procedure, "error", Truncate(err.Error(), MaxLoggedError))
			return nil, connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}
	}
}

// unavailableError is the answer to a call that failed because something
// the server depends on is unavailable for now (why). The real error is
// logged at debug only: the rpc line says unavailable and why, and the
// outage itself is logged where it is met (River, the engine).
func unavailableError(ctx context.Context, logger *slog.Logger, req connect.AnyRequest, err error, why string) error {
	logger.DebugContext(ctx, "call unavailable", "method", req.Spec().Procedure, "error", Truncate(err.Error(), MaxLoggedError))
	return connect.NewError(connect.CodeUnavailable, errors.New(why+"; retry"))
}
