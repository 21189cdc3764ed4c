package app

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/grpcreflect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

func canceledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func startTestSimulators(t *testing.T) *simulators {
	t.Helper()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", clock: sim.NewFakeClock(time.Unix(0, 0))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sims.Close(canceledCtx()) })
	return sims
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestSimulatorsServeReflection(t *testing.T) {
	t.Parallel()
	sims := startTestSimulators(t)
	for url, want := range map[string]string{sims.nicoSrv.URL(): "forge.Forge", sims.psmSrv.URL(): "v1.PowershelfManager"} {
		_, hc, err := nico.HTTPClient(url, nil)
		require.NoError(t, err)
		client := grpcreflect.NewClient(hc, url)
		stream := client.NewStream(context.Background())
		names, err := stream.ListServices()
		require.NoError(t, err)
		_, _ = stream.Close()
		var got []string
		for _, n := range names {
			got = append(got, string(n))
		}
		require.Contains(t, got, want)
	}
}

func TestSeededFleetValidatesClean(t *testing.T) {
	t.Parallel()
	sims := startTestSimulators(t)
	fleet := demoFleet()
	require.NoError(t, sims.Seed(fleet))
	require.Len(t, sims.psm.States(), 8, "shelves go to PSM too")

	cfg, err := LoadConfig(env(map[string]string{"NICO_CORE_API_URL": sims.nicoSrv.URL(), "PSM_API_URL": sims.psmSrv.Addr()}))
	require.NoError(t, err)
	b, err := newBackends(cfg, nil)
	require.NoError(t, err)
	var expected []backend.Expected
	for _, d := range fleet {
		expected = append(expected, backend.Expected{Name: d.Name, Type: backend.ComponentType(d.Kind), BMCMAC: d.BMCMAC})
	}
	ctx := context.Background()
	actual, err := b.managers.Inventory(ctx)
	require.NoError(t, err)
	res := backend.Validate(expected, actual, backend.ValidateOptions{})
	require.Zero(t, res.Total)
	require.Equal(t, len(fleet), res.Match)

	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"flow", "simulate", "remove", "--admin", sims.nicoSrv.URL(), fleet[0].BMCMAC}, os.Getenv, &out, &out))
	actual, err = b.managers.Inventory(ctx)
	require.NoError(t, err)
	res = backend.Validate(expected, actual, backend.ValidateOptions{})
	require.Equal(t, 1, res.Missing)
	require.Equal(t, fleet[0].BMCMAC, res.Diffs[0].MAC)
}

func TestBackendsNotConfigured(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(env(nil))
	require.NoError(t, err, "Flow starts without backends")
	b, err := newBackends(cfg, nil)
	require.NoError(t, err)
	_, err = b.managers.For(backend.Compute).PowerStatus(context.Background(), backend.Target{IDs: []string{"m1"}})
	require.ErrorIs(t, err, backend.ErrNotConfigured)
	require.ErrorContains(t, err, "NICO_CORE_API_URL")
}

func TestBackendConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "cm.yaml")
	require.NoError(t, os.WriteFile(path, []byte("component_managers:\n  compute: nico\n  nvswitch: nico\n  powershelf: psm\nproviders:\n  psm:\n    timeout: 10s\n"), 0o600))
	cfg, err := LoadConfig(env(map[string]string{"COMPONENT_MANAGER_CONFIG": path}))
	require.NoError(t, err)
	require.Equal(t, backend.ImplPSM, cfg.Components.Managers[backend.PowerShelf])
	require.Equal(t, 10*time.Second, cfg.Components.PSMTimeout)

	_, err = LoadConfig(env(map[string]string{"COMPONENT_MANAGER_CONFIG": filepath.Join(dir, "missing.yaml")}))
	require.ErrorContains(t, err, "COMPONENT_MANAGER_CONFIG")
	_, err = LoadConfig(env(map[string]string{"FLOW_NICO_TLS_CERT": "c.pem"}))
	require.ErrorContains(t, err, "FLOW_NICO_TLS_KEY")

	cfg, err = LoadConfig(env(map[string]string{"NICO_CORE_API_URL": "core:1079", "FLOW_NICO_TLS_CA": filepath.Join(dir, "none.pem")}))
	require.NoError(t, err)
	_, err = newBackends(cfg, nil)
	require.ErrorContains(t, err, "CA bundle")
}

func TestSimulateAdminCLI(t *testing.T) {
	t.Parallel()
	sims := startTestSimulators(t)
	require.NoError(t, sims.Seed(demoFleet()[:1]))
	ctx := context.Background()
	admin := sims.nicoSrv.URL()
	var out, errOut bytes.Buffer
	require.NoError(t, run(ctx, []string{"flow", "simulate", "fault", "--admin", admin, "--kind", "error", "--method", "Version", "--code", "unavailable", "--times", "1"}, os.Getenv, &out, &errOut))
	require.Contains(t, out.String(), `"id": 1`)
	out.Reset()
	require.NoError(t, run(ctx, []string{"flow", "simulate", "fault", "--admin", admin, "--list"}, os.Getenv, &out, &errOut))
	require.Contains(t, out.String(), `"kind": "error"`)

	c, err := nico.NewClient(admin)
	require.NoError(t, err)
	_, err = c.Version(ctx)
	require.ErrorIs(t, err, nico.ErrUnreachable)

	out.Reset()
	require.NoError(t, run(ctx, []string{"flow", "simulate", "journal", "--admin", admin, "--method", "Version"}, os.Getenv, &out, &errOut))
	require.Contains(t, out.String(), `"code": "unavailable"`)
	out.Reset()
	require.NoError(t, run(ctx, []string{"flow", "simulate", "fault", "--admin", admin, "--clear"}, os.Getenv, &out, &errOut))
	require.Equal(t, "ok\n", out.String())

	err = run(ctx, []string{"flow", "simulate", "fault", "--admin", admin, "--kind", "explode"}, os.Getenv, &out, &errOut)
	require.ErrorContains(t, err, "unknown fault kind")
	require.Equal(t, 2, ExitCode(err))
	err = run(ctx, []string{"flow", "simulate", "remove", "--admin", admin, "nope"}, os.Getenv, &out, &errOut)
	require.ErrorContains(t, err, "404")
}

func TestSimulateStandalone(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	// A done context: the simulators start, seed, print and shut down.
	err := run(canceledCtx(), []string{"flow", "simulate", "--demo", "--nico-listen", "127.0.0.1:0", "--psm-listen", "127.0.0.1:0"}, env(nil), &out, &out)
	require.NoError(t, err)
	require.Contains(t, out.String(), "35 devices seeded")
	require.True(t, strings.Contains(out.String(), "grpcurl -plaintext 127.0.0.1:"))
}

func TestDevSimulators(t *testing.T) {
	t.Parallel()
	cfg := Config{PSMURL: "psm.example:50052"}
	sims, err := devSimulators(&cfg, 0, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sims.Close(canceledCtx()) })
	require.Equal(t, sims.nicoSrv.URL(), cfg.NICoURL)
	require.Equal(t, "psm.example:50052", cfg.PSMURL, "a URL the user set is kept")
	resp, err := http.Get(cfg.NICoURL + "/admin/devices")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	both := Config{NICoURL: "a:1", PSMURL: "b:2"}
	none, err := devSimulators(&both, 0, 0)
	require.NoError(t, err)
	require.Nil(t, none)
}

// TestSimulateServeCreatePowerOn is docs/simulators.md's walk-through: the
// simulators seeded as `flow simulate --demo` seeds them, `flow serve`
// pointed at them, `flow rack create -f examples/rack-demo-0000.json`; the
// rack validates clean and powers off and on end to end.
func TestSimulateServeCreatePowerOn(t *testing.T) {
	t.Parallel()
	e := startE2E(t, 10*time.Millisecond)
	require.NoError(t, e.sims.Seed(demoFleet()))
	ctx := context.Background()
	flow := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := run(ctx, append(append([]string{"flow"}, args...), "--server", e.url), env(nil), &stdout, &stderr)
		require.NoError(t, err, "flow %s: %s%s", strings.Join(args, " "), stdout.String(), stderr.String())
		return stdout.String()
	}

	flow("rack", "create", "-f", "../examples/rack-demo-0000.json")
	require.Contains(t, flow("component", "validate"), "(0 of 0 diffs: 0 missing, 0 unexpected, 0 mismatch; 35 match; ")

	rack := inventory.DemoRack(0)
	flow("power", "off", rack.Name, "--wait")
	for _, c := range rack.Components {
		if c.Type != inventory.ComponentTypePowerShelf {
			require.Equal(t, "off", e.power(t, string(c.BMCs[0].MAC)), c.Name)
		}
	}
	flow("power", "on", rack.Name, "--wait")
	for _, c := range rack.Components {
		require.Equal(t, "on", e.power(t, string(c.BMCs[0].MAC)), c.Name)
	}
}

// TestSimulateLeakCLI: flow simulate leak raises and clears a device's leak
// alert, which NICo Core's leak queries then report.
func TestSimulateLeakCLI(t *testing.T) {
	t.Parallel()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	fleet := demoFleet()
	require.NoError(t, sims.Seed(fleet))
	ctx := context.Background()
	admin := sims.nicoSrv.URL()
	c, err := nico.NewClient(admin)
	require.NoError(t, err)
	var tray, sw, shelf nicosim.DeviceState
	for _, d := range sims.nico.States() {
		switch {
		case d.Kind == nicosim.KindCompute && tray.ID == "":
			tray = d
		case d.Kind == nicosim.KindNVSwitch && sw.ID == "":
			sw = d
		case d.Kind == nicosim.KindPowerShelf && shelf.ID == "":
			shelf = d
		}
	}
	var out, errOut bytes.Buffer
	leak := func(args ...string) error {
		out.Reset()
		return run(ctx, append([]string{"flow", "simulate", "leak", "--admin", admin}, args...), os.Getenv, &out, &errOut)
	}
	require.NoError(t, leak(tray.ID))
	require.Equal(t, "ok\n", out.String())
	require.NoError(t, leak(sw.BMCMAC), "by MAC")
	machines, err := c.LeakingMachineIDs(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{tray.ID}, machines, "Core lists the tray's DPUs too (include_dpus, as upstream asks); the client leaves the DPUs of a leaking tray out")
	switches, err := c.LeakingSwitchIDs(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{sw.ID}, switches)
	require.NoError(t, leak("--list"))
	require.Contains(t, out.String(), `"id": "`+tray.ID+`"`)
	require.Contains(t, out.String(), `"id": "`+sw.ID+`"`)

	require.NoError(t, leak(tray.ID, "--clear"))
	machines, err = c.LeakingMachineIDs(ctx)
	require.NoError(t, err)
	require.Empty(t, machines)

	require.ErrorContains(t, leak(shelf.ID), "power shelf")
	require.ErrorContains(t, leak("nope"), "404")
	err = leak()
	require.ErrorContains(t, err, "name a DEVICE")
	require.Equal(t, 2, ExitCode(err))
}
