// Package console is the Flow console: the site, its floor, racks,
// firmware compliance, tasks, rollouts, schedules, event rules, leaks and
// inventory sync, served as
// HTML at /ui/ on the API port (docs/console.md).
//
// It is a client of the API in the same process: every action, and every
// read but the site-wide aggregates, is the API call itself, made through
// the API's own handler chain under the user's identity, so that roles,
// the rpc log line and the audit line apply exactly as to any client. The
// aggregates (the overview, the floor map, a rack's drift, open leaks, the
// tasks failed in the last day), the search and the resolution of a
// name in a URL to its ID are read-only SQL over the inventory, task and
// run tables, for viewers and up.
// Pages are Go templates embedded in the binary with one small hand-written
// script (progressive enhancement: every page and action works without it);
// live updates come from one shared change feed (feed.go) over server-sent
// events.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is where the console is served on the API port.
const Prefix = "/ui/"

// AuthProxy is an authenticating reverse proxy in front of the console
// (FLOW_CONSOLE_AUTH_PROXY_HEADER, FLOW_CONSOLE_AUTH_PROXY_ADDRESSES), the
// way Grafana's auth proxy works: a request from one of Trusted whose
// Header is set is the call of the user it names; from anywhere else the
// header is ignored.
type AuthProxy struct {
	Header  string
	Trusted []netip.Prefix
}

// ParseAuthProxy reads the two settings: header is the request header
// naming the user ("" turns the proxy off), addresses a comma-separated
// list of IP addresses or CIDR prefixes it is trusted from.
func ParseAuthProxy(header, addresses string) (AuthProxy, error) {
	header = strings.TrimSpace(header)
	addresses = strings.TrimSpace(addresses)
	if header == "" {
		if addresses != "" {
			return AuthProxy{}, errors.New("FLOW_CONSOLE_AUTH_PROXY_ADDRESSES is set but FLOW_CONSOLE_AUTH_PROXY_HEADER is not: name the header the proxy sets")
		}
		return AuthProxy{}, nil
	}
	if addresses == "" {
		return AuthProxy{}, errors.New("FLOW_CONSOLE_AUTH_PROXY_HEADER is set but FLOW_CONSOLE_AUTH_PROXY_ADDRESSES is not: the header is trusted only from the proxy's addresses")
	}
	p := AuthProxy{Header: http.CanonicalHeaderKey(header)}
	for _, a := range strings.Split(addresses, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if !strings.Contains(a, "/") {
			ip, err := netip.ParseAddr(a)
			if err != nil {
				return AuthProxy{}, fmt.Errorf("FLOW_CONSOLE_AUTH_PROXY_ADDRESSES: %q is neither an IP address nor a CIDR prefix", a)
			}
			p.Trusted = append(p.Trusted, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		pre, err := netip.ParsePrefix(a)
		if err != nil {
			return AuthProxy{}, fmt.Errorf("FLOW_CONSOLE_AUTH_PROXY_ADDRESSES: %q is neither an IP address nor a CIDR prefix", a)
		}
		p.Trusted = append(p.Trusted, pre.Masked())
	}
	return p, nil
}

// user returns the user r's proxy names, and whether r came through a
// trusted proxy that named one.
func (p AuthProxy) user(r *http.Request) (string, bool) {
	if p.Header == "" {
		return "", false
	}
	v := strings.TrimSpace(r.Header.Get(p.Header))
	if v == "" {
		return "", false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "", false
	}
	ip := ap.Addr().Unmap()
	for _, pre := range p.Trusted {
		if pre.Contains(ip) {
			return v, true
		}
	}
	return "", false
}

// Options says what the console serves and how it reaches the API.
type Options struct {
	// API is the API port's handler (edge.NewHandler), called in process.
	API http.Handler
	// Pool reads the site-wide aggregates.
	Pool *pgxpool.Pool
	// Policy is the API's (FLOW_AUTHZ_POLICY); nil: every identity admin.
	Policy    *edge.Policy
	AuthProxy AuthProxy
	Logger    *slog.Logger
	// PollInterval is how often the change feed looks for changes while
	// a page is open; 300 ms when 0.
	PollInterval time.Duration
	// Open says the API is cleartext and open (flow dev,
	// ALLOW_INSECURE_GRPC): every caller is "insecure"; the pages say so.
	Open bool
	// NoCoolingHold says FLOW_LEAK_COOLING_HOLD is off: a coolant loop's
	// open leak holds no work, and the rack page says none.
	NoCoolingHold bool
	// Jobs is River UI, built with JobsPrefix, served at /ui/jobs/ behind
	// the console's authentication (jobs.go); nil: River UI is off
	// (FLOW_RIVERUI_ENABLED=false).
	Jobs http.Handler
}

// Console is the console's HTTP handler.
type Console struct {
	opts   Options
	flow   flowv1connect.FlowClient
	admin  adminv1connect.AdminServiceClient
	pool   *pgxpool.Pool
	tmpl   map[string]*template.Template
	feed   *Feed
	mux    *http.ServeMux
	logger *slog.Logger
	cop    *http.CrossOriginProtection
	rc     racksCache
	parts  partCache
	// floorCells overrides floorCells (tests); 0: floorCells.
	floorCells int
}

// New returns the console. Close stops its change feed.
func New(opts Options) (*Console, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 300 * time.Millisecond
	}
	hc := &http.Client{Transport: inProcess{opts.API}}
	c := &Console{
		opts:   opts,
		flow:   flowv1connect.NewFlowLeanClient(hc, "http://flow.in-process"),
		admin:  adminv1connect.NewAdminServiceLeanClient(hc, "http://flow.in-process"),
		pool:   opts.Pool,
		logger: opts.Logger,
		feed:   NewFeed(opts.Pool, opts.PollInterval, opts.Logger),
		cop:    http.NewCrossOriginProtection(),
	}
	var err error
	if c.tmpl, err = parseTemplates(); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

// Close stops the change feed.
func (c *Console) Close() { c.feed.Close() }

// Feed is the console's change feed (tests and benchmarks watch it).
func (c *Console) Feed() *Feed { return c.feed }

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", cacheStatic(http.FileServerFS(static))))
	m.HandleFunc("GET /ui/{$}", c.sharedPage(overviewTopics, c.overview))
	m.HandleFunc("GET /ui/floor", c.sharedPage(floorTopics, c.floor))
	m.HandleFunc("GET /ui/power", c.sharedPage(powerTopics, c.power))
	m.HandleFunc("GET /ui/search", c.page(c.search))
	m.HandleFunc("GET /ui/components/{ref}", c.component)
	m.HandleFunc("GET /ui/racks/{id}", c.page(c.rack))
	m.HandleFunc("GET /ui/compliance", c.sharedPage(complianceTopics, c.compliance))
	m.HandleFunc("GET /ui/compliance/apply", c.page(c.applyPage))
	m.HandleFunc("POST /ui/compliance/apply", c.applyBaseline)
	m.HandleFunc("GET /ui/tasks", c.sharedPage(tasksTopics, c.tasks))
	m.HandleFunc("GET /ui/tasks/{id}", c.page(c.task))
	m.HandleFunc("GET /ui/rollouts", c.sharedPage(rolloutsTopics, c.rollouts))
	m.HandleFunc("GET /ui/rollouts/{id}", c.page(c.rollout))
	m.HandleFunc("GET /ui/rollouts/new", c.page(c.newRolloutPage))
	m.HandleFunc("POST /ui/rollouts/new", c.createRollout)
	m.HandleFunc("GET /ui/work/upgrade", c.page(c.upgradePage))
	m.HandleFunc("POST /ui/work/upgrade", c.work("upgrade"))
	m.HandleFunc("POST /ui/work/power", c.work("power"))
	m.HandleFunc("GET /ui/schedules", c.page(c.schedules))
	m.HandleFunc("GET /ui/windows", c.page(c.windows))
	m.HandleFunc("GET /ui/webhooks", c.page(c.webhooks))
	m.HandleFunc("GET /ui/approvals", c.page(c.approvals))
	m.HandleFunc("GET /ui/approvals/{id}", c.page(c.approval))
	m.HandleFunc("POST /ui/approvals/{id}/{op}", c.approvalAction)
	m.HandleFunc("GET /ui/events-rules", c.page(c.eventRules))
	m.HandleFunc("POST /ui/leaks/{id}/override", c.action(c.overrideLeak))
	m.HandleFunc("GET /ui/sync", c.page(c.sync))
	m.HandleFunc("GET /ui/live", c.live)
	m.HandleFunc(JobsPrefix+"/", c.jobs)
	m.HandleFunc("POST /ui/racks/{id}/power/{op}", c.action(c.rackPower))
	m.HandleFunc("POST /ui/tasks/{id}/cancel", c.action(c.cancelTask))
	m.HandleFunc("POST /ui/tasks/{id}/retry", c.action(c.retryFailed))
	m.HandleFunc("POST /ui/rollouts/{id}/{op}", c.action(c.rolloutAction))
	m.HandleFunc("POST /ui/schedules/{id}/{op}", c.action(c.scheduleAction))
	m.HandleFunc("POST /ui/sync/run", c.action(c.runSync))
	c.mux = m
}

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		h.ServeHTTP(w, r)
	})
}

// csp is the pages' Content-Security-Policy: nothing but the console's
// own script, styles and the live feed; no inline script or style, no
// framing, forms post only to the console.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// ServeHTTP serves the console: security headers on every answer, the
// user's identity and role in the request.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.URL.Path == "/ui" {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/ui/static/") {
		c.mux.ServeHTTP(w, r)
		return
	}
	u := c.userOf(r)
	if u.Identity == "" {
		c.fail(w, r, u, http.StatusForbidden, errors.New("the console needs a client certificate that names an identity (a SPIFFE ID or a CN), or a trusted authenticating proxy"))
		return
	}
	if u.Role == "none" {
		c.fail(w, r, u, http.StatusForbidden, fmt.Errorf("identity %q has no role: the authorization policy (FLOW_AUTHZ_POLICY) gives it none", u.Identity))
		return
	}
	c.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
}

// User is who is looking, and what the API lets them do.
type User struct {
	Identity string
	Role     string // viewer, operator, admin or none
	ViaProxy bool
}

// Operator reports whether u may act on racks, tasks, rollouts and schedules.
func (u User) Operator() bool { return u.Role == "operator" || u.Role == "admin" }

type userKey struct{}

func (c *Console) userOf(r *http.Request) User {
	u := User{}
	if name, ok := c.opts.AuthProxy.user(r); ok {
		u.Identity, u.ViaProxy = name, true
	} else {
		u.Identity = edge.RequestIdentity(r)
	}
	u.Role = c.opts.Policy.RoleName(u.Identity)
	return u
}

func userFrom(ctx context.Context) User {
	u, _ := ctx.Value(userKey{}).(User)
	return u
}

// apiCtx is ctx for an API call made for the request's user.
func apiCtx(r *http.Request) context.Context {
	return edge.WithInProcessCaller(r.Context(), userFrom(r.Context()).Identity)
}

// csrfCookie holds the double-submit token every form carries.
const csrfCookie = "flow_console_csrf"

// csrfToken returns the request's token, setting a fresh cookie when it
// has none.
func csrfToken(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) == 43 {
		return ck.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	tok := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return tok
}

// errCrossSite is what a state-changing request from another site gets.
var errCrossSite = errors.New("cross-site request refused: the form must come from the console itself (Sec-Fetch-Site, Origin and the form token are checked)")

// checkSameSite refuses a state-changing request another site could have
// made: the browser's Sec-Fetch-Site and Origin (http.CrossOriginProtection)
// and the double-submit token (cookie and form field must match).
func (c *Console) checkSameSite(r *http.Request) error {
	if err := c.cop.Check(r); err != nil {
		return errCrossSite
	}
	ck, err := r.Cookie(csrfCookie)
	if err != nil || ck.Value == "" {
		return errCrossSite
	}
	if subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostFormValue("csrf"))) != 1 {
		return errCrossSite
	}
	return nil
}

// statusOf maps an API error, or a page's own (a name that matches
// nothing, a reference that names nothing), to the console's HTTP status.
func statusOf(err error) int {
	var pe *pageError
	if errors.As(err, &pe) {
		return pe.status
	}
	switch connect.CodeOf(err) {
	case connect.CodePermissionDenied, connect.CodeUnauthenticated:
		return http.StatusForbidden
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeAlreadyExists, connect.CodeOutOfRange:
		return http.StatusConflict
	case connect.CodeResourceExhausted, connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
