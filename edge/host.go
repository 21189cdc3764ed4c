package edge

import (
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// Hosts is the allow-list of Host headers a listener answers, against DNS
// rebinding: a web page on evil.example whose name is made to resolve to
// 127.0.0.1 can make the browser send requests to a loopback listener, but
// always with Host: evil.example. Allowed are loopback names (localhost),
// every IP literal (a rebinding needs a name, so an IP in Host is never
// one), the machine's host name, the hosts of the listen addresses, and
// the names of FLOW_ALLOWED_HOSTS; "*" there turns the check off. A request
// with another Host is answered 421 Misdirected Request.
type Hosts struct {
	any   bool
	names map[string]bool
}

// NewHosts returns the allow-list for listeners on listenAddrs (host:port,
// as for net.Listen) plus extra names (FLOW_ALLOWED_HOSTS; "*" allows
// every Host).
func NewHosts(listenAddrs []string, extra []string) *Hosts {
	h := &Hosts{names: map[string]bool{"localhost": true}}
	if name, err := os.Hostname(); err == nil && name != "" {
		h.names[normalHost(name)] = true
	}
	for _, addr := range listenAddrs {
		if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
			h.names[normalHost(host)] = true
		}
	}
	for _, name := range extra {
		name = strings.TrimSpace(name)
		switch {
		case name == "*":
			h.any = true
		case name != "":
			h.names[normalHost(name)] = true
		}
	}
	return h
}

func normalHost(host string) string {
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// Allows reports whether hostport (a request's Host, with or without a
// port) is on the list. An empty Host (HTTP/1.0, an HTTP/2 request without
// :authority) is allowed: browsers always send one.
func (h *Hosts) Allows(hostport string) bool {
	if h.any || hostport == "" {
		return true
	}
	host := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		host = hh
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if net.ParseIP(host) != nil {
		return true
	}
	host = normalHost(host)
	return h.names[host] || strings.HasSuffix(host, ".localhost")
}

// Wrap answers a request whose Host is not on the list with 421
// Misdirected Request, and passes the others to next.
func (h *Hosts) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.Allows(r.Host) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusMisdirectedRequest)
			_, _ = w.Write([]byte("host " + Truncate(r.Host, 256) + " is not served here (FLOW_ALLOWED_HOSTS)\n"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin refuses, with 403, a state-changing request (any method but
// GET, HEAD and OPTIONS) that a browser marks as coming from another site:
// Sec-Fetch-Site other than same-origin or none, or an Origin whose host is
// not the request's Host. Requests with neither header (curl, scripts) pass:
// only browsers are led into cross-site requests.
func sameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			http.Error(w, "cross-site request refused (Sec-Fetch-Site: "+Truncate(site, 64)+")", http.StatusForbidden)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || !strings.EqualFold(u.Host, r.Host) {
				http.Error(w, "cross-origin request refused (Origin: "+Truncate(origin, 256)+")", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
