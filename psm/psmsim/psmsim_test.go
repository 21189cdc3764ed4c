package psmsim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/psm/psmsim"
	"github.com/nicoflow/flow/sim"
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
