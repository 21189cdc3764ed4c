package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/notify"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// isolationReceiver is the facility's webhook receiver: it keeps every
// flow.rack.isolation_requested request it gets, verified.
type isolationReceiver struct {
	mu   sync.Mutex
	got  []notify.IsolationData
	rack []string // the rack name of each
}

func (r *isolationReceiver) requests(rack string) []notify.IsolationData {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []notify.IsolationData
	for i, d := range r.got {
		if r.rack[i] == rack {
			out = append(out, d)
		}
	}
	return out
}

// restartableServer runs an in-process Flow server on env that the test
// stops and starts again (a restart on the same database).
type restartableServer struct {
	env    map[string]string
	cancel context.CancelFunc
	done   chan error
	url    string
}

func (s *restartableServer) start(t *testing.T) {
	t.Helper()
	cfg, err := LoadConfig(func(k string) string { return s.env[k] })
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := newServer(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), serveOptions{})
	require.NoError(t, err)
	s.cancel, s.done = cancel, make(chan error, 1)
	go func() { s.done <- srv.run(ctx) }()
	s.url = "http://" + srv.Addr().String()
}

func (s *restartableServer) stop(t *testing.T) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	require.NoError(t, <-s.done)
	s.cancel = nil
}

// TestLeakSevereIsolation (issue 45): leaks on two trays of one rack
// (threshold 2) power off every tray and shelf of the rack and send the
// facility one isolation request, again after a restart while it is not
// acknowledged and not after; the rack and a rack on its coolant loop are
// refused power-on (naming the isolation), and a power-cycle queued on the
// loop's other rack waits ("held: coolant loop … has an open leak on rack
// …") until the leak is handled, while a rack on another loop is not held.
// A BMS report on the other loop isolates its rack (the critical tier).
// Bad input: acknowledging a rack with nothing pending, twice, and a BMS
// report on an unknown loop change nothing.
func TestLeakSevereIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: 10 * time.Millisecond, firmwarePhase: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	s := &restartableServer{env: map[string]string{
		"DATABASE_URL": dbtest.NewDB(t), "FLOW_LISTEN_ADDR": "127.0.0.1:0",
		"NICO_CORE_API_URL": sims.nicoSrv.URL(), "PSM_API_URL": sims.psmSrv.URL(),
		"FLOW_SHUTDOWN_TIMEOUT": "5s", "ALLOW_INSECURE_GRPC": "true", "FLOW_ADMIN_LISTEN": "off",
		"FLOW_CONFIG_FILE": leakConfig(t), "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED": "true",
		"FLOW_DATA_ENCRYPTION_KEY_PATH": newKeyFile(t), "FLOW_DEV_MODE": "true", "FLOW_NOTIFY_ALLOW_TARGETS": "127.0.0.1",
		"FLOW_NOTIFY_BACKOFF_MIN": "100ms", "FLOW_LEAK_ISOLATION_RESEND": "1h",
	}}
	s.start(t)
	t.Cleanup(func() { s.stop(t) })
	e := &e2e{client: flowv1connect.NewFlowClient(http.DefaultClient, s.url), sims: sims, url: s.url, inv: inventory.NewService(), dbURL: s.env["DATABASE_URL"]}
	admin := func() adminv1connect.AdminServiceClient {
		return adminv1connect.NewAdminServiceClient(http.DefaultClient, s.url)
	}
	flow := func() flowv1connect.FlowClient { return flowv1connect.NewFlowClient(http.DefaultClient, s.url) }
	pool := openPool(t, e.dbURL)

	leaking, neighbour, other := e.addRack(t, 21, false), e.addRack(t, 22, false), e.addRack(t, 23, false)
	runSync(t, s.url)
	_, err = pool.Exec(ctx, `UPDATE rack SET coolant_loop = 'cdu-a', power_feed = 'busway-1' WHERE id = ANY($1)`, []uuid.UUID{leaking.ID, neighbour.ID})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE rack SET coolant_loop = 'cdu-b', power_feed = 'busway-2' WHERE id = $1`, other.ID)
	require.NoError(t, err)

	rcv := &isolationReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		require.NoError(t, notify.Verify([]byte("facility-secret-0123456789"), r.Header.Get(notify.SignatureHeader), body, time.Now(), notify.ReplayWindow))
		var ev struct {
			Type string      `json:"type"`
			Data notify.Data `json:"data"`
		}
		require.NoError(t, json.Unmarshal(body, &ev))
		if ev.Type == string(notify.RackIsolationRequested) {
			rcv.mu.Lock()
			rcv.got = append(rcv.got, *ev.Data.Isolation)
			rcv.rack = append(rcv.rack, ev.Data.Rack.Name)
			rcv.mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	_, err = admin().CreateWebhook(ctx, &adminv1.CreateWebhookRequest{Url: srv.URL, EventTypes: []string{string(notify.RackIsolationRequested)}, Secret: "facility-secret-0123456789"})
	require.NoError(t, err)

	rack := readRack(t, pool, leaking.ID)
	trayA, trayB := rack.component(t, inventory.ComponentTypeCompute, 10), rack.component(t, inventory.ComponentTypeCompute, 24)
	waitPolled(t, e.client, trayA.ID)

	// One leak: a tray-level response only; a power-cycle on the loop's
	// other rack waits for it.
	require.NoError(t, sims.nico.SetLeak(trayA.ExternalID, true))
	require.Eventually(t, func() bool { return len(leakTasks(t, e.client, leaking.ID)) == 1 }, 15*time.Second, 20*time.Millisecond)
	cycle, err := flow().PowerResetRack(ctx, &flowv1.PowerResetRackRequest{TargetSpec: rackSpec(neighbour.Name), Description: "queued power-cycle"})
	require.NoError(t, err)
	held := getTask(t, e.client, cycle.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_WAITING, held.GetStatus(), held.GetMessage())
	require.Equal(t, "Held: coolant loop cdu-a has an open leak on rack "+leaking.Name, held.GetMessage())
	free, err := flow().PowerResetRack(ctx, &flowv1.PowerResetRackRequest{TargetSpec: rackSpec(other.Name), Description: "another loop"})
	require.NoError(t, err)
	started(t, flow(), free.GetTaskIds()[0], "a rack on another loop is not held")

	// The second leak reaches the threshold: the whole rack goes off, and
	// the facility hears once.
	require.NoError(t, sims.nico.SetLeak(trayB.ExternalID, true))
	var iso *adminv1.Isolation
	require.Eventually(t, func() bool {
		list, err := admin().ListIsolations(ctx, &adminv1.ListIsolationsRequest{})
		require.NoError(t, err)
		if len(list.GetIsolations()) == 0 {
			return false
		}
		iso = list.GetIsolations()[0]
		return true
	}, 15*time.Second, 20*time.Millisecond, "the severe tier isolates the rack")
	require.Equal(t, leaking.ID.String(), iso.GetRackId())
	require.Equal(t, "severe", iso.GetTier())
	require.Equal(t, "cdu-a", iso.GetCoolantLoop())
	require.Equal(t, "busway-1", iso.GetPowerFeed())
	var offTask string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM task WHERE trigger_type = 'rack_isolation' AND trigger_id = $1`, iso.GetId()).Scan(&offTask))
	off := waitEnd(t, flow(), &flowv1.UUID{Id: offTask})
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, off.GetStatus(), off.GetMessage())
	require.Equal(t, "force_power_off", off.GetOperation())
	for _, c := range rack.Components {
		require.Equal(t, "off", e.power(t, c.BMCs[0].MAC.String()), "%s (%s, slot %d) is off", c.Name, c.Type, c.Position.SlotID)
	}
	require.Eventually(t, func() bool { return len(rcv.requests(leaking.Name)) == 1 }, 15*time.Second, 20*time.Millisecond, "the facility gets the request")
	first := rcv.requests(leaking.Name)[0]
	require.Equal(t, iso.GetId(), first.ID)
	require.Equal(t, 1, first.Send)
	require.Equal(t, "severe", first.Tier)
	require.Equal(t, "cdu-a", first.CoolantLoop)
	require.Equal(t, "busway-1", first.PowerFeed)
	require.ElementsMatch(t, []string{trayA.ID.String(), trayB.ID.String()}, first.ComponentIDs)

	// Power-on is refused on the rack and on its loop, naming the
	// isolation; the queued power-cycle still waits.
	for _, name := range []string{leaking.Name, neighbour.Name} {
		_, err = flow().PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(name)})
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%s: %v", name, err)
		require.ErrorContains(t, err, "rack is isolated after a severe coolant leak")
		require.ErrorContains(t, err, "isolation "+iso.GetId())
	}
	time.Sleep(2 * leakInterval)
	require.Len(t, rcv.requests(leaking.Name), 1, "one request while the resend interval (1h) has not passed")
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_WAITING, getTask(t, e.client, cycle.GetTaskIds()[0]).GetStatus())

	// Bad input changes nothing.
	_, err = admin().AcknowledgeIsolation(ctx, &adminv1.AcknowledgeIsolationRequest{Rack: neighbour.Name})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "no isolation request is pending")
	_, err = admin().AcknowledgeIsolation(ctx, &adminv1.AcknowledgeIsolationRequest{Rack: "no-such-rack"})
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "%v", err)
	_, err = admin().ReportFacilityLeak(ctx, &adminv1.ReportFacilityLeakRequest{CoolantLoop: "cdu-z"})
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, `no rack is on coolant loop "cdu-z"`)
	_, err = admin().ReportFacilityLeak(ctx, &adminv1.ReportFacilityLeakRequest{})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "loop:")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM rack_isolation) + (SELECT count(*) FROM facility_leak_report)`).Scan(&n))
	require.Equal(t, 1, n, "nothing written by the refused calls")

	// Not acknowledged: a restart sends it again.
	s.stop(t)
	s.start(t)
	require.Eventually(t, func() bool { return len(rcv.requests(leaking.Name)) == 2 }, 30*time.Second, 50*time.Millisecond, "sent again after the restart")
	require.Equal(t, 2, rcv.requests(leaking.Name)[1].Send)
	require.Equal(t, iso.GetId(), rcv.requests(leaking.Name)[1].ID)

	// The BMS reports the other loop (critical tier): its rack is isolated.
	rep, err := admin().ReportFacilityLeak(ctx, &adminv1.ReportFacilityLeakRequest{CoolantLoop: "cdu-b", Summary: "CDU B pressure drop"})
	require.NoError(t, err)
	require.Equal(t, []string{other.ID.String()}, rep.GetRackIds())
	require.Eventually(t, func() bool { return len(rcv.requests(other.Name)) == 1 }, 15*time.Second, 20*time.Millisecond)
	require.Equal(t, "critical", rcv.requests(other.Name)[0].Tier)
	require.Equal(t, rep.GetId(), rcv.requests(other.Name)[0].ReportID)

	// Acknowledged (once: twice is refused), the first is not sent again
	// after a restart; the unacknowledged one is.
	ack, err := admin().AcknowledgeIsolation(ctx, &adminv1.AcknowledgeIsolationRequest{Rack: leaking.Name, Note: "breaker 4 open"})
	require.NoError(t, err)
	require.Equal(t, "breaker 4 open", ack.GetIsolation().GetAckNote())
	_, err = admin().AcknowledgeIsolation(ctx, &adminv1.AcknowledgeIsolationRequest{Rack: leaking.Name})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "acknowledged already")
	s.stop(t)
	s.start(t)
	require.Eventually(t, func() bool { return len(rcv.requests(other.Name)) == 2 }, 30*time.Second, 50*time.Millisecond, "the unacknowledged one is sent again")
	time.Sleep(time.Second) // a delivery of the same pass would have landed too
	require.Len(t, rcv.requests(leaking.Name), 2, "the acknowledged one is not")

	// Handled: Core no longer reports the leaks and an operator clears the
	// isolation; the queued power-cycle on the loop then runs.
	require.NoError(t, sims.nico.SetLeak(trayA.ExternalID, false))
	require.NoError(t, sims.nico.SetLeak(trayB.ExternalID, false))
	require.Eventually(t, func() bool {
		return componentInfo(t, flow(), trayB.ID).GetLeakStatus() == flowv1.LeakStatus_LEAK_STATUS_NOT_DETECTED
	}, 15*time.Second, 50*time.Millisecond)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_WAITING, getTask(t, flow(), cycle.GetTaskIds()[0]).GetStatus(), "the isolation still holds the loop")
	_, err = admin().ClearIsolation(ctx, &adminv1.ClearIsolationRequest{Rack: leaking.Name})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "a clear needs a reason: %v", err)
	cleared, err := admin().ClearIsolation(ctx, &adminv1.ClearIsolationRequest{Rack: leaking.Name, Reason: "trays replaced, loop dry"})
	require.NoError(t, err)
	require.NotNil(t, cleared.GetIsolation().GetClearedAt())
	started(t, flow(), cycle.GetTaskIds()[0], "the queued power-cycle starts once the leak is handled")
	_, err = flow().PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(leaking.Name)})
	require.NoError(t, err, "cleared: the rack may be powered on again")
}

// started waits for task id to have left WAITING (and not ended otherwise
// than completed).
func started(t *testing.T, client flowv1connect.FlowClient, id *flowv1.UUID, what string) {
	t.Helper()
	var task *flowv1.Task
	require.Eventually(t, func() bool {
		task = getTask(t, client, id)
		return task.GetStatus() != flowv1.TaskStatus_TASK_STATUS_WAITING
	}, 30*time.Second, 20*time.Millisecond, what)
	require.Contains(t, []flowv1.TaskStatus{flowv1.TaskStatus_TASK_STATUS_PENDING, flowv1.TaskStatus_TASK_STATUS_RUNNING, flowv1.TaskStatus_TASK_STATUS_COMPLETED},
		task.GetStatus(), "%s: %s", what, task.GetMessage())
}

// waitEnd waits (up to 2 minutes: a forced power-off sleeps 20 s) for task
// id to end.
func waitEnd(t *testing.T, client flowv1connect.FlowClient, id *flowv1.UUID) *flowv1.Task {
	t.Helper()
	var task *flowv1.Task
	require.Eventually(t, func() bool {
		task = getTask(t, client, id)
		switch task.GetStatus() {
		case flowv1.TaskStatus_TASK_STATUS_COMPLETED, flowv1.TaskStatus_TASK_STATUS_FAILED, flowv1.TaskStatus_TASK_STATUS_TERMINATED:
			return true
		}
		return false
	}, 2*time.Minute, 50*time.Millisecond)
	return task
}

func getTask(t *testing.T, client flowv1connect.FlowClient, id *flowv1.UUID) *flowv1.Task {
	t.Helper()
	res, err := client.GetTasksByIDs(context.Background(), &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{id}})
	require.NoError(t, err)
	require.Len(t, res.GetTasks(), 1)
	return res.GetTasks()[0]
}
