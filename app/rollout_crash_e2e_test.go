package app

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strings"
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

// TestKillDuringRollout kills -9 the server again and again while a
// three-phase rollout runs, restarting it each time, and checks that the
// run completes with every selected rack upgraded exactly once (one child
// task per target, one firmware start per device). 50 racks and 10 kills;
// it runs under make soak only.
func TestKillDuringRollout(t *testing.T) {
	soakOnly(t)
	t.Parallel()
	const racks, kills = 50, 10
	ctx := context.Background()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: time.Millisecond, firmwarePhase: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	// Start calls take a while, so some are in flight when a kill lands.
	_, err = sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLatency, Method: "UpdateComponentFirmware", Latency: sim.Duration(150 * time.Millisecond)})
	require.NoError(t, err)

	dbURL := dbtest.NewDB(t)
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 4})
	require.NoError(t, err)
	defer pool.Close()
	inv := inventory.NewService()
	_, devs := storeDemoRacks(t, pool, inv, sims, 400, racks, seedFirmware)

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
		return `{"component_type":"` + ct + `","stage":` + itoa(stage) + `,"timeout":"4s","retry":{"max_attempts":3,"initial_interval":"100ms","backoff_coefficient":2},
			"main_operation":{"name":"FirmwareControl","parameters":{"poll_interval":"2m","poll_timeout":"90s"}}}`
	}
	_, err = client.CreateOperationRule(ctx, &flowv1.CreateOperationRuleRequest{
		Name: "fast upgrade", OperationType: flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL, OperationCode: "upgrade", IsDefault: true,
		RuleDefinitionJson: `{"steps":[` + step("Compute", 1) + `,` + step("NVSwitch", 2) + `]}`,
	})
	require.NoError(t, err)

	id := createRun(t, client, rolloutRequest("through kills", rolloutOpts{concurrency: 5, phases: equalPhases(3, true)}))
	starts := func() int { return len(sims.nico.Journal().Calls("UpdateComponentFirmware")) }
	finished := func() bool {
		res, err := client.GetOperationRun(ctx, &flowv1.GetOperationRunRequest{Id: id})
		return err == nil && res.GetOperationRun().GetSummary().GetFinishedAt() != nil
	}
	landed := 0
	for k := range kills {
		// Kill at a random point once some more starts have gone out.
		from := starts()
		require.Eventually(t, func() bool { return starts() > from+rand.IntN(4) || finished() }, 2*time.Minute, 5*time.Millisecond)
		if finished() {
			break
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		server.kill(t)
		landed++
		t.Logf("kill %d after %d start calls", k+1, starts())
		server = startServerProcess(t, env)
		waitHealthy(t, url)
	}
	require.GreaterOrEqual(t, landed, min(kills, 3), "the kills landed while the rollout ran")
	var run *flowv1.OperationRun
	require.Eventually(t, func() bool {
		res, err := client.GetOperationRun(ctx, &flowv1.GetOperationRunRequest{Id: id, IncludeStats: true})
		require.NoError(t, err)
		run = res.GetOperationRun()
		return run.GetSummary().GetFinishedAt() != nil
	}, 5*time.Minute, 100*time.Millisecond)
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED, run.GetSummary().GetState().GetStatus(), run.GetSummary().GetStatusMessage())
	require.EqualValues(t, racks, run.GetStats().GetCumulativePhaseStats().GetOutcomeCounts().GetCompleted())

	// One child task per target, whatever the kills interrupted.
	var tasks, targets int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task WHERE trigger_id = $1`, id.GetId()).Scan(&tasks))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM operation_run_target WHERE operation_run_id = $1 AND status = 'completed'`, id.GetId()).Scan(&targets))
	require.Equal(t, racks, tasks)
	require.Equal(t, racks, targets)
	// Exactly one start reached each device (a call a kill cut short before
	// the simulator acted on it is journaled as cancelled).
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
	t.Logf("%d kills; %d racks, %d devices upgraded, each started exactly once; %d start calls cut short", landed, racks, upgraded, cut)
}
