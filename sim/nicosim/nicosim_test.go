package nicosim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

func TestSeed(t *testing.T) {
	t.Parallel()
	s := nicosim.New(nicosim.Options{Clock: sim.NewFakeClock(time.Unix(0, 0))})
	require.ErrorContains(t, s.Seed([]nicosim.Device{{Kind: "gpu", BMCMAC: "x"}}), "unknown kind")
	require.ErrorContains(t, s.Seed([]nicosim.Device{{Kind: nicosim.KindCompute}}), "bmc_mac")
	require.NoError(t, s.SeedJSON([]byte(`[{"kind":"compute","bmc_mac":"AA:00:00:00:00:01","powered_off":true},{"kind":"powershelf","bmc_mac":"aa:00:00:00:00:02"}]`)))
	st, ok := s.State("aa-00-00-00-00-01")
	require.True(t, ok, "MACs match in any case and separator")
	require.Equal(t, "machine-0001", st.ID)
	require.Equal(t, "off", st.Power)
	require.Equal(t, "Ready", st.State)
	require.Equal(t, "IngestionMachineCreated", st.Ingestion)

	// Re-seeding a MAC replaces the device and keeps its ID.
	require.NoError(t, s.Seed([]nicosim.Device{{Kind: nicosim.KindCompute, BMCMAC: "aa:00:00:00:00:01", Firmware: map[string]string{"bmc": "2"}}}))
	st, _ = s.State("machine-0001")
	require.Equal(t, "on", st.Power)
	require.Equal(t, "2", st.Firmware["bmc"])
	require.Len(t, s.States(), 2)

	shelf, _ := s.State("shelf-0001")
	require.JSONEq(t, `{"state":"ready"}`, shelf.State)
	require.True(t, s.Remove("shelf-0001"))
	require.False(t, s.Remove("shelf-0001"))
	require.Len(t, s.States(), 1)
}
