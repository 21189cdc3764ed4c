package backend_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/psm"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
	"github.com/nicoflow/flow/sim/psmsim"
)

func TestCapabilities(t *testing.T) {
	t.Parallel()
	type row struct {
		typ  backend.ComponentType
		impl backend.Implementation
		want map[backend.Operation]bool
	}
	yes := func(ops ...backend.Operation) map[backend.Operation]bool {
		m := map[backend.Operation]bool{}
		for _, op := range ops {
			m[op] = true
		}
		return m
	}
	everything := yes(backend.Operations...)
	noBringUp := yes(backend.OpInjectExpectation, backend.OpPowerControl, backend.OpPowerStatus, backend.OpFirmwareControl,
		backend.OpFirmwareStatus, backend.OpFirmwareVersion, backend.OpDecommission, backend.OpDecommissionStatus, backend.OpInventory)
	psmOps := yes(backend.OpInjectExpectation, backend.OpPowerControl, backend.OpPowerStatus, backend.OpFirmwareControl,
		backend.OpFirmwareStatus, backend.OpFirmwareVersion, backend.OpInventory)
	for _, r := range []row{
		{backend.Compute, backend.ImplNICo, everything},
		{backend.NVSwitch, backend.ImplNICo, noBringUp},
		{backend.PowerShelf, backend.ImplNICo, noBringUp},
		{backend.PowerShelf, backend.ImplPSM, psmOps},
		{backend.Compute, backend.ImplPSM, yes()},
		{backend.NVSwitch, backend.ImplPSM, yes()},
	} {
		for _, op := range backend.Operations {
			t.Run(fmt.Sprintf("%s/%s/%s", r.typ, r.impl, op), func(t *testing.T) {
				t.Parallel()
				require.Equal(t, r.want[op], backend.Supports(r.typ, r.impl, op))
			})
		}
	}
	for _, tt := range []struct {
		typ  backend.ComponentType
		impl backend.Implementation
		op   backend.PowerOp
		want bool
	}{
		{backend.PowerShelf, backend.ImplPSM, backend.PowerOn, true},
		{backend.PowerShelf, backend.ImplPSM, backend.ForcePowerOff, true},
		{backend.PowerShelf, backend.ImplPSM, backend.Restart, false},
		{backend.PowerShelf, backend.ImplPSM, backend.WarmReset, false},
		{backend.PowerShelf, backend.ImplPSM, backend.ForceRestart, false},
		{backend.PowerShelf, backend.ImplPSM, backend.ColdReset, false},
		{backend.PowerShelf, backend.ImplNICo, backend.Restart, true},
		{backend.PowerShelf, backend.ImplNICo, backend.ColdReset, false},
		{backend.NVSwitch, backend.ImplNICo, backend.ColdReset, false},
		{backend.Compute, backend.ImplNICo, backend.ColdReset, true},
	} {
		t.Run(fmt.Sprintf("power/%s/%s/%s", tt.typ, tt.impl, tt.op), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, backend.SupportsPower(tt.typ, tt.impl, tt.op))
		})
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, yaml string
		want       map[backend.ComponentType]backend.Implementation
		nicoTO     time.Duration
		psmTO      time.Duration
		err        string
	}{
		{name: "PSMShelves", yaml: "component_managers:\n  compute: nico\n  nvswitch: nico\n  powershelf: psm\nproviders:\n  nico:\n    timeout: 45s\n  psm:\n    timeout: 20s\n",
			want: map[backend.ComponentType]backend.Implementation{backend.Compute: "nico", backend.NVSwitch: "nico", backend.PowerShelf: "psm"}, nicoTO: 45 * time.Second, psmTO: 20 * time.Second},
		{name: "OlderSpelling", yaml: "component_managers:\n  nvlswitch: carbide\nmanager_configs:\n  compute: {}\n",
			want: map[backend.ComponentType]backend.Implementation{backend.NVSwitch: "nico"}, nicoTO: time.Minute, psmTO: 30 * time.Second},
		{name: "TypeNamesAnyCase", yaml: "component_managers:\n  Compute: nico\n  COMPONENT_TYPE_NVSWITCH: nico\n  PowerShelf: psm\n",
			want: map[backend.ComponentType]backend.Implementation{backend.Compute: "nico", backend.NVSwitch: "nico", backend.PowerShelf: "psm"}, nicoTO: time.Minute, psmTO: 30 * time.Second},
		{name: "Mock", yaml: "component_managers:\n  compute: mock\n  nvswitch: nico\n  powershelf: mock\nmanager_configs:\n  compute:\n    mock: {}\n",
			want: map[backend.ComponentType]backend.Implementation{backend.Compute: "mock", backend.NVSwitch: "nico", backend.PowerShelf: "mock"}, nicoTO: time.Minute, psmTO: 30 * time.Second},
		{name: "ManagerConfigsOfAnotherImplementation", yaml: "component_managers:\n  compute: nico\nmanager_configs:\n  compute:\n    nicolegacy:\n      compute_power_delay: 2s\n", err: `manager_configs.compute.nicolegacy: compute is managed by "nico", not "nicolegacy"`},
		{name: "SameTypeTwice", yaml: "component_managers:\n  compute: nico\n  Compute: nico\n", err: "another key names too"},
		{name: "Empty", yaml: "providers: {}\n", err: "at least one"},
		{name: "Legacy", yaml: "component_managers:\n  compute: nicolegacy\n", err: "not available"},
		{name: "PSMCompute", yaml: "component_managers:\n  compute: psm\n", err: "not available"},
		{name: "UnknownType", yaml: "component_managers:\n  gpu: nico\n", err: "unknown component type"},
		{name: "BadTimeout", yaml: "component_managers:\n  compute: nico\nproviders:\n  nico:\n    timeout: soon\n", err: "timeout"},
		{name: "UnknownKey", yaml: "component_manager:\n  compute: nico\n", err: "parse"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := backend.ParseConfig([]byte(tt.yaml))
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, cfg.Managers)
			require.Equal(t, tt.nicoTO, cfg.NICoTimeout)
			require.Equal(t, tt.psmTO, cfg.PSMTimeout)
		})
	}
	cfg, err := backend.LoadConfig("")
	require.NoError(t, err)
	require.Equal(t, backend.DefaultConfig(), cfg)
	require.False(t, cfg.Uses(backend.ImplPSM))
}

func TestConfigOverride(t *testing.T) {
	t.Parallel()
	cfg := backend.DefaultConfig()
	require.NoError(t, cfg.Override(backend.Compute, " mock "))
	require.NoError(t, cfg.Override(backend.NVSwitch, "  "))
	require.Equal(t, map[backend.ComponentType]backend.Implementation{backend.Compute: "mock", backend.NVSwitch: "nico", backend.PowerShelf: "nico"}, cfg.Managers)
	require.Equal(t, backend.ImplNICo, backend.DefaultConfig().Managers[backend.Compute], "the default is not shared")
	require.ErrorContains(t, cfg.Override(backend.Compute, "nicolegacy"), `"nicolegacy" is not available`)
	require.ErrorContains(t, cfg.Override(backend.Compute, "psm"), "not available")
	require.True(t, backend.Supports(backend.Compute, backend.ImplMock, backend.OpBringUp))
	require.True(t, backend.SupportsPower(backend.Compute, backend.ImplMock, backend.ColdReset))
}

type testBundle struct {
	clock   *sim.FakeClock
	nicoSim *nicosim.Sim
	psmSim  *psmsim.Sim
	nico    *nico.Client
	psm     *psm.Client
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

const shelfMAC = "cc:00:00:00:00:01"

func setup(t *testing.T) *testBundle {
	t.Helper()
	clock := sim.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ns := nicosim.New(nicosim.Options{Clock: clock, PowerDelay: time.Second, FirmwarePhase: time.Minute, IngestionStep: time.Minute, DecommissionStep: time.Minute})
	require.NoError(t, ns.Seed([]nicosim.Device{
		{Kind: nicosim.KindCompute, ID: "m1", Name: "compute-1", BMCMAC: "cc:00:00:00:01:01", Serial: "C1", Firmware: map[string]string{"bmc": "1.0"}},
		{Kind: nicosim.KindNVSwitch, ID: "s1", Name: "switch-1", BMCMAC: "cc:00:00:00:02:01", Serial: "S1", Firmware: map[string]string{"bmc": "2.0"}},
		{Kind: nicosim.KindPowerShelf, ID: "p1", Name: "shelf-1", BMCMAC: shelfMAC, Serial: "P1", Firmware: map[string]string{"pmc": "3.0"}},
	}))
	ps := psmsim.New(psmsim.Options{Clock: clock, PowerDelay: time.Second})
	require.NoError(t, ps.Seed([]psmsim.Shelf{{MAC: shelfMAC, ChassisSerial: "P1", Firmware: "3.0"}}))
	b := &testBundle{clock: clock, nicoSim: ns, psmSim: ps}
	for _, h := range []struct {
		sim  interface{ Handler() http.Handler }
		dest func(url string)
	}{
		{ns, func(u string) { b.nico, _ = nico.NewClient(u, nico.WithTimeout(5*time.Second)) }},
		{ps, func(u string) { b.psm, _ = psm.NewClient(u, psm.WithTimeout(5*time.Second)) }},
	} {
		srv, err := sim.Listen("127.0.0.1:0", h.sim.Handler())
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv.Close(canceled()) })
		h.dest(srv.URL())
	}
	return b
}

// TestPowerShelfBackends runs every shelf operation through both shelf
// backends, and checks the ones a backend lacks fail with ErrUnsupported.
func TestPowerShelfBackends(t *testing.T) {
	t.Parallel()
	for _, impl := range []backend.Implementation{backend.ImplNICo, backend.ImplPSM} {
		t.Run(string(impl), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := backend.DefaultConfig()
			cfg.Managers[backend.PowerShelf] = impl
			m := backend.New(cfg, b.nico, b.psm).For(backend.PowerShelf)
			ctx := context.Background()
			target := backend.Target{MACs: []string{shelfMAC}}
			if impl == backend.ImplNICo {
				target = backend.Target{IDs: []string{"p1"}}
			}
			key := target.IDs
			if len(key) == 0 {
				key = target.MACs
			}

			require.NoError(t, m.InjectExpectation(ctx, []backend.Expectation{{BMCMAC: "cc:00:00:00:00:09", Serial: "P9", Username: "u", Password: "p"}}))

			_, err := m.PowerControl(ctx, target, backend.PowerOff, false)
			require.NoError(t, err)
			b.clock.Advance(time.Second)
			power, err := m.PowerStatus(ctx, target)
			require.NoError(t, err)
			require.Equal(t, map[string]backend.PowerState{key[0]: backend.PowerStateOff}, power)

			_, err = m.PowerControl(ctx, target, backend.ColdReset, false)
			require.ErrorIs(t, err, backend.ErrUnsupported)

			versions, err := m.FirmwareVersions(ctx, target)
			require.NoError(t, err)
			require.Equal(t, "3.0", versions[key[0]])

			require.NoError(t, m.StartFirmware(ctx, target, backend.FirmwareRequest{Components: []string{"pmc"}, Version: "4.0"}))
			sts, err := m.FirmwareStatus(ctx, target, nil)
			require.NoError(t, err)
			require.Len(t, sts, 1)
			require.Equal(t, backend.FirmwareQueued, sts[0].State)
			b.clock.Advance(time.Hour)
			sts, err = m.FirmwareStatus(ctx, target, nil)
			require.NoError(t, err)
			require.Equal(t, backend.FirmwareCompleted, sts[0].State)
			versions, err = m.FirmwareVersions(ctx, target)
			require.NoError(t, err)
			require.Equal(t, "4.0", versions[key[0]])

			inv, err := m.Inventory(ctx)
			require.NoError(t, err)
			require.NotEmpty(t, inv)

			if impl == backend.ImplPSM {
				require.ErrorIs(t, m.Decommission(ctx, target), backend.ErrUnsupported)
				_, err = m.DecommissionStatus(ctx, target)
				require.ErrorIs(t, err, backend.ErrUnsupported)
				require.Len(t, b.psmSim.Journal().Calls("RegisterPowershelves"), 1)
				require.Empty(t, b.nicoSim.Journal().Calls("AddExpectedPowerShelf"))
			} else {
				require.NoError(t, m.Decommission(ctx, target))
				ds, err := m.DecommissionStatus(ctx, target)
				require.NoError(t, err)
				require.Equal(t, backend.DecommissionPending, ds["p1"].Outcome)
				b.clock.Advance(time.Hour)
				ds, err = m.DecommissionStatus(ctx, target)
				require.NoError(t, err)
				require.Equal(t, backend.DecommissionDone, ds["p1"].Outcome)
				require.Len(t, b.nicoSim.Journal().Calls("AddExpectedPowerShelf"), 1)
			}
			require.ErrorIs(t, m.AllowBringUp(ctx, target), backend.ErrUnsupported)
		})
	}
}

func TestComputeAndSwitch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ms := backend.New(backend.DefaultConfig(), b.nico, b.psm)
	ctx := context.Background()

	compute := ms.For(backend.Compute)
	require.NoError(t, compute.InjectExpectation(ctx, []backend.Expectation{{BMCMAC: "cc:00:00:00:01:09", BMCIP: "10.9.0.1"}}))
	require.NoError(t, compute.AllowBringUp(ctx, backend.Target{MACs: []string{"cc:00:00:00:01:09"}}))
	b.clock.Advance(2 * time.Minute)
	st, err := compute.BringUpState(ctx, backend.Target{MACs: []string{"cc:00:00:00:01:09"}})
	require.NoError(t, err)
	require.Equal(t, backend.BringUpDone, st["cc:00:00:00:01:09"])

	_, err = compute.PowerControl(ctx, backend.Target{IDs: []string{"m1"}}, backend.ColdReset, true)
	require.NoError(t, err)
	_, err = compute.PowerControl(ctx, backend.Target{IDs: []string{"m1", "ghost"}}, backend.PowerOn, false)
	require.ErrorIs(t, err, backend.ErrNotFound)
	require.ErrorIs(t, err, nico.ErrNotFound, "the client's class stays visible")

	sw := ms.For(backend.NVSwitch)
	_, err = b.nicoSim.Faults().Add(sim.Fault{Kind: sim.FaultFail, Device: "s1", Phase: "verifying", Message: "checksum"})
	require.NoError(t, err)
	require.NoError(t, sw.StartFirmware(ctx, backend.Target{IDs: []string{"s1"}}, backend.FirmwareRequest{Components: []string{"bmc", "nvos"}, Version: "9"}))
	b.clock.Advance(2 * time.Minute)
	sts, err := sw.FirmwareStatus(ctx, backend.Target{IDs: []string{"s1", "s-unknown"}}, nil)
	require.NoError(t, err)
	require.Len(t, sts, 2, "every requested ID is reported")
	require.Equal(t, backend.FirmwareFailed, sts[0].State)
	require.Contains(t, sts[0].Message, "checksum")
	require.Equal(t, backend.FirmwareUnknown, sts[1].State)
	require.ErrorIs(t, sw.StartFirmware(ctx, backend.Target{IDs: []string{"s1"}}, backend.FirmwareRequest{Components: []string{"dpu"}}), backend.ErrUnsupported)
}

func TestNotConfigured(t *testing.T) {
	t.Parallel()
	nc, _ := nico.NewClient("")
	pc, _ := psm.NewClient("")
	cfg := backend.DefaultConfig()
	cfg.Managers[backend.PowerShelf] = backend.ImplPSM
	delete(cfg.Managers, backend.NVSwitch)
	ms := backend.New(cfg, nc, pc)
	ctx := context.Background()
	_, err := ms.For(backend.Compute).PowerStatus(ctx, backend.Target{IDs: []string{"m1"}})
	require.ErrorIs(t, err, backend.ErrNotConfigured)
	require.ErrorContains(t, err, "NICO_CORE_API_URL")
	_, err = ms.For(backend.PowerShelf).PowerStatus(ctx, backend.Target{MACs: []string{shelfMAC}})
	require.ErrorIs(t, err, backend.ErrNotConfigured)
	require.ErrorContains(t, err, "PSM_API_URL")
	_, err = ms.For(backend.NVSwitch).PowerStatus(ctx, backend.Target{IDs: []string{"s1"}})
	require.ErrorIs(t, err, backend.ErrNotConfigured)
	require.False(t, ms.Supports(backend.NVSwitch, backend.OpPowerStatus))

	// Ready tells the same before any call, naming the variable.
	err = ms.Ready(backend.Compute)
	require.ErrorIs(t, err, backend.ErrNotConfigured)
	require.ErrorIs(t, err, nico.ErrNotConfigured)
	require.ErrorContains(t, err, "NICO_CORE_API_URL")
	err = ms.Ready(backend.PowerShelf)
	require.ErrorIs(t, err, psm.ErrNotConfigured)
	require.ErrorContains(t, err, "PSM_API_URL")
	require.NoError(t, ms.Ready(backend.NVSwitch), "no manager: Supports says so")
	nc, _ = nico.NewClient("http://127.0.0.1:1")
	require.NoError(t, backend.New(cfg, nc, pc).Ready(backend.Compute))

	// mock is answered by the in-process simulator's client (WithMock).
	mockCfg := backend.DefaultConfig()
	require.NoError(t, mockCfg.Override(backend.Compute, "mock"))
	ms = backend.New(mockCfg, nc, pc)
	require.ErrorIs(t, ms.Ready(backend.Compute), backend.ErrNotConfigured, "mock without its simulator")
	require.NoError(t, ms.WithMock(nc).Ready(backend.Compute))
}

func TestParseDecommission(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		typ  backend.ComponentType
		raw  string
		want backend.DecommissionOutcome
	}{
		{backend.Compute, "Decommissioning/Decommissioned", backend.DecommissionDone},
		{backend.Compute, "Decommissioned", backend.DecommissionDone},
		{backend.Compute, "Decommissioning/Erasing", backend.DecommissionPending},
		{backend.Compute, "Maintenance(x)", backend.DecommissionPending},
		{backend.Compute, "Ready", backend.DecommissionPending},
		{backend.Compute, "Failed", backend.DecommissionFailed},
		{backend.NVSwitch, `{"state":"decommissioning","decommissioning_state":{"state":"decommissioned"}}`, backend.DecommissionDone},
		{backend.NVSwitch, `{"state":"decommissioning","decommissioning_state":{"state":"erasing"}}`, backend.DecommissionPending},
		{backend.PowerShelf, `{"state":"ready"}`, backend.DecommissionFailed},
		{backend.PowerShelf, ``, backend.DecommissionFailed},
	} {
		t.Run(string(tt.typ)+"/"+tt.raw, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, backend.ParseDecommission(tt.typ, tt.raw).Outcome)
		})
	}
}
