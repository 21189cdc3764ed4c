package app

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim"
)

// leakProcesses is a database with one demo rack, the simulators, and the
// environment of `flow serve` processes answering leaks through event rules
// every second.
type leakProcesses struct {
	sims *simulators
	pool *pgxpool.Pool
	rack leakRack
	env  func(port int) []string
}

func setupLeakProcesses(t *testing.T) *leakProcesses {
	t.Helper()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: 10 * time.Millisecond, firmwarePhase: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	dbURL := dbtest.NewDB(t)
	pool := openPool(t, dbURL)
	storeDemoRacks(t, pool, inventory.NewService(), sims, 20, 1, seedAsIs)
	cfg := leakConfig(t)
	p := &leakProcesses{sims: sims, pool: pool, env: func(port int) []string {
		return []string{
			"DATABASE_URL=" + dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port),
			"NICO_CORE_API_URL=" + sims.nicoSrv.URL(), "PSM_API_URL=" + sims.psmSrv.URL(),
			"FLOW_CONFIG_FILE=" + cfg, "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED=true", "FLOW_LOG_LEVEL=warn",
		}
	}}
	return p
}

// start starts a `flow serve` process and waits until it serves.
func (p *leakProcesses) start(t *testing.T) (*serverProcess, string, flowv1connect.FlowClient) {
	t.Helper()
	port, err := pglocal.FreePort()
	require.NoError(t, err)
	url := "http://127.0.0.1:" + itoa(port)
	proc := startServerProcess(t, p.env(port))
	waitHealthy(t, url)
	return proc, url, flowv1connect.NewFlowClient(http.DefaultClient, url)
}

// observations returns how often the one leak event was observed (0: no
// event yet).
func (p *leakProcesses) observations(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, p.pool.QueryRow(context.Background(), `SELECT coalesce(max(observations), 0) FROM event`).Scan(&n))
	return n
}

// leak links the rack to Core through url's server, waits for a first
// poll and sets a leak on the compute tray in slot 10.
func (p *leakProcesses) leak(t *testing.T, url string, client flowv1connect.FlowClient) {
	t.Helper()
	runSync(t, url)
	rows, _, err := inventory.NewService().ListRacks(context.Background(), p.pool, inventory.RackQuery{})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	p.rack = readRack(t, p.pool, rows[0].ID)
	tray := p.rack.component(t, inventory.ComponentTypeCompute, 10)
	waitPolled(t, client, tray.ID)
	require.NoError(t, p.sims.nico.SetLeak(tray.ExternalID, true))
	require.Eventually(t, func() bool { return len(leakTasks(t, client, p.rack.ID)) == 1 }, 15*time.Second, 20*time.Millisecond)
}

// TestLeakKillAndRestart: kill -9 of the server while a leak goes on, then
// a restart: the leak's occurrence key is in the database, so the new
// process keeps observing the same event and submits nothing more.
func TestLeakKillAndRestart(t *testing.T) {
	t.Parallel()
	p := setupLeakProcesses(t)
	proc, url, client := p.start(t)
	p.leak(t, url, client)
	proc.kill(t)
	before := p.observations(t)

	_, _, client = p.start(t)
	require.Eventually(t, func() bool { return p.observations(t) >= before+3 }, 30*time.Second, 50*time.Millisecond,
		"the restarted server polls the ongoing leak")
	require.Len(t, leakTasks(t, client, p.rack.ID), 1, "no second response")
	events, executions := countEvents(t, p.pool)
	require.Equal(t, 1, events)
	require.Equal(t, 1, executions)
}

// TestLeakTwoReplicas: two servers share the database; one leak gets one
// response.
func TestLeakTwoReplicas(t *testing.T) {
	t.Parallel()
	p := setupLeakProcesses(t)
	_, url, client := p.start(t)
	_, _, other := p.start(t)
	p.leak(t, url, client)
	require.Eventually(t, func() bool { return p.observations(t) >= 5 }, 30*time.Second, 50*time.Millisecond)
	require.Len(t, leakTasks(t, client, p.rack.ID), 1)
	require.Len(t, leakTasks(t, other, p.rack.ID), 1, "the other replica sees the same one task")
	events, executions := countEvents(t, p.pool)
	require.Equal(t, 1, events)
	require.Equal(t, 1, executions)
}

// TestLeakKillDuringResponse kills -9 the server during leak responses,
// again and again: each round raises a leak, kills the server once the
// leak's event is stored (the power-off calls take a second in the
// simulator, so the kill lands before, during or after them), restarts it,
// and waits for the response to complete, then clears the leak. Every
// occurrence gets exactly one execution and one task, and every task
// completes. 6 rounds; it runs under make soak only.
func TestLeakKillDuringResponse(t *testing.T) {
	soakOnly(t)
	t.Parallel()
	const rounds = 6
	ctx := context.Background()
	p := setupLeakProcesses(t)
	_, err := p.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLatency, Method: "ComponentPowerControl", Latency: sim.Duration(time.Second)})
	require.NoError(t, err)
	proc, url, client := p.start(t)
	runSync(t, url)
	rows, _, err := inventory.NewService().ListRacks(ctx, p.pool, inventory.RackQuery{})
	require.NoError(t, err)
	p.rack = readRack(t, p.pool, rows[0].ID)
	tray := p.rack.component(t, inventory.ComponentTypeCompute, 10)
	waitPolled(t, client, tray.ID)
	for round := range rounds {
		require.NoError(t, p.sims.nico.SetLeak(tray.ExternalID, true))
		require.Eventually(t, func() bool { events, _ := countEvents(t, p.pool); return events == round+1 }, 30*time.Second, 20*time.Millisecond)
		time.Sleep(time.Duration(round%3) * 700 * time.Millisecond)
		proc.kill(t)
		proc, url, client = p.start(t)
		// The response completes: the execution (rescued if its job died)
		// submitted its one task, which (its steps rescued through the
		// dead server's lease if need be) completes.
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, p.pool.QueryRow(ctx, `SELECT count(*) FROM task t JOIN event_action_execution x ON x.id::text = t.trigger_id
				WHERE t.status = 'completed' AND t.operation_code = 'force_power_off'`).Scan(&n))
			return n == round+1
		}, 3*time.Minute, 100*time.Millisecond, "round %d: the response completes", round)
		require.NoError(t, p.sims.nico.SetLeak(tray.ExternalID, false))
		require.Eventually(t, func() bool {
			return componentInfo(t, client, tray.ID).GetLeakStatus() == flowv1.LeakStatus_LEAK_STATUS_NOT_DETECTED
		}, 30*time.Second, 50*time.Millisecond)
	}
	_ = url
	events, executions := countEvents(t, p.pool)
	require.Equal(t, rounds, events, "one event per occurrence")
	require.Equal(t, rounds, executions)
	var tasks, perExecution int
	require.NoError(t, p.pool.QueryRow(ctx, `SELECT count(*), coalesce(max(n), 0) FROM (SELECT trigger_id, count(*) AS n FROM task
		WHERE trigger_type = 'event_rule_execution' GROUP BY trigger_id) s`).Scan(&tasks, &perExecution))
	require.Equal(t, rounds, tasks, "one task per execution")
	require.Equal(t, 1, perExecution, "every response once")
}
