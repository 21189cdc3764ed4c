package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/sim/nicosim"
)

// TestSyncRunsOnLeaderAndSurvivesItsDeath runs two `flow serve` processes on
// one database with a 1s inventory_run_frequency: cycles come once per
// interval (not once per process), never overlap, and keep coming after
// the leader is killed -9.
func TestSyncRunsOnLeaderAndSurvivesItsDeath(t *testing.T) {
	soakOnly(t)
	t.Parallel()
	ctx := context.Background()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	dbURL := dbtest.NewDB(t)
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 4})
	require.NoError(t, err)
	defer pool.Close()
	inv := inventory.NewService()
	storeDemoRacks(t, pool, inv, sims, 300, 2, seedAsIs)
	cfgFile := filepath.Join(t.TempDir(), "flowconfig.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte("inventory_run_frequency: 1s\n"), 0o644))

	start := func() (*serverProcess, string) {
		port, err := pglocal.FreePort()
		require.NoError(t, err)
		p := startServerProcess(t, []string{
			"DATABASE_URL=" + dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port), "FLOW_CONFIG_FILE=" + cfgFile,
			"NICO_CORE_API_URL=" + sims.nicoSrv.URL(), "PSM_API_URL=" + sims.psmSrv.URL(), "FLOW_LOG_LEVEL=warn",
		})
		url := "http://127.0.0.1:" + itoa(port)
		waitHealthy(t, url)
		return p, url
	}
	type cycle struct{ start, end time.Time }
	cycles := func() []cycle {
		rows, err := pool.Query(ctx, `SELECT started_at, finished_at FROM inventory_sync_run ORDER BY started_at`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (c cycle, err error) { return c, r.Scan(&c.start, &c.end) })
		require.NoError(t, err)
		return out
	}
	leader := func() string {
		var id string
		err := pool.QueryRow(ctx, `SELECT leader_id FROM river_leader`).Scan(&id)
		if err != nil {
			return ""
		}
		return id
	}

	first, _ := start()
	require.Eventually(t, func() bool { return len(cycles()) >= 2 }, 60*time.Second, 100*time.Millisecond)
	firstLeader := leader()
	require.NotEmpty(t, firstLeader)
	start()

	// Over a few seconds with both processes up, one cycle per interval.
	before := len(cycles())
	time.Sleep(5 * time.Second)
	got := len(cycles()) - before
	require.GreaterOrEqual(t, got, 2, "cycles keep coming")
	require.LessOrEqual(t, got, 7, "one cycle per 1s interval, not one per process")
	all := cycles()
	for i := 1; i < len(all); i++ {
		require.False(t, all[i].start.Before(all[i-1].end), "cycles %d and %d overlap", i-1, i)
	}
	require.Equal(t, firstLeader, leader(), "the first process still leads")

	// Kill the leader: the survivor is elected and runs the cycles.
	first.kill(t)
	killed := len(cycles())
	require.Eventually(t, func() bool { return leader() != "" && leader() != firstLeader }, 90*time.Second, 200*time.Millisecond)
	require.Eventually(t, func() bool { return len(cycles()) >= killed+2 }, 60*time.Second, 200*time.Millisecond)

	// Every component is linked to its Core device and on.
	var unlinked int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM component WHERE external_id IS NULL OR power_state <> 'on'`).Scan(&unlinked))
	require.Zero(t, unlinked)
}

// TestAdminSyncWithoutCore: without NICo Core, GetSyncStatus is NotFound
// until a cycle ran; RunSync (Connect JSON, as curl sends it) records a
// cycle whose parts fail naming the variable to set, and changes nothing.
func TestAdminSyncWithoutCore(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(env(map[string]string{"DATABASE_URL": dbtest.NewDB(t), "FLOW_LISTEN_ADDR": "127.0.0.1:0", "ALLOW_INSECURE_GRPC": "true", "FLOW_ADMIN_LISTEN": "off"}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := newServer(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), serveOptions{})
	require.NoError(t, err)
	require.NotContains(t, srv.system.Names(), InventorySyncJob, "no sync job without Core")
	require.NotContains(t, srv.system.Names(), LeakDetectionJob, "no leak detection without Core")
	require.Contains(t, srv.system.Names(), ScheduleTickJob, "the schedule tick is a system job")
	require.Contains(t, srv.system.Names(), EventRuleRescueJob)
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + srv.Addr().String() + "/flow.admin.v1.AdminService/"
	post := func(method string) (int, string) {
		res, err := http.Post(base+method, "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	code, body := post("GetSyncStatus")
	require.Equal(t, http.StatusNotFound, code, body)
	require.Contains(t, body, "no inventory sync has run yet")
	code, body = post("RunSync")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"trigger":"manual"`)
	require.Contains(t, body, "NICO_CORE_API_URL")
	code, body = post("GetSyncStatus")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"name":"compute"`)
	require.NotContains(t, body, `"ok":true`)
}

// TestSyncFailedStateHoldsOperationsAtTheGate: Core reports a compute tray
// Failed; within a sync interval Flow's status for it is Error, a power-on
// of its rack waits at the readiness gate without touching the hardware,
// and it runs once Core says Ready again.
func TestSyncFailedStateHoldsOperationsAtTheGate(t *testing.T) {
	t.Parallel()
	cfgFile := filepath.Join(t.TempDir(), "flowconfig.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte("inventory_run_frequency: 1s\n"), 0o644))
	e := startE2E(t, time.Millisecond, func(env map[string]string) { env["FLOW_CONFIG_FILE"] = cfgFile })
	rack := e.addRack(t, 14, true)
	ctx := context.Background()
	var tray inventory.Component
	for _, c := range rack.Components {
		if c.Type == inventory.ComponentTypeCompute {
			tray = c
			break
		}
	}
	status := func() *flowv1.ComponentOperationStatus {
		res, err := e.client.GetComponentInfoByID(ctx, &flowv1.GetComponentInfoByIDRequest{Id: &flowv1.UUID{Id: tray.ID.String()}})
		require.NoError(t, err)
		return res.GetComponent().GetStatus()
	}
	require.Eventually(t, func() bool { return status().GetPhase() == flowv1.Phase_PHASE_READY }, 30*time.Second, 100*time.Millisecond)

	failed, ready := "Failed/HostFailure", "Ready"
	require.NoError(t, e.sims.nico.Update(tray.BMCs[0].MAC.String(), nicosim.DevicePatch{State: &failed}))
	require.Eventually(t, func() bool { return status().GetPhase() == flowv1.Phase_PHASE_ERROR }, 30*time.Second, 100*time.Millisecond)
	require.Contains(t, status().GetBlockedOperations(), flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL)

	e.sims.nico.Journal().Reset()
	res, err := e.client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	time.Sleep(2 * time.Second)
	got, err := e.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: res.GetTaskIds()})
	require.NoError(t, err)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_RUNNING, got.GetTasks()[0].GetStatus())
	require.Empty(t, e.sims.nico.Journal().Calls("ComponentPowerControl"), "no power call while Core says Failed")

	require.NoError(t, e.sims.nico.Update(tray.BMCs[0].MAC.String(), nicosim.DevicePatch{State: &ready}))
	task := e.wait(t, res.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
	require.NotEmpty(t, e.sims.nico.Journal().Calls("ComponentPowerControl"))
}
