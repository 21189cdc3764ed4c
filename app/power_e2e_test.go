package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim/nicosim"
)

// e2e is a running Flow server on a fresh database, with both simulators,
// and a Connect client.
type e2e struct {
	client flowv1connect.FlowClient
	sims   *simulators
	url    string
	inv    *inventory.Service
	dbURL  string
	admin  string      // the admin listener's address, "" when off
	logs   *syncBuffer // the server's log
	srv    *server
}

// startE2E starts simulators (power changes take effect after powerDelay;
// 0 means the simulator's default of 5s) and a Flow server pointed at them.
// edits change the server's environment first.
func startE2E(t testing.TB, powerDelay time.Duration, edits ...func(env map[string]string)) *e2e {
	t.Helper()
	return startE2EWith(t, powerDelay, serveOptions{}, edits...)
}

// startE2EWith is startE2E with the server's options.
func startE2EWith(t testing.TB, powerDelay time.Duration, opts serveOptions, edits ...func(env map[string]string)) *e2e {
	t.Helper()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: powerDelay, firmwarePhase: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })

	dbURL := dbtest.NewDB(t)
	env := map[string]string{
		"DATABASE_URL": dbURL, "FLOW_LISTEN_ADDR": "127.0.0.1:0",
		"NICO_CORE_API_URL": sims.nicoSrv.URL(), "PSM_API_URL": sims.psmSrv.URL(),
		"FLOW_SHUTDOWN_TIMEOUT": "5s", "ALLOW_INSECURE_GRPC": "true", "FLOW_ADMIN_LISTEN": "off",
	}
	for _, edit := range edits {
		edit(env)
	}
	cfg, err := LoadConfig(func(k string) string { return env[k] })
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	// The server's log is shown when the test fails, so that an internal
	// error a client saw comes with its cause.
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	srv, err := newServer(ctx, cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: cfg.logLevel()})), opts)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	url := "http://" + srv.Addr().String()
	return &e2e{client: flowv1connect.NewFlowClient(http.DefaultClient, url), sims: sims, url: url, inv: inventory.NewService(), dbURL: dbURL,
		admin: srv.AdminAddr(), logs: logs, srv: srv}
}

// addRack stores demo rack i in Flow's inventory and seeds the simulators
// with its devices (powered off when off).
func (e *e2e) addRack(t testing.TB, i int, off bool) inventory.Rack {
	t.Helper()
	return e.storeRack(t, inventory.DemoRack(i), off)
}

// storeRack stores r in Flow's inventory and seeds the simulators with its
// components that have a BMC (powered off when off).
func (e *e2e) storeRack(t testing.TB, r inventory.Rack, off bool) inventory.Rack {
	t.Helper()
	ctx := context.Background()
	pool, err := db.Open(ctx, e.dbURL, db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		r.ID, err = e.inv.CreateRack(ctx, tx, r)
		return err
	}))
	var devs []nicosim.Device
	for _, c := range r.Components {
		if len(c.BMCs) == 0 {
			continue
		}
		devs = append(devs, nicosim.Device{
			Kind: strings.ToLower(string(c.Type)), Name: c.Name, Serial: c.SerialNumber,
			BMCMAC: c.BMCs[0].MAC.String(), RackID: r.ID.String(), PoweredOff: off,
			SlotID: int(c.Position.SlotID), TrayIndex: int(c.Position.TrayIdx),
		})
	}
	require.NoError(t, e.sims.Seed(devs))
	return r
}

func rackSpec(names ...string) *flowv1.OperationTargetSpec {
	var ts []*flowv1.RackTarget
	for _, n := range names {
		ts = append(ts, &flowv1.RackTarget{Identifier: &flowv1.RackTarget_Name{Name: n}})
	}
	return &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Racks{Racks: &flowv1.RackTargets{Targets: ts}}}
}

// wait polls a task until it has finished and returns it.
func (e *e2e) wait(t *testing.T, id *flowv1.UUID) *flowv1.Task {
	t.Helper()
	var task *flowv1.Task
	require.Eventually(t, func() bool {
		res, err := e.client.GetTasksByIDs(context.Background(), &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{id}})
		require.NoError(t, err)
		task = res.GetTasks()[0]
		switch task.GetStatus() {
		case flowv1.TaskStatus_TASK_STATUS_COMPLETED, flowv1.TaskStatus_TASK_STATUS_FAILED, flowv1.TaskStatus_TASK_STATUS_TERMINATED:
			return true
		}
		return false
	}, 60*time.Second, 20*time.Millisecond)
	return task
}

// kindOrder returns, for each power-control call the Core simulator
// received, the kind of device it addressed (built-in rules batch nothing:
// one call per stage and type).
func (e *e2e) kindOrder(t *testing.T, r inventory.Rack) []string {
	t.Helper()
	kinds := map[string]string{}
	for _, c := range r.Components {
		kinds[c.BMCs[0].MAC.String()] = string(c.Type)
	}
	var order []string
	for _, c := range e.sims.nico.Journal().Calls("ComponentPowerControl") {
		if len(c.Devices) == 0 {
			continue
		}
		order = append(order, kinds[strings.ToLower(c.Devices[0])])
	}
	return order
}

func TestPowerOperationsEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		off       bool // devices start powered off
		submit    func(c flowv1connect.FlowClient, spec *flowv1.OperationTargetSpec) (*connect.Response[flowv1.SubmitTaskResponse], error)
		wantOrder []string
		// notTargeted counts the rack's components the rule has no step for.
		notTargeted int
	}{
		{
			name: "PowerOn", off: true,
			submit: func(c flowv1connect.FlowClient, s *flowv1.OperationTargetSpec) (*connect.Response[flowv1.SubmitTaskResponse], error) {
				res, err := c.PowerOnRack(context.Background(), &flowv1.PowerOnRackRequest{TargetSpec: s})
				return connect.NewResponse(res), err
			},
			wantOrder: []string{"PowerShelf", "NVSwitch", "Compute"},
		},
		{
			name: "PowerOff",
			submit: func(c flowv1connect.FlowClient, s *flowv1.OperationTargetSpec) (*connect.Response[flowv1.SubmitTaskResponse], error) {
				res, err := c.PowerOffRack(context.Background(), &flowv1.PowerOffRackRequest{TargetSpec: s})
				return connect.NewResponse(res), err
			},
			wantOrder: []string{"Compute", "NVSwitch", "PowerShelf"},
		},
		{
			name: "PowerReset",
			submit: func(c flowv1connect.FlowClient, s *flowv1.OperationTargetSpec) (*connect.Response[flowv1.SubmitTaskResponse], error) {
				res, err := c.PowerResetRack(context.Background(), &flowv1.PowerResetRackRequest{TargetSpec: s})
				return connect.NewResponse(res), err
			},
			wantOrder: []string{"Compute", "NVSwitch", "PowerShelf", "PowerShelf", "NVSwitch", "Compute"},
		},
		{
			name: "ACPowerCycle",
			submit: func(c flowv1connect.FlowClient, s *flowv1.OperationTargetSpec) (*connect.Response[flowv1.SubmitTaskResponse], error) {
				res, err := c.ACPowerCycleRack(context.Background(), &flowv1.ACPowerCycleRackRequest{TargetSpec: s})
				return connect.NewResponse(res), err
			},
			wantOrder: []string{"Compute"},
			// The rule has no step for switches and shelves: the task
			// leaves them out and names them.
			notTargeted: 17,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := startE2E(t, time.Millisecond)
			rack := e.addRack(t, 7, tt.off)
			res, err := tt.submit(e.client, rackSpec(rack.Name))
			require.NoError(t, err)
			require.Len(t, res.Msg.GetTaskIds(), 1)
			task := e.wait(t, res.Msg.GetTaskIds()[0])
			require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
			require.Equal(t, "Succeeded", task.GetMessage())
			require.Equal(t, rack.ID.String(), task.GetRackId().GetId())
			require.Len(t, task.GetComponentUuids(), 35-tt.notTargeted)
			require.NotNil(t, task.GetStartedAt())
			require.NotNil(t, task.GetFinishedAt())
			require.Equal(t, tt.wantOrder, e.kindOrder(t, rack), "stage order of the rule")
			var rep operations.Report
			require.NoError(t, json.Unmarshal([]byte(task.GetReport()), &rep))
			require.Len(t, rep.Stages, len(tt.wantOrder))
			require.Equal(t, 35-tt.notTargeted, rep.ComponentsTargeted, "each component counted once")
			require.Len(t, rep.NotTargeted, tt.notTargeted)
			for _, st := range rep.Stages {
				require.Equal(t, "completed", st.Status)
				require.Equal(t, st.Targets, st.Completed)
				require.Zero(t, st.Failed)
				require.Zero(t, st.Running)
				for _, step := range st.Steps {
					require.Equal(t, step.TotalComponents, step.CompletedComponents)
					require.Nil(t, step.CurrentAction)
				}
			}
		})
	}
}
