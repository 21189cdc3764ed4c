package app

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// countingReader streams prefix, n filler bytes and suffix without holding
// them, counting what was read: how much of a body the server pulled.
type countingReader struct {
	r    io.Reader
	read atomic.Int64
}

func newCountingReader(prefix []byte, n int64, suffix []byte) *countingReader {
	filler := io.LimitReader(repeatReader('x'), n)
	return &countingReader{r: io.MultiReader(bytes.NewReader(prefix), filler, bytes.NewReader(suffix))}
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read.Add(int64(n))
	return n, err
}

type repeatReader byte

func (b repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// procStatus returns a /proc/<pid>/status value in bytes (VmRSS, VmHWM).
func procStatus(t testing.TB, pid int, key string) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	require.NoError(t, err)
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), key+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

// TestOversizedBodiesCostNoMemory sends a `flow serve` child process the
// three bodies of issue 19 that cost gigabytes before: a 100 MB Connect
// JSON body (with and without Content-Length), a gzip bomb (255 KB
// expanding to 256 MiB) and a 100 MB gRPC message. Each is refused with
// resource_exhausted after at most the limit (4 MiB) has been read, and the
// server's peak RSS (VmHWM, so no transient spike hides) grows by less than
// 64 MB over all of them.
func TestOversizedBodiesCostNoMemory(t *testing.T) {
	t.Parallel()
	url, pid := startWarmServer(t)
	method := url + flowv1connect.FlowGetRackInfoBySerialProcedure

	// The bomb is built before measuring (it is the client's memory).
	var bomb bytes.Buffer
	zw, err := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	require.NoError(t, err)
	_, err = io.Copy(zw, newCountingReader([]byte(`{"serial_info":{"serial_number":"`), 256<<20, []byte(`"}}`)))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	t.Logf("gzip bomb: %d bytes expanding to %d", bomb.Len(), 256<<20)

	baseRSS, basePeak := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM")
	const total = 100 << 20
	const limit = 4 << 20

	connectCall := func(name string, body io.Reader, length int64, encoding string) {
		req, err := http.NewRequest(http.MethodPost, method, body)
		require.NoError(t, err)
		req.ContentLength = length
		req.Header.Set("Content-Type", "application/json")
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err, name)
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var e struct{ Code, Message string }
		require.NoError(t, json.Unmarshal(raw, &e), "%s: %d %s", name, res.StatusCode, raw)
		require.Equal(t, "resource_exhausted", e.Code, "%s: %s", name, e.Message)
		t.Logf("%s: %s", name, e.Message)
	}

	// 100 MB with Content-Length: refused unread.
	body := newCountingReader([]byte(`{"serial_info":{"serial_number":"`), total, []byte(`"}}`))
	connectCall("connect json 100MB", body, total+36, "")
	require.Less(t, body.read.Load(), int64(total), "the body was read whole")
	t.Logf("connect json 100MB with Content-Length: client sent %d bytes", body.read.Load())

	// 100 MB chunked (no length): cut off after the limit.
	body = newCountingReader([]byte(`{"serial_info":{"serial_number":"`), total, []byte(`"}}`))
	connectCall("connect json 100MB chunked", body, -1, "")
	require.Less(t, body.read.Load(), int64(total), "the body was read whole")
	t.Logf("connect json 100MB chunked: client sent %d bytes", body.read.Load())

	// The gzip bomb: decompression stops at the limit.
	connectCall("gzip bomb", bytes.NewReader(bomb.Bytes()), int64(bomb.Len()), "gzip")

	// 100 MB gRPC message over h2c: one frame announcing 100 MB.
	frame := make([]byte, 5)
	binary.BigEndian.PutUint32(frame[1:], total)
	body = newCountingReader(frame, total, nil)
	req, err := http.NewRequest(http.MethodPost, method, body)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	res, err := h2cClient().Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(t, "8", res.Trailer.Get("Grpc-Status"), "resource_exhausted: %s", res.Trailer.Get("Grpc-Message"))
	require.Less(t, body.read.Load(), int64(total), "the gRPC message was read whole")
	t.Logf("grpc 100MB: %s; client sent %d bytes", res.Trailer.Get("Grpc-Message"), body.read.Load())

	rss, peak := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM")
	t.Logf("server RSS %d → %d MB, peak %d → %d MB", baseRSS>>20, rss>>20, basePeak>>20, peak>>20)
	require.Less(t, peak-baseRSS, int64(64<<20), "peak RSS grew by %d MB", (peak-baseRSS)>>20)
	_ = limit
}

// TestConcurrentBodiesKeepRSSBounded is issue 28's O1: 256 concurrent
// 3.9 MB bodies took a server to 420 MB RSS. Under
// FLOW_MAX_REQUEST_BYTES_IN_FLIGHT (32 MiB by default) the calls over the
// budget wait, then are refused with resource_exhausted; every call is
// answered (the oversized serial number with invalid_argument) and the
// server's peak RSS grows by less than the bound docs/limits.md gives
// (twelve times the budget; without the budget it grows by 1.6–1.8 GB).
func TestConcurrentBodiesKeepRSSBounded(t *testing.T) {
	t.Parallel()
	url, pid := startWarmServer(t)
	method := url + flowv1connect.FlowGetRackInfoBySerialProcedure
	body := []byte(`{"serial_info":{"manufacturer":"m","serial_number":"` + strings.Repeat("x", 3_900_000) + `"}}`)
	baseRSS := procStatus(t, pid, "VmRSS")

	const calls = 256
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: calls, MaxIdleConnsPerHost: calls}}
	codes := make(chan string, calls)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			<-start
			res, err := client.Post(method, "application/json", bytes.NewReader(body))
			if err != nil {
				// Refused before its body was read, the call's connection
				// is closed under the client's write.
				if strings.Contains(err.Error(), "broken pipe") || strings.Contains(err.Error(), "connection reset") {
					codes <- "closed"
					return
				}
				codes <- "transport: " + err.Error()
				return
			}
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var e struct{ Code, Message string }
			if err := json.Unmarshal(raw, &e); err != nil {
				codes <- fmt.Sprintf("%d %.200s", res.StatusCode, raw)
				return
			}
			codes <- e.Code
		})
	}
	close(start)
	wg.Wait()
	close(codes)
	count := map[string]int{}
	for c := range codes {
		count[c]++
	}
	t.Logf("answers: %v", count)
	require.Equal(t, calls, count["invalid_argument"]+count["resource_exhausted"]+count["closed"], "%v", count)
	require.Positive(t, count["invalid_argument"], "no call got through the budget")

	rss, peak := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM")
	t.Logf("server RSS %d → %d MB, peak %d MB", baseRSS>>20, rss>>20, peak>>20)
	// Each budgeted byte costs six to eight at the peak (connect's read
	// buffer grown by doubling, the decoded copy, Go's GC headroom): 180–260
	// MB over the default 32 MiB budget, 1.6–1.8 GB without it. Twelve is
	// far from both.
	require.Less(t, peak-baseRSS, int64(12*32<<20), "peak RSS grew by %d MB", (peak-baseRSS)>>20)
}

// startWarmServer starts a `flow serve` child on a fresh database and warms
// it up with a few ordinary GetRackInfoBySerial calls; it returns the API's
// URL and the child's PID.
func startWarmServer(t *testing.T) (string, int) {
	t.Helper()
	port, err := pglocal.FreePort()
	require.NoError(t, err)
	url := "http://127.0.0.1:" + itoa(port)
	p := startServerProcess(t, []string{"DATABASE_URL=" + dbtest.NewDB(t), "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port), "FLOW_LOG_LEVEL=warn"})
	waitHealthy(t, url)
	for range 5 {
		res, err := http.Post(url+flowv1connect.FlowGetRackInfoBySerialProcedure, "application/json", strings.NewReader(`{"serial_info":{"manufacturer":"m","serial_number":"s"}}`))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	return url, p.cmd.Process.Pid
}
