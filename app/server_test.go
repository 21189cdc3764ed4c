package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/logtest"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer = logtest.Buffer

// faultyService answers two methods with a raw (non-connect) error and a
// panic, standing in for a domain bug.
type faultyService struct {
	*flowService
	entered chan struct{} // PatchRack closes it on entry…
	release chan struct{} // …then blocks on this, to test graceful shutdown
}

func (faultyService) GetRackInfoByID(context.Context, *flowv1.GetRackInfoByIDRequest) (*flowv1.GetRackInfoResponse, error) {
	return nil, errors.New(`ERROR: relation "rack" does not exist (SQLSTATE 42P01) SELECT secret FROM rack`)
}

func (faultyService) GetRackInfoBySerial(context.Context, *flowv1.GetRackInfoBySerialRequest) (*flowv1.GetRackInfoResponse, error) {
	panic("boom: internal state")
}

func (s faultyService) PatchRack(ctx context.Context, _ *flowv1.PatchRackRequest) (*flowv1.PatchRackResponse, error) {
	close(s.entered)
	<-s.release
	return &flowv1.PatchRackResponse{Report: "done"}, nil
}

type testBundle struct {
	baseURL string
	logs    *syncBuffer
	svc     faultyService
	stop    func() error // graceful shutdown, as on SIGTERM
}

func setup(t *testing.T, devMode bool) *testBundle {
	t.Helper()
	logs := &syncBuffer{}
	logger := newLogger(logs, "json", slog.LevelDebug)
	svc := faultyService{
		flowService: &flowService{versionHandler: &versionHandler{build: Build{Version: "v1.2.3", Revision: "abc1234", Time: "2026-11-30T10:00:00Z", GoVersion: "go1.26"}}},
		entered:     make(chan struct{}),
		release:     make(chan struct{}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := edge.NewHTTPServer(ln.Addr().String(), newMux(logger, svc, muxOptions{devMode: devMode}), nil, logger)
	go srv.Serve(ln) //nolint:errcheck // ErrServerClosed at shutdown
	stop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	}
	t.Cleanup(func() { _ = stop() })
	return &testBundle{baseURL: "http://" + ln.Addr().String(), logs: logs, svc: svc, stop: stop}
}

// h2cClient speaks cleartext HTTP/2, as gRPC clients do.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

func postJSON(t *testing.T, url, body string) (int, http.Header, map[string]any) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	out := map[string]any{}
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return res.StatusCode, res.Header, out
}

func TestVersionOverEveryProtocol(t *testing.T) {
	t.Parallel()
	b := setup(t, false)

	status, header, body := postJSON(t, b.baseURL+"/v1.Flow/Version", `{}`)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, map[string]any{"version": "v1.2.3", "buildTime": "2026-11-30T10:00:00Z", "gitCommit": "abc1234"}, body)
	require.Equal(t, "go1.26", header.Get("Flow-Go-Version"))

	for name, opts := range map[string][]connect.ClientOption{
		"connect-proto": nil,
		"grpc":          {connect.WithGRPC()},
		"grpc-web":      {connect.WithGRPCWeb()},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			client := flowv1connect.NewFlowClient(h2cClient(), b.baseURL, opts...)
			res, err := client.Version(context.Background(), &flowv1.VersionRequest{})
			require.NoError(t, err)
			require.Equal(t, "v1.2.3", res.GetVersion())
			require.Equal(t, "abc1234", res.GetGitCommit())
		})
	}
}

func TestSmallAnswersAreNotCompressed(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	req, err := http.NewRequest(http.MethodPost, b.baseURL+"/v1.Flow/Version", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept-Encoding", "gzip") // set by hand: the transport then leaves the answer as sent
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Empty(t, res.Header.Get("Content-Encoding"))
	require.Contains(t, string(raw), `"version":"v1.2.3"`)
}

func TestHealthIsAlwaysServed(t *testing.T) {
	t.Parallel()
	for _, dev := range []bool{false, true} {
		t.Run(fmt.Sprint("dev=", dev), func(t *testing.T) {
			t.Parallel()
			b := setup(t, dev)
			status, _, body := postJSON(t, b.baseURL+"/grpc.health.v1.Health/Check", `{}`)
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, "SERVING", body["status"])
			status, _, body = postJSON(t, b.baseURL+"/grpc.health.v1.Health/Check", `{"service":"v1.Flow"}`)
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, "SERVING", body["status"])
			status, _, body = postJSON(t, b.baseURL+"/grpc.health.v1.Health/Check", `{"service":"nope"}`)
			require.Equal(t, http.StatusNotFound, status)
			require.Equal(t, "not_found", body["code"])
		})
	}
}

func TestUnimplementedNamesTheMethod(t *testing.T) {
	t.Parallel()
	// Every v1.Flow method has a domain handler now; the fallthrough is for
	// methods a newer contract adds, so it is served alone here.
	logger := newLogger(&syncBuffer{}, "json", slog.LevelDebug)
	srv := httptest.NewUnstartedServer(newMux(logger, unimplemented{}, muxOptions{}))
	srv.EnableHTTP2 = true
	srv.Start()
	t.Cleanup(srv.Close)
	client := flowv1connect.NewFlowClient(srv.Client(), srv.URL, connect.WithGRPC())
	_, err := client.CreateEventRule(context.Background(), &flowv1.CreateEventRuleRequest{})
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err))
	require.Contains(t, err.Error(), "v1.Flow.CreateEventRule is not implemented")
}

func TestReflectionOnlyInDevMode(t *testing.T) {
	t.Parallel()
	list := func(baseURL string) ([]string, error) {
		stream := grpcreflect.NewClient(h2cClient(), baseURL).NewStream(context.Background())
		defer stream.Close() //nolint:errcheck
		names, err := stream.ListServices()
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = string(n)
		}
		return out, err
	}
	dev := setup(t, true)
	names, err := list(dev.baseURL)
	require.NoError(t, err)
	require.Equal(t, []string{
		"flow.admin.v1.AdminService",
		"grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection",
		"v1.Flow",
	}, names)

	// The contract answers by upstream's file name, and every listed
	// service resolves to its file.
	stream := grpcreflect.NewClient(h2cClient(), dev.baseURL).NewStream(context.Background())
	defer stream.Close() //nolint:errcheck
	files, err := stream.FileByFilename("flow.proto")
	require.NoError(t, err)
	require.Equal(t, "flow.proto", files[0].GetName())
	require.Equal(t, "v1", files[0].GetPackage())
	require.Equal(t, "Flow", files[0].GetService()[0].GetName())
	_, err = stream.FileByFilename("v1/flow.proto")
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
	for _, n := range names {
		files, err := stream.FileContainingSymbol(protoreflect.FullName(n))
		require.NoError(t, err, n)
		require.NotEmpty(t, files, n)
	}

	prod := setup(t, false)
	_, err = list(prod.baseURL)
	require.Error(t, err)
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err))
}

func TestInternalErrorsDoNotLeak(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	client := flowv1connect.NewFlowClient(h2cClient(), b.baseURL, connect.WithGRPC())

	_, err := client.GetRackInfoByID(context.Background(), &flowv1.GetRackInfoByIDRequest{})
	require.Equal(t, connect.CodeInternal, connect.CodeOf(err))
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "internal error", ce.Message())
	require.NotContains(t, err.Error(), "SQLSTATE")

	_, err = client.GetRackInfoBySerial(context.Background(), &flowv1.GetRackInfoBySerialRequest{})
	require.Equal(t, connect.CodeInternal, connect.CodeOf(err))
	require.NotContains(t, err.Error(), "boom")

	// The real causes are logged for the operator.
	logs := b.logs.String()
	require.Contains(t, logs, "SQLSTATE 42P01")
	require.Contains(t, logs, "boom: internal state")
}

func TestOneLogLinePerCall(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	client := flowv1connect.NewFlowClient(h2cClient(), b.baseURL)
	_, err := client.Version(context.Background(), &flowv1.VersionRequest{})
	require.NoError(t, err)
	_, err = client.GetRackInfoByID(context.Background(), &flowv1.GetRackInfoByIDRequest{})
	require.Error(t, err)

	lines := rpcLines(t, b.logs.String())
	require.Len(t, lines, 2)
	require.Equal(t, "/v1.Flow/Version", lines[0]["method"])
	require.Equal(t, "ok", lines[0]["code"])
	// The duration is readable ("412µs"), not integer nanoseconds.
	d, ok := lines[0]["duration"].(string)
	require.True(t, ok, "duration %v is not a string", lines[0]["duration"])
	parsed, err := time.ParseDuration(d)
	require.NoError(t, err)
	require.Positive(t, parsed)
	require.Equal(t, "/v1.Flow/GetRackInfoByID", lines[1]["method"])
	require.Equal(t, "internal", lines[1]["code"])

	// Health checks (and reflection) are logged like every call, but at
	// debug, so a load balancer's probes do not flood an info log.
	before := len(lines)
	_, err = edge.NewHealthClient(h2cClient(), b.baseURL, connect.WithGRPC()).Check(context.Background(), &healthv1.HealthCheckRequest{})
	require.NoError(t, err)
	lines = rpcLines(t, b.logs.String())
	require.Len(t, lines, before+1)
	require.Equal(t, "/grpc.health.v1.Health/Check", lines[before]["method"])
	require.Equal(t, "DEBUG", lines[before]["level"])
	require.NotEmpty(t, lines[before]["request_id"])
}

// rpcLines returns the JSON log's rpc lines.
func rpcLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		if m["msg"] == "rpc" {
			lines = append(lines, m)
		}
	}
	return lines
}

func TestReadableDurations(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := newLogger(&buf, "json", slog.LevelInfo)
	logger.Info("x", "a", 412*time.Microsecond+123*time.Nanosecond, "b", 1500*time.Millisecond, "c", 90*time.Minute+time.Nanosecond)
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
	require.Equal(t, "412µs", m["a"])
	require.Equal(t, "1.5s", m["b"])
	require.Equal(t, "1h30m0s", m["c"])
}

func TestShutdownFinishesInFlightCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	client := flowv1connect.NewFlowClient(h2cClient(), b.baseURL, connect.WithGRPC())
	done := make(chan error, 1)
	go func() {
		res, err := client.PatchRack(context.Background(), &flowv1.PatchRackRequest{})
		if err == nil && res.GetReport() != "done" {
			err = errors.New("unexpected report")
		}
		done <- err
	}()
	<-b.svc.entered
	stopped := make(chan error, 1)
	go func() { stopped <- b.stop() }()

	// Shutdown waits for the call; new connections are refused meanwhile.
	select {
	case <-stopped:
		t.Fatal("shutdown returned while a call was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	close(b.svc.release)
	require.NoError(t, <-done)
	require.NoError(t, <-stopped)
	_, err := http.Post(b.baseURL+"/v1.Flow/Version", "application/json", strings.NewReader(`{}`))
	require.Error(t, err)
}

func TestHealthTurnsNotServingAtShutdown(t *testing.T) {
	t.Parallel()
	h := edge.NewHealth()
	res, err := h.Check(context.Background(), &healthv1.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthv1.HealthCheckResponse_SERVING, res.GetStatus())

	logger := newLogger(io.Discard, "json", slog.LevelInfo)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := edge.NewHTTPServer(ln.Addr().String(), newMux(logger, &flowService{versionHandler: &versionHandler{}}, muxOptions{health: h}), nil, logger)
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { _ = srv.Close() })

	client := edge.NewHealthClient(h2cClient(), "http://"+ln.Addr().String(), connect.WithGRPC())
	stream, err := client.Watch(context.Background(), &healthv1.HealthCheckRequest{Service: "v1.Flow"})
	require.NoError(t, err)
	defer stream.Close()
	require.True(t, stream.Receive())
	require.Equal(t, healthv1.HealthCheckResponse_SERVING, stream.Msg().GetStatus())
	h.SetServing(false)
	require.True(t, stream.Receive())
	require.Equal(t, healthv1.HealthCheckResponse_NOT_SERVING, stream.Msg().GetStatus())
}
