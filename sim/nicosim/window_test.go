package nicosim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/nico"
)

// TestFirmwareUpdateWindow: the client sets machines' firmware update time
// window over real gRPC; the simulator holds it, and refuses an unknown
// machine (recording nothing) and a window that ends before it starts.
func TestFirmwareUpdateWindow(t *testing.T) {
	t.Parallel()
	b := setupFirmware(t)
	ctx := context.Background()
	start := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	end := start.Add(4 * time.Hour)
	require.NoError(t, b.client.SetFirmwareUpdateWindow(ctx, []string{"m1"}, start, end))
	w, ok := b.sim.FirmwareWindowOf("m1")
	require.True(t, ok)
	require.True(t, w.Start.Equal(start) && w.End.Equal(end), "%+v", w)

	err := b.client.SetFirmwareUpdateWindow(ctx, []string{"m1", "nope"}, start, end.Add(time.Hour))
	var ne *nico.Error
	require.True(t, errors.As(err, &ne), "%v", err)
	require.Contains(t, err.Error(), "nope not found")
	w, _ = b.sim.FirmwareWindowOf("m1")
	require.True(t, w.End.Equal(end), "nothing recorded")
	require.Error(t, b.client.SetFirmwareUpdateWindow(ctx, []string{"m1"}, end, start))
	_, ok = b.sim.FirmwareWindowOf("s1")
	require.False(t, ok)
}
