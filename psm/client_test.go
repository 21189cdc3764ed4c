package psm_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/psm"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/psmsim"
)

type testBundle struct {
	sim    *psmsim.Sim
	clock  *sim.FakeClock
	client *psm.Client
	url    string
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

const (
	mac1 = "bb:00:00:00:00:01"
	mac2 = "bb:00:00:00:00:02"
)

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupWith(t, nil)
}

// setupWith is setup with the simulator's handler wrapped by wrap (nil:
// as it is).
func setupWith(t *testing.T, wrap func(http.Handler) http.Handler) *testBundle {
	t.Helper()
	clock := sim.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := psmsim.New(psmsim.Options{Clock: clock, PowerDelay: time.Second, JobStep: 30 * time.Second, JobTimeout: time.Hour})
	require.NoError(t, s.Seed([]psmsim.Shelf{
		{MAC: mac1, IP: "10.1.0.1", ChassisSerial: "SN-P1", Firmware: "1.0.0", PSUs: 4},
		{MAC: mac2, IP: "10.1.0.2", ChassisSerial: "SN-P2", Firmware: "1.0.0", PoweredOff: true},
	}))
	var h http.Handler = s.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv, err := sim.Listen("127.0.0.1:0", h)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close(canceled()) })
	c, err := psm.NewClient(srv.URL(), psm.WithTimeout(5*time.Second))
	require.NoError(t, err)
	return &testBundle{sim: s, clock: clock, client: c, url: srv.URL()}
}

func TestNotConfigured(t *testing.T) {
	t.Parallel()
	c, err := psm.NewClient("")
	require.NoError(t, err)
	_, err = c.Shelves(context.Background(), nil)
	require.ErrorIs(t, err, psm.ErrNotConfigured)
	require.Contains(t, err.Error(), "PSM_API_URL")
}

func TestRegisterAndShelves(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.client.Register(ctx, []psm.Registration{{MAC: "bb:00:00:00:00:09", IP: "10.1.0.9", Username: "root", Password: "x"}, {MAC: mac1}})
	require.NoError(t, err)
	require.True(t, res[0].New)
	require.False(t, res[1].New, "registration is idempotent")
	res, err = b.client.Register(ctx, []psm.Registration{{MAC: "bb:00:00:00:00:09"}})
	require.NoError(t, err)
	require.False(t, res[0].New)

	all, err := b.client.Shelves(ctx, nil)
	require.NoError(t, err)
	require.Len(t, all, 3, "empty request returns every shelf")
	some, err := b.client.Shelves(ctx, []string{mac1, "bb:ff:ff:ff:ff:ff"})
	require.NoError(t, err)
	require.Len(t, some, 1, "unknown shelves are skipped")
	require.Equal(t, "SN-P1", some[0].ChassisSerial)
	require.Len(t, some[0].PSUs, 4)
	require.Equal(t, psm.PowerOn, some[0].Power())

	_, err = b.client.Register(ctx, []psm.Registration{{MAC: "x", Vendor: "acme"}})
	require.ErrorIs(t, err, psm.ErrRejected)
}

func TestPower(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.client.PowerOn(ctx, []string{mac2, "bb:ff:ff:ff:ff:ff"})
	require.ErrorIs(t, err, psm.ErrNotFound)
	require.NoError(t, res[0].Err)
	require.ErrorIs(t, res[1].Err, psm.ErrNotFound)

	sh, err := b.client.Shelves(ctx, []string{mac2})
	require.NoError(t, err)
	require.Equal(t, psm.PowerOff, sh[0].Power(), "not yet")
	b.clock.Advance(time.Second)
	sh, err = b.client.Shelves(ctx, []string{mac2})
	require.NoError(t, err)
	require.Equal(t, psm.PowerOn, sh[0].Power())

	_, err = b.sim.Faults().Add(sim.Fault{Kind: sim.FaultMixed, Device: mac1})
	require.NoError(t, err)
	_, err = b.client.PowerOff(ctx, []string{mac1})
	require.NoError(t, err)
	b.clock.Advance(time.Second)
	sh, err = b.client.Shelves(ctx, []string{mac1})
	require.NoError(t, err)
	require.Equal(t, psm.PowerUnknown, sh[0].Power(), "mixed PSUs")
}

func TestFirmware(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	q := []psm.FirmwareQuery{{MAC: mac1, Component: psm.ComponentPMC}}

	st, err := b.client.FirmwareStatus(ctx, q)
	require.NoError(t, err)
	require.Equal(t, psm.FirmwareUnknown, st[0].State)
	require.ErrorIs(t, st[0].Err, psm.ErrNotFound)

	_, err = b.client.UpdateFirmware(ctx, []psm.FirmwareUpdate{{MAC: mac1, Component: psm.ComponentPMC, Version: "2.0.0"}})
	require.NoError(t, err)
	for _, want := range []psm.FirmwareState{psm.FirmwareQueued, psm.FirmwareVerifying, psm.FirmwareCompleted} {
		st, err = b.client.FirmwareStatus(ctx, q)
		require.NoError(t, err)
		require.Equal(t, want, st[0].State)
		require.NoError(t, st[0].Err)
		b.clock.Advance(30 * time.Second)
	}
	sh, err := b.client.Shelves(ctx, []string{mac1})
	require.NoError(t, err)
	require.Equal(t, "2.0.0", sh[0].Firmware)

	res, err := b.client.UpdateFirmware(ctx, []psm.FirmwareUpdate{{MAC: mac1, Component: psm.ComponentPSU, Version: "2.0.0"}})
	require.ErrorIs(t, err, psm.ErrRejected, "PSU upgrades are refused")
	require.ErrorIs(t, res[0].Err, psm.ErrRejected)

	avail, err := b.client.AvailableFirmware(ctx, []string{mac1})
	require.NoError(t, err)
	require.Equal(t, []string{"1.0.0", "2.0.0"}, avail[mac1][psm.ComponentPMC])
}

func TestFirmwareFaults(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		fault sim.Fault
		after time.Duration
		want  psm.FirmwareState
	}{
		{name: "Fail", fault: sim.Fault{Kind: sim.FaultFail, Phase: "verifying"}, after: 30 * time.Second, want: psm.FirmwareFailed},
		{name: "Stuck", fault: sim.Fault{Kind: sim.FaultStuck, Phase: "verifying"}, after: 30 * time.Minute, want: psm.FirmwareVerifying},
		{name: "StuckTimesOut", fault: sim.Fault{Kind: sim.FaultStuck, Phase: "queued"}, after: 2 * time.Hour, want: psm.FirmwareFailed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			tt.fault.Device = mac1
			_, err := b.sim.Faults().Add(tt.fault)
			require.NoError(t, err)
			ctx := context.Background()
			_, err = b.client.UpdateFirmware(ctx, []psm.FirmwareUpdate{{MAC: mac1, Component: psm.ComponentPMC, Version: "2.0.0"}})
			require.NoError(t, err)
			b.clock.Advance(tt.after)
			st, err := b.client.FirmwareStatus(ctx, []psm.FirmwareQuery{{MAC: mac1, Component: psm.ComponentPMC}})
			require.NoError(t, err)
			require.Equal(t, tt.want, st[0].State)
		})
	}
}

func TestFaultClasses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		fault sim.Fault
		want  error
	}{
		{name: "Unavailable", fault: sim.Fault{Kind: sim.FaultError, Code: "unavailable"}, want: psm.ErrUnreachable},
		{name: "Internal", fault: sim.Fault{Kind: sim.FaultError, Code: "internal"}, want: psm.ErrUnreachable},
		{name: "DeadlineExceeded", fault: sim.Fault{Kind: sim.FaultError, Code: "deadline_exceeded"}, want: psm.ErrUnreachable},
		{name: "InvalidArgument", fault: sim.Fault{Kind: sim.FaultError, Code: "invalid_argument"}, want: psm.ErrRejected},
		{name: "Latency", fault: sim.Fault{Kind: sim.FaultLatency, Latency: sim.Duration(time.Minute)}, want: psm.ErrUnreachable},
		{name: "ItemInternal", fault: sim.Fault{Kind: sim.FaultItem, Status: "internal_error"}, want: psm.ErrUnreachable},
		{name: "ItemInvalid", fault: sim.Fault{Kind: sim.FaultItem, Status: "invalid_argument"}, want: psm.ErrRejected},
		{name: "ItemNotFound", fault: sim.Fault{Kind: sim.FaultItem, Status: "not_found"}, want: psm.ErrNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			c := b.client
			if tt.fault.Kind == sim.FaultLatency {
				var err error
				c, err = psm.NewClient(b.url, psm.WithTimeout(50*time.Millisecond))
				require.NoError(t, err)
			}
			tt.fault.Method, tt.fault.Times = "PowerOn", 1
			_, err := b.sim.Faults().Add(tt.fault)
			require.NoError(t, err)
			_, err = c.PowerOn(context.Background(), []string{mac1})
			require.ErrorIs(t, err, tt.want)
			_, err = b.client.PowerOn(context.Background(), []string{mac1})
			require.NoError(t, err)
			// The timed-out call is journalled when its handler gives up,
			// which can come after the second call's answer (seen at load 8).
			require.Eventually(t, func() bool { return len(b.sim.Journal().Calls("PowerOn")) == 2 }, 10*time.Second, 10*time.Millisecond,
				"both calls journalled: %v", b.sim.Journal().Calls("PowerOn"))
		})
	}

	t.Run("Drop", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultDrop, Device: mac2})
		require.NoError(t, err)
		sh, err := b.client.Shelves(context.Background(), nil)
		require.NoError(t, err)
		require.Len(t, sh, 1)
		require.Equal(t, mac1, sh[0].MAC)
	})
}
