package app

import (
	"log/slog"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/nicoflow/flow/console"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule"
	"github.com/nicoflow/flow/operations/rollout"
	"github.com/nicoflow/flow/operations/schedule"
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
	*rolloutHandler    // operation runs
	*reconcileHandler  // ValidateComponents
	*scheduleHandler   // task schedules
	*eventRuleHandler  // event rules and bindings
}

// Domain handlers are embedded through aliases: every domain calls its type
// Handler, and two embedded fields may not share a name.
type (
	inventoryHandler  = inventory.Handler
	operationsHandler = operations.Handler
	taskHandler       = operations.TaskHandler
	rolloutHandler    = rollout.Handler
	reconcileHandler  = reconcile.Handler
	scheduleHandler   = schedule.Handler
	eventRuleHandler  = eventrule.Handler
)

type unimplemented struct {
	flowv1connect.UnimplementedFlowHandler
}

var _ flowv1connect.FlowHandler = (*flowService)(nil)

// muxOptions says what newMux mounts.
type muxOptions struct {
	devMode bool         // server reflection
	health  *edge.Health // grpc.health.v1; a fresh SERVING one when nil
	policy  *edge.Policy // FLOW_AUTHZ_POLICY; nil: every identity is admin
	// admin is Flow's admin service; a fresh all-Unimplemented one when nil.
	admin *adminService
	// interceptors run outermost on every call (tracing, metrics).
	interceptors []connect.Interceptor
	// limits bound each request (edge.Limits); DefaultLimits when zero.
	limits edge.Limits
}

// newMux composes the API port's handler: svc and the admin service behind
// the edge (edge.NewHandler: limits, identity, roles, audit, health).
func newMux(logger *slog.Logger, svc flowv1connect.FlowHandler, opts muxOptions) http.Handler {
	if opts.admin == nil {
		opts.admin = &adminService{}
	}
	return edge.NewHandler(logger, svc, opts.admin, edge.Options{
		DevMode:      opts.devMode,
		Health:       opts.health,
		Policy:       opts.policy,
		Interceptors: opts.interceptors,
		Limits:       limitsOrDefault(opts.limits),
		// A call that failed on an unreachable or read-only database
		// answers unavailable (retryable), not internal.
		Unavailable: db.UnavailableReason,
	})
}

// withConsole serves the console at /ui/ beside the API on one port.
func withConsole(api http.Handler, c http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, console.Prefix) {
			c.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}
