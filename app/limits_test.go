package app

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

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
