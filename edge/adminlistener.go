package edge

import (
	"context"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"
)

// AdminOptions are what the admin listener serves.
type AdminOptions struct {
	RiverUI http.Handler                // nil: not mounted
	Metrics http.Handler                // nil: FLOW_METRICS=false
	Ready   func(context.Context) error // /readyz's check
	PProf   bool                        // FLOW_PPROF
}

// NewAdminMux is the admin listener's handler: the operator endpoints that
// must never share the API port's access. /metrics (Prometheus), /healthz
// (the process answers), /readyz (ready to work: database reachable,
// migrations current, River client started), River UI when given (it can
// pause queues and retry or delete jobs, with no authentication of its own)
// at /riverui/ (whose state-changing calls must come from its own origin),
// and Go's profiler at /debug/pprof/ with FLOW_PPROF=true.
func NewAdminMux(o AdminOptions) *http.ServeMux {
	mux := http.NewServeMux()
	body := "Flow admin listener\n  /healthz       liveness\n  /readyz        readiness (database, migrations, River)\n"
	if o.Metrics != nil {
		mux.Handle("GET /metrics", o.Metrics)
		body += "  /metrics       Prometheus metrics\n"
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if o.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			if err := o.Ready(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
				return
			}
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if o.RiverUI != nil {
		// Its state-changing calls only from its own pages: a page on
		// another site cannot pause queues through the operator's browser.
		mux.Handle("/riverui/", sameOrigin(o.RiverUI))
		body += "  /riverui/      River UI (job queue)\n"
	}
	if o.PProf {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		body += "  /debug/pprof/  Go profiler\n"
	}
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(body))
	})
	return mux
}

// NewAdminServer serves the admin mux over HTTP/1.1. A profile may take its
// seconds parameter (30 by default) to answer, so there is no write timeout.
func NewAdminServer(handler http.Handler) *http.Server {
	return &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
}

// IsLoopback reports whether addr (host:port, as for net.Listen) listens on
// loopback only: 127.0.0.0/8, ::1 or localhost. An empty host listens on
// every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
