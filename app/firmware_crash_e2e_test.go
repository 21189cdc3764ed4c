package app

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

// TestKillDuringFirmwareUpgrades kills -9 the server while 20 firmware
// upgrades start and poll, restarts it, and checks every upgrade completes
// with exactly one firmware start per device.
func TestKillDuringFirmwareUpgrades(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: time.Millisecond, firmwarePhase: 500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	// Every start call takes a while, so some are in flight when the kill lands.
	_, err = sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLatency, Method: "UpdateComponentFirmware", Latency: sim.Duration(300 * time.Millisecond)})
	require.NoError(t, err)

	dbURL := dbtest.NewDB(t)
	dumpJobsOnFailure(t, dbURL)
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 4})
	require.NoError(t, err)
	defer pool.Close()
	inv := inventory.NewService()
	const racks = 20
	names, devs := storeDemoRacks(t, pool, inv, sims, 200, racks, seedFirmware)

	port, err := pglocal.FreePort()
	require.NoError(t, err)
	url := "http://127.0.0.1:" + itoa(port)
	env := []string{
		"DATABASE_URL=" + dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port),
		"NICO_CORE_API_URL=" + sims.nicoSrv.URL(), "PSM_API_URL=" + sims.psmSrv.URL(),
		"FLOW_LOG_LEVEL=warn", "FLOW_FIRMWARE_POLL_INTERVAL=200ms",
	}
	server := startServerProcess(t, env)
	waitHealthy(t, url)
	client := flowv1connect.NewFlowClient(http.DefaultClient, url)
	// Default engine settings; a rule with short timeouts keeps retries
	// (if any) quick.
	step := func(ct string, stage int) string {
		return `{"component_type":"` + ct + `","stage":` + itoa(stage) + `,"timeout":"5s","retry":{"max_attempts":3,"initial_interval":"100ms","backoff_coefficient":2},
			"main_operation":{"name":"FirmwareControl","parameters":{"poll_interval":"2m","poll_timeout":"90s"}}}`
	}
	_, err = client.CreateOperationRule(ctx, &flowv1.CreateOperationRuleRequest{
		Name: "fast upgrade", OperationType: flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL, OperationCode: "upgrade", IsDefault: true,
		RuleDefinitionJson: `{"steps":[` + step("Compute", 1) + `,` + step("NVSwitch", 2) + `]}`,
	})
	require.NoError(t, err)

	ids := make([]*flowv1.UUID, racks)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			res, err := client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(name), TargetVersion: ptr("2.0")})
			if err == nil {
				ids[i] = res.GetTaskIds()[0]
			}
		})
	}
	wg.Wait()
	for i, id := range ids {
		require.NotNil(t, id, "rack %s submitted", names[i])
	}
	starts := func() int { return len(sims.nico.Journal().Calls("UpdateComponentFirmware")) }
	// Kill while compute starts go out and earlier ones are being polled.
	require.Eventually(t, func() bool { return starts() >= racks/2 }, 30*time.Second, 5*time.Millisecond)
	server.kill(t)
	before, polls := starts(), len(sims.nico.Journal().Calls("GetComponentFirmwareStatus"))
	require.Less(t, before, 2*racks, "the kill landed while upgrades ran")

	startServerProcess(t, env)
	waitHealthy(t, url)
	require.Eventually(t, func() bool {
		res, err := client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: ids})
		require.NoError(t, err)
		for _, task := range res.GetTasks() {
			if task.GetStatus() != flowv1.TaskStatus_TASK_STATUS_COMPLETED {
				require.NotEqual(t, flowv1.TaskStatus_TASK_STATUS_FAILED, task.GetStatus(), task.GetMessage())
				return false
			}
		}
		return true
	}, 90*time.Second, 100*time.Millisecond)

	// Exactly one start reached each device (a call the kill cut short
	// before the simulator acted on it is journaled as cancelled).
	okStarts, cut := map[string]int{}, 0
	for _, c := range sims.nico.Journal().Calls("UpdateComponentFirmware") {
		if c.Code != "ok" {
			cut++
			continue
		}
		for _, d := range c.Devices {
			okStarts[strings.ToLower(d)]++
		}
	}
	upgraded := 0
	for _, d := range devs {
		if d.Kind == nicosim.KindPowerShelf {
			continue
		}
		require.Equal(t, 1, okStarts[strings.ToLower(d.BMCMAC)], d.Name)
		st, ok := sims.nico.State(d.BMCMAC)
		require.True(t, ok)
		require.Equal(t, "2.0", st.Firmware["bmc"], d.Name)
		upgraded++
	}
	t.Logf("%d start calls and %d status polls before the kill; %d start calls cut short by it; %d devices upgraded, each started exactly once; %d status polls in all",
		before, polls, cut, upgraded, len(sims.nico.Journal().Calls("GetComponentFirmwareStatus")))
}
