package psmsim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/psmsim"
)

func TestSeed(t *testing.T) {
	t.Parallel()
	s := psmsim.New(psmsim.Options{Clock: sim.NewFakeClock(time.Unix(0, 0))})
	require.ErrorContains(t, s.Seed([]psmsim.Shelf{{}}), "pmc_mac")
	require.NoError(t, s.SeedJSON([]byte(`[{"pmc_mac":"bb:00:00:00:00:01","psus":2,"powered_off":true}]`)))
	st, ok := s.State("BB:00:00:00:00:01")
	require.True(t, ok)
	require.Equal(t, []bool{false, false}, st.PSUPower)
	require.Equal(t, "1.0.0", st.Firmware)
	require.True(t, s.Remove("bb:00:00:00:00:01"))
	require.Empty(t, s.States())
}

// TestStateRoundTrip: a simulator restored from another's state (flow dev
// restarted) has the same shelves.
func TestStateRoundTrip(t *testing.T) {
	t.Parallel()
	clock := sim.NewFakeClock(time.Unix(0, 0))
	s := psmsim.New(psmsim.Options{Clock: clock})
	require.NoError(t, s.Seed([]psmsim.Shelf{{MAC: "bb:00:00:00:00:01", PSUs: 2, PoweredOff: true}, {MAC: "bb:00:00:00:00:02", Unregistered: true, Firmware: "2.0.0"}}))
	state, err := s.MarshalState()
	require.NoError(t, err)
	restored := psmsim.New(psmsim.Options{Clock: clock})
	require.NoError(t, restored.RestoreState(state))
	require.Equal(t, s.States(), restored.States())
	st, ok := restored.State("BB:00:00:00:00:02")
	require.True(t, ok, "found by MAC after a restore")
	require.Equal(t, "2.0.0", st.Firmware)
	require.ErrorContains(t, restored.RestoreState([]byte(`{"version":2}`)), "unknown version")
}
