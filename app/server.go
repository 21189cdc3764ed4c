package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/proto/gen/grpc/health/v1/healthv1connect"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/reconcile"
)

// flowService is the one v1.Flow handler. Each domain's handler implements its
// group of methods and is embedded here; methods nobody implements yet fall
// through to the generated Unimplemented handler (embedded one level deeper,
// so a domain's method always wins), which answers CodeUnimplemented naming
// the method.
type flowService struct {
	unimplemented
	*versionHandler
	*inventoryHandler
	*operationsHandler // operation rules and rack-rule associations
	*taskHandler       // rack operations and tasks
	*reconcileHandler  // ValidateComponents
	*scheduleHandler   // task schedules
}

// Domain handlers are embedded through aliases: every domain calls its type
// Handler, and two embedded fields may not share a name.
type (
	inventoryHandler  = inventory.Handler
	operationsHandler = operations.Handler
	taskHandler       = operations.TaskHandler
	reconcileHandler  = reconcile.Handler
	scheduleHandler   = operations.ScheduleHandler
)

type unimplemented struct {
	flowv1connect.UnimplementedFlowHandler
}

var _ flowv1connect.FlowHandler = (*flowService)(nil)

// muxOptions says what newMux mounts.
type muxOptions struct {
	devMode bool         // server reflection
	health  *health      // grpc.health.v1; a fresh SERVING one when nil
	riverUI http.Handler // mounted at /riverui/ when non-nil
}

// compressMinBytes is the smallest answer sent compressed to a client that
// accepts compression.
const compressMinBytes = 4 << 10

// reflectedServices are the services server reflection lists, sorted by
// name as upstream's gRPC server lists them: its own reflection services
// (v1 and v1alpha) beside v1.Flow, plus the health service Flow also
// serves. The contract's file answers by upstream's name, flow.proto.
var reflectedServices = []string{
	healthv1connect.HealthName,
	grpcreflect.ReflectV1ServiceName,
	grpcreflect.ReflectV1AlphaServiceName,
	flowv1connect.FlowName,
}

// newMux mounts v1.Flow (gRPC, gRPC-Web and Connect), gRPC health, River UI
// when given and, in dev mode, server reflection.
func newMux(logger *slog.Logger, svc flowv1connect.FlowHandler, opts muxOptions) *http.ServeMux {
	mux := http.NewServeMux()
	handlerOpts := []connect.HandlerOption{
		// Compressing a small answer costs more CPU than the bytes it saves
		// (a serial look-up spent ~0.1 ms gzipping ~1 KB); large pages still
		// go compressed to clients that ask.
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithInterceptors(newLogInterceptor(logger), newErrorInterceptor(logger)),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			logger.ErrorContext(ctx, "handler panic", "method", spec.Procedure, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
	}
	mux.Handle(flowv1connect.NewFlowHandler(svc, handlerOpts...))
	if opts.health == nil {
		opts.health = newHealth()
	}
	mux.Handle(healthv1connect.NewHealthHandler(opts.health))
	if opts.devMode {
		reflector := grpcreflect.NewStaticReflector(reflectedServices...)
		mux.Handle(grpcreflect.NewHandlerV1(reflector))
		mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	}
	if opts.riverUI != nil {
		mux.Handle("/riverui/", opts.riverUI)
	}
	return mux
}

// newHTTPServer serves handler on addr over HTTP/1.1 and cleartext HTTP/2
// (h2c), which gRPC clients need without TLS.
func newHTTPServer(addr string, handler http.Handler, logger *slog.Logger) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Addr:              addr,
		Handler:           handler,
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// newLogInterceptor writes one log line per call: method, code and duration.
func newLogInterceptor(logger *slog.Logger) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			res, err := next(ctx, req)
			code := "ok"
			level := slog.LevelInfo
			if err != nil {
				code = connect.CodeOf(err).String()
				if connect.CodeOf(err) == connect.CodeInternal || connect.CodeOf(err) == connect.CodeUnknown {
					level = slog.LevelError
				}
			}
			attrs := []slog.Attr{
				slog.String("method", req.Spec().Procedure),
				slog.String("protocol", req.Peer().Protocol),
				slog.String("code", code),
				slog.Duration("duration", time.Since(start)),
			}
			if err != nil && level == slog.LevelInfo {
				attrs = append(attrs, slog.String("error", err.Error()))
			}
			logger.LogAttrs(ctx, level, "rpc", attrs...)
			return res, err
		}
	}
}

// newErrorInterceptor turns any error that is neither a *connect.Error nor a
// context error into CodeInternal "internal error", logging the real one:
// SQL text and stack traces never reach clients.
func newErrorInterceptor(logger *slog.Logger) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			if err == nil {
				return res, nil
			}
			var ce *connect.Error
			switch {
			case errors.As(err, &ce):
				return nil, err
			case errors.Is(err, context.Canceled):
				return nil, connect.NewError(connect.CodeCanceled, errors.New("request canceled"))
			case errors.Is(err, context.DeadlineExceeded):
				return nil, connect.NewError(connect.CodeDeadlineExceeded, errors.New("deadline exceeded"))
			}
			logger.ErrorContext(ctx, "internal error", "method", req.Spec().Procedure, "error", err.Error())
			return nil, connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}
	}
}
