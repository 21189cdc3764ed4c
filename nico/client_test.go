package nico_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/nico"
	forgepb "github.com/nicoflow/flow/proto/gen/forge"
	"github.com/nicoflow/flow/proto/gen/forge/forgepbconnect"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

type testBundle struct {
	sim    *nicosim.Sim
	clock  *sim.FakeClock
	client *nico.Client
	url    string
}

var fleet = []nicosim.Device{
	{Kind: nicosim.KindCompute, ID: "m1", BMCMAC: "aa:00:00:00:00:01", BMCIP: "10.0.0.1", Serial: "SN-C1", RackID: "r1", Firmware: map[string]string{"bmc": "1.0", "bios": "1.0"}},
	{Kind: nicosim.KindCompute, ID: "m2", BMCMAC: "aa:00:00:00:00:02", BMCIP: "10.0.0.2", Serial: "SN-C2", RackID: "r1", Firmware: map[string]string{"bmc": "1.0"}},
	{Kind: nicosim.KindNVSwitch, ID: "s1", BMCMAC: "aa:00:00:00:01:01", Serial: "SN-S1", RackID: "r1", Firmware: map[string]string{"bmc": "2.0", "nvos": "2.0"}},
	{Kind: nicosim.KindPowerShelf, ID: "p1", BMCMAC: "aa:00:00:00:02:01", Serial: "SN-P1", RackID: "r1", Firmware: map[string]string{"pmc": "3.0"}},
}

// canceled is a done context: test servers close at once instead of
// waiting for HTTP/2 clients to go away.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func setup(t *testing.T, opts ...nicosim.Options) *testBundle {
	t.Helper()
	return setupWith(t, nil, opts...)
}

// setupWith is setup with the simulator's handler wrapped by wrap (nil:
// as it is).
func setupWith(t *testing.T, wrap func(http.Handler) http.Handler, opts ...nicosim.Options) *testBundle {
	t.Helper()
	clock := sim.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	o := nicosim.Options{Clock: clock, PowerDelay: time.Second, FirmwarePhase: time.Minute, IngestionStep: time.Minute, DecommissionStep: time.Minute}
	if len(opts) > 0 {
		o.MaxFindByIDs = opts[0].MaxFindByIDs
	}
	s := nicosim.New(o)
	require.NoError(t, s.Seed(fleet))
	var h http.Handler = s.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv, err := sim.Listen("127.0.0.1:0", h)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close(canceled()) })
	c, err := nico.NewClient(srv.URL(), nico.WithTimeout(5*time.Second))
	require.NoError(t, err)
	return &testBundle{sim: s, clock: clock, client: c, url: srv.URL()}
}

func TestNotConfigured(t *testing.T) {
	t.Parallel()
	c, err := nico.NewClient("")
	require.NoError(t, err)
	require.False(t, c.Configured())
	ctx := context.Background()
	_, err = c.PowerControl(ctx, nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}}, nico.PowerOn, false)
	require.ErrorIs(t, err, nico.ErrNotConfigured)
	require.Contains(t, err.Error(), "NICO_CORE_API_URL")
	_, err = c.Version(ctx)
	require.ErrorIs(t, err, nico.ErrNotConfigured)
	require.ErrorIs(t, c.AllowIngestion(ctx, "x"), nico.ErrNotConfigured)
	_, err = c.Machines(ctx, []string{"m1"})
	require.ErrorIs(t, err, nico.ErrNotConfigured)
}

func TestPowerControl(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	// By MAC, in a case Core would not use: the echo must be the caller's.
	res, err := b.client.PowerControl(ctx, nico.Target{Kind: nico.KindCompute, MACs: []string{"AA:00:00:00:00:01"}}, nico.PowerForceOff, false)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, "AA:00:00:00:00:01", res[0].Key)
	require.Equal(t, "m1", res[0].ID)

	inv, err := b.client.Inventory(ctx, nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}})
	require.NoError(t, err)
	require.Equal(t, nico.PowerStatePoweringOff, inv[0].Power)
	b.clock.Advance(time.Second)
	inv, err = b.client.Inventory(ctx, nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}})
	require.NoError(t, err)
	require.Equal(t, nico.PowerStateOff, inv[0].Power, "Off travels explicitly")

	// A restart goes off, then on.
	_, err = b.client.PowerControl(ctx, nico.Target{Kind: nico.KindPowerShelf, IDs: []string{"p1"}}, nico.PowerGracefulRestart, true)
	require.NoError(t, err)
	b.clock.Advance(time.Second)
	st, _ := b.sim.State("p1")
	require.Equal(t, "powering_on", st.Power)
	b.clock.Advance(time.Second)
	st, _ = b.sim.State("p1")
	require.Equal(t, "on", st.Power)

	// Unknown targets come back NOT_FOUND per item.
	res, err = b.client.PowerControl(ctx, nico.Target{Kind: nico.KindSwitch, IDs: []string{"s1", "nope"}}, nico.PowerOn, false)
	require.ErrorIs(t, err, nico.ErrNotFound)
	require.Len(t, res, 2)
	require.NoError(t, res[0].Err)
	require.ErrorIs(t, res[1].Err, nico.ErrNotFound)

	// AC power cycle is compute-only in Core.
	_, err = b.client.PowerControl(ctx, nico.Target{Kind: nico.KindSwitch, IDs: []string{"s1"}}, nico.PowerACPowerCycle, false)
	require.ErrorIs(t, err, nico.ErrRejected)

	// Bad targets never reach Core.
	_, err = b.client.PowerControl(ctx, nico.Target{Kind: nico.KindSwitch}, nico.PowerOn, false)
	require.ErrorIs(t, err, nico.ErrRejected)

	require.Equal(t, 1, b.sim.Journal().CountFor("ComponentPowerControl", "AA:00:00:00:00:01"))
}

func TestInventoryFirmwarePrecedence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	inv, err := b.client.Inventory(context.Background(), nico.Target{Kind: nico.KindSwitch, MACs: []string{"aa:00:00:00:01:01"}})
	require.NoError(t, err)
	require.Len(t, inv, 1)
	require.Equal(t, "aa:00:00:00:01:01", inv[0].Key)
	require.Equal(t, "2.0", inv[0].BMCFirmware())
	require.Equal(t, "SN-S1", inv[0].ChassisSerial)
	require.Equal(t, nico.PowerStateOn, inv[0].Power)

	only := nico.Inventory{Items: []nico.InventoryItem{{ID: "X", Description: "BMC image", Version: "9"}, {ID: "FW_BMC_0", Version: "8"}}}
	require.Equal(t, "8", only.BMCFirmware())
	only.Items = only.Items[:1]
	require.Equal(t, "9", only.BMCFirmware())
}

func TestFirmwareLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	target := nico.Target{Kind: nico.KindCompute, IDs: []string{"m1", "m2"}}

	sts, err := b.client.FirmwareStatus(ctx, target)
	require.NoError(t, err)
	require.Empty(t, sts, "no job, no status")

	_, err = b.client.UpdateFirmware(ctx, target, nico.FirmwareRequest{Components: []string{"bmc"}, TargetVersion: "2.0"})
	require.NoError(t, err)
	for _, want := range []nico.FirmwareState{nico.FirmwareQueued, nico.FirmwareInProgress, nico.FirmwareVerifying, nico.FirmwareCompleted} {
		sts, err = b.client.FirmwareStatus(ctx, target)
		require.NoError(t, err)
		require.Len(t, sts, 2)
		for _, s := range sts {
			require.Equal(t, want, s.State)
			require.NoError(t, s.Err)
		}
		b.clock.Advance(time.Minute)
	}
	st, _ := b.sim.State("m1")
	require.Equal(t, "2.0", st.Firmware["bmc"])

	_, err = b.client.UpdateFirmware(ctx, target, nico.FirmwareRequest{Components: []string{"warp-drive"}})
	require.ErrorIs(t, err, nico.ErrRejected)
}

// TestStateSurvivesARestart: a simulator restored from another's state
// (flow dev restarted) knows its devices and follows the firmware job
// started before, to its end.
func TestStateSurvivesARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	target := nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}}
	_, err := b.client.UpdateFirmware(ctx, target, nico.FirmwareRequest{Components: []string{"bmc"}, TargetVersion: "2.0"})
	require.NoError(t, err)
	_, err = b.client.PowerControl(ctx, nico.Target{Kind: nico.KindCompute, IDs: []string{"m2"}}, nico.PowerForceOff, false)
	require.NoError(t, err)
	b.clock.Advance(time.Minute) // in progress
	state, err := b.sim.MarshalState()
	require.NoError(t, err)

	restarted := nicosim.New(nicosim.Options{Clock: b.clock, PowerDelay: time.Second, FirmwarePhase: time.Minute})
	require.NoError(t, restarted.RestoreState(state))
	require.Equal(t, b.sim.States(), restarted.States())
	srv, err := sim.Listen("127.0.0.1:0", restarted.Handler())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close(canceled()) })
	c, err := nico.NewClient(srv.URL(), nico.WithTimeout(5*time.Second))
	require.NoError(t, err)
	sts, err := c.FirmwareStatus(ctx, target)
	require.NoError(t, err)
	require.Len(t, sts, 1)
	require.Equal(t, nico.FirmwareInProgress, sts[0].State)
	b.clock.Advance(2 * time.Minute)
	sts, err = c.FirmwareStatus(ctx, target)
	require.NoError(t, err)
	require.Equal(t, nico.FirmwareCompleted, sts[0].State)
	st, _ := restarted.State("m1")
	require.Equal(t, "2.0", st.Firmware["bmc"])
	st, _ = restarted.State("m2")
	require.Equal(t, "off", st.Power)
	require.ErrorContains(t, restarted.RestoreState([]byte(`{"version":7}`)), "unknown version")
}

func TestFirmwareFaults(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		fault sim.Fault
		after time.Duration
		want  nico.FirmwareState
	}{
		{name: "Fail", fault: sim.Fault{Kind: sim.FaultFail, Phase: "verifying", Message: "bad image"}, after: 3 * time.Minute, want: nico.FirmwareFailed},
		{name: "Stuck", fault: sim.Fault{Kind: sim.FaultStuck, Phase: "in_progress"}, after: time.Hour, want: nico.FirmwareInProgress},
		{name: "Cancel", fault: sim.Fault{Kind: sim.FaultCancel, Phase: "queued"}, after: 0, want: nico.FirmwareCancelled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			tt.fault.Device = "s1"
			_, err := b.sim.Faults().Add(tt.fault)
			require.NoError(t, err)
			target := nico.Target{Kind: nico.KindSwitch, IDs: []string{"s1"}}
			_, err = b.client.UpdateFirmware(ctx, target, nico.FirmwareRequest{Components: []string{"nvos"}, TargetVersion: "3.0"})
			require.NoError(t, err)
			b.clock.Advance(tt.after)
			sts, err := b.client.FirmwareStatus(ctx, target)
			require.NoError(t, err)
			require.Len(t, sts, 1)
			require.Equal(t, tt.want, sts[0].State)
			if tt.want == nico.FirmwareFailed {
				require.Equal(t, "bad image", sts[0].Error)
			}
		})
	}

	t.Run("EmptyStatusQuirk", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		target := nico.Target{Kind: nico.KindPowerShelf, MACs: []string{"aa:00:00:00:02:01"}}
		_, err := b.client.UpdateFirmware(ctx, target, nico.FirmwareRequest{TargetVersion: "4.0"})
		require.NoError(t, err)
		_, err = b.sim.Faults().Add(sim.Fault{Kind: sim.FaultEmpty, Method: "GetComponentFirmwareStatus", Times: 1})
		require.NoError(t, err)
		sts, err := b.client.FirmwareStatus(ctx, target)
		require.NoError(t, err)
		require.Empty(t, sts)
		sts, err = b.client.FirmwareStatus(ctx, target)
		require.NoError(t, err)
		require.Len(t, sts, 1)
		require.Equal(t, "aa:00:00:00:02:01", sts[0].Key)
	})

	t.Run("InvalidAtSubmit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultItem, Method: "UpdateComponentFirmware", Device: "m2", Status: "invalid_argument"})
		require.NoError(t, err)
		res, err := b.client.UpdateFirmware(context.Background(), nico.Target{Kind: nico.KindCompute, IDs: []string{"m1", "m2"}}, nico.FirmwareRequest{TargetVersion: "x"})
		require.ErrorIs(t, err, nico.ErrRejected)
		require.NoError(t, res[0].Err)
		require.ErrorIs(t, res[1].Err, nico.ErrRejected)
	})
}

func TestExpectedAndIngestion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.client.AddExpectedMachine(ctx, nico.ExpectedMachine{BMCMAC: "aa:00:00:00:00:09", BMCIP: "10.0.0.9", ChassisSerial: "SN-C9", RackID: "r2", BMCUsername: "u", BMCPassword: "p", Labels: map[string]string{"slot_id": "3"}}))
	require.NoError(t, b.client.AddExpectedMachine(ctx, nico.ExpectedMachine{BMCMAC: "aa:00:00:00:00:09", BMCIP: "10.0.0.9", ChassisSerial: "SN-C9", RackID: "r2"}), "idempotent by MAC")
	require.NoError(t, b.client.AddExpectedSwitch(ctx, nico.ExpectedSwitch{BMCMAC: "aa:00:00:00:01:09", Serial: "SN-S9", NVOSUsername: "admin", NVOSPassword: "pw"}))
	require.NoError(t, b.client.AddExpectedPowerShelf(ctx, nico.ExpectedPowerShelf{BMCMAC: "aa:00:00:00:02:09", Serial: "SN-P9", BMCIP: "10.0.2.9"}))

	ms, err := b.client.ExpectedMachines(ctx)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, "SN-C9", ms[0].ChassisSerial)
	require.Equal(t, "r2", ms[0].RackID)
	require.Empty(t, ms[0].BMCPassword)
	ss, err := b.client.ExpectedSwitches(ctx)
	require.NoError(t, err)
	require.Len(t, ss, 1)
	ps, err := b.client.ExpectedPowerShelves(ctx)
	require.NoError(t, err)
	require.Equal(t, "10.0.2.9", ps[0].BMCIP)

	state, err := b.client.IngestionState(ctx, "10.0.0.9")
	require.NoError(t, err)
	require.Equal(t, nico.IngestionWaiting, state)
	state, err = b.client.IngestionState(ctx, "10.9.9.9")
	require.NoError(t, err)
	require.Equal(t, nico.IngestionNotDiscovered, state)

	require.NoError(t, b.client.AllowIngestion(ctx, "10.0.0.9"))
	for _, want := range []nico.IngestionState{nico.IngestionWaiting, nico.IngestionMachineNotCreated, nico.IngestionMachineCreated} {
		state, err = b.client.IngestionState(ctx, "10.0.0.9")
		require.NoError(t, err)
		require.Equal(t, want, state)
		b.clock.Advance(time.Minute)
	}
	require.ErrorIs(t, b.client.AllowIngestion(ctx, "10.9.9.9"), nico.ErrNotFound)
}

func TestDecommission(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.client.Decommission(ctx, nico.KindCompute, "m1"))
	ms, err := b.client.Machines(ctx, []string{"m1"})
	require.NoError(t, err)
	require.Equal(t, "Decommissioning/WaitingForCleanup", ms[0].State, "set synchronously")
	b.clock.Advance(2 * time.Minute)
	ms, err = b.client.Machines(ctx, []string{"m1"})
	require.NoError(t, err)
	require.Equal(t, "Decommissioning/Decommissioned", ms[0].State)
	require.ErrorIs(t, b.client.Decommission(ctx, nico.KindCompute, "m1"), nico.ErrRejected, "only from Ready")
	require.ErrorIs(t, b.client.Decommission(ctx, nico.KindCompute, "zz"), nico.ErrNotFound)

	_, err = b.sim.Faults().Add(sim.Fault{Kind: sim.FaultStuck, Device: "s1"})
	require.NoError(t, err)
	require.NoError(t, b.client.Decommission(ctx, nico.KindSwitch, "s1"))
	b.clock.Advance(time.Hour)
	sws, err := b.client.Switches(ctx, []string{"s1"})
	require.NoError(t, err)
	require.JSONEq(t, `{"state":"decommissioning","decommissioning_state":{"state":"started"}}`, sws[0].ControllerState)

	_, err = b.sim.Faults().Add(sim.Fault{Kind: sim.FaultFail, Device: "p1"})
	require.NoError(t, err)
	require.NoError(t, b.client.Decommission(ctx, nico.KindPowerShelf, "p1"))
	b.clock.Advance(time.Minute)
	pss, err := b.client.PowerShelves(ctx, []string{"p1"})
	require.NoError(t, err)
	require.JSONEq(t, `{"state":"error"}`, pss[0].ControllerState)
}

func TestByIDs(t *testing.T) {
	t.Parallel()
	b := setup(t, nicosim.Options{MaxFindByIDs: 1})
	ctx := context.Background()
	info, err := b.client.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, uint32(1), info.MaxFindByIDs)

	ids, err := b.client.MachineIDs(ctx, false, "")
	require.NoError(t, err)
	require.Equal(t, []string{"m1", "m2"}, ids)
	ms, err := b.client.Machines(ctx, ids)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, "aa:00:00:00:00:02", ms[1].BMCMAC)
	require.Equal(t, "SN-C2", ms[1].ChassisSerial)
	require.True(t, ms[0].Host)
	require.Len(t, b.sim.Journal().Calls("FindMachinesByIds"), 2, "batches of max_find_by_ids")

	swIDs, err := b.client.SwitchIDs(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"s1"}, swIDs)
	psIDs, err := b.client.PowerShelfIDs(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"p1"}, psIDs)
	pss, err := b.client.PowerShelves(ctx, psIDs)
	require.NoError(t, err)
	require.Equal(t, "r1", pss[0].RackID)

	_, err = b.client.Machines(ctx, []string{"m1", "m1"})
	require.ErrorIs(t, err, nico.ErrRejected)
	_, err = b.client.Machines(ctx, []string{""})
	require.ErrorIs(t, err, nico.ErrRejected)

	_, err = b.sim.Faults().Add(sim.Fault{Kind: sim.FaultDrop, Method: "FindMachinesByIds", Device: "m2", Times: 1})
	require.NoError(t, err)
	_, err = b.client.Machines(ctx, ids)
	require.ErrorIs(t, err, nico.ErrNotFound)
	require.Contains(t, err.Error(), "m2")
}

func TestFaultClasses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		fault sim.Fault
		want  error
	}{
		{name: "Unavailable", fault: sim.Fault{Kind: sim.FaultError, Code: "unavailable"}, want: nico.ErrUnreachable},
		{name: "Internal", fault: sim.Fault{Kind: sim.FaultError, Code: "internal"}, want: nico.ErrUnreachable},
		{name: "DeadlineExceeded", fault: sim.Fault{Kind: sim.FaultError, Code: "deadline_exceeded"}, want: nico.ErrUnreachable},
		{name: "InvalidArgument", fault: sim.Fault{Kind: sim.FaultError, Code: "invalid_argument"}, want: nico.ErrRejected},
		{name: "NotFound", fault: sim.Fault{Kind: sim.FaultError, Code: "not_found"}, want: nico.ErrNotFound},
		{name: "Latency", fault: sim.Fault{Kind: sim.FaultLatency, Latency: sim.Duration(time.Minute)}, want: nico.ErrUnreachable},
		{name: "ItemNotFound", fault: sim.Fault{Kind: sim.FaultItem, Status: "not_found"}, want: nico.ErrNotFound},
		{name: "ItemInvalid", fault: sim.Fault{Kind: sim.FaultItem, Status: "invalid_argument"}, want: nico.ErrRejected},
		{name: "ItemInternal", fault: sim.Fault{Kind: sim.FaultItem, Status: "internal_error"}, want: nico.ErrUnreachable},
		{name: "ItemUnavailable", fault: sim.Fault{Kind: sim.FaultItem, Status: "unavailable"}, want: nico.ErrUnreachable},
		{name: "ByRate", fault: sim.Fault{Kind: sim.FaultError, Code: "unavailable", Rate: 1}, want: nico.ErrUnreachable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			c := b.client
			if tt.fault.Kind == sim.FaultLatency {
				var err error
				c, err = nico.NewClient(b.url, nico.WithTimeout(50*time.Millisecond))
				require.NoError(t, err)
			}
			tt.fault.Method, tt.fault.Times = "ComponentPowerControl", 2
			_, err := b.sim.Faults().Add(tt.fault)
			require.NoError(t, err)
			target := nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}}
			// A latency fault fires when the request reaches the
			// simulator; on a loaded machine the 50 ms client may give up
			// before it does, and the fault has not fired. So that case
			// calls until both firings are used (each call failing as
			// unreachable), then waits for the simulator to have taken
			// them, instead of counting on exactly two calls.
			latency := tt.fault.Kind == sim.FaultLatency
			for i := 0; i < 2 || (latency && len(b.sim.Faults().List()) > 0 && i < 100); i++ {
				_, err = c.PowerControl(context.Background(), target, nico.PowerOn, false)
				require.ErrorIs(t, err, tt.want)
				var ne *nico.Error
				require.ErrorAs(t, err, &ne)
				require.Equal(t, "ComponentPowerControl", ne.Method)
			}
			require.Eventually(t, func() bool { return len(b.sim.Faults().List()) == 0 }, 10*time.Second, 5*time.Millisecond, "the fault fired twice")
			_, err = b.client.PowerControl(context.Background(), target, nico.PowerOn, false)
			require.NoError(t, err, "a fault fires Times times, then the device behaves")
		})
	}
}

func TestAdminHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body, _ := json.Marshal(sim.Fault{Kind: sim.FaultError, Method: "Version", Code: "unavailable", Times: 1})
	resp, err := http.Post(b.url+"/admin/faults", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	_, err = b.client.Version(context.Background())
	require.ErrorIs(t, err, nico.ErrUnreachable)

	req, _ := http.NewRequest(http.MethodDelete, b.url+"/admin/devices/m2", nil)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	ids, err := b.client.MachineIDs(context.Background(), false, "")
	require.NoError(t, err)
	require.Equal(t, []string{"m1"}, ids)

	resp, err = http.Get(b.url + "/admin/journal?method=Version")
	require.NoError(t, err)
	defer resp.Body.Close()
	var calls []sim.Call
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&calls))
	require.Len(t, calls, 1)
	require.Equal(t, "unavailable", calls[0].Code)
}

func TestMaxFindByIDsEnforced(t *testing.T) {
	t.Parallel()
	b := setup(t, nicosim.Options{MaxFindByIDs: 1})
	_, hc, err := nico.HTTPClient(b.url, nil)
	require.NoError(t, err)
	raw := forgepbconnect.NewForgeClient(hc, b.url, connect.WithGRPC())
	_, err = raw.FindMachinesByIds(context.Background(), &forgepb.MachinesByIdsRequest{MachineIds: []*forgepb.MachineId{{Id: "m1"}, {Id: "m2"}}})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "Core refuses more than max_find_by_ids")
	ms, err := b.client.Machines(context.Background(), []string{"m1", "m2"})
	require.NoError(t, err, "the client batches under the limit")
	require.Len(t, ms, 2)
}

func TestTLS(t *testing.T) {
	t.Parallel()
	s := nicosim.New(nicosim.Options{})
	require.NoError(t, s.Seed(fleet))
	srv := httptest.NewUnstartedServer(s.Handler())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c, err := nico.NewClient(strings.TrimPrefix(srv.URL, "https://"), nico.WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	require.NoError(t, err)
	info, err := c.Version(context.Background())
	require.NoError(t, err)
	require.Equal(t, "nicosim", info.Version)

	untrusted, err := nico.NewClient(srv.URL, nico.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12}))
	require.NoError(t, err)
	_, err = untrusted.Version(context.Background())
	require.ErrorIs(t, err, nico.ErrUnreachable, "an unverifiable server is unreachable")

	_, err = nico.NewClient("http://x:1", nico.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12}))
	require.Error(t, err, "TLS with an http:// URL is a configuration error")
}
