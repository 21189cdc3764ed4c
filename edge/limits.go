package edge

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// Limits bound what one request may cost the server (docs/limits.md). Every
// field is a FLOW_ setting (app reads them and holds the defaults); every
// field must be set. They are enforced before a handler runs: the body size
// by the HTTP layer and Connect (compressed and decompressed), the strings
// and lists by checkRequest over the decoded message.
type Limits struct {
	RequestBytes int // FLOW_MAX_REQUEST_BYTES: one request message, compressed and decompressed

	NameBytes         int // FLOW_MAX_NAME_BYTES: name and *_name fields
	SerialBytes       int // FLOW_MAX_SERIAL_BYTES: serial_number
	ManufacturerBytes int // FLOW_MAX_MANUFACTURER_BYTES: manufacturer and model
	MACBytes          int // FLOW_MAX_MAC_BYTES: mac_address fields
	DescriptionBytes  int // FLOW_MAX_DESCRIPTION_BYTES: description
	DocumentBytes     int // FLOW_MAX_DOCUMENT_BYTES: *_json documents (rule definitions)
	StringBytes       int // FLOW_MAX_STRING_BYTES: every other string field

	Targets    int // FLOW_MAX_TARGETS: targets, identifiers and IDs per request
	Components int // FLOW_MAX_COMPONENTS_PER_RACK: components of one rack in a request
	Patterns   int // FLOW_MAX_FILTER_PATTERNS: patterns of one filter
	ListItems  int // FLOW_MAX_LIST_ITEMS: any other repeated field
	PageSize   int // FLOW_MAX_PAGE_SIZE: pagination.limit
	// RackComponentsPage is the largest page of GetListOfRacks with
	// components: FLOW_MAX_RACK_PAGE_WITH_COMPONENTS.
	RackComponentsPage int
	// Listings is how many rack and component listings are served at once
	// (FLOW_MAX_CONCURRENT_LISTINGS); more wait their turn, at most
	// ListingQueueWait (FLOW_LISTING_QUEUE_TIMEOUT), after which they are
	// refused with resource_exhausted (0: they wait until their deadline).
	Listings         int
	ListingQueueWait time.Duration
	// ListingBuilds is how many of those pages are built from the
	// database at once (FLOW_MAX_CONCURRENT_LISTING_BUILDS), and
	// ListingCacheBytes bounds the built rack pages kept for reuse
	// (FLOW_LISTING_CACHE_BYTES, 0: none). The inventory handler applies
	// both (inventory.ListingOptions).
	ListingBuilds     int
	ListingCacheBytes int64
	// RequestBytesInFlight bounds the request body bytes the server reads
	// and holds at once, over all calls (FLOW_MAX_REQUEST_BYTES_IN_FLIGHT):
	// a call whose body would go over it waits briefly for others to
	// finish, then is refused with resource_exhausted (limitInFlight).
	RequestBytesInFlight int
	// Submits is how many task submission transactions run at once
	// (FLOW_MAX_CONCURRENT_SUBMITS, 0 there being one per CPU, at least 2);
	// submissions wait their turn, and each transaction writes those
	// waiting together.
	Submits int

	ReadHeaderTimeout time.Duration // FLOW_READ_HEADER_TIMEOUT
	ReadTimeout       time.Duration // FLOW_READ_TIMEOUT: headers and body of one request
	IdleTimeout       time.Duration // FLOW_IDLE_TIMEOUT: keep-alive connection with no request

	StrictJSON bool // FLOW_STRICT_JSON: unknown JSON fields are refused for every client
}

// envelopeOverhead is what the gRPC and Connect streaming framing adds to a
// message (flag byte and length): the body limit allows it on top of
// RequestBytes, so the message limit is the one a client meets.
const envelopeOverhead = 5

// limitBody caps every request body at the message limit plus framing, so
// an oversized body is refused once that much has been read, never read
// whole (Connect answers resource_exhausted from the *http.MaxBytesError);
// a body announced longer by Content-Length is refused unread.
func (lim Limits) limitBody(next http.Handler) http.Handler {
	max := int64(lim.RequestBytes) + envelopeOverhead
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max && isConnectUnary(r) {
			writeConnectError(w, connect.CodeResourceExhausted,
				fmt.Sprintf("request body of %d bytes is over the limit of %d (FLOW_MAX_REQUEST_BYTES)", r.ContentLength, lim.RequestBytes))
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, &clientBody{ReadCloser: r.Body, timeout: lim.ReadTimeout}, max)
		}
		next.ServeHTTP(w, r)
	})
}

// clientBody is a request body whose read errors are the client's: a body
// that does not arrive within FLOW_READ_TIMEOUT (the server's read
// deadline, HTTP/1.1's on the connection, HTTP/2's on the stream) is
// invalid_argument saying so, not Connect's deadline_exceeded (HTTP 504, a
// server-side answer), and a connection lost mid-body is canceled; neither
// message echoes the socket's addresses, which the network error's text
// names (read tcp 127.0.0.1:50051->…: i/o timeout).
type clientBody struct {
	io.ReadCloser
	timeout time.Duration
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == nil || err == io.EOF {
		return n, err
	}
	var ne net.Error
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		err = connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
			"the request body did not arrive within %s (FLOW_READ_TIMEOUT): send the whole request sooner", b.timeout))
	case errors.As(err, new(*net.OpError)):
		err = connect.NewError(connect.CodeCanceled, errors.New("the connection was lost while the request body was read"))
	}
	return n, err
}

// isConnectUnary reports whether r is a Connect unary call (not gRPC or
// gRPC-Web, whose errors travel in trailers and whose clients Connect's own
// handling answers properly).
func isConnectUnary(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return r.Method == http.MethodPost && (strings.HasPrefix(ct, "application/json") || strings.HasPrefix(ct, "application/proto"))
}

// writeConnectError answers a Connect unary call with an error, as
// Connect's own handler would (HTTP status from the code, JSON body).
func writeConnectError(w http.ResponseWriter, code connect.Code, msg string) {
	status := http.StatusBadRequest
	if code == connect.CodeResourceExhausted {
		status = http.StatusTooManyRequests
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"code":%q,"message":%q}`, code.String(), msg)
}

// ApplyTimeouts sets srv's header, body and idle timeouts.
func (lim Limits) ApplyTimeouts(srv *http.Server) {
	srv.ReadHeaderTimeout = lim.ReadHeaderTimeout
	srv.ReadTimeout = lim.ReadTimeout
	srv.IdleTimeout = lim.IdleTimeout
}

// stringLimit returns the byte limit of a string field and the setting that
// holds it, by the field's name (its kind).
func (lim Limits) stringLimit(name string) (int, string) {
	switch {
	case name == "description":
		return lim.DescriptionBytes, "FLOW_MAX_DESCRIPTION_BYTES"
	case strings.HasSuffix(name, "_json"):
		return lim.DocumentBytes, "FLOW_MAX_DOCUMENT_BYTES"
	case name == "serial_number":
		return lim.SerialBytes, "FLOW_MAX_SERIAL_BYTES"
	case name == "manufacturer", name == "model":
		return lim.ManufacturerBytes, "FLOW_MAX_MANUFACTURER_BYTES"
	case strings.HasSuffix(name, "mac_address"):
		return lim.MACBytes, "FLOW_MAX_MAC_BYTES"
	case name == "name", strings.HasSuffix(name, "_name"):
		return lim.NameBytes, "FLOW_MAX_NAME_BYTES"
	}
	return lim.StringBytes, "FLOW_MAX_STRING_BYTES"
}

// listLimit returns the item limit of a repeated field and its setting.
func (lim Limits) listLimit(name string) (int, string) {
	switch name {
	case "components":
		return lim.Components, "FLOW_MAX_COMPONENTS_PER_RACK"
	case "patterns":
		return lim.Patterns, "FLOW_MAX_FILTER_PATTERNS"
	case "targets", "rack_identifiers", "component_ids", "component_uuids", "task_ids", "nvl_domain_ids", "exclude_operation_run_ids":
		return lim.Targets, "FLOW_MAX_TARGETS"
	}
	return lim.ListItems, "FLOW_MAX_LIST_ITEMS"
}

// checkRequest walks a decoded request and refuses, naming the field by its
// path (rack.components[3].info.name), any string with a NUL byte or
// invalid UTF-8 or longer than its kind's limit, any list longer than its
// limit and a pagination.limit over the page size. Messages reached through
// a nil pointer are not walked (nothing is set there). Every method gets the
// same checks, so no string can reach PostgreSQL with a NUL or overflow an
// index.
func (lim Limits) checkRequest(m proto.Message) error {
	return lim.checkMessage(m.ProtoReflect(), "")
}

func (lim Limits) checkMessage(m protoreflect.Message, prefix string) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		switch {
		case fd.IsList():
			list := v.List()
			if max, setting := lim.listLimit(name); list.Len() > max {
				err = limitError(path, fmt.Sprintf("%d items, over the limit of %d (%s)", list.Len(), max, setting))
				return false
			}
			for i := range list.Len() {
				if err = lim.checkValue(fd, list.Get(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return false
				}
			}
		case fd.IsMap():
			mp := v.Map()
			if max, setting := lim.listLimit(name); mp.Len() > max {
				err = limitError(path, fmt.Sprintf("%d entries, over the limit of %d (%s)", mp.Len(), max, setting))
				return false
			}
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				p := fmt.Sprintf("%s[%s]", path, Truncate(k.String(), 64))
				if err = lim.checkString(name, k.String(), p); err != nil {
					return false
				}
				err = lim.checkValue(fd.MapValue(), mv, p)
				return err == nil
			})
		default:
			if name == "limit" && fd.Kind() == protoreflect.Int32Kind && m.Descriptor().Name() == "Pagination" && v.Int() > int64(lim.PageSize) {
				err = limitError(path, fmt.Sprintf("%d is over the page size limit of %d (FLOW_MAX_PAGE_SIZE)", v.Int(), lim.PageSize))
				return false
			}
			err = lim.checkValue(fd, v, path)
		}
		return err == nil
	})
	return err
}

func (lim Limits) checkValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) error {
	switch fd.Kind() {
	case protoreflect.StringKind:
		name := string(fd.Name())
		if strings.HasSuffix(string(fd.ContainingMessage().Name()), "FirmwareAuthenticationData") {
			name = "credentials_json" // download tokens may be long: the document limit
		}
		return lim.checkString(name, v.String(), path)
	case protoreflect.BytesKind:
		if n := len(v.Bytes()); n > lim.DocumentBytes {
			return limitError(path, fmt.Sprintf("%d bytes, over the limit of %d (FLOW_MAX_DOCUMENT_BYTES)", n, lim.DocumentBytes))
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return lim.checkMessage(v.Message(), path)
	}
	return nil
}

func (lim Limits) checkString(name, s, path string) error {
	if max, setting := lim.stringLimit(name); len(s) > max {
		return limitError(path, fmt.Sprintf("%d bytes, over the limit of %d (%s)", len(s), max, setting))
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return limitError(path, fmt.Sprintf("contains a NUL byte at offset %d", i))
	}
	if !utf8.ValidString(s) {
		return limitError(path, "is not valid UTF-8")
	}
	return nil
}

func limitError(path, msg string) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: %s", path, msg))
}

// newLimitInterceptor refuses requests checkRequest refuses, and unknown
// JSON fields for strict clients (strictjson.go), before the handler runs.
func newLimitInterceptor(lim Limits) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			m, ok := req.Any().(proto.Message)
			if !ok {
				return next(ctx, req)
			}
			unknown := takeUnknownJSONFields(m)
			if len(unknown) > 0 && (lim.StrictJSON || strictHeader(req.Header())) {
				return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: unknown field (strict JSON: %s)", strings.Join(unknown, ", "), strictReason(lim)))
			}
			if err := lim.checkRequest(m); err != nil {
				return nil, err
			}
			if r, ok := m.(*flowv1.GetListOfRacksRequest); ok && r.GetWithComponents() {
				if err := lim.rackComponentsPage(r); err != nil {
					return nil, err
				}
			}
			return next(ctx, req)
		}
	}
}

// Truncate returns s cut to at most max bytes on a rune boundary, marked
// with its full length when cut: values echoed in errors and logs stay
// bounded.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("…(%d bytes)", len(s))
}

// handlerOptions are the Connect options that enforce the limits: the
// message size (Connect also applies it to the decompressed size, so a
// compressed bomb stops at the limit), the JSON codec that names fields in
// decode errors and remembers unknown fields, and the request checks, run
// innermost (after authorization, before the handler).
func (lim Limits) handlerOptions() []connect.HandlerOption {
	memo := newGzipMemo(gzipMemoMaxBytes)
	return []connect.HandlerOption{
		connect.WithReadMaxBytes(lim.RequestBytes),
		// Large answers' compressed forms are remembered (gzipmemo.go).
		connect.WithCompression("gzip",
			func() connect.Decompressor { return &boundedGzip{max: int64(lim.RequestBytes)} },
			memo.compressor),
		connect.WithCodec(jsonCodec{}),
		connect.WithCodec(jsonCharsetCodec{}),
		connect.WithInterceptors(newLimitInterceptor(lim)),
	}
}

// JSONCodecs are the handler options that install the server's JSON codec
// (field paths in decode errors, unknown fields remembered, pre-encoded
// answers written as they are: PreencodedJSONField), for a handler built
// outside NewHandler (tests of a domain's handler).
func JSONCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithCodec(jsonCodec{}), connect.WithCodec(jsonCharsetCodec{})}
}

// MaxErrorMessage bounds the text of an error answered to a client, and
// MaxLoggedError the text of an error logged: user input echoed in them is
// cut (with its length).
const (
	MaxErrorMessage = 1024
	MaxLoggedError  = 4096
)

// boundedError returns ce, or a copy with its message cut to
// MaxErrorMessage bytes.
func boundedError(ce *connect.Error) *connect.Error {
	if len(ce.Message()) <= MaxErrorMessage {
		return ce
	}
	out := connect.NewError(ce.Code(), errors.New(Truncate(ce.Message(), MaxErrorMessage)))
	for _, d := range ce.Details() {
		out.AddDetail(d)
	}
	for k, v := range ce.Meta() {
		out.Meta()[k] = v
	}
	return out
}

// boundedGzip is a gzip decompressor that stops once it has produced more
// than max bytes: Connect's own limit refuses the message at max, then
// would decompress the rest of a bomb only to count it (CPU in proportion
// to the expansion); this one ends that count at once.
type boundedGzip struct {
	gz        *gzip.Reader
	max, read int64
}

func (b *boundedGzip) Read(p []byte) (int, error) {
	if b.read > b.max {
		return 0, fmt.Errorf("decompressed body is over the limit of %d bytes (FLOW_MAX_REQUEST_BYTES)", b.max)
	}
	n, err := b.gz.Read(p)
	b.read += int64(n)
	return n, err
}

func (b *boundedGzip) Reset(r io.Reader) error {
	b.read = 0
	if b.gz == nil {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		b.gz = gz
		return nil
	}
	return b.gz.Reset(r)
}

func (b *boundedGzip) Close() error {
	if b.gz == nil {
		return nil
	}
	return b.gz.Close()
}

// rackComponentsPage bounds a page of racks with their components, the
// heaviest answer Flow gives (~15 KB a rack): a larger limit is refused.
func (lim Limits) rackComponentsPage(r *flowv1.GetListOfRacksRequest) error {
	if n := int(r.GetPagination().GetLimit()); n > lim.RackComponentsPage {
		return limitError("pagination.limit", fmt.Sprintf("%d racks with components is over the limit of %d (FLOW_MAX_RACK_PAGE_WITH_COMPONENTS); page with pagination.offset", n, lim.RackComponentsPage))
	}
	return nil
}

// listingProcedures are the listings whose answers can be megabytes.
var listingProcedures = map[string]bool{
	flowv1connect.FlowGetListOfRacksProcedure: true,
	flowv1connect.FlowGetComponentsProcedure:  true,
}

var errTooDeep = errors.New("too deep")

// readListing reads a listing's body whole, following its JSON depth when
// depth is not nil: a body nested too deep fails (errTooDeep) as soon as
// the level too deep arrives.
func readListing(body io.Reader, depth *jsonDepth) ([]byte, error) {
	if depth == nil {
		return io.ReadAll(body)
	}
	var buf bytes.Buffer
	chunk := make([]byte, 32<<10)
	for {
		n, err := body.Read(chunk)
		if derr := depth.scan(chunk[:n]); derr != nil {
			return nil, fmt.Errorf("%w: %w", errTooDeep, derr)
		}
		buf.Write(chunk[:n])
		if err == io.EOF {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// limitListings serves at most lim.Listings rack and component listings at
// once, decoding to writing the answer; the others wait, so concurrent
// listers hold a few pages in memory, not one each. A listing that waited
// lim.ListingQueueWait for a slot is refused with resource_exhausted
// (HTTP 429, gRPC RESOURCE_EXHAUSTED: a retryable "busy", naming the
// settings) instead of piling up behind the others; Connect answers it in
// the call's own protocol (the refusal is the request body's read error,
// as limitInFlight's).
func (lim Limits) limitListings(next http.Handler) http.Handler {
	slots := make(chan struct{}, lim.Listings)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !listingProcedures[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		// Read the (small, bounded) request first: waiting for a slot must
		// not count against the client's FLOW_READ_TIMEOUT. A JSON body
		// nested too deep is refused as it arrives, before it waits for or
		// holds a slot (issue 28: four such bodies once held every slot
		// for 44 s).
		var depth *jsonDepth
		if isConnectUnary(r) && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") && r.Header.Get("Content-Encoding") == "" {
			depth = &jsonDepth{}
		}
		body, err := readListing(r.Body, depth)
		if errors.Is(err, errTooDeep) {
			writeConnectError(w, connect.CodeInvalidArgument, strings.TrimPrefix(err.Error(), errTooDeep.Error()+": "))
			return
		}
		if err != nil {
			next.ServeHTTP(w, r) // the body errs again: Connect answers it
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var queued <-chan time.Time
		if lim.ListingQueueWait > 0 {
			t := time.NewTimer(lim.ListingQueueWait)
			defer t.Stop()
			queued = t.C
		}
		select {
		case slots <- struct{}{}:
		case <-r.Context().Done():
			return
		case <-queued:
			r.Body = io.NopCloser(errReader{err: listingsBusy(lim)})
			next.ServeHTTP(w, r)
			return
		}
		defer func() { <-slots }()
		// A client that left while waiting gets no work done for it,
		// whichever way the select above went.
		if r.Context().Err() != nil {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// listingsBusy is the refusal of a listing that found no slot within
// lim.ListingQueueWait.
func listingsBusy(lim Limits) error {
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"the server is busy listing: no listing slot freed within %s (FLOW_LISTING_QUEUE_TIMEOUT) of the %d served at once (FLOW_MAX_CONCURRENT_LISTINGS); retry later, or page through smaller pages",
		lim.ListingQueueWait, lim.Listings))
}

// errReader is a request body whose read fails with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// inFlightWait is how long a call waits for room in
// FLOW_MAX_REQUEST_BYTES_IN_FLIGHT before it is refused.
const inFlightWait = 2 * time.Second

// inFlightPiece is the most a body of unknown length takes from the budget
// for one read.
const inFlightPiece = 32 << 10

// byteBudget counts the request body bytes held by calls in progress.
type byteBudget struct {
	max int64

	mu    sync.Mutex
	used  int64
	freed chan struct{} // closed, and replaced, whenever bytes are released
}

// acquire takes n more bytes of the budget for a call that holds mine,
// waiting up to inFlightWait (or until ctx ends) for other calls to release
// theirs; it reports whether it got them. A call alone may take more than
// the whole budget (one body is bounded by FLOW_MAX_REQUEST_BYTES), so a
// budget below the message limit serialises large bodies instead of
// refusing them all.
func (b *byteBudget) acquire(ctx context.Context, n, mine int64) bool {
	var timer *time.Timer
	for {
		b.mu.Lock()
		if b.used == mine || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return true
		}
		freed := b.freed
		b.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(inFlightWait)
			defer timer.Stop()
		}
		select {
		case <-freed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// budgetBody is a request body that takes from the budget what it reads
// and gives it back when the call ends. A body with a Content-Length takes
// all of it at its first read, so concurrent large bodies are admitted
// whole or wait, never each half read and starving the others; a body of
// unknown length (chunked, gRPC) takes a piece before each read.
type budgetBody struct {
	io.ReadCloser
	ctx    context.Context
	budget *byteBudget
	length int64 // Content-Length, or -1
	limit  int64 // most bytes one body may read (the message limit plus framing)
	held   int64
	err    error
}

func (b *budgetBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// Never hold more than one body can read: MaxBytesReader below stops
	// it just past the limit.
	room := b.limit + 1 - b.held
	if b.length >= 0 {
		if b.held == 0 && b.length > 0 && !b.take(min(b.length, room)) {
			return 0, b.err
		}
		return b.ReadCloser.Read(p)
	}
	// A piece at a time: a reader's buffer may be far larger than what is
	// left of the body.
	want := min(int64(len(p)), room, inFlightPiece)
	if want <= 0 {
		return b.ReadCloser.Read(p)
	}
	if !b.take(want) {
		return 0, b.err
	}
	n, err := b.ReadCloser.Read(p[:want])
	// Give back what was taken but not read.
	if unread := want - int64(n); unread > 0 {
		b.budget.release(unread)
		b.held -= unread
	}
	return n, err
}

func (b *budgetBody) take(n int64) bool {
	if !b.budget.acquire(b.ctx, n, b.held) {
		b.err = connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"the server is holding its limit of %d bytes of requests at once (FLOW_MAX_REQUEST_BYTES_IN_FLIGHT); retry shortly", b.budget.max))
		return false
	}
	b.held += n
	return true
}

// limitInFlight bounds the request body bytes held by all calls at once to
// lim.RequestBytesInFlight (budgetBody): each call's bytes count from when
// they are read to when its handler returns, since the decoded request
// lives that long.
func (lim Limits) limitInFlight(next http.Handler) http.Handler {
	budget := &byteBudget{max: int64(lim.RequestBytesInFlight), freed: make(chan struct{})}
	limit := int64(lim.RequestBytes) + envelopeOverhead
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body := &budgetBody{ReadCloser: r.Body, ctx: r.Context(), budget: budget, length: r.ContentLength, limit: limit}
		r.Body = body
		defer func() { budget.release(body.held) }()
		next.ServeHTTP(w, r)
	})
}
