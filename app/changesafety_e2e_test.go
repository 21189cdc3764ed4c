package app

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// rowCounts counts the rows of every table of the database (River's too).
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
}
