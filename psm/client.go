package psm

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	psmv1 "github.com/nicoflow/flow/proto/gen/psm/v1"
	"github.com/nicoflow/flow/proto/gen/psm/v1/psmv1connect"
)

// DefaultTimeout is the per-call deadline when none is configured
// (upstream's PSM provider default).
const DefaultTimeout = 30 * time.Second

// Client calls PSM over gRPC. A Client built from an empty URL is valid but
// unconfigured: every call fails with ErrNotConfigured. It is safe for
// concurrent use.
type Client struct {
	rpc     psmv1connect.PowershelfManagerClient
	timeout time.Duration
}

// Option configures a Client.
type Option func(*options)

type options struct {
	timeout time.Duration
	tls     *tls.Config
	http    connect.HTTPClient
	// interceptors wrap every call (metrics, tracing).
	interceptors []connect.Interceptor
}

// WithTimeout sets the deadline of every call (default DefaultTimeout).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithTLS makes the client use TLS (mTLS when cfg carries a client
// certificate).
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithInterceptors wraps every call of the client in interceptors, the
// first outermost (metrics and tracing of backend calls).
func WithInterceptors(interceptors ...connect.Interceptor) Option {
	return func(o *options) { o.interceptors = append(o.interceptors, interceptors...) }
}

// WithHTTPClient replaces the HTTP client (tests).
func WithHTTPClient(c connect.HTTPClient) Option { return func(o *options) { o.http = c } }

// NewClient returns a client of the PSM at url ("host:port",
// "http://host:port" or "https://host:port"); an empty url gives an
// unconfigured client.
func NewClient(url string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	c := &Client{timeout: cmp.Or(o.timeout, DefaultTimeout)}
	if url == "" {
		return c, nil
	}
	base, std, err := httpClient(url, o.tls)
	if err != nil {
		return nil, fmt.Errorf("PSM URL %q: %w", url, err)
	}
	var hc connect.HTTPClient = std
	if o.http != nil {
		hc = o.http
	}
	c.rpc = psmv1connect.NewPowershelfManagerLeanClient(hc, base, connect.WithGRPC(), connect.WithInterceptors(o.interceptors...))
	return c, nil
}

func httpClient(url string, cfg *tls.Config) (string, *http.Client, error) {
	base := url
	if !strings.Contains(base, "://") {
		if cfg != nil {
			base = "https://" + base
		} else {
			base = "http://" + base
		}
	}
	var p http.Protocols
	tr := &http.Transport{Protocols: &p, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4}
	switch {
	case strings.HasPrefix(base, "https://"):
		p.SetHTTP2(true)
		tr.TLSClientConfig = cmp.Or(cfg, &tls.Config{MinVersion: tls.VersionTLS12})
	case strings.HasPrefix(base, "http://"):
		if cfg != nil {
			return "", nil, errors.New("TLS configured but the URL says http://")
		}
		p.SetUnencryptedHTTP2(true)
	default:
		return "", nil, fmt.Errorf("unsupported URL scheme in %q", url)
	}
	return strings.TrimSuffix(base, "/"), &http.Client{Transport: tr}, nil
}

// Configured reports whether the client has a PSM to call.
func (c *Client) Configured() bool { return c.rpc != nil }

func (c *Client) ready(method string) error {
	if c.rpc == nil {
		return &Error{Method: method, Class: ErrNotConfigured}
	}
	return nil
}

func classify(ctx context.Context, method string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	e := &Error{Method: method, Err: err, Msg: err.Error()}
	var ce *connect.Error
	if errors.As(err, &ce) {
		e.Msg = ce.Message()
	}
	switch code := connect.CodeOf(err); {
	case undecodable(err):
		// PSM said OK but its reply does not decode (connect reports that
		// as invalid_argument, raised here, not by PSM): retried, never
		// read as success.
		e.Class, e.Msg = ErrUnreachable, "reply does not decode: "+e.Msg
	case code == connect.CodeNotFound:
		e.Class = ErrNotFound
	case code == connect.CodeInvalidArgument, code == connect.CodeFailedPrecondition, code == connect.CodeAlreadyExists,
		code == connect.CodePermissionDenied, code == connect.CodeUnauthenticated, code == connect.CodeUnimplemented, code == connect.CodeOutOfRange:
		e.Class = ErrRejected
	default:
		e.Class = ErrUnreachable
	}
	return e
}

// undecodable reports whether err is the client's own failure to decode a
// reply: an invalid_argument error that did not come over the wire.
func undecodable(err error) bool {
	var ce *connect.Error
	return errors.As(err, &ce) && ce.Code() == connect.CodeInvalidArgument && !connect.IsWireError(ce)
}

func itemErr(method, mac string, st psmv1.StatusCode, msg string) error {
	if st == psmv1.StatusCode_SUCCESS {
		return nil
	}
	e := &Error{Method: method, Device: mac, Msg: cmp.Or(msg, st.String())}
	switch {
	case st == psmv1.StatusCode_INVALID_ARGUMENT && (strings.Contains(strings.ToLower(msg), "not found") || strings.Contains(strings.ToLower(msg), "unknown")):
		e.Class = ErrNotFound
	case st == psmv1.StatusCode_INVALID_ARGUMENT:
		e.Class = ErrRejected
	default:
		e.Class = ErrUnreachable
	}
	return e
}

var vendors = map[string]psmv1.PMCVendor{"": psmv1.PMCVendor_PMC_TYPE_LITEON, "liteon": psmv1.PMCVendor_PMC_TYPE_LITEON, "delta": psmv1.PMCVendor_PMC_TYPE_DELTA}

// Register asks PSM to manage the shelves (idempotent by MAC). The error
// joins the failed items, or is the call's own failure.
func (c *Client) Register(ctx context.Context, regs []Registration) ([]RegisterResult, error) {
	const method = "RegisterPowershelves"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	req := &psmv1.RegisterPowershelvesRequest{}
	for _, r := range regs {
		v, ok := vendors[strings.ToLower(r.Vendor)]
		if !ok {
			return nil, &Error{Method: method, Device: r.MAC, Class: ErrRejected, Msg: "unknown vendor " + r.Vendor}
		}
		req.RegistrationRequests = append(req.RegistrationRequests, &psmv1.RegisterPowershelfRequest{
			PmcMacAddress: r.MAC, PmcIpAddress: r.IP, PmcVendor: v,
			PmcCredentials: &psmv1.Credentials{Username: r.Username, Password: r.Password},
		})
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := c.rpc.RegisterPowershelves(cctx, req)
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	var out []RegisterResult
	var errs []error
	for _, r := range res.GetResponses() {
		rr := RegisterResult{MAC: r.GetPmcMacAddress(), New: r.GetIsNew(), Err: itemErr(method, r.GetPmcMacAddress(), r.GetStatus(), r.GetError())}
		if r.Created != nil {
			rr.Created = r.GetCreated().AsTime()
		}
		if rr.Err != nil {
			errs = append(errs, rr.Err)
		}
		out = append(out, rr)
	}
	return out, errors.Join(errs...)
}

// Shelves reads the shelves with the given PMC MACs (PSM skips unknown
// ones); no MACs means every shelf.
func (c *Client) Shelves(ctx context.Context, macs []string) ([]Shelf, error) {
	const method = "GetPowershelves"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := c.rpc.GetPowershelves(cctx, &psmv1.PowershelfRequest{PmcMacs: macs})
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]Shelf, 0, len(res.GetPowershelves()))
	for _, p := range res.GetPowershelves() {
		pmc := p.GetPmc()
		s := Shelf{
			MAC: pmc.GetMacAddress(), IP: pmc.GetIpAddress(), Vendor: strings.ToLower(strings.TrimPrefix(pmc.GetVendor().String(), "PMC_TYPE_")),
			PMCSerial: pmc.GetSerialNumber(), Model: pmc.GetModel(), Manufacturer: pmc.GetManufacturer(), PartNumber: pmc.GetPartNumber(),
			Firmware: pmc.GetFirmwareVersion(), ChassisSerial: p.GetChassis().GetSerialNumber(),
		}
		for _, u := range p.GetPsus() {
			s.PSUs = append(s.PSUs, PSU{ID: u.GetId(), Name: u.GetName(), Serial: u.GetSerialNumber(), Firmware: u.GetFirmwareVersion(), On: u.GetPowerState()})
		}
		out = append(out, s)
	}
	return out, nil
}

func (c *Client) power(ctx context.Context, method string, macs []string) ([]Result, error) {
	if err := c.ready(method); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var (
		res *psmv1.PowerControlResponse
		err error
	)
	if method == "PowerOn" {
		res, err = c.rpc.PowerOn(cctx, &psmv1.PowerRequest{PmcMacs: macs})
	} else {
		res, err = c.rpc.PowerOff(cctx, &psmv1.PowerRequest{PmcMacs: macs})
	}
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	var out []Result
	var errs []error
	for _, r := range res.GetResponses() {
		rr := Result{MAC: r.GetPmcMacAddress(), Err: itemErr(method, r.GetPmcMacAddress(), r.GetStatus(), r.GetError())}
		if rr.Err != nil {
			errs = append(errs, rr.Err)
		}
		out = append(out, rr)
	}
	return out, errors.Join(errs...)
}

// PowerOn powers on every PSU of the shelves. The error joins the failed
// items, or is the call's own failure.
func (c *Client) PowerOn(ctx context.Context, macs []string) ([]Result, error) {
	return c.power(ctx, "PowerOn", macs)
}

// PowerOff powers off every PSU of the shelves, like PowerOn.
func (c *Client) PowerOff(ctx context.Context, macs []string) ([]Result, error) {
	return c.power(ctx, "PowerOff", macs)
}

func component(method string, c Component) (psmv1.PowershelfComponent, error) {
	switch strings.ToLower(string(c)) {
	case "pmc", "":
		return psmv1.PowershelfComponent_PMC, nil
	case "psu":
		return psmv1.PowershelfComponent_PSU, nil
	}
	return 0, &Error{Method: method, Class: ErrRejected, Msg: fmt.Sprintf("unknown component %q", c)}
}

func componentName(c psmv1.PowershelfComponent) Component {
	if c == psmv1.PowershelfComponent_PSU {
		return ComponentPSU
	}
	return ComponentPMC
}

// UpdateFirmware queues firmware updates, one job per (shelf, component).
// PSM accepts PMC updates only. Results are per (shelf, component); the
// error joins the failed items.
func (c *Client) UpdateFirmware(ctx context.Context, ups []FirmwareUpdate) ([]Result, error) {
	const method = "UpdateFirmware"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	req := &psmv1.UpdateFirmwareRequest{}
	for _, u := range ups {
		comp, err := component(method, u.Component)
		if err != nil {
			return nil, err
		}
		req.Upgrades = append(req.Upgrades, &psmv1.UpdatePowershelfFirmwareRequest{
			PmcMacAddress: u.MAC,
			Components:    []*psmv1.UpdateComponentFirmwareRequest{{Component: comp, UpgradeTo: &psmv1.FirmwareVersion{Version: u.Version}}},
		})
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := c.rpc.UpdateFirmware(cctx, req)
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	var out []Result
	var errs []error
	for _, r := range res.GetResponses() {
		for _, cr := range r.GetComponents() {
			rr := Result{MAC: r.GetPmcMacAddress(), Err: itemErr(method, r.GetPmcMacAddress(), cr.GetStatus(), cr.GetError())}
			if rr.Err != nil {
				errs = append(errs, rr.Err)
			}
			out = append(out, rr)
		}
	}
	return out, errors.Join(errs...)
}

var firmwareStates = map[psmv1.FirmwareUpdateState]FirmwareState{
	psmv1.FirmwareUpdateState_FIRMWARE_UPDATE_STATE_QUEUED:    FirmwareQueued,
	psmv1.FirmwareUpdateState_FIRMWARE_UPDATE_STATE_VERIFYING: FirmwareVerifying,
	psmv1.FirmwareUpdateState_FIRMWARE_UPDATE_STATE_COMPLETED: FirmwareCompleted,
	psmv1.FirmwareUpdateState_FIRMWARE_UPDATE_STATE_FAILED:    FirmwareFailed,
}

// FirmwareStatus reads the jobs named by qs. A query with no job comes back
// FirmwareUnknown with Err matching ErrNotFound; the returned error is only
// the call's own failure.
func (c *Client) FirmwareStatus(ctx context.Context, qs []FirmwareQuery) ([]FirmwareStatus, error) {
	const method = "GetFirmwareUpdateStatus"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	req := &psmv1.GetFirmwareUpdateStatusRequest{}
	for _, q := range qs {
		comp, err := component(method, q.Component)
		if err != nil {
			return nil, err
		}
		req.Queries = append(req.Queries, &psmv1.FirmwareUpdateQuery{PmcMacAddress: q.MAC, Component: comp})
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := c.rpc.GetFirmwareUpdateStatus(cctx, req)
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]FirmwareStatus, 0, len(res.GetStatuses()))
	for _, s := range res.GetStatuses() {
		out = append(out, FirmwareStatus{
			MAC: s.GetPmcMacAddress(), Component: componentName(s.GetComponent()),
			State: cmp.Or(firmwareStates[s.GetState()], FirmwareUnknown),
			Err:   itemErr(method, s.GetPmcMacAddress(), s.GetStatus(), s.GetError()),
		})
	}
	return out, nil
}

// AvailableFirmware lists the firmware versions PSM can install, per shelf
// MAC and component.
func (c *Client) AvailableFirmware(ctx context.Context, macs []string) (map[string]map[Component][]string, error) {
	const method = "ListAvailableFirmware"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := c.rpc.ListAvailableFirmware(cctx, &psmv1.PowershelfRequest{PmcMacs: macs})
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := map[string]map[Component][]string{}
	for _, a := range res.GetUpgrades() {
		m := map[Component][]string{}
		for _, u := range a.GetUpgrades() {
			for _, v := range u.GetUpgrades() {
				m[componentName(u.GetComponent())] = append(m[componentName(u.GetComponent())], v.GetVersion())
			}
		}
		out[a.GetPmcMacAddress()] = m
	}
	return out, nil
}

// Methods returns the names of the PSM methods of our v1.PowershelfManager
// service, for the metrics' known labels.
func Methods() []string {
	ms := psmv1.File_psm_v1_powershelf_manager_proto.Services().ByName("PowershelfManager").Methods()
	out := make([]string, ms.Len())
	for i := range ms.Len() {
		out[i] = string(ms.Get(i).Name())
	}
	return out
}
