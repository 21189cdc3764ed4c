package app

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

// quietSystemJobs is a FLOW_CONFIG_FILE that turns the inventory sync and
// leak detection off, so that the simulator's journal holds the task's
// version reads only.
func quietSystemJobs(t testing.TB) string {
	return writeFile(t, "flowconfig.yaml", "inventory_run_frequency: 1m\ndisable_inventory: true\nleak_detection_interval: 1m\ndisable_leak_detection: true\n")
}

// components returns r's components of type ct.
func components(r inventory.Rack, ct inventory.ComponentType) []inventory.Component {
	var out []inventory.Component
	for _, c := range r.Components {
		if c.Type == ct {
			out = append(out, c)
		}
	}
	return out
}

// stepReports returns the report's steps by component type, from its
// stages in order.
func stepReports(t *testing.T, task *flowv1.Task) map[operations.ComponentType]operations.StepReport {
	t.Helper()
	var rep operations.Report
	require.NoError(t, json.Unmarshal([]byte(task.GetReport()), &rep))
	out := map[operations.ComponentType]operations.StepReport{}
	for _, st := range rep.Stages {
		for _, s := range st.Steps {
			out[s.ComponentType] = s
		}
	}
	return out
}

// TestFirmwareVerifiedUpgrade: every firmware step ends with the read-back
// of the installed versions, which the report shows; a plain target is
// checked on the type's primary sub-component, a JSON object on each of
// its sub-components, and with no target there is nothing to compare.
func TestFirmwareVerifiedUpgrade(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, time.Millisecond)
	// One read: a device off target fails at once.
	srv := b.serve(t, map[string]string{"FLOW_CONFIG_FILE": quietSystemJobs(t), "FLOW_FIRMWARE_VERIFY_GRACE": "0"}, nil)
	ctx := context.Background()
	rule := createRule(t, srv.client, "compute then switches", fwStep("Compute", 1), fwStep("NVSwitch", 2))
	upgrade := func(t *testing.T, r inventory.Rack, version *string) *flowv1.Task {
		res, err := srv.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), RuleId: rule, TargetVersion: version})
		require.NoError(t, err)
		return waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second)
	}

	t.Run("PlainVersion", func(t *testing.T) {
		t.Parallel()
		r := b.addRack(t, 41, true)
		task := upgrade(t, r, ptr("2.0"))
		requireCompleted(t, task)
		steps := stepReports(t, task)
		require.Equal(t, "installed firmware read back from Core: 18 of 18 at target (bmc 2.0)", steps[operations.ComponentTypeCompute].Verification)
		require.Equal(t, "installed firmware read back from Core: 9 of 9 at target (bmc 2.0)", steps[operations.ComponentTypeNVSwitch].Verification)
		// One read per component type: compute from its versions list,
		// switches from their exploration report.
		for _, c := range components(r, inventory.ComponentTypeCompute) {
			require.Equal(t, 1, b.sims.nico.Journal().CountFor("ListComponentFirmwareVersions", c.ExternalID), c.Name)
		}
	})
	t.Run("PerSubComponent", func(t *testing.T) {
		t.Parallel()
		r := b.addRack(t, 42, true)
		task := upgrade(t, r, ptr(`{"compute":{"bmc":"2.0","bios":"3.1"},"nvswitch":"3.0"}`))
		requireCompleted(t, task)
		steps := stepReports(t, task)
		require.Equal(t, "installed firmware read back from Core: 18 of 18 at target (bios 3.1, bmc 2.0)", steps[operations.ComponentTypeCompute].Verification)
		require.Equal(t, "installed firmware read back from Core: 9 of 9 at target (bmc 3.0)", steps[operations.ComponentTypeNVSwitch].Verification)
		for _, c := range components(r, inventory.ComponentTypeCompute) {
			st, ok := b.sims.nico.State(c.ExternalID)
			require.True(t, ok)
			require.Equal(t, "3.1", st.Firmware["bios"], c.Name)
		}
	})
	t.Run("NoTargetVersion", func(t *testing.T) {
		t.Parallel()
		r := b.addRack(t, 43, true)
		task := upgrade(t, r, nil)
		requireCompleted(t, task)
		steps := stepReports(t, task)
		require.Equal(t, firmware.NotVerified, steps[operations.ComponentTypeCompute].Verification)
		require.Equal(t, firmware.NotVerified, steps[operations.ComponentTypeNVSwitch].Verification)
		for _, c := range components(r, inventory.ComponentTypeCompute) {
			require.Zero(t, b.sims.nico.Journal().CountFor("ListComponentFirmwareVersions", c.ExternalID), "nothing to compare, nothing read")
		}
	})
	t.Run("SubComponentNotAtTarget", func(t *testing.T) {
		t.Parallel()
		r := b.addRack(t, 44, true)
		bad := components(r, inventory.ComponentTypeCompute)[7]
		// Only the tray's BIOS job lies; its BMC is installed.
		_, err := b.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLie, Method: "UpdateComponentFirmware", Device: bad.ExternalID, Component: "bios"})
		require.NoError(t, err)
		task := upgrade(t, r, ptr(`{"compute":{"bmc":"2.0","bios":"3.1"}}`))
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_FAILED, task.GetStatus())
		require.Contains(t, task.GetMessage(), "VerifyFirmwareVersions: 1 of 18 component(s) failed: "+bad.Name+" ("+bad.ExternalID+"): bios not reported, target 3.1")
	})
}

// TestFirmwareVerifyLie: a tray whose update Core reports completed while
// its version stays old fails its task, which names the tray (its Core ID
// beside it), the sub-component, the target and the installed version.
// The others are verified once each; the liar is read again through the
// grace, then fails.
func TestFirmwareVerifyLie(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		grace string
		reads func(n int) bool
	}{
		{name: "OneRead", grace: "0", reads: func(n int) bool { return n == 1 }},
		// Read again within the grace: how many times depends on the
		// machine's load (3 or more when idle, 2 at load 50).
		{name: "Grace", grace: "1s", reads: func(n int) bool { return n >= 2 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newFWBench(t, time.Millisecond)
			srv := b.serve(t, map[string]string{"FLOW_CONFIG_FILE": quietSystemJobs(t), "FLOW_FIRMWARE_VERIFY_GRACE": tt.grace}, nil)
			r := b.addRack(t, 45, true)
			trays := components(r, inventory.ComponentTypeCompute)
			bad := trays[4]
			_, err := b.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLie, Method: "UpdateComponentFirmware", Device: bad.ExternalID})
			require.NoError(t, err)
			rule := createRule(t, srv.client, "compute", fwStep("Compute", 1))
			res, err := srv.client.UpgradeFirmware(context.Background(), &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), RuleId: rule, TargetVersion: ptr("2.0")})
			require.NoError(t, err)
			task := waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second)
			require.Equal(t, flowv1.TaskStatus_TASK_STATUS_FAILED, task.GetStatus())
			msg := task.GetMessage()
			require.Regexp(t, `^stage 1 failed: component type Compute failed: VerifyFirmwareVersions: 1 of 18 component\(s\) failed: `+
				regexp.QuoteMeta(bad.Name+" ("+bad.ExternalID+"): bmc installed 1.0, target 2.0")+`$`, msg)
			step := stepReports(t, task)[operations.ComponentTypeCompute]
			require.Equal(t, "failed", step.Status)
			require.Equal(t, []int{17, 1}, []int{step.CompletedComponents, step.FailedComponents})
			st, _ := b.sims.nico.State(bad.ExternalID)
			require.Equal(t, "1.0", st.Firmware["bmc"], "the simulator lied")
			for _, c := range trays {
				require.Equal(t, 1, b.sims.nico.Journal().CountFor("UpdateComponentFirmware", c.ExternalID), c.Name)
				if c.ExternalID != bad.ExternalID {
					require.Equal(t, 1, b.sims.nico.Journal().CountFor("ListComponentFirmwareVersions", c.ExternalID), "%s is verified once", c.Name)
				}
			}
			n := b.sims.nico.Journal().CountFor("ListComponentFirmwareVersions", bad.ExternalID)
			require.True(t, tt.reads(n), "%d reads of the liar with grace %s", n, tt.grace)
		})
	}
}

// TestKillDuringFirmwareVerification kills -9 the server while it re-reads
// a lagging tray's version, fixes the tray meanwhile, and restarts: the
// verification resumes from its checkpoint (the trays seen at their target
// are not read again), no firmware update is started again, and the task
// completes.
func TestKillDuringFirmwareVerification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newFWBench(t, 20*time.Millisecond)
	dumpJobsOnFailure(t, b.dbURL)
	r := b.addRack(t, 46, true)
	trays := components(r, inventory.ComponentTypeCompute)
	bad := trays[9]
	_, err := b.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLie, Method: "UpdateComponentFirmware", Device: bad.ExternalID})
	require.NoError(t, err)

	port, err := pglocal.FreePort()
	require.NoError(t, err)
	url := "http://127.0.0.1:" + itoa(port)
	env := []string{
		"DATABASE_URL=" + b.dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port),
		"NICO_CORE_API_URL=" + b.sims.nicoSrv.URL(), "PSM_API_URL=" + b.sims.psmSrv.URL(),
		"FLOW_LOG_LEVEL=warn", "FLOW_FIRMWARE_POLL_INTERVAL=200ms", "FLOW_FIRMWARE_VERIFY_GRACE=10m",
		"FLOW_CONFIG_FILE=" + quietSystemJobs(t),
	}
	server := startServerProcess(t, env)
	waitHealthy(t, url)
	client := flowv1connect.NewFlowClient(http.DefaultClient, url)
	rule := createRule(t, client, "compute", fwStep("Compute", 1))
	res, err := client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), RuleId: rule, TargetVersion: ptr("2.0")})
	require.NoError(t, err)
	reads := func(c inventory.Component) int {
		return b.sims.nico.Journal().CountFor("ListComponentFirmwareVersions", c.ExternalID)
	}
	// The others were verified at the first read; the liar has been read
	// again since: the verification is under way, its checkpoint saved.
	require.Eventually(t, func() bool { return reads(bad) >= 3 }, 30*time.Second, 10*time.Millisecond)
	server.kill(t)
	starts := len(b.sims.nico.Journal().Calls("UpdateComponentFirmware"))
	require.Equal(t, 1, starts, "one start for the rack's trays")

	// Core catches up while Flow is down: the tray now reports 2.0.
	st, ok := b.sims.nico.State(bad.ExternalID)
	require.True(t, ok)
	require.True(t, b.sims.nico.Remove(bad.ExternalID))
	dev := st.Device
	dev.Firmware = map[string]string{"bmc": "2.0"}
	require.NoError(t, b.sims.nico.Seed([]nicosim.Device{dev}))
	before := reads(bad)

	startServerProcess(t, env)
	waitHealthy(t, url)
	task := waitTask(t, client, res.GetTaskIds()[0], 90*time.Second)
	requireCompleted(t, task)
	require.Equal(t, "installed firmware read back from Core: 18 of 18 at target (bmc 2.0)", stepReports(t, task)[operations.ComponentTypeCompute].Verification)
	require.Greater(t, reads(bad), before, "the verification resumed")
	for _, c := range trays {
		require.Equal(t, 1, b.sims.nico.Journal().CountFor("UpdateComponentFirmware", c.ExternalID), "%s: no update started again", c.Name)
		if c.ExternalID != bad.ExternalID {
			require.Equal(t, 1, reads(c), "%s: verified before the kill, not read again", c.Name)
		}
	}
	require.Len(t, b.sims.nico.Journal().Calls("UpdateComponentFirmware"), starts)
}

// TestFirmwareVerifyThroughPSM: power shelves PSM manages are verified
// through PSM's own read of each shelf's PMC firmware.
func TestFirmwareVerifyThroughPSM(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, time.Millisecond)
	srv := b.serve(t, map[string]string{"FLOW_CONFIG_FILE": quietSystemJobs(t), "COMPONENT_MANAGER_POWERSHELF": "psm", "FLOW_FIRMWARE_VERIFY_GRACE": "0"}, nil)
	r := b.addRack(t, 47, false)
	rule := createRule(t, srv.client, "shelves", fwStep("PowerShelf", 1))
	res, err := srv.client.UpgradeFirmware(context.Background(), &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), RuleId: rule, TargetVersion: ptr("2.0.0")})
	require.NoError(t, err)
	task := waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second)
	requireCompleted(t, task)
	require.Equal(t, "installed firmware read back from PSM: 8 of 8 at target (pmc 2.0.0)", stepReports(t, task)[operations.ComponentTypePowerShelf].Verification)
	require.Zero(t, len(b.sims.nico.Journal().Calls("UpdateComponentFirmware")), "PSM, not Core, updated the shelves")
}

// TestIngestOntoTheBaselineVerified: with FLOW_INGEST_FIRMWARE_UPGRADE and
// an active baseline, an ingest task starts its updates at the baseline's
// versions and verifies each of them.
func TestIngestOntoTheBaselineVerified(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, time.Millisecond)
	srv := b.serve(t, map[string]string{"FLOW_CONFIG_FILE": quietSystemJobs(t), "FLOW_INGEST_FIRMWARE_UPGRADE": "true", "FLOW_FIRMWARE_VERIFY_GRACE": "0"}, nil)
	ctx := context.Background()
	admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, srv.url)
	_, err := admin.CreateBaseline(ctx, &adminv1.CreateBaselineRequest{Name: "gb200", Activate: true, Entries: []*adminv1.BaselineEntry{
		{ComponentType: "compute", Component: "bmc", Version: "2.0"},
		{ComponentType: "compute", Component: "bios", Version: "3.1"},
		{ComponentType: "nvswitch", Component: "nvos", Version: "25.02"},
	}})
	require.NoError(t, err)
	r := b.addRack(t, 48, false)
	res, err := srv.client.IngestRack(ctx, &flowv1.IngestRackRequest{TargetSpec: rackSpec(r.Name)})
	require.NoError(t, err)
	task := waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second)
	requireCompleted(t, task)
	steps := stepReports(t, task)
	require.Equal(t, "installed firmware read back from Core: 18 of 18 at target (bios 3.1, bmc 2.0)", steps[operations.ComponentTypeCompute].Verification)
	require.Equal(t, "installed firmware read back from Core: 9 of 9 at target (nvos 25.02)", steps[operations.ComponentTypeNVSwitch].Verification)
	for _, mac := range macs(r, inventory.ComponentTypeCompute) {
		st, _ := b.sims.nico.State(mac)
		require.Equal(t, "3.1", st.Firmware["bios"], mac)
	}
}
