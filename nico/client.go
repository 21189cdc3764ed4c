package nico

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	forgepb "github.com/nicoflow/flow/proto/gen/forge"
	"github.com/nicoflow/flow/proto/gen/forge/forgepbconnect"
	"github.com/nicoflow/flow/proto/lean"
)

// DefaultTimeout is the per-call deadline when none is configured (upstream's
// provider default).
const DefaultTimeout = time.Minute

// maxBatch caps each Find…ByIds batch; Core's max_find_by_ids lowers it.
const maxBatch = 100

// Client calls NICo Core over gRPC. A Client built from an empty URL is
// valid but unconfigured: every call fails with ErrNotConfigured. It is safe
// for concurrent use.
type Client struct {
	rpc forgepbconnect.ForgeClient
	// raw calls the methods whose replies are decoded on demand
	// (FirmwareVersionsRaw), with rpc's options.
	raw     *lean.Conn
	timeout time.Duration

	mu    sync.Mutex
	batch int // 0 until read from Version
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
// certificate). Without it the client speaks plaintext HTTP/2 unless the URL
// is https.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithInterceptors wraps every call of the client in interceptors, the
// first outermost (metrics and tracing of backend calls).
func WithInterceptors(interceptors ...connect.Interceptor) Option {
	return func(o *options) { o.interceptors = append(o.interceptors, interceptors...) }
}

// WithHTTPClient replaces the HTTP client (tests).
func WithHTTPClient(c connect.HTTPClient) Option { return func(o *options) { o.http = c } }

// NewClient returns a client of the Core at url: "host:port",
// "http://host:port" or "https://host:port". An empty url gives an
// unconfigured client (see Client).
func NewClient(url string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	c := &Client{timeout: cmp.Or(o.timeout, DefaultTimeout)}
	if url == "" {
		return c, nil
	}
	base, std, err := HTTPClient(url, o.tls)
	if err != nil {
		return nil, fmt.Errorf("NICo Core URL %q: %w", url, err)
	}
	var hc connect.HTTPClient = std
	if o.http != nil {
		hc = o.http
	}
	// No gzip: Core's replies travel uncompressed, as to upstream's Go
	// client; compressing the large listings of an inventory sync cost
	// more CPU on both ends than the bytes saved on a datacenter network.
	copts := []connect.ClientOption{connect.WithGRPC(), connect.WithReadMaxBytes(64 << 20), connect.WithInterceptors(o.interceptors...),
		connect.WithAcceptCompression("gzip", nil, nil)}
	c.rpc = forgepbconnect.NewForgeLeanClient(hc, base, copts...)
	c.raw = lean.NewConn(hc, base, forgepb.File_forge_forge_proto.Services().ByName("Forge"), copts...)
	return c, nil
}

// HTTPClient returns the base URL and an HTTP/2 client for a gRPC backend at
// url ("host:port" or with an http/https scheme). With cfg the connection is
// TLS; a bare host:port then means https.
func HTTPClient(url string, cfg *tls.Config) (string, *http.Client, error) {
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
		tr.TLSClientConfig = cfg
		if cfg == nil {
			tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
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

// Configured reports whether the client has a Core to call.
func (c *Client) Configured() bool { return c.rpc != nil }

func (c *Client) ready(method string) error {
	if c.rpc == nil {
		return &Error{Method: method, Class: ErrNotConfigured}
	}
	return nil
}

// callCtx gives a call its deadline.
func (c *Client) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// classify turns a transport or gRPC error into a classified *Error. A
// cancellation by the caller's own context is returned as is.
func classify(ctx context.Context, method string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	e := &Error{Method: method, Err: err, Msg: err.Error()}
	var ce *connect.Error
	if errors.As(err, &ce) {
		e.Msg = ce.Message()
	}
	switch code := connect.CodeOf(err); {
	case undecodable(err):
		// Core said OK but its reply does not decode (connect reports that
		// as invalid_argument, raised here, not by Core): a proxy fault or
		// a proto mismatch, never the request's fault. Retried; never read
		// as success.
		e.Class, e.Msg = ErrUnreachable, "reply does not decode: "+e.Msg
	case code == connect.CodeNotFound:
		e.Class = ErrNotFound
	case code == connect.CodeInvalidArgument, code == connect.CodeFailedPrecondition, code == connect.CodeAlreadyExists,
		code == connect.CodePermissionDenied, code == connect.CodeUnauthenticated, code == connect.CodeUnimplemented, code == connect.CodeOutOfRange:
		e.Class = ErrRejected
	default: // Unavailable, DeadlineExceeded, Internal, Unknown, Aborted, ResourceExhausted, Canceled by deadline
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

func itemErr(method, key string, r *forgepb.ComponentResult) error {
	if r.GetStatus() == forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_SUCCESS {
		return nil
	}
	e := &Error{Method: method, Device: key, Msg: cmp.Or(r.GetError(), r.GetStatus().String())}
	switch r.GetStatus() {
	case forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_NOT_FOUND:
		e.Class = ErrNotFound
	case forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_INVALID_ARGUMENT,
		forgepb.ComponentManagerStatusCode_COMPONENT_MANAGER_STATUS_CODE_ALREADY_EXISTS:
		e.Class = ErrRejected
	default:
		e.Class = ErrUnreachable
	}
	return e
}

func resultKey(r *forgepb.ComponentResult) string {
	if r.MacAddress != nil {
		return r.GetMacAddress()
	}
	return r.GetComponentId()
}

func checkTarget(method string, t Target) error {
	if (len(t.IDs) == 0) == (len(t.MACs) == 0) {
		return &Error{Method: method, Class: ErrRejected, Msg: "target needs exactly one of IDs and MACs"}
	}
	if t.Kind < KindCompute || t.Kind > KindPowerShelf {
		return &Error{Method: method, Class: ErrRejected, Msg: "target has no component kind"}
	}
	return nil
}

func machineIDs(ids []string) []*forgepb.MachineId {
	out := make([]*forgepb.MachineId, len(ids))
	for i, id := range ids {
		out[i] = &forgepb.MachineId{Id: id}
	}
	return out
}

func switchIDs(ids []string) []*forgepb.SwitchId {
	out := make([]*forgepb.SwitchId, len(ids))
	for i, id := range ids {
		out[i] = &forgepb.SwitchId{Id: id}
	}
	return out
}

func shelfIDs(ids []string) []*forgepb.PowerShelfId {
	out := make([]*forgepb.PowerShelfId, len(ids))
	for i, id := range ids {
		out[i] = &forgepb.PowerShelfId{Id: id}
	}
	return out
}

func macs(m []string) *forgepb.MacAddressList { return &forgepb.MacAddressList{MacAddresses: m} }

// results converts item results and joins their errors; the error is nil
// when every item succeeded.
func results(method string, rs []*forgepb.ComponentResult) ([]Result, error) {
	out := make([]Result, 0, len(rs))
	var errs []error
	for _, r := range rs {
		key := resultKey(r)
		res := Result{Key: key, ID: r.GetComponentId(), MAC: r.GetMacAddress(), Err: itemErr(method, key, r)}
		if res.Err != nil {
			errs = append(errs, res.Err)
		}
		out = append(out, res)
	}
	return out, errors.Join(errs...)
}

// Version returns Core's build version and its max_find_by_ids limit.
func (c *Client) Version(ctx context.Context) (BuildInfo, error) {
	const method = "Version"
	if err := c.ready(method); err != nil {
		return BuildInfo{}, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.Version(cctx, &forgepb.VersionRequest{DisplayConfig: true})
	if err != nil {
		return BuildInfo{}, classify(ctx, method, err)
	}
	return BuildInfo{Version: res.GetBuildVersion(), MaxFindByIDs: res.GetRuntimeConfig().GetMaxFindByIds()}, nil
}

// batchSize is min(100, max_find_by_ids), read once from Version; if that
// read fails, 100 is used for this call and the read is retried next time.
func (c *Client) batchSize(ctx context.Context) int {
	c.mu.Lock()
	b := c.batch
	c.mu.Unlock()
	if b > 0 {
		return b
	}
	info, err := c.Version(ctx)
	if err != nil {
		return maxBatch
	}
	b = maxBatch
	if info.MaxFindByIDs > 0 && int(info.MaxFindByIDs) < b {
		b = int(info.MaxFindByIDs)
	}
	c.mu.Lock()
	c.batch = b
	c.mu.Unlock()
	return b
}

func checkIDs(method string, ids []string) error {
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if id == "" {
			return &Error{Method: method, Class: ErrRejected, Msg: "empty ID"}
		}
		if seen[id] {
			return &Error{Method: method, Class: ErrRejected, Device: id, Msg: "duplicate ID"}
		}
		seen[id] = true
	}
	return nil
}

// byIDs runs fetch over ids in batches sharing one deadline, up to
// parallelBatches at a time, and fails with ErrNotFound naming the IDs a
// reply left out. The result keeps the batches' order.
func byIDs[T any](ctx context.Context, c *Client, method string, ids []string, fetch func(context.Context, []string) ([]T, error), idOf func(T) string) ([]T, error) {
	if err := c.ready(method); err != nil {
		return nil, err
	}
	if err := checkIDs(method, ids); err != nil {
		return nil, err
	}
	size := c.batchSize(ctx)
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	chunks := slices.Collect(slices.Chunk(ids, size))
	got := make([][]T, len(chunks))
	err := eachBatch(cctx, len(chunks), func(ctx context.Context, i int) error {
		chunk := chunks[i]
		res, err := fetch(ctx, chunk)
		if err != nil {
			return classify(ctx, method, err)
		}
		present := make(map[string]bool, len(res))
		for _, g := range res {
			present[idOf(g)] = true
		}
		var missing []string
		for _, id := range chunk {
			if !present[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 || len(res) != len(chunk) {
			return &Error{Method: method, Class: ErrNotFound, Device: strings.Join(missing, ","), Msg: "reply does not hold exactly the requested IDs"}
		}
		got[i] = res
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []T
	for _, g := range got {
		out = append(out, g...)
	}
	return out, nil
}

// parallelBatches is how many batches of one read are in flight at once.
const parallelBatches = 4

// eachBatch runs f for batches 0..n-1, up to parallelBatches at a time, and
// returns the first error (the others are cancelled).
func eachBatch(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range min(parallelBatches, n) {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// MachineIDs lists machine IDs; with includeDPUs DPUs are listed too, and a
// non-empty rackID restricts the list to that rack.
func (c *Client) MachineIDs(ctx context.Context, includeDPUs bool, rackID string) ([]string, error) {
	const method = "FindMachineIds"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	req := &forgepb.MachineSearchConfig{IncludeDpus: includeDPUs}
	if rackID != "" {
		req.RackId = &forgepb.RackId{Id: rackID}
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.FindMachineIds(cctx, req)
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]string, 0, len(res.GetMachineIds()))
	for _, id := range res.GetMachineIds() {
		out = append(out, id.GetId())
	}
	return out, nil
}

// Machines reads the machines with ids, in batches. It fails with
// ErrNotFound when Core leaves any ID out, and with ErrRejected for empty or
// duplicate IDs.
func (c *Client) Machines(ctx context.Context, ids []string) ([]Machine, error) {
	ms, err := byIDs(ctx, c, "FindMachinesByIds", ids, func(ctx context.Context, chunk []string) ([]*forgepb.Machine, error) {
		res, err := c.rpc.FindMachinesByIds(ctx, &forgepb.MachinesByIdsRequest{MachineIds: machineIDs(chunk)})
		return res.GetMachines(), err
	}, func(m *forgepb.Machine) string { return m.GetId().GetId() })
	if err != nil {
		return nil, err
	}
	out := make([]Machine, 0, len(ms))
	for _, m := range ms {
		mm := Machine{
			ID:             m.GetId().GetId(),
			State:          m.GetState(),
			Host:           m.GetMachineType() == forgepb.MachineType_MACHINE_TYPE_HOST,
			BMCMAC:         m.GetBmcInfo().GetMac(),
			BMCIP:          m.GetBmcInfo().GetIp(),
			BMCFirmware:    m.GetBmcInfo().GetFirmwareVersion(),
			ChassisSerial:  m.GetStatus().GetDiscoveryInfo().GetDmiData().GetChassisSerial(),
			UpdateComplete: m.GetStatus().GetUpdateComplete(),
			Health:         healthOf(m.GetStatus().GetHealth()),
		}
		for _, d := range m.GetStatus().GetAssociatedDpuMachineIds() {
			mm.DPUIDs = append(mm.DPUIDs, d.GetId())
		}
		out = append(out, mm)
	}
	return out, nil
}

// SwitchIDs lists every switch ID.
func (c *Client) SwitchIDs(ctx context.Context) ([]string, error) {
	const method = "FindSwitchIds"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.FindSwitchIds(cctx, &forgepb.SwitchSearchFilter{})
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]string, 0, len(res.GetIds()))
	for _, id := range res.GetIds() {
		out = append(out, id.GetId())
	}
	return out, nil
}

// Switches reads the switches with ids, in batches, like Machines.
func (c *Client) Switches(ctx context.Context, ids []string) ([]Switch, error) {
	ss, err := byIDs(ctx, c, "FindSwitchesByIds", ids, func(ctx context.Context, chunk []string) ([]*forgepb.Switch, error) {
		res, err := c.rpc.FindSwitchesByIds(ctx, &forgepb.SwitchesByIdsRequest{SwitchIds: switchIDs(chunk)})
		return res.GetSwitches(), err
	}, func(s *forgepb.Switch) string { return s.GetId().GetId() })
	if err != nil {
		return nil, err
	}
	out := make([]Switch, 0, len(ss))
	for _, s := range ss {
		out = append(out, Switch{
			ID: s.GetId().GetId(), ControllerState: s.GetControllerState(), BMCMAC: s.GetBmcInfo().GetMac(),
			RackID: s.GetRackId().GetId(), NVOSIP: s.GetNvosInfo().GetIp(),
			NVLinkDomain: s.GetNvlinkDomainUuid().GetValue(), Health: healthOf(s.GetStatus().GetHealth()),
		})
	}
	return out, nil
}

// PowerShelfIDs lists every power shelf ID.
func (c *Client) PowerShelfIDs(ctx context.Context) ([]string, error) {
	const method = "FindPowerShelfIds"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.FindPowerShelfIds(cctx, &forgepb.PowerShelfSearchFilter{})
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]string, 0, len(res.GetIds()))
	for _, id := range res.GetIds() {
		out = append(out, id.GetId())
	}
	return out, nil
}

// PowerShelves reads the shelves with ids, in batches, like Machines.
func (c *Client) PowerShelves(ctx context.Context, ids []string) ([]PowerShelf, error) {
	ps, err := byIDs(ctx, c, "FindPowerShelvesByIds", ids, func(ctx context.Context, chunk []string) ([]*forgepb.PowerShelf, error) {
		res, err := c.rpc.FindPowerShelvesByIds(ctx, &forgepb.PowerShelvesByIdsRequest{PowerShelfIds: shelfIDs(chunk)})
		return res.GetPowerShelves(), err
	}, func(p *forgepb.PowerShelf) string { return p.GetId().GetId() })
	if err != nil {
		return nil, err
	}
	out := make([]PowerShelf, 0, len(ps))
	for _, p := range ps {
		out = append(out, PowerShelf{ID: p.GetId().GetId(), ControllerState: p.GetControllerState(), BMCMAC: p.GetBmcInfo().GetMac(),
			RackID: p.GetRackId().GetId(), Health: healthOf(p.GetStatus().GetHealth())})
	}
	return out, nil
}

func metadata(labels map[string]string) *forgepb.Metadata {
	if len(labels) == 0 {
		return nil
	}
	md := &forgepb.Metadata{}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		md.Labels = append(md.Labels, &forgepb.Label{Key: k, Value: &v})
	}
	return md
}

func labels(md *forgepb.Metadata) map[string]string {
	if len(md.GetLabels()) == 0 {
		return nil
	}
	out := make(map[string]string, len(md.GetLabels()))
	for _, l := range md.GetLabels() {
		out[l.GetKey()] = l.GetValue()
	}
	return out
}

func rackID(id string) *forgepb.RackId {
	if id == "" {
		return nil
	}
	return &forgepb.RackId{Id: id}
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// AddExpectedMachine declares an expected compute tray to Core (idempotent
// by BMC MAC).
func (c *Client) AddExpectedMachine(ctx context.Context, m ExpectedMachine) error {
	const method = "AddExpectedMachine"
	if err := c.ready(method); err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	_, err := c.rpc.AddExpectedMachine(cctx, &forgepb.ExpectedMachine{
		BmcMacAddress: m.BMCMAC, BmcUsername: m.BMCUsername, BmcPassword: m.BMCPassword,
		ChassisSerialNumber: m.ChassisSerial, RackId: rackID(m.RackID), BmcIpAddress: optString(m.BMCIP),
		DefaultPauseIngestionAndPoweron: m.PauseIngestion, Metadata: metadata(m.Labels),
	})
	return classify(ctx, method, err)
}

// AddExpectedSwitch declares an expected switch to Core (idempotent by BMC
// MAC). NVOS credentials are sent only when set.
func (c *Client) AddExpectedSwitch(ctx context.Context, s ExpectedSwitch) error {
	const method = "AddExpectedSwitch"
	if err := c.ready(method); err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	_, err := c.rpc.AddExpectedSwitch(cctx, &forgepb.ExpectedSwitch{
		BmcMacAddress: s.BMCMAC, BmcUsername: s.BMCUsername, BmcPassword: s.BMCPassword,
		SwitchSerialNumber: s.Serial, RackId: rackID(s.RackID), BmcIpAddress: s.BMCIP,
		NvosUsername: optString(s.NVOSUsername), NvosPassword: optString(s.NVOSPassword), Metadata: metadata(s.Labels),
	})
	return classify(ctx, method, err)
}

// AddExpectedPowerShelf declares an expected power shelf to Core (idempotent
// by PMC MAC).
func (c *Client) AddExpectedPowerShelf(ctx context.Context, p ExpectedPowerShelf) error {
	const method = "AddExpectedPowerShelf"
	if err := c.ready(method); err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	_, err := c.rpc.AddExpectedPowerShelf(cctx, &forgepb.ExpectedPowerShelf{
		BmcMacAddress: p.BMCMAC, BmcUsername: p.BMCUsername, BmcPassword: p.BMCPassword,
		ShelfSerialNumber: p.Serial, RackId: rackID(p.RackID), BmcIpAddress: p.BMCIP, Metadata: metadata(p.Labels),
	})
	return classify(ctx, method, err)
}

// ExpectedMachines reads every expected machine (passwords left out).
func (c *Client) ExpectedMachines(ctx context.Context) ([]ExpectedMachine, error) {
	const method = "GetAllExpectedMachines"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.GetAllExpectedMachines(cctx, &emptypb.Empty{})
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]ExpectedMachine, 0, len(res.GetExpectedMachines()))
	for _, m := range res.GetExpectedMachines() {
		out = append(out, ExpectedMachine{BMCMAC: m.GetBmcMacAddress(), ChassisSerial: m.GetChassisSerialNumber(), RackID: m.GetRackId().GetId(), BMCIP: m.GetBmcIpAddress(), Labels: labels(m.GetMetadata()), Name: m.GetMetadata().GetName(), Description: m.GetMetadata().GetDescription()})
	}
	return out, nil
}

// ExpectedSwitches reads every expected switch (passwords left out).
func (c *Client) ExpectedSwitches(ctx context.Context) ([]ExpectedSwitch, error) {
	const method = "GetAllExpectedSwitches"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.GetAllExpectedSwitches(cctx, &emptypb.Empty{})
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]ExpectedSwitch, 0, len(res.GetExpectedSwitches()))
	for _, s := range res.GetExpectedSwitches() {
		out = append(out, ExpectedSwitch{BMCMAC: s.GetBmcMacAddress(), Serial: s.GetSwitchSerialNumber(), RackID: s.GetRackId().GetId(), BMCIP: s.GetBmcIpAddress(), Labels: labels(s.GetMetadata()), Name: s.GetMetadata().GetName(), Description: s.GetMetadata().GetDescription()})
	}
	return out, nil
}

// ExpectedPowerShelves reads every expected power shelf (passwords left out).
func (c *Client) ExpectedPowerShelves(ctx context.Context) ([]ExpectedPowerShelf, error) {
	const method = "GetAllExpectedPowerShelves"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.GetAllExpectedPowerShelves(cctx, &emptypb.Empty{})
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]ExpectedPowerShelf, 0, len(res.GetExpectedPowerShelves()))
	for _, p := range res.GetExpectedPowerShelves() {
		out = append(out, ExpectedPowerShelf{BMCMAC: p.GetBmcMacAddress(), Serial: p.GetShelfSerialNumber(), RackID: p.GetRackId().GetId(), BMCIP: p.GetBmcIpAddress(), Labels: labels(p.GetMetadata()), Name: p.GetMetadata().GetName(), Description: p.GetMetadata().GetDescription()})
	}
	return out, nil
}

// AllowIngestion opens the ingestion gate for the BMC endpoint identified by
// address (Flow sends the component identifier here, as upstream does).
func (c *Client) AllowIngestion(ctx context.Context, address string) error {
	const method = "AllowIngestionAndPowerOn"
	if err := c.ready(method); err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	_, err := c.rpc.AllowIngestionAndPowerOn(cctx, &forgepb.BmcEndpointRequest{IpAddress: address})
	return classify(ctx, method, err)
}

// IngestionState reads the ingestion state of the BMC endpoint at address.
func (c *Client) IngestionState(ctx context.Context, address string) (IngestionState, error) {
	const method = "DetermineMachineIngestionState"
	if err := c.ready(method); err != nil {
		return "", err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.DetermineMachineIngestionState(cctx, &forgepb.BmcEndpointRequest{IpAddress: address})
	if err != nil {
		return "", classify(ctx, method, err)
	}
	return IngestionState(res.GetMachineIngestionState().String()), nil
}

// Decommission starts decommissioning one component by Core ID. Core accepts
// it only from Ready (else ErrRejected).
func (c *Client) Decommission(ctx context.Context, kind Kind, id string) error {
	var method string
	switch kind {
	case KindCompute:
		method = "DecommissionManagedHost"
	case KindSwitch:
		method = "DecommissionSwitch"
	case KindPowerShelf:
		method = "DecommissionPowerShelf"
	default:
		return &Error{Method: "Decommission", Class: ErrRejected, Msg: "unknown component kind"}
	}
	if err := c.ready(method); err != nil {
		return err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	var err error
	switch kind {
	case KindCompute:
		_, err = c.rpc.DecommissionManagedHost(cctx, &forgepb.DecommissionManagedHostRequest{MachineId: &forgepb.MachineId{Id: id}})
	case KindSwitch:
		_, err = c.rpc.DecommissionSwitch(cctx, &forgepb.DecommissionSwitchRequest{SwitchId: &forgepb.SwitchId{Id: id}})
	case KindPowerShelf:
		_, err = c.rpc.DecommissionPowerShelf(cctx, &forgepb.DecommissionPowerShelfRequest{PowerShelfId: &forgepb.PowerShelfId{Id: id}})
	}
	err = classify(ctx, method, err)
	if e, ok := err.(*Error); ok {
		e.Device = id
	}
	return err
}

// PowerControl asks Core to apply action to every component of t. The
// results carry one entry per target, keyed by the caller's identifier; the
// error joins the failed items (nil when all succeeded) or is the call's own
// failure. bypass carries the operator's readiness-check override.
func (c *Client) PowerControl(ctx context.Context, t Target, action PowerAction, bypass bool) ([]Result, error) {
	const method = "ComponentPowerControl"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	if err := checkTarget(method, t); err != nil {
		return nil, err
	}
	req := &forgepb.ComponentPowerControlRequest{Action: forgepb.SystemPowerControl(action), BypassStateController: bypass}
	switch {
	case t.Kind == KindCompute && len(t.IDs) > 0:
		req.Target = &forgepb.ComponentPowerControlRequest_MachineIds{MachineIds: &forgepb.MachineIdList{MachineIds: machineIDs(t.IDs)}}
	case t.Kind == KindSwitch && len(t.IDs) > 0:
		req.Target = &forgepb.ComponentPowerControlRequest_SwitchIds{SwitchIds: &forgepb.SwitchIdList{Ids: switchIDs(t.IDs)}}
	case t.Kind == KindPowerShelf && len(t.IDs) > 0:
		req.Target = &forgepb.ComponentPowerControlRequest_PowerShelfIds{PowerShelfIds: &forgepb.PowerShelfIdList{Ids: shelfIDs(t.IDs)}}
	case t.Kind == KindCompute:
		req.Target = &forgepb.ComponentPowerControlRequest_ComputeBmcMacs{ComputeBmcMacs: macs(t.MACs)}
	case t.Kind == KindSwitch:
		req.Target = &forgepb.ComponentPowerControlRequest_SwitchBmcMacs{SwitchBmcMacs: macs(t.MACs)}
	default:
		req.Target = &forgepb.ComponentPowerControlRequest_PowerShelfPmcMacs{PowerShelfPmcMacs: macs(t.MACs)}
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.ComponentPowerControl(cctx, req)
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	return results(method, res.GetResults())
}

// Inventory reads the exploration report of every component of t. A device
// whose item failed, or that has no report, comes back with Err set; the
// returned error is only the call's own failure.
func (c *Client) Inventory(ctx context.Context, t Target) ([]Inventory, error) {
	const method = "GetComponentInventory"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	if err := checkTarget(method, t); err != nil {
		return nil, err
	}
	req := &forgepb.GetComponentInventoryRequest{}
	switch {
	case t.Kind == KindCompute && len(t.IDs) > 0:
		req.Target = &forgepb.GetComponentInventoryRequest_MachineIds{MachineIds: &forgepb.MachineIdList{MachineIds: machineIDs(t.IDs)}}
	case t.Kind == KindSwitch && len(t.IDs) > 0:
		req.Target = &forgepb.GetComponentInventoryRequest_SwitchIds{SwitchIds: &forgepb.SwitchIdList{Ids: switchIDs(t.IDs)}}
	case t.Kind == KindPowerShelf && len(t.IDs) > 0:
		req.Target = &forgepb.GetComponentInventoryRequest_PowerShelfIds{PowerShelfIds: &forgepb.PowerShelfIdList{Ids: shelfIDs(t.IDs)}}
	case t.Kind == KindCompute:
		req.Target = &forgepb.GetComponentInventoryRequest_ComputeBmcMacs{ComputeBmcMacs: macs(t.MACs)}
	case t.Kind == KindSwitch:
		req.Target = &forgepb.GetComponentInventoryRequest_SwitchBmcMacs{SwitchBmcMacs: macs(t.MACs)}
	default:
		req.Target = &forgepb.GetComponentInventoryRequest_PowerShelfPmcMacs{PowerShelfPmcMacs: macs(t.MACs)}
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.GetComponentInventory(cctx, req)
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]Inventory, 0, len(res.GetEntries()))
	for _, e := range res.GetEntries() {
		key := resultKey(e.GetResult())
		inv := Inventory{Key: key, ID: e.GetResult().GetComponentId(), Err: itemErr(method, key, e.GetResult())}
		if inv.Err == nil && e.Report == nil {
			inv.Err = &Error{Method: method, Device: key, Class: ErrUnreachable, Msg: "no exploration report"}
		}
		if inv.Err == nil {
			r := e.GetReport()
			inv.Power = PowerStateUnknown
			if len(r.GetSystems()) > 0 {
				inv.Power = powerState(r.GetSystems()[0].GetPowerState())
			}
			inv.FirmwareVersions = r.GetFirmwareVersions()
			for _, s := range r.GetService() {
				for _, it := range s.GetInventories() {
					inv.Items = append(inv.Items, InventoryItem{ID: it.GetId(), Description: it.GetDescription(), Version: it.GetVersion()})
				}
			}
			if len(r.GetChassis()) > 0 {
				inv.ChassisSerial = r.GetChassis()[0].GetSerialNumber()
			}
		}
		out = append(out, inv)
	}
	return out, nil
}

func powerState(p forgepb.ComputerSystemPowerState) PowerState {
	switch p {
	case forgepb.ComputerSystemPowerState_On:
		return PowerStateOn
	case forgepb.ComputerSystemPowerState_Off:
		return PowerStateOff
	case forgepb.ComputerSystemPowerState_PoweringOn:
		return PowerStatePoweringOn
	case forgepb.ComputerSystemPowerState_PoweringOff:
		return PowerStatePoweringOff
	case forgepb.ComputerSystemPowerState_Paused:
		return PowerStatePaused
	case forgepb.ComputerSystemPowerState_Hibernating:
		return PowerStateHibernating
	case forgepb.ComputerSystemPowerState_Sleeping:
		return PowerStateSleeping
	}
	return PowerStateUnknown
}

var computeComponents = map[string]forgepb.ComputeTrayComponent{
	"bmc": 1, "bios": 2, "cec": 3, "nic": 4, "cpld_mb": 5, "cpld_pdb": 6, "hgx_bmc": 7, "combined_bmc_uefi": 8, "gpu": 9, "cx7": 10,
}

var switchComponents = map[string]forgepb.NvSwitchComponent{"bmc": 1, "cpld": 2, "bios": 3, "nvos": 4}

var shelfComponents = map[string]forgepb.PowerShelfComponent{"pmc": 1, "psu": 2}

// FirmwareComponents returns the sub-target names Core accepts for kind.
func FirmwareComponents(kind Kind) []string {
	var keys []string
	switch kind {
	case KindCompute:
		for k := range computeComponents {
			keys = append(keys, k)
		}
	case KindSwitch:
		for k := range switchComponents {
			keys = append(keys, k)
		}
	case KindPowerShelf:
		for k := range shelfComponents {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func components[E ~int32](method string, names []string, known map[string]E) ([]E, error) {
	out := make([]E, 0, len(names))
	for _, n := range names {
		v, ok := known[strings.ToLower(n)]
		if !ok {
			return nil, &Error{Method: method, Class: ErrRejected, Msg: fmt.Sprintf("unknown firmware component %q", n)}
		}
		out = append(out, v)
	}
	return out, nil
}

// UpdateFirmware starts a firmware update on every component of t. Results
// and error follow PowerControl. Unknown component names fail with
// ErrRejected before any call.
//
// A KindRack target (IDs only) asks Core to bring each whole rack to
// TargetVersion (upstream's UpdateFirmwareObjectTarget); Components must
// then be empty, as the rack target carries none.
func (c *Client) UpdateFirmware(ctx context.Context, t Target, fr FirmwareRequest) ([]Result, error) {
	const method = "UpdateComponentFirmware"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	if err := checkFirmwareTarget(method, t); err != nil {
		return nil, err
	}
	req := &forgepb.UpdateComponentFirmwareRequest{TargetVersion: fr.TargetVersion, AccessToken: optString(fr.AccessToken), ForceUpdate: fr.Force, BypassStateController: fr.BypassReadiness}
	switch t.Kind {
	case KindCompute:
		cs, err := components(method, fr.Components, computeComponents)
		if err != nil {
			return nil, err
		}
		tg := &forgepb.UpdateComputeTrayFirmwareTarget{Components: cs}
		if len(t.IDs) > 0 {
			tg.MachineIds = &forgepb.MachineIdList{MachineIds: machineIDs(t.IDs)}
		} else {
			tg.BmcMacs = macs(t.MACs)
		}
		req.Target = &forgepb.UpdateComponentFirmwareRequest_ComputeTrays{ComputeTrays: tg}
	case KindSwitch:
		cs, err := components(method, fr.Components, switchComponents)
		if err != nil {
			return nil, err
		}
		tg := &forgepb.UpdateSwitchFirmwareTarget{Components: cs}
		if len(t.IDs) > 0 {
			tg.SwitchIds = &forgepb.SwitchIdList{Ids: switchIDs(t.IDs)}
		} else {
			tg.BmcMacs = macs(t.MACs)
		}
		req.Target = &forgepb.UpdateComponentFirmwareRequest_Switches{Switches: tg}
	case KindPowerShelf:
		cs, err := components(method, fr.Components, shelfComponents)
		if err != nil {
			return nil, err
		}
		tg := &forgepb.UpdatePowerShelfFirmwareTarget{Components: cs}
		if len(t.IDs) > 0 {
			tg.PowerShelfIds = &forgepb.PowerShelfIdList{Ids: shelfIDs(t.IDs)}
		} else {
			tg.PmcMacs = macs(t.MACs)
		}
		req.Target = &forgepb.UpdateComponentFirmwareRequest_PowerShelves{PowerShelves: tg}
	default: // KindRack, checked above
		if len(fr.Components) > 0 {
			return nil, &Error{Method: method, Class: ErrRejected, Msg: "a rack firmware target takes no components"}
		}
		req.Target = &forgepb.UpdateComponentFirmwareRequest_Racks{Racks: &forgepb.UpdateFirmwareObjectTarget{RackIds: &forgepb.RackIdList{RackIds: rackIDs(t.IDs)}}}
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.UpdateComponentFirmware(cctx, req)
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	return results(method, res.GetResults())
}

// checkFirmwareTarget is checkTarget that also admits a rack target by ID,
// which only the firmware methods take.
func checkFirmwareTarget(method string, t Target) error {
	if t.Kind != KindRack {
		return checkTarget(method, t)
	}
	if len(t.IDs) == 0 || len(t.MACs) > 0 {
		return &Error{Method: method, Class: ErrRejected, Msg: "a rack target names racks by ID, never by MAC"}
	}
	return nil
}

func rackIDs(ids []string) []*forgepb.RackId {
	out := make([]*forgepb.RackId, len(ids))
	for i, id := range ids {
		out[i] = &forgepb.RackId{Id: id}
	}
	return out
}

// FirmwareVersions reads the installed firmware versions of every device of
// t (ListComponentFirmwareVersions). A rack target answers for the rack's
// devices. Devices Core could not read carry Err; the error is only the
// call's own failure.
func (c *Client) FirmwareVersions(ctx context.Context, t Target) ([]DeviceVersions, error) {
	const method = "ListComponentFirmwareVersions"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	if err := checkFirmwareTarget(method, t); err != nil {
		return nil, err
	}
	req := &forgepb.ListComponentFirmwareVersionsRequest{}
	switch {
	case t.Kind == KindRack:
		req.Target = &forgepb.ListComponentFirmwareVersionsRequest_RackIds{RackIds: &forgepb.RackIdList{RackIds: rackIDs(t.IDs)}}
	case t.Kind == KindCompute && len(t.IDs) > 0:
		req.Target = &forgepb.ListComponentFirmwareVersionsRequest_MachineIds{MachineIds: &forgepb.MachineIdList{MachineIds: machineIDs(t.IDs)}}
	case t.Kind == KindSwitch && len(t.IDs) > 0:
		req.Target = &forgepb.ListComponentFirmwareVersionsRequest_SwitchIds{SwitchIds: &forgepb.SwitchIdList{Ids: switchIDs(t.IDs)}}
	case t.Kind == KindPowerShelf && len(t.IDs) > 0:
		req.Target = &forgepb.ListComponentFirmwareVersionsRequest_PowerShelfIds{PowerShelfIds: &forgepb.PowerShelfIdList{Ids: shelfIDs(t.IDs)}}
	case t.Kind == KindCompute:
		req.Target = &forgepb.ListComponentFirmwareVersionsRequest_ComputeBmcMacs{ComputeBmcMacs: macs(t.MACs)}
	case t.Kind == KindSwitch:
		req.Target = &forgepb.ListComponentFirmwareVersionsRequest_SwitchBmcMacs{SwitchBmcMacs: macs(t.MACs)}
	default:
		req.Target = &forgepb.ListComponentFirmwareVersionsRequest_PowerShelfPmcMacs{PowerShelfPmcMacs: macs(t.MACs)}
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.ListComponentFirmwareVersions(cctx, req)
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]DeviceVersions, 0, len(res.GetDevices()))
	for _, d := range res.GetDevices() {
		out = append(out, deviceVersionsOf(d))
	}
	return out, nil
}

// deviceVersionsOf converts one device's entry of a
// ListComponentFirmwareVersions reply.
func deviceVersionsOf(d *forgepb.DeviceFirmwareVersions) DeviceVersions {
	const method = "ListComponentFirmwareVersions"
	key := resultKey(d.GetResult())
	dv := DeviceVersions{Key: key, ID: d.GetResult().GetComponentId(), Versions: d.GetVersions(), Err: itemErr(method, key, d.GetResult())}
	if cvs := d.GetComputeFwVersions(); len(cvs) > 0 {
		dv.Components = make([]ComponentVersions, 0, len(cvs))
	}
	for _, cv := range d.GetComputeFwVersions() {
		dv.Components = append(dv.Components, ComponentVersions{Component: computeComponentName(cv.GetComponent()), Versions: cv.GetVersions()})
	}
	return dv
}

// VersionsEntry is one device's entry of a ListComponentFirmwareVersions
// reply as Core sent it (FirmwareVersionsRaw): the device's Core ID (its
// result's component_id; empty when the entry names the device by MAC
// only) and the entry's bytes (a DeviceFirmwareVersions message), both
// aliasing the reply, decoded on demand (Decode). Equal bytes decode to
// equal DeviceVersions, so a caller that has seen an entry before can skip
// decoding it.
type VersionsEntry struct {
	ID    []byte
	Bytes []byte
}

// Decode decodes the entry as FirmwareVersions would.
func (e VersionsEntry) Decode() (DeviceVersions, error) {
	var d forgepb.DeviceFirmwareVersions
	if err := proto.Unmarshal(e.Bytes, &d); err != nil {
		return DeviceVersions{}, &Error{Method: "ListComponentFirmwareVersions", Class: ErrUnreachable, Msg: "reply does not decode: device entry: " + err.Error()}
	}
	return deviceVersionsOf(&d), nil
}

// versionsEntries splits a ListComponentFirmwareVersions reply into its
// device entries, in Core's order; a reply whose framing does not parse
// fails (ErrUnreachable, as an undecodable reply of FirmwareVersions).
func versionsEntries(raw []byte) ([]VersionsEntry, error) {
	var out []VersionsEntry
	for b := raw; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, malformedVersions(n)
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType { // not devices: skipped, as proto.Unmarshal keeps it unknown
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil, malformedVersions(n)
			}
			b = b[n:]
			continue
		}
		entry, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, malformedVersions(n)
		}
		b = b[n:]
		id, err := entryID(entry)
		if err != nil {
			return nil, err
		}
		if out == nil {
			// Entries of one size mostly: room for all of them at once.
			out = make([]VersionsEntry, 0, 1+len(raw)/(n+1))
		}
		out = append(out, VersionsEntry{ID: id, Bytes: entry})
	}
	return out, nil
}

// entryID is the component_id of a DeviceFirmwareVersions entry's result
// (the last one, as proto.Unmarshal merges repeated singular fields).
func entryID(entry []byte) ([]byte, error) {
	var id []byte
	for b := entry; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, malformedVersions(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType { // result
			res, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, malformedVersions(n)
			}
			b = b[n:]
			for rb := res; len(rb) > 0; {
				rnum, rtyp, n := protowire.ConsumeTag(rb)
				if n < 0 {
					return nil, malformedVersions(n)
				}
				rb = rb[n:]
				if rnum == 1 && rtyp == protowire.BytesType { // component_id
					v, n := protowire.ConsumeBytes(rb)
					if n < 0 {
						return nil, malformedVersions(n)
					}
					id, rb = v, rb[n:]
					continue
				}
				if n = protowire.ConsumeFieldValue(rnum, rtyp, rb); n < 0 {
					return nil, malformedVersions(n)
				}
				rb = rb[n:]
			}
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil, malformedVersions(n)
		}
		b = b[n:]
	}
	return id, nil
}

func malformedVersions(n int) error {
	return &Error{Method: "ListComponentFirmwareVersions", Class: ErrUnreachable, Msg: "reply does not decode: " + protowire.ParseError(n).Error()}
}

// FirmwareVersionsRaw is FirmwareVersions of the compute trays with
// Core IDs ids, its reply split into device entries but left undecoded
// (VersionsEntry): the inventory sync decodes only the entries that
// changed since its last read.
func (c *Client) FirmwareVersionsRaw(ctx context.Context, ids []string) ([]VersionsEntry, error) {
	const method = "ListComponentFirmwareVersions"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	t := Target{Kind: KindCompute, IDs: ids}
	if err := checkFirmwareTarget(method, t); err != nil {
		return nil, err
	}
	req := &forgepb.ListComponentFirmwareVersionsRequest{
		Target: &forgepb.ListComponentFirmwareVersionsRequest_MachineIds{MachineIds: &forgepb.MachineIdList{MachineIds: machineIDs(ids)}},
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	raw, err := c.raw.CallRaw(cctx, forgepbconnect.ForgeListComponentFirmwareVersionsProcedure, req)
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	return versionsEntries(raw)
}

// computeComponentNames is computeComponents the other way round.
var computeComponentNames = func() map[forgepb.ComputeTrayComponent]string {
	out := make(map[forgepb.ComputeTrayComponent]string, len(computeComponents))
	for name, v := range computeComponents {
		out[v] = name
	}
	return out
}()

// computeComponentName is the name FirmwareComponents uses for c, or
// "unknown(N)" for a value this build does not know.
func computeComponentName(c forgepb.ComputeTrayComponent) string {
	if name, ok := computeComponentNames[c]; ok {
		return name
	}
	return fmt.Sprintf("unknown(%d)", int32(c))
}

// FirmwareStatus reads the jobs of each device's latest firmware request.
// Devices without a job are absent (for shelves Core may answer an empty
// list). A rack target answers for the rack's devices, keyed by Core ID. The error is only the call's own failure; item failures are in Err.
func (c *Client) FirmwareStatus(ctx context.Context, t Target) ([]FirmwareStatus, error) {
	const method = "GetComponentFirmwareStatus"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	if err := checkFirmwareTarget(method, t); err != nil {
		return nil, err
	}
	req := &forgepb.GetComponentFirmwareStatusRequest{}
	switch {
	case t.Kind == KindRack:
		req.Target = &forgepb.GetComponentFirmwareStatusRequest_RackIds{RackIds: &forgepb.RackIdList{RackIds: rackIDs(t.IDs)}}
	case t.Kind == KindCompute && len(t.IDs) > 0:
		req.Target = &forgepb.GetComponentFirmwareStatusRequest_MachineIds{MachineIds: &forgepb.MachineIdList{MachineIds: machineIDs(t.IDs)}}
	case t.Kind == KindSwitch && len(t.IDs) > 0:
		req.Target = &forgepb.GetComponentFirmwareStatusRequest_SwitchIds{SwitchIds: &forgepb.SwitchIdList{Ids: switchIDs(t.IDs)}}
	case t.Kind == KindPowerShelf && len(t.IDs) > 0:
		req.Target = &forgepb.GetComponentFirmwareStatusRequest_PowerShelfIds{PowerShelfIds: &forgepb.PowerShelfIdList{Ids: shelfIDs(t.IDs)}}
	case t.Kind == KindCompute:
		req.Target = &forgepb.GetComponentFirmwareStatusRequest_ComputeBmcMacs{ComputeBmcMacs: macs(t.MACs)}
	case t.Kind == KindSwitch:
		req.Target = &forgepb.GetComponentFirmwareStatusRequest_SwitchBmcMacs{SwitchBmcMacs: macs(t.MACs)}
	default:
		req.Target = &forgepb.GetComponentFirmwareStatusRequest_PowerShelfPmcMacs{PowerShelfPmcMacs: macs(t.MACs)}
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.GetComponentFirmwareStatus(cctx, req)
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]FirmwareStatus, 0, len(res.GetStatuses()))
	for _, s := range res.GetStatuses() {
		key := resultKey(s.GetResult())
		fs := FirmwareStatus{Key: key, ID: s.GetResult().GetComponentId(), State: firmwareState(s.GetState()), TargetVersion: s.GetTargetVersion(), Error: s.GetResult().GetError()}
		if fs.State != FirmwareFailed && fs.State != FirmwareCancelled {
			fs.Err = itemErr(method, key, s.GetResult())
		}
		out = append(out, fs)
	}
	return out, nil
}

func firmwareState(s forgepb.FirmwareUpdateState) FirmwareState {
	switch s {
	case forgepb.FirmwareUpdateState_FW_STATE_QUEUED:
		return FirmwareQueued
	case forgepb.FirmwareUpdateState_FW_STATE_IN_PROGRESS:
		return FirmwareInProgress
	case forgepb.FirmwareUpdateState_FW_STATE_VERIFYING:
		return FirmwareVerifying
	case forgepb.FirmwareUpdateState_FW_STATE_COMPLETED:
		return FirmwareCompleted
	case forgepb.FirmwareUpdateState_FW_STATE_FAILED:
		return FirmwareFailed
	case forgepb.FirmwareUpdateState_FW_STATE_CANCELLED:
		return FirmwareCancelled
	}
	return FirmwareUnknown
}

// Methods returns the names of the Core methods the client calls (our
// forge.Forge service holds exactly those), for the metrics' known labels.
func Methods() []string {
	ms := forgepb.File_forge_forge_proto.Services().ByName("Forge").Methods()
	out := make([]string, ms.Len())
	for i := range ms.Len() {
		out[i] = string(ms.Get(i).Name())
	}
	return out
}

// Installed is one device's installed firmware per sub-component, named as
// FirmwareComponents names them ("bmc", "bios", "nvos", "pmc", ...), each
// with the versions of every instance of it. Err is set when Core could
// not read the device.
type Installed struct {
	Key        string
	ID         string
	Components map[string][]string
	Err        error
}

// InstalledVersions reads the installed firmware per sub-component of
// every device of t (a compute, switch or power-shelf target): compute
// trays from ListComponentFirmwareVersions' per-sub-component list,
// switches and shelves from their exploration report's firmware_versions
// (GetComponentInventory), which is where Core keeps theirs. Devices Core
// could not read carry Err; the error is only the call's own failure.
func (c *Client) InstalledVersions(ctx context.Context, t Target) ([]Installed, error) {
	if t.Kind == KindCompute {
		dvs, err := c.FirmwareVersions(ctx, t)
		if err != nil {
			return nil, err
		}
		out := make([]Installed, 0, len(dvs))
		for _, d := range dvs {
			in := Installed{Key: d.Key, ID: d.ID, Err: d.Err, Components: make(map[string][]string, len(d.Components))}
			for _, cv := range d.Components {
				if have, ok := in.Components[cv.Component]; ok {
					in.Components[cv.Component] = append(have, cv.Versions...)
				} else {
					// The reply's own slice, clipped so that a second entry
					// of the component appends to a copy.
					in.Components[cv.Component] = slices.Clip(cv.Versions)
				}
			}
			out = append(out, in)
		}
		return out, nil
	}
	if t.Kind != KindSwitch && t.Kind != KindPowerShelf {
		return nil, &Error{Method: "GetComponentInventory", Class: ErrRejected, Msg: fmt.Sprintf("installed versions are read by device kind, not %s", t.Kind)}
	}
	invs, err := c.Inventory(ctx, t)
	if err != nil {
		return nil, err
	}
	out := make([]Installed, 0, len(invs))
	for _, inv := range invs {
		in := Installed{Key: inv.Key, ID: inv.ID, Err: inv.Err, Components: map[string][]string{}}
		if inv.Err == nil {
			in.Components = inv.InstalledComponents(t.Kind)
		}
		out = append(out, in)
	}
	return out, nil
}

// InstalledComponents is the installed firmware per sub-component that
// the exploration report of a switch or shelf of kind holds, as
// InstalledVersions reads it: firmware_versions by lowercase name and, for
// a switch without a "bmc" entry, its BMC version by Flow's precedence.
// The inventory sync uses it on the report it reads anyway, so that it
// makes no second call.
func (inv Inventory) InstalledComponents(kind Kind) map[string][]string {
	out := make(map[string][]string, len(inv.FirmwareVersions))
	for k, v := range inv.FirmwareVersions {
		if v != "" {
			out[strings.ToLower(k)] = []string{v}
		}
	}
	if _, ok := out["bmc"]; !ok && kind == KindSwitch {
		if v := inv.BMCFirmware(); v != "" {
			out["bmc"] = []string{v}
		}
	}
	return out
}

// DesiredFirmware is one entry of the desired versions Core holds: for
// devices of Vendor and Model ("" any), Components maps a sub-component
// name (as Core keys it) to its desired version.
type DesiredFirmware struct {
	Vendor, Model string
	Components    map[string]string
}

// SetFirmwareUpdateWindow tells Core the time window [start, end) in which
// it may update the firmware of the machines (compute trays) machineIDs
// (SetFirmwareUpdateTimeWindow), which Core enforces too.
func (c *Client) SetFirmwareUpdateWindow(ctx context.Context, machineIDs []string, start, end time.Time) error {
	const method = "SetFirmwareUpdateTimeWindow"
	if err := c.ready(method); err != nil {
		return err
	}
	if len(machineIDs) == 0 || !end.After(start) {
		return &Error{Method: method, Class: ErrRejected, Msg: "want machines and a window that ends after it starts"}
	}
	req := &forgepb.SetFirmwareUpdateTimeWindowRequest{StartTimestamp: timestamppb.New(start), EndTimestamp: timestamppb.New(end)}
	for _, id := range machineIDs {
		req.MachineIds = append(req.MachineIds, &forgepb.MachineId{Id: id})
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	_, err := c.rpc.SetFirmwareUpdateTimeWindow(cctx, req)
	return classify(ctx, method, err)
}

// DesiredFirmware reads the desired versions Core holds
// (GetDesiredFirmwareVersions).
func (c *Client) DesiredFirmware(ctx context.Context) ([]DesiredFirmware, error) {
	const method = "GetDesiredFirmwareVersions"
	if err := c.ready(method); err != nil {
		return nil, err
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	res, err := c.rpc.GetDesiredFirmwareVersions(cctx, &forgepb.GetDesiredFirmwareVersionsRequest{})
	if err != nil {
		return nil, classify(ctx, method, err)
	}
	out := make([]DesiredFirmware, 0, len(res.GetEntries()))
	for _, e := range res.GetEntries() {
		out = append(out, DesiredFirmware{Vendor: e.GetVendor(), Model: e.GetModel(), Components: e.GetComponentVersions()})
	}
	return out, nil
}
