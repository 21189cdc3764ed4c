package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

// fwBench is a database and simulators on which Flow servers can be
// started, stopped and restarted with different settings.
type fwBench struct {
	sims  *simulators
	dbURL string
	inv   *inventory.Service
}

func newFWBench(t testing.TB, phase time.Duration) *fwBench {
	t.Helper()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: time.Millisecond, firmwarePhase: phase})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	return &fwBench{sims: sims, dbURL: dbtest.NewDB(t), inv: inventory.NewService()}
}

// fwServer is one in-process Flow server of a bench.
type fwServer struct {
	client flowv1connect.FlowClient
	url    string
	stop   func()
}

// serve starts a server with the bench's database and simulators, a fast
// firmware poll and env's extra settings, logging at debug level into logs
// (when set).
func (b *fwBench) serve(t testing.TB, env map[string]string, logs io.Writer) *fwServer {
	t.Helper()
	vars := map[string]string{
		"DATABASE_URL": b.dbURL, "FLOW_LISTEN_ADDR": "127.0.0.1:0",
		"NICO_CORE_API_URL": b.sims.nicoSrv.URL(), "PSM_API_URL": b.sims.psmSrv.URL(),
		"FLOW_SHUTDOWN_TIMEOUT": "5s", "FLOW_FIRMWARE_POLL_INTERVAL": "100ms",
		"ALLOW_INSECURE_GRPC": "true", "FLOW_ADMIN_LISTEN": "off",
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := LoadConfig(func(k string) string { return vars[k] })
	require.NoError(t, err)
	if logs == nil {
		logs = io.Discard
		if os.Getenv("FLOW_TEST_LOGS") != "" {
			logs = os.Stderr
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := newServer(ctx, cfg, newLogger(logs, "json", -4), serveOptions{})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	url := "http://" + srv.Addr().String()
	return &fwServer{client: flowv1connect.NewFlowClient(http.DefaultClient, url), url: url, stop: stop}
}

// addRack stores demo rack i and seeds the simulators with its devices, on,
// with BMC firmware 1.0. linked gives every component a Core ID (what
// inventory sync would do), as decommission needs.
func (b *fwBench) addRack(t testing.TB, i int, linked bool) inventory.Rack {
	t.Helper()
	ctx := context.Background()
	r := inventory.DemoRack(i)
	if linked {
		for k := range r.Components {
			r.Components[k].ExternalID = uuid.NewString()
		}
	}
	pool, err := db.Open(ctx, b.dbURL, db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		r.ID, err = b.inv.CreateRack(ctx, tx, r)
		return err
	}))
	var devs []nicosim.Device
	for _, c := range r.Components {
		devs = append(devs, nicosim.Device{
			Kind: strings.ToLower(string(c.Type)), ID: c.ExternalID, Name: c.Name, Serial: c.SerialNumber,
			BMCMAC: c.BMCs[0].MAC.String(), RackID: r.ID.String(), Firmware: map[string]string{"bmc": "1.0"},
			SlotID: int(c.Position.SlotID), TrayIndex: int(c.Position.TrayIdx),
		})
	}
	require.NoError(t, b.sims.Seed(devs))
	return r
}

// waitTask polls a task until it has finished and returns it.
func waitTask(t *testing.T, c flowv1connect.FlowClient, id *flowv1.UUID, within time.Duration) *flowv1.Task {
	t.Helper()
	var task *flowv1.Task
	require.Eventually(t, func() bool {
		res, err := c.GetTasksByIDs(context.Background(), &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{id}})
		require.NoError(t, err)
		task = res.GetTasks()[0]
		switch task.GetStatus() {
		case flowv1.TaskStatus_TASK_STATUS_COMPLETED, flowv1.TaskStatus_TASK_STATUS_FAILED, flowv1.TaskStatus_TASK_STATUS_TERMINATED:
			return true
		}
		return false
	}, within, 20*time.Millisecond)
	return task
}

func requireCompleted(t *testing.T, task *flowv1.Task) operations.Report {
	t.Helper()
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
	var rep operations.Report
	require.NoError(t, json.Unmarshal([]byte(task.GetReport()), &rep))
	for _, st := range rep.Stages {
		require.Contains(t, []string{"completed", "skipped"}, st.Status)
		for _, step := range st.Steps {
			if step.Status != "skipped" {
				require.Equal(t, step.TotalComponents, step.CompletedComponents, "stage %d %s", st.Number, step.ComponentType)
			}
		}
	}
	return rep
}

// macs returns the BMC MACs of r's components of type ct.
func macs(r inventory.Rack, ct inventory.ComponentType) []string {
	var out []string
	for _, c := range r.Components {
		if c.Type == ct {
			out = append(out, c.BMCs[0].MAC.String())
		}
	}
	return out
}

func newKeyFile(t *testing.T) string {
	t.Helper()
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	p := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(raw)+"\n"), 0o600))
	return p
}

func TestRackOperationsEndToEnd(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, time.Millisecond)
	srv := b.serve(t, nil, nil)
	ctx := context.Background()

	t.Run("UpgradeFirmware", func(t *testing.T) {
		t.Parallel()
		r := b.addRack(t, 11, false)
		res, err := srv.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), TargetVersion: ptr(`{"compute":"2.0","nvswitch":"3.0"}`)})
		require.NoError(t, err)
		rep := requireCompleted(t, waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second))
		require.Len(t, rep.Stages, 2)
		for _, mac := range macs(r, inventory.ComponentTypeCompute) {
			require.Equal(t, 1, b.sims.nico.Journal().CountFor("UpdateComponentFirmware", mac), mac)
			st, _ := b.sims.nico.State(mac)
			require.Equal(t, "2.0", st.Firmware["bmc"], "per-type target version")
		}
		for _, mac := range macs(r, inventory.ComponentTypeNVSwitch) {
			st, _ := b.sims.nico.State(mac)
			require.Equal(t, "3.0", st.Firmware["nvos"])
		}
		for _, mac := range macs(r, inventory.ComponentTypePowerShelf) {
			require.Zero(t, b.sims.nico.Journal().CountFor("UpdateComponentFirmware", mac), "shelves are not in the built-in rule")
		}
	})
	t.Run("BringUp", func(t *testing.T) {
		t.Parallel()
		r := b.addRack(t, 12, false)
		res, err := srv.client.BringUpRack(ctx, &flowv1.BringUpRackRequest{TargetSpec: rackSpec(r.Name)})
		require.NoError(t, err)
		// The built-in rule sleeps 30s before the last compute power-on.
		rep := requireCompleted(t, waitTask(t, srv.client, res.GetTaskIds()[0], 90*time.Second))
		require.Len(t, rep.Stages, 6)
		// A second bring-up on the busy rack is rejected: no queue options.
		_, err = srv.client.BringUpRack(ctx, &flowv1.BringUpRackRequest{TargetSpec: rackSpec(r.Name)})
		require.NoError(t, err, "the rack is idle again")
	})
	t.Run("Ingest", func(t *testing.T) {
		t.Parallel()
		r := b.addRack(t, 13, false)
		res, err := srv.client.IngestRack(ctx, &flowv1.IngestRackRequest{TargetSpec: rackSpec(r.Name)})
		require.NoError(t, err)
		requireCompleted(t, waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second))
		require.Len(t, b.sims.nico.Journal().Calls("AddExpectedMachine"), 18)
		require.Len(t, b.sims.nico.Journal().Calls("AddExpectedSwitch"), 9)
		// Only shelves selected: the rule has no step for them.
		_, err = srv.client.IngestRack(ctx, &flowv1.IngestRackRequest{TargetSpec: &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: []*flowv1.RackTarget{{
			Identifier: &flowv1.RackTarget_Name{Name: r.Name}, ComponentTypes: []flowv1.ComponentType{flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF},
		}}}}}})
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	})
	t.Run("Decommission", func(t *testing.T) {
		t.Parallel()
		r := b.addRack(t, 14, true)
		res, err := srv.client.DecommissionRack(ctx, &flowv1.DecommissionRackRequest{TargetSpec: rackSpec(r.Name)})
		require.NoError(t, err)
		rep := requireCompleted(t, waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second))
		require.Len(t, rep.Stages, 3)
		for _, c := range r.Components {
			require.Equal(t, 1, b.sims.nico.Journal().CountFor(decommissionMethod(c.Type), c.ExternalID), c.Name)
		}
		// Components Flow knows only by BMC MAC are looked up in Core.
		unlinked := b.addRack(t, 15, false)
		res, err = srv.client.DecommissionRack(ctx, &flowv1.DecommissionRackRequest{TargetSpec: rackSpec(unlinked.Name)})
		require.NoError(t, err)
		requireCompleted(t, waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second))
		for _, c := range unlinked.Components {
			st, ok := b.sims.nico.State(c.BMCs[0].MAC.String())
			require.True(t, ok)
			require.Equal(t, 1, b.sims.nico.Journal().CountFor(decommissionMethod(c.Type), st.ID), c.Name)
		}
		// Components are not a decommission target.
		_, err = srv.client.DecommissionRack(ctx, &flowv1.DecommissionRackRequest{TargetSpec: &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Components{Components: &flowv1.ComponentTargets{}}}})
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	})
}

// decommissionMethod is the Core method that decommissions a component type.
func decommissionMethod(ct inventory.ComponentType) string {
	switch ct {
	case inventory.ComponentTypeCompute:
		return "DecommissionManagedHost"
	case inventory.ComponentTypeNVSwitch:
		return "DecommissionSwitch"
	}
	return "DecommissionPowerShelf"
}

// createRule creates a firmware-upgrade rule from steps (JSON) and returns
// its ID.
func createRule(t *testing.T, c flowv1connect.FlowClient, name string, steps ...string) *flowv1.UUID {
	t.Helper()
	res, err := c.CreateOperationRule(context.Background(), &flowv1.CreateOperationRuleRequest{
		Name: name, OperationType: flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL, OperationCode: "upgrade",
		RuleDefinitionJson: `{"steps":[` + strings.Join(steps, ",") + `]}`,
	})
	require.NoError(t, err)
	return res.GetId()
}

func fwStep(ct string, stage int) string {
	return `{"component_type":"` + ct + `","stage":` + itoa(stage) + `,"timeout":"10s","retry":{"max_attempts":2,"initial_interval":"100ms","backoff_coefficient":2},
		"main_operation":{"name":"FirmwareControl","parameters":{"poll_interval":"2m","poll_timeout":"60s"}}}`
}

// TestFirmwareFailureOnOneTray: one tray's job fails; the stage still waits
// for its other step, the report names the failure, and the task fails.
func TestFirmwareFailureOnOneTray(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, 50*time.Millisecond)
	srv := b.serve(t, nil, nil)
	ctx := context.Background()
	r := b.addRack(t, 21, false)
	bad := macs(r, inventory.ComponentTypeCompute)[4]
	// The job fails where the others complete: every status read then sees
	// either none finished or the 17 done beside the failure, so the report
	// does not depend on when the poll lands (failing in_progress, a fast
	// poll sees the failure before any tray completes).
	_, err := b.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultFail, Method: "UpdateComponentFirmware", Device: bad, Phase: "completed", Message: "flash write error"})
	require.NoError(t, err)
	rule := createRule(t, srv.client, "compute and switches together", fwStep("Compute", 1), fwStep("NVSwitch", 1),
		`{"component_type":"Compute","stage":2,"main_operation":{"name":"PowerControl","parameters":{"operation":"power_on"}}}`)
	res, err := srv.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), RuleId: rule})
	require.NoError(t, err)
	task := waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_FAILED, task.GetStatus())
	// The reason is told once, with the device, and no package name.
	msg := task.GetMessage()
	require.Regexp(t, `FirmwareControl: 1 of 18 component\(s\) failed: demo-0021-ct-\d\d \(`+regexp.QuoteMeta(bad)+`\): flash write error`, msg, "the tray named, its MAC beside it")
	require.Equal(t, 1, strings.Count(msg, "flash write error"), msg)
	require.Equal(t, 1, strings.Count(msg, bad), msg)
	require.NotRegexp(t, `\b(operations|inventory|nico|psm|backend|engine|firmware): `, msg)
	var rep operations.Report
	require.NoError(t, json.Unmarshal([]byte(task.GetReport()), &rep))
	require.Len(t, rep.Stages, 2)
	require.Equal(t, "failed", rep.Stages[0].Status)
	for _, step := range rep.Stages[0].Steps {
		switch step.ComponentType {
		case operations.ComponentTypeCompute:
			require.Equal(t, "failed", step.Status)
			require.Equal(t, 1, step.FailedComponents, "only the faulty tray")
			require.Equal(t, 17, step.CompletedComponents)
		case operations.ComponentTypeNVSwitch:
			require.Equal(t, "completed", step.Status, "the firmware stage waits for every step")
			require.Equal(t, 9, step.CompletedComponents)
		}
	}
	require.Equal(t, "pending", rep.Stages[1].Status, "nothing after the failed stage runs")
	require.Empty(t, b.sims.nico.Journal().Calls("ComponentPowerControl"))
}

// TestFirmwareJobLostByTheBackend: a tray's started update vanishes from
// the backend (a simulator restarted without its jobs): the step fails with
// that reason at the next polls instead of polling until its deadline.
func TestFirmwareJobLostByTheBackend(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, 50*time.Millisecond)
	srv := b.serve(t, nil, nil)
	ctx := context.Background()
	r := b.addRack(t, 23, false)
	bad := macs(r, inventory.ComponentTypeCompute)[2]
	dev, ok := b.sims.nico.State(bad)
	require.True(t, ok)
	_, err := b.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultStuck, Method: "UpdateComponentFirmware", Device: bad, Phase: "in_progress"})
	require.NoError(t, err)
	rule := createRule(t, srv.client, "compute", fwStep("Compute", 1))
	res, err := srv.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), RuleId: rule})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, c := range b.sims.nico.Journal().Calls("UpdateComponentFirmware") {
			if c.Code == "ok" && slices.ContainsFunc(c.Devices, func(d string) bool { return strings.EqualFold(d, bad) }) {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	// The backend forgets the tray's job: the device comes back without it.
	require.True(t, b.sims.nico.Remove(bad))
	require.NoError(t, b.sims.nico.Seed([]nicosim.Device{dev.Device}))
	started := time.Now()
	task := waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_FAILED, task.GetStatus())
	require.Contains(t, task.GetMessage(), "("+bad+"): the backend reports no firmware update job for this component", task.GetMessage())
	require.Less(t, time.Since(started), 20*time.Second, "failed at the next polls, not at the 60 s poll timeout")
}

// TestFirmwareCancelStopsPolling: cancelling an upgrade whose jobs never end
// stops the status polls.
func TestFirmwareCancelStopsPolling(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, 10*time.Millisecond)
	srv := b.serve(t, nil, nil)
	ctx := context.Background()
	r := b.addRack(t, 22, false)
	_, err := b.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultStuck, Method: "UpdateComponentFirmware", Phase: "in_progress"})
	require.NoError(t, err)
	res, err := srv.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name)})
	require.NoError(t, err)
	id := res.GetTaskIds()[0]
	polls := func() int { return len(b.sims.nico.Journal().Calls("GetComponentFirmwareStatus")) }
	require.Eventually(t, func() bool { return polls() >= 5 }, 20*time.Second, 10*time.Millisecond)
	got, err := srv.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{id}})
	require.NoError(t, err)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_RUNNING, got.GetTasks()[0].GetStatus())
	out, err := srv.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: id})
	require.NoError(t, err)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_TERMINATED, out.GetTask().GetStatus())
	time.Sleep(500 * time.Millisecond) // grace: a poll already in flight may land
	n := polls()
	time.Sleep(1500 * time.Millisecond) // 15 poll intervals
	require.Equal(t, n, polls(), "no status poll after the cancel")
	require.Len(t, b.sims.nico.Journal().Calls("UpdateComponentFirmware"), 1, "one start, compute only")
}

// TestFirmwareSecretNeverStored: credentials sent with an upgrade reach
// NICo Core, but no table (River's included) and no line of the server's
// log (a `flow serve` child process at debug level, stderr captured).
func TestFirmwareSecretNeverStored(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, time.Millisecond)
	const secret = "tok-5ecret-7f3a9c21"
	// Core behind a tap that notes whether a start call carried the token.
	var delivered atomic.Bool
	core := b.sims.nico.Handler()
	tap, err := sim.Listen("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/UpdateComponentFirmware") {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte(secret)) {
				delivered.Store(true)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		core.ServeHTTP(w, r)
	}))
	require.NoError(t, err)
	t.Cleanup(func() { tap.Close(context.Background()) })

	port, err := pglocal.FreePort()
	require.NoError(t, err)
	url := "http://127.0.0.1:" + itoa(port)
	logs := &syncBuffer{}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FLOW_TEST_CHILD=serve", insecureOptIn, "FLOW_ADMIN_LISTEN=off",
		"DATABASE_URL="+b.dbURL, "FLOW_LISTEN_ADDR=127.0.0.1:"+itoa(port),
		"NICO_CORE_API_URL="+tap.URL(), "PSM_API_URL="+b.sims.psmSrv.URL(),
		"FLOW_DATA_ENCRYPTION_KEY_PATH="+newKeyFile(t), "FLOW_LOG_LEVEL=debug", "FLOW_FIRMWARE_POLL_INTERVAL=100ms")
	cmd.Stderr, cmd.Stdout = logs, logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitHealthy(t, url)
	client := flowv1connect.NewFlowClient(http.DefaultClient, url)

	ctx := context.Background()
	r := b.addRack(t, 23, false)
	res, err := client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{
		TargetSpec:         rackSpec(r.Name),
		AuthenticationData: &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_Shared{Shared: secret}},
	})
	require.NoError(t, err)
	requireCompleted(t, waitTask(t, client, res.GetTaskIds()[0], 30*time.Second))
	require.True(t, delivered.Load(), "the token reached Core with the start call")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	_ = cmd.Wait()

	dump := dumpTables(t, b.dbURL)
	require.Contains(t, dump, `"key_id"`, "the sealed envelope is stored")
	require.Contains(t, logs.String(), `"level":"DEBUG"`)
	for _, needle := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret)), "5ecret"} {
		require.NotContains(t, dump, needle)
		require.NotContains(t, logs.String(), needle)
	}
}

// dumpTables returns every row of every table of the database as text.
func dumpTables(t *testing.T, dbURL string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Greater(t, len(tables), 5)
	var sb strings.Builder
	for _, tbl := range tables {
		var text string
		require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(string_agg(t::text, E'\n'), '') FROM `+tbl+` t`).Scan(&text))
		sb.WriteString(tbl + "\n" + text + "\n")
	}
	require.Contains(t, sb.String(), "river_job")
	return sb.String()
}

func TestFirmwareCredentialsKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	shared := &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_Shared{Shared: "s3cret"}}

	t.Run("Unset", func(t *testing.T) {
		t.Parallel()
		b := newFWBench(t, time.Millisecond)
		srv := b.serve(t, nil, nil)
		r := b.addRack(t, 31, false)
		_, err := srv.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), AuthenticationData: shared})
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
		require.ErrorContains(t, err, "data encryption cipher is not configured")
		for _, tt := range []struct {
			name string
			req  *flowv1.UpgradeFirmwareRequest
			want string
		}{
			{"ValueUnset", &flowv1.UpgradeFirmwareRequest{AuthenticationData: &flowv1.FirmwareAuthenticationData{}}, "authentication data value is required"},
			{"DPUOnly", &flowv1.UpgradeFirmwareRequest{AuthenticationData: shared, SubTargets: []string{"dpu"}}, "dpu-only firmware updates do not support authentication data"},
		} {
			tt.req.TargetSpec = rackSpec(r.Name)
			_, err := srv.client.UpgradeFirmware(ctx, tt.req)
			require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), tt.name)
			require.ErrorContains(t, err, tt.want, tt.name)
		}
		// Empty credentials are no credentials: accepted without a key.
		res, err := srv.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name),
			AuthenticationData: &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_Shared{Shared: ""}}})
		require.NoError(t, err)
		requireCompleted(t, waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second))
		list, err := srv.client.ListTasks(ctx, &flowv1.ListTasksRequest{})
		require.NoError(t, err)
		require.EqualValues(t, 1, list.GetTotal(), "refused requests wrote nothing")
	})

	// A task sealed under key 1 reaches its firmware step on a server that
	// has key 2 only (mismatch), or key 2 plus key 1 retired (rotation).
	for _, tt := range []struct {
		name    string
		retired bool
	}{{"Mismatch", false}, {"Rotation", true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newFWBench(t, time.Millisecond)
			key1, key2 := newKeyFile(t), newKeyFile(t)
			first := b.serve(t, map[string]string{"FLOW_DATA_ENCRYPTION_KEY_PATH": key1}, nil)
			r := b.addRack(t, 32, false)
			rule := createRule(t, first.client, "sleep then upgrade",
				`{"component_type":"Compute","stage":1,"main_operation":{"name":"Sleep","parameters":{"duration":"3s"}}}`, fwStep("Compute", 2))
			res, err := first.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), AuthenticationData: shared, RuleId: rule})
			require.NoError(t, err)
			first.stop() // before the firmware step

			env := map[string]string{"FLOW_DATA_ENCRYPTION_KEY_PATH": key2}
			if tt.retired {
				env["FLOW_DATA_DECRYPTION_KEY_PATHS"] = key1
			}
			logs := &syncBuffer{}
			second := b.serve(t, env, logs)
			// At start the server says which keys unfinished tasks need:
			// key 1 by the waiting task, as held (retired) or missing.
			kr, err := firmware.LoadKeyring(key1, nil)
			require.NoError(t, err)
			if tt.retired {
				require.Contains(t, logs.String(), `"msg":"data encryption key usage","key_id":"`+kr.CurrentKeyID()+`","current":false,"unfinished_tasks":1`)
			} else {
				require.Contains(t, logs.String(), `"key_id":"`+kr.CurrentKeyID()+`","unfinished_tasks":1`)
				require.Contains(t, logs.String(), "sealed with a key this server does not have")
			}
			task := waitTask(t, second.client, res.GetTaskIds()[0], 30*time.Second)
			if tt.retired {
				requireCompleted(t, task)
				require.Len(t, b.sims.nico.Journal().Calls("UpdateComponentFirmware"), 1)
				return
			}
			require.Equal(t, flowv1.TaskStatus_TASK_STATUS_FAILED, task.GetStatus())
			require.Contains(t, task.GetMessage(), "encrypted with a key this server does not have")
			require.Empty(t, b.sims.nico.Journal().Calls("UpdateComponentFirmware"), "no start without credentials")
		})
	}
}

// TestFirmwareStartResponseLost: Core starts the jobs but its answer is
// lost (as when the server dies between the start call and its
// checkpoint). The retry finds the jobs running and polls them instead of
// starting the update again.
func TestFirmwareStartResponseLost(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, 200*time.Millisecond)
	core := b.sims.nico.Handler()
	var lost atomic.Int32
	tap, err := sim.Listen("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/UpdateComponentFirmware") && lost.Add(1) == 1 {
			core.ServeHTTP(httptest.NewRecorder(), r) // Core acts; the answer goes nowhere
			http.Error(w, "connection reset", http.StatusServiceUnavailable)
			return
		}
		core.ServeHTTP(w, r)
	}))
	require.NoError(t, err)
	t.Cleanup(func() { tap.Close(context.Background()) })
	srv := b.serve(t, map[string]string{"NICO_CORE_API_URL": tap.URL()}, nil)
	r := b.addRack(t, 24, false)
	rule := createRule(t, srv.client, "fast retries", fwStep("Compute", 1))
	res, err := srv.client.UpgradeFirmware(context.Background(), &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), RuleId: rule})
	require.NoError(t, err)
	requireCompleted(t, waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second))
	require.EqualValues(t, 1, lost.Load(), "the lost start was not sent again")
	for _, mac := range macs(r, inventory.ComponentTypeCompute) {
		require.Equal(t, 1, b.sims.nico.Journal().CountFor("UpdateComponentFirmware", mac), mac)
	}
}

// TestIngestWithFirmwareUpgrade: with FLOW_INGEST_FIRMWARE_UPGRADE an
// ingest task injects the expectations, then upgrades the compute trays'
// and NVLink switches' firmware (to the component manager's desired
// version: the simulator's "latest"); without it ingestion touches no
// firmware.
func TestIngestWithFirmwareUpgrade(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, time.Millisecond)
	ctx := context.Background()
	ingest := func(srv *fwServer, r inventory.Rack) operations.Report {
		res, err := srv.client.IngestRack(ctx, &flowv1.IngestRackRequest{TargetSpec: rackSpec(r.Name)})
		require.NoError(t, err)
		return requireCompleted(t, waitTask(t, srv.client, res.GetTaskIds()[0], 60*time.Second))
	}

	plain := b.serve(t, nil, nil)
	r := b.addRack(t, 21, false)
	rep := ingest(plain, r)
	require.Len(t, rep.Stages, 1, "the plain built-in rule: inject expectations only")
	for _, c := range r.Components {
		require.Zero(t, b.sims.nico.Journal().CountFor("UpdateComponentFirmware", c.BMCs[0].MAC.String()), c.Name)
	}
	plain.stop()

	srv := b.serve(t, map[string]string{"FLOW_INGEST_FIRMWARE_UPGRADE": "true"}, nil)
	r = b.addRack(t, 22, false)
	rep = ingest(srv, r)
	require.Len(t, rep.Stages, 3, "inject expectations, compute firmware, switch firmware")
	for _, ct := range []inventory.ComponentType{inventory.ComponentTypeCompute, inventory.ComponentTypeNVSwitch} {
		for _, mac := range macs(r, ct) {
			require.Equal(t, 1, b.sims.nico.Journal().CountFor("UpdateComponentFirmware", mac), mac)
			st, _ := b.sims.nico.State(mac)
			require.Contains(t, st.Firmware, "bmc")
		}
	}
	for _, mac := range macs(r, inventory.ComponentTypeCompute) {
		st, _ := b.sims.nico.State(mac)
		require.Equal(t, "latest", st.Firmware["bmc"], "the component manager's desired version")
	}
	for _, mac := range macs(r, inventory.ComponentTypePowerShelf) {
		require.Zero(t, b.sims.nico.Journal().CountFor("UpdateComponentFirmware", mac), "power shelves are not ingested")
	}
	// The injections came first: every expectation was added before any
	// firmware call.
	ours := map[string]bool{}
	for _, c := range r.Components {
		ours[c.BMCs[0].MAC.String()] = true
	}
	calls := b.sims.nico.Journal().Calls()
	lastAdd, firstFW := -1, len(calls)
	for i, c := range calls {
		if !slices.ContainsFunc(c.Devices, func(d string) bool { return ours[d] }) {
			continue
		}
		switch {
		case strings.HasPrefix(c.Method, "AddExpected"):
			lastAdd = i
		case c.Method == "UpdateComponentFirmware" && firstFW == len(calls):
			firstFW = i
		}
	}
	require.GreaterOrEqual(t, lastAdd, 0, "the expectations were injected")
	require.Less(t, lastAdd, firstFW)

	_, err := LoadConfig(func(k string) string {
		return map[string]string{"DATABASE_URL": b.dbURL, "FLOW_INGEST_FIRMWARE_UPGRADE": "sometimes"}[k]
	})
	require.ErrorContains(t, err, "FLOW_INGEST_FIRMWARE_UPGRADE must be true or false")
}

// TestFirmwareUndecodableReplies: Core answers OK with bytes that do not
// decode (a broken proxy, a proto mismatch), once for the start and once
// for a status poll. Neither reads as success: the start is sent again and
// the poll repeated, and the upgrade completes on the good answers.
func TestFirmwareUndecodableReplies(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, 50*time.Millisecond)
	srv := b.serve(t, nil, nil)
	r := b.addRack(t, 25, false)
	for _, m := range []string{"UpdateComponentFirmware", "GetComponentFirmwareStatus"} {
		_, err := b.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultGarbage, Method: m, Times: 1})
		require.NoError(t, err)
	}
	rule := createRule(t, srv.client, "compute", fwStep("Compute", 1))
	res, err := srv.client.UpgradeFirmware(context.Background(), &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), RuleId: rule})
	require.NoError(t, err)
	requireCompleted(t, waitTask(t, srv.client, res.GetTaskIds()[0], 30*time.Second))
	codes := map[string][]string{}
	for _, c := range b.sims.nico.Journal().Calls("UpdateComponentFirmware", "GetComponentFirmwareStatus") {
		codes[c.Method] = append(codes[c.Method], c.Code)
	}
	for _, m := range []string{"UpdateComponentFirmware", "GetComponentFirmwareStatus"} {
		require.Equal(t, "garbled", codes[m][0], m)
		require.Contains(t, codes[m][1:], "ok", "%s was called again after the garbled reply", m)
	}
	for _, mac := range macs(r, inventory.ComponentTypeCompute) {
		st, ok := b.sims.nico.State(mac)
		require.True(t, ok)
		require.NotEmpty(t, st.Jobs, mac)
	}
}
