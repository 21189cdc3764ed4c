package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/cli"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/inventory"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// rowCounts counts the rows of every table of the database (River's
// jobs too), but for River's own bookkeeping, which its client writes on
// its own schedule whatever the requests do: the leader it elects and the
// queues it registers (a leader elected between two counts, at load 20,
// once looked like a dry run's write).
func rowCounts(t testing.TB, dbURL string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT quote_ident(schemaname) || '.' || quote_ident(relname) FROM pg_stat_user_tables ORDER BY 1`)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		tables = append(tables, n)
	}
	require.NoError(t, rows.Err())
	out := map[string]int64{}
	for _, tb := range tables {
		if tb == "public.river_leader" || tb == "public.river_queue" {
			continue
		}
		var n int64
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+tb).Scan(&n))
		out[tb] = n
	}
	require.NotEmpty(t, out)
	return out
}

// TestPlanPreviewAndOverlap: a dry run of a site-wide run and of a bulk
// power-off answers their plans and hashes and writes no row; creating the
// previewed run freezes the very plan (same hash). Then the case:
// with a canary running, a site-wide run is refused on v1 naming the canary
// and the rack in both, and Flow's own create takes it with allow_overlap.
func TestPlanPreviewAndOverlap(t *testing.T) {
	t.Parallel()
	b := newRolloutBench(t, 4, time.Hour) // firmware updates never finish
	srv := b.serve(t, nil, nil)
	admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, srv.url)
	ctx := context.Background()

	site := rolloutRequest("site", rolloutOpts{concurrency: 2, phases: equalPhases(2, false), seed: "order"})
	before := rowCounts(t, b.dbURL)
	pv, err := admin.PreviewOperationRun(ctx, &adminv1.PreviewOperationRunRequest{Request: site})
	require.NoError(t, err)
	require.Len(t, pv.GetPhases(), 2)
	require.Len(t, pv.GetPhases()[0].GetRacks(), 2)
	require.Len(t, pv.GetPhases()[1].GetRacks(), 2)
	require.Len(t, pv.GetPlanHash(), 64)
	require.Equal(t, "select", pv.GetSelectorSeed())
	require.Equal(t, "order", pv.GetOrderingSeed())
	require.Empty(t, pv.GetOverlappingRuns())
	require.Equal(t, "phase 0 could start now; phase 1 could start now", pv.GetWindows())
	again, err := admin.PreviewOperationRun(ctx, &adminv1.PreviewOperationRunRequest{Request: site})
	require.NoError(t, err)
	require.Equal(t, pv.GetPlanHash(), again.GetPlanHash(), "a plan hashes the same every time")
	ps, err := admin.PreviewSubmission(ctx, &adminv1.PreviewSubmissionRequest{Request: &adminv1.PreviewSubmissionRequest_PowerOff{
		PowerOff: &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(b.racks[0].Name, b.racks[1].Name)}}})
	require.NoError(t, err)
	require.Len(t, ps.GetRacks(), 2)
	require.Equal(t, "power_off", ps.GetOperationCode())
	require.Len(t, ps.GetPlanHash(), 64)
	require.Empty(t, ps.GetRefusal())
	require.Equal(t, before, rowCounts(t, b.dbURL), "a dry run writes no row")

	// The canary: one rack, running (its update never ends).
	canary := rolloutRequest("canary", rolloutOpts{concurrency: 1})
	canary.Configuration.Operation.GetUpgradeFirmware().TargetSpec = rackSpec(b.racks[0].Name)
	canaryID := createRun(t, srv.client, canary)
	waitRun(t, srv.client, canaryID, 30*time.Second, runIs(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_RUNNING, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_NONE))

	// The preview names the overlap and the canary's task on its rack.
	pv, err = admin.PreviewOperationRun(ctx, &adminv1.PreviewOperationRunRequest{Request: site})
	require.NoError(t, err)
	require.Len(t, pv.GetOverlappingRuns(), 1)
	require.Contains(t, pv.GetOverlappingRuns()[0], `"canary"`)
	var conflicts []string
	for _, ph := range pv.GetPhases() {
		for _, r := range ph.GetRacks() {
			conflicts = append(conflicts, r.GetConflicts()...)
		}
	}
	require.Len(t, conflicts, 1)
	require.Contains(t, conflicts[0], "operation_run "+canaryID.GetId())

	_, err = srv.client.CreateOperationRun(ctx, site)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, `run "canary" (`+canaryID.GetId())
	require.ErrorContains(t, err, "on racks "+b.racks[0].Name)
	_, err = admin.CreateOperationRun(ctx, &adminv1.CreateOperationRunRequest{Request: site})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	res, err := admin.CreateOperationRun(ctx, &adminv1.CreateOperationRunRequest{Request: site, AllowOverlap: true})
	require.NoError(t, err)
	require.Equal(t, pv.GetPlanHash(), res.GetPlanHash(), "create froze the previewed plan")

	// Under a site-wide freeze, the preview says when phases could start.
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	_, err = admin.CreateWindow(ctx, &adminv1.CreateWindowRequest{Kind: "freeze", Name: "hold", Scope: &adminv1.WindowScope{Site: true},
		StartsAt: timestamppb.New(time.Now().Add(-time.Minute)), EndsAt: timestamppb.New(until)})
	require.NoError(t, err)
	pv, err = admin.PreviewOperationRun(ctx, &adminv1.PreviewOperationRunRequest{Request: site})
	require.NoError(t, err)
	require.Contains(t, pv.GetWindows(), "phase 0 could start at "+until.UTC().Format(time.RFC3339))
}

// approvalServer serves b with mutual TLS identities and an approval
// threshold of 5 racks, answering the operator's v1 and admin clients and
// a second identity's (admin) admin client.
func approvalServer(t *testing.T, b *rolloutBench) (opFlow flowv1connect.FlowClient, opAdmin, second adminv1connect.AdminServiceClient) {
	t.Helper()
	certs := t.TempDir()
	require.NoError(t, edge.WriteDevCerts(certs, nil))
	srv := b.serve(t, map[string]string{
		"CERTDIR": certs, "FLOW_AUTHZ_POLICY": filepath.Join(certs, "policy.yaml"), "ALLOW_INSECURE_GRPC": "false",
		"FLOW_APPROVAL_THRESHOLD": "5",
		// Webhooks to a loopback receiver (dev mode allows http://).
		"FLOW_DEV_MODE": "true", "FLOW_DATA_ENCRYPTION_KEY_PATH": newKeyFile(t),
	}, nil)
	api := strings.Replace(srv.url, "http://", "https://", 1)
	clientsOf := func(role string) (flowv1connect.FlowClient, adminv1connect.AdminServiceClient) {
		c, err := cli.TLSConfig(cli.TLSFiles{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, role+".crt"), Key: filepath.Join(certs, role+".key")})
		require.NoError(t, err)
		h := tlsHTTPClient(c)
		return flowv1connect.NewFlowClient(h, api), adminv1connect.NewAdminServiceClient(h, api)
	}
	opFlow, opAdmin = clientsOf("operator")
	_, second = clientsOf("admin")
	return opFlow, opAdmin, second
}

// TestTwoPersonApproval: with FLOW_APPROVAL_THRESHOLD=5 and mTLS
// identities, a site-wide run over 6 racks is created pending approval with
// the plan its requester previewed; the requester cannot approve it, nor
// anyone with another hash or an unknown ID; a second identity approving
// the hash it was shown starts it, once. A request whose plan the site
// changed since is refused as stale naming the change, and is rejected.
func TestTwoPersonApproval(t *testing.T) {
	t.Parallel()
	b := newRolloutBench(t, 6, time.Millisecond)
	opFlow, opAdmin, second := approvalServer(t, b)
	ctx := context.Background()

	site := rolloutRequest("site", rolloutOpts{concurrency: 3, seed: "order"})
	pv, err := opAdmin.PreviewOperationRun(ctx, &adminv1.PreviewOperationRunRequest{Request: site})
	require.NoError(t, err)
	require.True(t, pv.GetApprovalRequired(), "6 racks > 5")
	shown := pv.GetPlanHash()
	created, err := opFlow.CreateOperationRun(ctx, site)
	require.NoError(t, err)
	run := getRun(t, opFlow, created.GetId())
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PENDING, run.GetSummary().GetState().GetStatus(), "v1 shows its closest status")
	require.Contains(t, run.GetSummary().GetStatusMessage(), "awaiting approval of request")
	require.Empty(t, allTargets(t, opFlow, created.GetId())[0].GetTaskId(), "nothing started")

	list, err := second.ListApprovals(ctx, &adminv1.ListApprovalsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetApprovals(), 1)
	req := list.GetApprovals()[0]
	require.Equal(t, shown, req.GetPlanHash(), "the request froze the plan its requester saw")
	require.Equal(t, []string{created.GetId().GetId()}, req.GetSubjectIds())
	require.NotEqual(t, "admin", req.GetRequestedBy())
	got, err := second.GetApproval(ctx, &adminv1.GetApprovalRequest{Id: req.GetId()})
	require.NoError(t, err)
	require.Len(t, got.GetPhases(), 1)
	require.Len(t, got.GetPhases()[0].GetRacks(), 6)

	// Bad input: a precise error each, and nothing changes.
	for _, tt := range []struct {
		name    string
		client  adminv1connect.AdminServiceClient
		id, h   string
		code    connect.Code
		message string
	}{
		{"Own", opAdmin, req.GetId(), shown, connect.CodeFailedPrecondition, "cannot approve their own request"},
		{"OtherHash", second, req.GetId(), strings.Repeat("0", 64), connect.CodeFailedPrecondition, "is not the plan hash of request " + req.GetId()},
		{"Unknown", second, uuid.NewString(), shown, connect.CodeNotFound, "approval request not found"},
		{"NoHash", second, req.GetId(), "", connect.CodeInvalidArgument, "plan_hash"},
	} {
		_, err := tt.client.Approve(ctx, &adminv1.ApproveRequest{Id: tt.id, PlanHash: tt.h})
		require.Equal(t, tt.code, connect.CodeOf(err), "%s: %v", tt.name, err)
		require.ErrorContains(t, err, tt.message, tt.name)
	}
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PENDING, getRun(t, opFlow, created.GetId()).GetSummary().GetState().GetStatus())

	ok, err := second.Approve(ctx, &adminv1.ApproveRequest{Id: req.GetId(), PlanHash: shown})
	require.NoError(t, err)
	require.Equal(t, "approved", ok.GetStatus())
	waitRun(t, opFlow, created.GetId(), time.Minute, func(r *flowv1.OperationRun) bool {
		return r.GetSummary().GetState().GetStatus() == flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED
	})
	_, err = second.Approve(ctx, &adminv1.ApproveRequest{Id: req.GetId(), PlanHash: shown})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	require.ErrorContains(t, err, "was approved by")

	// Stale: a rack joins the site after the request; approval names it.
	res, err := opAdmin.CreateOperationRun(ctx, &adminv1.CreateOperationRunRequest{Request: rolloutRequest("again", rolloutOpts{concurrency: 3, seed: "order"})})
	require.NoError(t, err)
	require.NotEmpty(t, res.GetApprovalId())
	added := b.addRack(t, 399, false)
	_, err = second.Approve(ctx, &adminv1.ApproveRequest{Id: res.GetApprovalId(), PlanHash: res.GetPlanHash()})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "rack "+added.ID.String()+" added")
	rej, err := opAdmin.Reject(ctx, &adminv1.RejectRequest{Id: res.GetApprovalId(), Reason: "the site grew"})
	require.NoError(t, err)
	require.Equal(t, "rejected", rej.GetStatus())
	again := getRun(t, opFlow, &flowv1.UUID{Id: res.GetId()})
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_CANCELLED, again.GetSummary().GetState().GetStatus())
}

// TestTwoPersonApprovalBulk: a v1 bulk submission over the threshold is
// written with every task WAITING for a second identity's approval of the
// plan hash its dry run showed; the requester cannot approve it; approved,
// the tasks run; a rejected one's tasks end, naming the rejection; a
// submission under the threshold is not held.
func TestTwoPersonApprovalBulk(t *testing.T) {
	t.Parallel()
	b := newRolloutBench(t, 6, time.Millisecond)
	opFlow, opAdmin, second := approvalServer(t, b)
	ctx := context.Background()
	var names []string
	for _, r := range b.racks {
		names = append(names, r.Name)
	}
	statuses := func(ids []*flowv1.UUID) []*flowv1.Task {
		res, err := opFlow.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: ids})
		require.NoError(t, err)
		return res.GetTasks()
	}
	// A receiver of the approval events.
	var mu sync.Mutex
	var got []map[string]any
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev map[string]any
		if json.NewDecoder(r.Body).Decode(&ev) == nil {
			mu.Lock()
			got = append(got, ev)
			mu.Unlock()
		}
	}))
	t.Cleanup(rcv.Close)
	_, err := opAdmin.CreateWebhook(ctx, &adminv1.CreateWebhookRequest{Url: rcv.URL, EventTypes: []string{"flow.approval.requested", "flow.approval.decided", "flow.task.terminated"},
		Secret: "a-secret-of-sixteen-or-more"})
	require.NoError(t, err)
	approvalEvent := func(typ, status string) map[string]any {
		var found map[string]any
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, ev := range got {
				if ev["type"] == typ && ev["data"].(map[string]any)["approval"].(map[string]any)["status"] == status {
					found = ev["data"].(map[string]any)["approval"].(map[string]any)
					return true
				}
			}
			return false
		}, 30*time.Second, 20*time.Millisecond, "%s %s", typ, status)
		return found
	}

	pending := func() *adminv1.Approval {
		list, err := second.ListApprovals(ctx, &adminv1.ListApprovalsRequest{})
		require.NoError(t, err)
		require.Len(t, list.GetApprovals(), 1)
		return list.GetApprovals()[0]
	}

	on := &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(names...), Description: "site power on"}
	pv, err := opAdmin.PreviewSubmission(ctx, &adminv1.PreviewSubmissionRequest{Request: &adminv1.PreviewSubmissionRequest_PowerOn{PowerOn: on}})
	require.NoError(t, err)
	shown := pv.GetPlanHash()
	require.True(t, pv.GetApprovalRequired(), "6 racks > 5: the dry run says it needs approval")
	res, err := opFlow.PowerOnRack(ctx, on)
	require.NoError(t, err)
	require.Len(t, res.GetTaskIds(), 6)
	req := pending()
	require.Equal(t, "submission", req.GetKind())
	require.Equal(t, shown, req.GetPlanHash(), "the request froze the plan its dry run showed")
	var ids []string
	for _, id := range res.GetTaskIds() {
		ids = append(ids, id.GetId())
	}
	require.ElementsMatch(t, ids, req.GetSubjectIds())
	for _, task := range statuses(res.GetTaskIds()) {
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_WAITING, task.GetStatus())
		require.Contains(t, task.GetMessage(), "awaiting approval of request "+req.GetId())
	}

	_, err = opAdmin.Approve(ctx, &adminv1.ApproveRequest{Id: req.GetId(), PlanHash: shown})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "cannot approve their own request")
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_WAITING, statuses(res.GetTaskIds()[:1])[0].GetStatus(), "nothing changed")

	ok, err := second.Approve(ctx, &adminv1.ApproveRequest{Id: req.GetId(), PlanHash: shown})
	require.NoError(t, err)
	require.Equal(t, "approved", ok.GetStatus())
	// Both told by webhook: the request with its plan hash and subjects,
	// then the decision with who made it.
	asked := approvalEvent("flow.approval.requested", "pending")
	require.Equal(t, req.GetId(), asked["id"])
	require.Equal(t, "submission", asked["kind"])
	require.Equal(t, shown, asked["plan_hash"])
	require.Len(t, asked["subject_ids"], 6)
	decided := approvalEvent("flow.approval.decided", "approved")
	require.Equal(t, req.GetId(), decided["id"])
	require.Contains(t, decided["decided_by"], "admin")
	for _, id := range res.GetTaskIds() {
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, waitTask(t, opFlow, id, time.Minute).GetStatus())
	}

	// Rejected: its tasks end, and say why.
	off, err := opFlow.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(names...)})
	require.NoError(t, err)
	req = pending()
	_, err = opAdmin.Reject(ctx, &adminv1.RejectRequest{Id: req.GetId(), Reason: "not tonight"})
	require.NoError(t, err)
	for _, id := range off.GetTaskIds() {
		task := waitTask(t, opFlow, id, time.Minute)
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_TERMINATED, task.GetStatus())
		require.Contains(t, task.GetMessage(), "rejected by")
		require.Contains(t, task.GetMessage(), "not tonight")
	}
	// Tasks that never started end with a flow.task.terminated each too.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		ended := map[string]bool{}
		for _, ev := range got {
			if ev["type"] == "flow.task.terminated" {
				task := ev["data"].(map[string]any)["task"].(map[string]any)
				if strings.Contains(task["message"].(string), "not tonight") {
					ended[task["id"].(string)] = true
				}
			}
		}
		return len(ended) == len(off.GetTaskIds())
	}, 30*time.Second, 20*time.Millisecond, "a terminated event per rejected task")

	// Under the threshold: not held.
	one, err := opFlow.PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(names[0])})
	require.NoError(t, err)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, waitTask(t, opFlow, one.GetTaskIds()[0], time.Minute).GetStatus())
}

// TestFirmwareWindowReachesCore: a firmware upgrade that starts inside a
// maintenance window tells NICo Core that window for each compute tray
// (SetFirmwareUpdateTimeWindow), narrowed by the request's own end_time,
// so Core holds the update to it too.
func TestFirmwareWindowReachesCore(t *testing.T) {
	t.Parallel()
	b := newFWBench(t, time.Millisecond)
	r := b.addRack(t, 1, true)
	srv := b.serve(t, nil, nil)
	admin := adminv1connect.NewAdminServiceClient(http.DefaultClient, srv.url)
	ctx := context.Background()

	opened := time.Now().Add(-time.Minute).Truncate(time.Second)
	closes := opened.Add(2 * time.Hour)
	_, err := admin.CreateWindow(ctx, &adminv1.CreateWindowRequest{Kind: "window", Name: "tonight", Scope: &adminv1.WindowScope{Site: true},
		StartsAt: timestamppb.New(opened), EndsAt: timestamppb.New(closes)})
	require.NoError(t, err)
	own := closes.Add(-30 * time.Minute)
	// The sync read every type's versions just now.
	pool, err := db.Open(ctx, b.dbURL, db.PoolConfig{MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO component_firmware_read (component_type, read_at) VALUES ('Compute', now()), ('NVSwitch', now()), ('PowerShelf', now())`)
	require.NoError(t, err)
	res, err := srv.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(r.Name), TargetVersion: ptr(`{"compute":"2.0","nvswitch":"3.0"}`),
		EndTime: timestamppb.New(own)})
	require.NoError(t, err)
	task := waitTask(t, srv.client, res.GetTaskIds()[0], time.Minute)
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
	trays := 0
	for _, c := range r.Components {
		w, ok := b.sims.nico.FirmwareWindowOf(c.ExternalID)
		if c.Type != inventory.ComponentTypeCompute {
			require.False(t, ok, "%s is no machine: Core has no window for it", c.Name)
			continue
		}
		require.True(t, ok, "tray %s: Core was told no window", c.Name)
		require.True(t, w.Start.Equal(opened), "tray %s: window from %s, want %s", c.Name, w.Start, opened)
		require.True(t, w.End.Equal(own), "tray %s: window until %s, want the request's end_time %s", c.Name, w.End, own)
		trays++
	}
	require.Positive(t, trays)
	// The task's end made the versions due at the next sync cycle.
	var due int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM component_firmware_read WHERE due`).Scan(&due))
	require.Equal(t, 3, due)
}
