package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// How storeDemoRacks seeds the simulators' devices.
type seedMode int

const (
	seedAsIs     seedMode = iota // the simulator's defaults
	seedOff                      // powered off
	seedFirmware                 // BMC firmware 1.0
)

// storeDemoRacks stores the demo racks first … first+n-1 in pool and seeds
// their devices into sims, and returns the racks' names and the devices.
func storeDemoRacks(t testing.TB, pool *pgxpool.Pool, inv *inventory.Service, sims *simulators, first, n int, mode seedMode) ([]string, []nicosim.Device) {
	t.Helper()
	ctx := context.Background()
	var names []string
	var devs []nicosim.Device
	for i := range n {
		r := inventory.DemoRack(first + i)
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			r.ID, err = inv.CreateRack(ctx, tx, r)
			return err
		}))
		names = append(names, r.Name)
		for _, c := range r.Components {
			d := nicosim.Device{Kind: strings.ToLower(string(c.Type)), Name: c.Name, Serial: c.SerialNumber, BMCMAC: c.BMCs[0].MAC.String(), RackID: r.ID.String()}
			for _, b := range c.BMCs[1:] {
				if b.Type == inventory.BMCTypeDPU {
					d.DPUs = append(d.DPUs, nicosim.DPU{ID: "dpu-" + strings.ReplaceAll(b.MAC.String(), ":", ""), BMCMAC: b.MAC.String()})
				}
			}
			switch mode {
			case seedOff:
				d.PoweredOff = true
			case seedFirmware:
				d.Firmware = map[string]string{"bmc": "1.0"}
			}
			devs = append(devs, d)
		}
	}
	require.NoError(t, sims.Seed(devs))
	return names, devs
}

// serverProcess is `flow serve` running as a child process of the test.
type serverProcess struct {
	cmd *exec.Cmd
	env []string
	log *processLog
}

// processLog keeps what a server process wrote to stderr (also passed on to
// the test's), for tests that ask what it logged.
type processLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *processLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

// len is how much has been logged so far: a mark for since.
func (l *processLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

// since returns what was logged after mark (all of it, if mark is past
// the end: a mark of another process).
func (l *processLog) since(mark int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if mark > l.buf.Len() {
		mark = 0
	}
	return string(l.buf.Bytes()[mark:])
}

func startServerProcess(t testing.TB, env []string) *serverProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"FLOW_TEST_CHILD=serve", insecureOptIn, "FLOW_ADMIN_LISTEN=off"}, env...)...)
	p := &serverProcess{cmd: cmd, env: env, log: &processLog{}}
	cmd.Stderr = io.MultiWriter(os.Stderr, p.log)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return p
}

func (p *serverProcess) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	_ = p.cmd.Wait()
}

// waitHealthy waits for the server at url to answer its health check,
// for a minute; failing, it says what the last attempt got (a refused
// connection: the server never listened or exited; a status: something
// else answers on the port).
func waitHealthy(t testing.TB, url string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var last string
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := client.Post(url+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader(`{}`))
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("HTTP %d: %s", res.StatusCode, body)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("server at %s not healthy after 60s; last attempt: %s", url, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKillDuringPowerOn kills -9 the server while 50 power-on tasks run,
// restarts it, and checks every task completes, once.
func TestKillDuringPowerOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: time.Millisecond, firmwarePhase: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	// Every power call takes a while, so tasks are in flight when the kill lands.
	_, err = sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultLatency, Method: "ComponentPowerControl", Latency: sim.Duration(300 * time.Millisecond)})
	require.NoError(t, err)

	dbURL := dbtest.NewDB(t)
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 4})
	require.NoError(t, err)
	defer pool.Close()
	inv := inventory.NewService()
	const racks = 50
	names, devs := storeDemoRacks(t, pool, inv, sims, 100, racks, seedOff)

	port, err := pglocal.FreePort()
	require.NoError(t, err)
	url := "http://127.0.0.1:" + itoa(port)
	env := []string{
		"DATABASE_URL=" + dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port),
		"NICO_CORE_API_URL=" + sims.nicoSrv.URL(), "PSM_API_URL=" + sims.psmSrv.URL(),
		"FLOW_LOG_LEVEL=warn",
	}
	server := startServerProcess(t, env)
	waitHealthy(t, url)
	client := flowv1connect.NewFlowClient(http.DefaultClient, url)

	// Default settings: the killed process's steps move on once its lease
	// expires. A default power-on rule that polls quickly keeps it short.
	step := func(ct string, stage int) string {
		return `{"component_type":"` + ct + `","stage":` + itoa(stage) + `,"timeout":"5s","retry":{"max_attempts":3,"initial_interval":"100ms","backoff_coefficient":2},
			"main_operation":{"name":"PowerControl"},
			"post_operation":[{"name":"VerifyPowerStatus","timeout":"30s","poll_interval":"200ms","parameters":{"expected_status":"on"}}]}`
	}
	_, err = client.CreateOperationRule(ctx, &flowv1.CreateOperationRuleRequest{
		Name: "fast power on", OperationType: flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL, OperationCode: "power_on", IsDefault: true,
		RuleDefinitionJson: `{"steps":[` + step("PowerShelf", 1) + `,` + step("NVSwitch", 2) + `,` + step("Compute", 3) + `]}`,
	})
	require.NoError(t, err)

	ids := make([]*flowv1.UUID, racks)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			res, err := client.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(name)})
			if err == nil {
				ids[i] = res.GetTaskIds()[0]
			}
		})
	}
	wg.Wait()
	for i, id := range ids {
		require.NotNil(t, id, "rack %s submitted", names[i])
	}
	// Kill once some power calls have gone out and well before all are done.
	require.Eventually(t, func() bool { return len(sims.nico.Journal().Calls("ComponentPowerControl")) >= racks }, 30*time.Second, 5*time.Millisecond)
	server.kill(t)
	before := len(sims.nico.Journal().Calls("ComponentPowerControl"))
	require.Less(t, before, 3*racks, "the kill landed while tasks ran")

	restarted := time.Now()
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
	}, 120*time.Second, 100*time.Millisecond)

	// Every device is on; each power call was sent once, or twice at most
	// when the kill caught it in flight.
	perDevice := map[string]int{}
	var resumed time.Duration // restart → the latest start of a call sent again
	for _, c := range sims.nico.Journal().Calls("ComponentPowerControl") {
		for _, d := range c.Devices {
			perDevice[strings.ToLower(d)]++
			if perDevice[strings.ToLower(d)] == 2 {
				resumed = max(resumed, c.Time.Add(-300*time.Millisecond).Sub(restarted))
			}
		}
	}
	// The calls the kill caught run again once the killed process's lease
	// expires: within 15 s of the restart (which came right after the kill).
	require.LessOrEqual(t, resumed, 15*time.Second, "a call caught by the kill was sent again %s after the restart", resumed)
	resent := 0
	for _, d := range devs {
		n := perDevice[strings.ToLower(d.BMCMAC)]
		require.GreaterOrEqual(t, n, 1, d.Name)
		require.LessOrEqual(t, n, 2, d.Name)
		if n == 2 {
			resent++
		}
		st, ok := sims.nico.State(d.BMCMAC)
		require.True(t, ok)
		require.Equal(t, "on", st.Power, d.Name)
	}
	t.Logf("%d power calls before the kill; %d of %d devices got their call again after the restart, the last %s after it", before, resent, len(devs), resumed.Round(time.Millisecond))
	list, err := client.ListTasks(ctx, &flowv1.ListTasksRequest{})
	require.NoError(t, err)
	require.EqualValues(t, racks, list.GetTotal(), "one task per rack, none duplicated")
}

func itoa(n int) string { return strconv.Itoa(n) }
