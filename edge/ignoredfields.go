package edge

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/nicoflow/flow/caller"
)

// IgnoredFieldsHeader is the response header of a Connect JSON unary call
// whose request carried fields the method does not have, which Flow
// ignored as upstream does (unless strict JSON refused them): their paths
// in the request document, comma-separated ("forcedd",
// "target_spec.component_types, forcedd"), at most MaxIgnoredFields of
// them and then "...". A path with a character other than printable ASCII,
// a space, a comma or a quote is sent quoted ("\"a,b\""). It is set on
// success and error answers alike, and never on gRPC, gRPC-Web or binary
// Connect calls.
const IgnoredFieldsHeader = "Flow-Ignored-Fields"

// ignoredFieldsLogEvery is how often at most the server logs, per method,
// that a request's unknown fields were ignored.
const ignoredFieldsLogEvery = time.Minute

// newIgnoredFieldsInterceptor names, in IgnoredFieldsHeader, the unknown
// fields jsonCodec found in a Connect JSON request, and logs a warning
// naming the method and the paths (never the values: they may be secrets)
// at most once per method every interval. It leaves the paths on the
// request for newLimitInterceptor, which removes them. It runs outermost
// among edge's interceptors, so that an error answer from any of them
// carries the header too.
func newIgnoredFieldsInterceptor(logger *slog.Logger, every time.Duration) connect.UnaryInterceptorFunc {
	warn := &ignoredFieldsLog{logger: logger, every: every, last: map[string]time.Time{}, quiet: map[string]int{}}
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Peer().Protocol != connect.ProtocolConnect {
				return next(ctx, req)
			}
			m, ok := req.Any().(proto.Message)
			if !ok {
				return next(ctx, req)
			}
			paths := unknownJSONFields(m)
			if len(paths) == 0 {
				return next(ctx, req)
			}
			// The call info's headers reach the client on success and on
			// error, unlike a response's own.
			if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
				info.ResponseHeader().Set(IgnoredFieldsHeader, ignoredFieldsValue(paths))
			}
			warn.log(ctx, req.Spec().Procedure, paths)
			return next(ctx, req)
		}
	}
}

// ignoredFieldsValue renders paths as IgnoredFieldsHeader's value.
func ignoredFieldsValue(paths []string) string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = p
		if strings.IndexFunc(p, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == ',' || r == '"' }) >= 0 {
			out[i] = strconv.QuoteToASCII(p)
		}
	}
	return strings.Join(out, ", ")
}

// ignoredFieldsLog writes the warning line of newIgnoredFieldsInterceptor,
// at most one per method every interval. Its maps hold one entry per
// method the server serves, no more: only those reach an interceptor.
type ignoredFieldsLog struct {
	logger *slog.Logger
	every  time.Duration

	mu    sync.Mutex
	last  map[string]time.Time // method → when its last line was written
	quiet map[string]int       // method → calls with unknown fields since, not logged
}

func (l *ignoredFieldsLog) log(ctx context.Context, procedure string, paths []string) {
	now := time.Now()
	l.mu.Lock()
	if last, ok := l.last[procedure]; ok && now.Sub(last) < l.every {
		l.quiet[procedure]++
		l.mu.Unlock()
		return
	}
	l.last[procedure] = now
	quiet := l.quiet[procedure]
	delete(l.quiet, procedure)
	l.mu.Unlock()
	l.logger.LogAttrs(ctx, slog.LevelWarn, "unknown json fields ignored",
		slog.String("method", procedure),
		slog.Any("fields", paths),
		slog.String("identity", caller.Identity(ctx)),
		slog.String("request_id", caller.RequestID(ctx)),
		slog.Int("calls_not_logged", quiet),
		slog.Duration("log_every", l.every),
	)
}
