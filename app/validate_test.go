package app

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/reconcile"
	"github.com/nicoflow/flow/sim/nicosim"
)

// TestDevFleetValidatesClean runs `flow dev --seed 1` in-process: the
// simulators are seeded from the inventory, so ValidateComponents over
// Connect reports no diffs; a rack created afterwards reaches the
// simulators within a few seconds, and leaves them when deleted; a device
// removed from the Core simulator shows up missing.
func TestDevFleetValidatesClean(t *testing.T) {
	t.Parallel()
	devSlot(t)
	dir, err := os.MkdirTemp("", "flow-dev-validate-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithCancel(context.Background())
	r := &devRun{cancel: cancel, done: make(chan error, 1), out: &syncBuffer{}}
	env := map[string]string{"FLOW_LOG_LEVEL": "info", "FLOW_ADMIN_LISTEN": "127.0.0.1:0"}
	go func() {
		r.done <- run(ctx, []string{"flow", "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--seed", "1"}, func(k string) string { return env[k] }, r.out, r.out)
	}()
	addr := r.addr(t)
	defer r.stop(t)
	client := flowv1connect.NewFlowClient(h2cClient(), "http://"+addr)

	res, err := client.ValidateComponents(ctx, &flowv1.ValidateComponentsRequest{})
	require.NoError(t, err, r.out.String())
	require.Zero(t, res.GetTotalDiffs(), "%v", res.GetDiffs())
	require.EqualValues(t, 35, res.GetMatchCount())

	// The CLI prints the same.
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(ctx, []string{"flow", "component", "validate", "--server", addr}, func(string) string { return "" }, &stdout, &stderr))
	require.Contains(t, stdout.String(), "(0 of 0 diffs: 0 missing, 0 unexpected, 0 mismatch; 35 match; ")

	// A rack created while flow dev runs reaches the simulators.
	stdout.Reset()
	require.NoError(t, run(ctx, []string{"flow", "rack", "create", "-f", "../examples/rack-g10.json", "--server", addr}, func(string) string { return "" }, &stdout, &stderr))
	g10 := strings.TrimSpace(stdout.String())
	comps, err := client.GetComponents(ctx, &flowv1.GetComponentsRequest{})
	require.NoError(t, err)
	require.Greater(t, comps.GetTotal(), int32(35))
	require.Eventually(t, func() bool {
		res, err = client.ValidateComponents(live(ctx), &flowv1.ValidateComponentsRequest{})
		return err == nil && res.GetTotalDiffs() == 0 && res.GetMatchCount() == comps.GetTotal()
	}, 15*time.Second, 100*time.Millisecond)

	// A deleted rack leaves them (else its devices would be unexpected).
	_, err = client.DeleteRack(ctx, &flowv1.DeleteRackRequest{Id: &flowv1.UUID{Id: g10}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		// The simulators are being re-seeded meanwhile: a device vanishing
		// between Core's ID list and its detail read fails that validation
		// (Core's strict ByIds check); the next one sees a settled fleet.
		res, err = client.ValidateComponents(live(ctx), &flowv1.ValidateComponentsRequest{})
		return err == nil && res.GetTotalDiffs() == 0 && res.GetMatchCount() == 35
	}, 15*time.Second, 100*time.Millisecond)

	// A device the Core simulator loses is missing, and stays lost.
	admin := regexp.MustCompile(`nico_core_api_url=(\S+)`).FindStringSubmatch(r.out.String())
	require.NotNil(t, admin, r.out.String())
	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"flow", "simulate", "remove", "--admin", admin[1], inventory.DemoRack(0).Components[5].BMCs[0].MAC.String()}, os.Getenv, &out, &out))
	time.Sleep(devSeedInterval + 500*time.Millisecond)
	res, err = client.ValidateComponents(live(ctx), &flowv1.ValidateComponentsRequest{})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.GetMissingCount())
	require.Equal(t, inventory.DemoRack(0).Components[5].Name, res.GetDiffs()[0].GetExpected().GetInfo().GetName())
}

// live asks ValidateComponents to check the component managers now rather
// than read the last inventory sync's drift.
func live(ctx context.Context) context.Context {
	ctx, call := connect.NewClientContext(ctx)
	call.RequestHeader().Set(reconcile.ValidateModeHeader, "live")
	return ctx
}

// TestServeValidateWithoutBackends: flow serve starts with neither
// NICO_CORE_API_URL nor PSM_API_URL, keeps its (unconfigured) backends, and
// ValidateComponents names the variable to set.
func TestServeValidateWithoutBackends(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(env(map[string]string{"DATABASE_URL": dbtest.NewDB(t), "FLOW_LISTEN_ADDR": "127.0.0.1:0", "ALLOW_INSECURE_GRPC": "true", "FLOW_ADMIN_LISTEN": "off"}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := newServer(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), serveOptions{})
	require.NoError(t, err)
	require.NotNil(t, srv.backends)
	require.False(t, srv.backends.nico.Configured())
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	client := flowv1connect.NewFlowClient(h2cClient(), "http://"+srv.Addr().String())
	_, err = client.ValidateComponents(ctx, &flowv1.ValidateComponentsRequest{})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), err)
	require.ErrorContains(t, err, "NICO_CORE_API_URL")
}

func TestSimDevices(t *testing.T) {
	t.Parallel()
	rack := uuid.New()
	ip := "10.0.0.7"
	comps := []inventory.Component{
		{ID: uuid.New(), RackID: &rack, Type: inventory.ComponentTypeCompute, Name: "c1", SerialNumber: "S1", FirmwareVersion: "1.0",
			ExternalID: "fm100ht-core-id", Position: inventory.Position{SlotID: 5, TrayIdx: 1, HostID: 2},
			BMCs: []inventory.BMC{{Type: inventory.BMCTypeDPU, MAC: "aa:00:00:00:00:02"}, {Type: inventory.BMCTypeHost, MAC: "aa:00:00:00:00:01", IP: &ip}}},
		{ID: uuid.New(), RackID: &rack, RackExternalID: "core-rack-7", Type: inventory.ComponentTypePowerShelf, Name: "p1", SerialNumber: "P1", FirmwareVersion: "PS 3.1",
			BMCs: []inventory.BMC{{Type: inventory.BMCTypeHost, MAC: "aa:00:00:00:00:03"}}},
		{ID: uuid.New(), Type: inventory.ComponentTypeNVSwitch, Name: "no-bmc"},
		{ID: uuid.New(), Type: inventory.ComponentTypeToRSwitch, Name: "tor", BMCs: []inventory.BMC{{Type: inventory.BMCTypeHost, MAC: "aa:00:00:00:00:04"}}},
	}
	got := simDevices(comps)
	require.Equal(t, []nicosim.Device{
		{Kind: nicosim.KindCompute, ID: "fm100ht-core-id", RackID: rack.String(), Name: "c1", Serial: "S1", BMCMAC: "aa:00:00:00:00:01", BMCIP: ip,
			Firmware: map[string]string{"bmc": "1.0"}, SlotID: 5, TrayIndex: 1, HostID: 2,
			DPUs: []nicosim.DPU{{ID: "dpu-aa0000000002", BMCMAC: "aa:00:00:00:00:02"}}},
		{Kind: nicosim.KindPowerShelf, ID: comps[1].ID.String(), RackID: "core-rack-7", Name: "p1", Serial: "P1", BMCMAC: "aa:00:00:00:00:03",
			Firmware: map[string]string{"pmc": "PS 3.1"}},
	}, got)
}
