package nicosim_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

// fwBundle is a simulator over real gRPC, on a fake clock, holding one
// realistic device of each kind: a compute tray m1 (two NICs), a switch s1
// and a shelf p1, every sub-component at version "1.0".
type fwBundle struct {
	sim    *nicosim.Sim
	clock  *sim.FakeClock
	client *nico.Client
	url    string
}

func setupFirmware(t *testing.T) *fwBundle {
	t.Helper()
	clock := sim.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := nicosim.New(nicosim.Options{Clock: clock, FirmwarePhase: time.Minute})
	dev := func(kind, id, mac string) nicosim.Device {
		fw := map[string]string{}
		for _, c := range nicosim.SubComponents(kind) {
			fw[c] = "1.0"
		}
		return nicosim.Device{Kind: kind, ID: id, BMCMAC: mac, Firmware: fw, Instances: nicosim.DefaultInstances(kind)}
	}
	require.NoError(t, s.Seed([]nicosim.Device{
		dev(nicosim.KindCompute, "m1", "aa:00:00:00:00:01"),
		dev(nicosim.KindNVSwitch, "s1", "aa:00:00:00:01:01"),
		dev(nicosim.KindPowerShelf, "p1", "aa:00:00:00:02:01"),
	}))
	srv, err := sim.Listen("127.0.0.1:0", s.Handler())
	require.NoError(t, err)
	t.Cleanup(func() {
		// A done context: the server closes at once instead of waiting
		// for HTTP/2 clients to go away.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = srv.Close(ctx)
	})
	c, err := nico.NewClient(srv.URL(), nico.WithTimeout(5*time.Second))
	require.NoError(t, err)
	return &fwBundle{sim: s, clock: clock, client: c, url: srv.URL()}
}

// installed reads the installed versions of one device through the client.
func (b *fwBundle) installed(t *testing.T, kind nico.Kind, id string) nico.Installed {
	t.Helper()
	got, err := b.client.InstalledVersions(context.Background(), nico.Target{Kind: kind, IDs: []string{id}})
	require.NoError(t, err)
	require.Len(t, got, 1)
	return got[0]
}

func TestInstalledVersionsPerSubComponent(t *testing.T) {
	t.Parallel()
	b := setupFirmware(t)
	one := []string{"1.0"}
	for _, tt := range []struct {
		name string
		kind nico.Kind
		id   string
		want map[string][]string
	}{
		{name: "Compute", kind: nico.KindCompute, id: "m1", want: map[string][]string{
			"bmc": one, "bios": one, "cec": one, "nic": {"1.0", "1.0"}, "cpld_mb": one, "cpld_pdb": one, "gpu": one,
		}},
		{name: "Switch", kind: nico.KindSwitch, id: "s1", want: map[string][]string{"bmc": one, "cpld": one, "bios": one, "nvos": one}},
		{name: "Shelf", kind: nico.KindPowerShelf, id: "p1", want: map[string][]string{"pmc": one, "psu": one}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := b.installed(t, tt.kind, tt.id)
			require.NoError(t, in.Err)
			require.Equal(t, tt.want, in.Components)
		})
	}
	// The two NICs are two inventory entries of the exploration report.
	invs, err := b.client.Inventory(context.Background(), nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}})
	require.NoError(t, err)
	var nics []string
	for _, it := range invs[0].Items {
		if it.Description == "NIC image" {
			nics = append(nics, it.ID)
		}
	}
	require.Equal(t, []string{"FW_NIC_0", "FW_NIC_1"}, nics)
}

// TestUnreportedDevice: an unreported device's version read answers an
// item error, for a tray (ListComponentFirmwareVersions) and a switch
// (its exploration report), until it is reported again.
func TestUnreportedDevice(t *testing.T) {
	t.Parallel()
	b := setupFirmware(t)
	yes, no := true, false
	for _, id := range []string{"m1", "s1"} {
		require.NoError(t, b.sim.Update(id, nicosim.DevicePatch{Unreported: &yes}))
	}
	in := b.installed(t, nico.KindCompute, "m1")
	require.ErrorIs(t, in.Err, nico.ErrUnreachable)
	require.ErrorContains(t, in.Err, "firmware inventory unavailable")
	require.ErrorIs(t, b.installed(t, nico.KindSwitch, "s1").Err, nico.ErrUnreachable)
	// A tray's exploration report (power, BMC firmware) is still read.
	invs, err := b.client.Inventory(context.Background(), nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}})
	require.NoError(t, err)
	require.NoError(t, invs[0].Err)

	require.NoError(t, b.sim.Update("m1", nicosim.DevicePatch{Unreported: &no}))
	require.NoError(t, b.installed(t, nico.KindCompute, "m1").Err)
}

// TestJSONObjectTarget: a JSON-object target_version installs each named
// sub-component at its own version; a plain string installs one version
// on every named sub-component, as before.
func TestJSONObjectTarget(t *testing.T) {
	t.Parallel()
	b := setupFirmware(t)
	ctx := context.Background()
	tray := nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}}
	_, err := b.client.UpdateFirmware(ctx, tray, nico.FirmwareRequest{Components: []string{"bmc", "bios", "nic"}, TargetVersion: `{"bmc":"2.0","bios":"3.1","nic":"28.41"}`})
	require.NoError(t, err)
	st, err := b.client.FirmwareStatus(ctx, tray)
	require.NoError(t, err)
	var targets []string
	for _, s := range st {
		targets = append(targets, s.TargetVersion)
	}
	require.ElementsMatch(t, []string{"2.0", "3.1", "28.41"}, targets, "each job carries its own version")
	b.clock.Advance(time.Hour)
	in := b.installed(t, nico.KindCompute, "m1")
	require.Equal(t, []string{"2.0"}, in.Components["bmc"])
	require.Equal(t, []string{"3.1"}, in.Components["bios"])
	require.Equal(t, []string{"28.41", "28.41"}, in.Components["nic"], "both NICs")
	require.Equal(t, []string{"1.0"}, in.Components["gpu"], "not named, not touched")

	// With no components named, the object names them.
	sw := nico.Target{Kind: nico.KindSwitch, IDs: []string{"s1"}}
	_, err = b.client.UpdateFirmware(ctx, sw, nico.FirmwareRequest{TargetVersion: `{"nvos":"25.02.2","cpld":"0.9"}`})
	require.NoError(t, err)
	_, err = b.client.UpdateFirmware(ctx, nico.Target{Kind: nico.KindPowerShelf, IDs: []string{"p1"}}, nico.FirmwareRequest{Components: []string{"psu"}, TargetVersion: "4.0"})
	require.NoError(t, err)
	b.clock.Advance(time.Hour)
	in = b.installed(t, nico.KindSwitch, "s1")
	require.Equal(t, map[string][]string{"nvos": {"25.02.2"}, "cpld": {"0.9"}, "bmc": {"1.0"}, "bios": {"1.0"}}, in.Components)
	require.Equal(t, map[string][]string{"pmc": {"1.0"}, "psu": {"4.0"}}, b.installed(t, nico.KindPowerShelf, "p1").Components)

	for _, tt := range []struct{ name, target, want string }{
		{name: "NotJSON", target: `{"bmc":`, want: "JSON object"},
		{name: "Empty", target: `{}`, want: "names no sub-component"},
		{name: "EmptyVersion", target: `{"bmc":"","bios":"1"}`, want: "empty version"},
		{name: "OtherComponents", target: `{"bmc":"2.0","gpu":"1"}`, want: "must be the same"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := b.client.UpdateFirmware(ctx, tray, nico.FirmwareRequest{Components: []string{"bmc", "bios"}, TargetVersion: tt.target})
			require.ErrorIs(t, err, nico.ErrRejected)
			require.ErrorContains(t, err, tt.want)
		})
	}
	_, err = b.client.UpdateFirmware(ctx, tray, nico.FirmwareRequest{TargetVersion: `{"nvos":"1"}`})
	require.ErrorContains(t, err, "nvos is not a compute firmware sub-component")
}

// TestFailOneSubComponent: a fail fault naming a sub-component fails that
// job alone, naming it; the device's other jobs complete and install.
func TestFailOneSubComponent(t *testing.T) {
	t.Parallel()
	b := setupFirmware(t)
	ctx := context.Background()
	_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultFail, Method: "UpdateComponentFirmware", Device: "m1", Component: "bios"})
	require.NoError(t, err)
	tray := nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}}
	_, err = b.client.UpdateFirmware(ctx, tray, nico.FirmwareRequest{Components: []string{"bmc", "bios", "cec"}, TargetVersion: "2.0"})
	require.NoError(t, err)
	b.clock.Advance(time.Hour)
	st, err := b.client.FirmwareStatus(ctx, tray)
	require.NoError(t, err)
	require.Len(t, st, 3)
	states := map[nico.FirmwareState]int{}
	for _, s := range st {
		states[s.State]++
		if s.State == nico.FirmwareFailed {
			require.Equal(t, "bios: firmware update failed in in_progress", s.Error)
		}
	}
	require.Equal(t, map[nico.FirmwareState]int{nico.FirmwareCompleted: 2, nico.FirmwareFailed: 1}, states)
	in := b.installed(t, nico.KindCompute, "m1")
	require.Equal(t, []string{"2.0"}, in.Components["bmc"])
	require.Equal(t, []string{"2.0"}, in.Components["cec"])
	require.Equal(t, []string{"1.0"}, in.Components["bios"], "the failed job installed nothing")

	// A component narrows only firmware-job faults.
	_, err = b.sim.Faults().Add(sim.Fault{Kind: sim.FaultItem, Component: "bios"})
	require.ErrorContains(t, err, "firmware job fault")
}

// TestLieOnOneSubComponent: the lie fault, narrowed to a sub-component,
// completes every job and leaves that one sub-component on its version.
func TestLieOnOneSubComponent(t *testing.T) {
	t.Parallel()
	b := setupFirmware(t)
	ctx := context.Background()
	_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultLie, Device: "s1", Component: "nvos"})
	require.NoError(t, err)
	sw := nico.Target{Kind: nico.KindSwitch, IDs: []string{"s1"}}
	_, err = b.client.UpdateFirmware(ctx, sw, nico.FirmwareRequest{TargetVersion: `{"nvos":"2.0","bmc":"2.0"}`})
	require.NoError(t, err)
	b.clock.Advance(time.Hour)
	st, err := b.client.FirmwareStatus(ctx, sw)
	require.NoError(t, err)
	for _, s := range st {
		require.Equal(t, nico.FirmwareCompleted, s.State)
	}
	in := b.installed(t, nico.KindSwitch, "s1")
	require.Equal(t, []string{"2.0"}, in.Components["bmc"])
	require.Equal(t, []string{"1.0"}, in.Components["nvos"])
}

// TestDesiredFirmware: the desired versions are set through the admin
// surface, served by GetDesiredFirmwareVersions and kept in the state.
func TestDesiredFirmware(t *testing.T) {
	t.Parallel()
	b := setupFirmware(t)
	ctx := context.Background()
	got, err := b.client.DesiredFirmware(ctx)
	require.NoError(t, err)
	require.Empty(t, got)

	put := func(body string) int {
		req, err := http.NewRequest(http.MethodPut, b.url+"/admin/desired-firmware", bytes.NewBufferString(body))
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusNoContent, put(`[{"vendor":"Wiwynn","model":"GB200 Compute Tray","components":{"bmc":"2.0","bios":"3.1"}},
		{"vendor":"Delta","components":{"pmc":"4.0"}}]`))
	require.Equal(t, http.StatusBadRequest, put(`[{"vendor":"x","components":{}}]`))
	require.Equal(t, http.StatusBadRequest, put(`[{"vendor":"x","components":{"bmc":""}}]`))
	want := []nico.DesiredFirmware{
		{Vendor: "Wiwynn", Model: "GB200 Compute Tray", Components: map[string]string{"bmc": "2.0", "bios": "3.1"}},
		{Vendor: "Delta", Components: map[string]string{"pmc": "4.0"}},
	}
	got, err = b.client.DesiredFirmware(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got, "the refused requests changed nothing")

	res, err := http.Get(b.url + "/admin/")
	require.NoError(t, err)
	defer res.Body.Close()
	var index bytes.Buffer
	_, _ = index.ReadFrom(res.Body)
	require.Contains(t, index.String(), "PUT    /admin/desired-firmware")

	state, err := b.sim.MarshalState()
	require.NoError(t, err)
	restored := nicosim.New(nicosim.Options{})
	require.NoError(t, restored.RestoreState(state))
	require.Equal(t, b.sim.DesiredFirmware(), restored.DesiredFirmware())
	st, ok := restored.State("m1")
	require.True(t, ok)
	require.Equal(t, map[string]int{"nic": 2}, st.Instances, "instances are kept")
}
