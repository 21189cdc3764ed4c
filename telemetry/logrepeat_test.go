package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/telemetry"
)

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines(t *testing.T) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

// TestLimitRepeats: a database outage's flood (the same error from the
// pool and from River's logger, hundreds of times) writes each once, then
// one summary per interval with the count; other lines are untouched.
func TestLimitRepeats(t *testing.T) {
	t.Parallel()
	var buf lockedBuffer
	const interval = 300 * time.Millisecond
	logger := slog.New(telemetry.LimitRepeats(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), interval))
	river := logger.With("component", "river") // derived handlers share the count
	ctx := context.Background()
	down := errors.New("failed to connect to host=127.0.0.1: connection refused")
	for i := range 500 {
		logger.ErrorContext(ctx, "lease renew", "error", down.Error())
		river.ErrorContext(ctx, "producer: error fetching jobs", "err", down, "num_errors", i) // numbers vary
		river.WarnContext(ctx, "producer: error fetching jobs", "err", down)                   // another level, another key
		logger.InfoContext(ctx, "rpc", "code", "unavailable", "n", i)                          // below WARN: every one
		if i < 3 {
			logger.ErrorContext(ctx, "lease renew", "error", "another error "+string(rune('a'+i)), "attempt", i)
			logger.WarnContext(ctx, "no error attribute")
			// One task's story is never folded into another's.
			logger.WarnContext(ctx, "step failed", "task_id", string(rune('a'+i)), "error", down.Error())
		}
	}
	lines := buf.lines(t)
	require.Len(t, lines, 3+500+3+3+3)
	require.Eventually(t, func() bool { return len(buf.lines(t)) == 3+500+3+3+3+3 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(2 * interval)
	lines = buf.lines(t)
	require.Len(t, lines, 3+500+3+3+3+3, "one summary each, nothing more")
	sums := map[string]float64{}
	for _, l := range lines[len(lines)-3:] {
		require.Equal(t, interval.String(), time.Duration(l["repeat_interval"].(float64)).String())
		sums[l["level"].(string)+" "+l["msg"].(string)] = l["repeated"].(float64)
		if strings.HasPrefix(l["msg"].(string), "producer") {
			require.Equal(t, "river", l["component"], "the summary keeps the first line's attributes")
		}
	}
	require.Equal(t, map[string]float64{
		"ERROR lease renew":                   499,
		"ERROR producer: error fetching jobs": 499,
		"WARN producer: error fetching jobs":  499,
	}, sums)

	// After the interval the next repeat is written in full again.
	logger.ErrorContext(ctx, "lease renew", "error", down.Error())
	require.Len(t, buf.lines(t), 3+500+3+3+3+3+1)
}
