package app

import (
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"
)

// newAdminMux is the admin listener's handler: the operator endpoints that
// must never share the API port's access, River UI (when given; it can
// pause queues and retry or delete jobs, with no authentication of its own)
// at /riverui/ and Go's profiler at /debug/pprof/. Metrics join it when
// they exist.
func newAdminMux(riverUI http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	if riverUI != nil {
		mux.Handle("/riverui/", riverUI)
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		body := "Flow admin listener\n  /debug/pprof/  Go profiler\n"
		if riverUI != nil {
			body += "  /riverui/      River UI (job queue)\n"
		}
		_, _ = w.Write([]byte(body))
	})
	return mux
}

// newAdminServer serves the admin mux over HTTP/1.1. A profile may take its
// seconds parameter (30 by default) to answer, so there is no write timeout.
func newAdminServer(handler http.Handler) *http.Server {
	return &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
}

// isLoopback reports whether addr (host:port, as for net.Listen) listens on
// loopback only: 127.0.0.0/8, ::1 or localhost. An empty host listens on
// every interface.
func isLoopback(addr string) bool {
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
