package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// testLimits are the documented defaults (app/config.go).
func testLimits() Limits {
	return Limits{
		RequestBytes: 4 << 20, NameBytes: 256, SerialBytes: 128, ManufacturerBytes: 128, MACBytes: 64,
		DescriptionBytes: 16384, DocumentBytes: 1 << 20, StringBytes: 1024,
		Targets: 1000, Components: 256, Patterns: 100, ListItems: 1000, PageSize: 1000, RackComponentsPage: 100,
		Listings: 4, Submits: 2, RequestBytesInFlight: 32 << 20,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
	}
}

// listingFlow answers GetListOfRacks with an empty page and counts the
// calls that reached it.
type listingFlow struct {
	flowv1connect.UnimplementedFlowHandler
	mu    sync.Mutex
	calls int
}

func (f *listingFlow) GetListOfRacks(context.Context, *flowv1.GetListOfRacksRequest) (*flowv1.GetListOfRacksResponse, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	return &flowv1.GetListOfRacksResponse{}, nil
}

func newTestHandler(t testing.TB, lim Limits) (http.Handler, *listingFlow) {
	t.Helper()
	svc := &listingFlow{}
	h := NewHandler(slog.New(slog.DiscardHandler), svc, adminv1connect.UnimplementedAdminServiceHandler{}, Options{Limits: lim})
	return h, svc
}

// nested returns a JSON document of n nested arrays, padded with spaces to
// size bytes when size is larger.
func nested(n, size int) []byte {
	b := bytes.Repeat([]byte("["), n)
	b = append(b, bytes.Repeat([]byte("]"), n)...)
	if pad := size - len(b); pad > 0 {
		b = append(b, bytes.Repeat([]byte(" "), pad)...)
	}
	return b
}

func TestCheckJSONDepth(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		doc  string
		ok   bool
	}{
		{name: "Flat", doc: `{"a":1}`, ok: true},
		{name: "AtLimit", doc: string(nested(MaxJSONDepth, 0)), ok: true},
		{name: "OverLimit", doc: string(nested(MaxJSONDepth+1, 0))},
		{name: "ObjectsOverLimit", doc: strings.Repeat(`{"a":`, MaxJSONDepth+1) + "1" + strings.Repeat("}", MaxJSONDepth+1)},
		{name: "BracketsInStrings", doc: `{"a":"` + strings.Repeat("[{", 500) + `"}`, ok: true},
		{name: "EscapedQuote", doc: `{"a":"\"[[[` + strings.Repeat("[", 500) + `"}`, ok: true},
		{name: "EscapedBackslash", doc: `{"a":"\\"` + `,"b":` + string(nested(MaxJSONDepth+1, 0)) + `}`},
		{name: "Unterminated", doc: `{"a":"` + strings.Repeat("[", 500), ok: true},
		{name: "SiblingsDoNotAdd", doc: strings.Repeat(string(nested(MaxJSONDepth-1, 0))+",", 50), ok: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkJSONDepth([]byte(tt.doc))
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, fmt.Sprintf("nested deeper than %d levels", MaxJSONDepth))
		})
	}
}

// threadCPU returns the CPU time the calling OS thread has used.
func threadCPU(t testing.TB) time.Duration {
	t.Helper()
	const rusageThread = 1 // RUSAGE_THREAD (Linux)
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(rusageThread, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serveCPU serves req on h in this goroutine, locked to its thread, and
// returns the answer and the thread's CPU time it cost.
func serveCPU(t testing.TB, h http.Handler, req *http.Request) (*httptest.ResponseRecorder, time.Duration) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rec := httptest.NewRecorder()
	start := threadCPU(t)
	h.ServeHTTP(rec, req)
	return rec, threadCPU(t) - start
}

func connectRequest(procedure string, body []byte) *http.Request {
	req := httptest.NewRequest(http.MethodPost, procedure, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return req
}

// TestNestedJSONIsRefusedCheaply is issue 28's body: 60 KB of nested
// arrays, in an unknown field (whose path the codec looks for) and as the
// whole body, to a listing and to another method. Each is refused with
// invalid_argument naming the depth limit, in well under 100 ms of CPU (it
// once cost 45 s).
func TestNestedJSONIsRefusedCheaply(t *testing.T) {
	t.Parallel()
	h, svc := newTestHandler(t, testLimits())
	deep := nested(30000, 0)
	for _, tt := range []struct {
		name, procedure string
		body            []byte
	}{
		{name: "ListingBody", procedure: flowv1connect.FlowGetListOfRacksProcedure, body: deep},
		{name: "ListingUnknownField", procedure: flowv1connect.FlowGetListOfRacksProcedure, body: append(append([]byte(`{"with_componentz":`), deep...), '}')},
		{name: "OtherMethodUnknownField", procedure: flowv1connect.FlowGetRackInfoBySerialProcedure, body: append(append([]byte(`{"serial_info":{"x":`), deep...), "}}"...)},
		{name: "Broken", procedure: flowv1connect.FlowGetRackInfoBySerialProcedure, body: append([]byte(`{"x":`), deep[:30000]...)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec, cpu := serveCPU(t, h, connectRequest(tt.procedure, tt.body))
			t.Logf("%d bytes: %s in %v of CPU", len(tt.body), rec.Body.String(), cpu)
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			var e struct{ Code, Message string }
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
			require.Equal(t, "invalid_argument", e.Code)
			require.Contains(t, e.Message, fmt.Sprintf("nested deeper than %d levels", MaxJSONDepth))
			require.Less(t, cpu, 100*time.Millisecond)
		})
	}
	require.Zero(t, svc.calls, "a nested body reached the handler")
}

// TestUnknownFieldPathIsLinear: a 4 MiB body within the depth limit whose
// unknown field holds two million values costs the path search one pass
// (the old search re-rendered the path at every token).
func TestUnknownFieldPathIsLinear(t *testing.T) {
	t.Parallel()
	h, _ := newTestHandler(t, testLimits())
	depth := MaxJSONDepth - 2
	body := []byte(`{"pagination":{"limit":5},"with_componentz":` + strings.Repeat("[", depth))
	body = append(body, bytes.Repeat([]byte("1,"), (4<<20-len(body)-depth-16)/2)...)
	body = append(body, '1')
	body = append(body, strings.Repeat("]", depth)+"}"...)
	req := connectRequest(flowv1connect.FlowGetListOfRacksProcedure, body)
	req.Header.Set(StrictHeader, "true")
	rec, cpu := serveCPU(t, h, req)
	t.Logf("%d bytes: %.200s in %v of CPU", len(body), rec.Body.String(), cpu)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "with_componentz: unknown field")
	// Generous: one pass over 4 MiB is tens of milliseconds.
	require.Less(t, cpu, 5*time.Second)
}

// TestNestedBodiesLeaveListingsAnswering: while 8 clients keep sending
// 4 MiB nested bodies to GetListOfRacks, an ordinary GetListOfRacks
// answers in its normal time (issue 28: four such bodies blocked every
// listing for 44 s).
func TestNestedBodiesLeaveListingsAnswering(t *testing.T) {
	t.Parallel()
	h, _ := newTestHandler(t, testLimits())
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	url := srv.URL + flowv1connect.FlowGetListOfRacksProcedure
	bomb := nested(2<<20, 0)[:4<<20-16]

	listing := func() time.Duration {
		start := time.Now()
		res, err := srv.Client().Post(url, "application/json", strings.NewReader(`{"pagination":{"limit":10}}`))
		require.NoError(t, err)
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, string(raw))
		return time.Since(start)
	}
	var normal time.Duration
	for range 5 {
		normal = max(normal, listing())
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var refused sync.Map
	for i := range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bomb))
				if err != nil {
					return
				}
				req.Header.Set("Content-Type", "application/json")
				res, err := srv.Client().Do(req)
				if err != nil {
					continue
				}
				raw, _ := io.ReadAll(res.Body)
				res.Body.Close()
				refused.Store(i, string(raw))
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	var worst time.Duration
	for range 20 {
		worst = max(worst, listing())
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	n := 0
	refused.Range(func(_, v any) bool {
		require.Contains(t, v, "invalid_argument")
		require.Contains(t, v, "nested deeper than")
		n++
		return true
	})
	require.Positive(t, n, "no nested body was answered")
	t.Logf("slowest listing: %v alone, %v among 8 nested 4 MiB senders", normal, worst)
	// Generous for a loaded CI machine (the senders share its CPU); it was
	// 44 s.
	require.Less(t, worst, max(2*time.Second, 20*normal))
}

// jsonPathAtReference is the path search as it was before issue 28
// (re-rendering the whole path at every token): the linear one must agree
// with it.
func jsonPathAtReference(data []byte, off int) string {
	type frame struct {
		obj     bool
		keyNext bool
		key     string
		idx     int
	}
	var stack []*frame
	render := func() string {
		var b strings.Builder
		for _, f := range stack {
			switch {
			case f.obj && f.key != "":
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			case !f.obj && f.idx >= 0:
				fmt.Fprintf(&b, "[%d]", f.idx)
			}
		}
		return b.String()
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	last := ""
	for {
		tok, err := dec.Token()
		if err != nil {
			return last
		}
		end := int(dec.InputOffset())
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		isKey := false
		switch t := tok.(type) {
		case json.Delim:
			if t == '}' || t == ']' {
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].obj {
					stack[len(stack)-1].keyNext = true
				}
				continue
			}
		case string:
			if top != nil && top.obj && top.keyNext {
				top.key, top.keyNext, isKey = t, false, true
			}
		}
		if !isKey && top != nil && !top.obj {
			top.idx++
		}
		last = render()
		if end > off {
			return last
		}
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, &frame{obj: d == '{', keyNext: d == '{', idx: -1})
			continue
		}
		if !isKey && top != nil && top.obj {
			top.keyNext = true
		}
	}
}

// decodedDepth returns the deepest nesting of a valid JSON document.
func decodedDepth(data []byte) (int, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return deepest, true
		}
		if err != nil {
			return 0, false
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
				deepest = max(deepest, depth)
			} else {
				depth--
			}
		}
	}
}

var strictJSONSeeds = []string{
	`{"rack":{"info":{"name":"x"},"components":[{"position":{"slot_id":1}},{"position":{"slot_id":"bad"}}]},"n":[1,[2,3]]}`,
	`{"pagination":{"limit":`,
	`{"serial_info":{"manufacturer":"m","serial_number":"s","nmae":[1,{"a":[2]}]}}`,
	`[{"a":1}]`,
	`{"a":"\"[[[","b":"\\"}`,
	`{"rack":{"info":{"name":"x"}}}} ]`,
	`{"a":1, "rack":{"b":[{"c":"}"}],"info":{"name":"x"} ,"d":null},"e":{}}`,
	string(nested(MaxJSONDepth, 0)),
	string(nested(MaxJSONDepth+1, 0)),
	`{"with_componentz":` + string(nested(MaxJSONDepth-1, 0)) + `}`,
	`{"with_componentz":` + string(nested(5000, 0)) + `}`,
	strings.Repeat(`{"a":`, MaxJSONDepth+1),
}

// FuzzStrictJSON feeds the JSON codec documents at and past the depth
// limit: the depth check agrees with a real decoder's depth, a document
// over the limit is refused naming it, the linear path search agrees with
// the old quadratic one, and nothing panics.
func FuzzStrictJSON(f *testing.F) {
	for _, s := range strictJSONSeeds {
		f.Add([]byte(s), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, off uint16) {
		depthErr := checkJSONDepth(data)
		if d, ok := decodedDepth(data); ok {
			require.Equal(t, d > MaxJSONDepth, depthErr != nil, "depth %d: %v", d, depthErr)
		}
		for _, m := range []proto.Message{&flowv1.GetRackInfoBySerialRequest{}, &flowv1.CreateExpectedRackRequest{}, &flowv1.GetListOfRacksRequest{}} {
			err := jsonCodec{}.Unmarshal(data, m)
			if depthErr != nil {
				require.ErrorContains(t, err, "nested deeper than")
			}
			if err == nil {
				// Cutting out the unknown fields one by one decodes what
				// dropping them does.
				takeUnknownJSONFields(m)
				lax := m.ProtoReflect().New().Interface()
				require.NoError(t, protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, lax))
				require.True(t, proto.Equal(lax, m), "%v != %v", m, lax)
			}
		}
		if depthErr == nil {
			for _, o := range []int{int(off), len(data)} {
				require.Equal(t, jsonPathAtReference(data, o), jsonPathAt(data, o), "offset %d", o)
			}
		}
	})
}

func TestStrictJSONSeeds(t *testing.T) {
	t.Parallel()
	for _, s := range strictJSONSeeds {
		for off := 0; off <= len(s); off += max(1, len(s)/40) {
			if checkJSONDepth([]byte(s)) == nil {
				require.Equal(t, jsonPathAtReference([]byte(s), off), jsonPathAt([]byte(s), off), "%.80s at %d", s, off)
			}
		}
	}
}

// BenchmarkNestedJSON measures the CPU a 60 KB nested body costs the
// server, decoding to answer (issue 28: 45 s before the depth limit).
func BenchmarkNestedJSON(b *testing.B) {
	h, _ := newTestHandler(b, testLimits())
	body := append(append([]byte(`{"with_componentz":`), nested(30000, 0)...), '}')
	var cpu time.Duration
	for b.Loop() {
		rec, c := serveCPU(b, h, connectRequest(flowv1connect.FlowGetRackInfoBySerialProcedure, body))
		if rec.Code != http.StatusBadRequest {
			b.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
		cpu += c
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

// TestRequestBytesInFlight: bodies take their bytes from the shared budget
// while their handler runs; a call that would go over waits for others to
// give back, and past inFlightWait is refused with resource_exhausted
// before its body is read whole. A call alone may take more than the
// budget.
func TestRequestBytesInFlight(t *testing.T) {
	t.Parallel()
	lim := testLimits()
	lim.RequestBytesInFlight = 1 << 20
	hold := make(chan struct{})
	type result struct {
		n    int
		err  error
		took time.Duration
	}
	results := make(chan result, 8)
	h := lim.limitInFlight(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		b, err := io.ReadAll(r.Body)
		results <- result{n: len(b), err: err, took: time.Since(start)}
		if r.Header.Get("Hold") != "" {
			<-hold
		}
	}))
	serve := func(size int, length bool, header string) {
		req := httptest.NewRequest(http.MethodPost, "/x", bytes.NewReader(make([]byte, size)))
		if !length {
			req.ContentLength = -1
			req.Body = io.NopCloser(bytes.NewReader(make([]byte, size)))
		}
		if header != "" {
			req.Header.Set("Hold", header)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
	}

	// Alone, a body over the whole budget is served.
	serve(2<<20, true, "")
	r := <-results
	require.NoError(t, r.err)
	require.Equal(t, 2<<20, r.n)

	// A holds 600 KB; B (600 KB) waits until A's handler returns.
	go serve(600<<10, true, "yes")
	require.NoError(t, (<-results).err)
	go serve(600<<10, false, "")
	time.Sleep(300 * time.Millisecond)
	select {
	case r := <-results:
		t.Fatalf("B finished while A held the budget: %+v", r)
	default:
	}
	close(hold)
	r = <-results
	require.NoError(t, r.err)
	require.Equal(t, 600<<10, r.n)

	// C holds 900 KB for good; D reads what fits beside it, waits
	// inFlightWait and is refused, with resource_exhausted naming the
	// setting.
	hold = make(chan struct{})
	defer close(hold)
	go serve(900<<10, false, "yes")
	require.NoError(t, (<-results).err)
	serve(600<<10, true, "")
	r = <-results
	require.Less(t, r.n, 600<<10-inFlightPiece)
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(r.err), r.err)
	require.ErrorContains(t, r.err, "FLOW_MAX_REQUEST_BYTES_IN_FLIGHT")
	require.GreaterOrEqual(t, r.took, inFlightWait)
	// Small bodies still fit beside C.
	serve(100<<10, false, "")
	require.NoError(t, (<-results).err)
}
