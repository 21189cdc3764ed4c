package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// Reads under load (issue 49, docs/bench.md "Reads and the safety path"):
// --readers clients call a read method as fast as they can for
// --read-duration, in the protocol --read-protocol, while the workload runs
// (or alone, with --workload none). With --read-leak, a leak is raised on a
// compute tray a third of the way in, and the bench reports when its first
// forced power-off reached the simulator. The leak check's cycles are read
// from the simulator's journal: each cycle lists the leaking switches
// (FindSwitchIds), and the bench turns the inventory sync's schedule off
// (a sync would list them too), having linked the racks itself.

// readProtocols are the --read-protocol names.
var readProtocols = []string{"json", "proto", "grpc"}

// readMethods are the --read-method names: GetListOfRacks pages, one rack
// by ID (GetRackInfoByID) or one rack's tasks (ListTasks by rack_id).
var readMethods = []string{"racks", "rack", "tasks"}

// ReadResult is what the readers measured.
type ReadResult struct {
	Readers        int     `json:"readers"`
	Protocol       string  `json:"protocol"`
	Method         string  `json:"method"`
	WithComponents bool    `json:"with_components"`
	Page           int     `json:"page_size,omitempty"`
	Seconds        float64 `json:"seconds"`
	Calls          int     `json:"calls"`
	Errors         int     `json:"errors"`
	// ErrorCodes counts the failed calls by code (resource_exhausted…).
	ErrorCodes   map[string]int `json:"error_codes,omitempty"`
	CallsPerSec  float64        `json:"calls_per_second"`
	P50Ms        float64        `json:"p50_ms"`
	P99Ms        float64        `json:"p99_ms"`
	MaxMs        float64        `json:"max_ms"`
	BytesPerCall int64          `json:"bytes_per_call"`
	PeakRSSBytes int64          `json:"server_peak_rss_bytes"` // VmHWM of the server child from the readers' start
	// CPU seconds of the server child and the private PostgreSQL during
	// the reads, and the server's per answered call: what a call costs,
	// which a loaded machine changes far less than its latency.
	ServerCPUSeconds   float64 `json:"server_cpu_seconds"`
	PostgresCPUSeconds float64 `json:"postgres_cpu_seconds"`
	ServerCPUMsPerCall float64 `json:"server_cpu_ms_per_call"`
	LeakChecks         int     `json:"leak_checks"` // leak-check cycles seen in the simulator's journal
	LeakIntervalP50Ms  float64 `json:"leak_check_interval_p50_ms"`
	LeakIntervalMaxMs  float64 `json:"leak_check_interval_max_ms"`
	// LeakPowerOffMs is from raising the leak to the first power-control
	// call naming the leaking tray (--read-leak); 0: no leak raised, -1: none
	// within the run.
	LeakPowerOffMs float64 `json:"leak_first_power_off_ms,omitempty"`
}

// readPhase is one phase of the readers: a method in a protocol.
type readPhase struct {
	protocol, method string
	withComponents   bool
}

func (p readPhase) String() string {
	if p.withComponents {
		return p.method + "+components over " + p.protocol
	}
	return p.method + " over " + p.protocol
}

// parseReadPhases returns the phases of --read-protocol and --read-method
// (comma-separated lists; a method suffixed "+components" asks for them,
// as --with-components does for every method): each method in each
// protocol, methods outermost.
func parseReadPhases(protocols, methods string, withComponents bool) ([]readPhase, error) {
	var phases []readPhase
	for m := range strings.SplitSeq(methods, ",") {
		m = strings.TrimSpace(m)
		base, comps := strings.CutSuffix(m, "+components")
		if !slices.Contains(readMethods, base) {
			return nil, fmt.Errorf("--read-method %q: want one of %s (optionally suffixed +components)", m, strings.Join(readMethods, ", "))
		}
		for p := range strings.SplitSeq(protocols, ",") {
			p = strings.TrimSpace(p)
			if !slices.Contains(readProtocols, p) {
				return nil, fmt.Errorf("--read-protocol %q: want one of %s", p, strings.Join(readProtocols, ", "))
			}
			phases = append(phases, readPhase{protocol: p, method: base, withComponents: withComponents || comps})
		}
	}
	return phases, nil
}

// readPhases runs the read phases one after the other (the leak, with
// --read-leak, in the first) and records them in res.
func (b *Bench) readPhases(ctx context.Context, res *Result, racks []inventory.Rack) error {
	for i, p := range b.o.readPhases {
		l, err := b.startReads(ctx, racks, p, b.o.readLeak && i == 0)
		if err != nil {
			return err
		}
		r, err := l.finish(ctx)
		if err != nil {
			return err
		}
		if i == 0 {
			res.Reads = r
		}
		if len(b.o.readPhases) > 1 {
			res.ReadPhases = append(res.ReadPhases, r)
		}
	}
	return nil
}

// readResults returns the read phases' results, in order.
func (r *Result) readResults() []*ReadResult {
	if len(r.ReadPhases) > 0 {
		return r.ReadPhases
	}
	if r.Reads != nil {
		return []*ReadResult{r.Reads}
	}
	return nil
}

// readLoad is the readers of one run.
type readLoad struct {
	b       *Bench
	phase   readPhase
	leak    bool
	start   time.Time
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	lat     []time.Duration
	codes   map[string]int
	bytes   atomic.Int64
	leakAt  time.Time
	leakID  string
	leakErr error
	cpu0    benchCPU
}

// startServerRSSWindow resets the server child's peak RSS (VmHWM), so the
// readers' peak is not the set-up's. It fails quietly where the kernel
// does not allow it (the peak then covers the set-up too).
func startServerRSSWindow(pid int) {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// startReads starts the readers on racks (and the leak, with --read-leak).
func (b *Bench) startReads(ctx context.Context, racks []inventory.Rack, phase readPhase, leak bool) (*readLoad, error) {
	o := b.o
	call, err := b.readCall(racks, phase)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &readLoad{b: b, phase: phase, leak: leak, cancel: cancel, codes: map[string]int{}}
	b.sims.NICo.Journal().Reset()
	startServerRSSWindow(b.server.Process.Pid)
	l.cpu0 = b.cpu()
	l.start = time.Now()
	b.progressf("%d readers: %s for %s", o.readers, phase, o.readDuration)
	for k := range o.readers {
		l.wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				t0 := time.Now()
				size, err := call(ctx, k, n)
				d := time.Since(t0)
				if ctx.Err() != nil {
					return
				}
				l.mu.Lock()
				if err != nil {
					l.codes[connect.CodeOf(err).String()]++
				} else {
					l.lat = append(l.lat, d)
				}
				l.mu.Unlock()
				l.bytes.Add(int64(size))
			}
		})
	}
	if leak {
		l.wg.Go(func() { l.raiseLeak(ctx) })
	}
	return l, nil
}

// raiseLeak raises a leak on a powered-on compute tray a third of the way
// into the reads and records it.
func (l *readLoad) raiseLeak(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(l.b.o.readDuration / 3):
	}
	for _, st := range l.b.sims.NICo.States() {
		if st.Kind == "compute" && st.ID != "" {
			l.mu.Lock()
			l.leakID, l.leakAt = st.ID, time.Now()
			l.mu.Unlock()
			if err := l.b.sims.NICo.SetLeak(st.ID, true); err != nil {
				l.mu.Lock()
				l.leakErr = err
				l.mu.Unlock()
			}
			l.b.progressf("leak raised on compute tray %s", st.ID)
			return
		}
	}
	l.mu.Lock()
	l.leakErr = errors.New("no linked compute tray to raise a leak on")
	l.mu.Unlock()
}

// finish waits out the read duration, stops the readers and measures.
func (l *readLoad) finish(ctx context.Context) (*ReadResult, error) {
	o := l.b.o
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(l.start.Add(o.readDuration))):
	}
	l.cancel()
	l.wg.Wait()
	elapsed := time.Since(l.start)
	cpu := l.b.cpu().minus(l.cpu0)
	r := &ReadResult{Readers: o.readers, Protocol: l.phase.protocol, Method: l.phase.method, WithComponents: l.phase.withComponents,
		Seconds: elapsed.Seconds(), PeakRSSBytes: PeakRSS(l.b.server.Process.Pid)}
	if l.phase.method == "racks" {
		r.Page = o.readPage
	}
	if l.leakErr != nil {
		return nil, fmt.Errorf("leak: %w", l.leakErr)
	}
	slices.Sort(l.lat)
	r.Calls = len(l.lat)
	for code, n := range l.codes {
		r.Errors += n
		if r.ErrorCodes == nil {
			r.ErrorCodes = map[string]int{}
		}
		r.ErrorCodes[code] = n
	}
	r.CallsPerSec = float64(r.Calls) / elapsed.Seconds()
	r.ServerCPUSeconds, r.PostgresCPUSeconds = cpu.server, cpu.postgres
	if r.Calls > 0 {
		r.ServerCPUMsPerCall = 1000 * cpu.server / float64(r.Calls)
	}
	if n := len(l.lat); n > 0 {
		r.P50Ms, r.P99Ms, r.MaxMs = ms(pct(l.lat, 50)), ms(pct(l.lat, 99)), ms(l.lat[n-1])
		r.BytesPerCall = l.bytes.Load() / int64(n+r.Errors)
	}
	calls := l.b.sims.NICo.Journal().Calls("FindSwitchIds")
	var gaps []time.Duration
	for i := 1; i < len(calls); i++ {
		gaps = append(gaps, calls[i].Time.Sub(calls[i-1].Time))
	}
	r.LeakChecks = len(calls)
	if len(gaps) > 0 {
		slices.Sort(gaps)
		r.LeakIntervalP50Ms, r.LeakIntervalMaxMs = ms(pct(gaps, 50)), ms(gaps[len(gaps)-1])
	}
	if l.leakID != "" {
		r.LeakPowerOffMs = -1
		for _, c := range l.b.sims.NICo.Journal().Calls("ComponentPowerControl") {
			if c.Time.After(l.leakAt) && slices.Contains(c.Devices, l.leakID) {
				r.LeakPowerOffMs = ms(c.Time.Sub(l.leakAt))
				break
			}
		}
	}
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the p-th percentile of sorted.
func pct(sorted []time.Duration, p int) time.Duration {
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// readCall returns the readers' call: reader k's n-th call, answering the
// bytes it received. Answers are read whole and not decoded (a client's
// decoding would share the machine's cores with the server).
func (b *Bench) readCall(racks []inventory.Rack, phase readPhase) (func(ctx context.Context, k, n int) (int, error), error) {
	o := b.o
	codec := &countingCodec{name: "proto"}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.readers, MaxConnsPerHost: o.readers}}
	var opts []connect.ClientOption
	switch phase.protocol {
	case "json":
		codec.name = "json"
	case "grpc":
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		hc = &http.Client{Transport: &http.Transport{Protocols: &p}}
		opts = append(opts, connect.WithGRPC())
	}
	opts = append(opts, connect.WithCodec(codec))
	// Every client asks for gzip, as connect-go's and curl --compressed do.
	c := flowv1connect.NewFlowLeanClient(hc, "http://"+b.serverAddr, opts...)
	pages := max(1, (len(racks)+o.readPage-1)/o.readPage)
	rackID := func(k, n int) *flowv1.UUID {
		return &flowv1.UUID{Id: racks[(k*7919+n)%len(racks)].ID.String()}
	}
	size := func(err error) (int, error) { return int(codec.last.Swap(0)), err }
	switch phase.method {
	case "racks":
		return func(ctx context.Context, k, n int) (int, error) {
			_, err := c.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{WithComponents: phase.withComponents,
				Pagination: &flowv1.Pagination{Offset: int32((k + n) % pages * o.readPage), Limit: int32(o.readPage)}})
			return size(err)
		}, nil
	case "rack":
		return func(ctx context.Context, k, n int) (int, error) {
			_, err := c.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{Id: rackID(k, n), WithComponents: phase.withComponents})
			return size(err)
		}, nil
	case "tasks":
		return func(ctx context.Context, k, n int) (int, error) {
			_, err := c.ListTasks(ctx, &flowv1.ListTasksRequest{RackId: rackID(k, n), Pagination: &flowv1.Pagination{Limit: 100}})
			return size(err)
		}, nil
	}
	return nil, fmt.Errorf("--read-method %q: want one of %s", phase.method, strings.Join(readMethods, ", "))
}

// countingCodec encodes requests as its name says and leaves answers
// undecoded, remembering their size (last; with many readers it is a
// sample, summed into the bytes received).
type countingCodec struct {
	name string
	last atomic.Int64
}

func (c *countingCodec) Name() string { return c.name }

func (c *countingCodec) Marshal(m any) ([]byte, error) {
	if c.name == "json" {
		return protojson.Marshal(m.(proto.Message))
	}
	return proto.Marshal(m.(proto.Message))
}

func (c *countingCodec) Unmarshal(data []byte, _ any) error {
	c.last.Add(int64(len(data)))
	return nil
}

// noSyncConfig writes the upstream scheduler file that keeps the inventory
// sync's schedule out of a read run (the bench links the racks itself), so
// the journal's switch listings are the leak checks'.
func (b *Bench) noSyncConfig() (string, error) {
	p := filepath.Join(b.dir, "flowconfig.yaml")
	return p, os.WriteFile(p, []byte("inventory_run_frequency: 24h\n"), 0o644)
}

// printReadResult writes r as the table's reads section.
func printReadResult(w io.Writer, r *ReadResult) {
	what := r.Method
	if r.Page > 0 {
		what = fmt.Sprintf("%s (pages of %d)", what, r.Page)
	}
	fmt.Fprintf(w, `
  reads              %d readers, %s over %s, with components %t, %.0fs
  read calls         %d ok (%.1f/s), %d failed %v
  read latency       p50 %.0fms   p99 %.0fms   max %.0fms   (%d bytes a call)
  server peak RSS    %.1f MiB during the reads
  CPU during reads   server %.1fs (%.1f ms a call), PostgreSQL %.1fs
  leak check         %d cycles, start-to-start p50 %.0fms, max %.0fms
`, r.Readers, what, r.Protocol, r.WithComponents, r.Seconds, r.Calls, r.CallsPerSec, r.Errors, r.ErrorCodes,
		r.P50Ms, r.P99Ms, r.MaxMs, r.BytesPerCall, float64(r.PeakRSSBytes)/(1<<20), r.ServerCPUSeconds, r.ServerCPUMsPerCall, r.PostgresCPUSeconds, r.LeakChecks, r.LeakIntervalP50Ms, r.LeakIntervalMaxMs)
	switch {
	case r.LeakPowerOffMs > 0:
		fmt.Fprintf(w, "  leak → power-off   %.0fms (first power-control call naming the leaking tray)\n", r.LeakPowerOffMs)
	case r.LeakPowerOffMs < 0:
		fmt.Fprintf(w, "  leak → power-off   none within the run\n")
	}
}
