package app

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
)

func TestLimitSettings(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(env(map[string]string{}))
	require.NoError(t, err)
	require.Equal(t, DefaultLimits(), cfg.Limits)
	require.Equal(t, 4<<20, cfg.Limits.RequestBytes)
	require.Equal(t, 30*time.Second, cfg.Limits.ReadTimeout)

	cfg, err = LoadConfig(env(map[string]string{"FLOW_MAX_NAME_BYTES": "64", "FLOW_READ_TIMEOUT": "5s", "FLOW_STRICT_JSON": "true"}))
	require.NoError(t, err)
	require.Equal(t, 64, cfg.Limits.NameBytes)
	require.Equal(t, 5*time.Second, cfg.Limits.ReadTimeout)
	require.True(t, cfg.Limits.StrictJSON)

	for name, value := range map[string]string{
		"FLOW_MAX_REQUEST_BYTES": "0", "FLOW_MAX_SERIAL_BYTES": "-1", "FLOW_MAX_TARGETS": "many",
		"FLOW_READ_HEADER_TIMEOUT": "0s", "FLOW_IDLE_TIMEOUT": "soon", "FLOW_STRICT_JSON": "maybe",
	} {
		_, err := LoadConfig(env(map[string]string{name: value}))
		require.ErrorContains(t, err, name)
	}
}

// TestSlowClientsAreCutOff: a client that sends no headers, or a body
// slower than FLOW_READ_TIMEOUT, loses its connection instead of holding
// it open.
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	b := setupBadInput(t, map[string]string{"FLOW_READ_HEADER_TIMEOUT": "1s", "FLOW_READ_TIMEOUT": "2s"})
	addr := strings.TrimPrefix(b.url, "http://")
	closedWithin := func(send string) time.Duration {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = fmt.Fprint(conn, send)
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
		r := bufio.NewReader(conn)
		for {
			if _, err := r.ReadByte(); err != nil {
				require.NotContains(t, err.Error(), "timeout", "the server kept the connection open")
				return time.Since(start)
			}
		}
	}
	// Headers never finished.
	require.Less(t, closedWithin("POST /v1.Flow/GetListOfRacks HTTP/1.1\r\nHost: x\r\n"), 10*time.Second)
	// Headers sent, then a body that never comes.
	require.Less(t, closedWithin("POST /v1.Flow/GetListOfRacks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"), 10*time.Second)
}

// TestSlowBodyIsTheClientsFault: a client whose body does not arrive
// within FLOW_READ_TIMEOUT is answered invalid_argument (HTTP 400) saying
// so, over HTTP/1.1 Connect JSON and over gRPC on HTTP/2, not
// deadline_exceeded (HTTP 504, the server's fault), and no answer echoes
// the socket's addresses (it once said `read tcp 127.0.0.1:50051->
// 127.0.0.1:42734: i/o timeout`).
func TestSlowBodyIsTheClientsFault(t *testing.T) {
	t.Parallel()
	b := setupBadInput(t, map[string]string{"FLOW_READ_TIMEOUT": "1s"})
	addr := strings.TrimPrefix(b.url, "http://")
	for _, method := range []string{"CreateExpectedRack", "GetListOfRacks"} {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = fmt.Fprintf(conn, "POST /v1.Flow/%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", method, addr)
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(20*time.Second)))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, method)
		body, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		_ = conn.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s: %s", method, body)
		var e struct{ Code, Message string }
		require.NoError(t, json.Unmarshal(body, &e), string(body))
		require.Equal(t, "invalid_argument", e.Code, method)
		require.Contains(t, e.Message, "FLOW_READ_TIMEOUT")
		require.NotContains(t, e.Message, "127.0.0.1")
		require.NotContains(t, e.Message, "tcp")
		t.Logf("HTTP/1.1 %s: %d %s", method, res.StatusCode, body)
	}

	// gRPC over cleartext HTTP/2: the stream's body stalls after the
	// message's first bytes.
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequest(http.MethodPost, b.url+"/v1.Flow/GetListOfRacks", pr)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	go func() { _, _ = pw.Write([]byte{0, 0, 0, 0, 10, 1}) }() // 10 bytes announced, 1 sent
	res, err := h2cClient().Do(req)
	require.NoError(t, err)
	_, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	status := cmp.Or(res.Trailer.Get("Grpc-Status"), res.Header.Get("Grpc-Status"))
	msg := cmp.Or(res.Trailer.Get("Grpc-Message"), res.Header.Get("Grpc-Message"))
	t.Logf("gRPC: HTTP %d grpc-status %s grpc-message %q", res.StatusCode, status, msg)
	require.Equal(t, strconv.Itoa(int(connect.CodeInvalidArgument)), status, msg)
	require.Contains(t, msg, "FLOW_READ_TIMEOUT")
	require.NotContains(t, msg, "127.0.0.1")
}
