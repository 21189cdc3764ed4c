package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// TestPostgresOutageAnswersUnavailable: a flow serve on a PostgreSQL the
// test stops, then makes read-only. While it is down, every
// database-backed call answers unavailable (HTTP 503 over Connect JSON,
// UNAVAILABLE over gRPC) with a message that names no socket, never
// internal, and /readyz answers 503; once it is back both recover. While
// it is read-only (a standby after a failover looks like this to Flow:
// 25006 read_only_sql_transaction), writes answer unavailable, reads
// still work, and /readyz is 503.
func TestPostgresOutageAnswersUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, url := dbtest.StartCluster(t, dbtest.RestartableSettings(50))

	port, err := pglocal.FreePort()
	require.NoError(t, err)
	adminPort, err := pglocal.FreePort()
	require.NoError(t, err)
	api := "http://127.0.0.1:" + itoa(port)
	admin := "http://127.0.0.1:" + itoa(adminPort)
	startServerProcess(t, []string{"DATABASE_URL=" + url, "FLOW_LISTEN_ADDR=127.0.0.1:" + itoa(port),
		"FLOW_ADMIN_LISTEN_ADDR=127.0.0.1:" + itoa(adminPort), "FLOW_LOG_LEVEL=warn"})
	waitHealthy(t, api)
	grpcClient := flowv1connect.NewFlowClient(h2cClient(), api, connect.WithGRPC())

	ready := func() (int, string) {
		res, err := http.Get(admin + "/readyz")
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { code, _ := ready(); return code == http.StatusOK }, time.Minute, 50*time.Millisecond)

	n := 0
	newRack := func() *flowv1.CreateExpectedRackRequest {
		n++
		return &flowv1.CreateExpectedRackRequest{Rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{
			Name: fmt.Sprintf("outage-%d", n), Manufacturer: "m", SerialNumber: fmt.Sprintf("outage-sn-%d", n)}}}
	}
	// Each call, over gRPC and over Connect JSON (status and body read
	// raw): what a client of each sees.
	type call struct {
		name, method, body string
		write              bool
		grpc               func() error
	}
	calls := []call{
		{name: "read a listing", method: "GetListOfRacks", body: `{}`, grpc: func() error {
			_, err := grpcClient.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{})
			return err
		}},
		{name: "read tasks", method: "GetTasksByIDs", body: `{"taskIds":[{"id":"6b3a2f4e-2b1c-4c55-9a51-0c1f9e4f3a10"}]}`, grpc: func() error {
			_, err := grpcClient.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: []*flowv1.UUID{{Id: "6b3a2f4e-2b1c-4c55-9a51-0c1f9e4f3a10"}}})
			return err
		}},
		{name: "create a rack", method: "CreateExpectedRack", write: true, grpc: func() error {
			_, err := grpcClient.CreateExpectedRack(ctx, newRack())
			return err
		}},
		{name: "create a rule", method: "CreateOperationRule", write: true, body: `{"name":"outage-rule","operationType":"OPERATION_TYPE_POWER_CONTROL","operationCode":"power_on",
			"ruleDefinitionJson":"{\"steps\":[{\"component_type\":\"Compute\",\"stage\":1,\"main_operation\":{\"name\":\"PowerControl\",\"parameters\":{\"operation\":\"power_on\"}}}]}"}`,
			grpc: func() error {
				_, err := grpcClient.CreateOperationRule(ctx, &flowv1.CreateOperationRuleRequest{Name: fmt.Sprintf("outage-rule-%d", time.Now().UnixNano()),
					OperationType: flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL, OperationCode: "power_on",
					RuleDefinitionJson: `{"steps":[{"component_type":"Compute","stage":1,"main_operation":{"name":"PowerControl","parameters":{"operation":"power_on"}}}]}`})
				return err
			}},
	}
	connectJSON := func(c call) (int, string, string) {
		body := c.body
		if c.method == "CreateExpectedRack" {
			b, err := json.Marshal(map[string]any{"rack": map[string]any{"info": map[string]any{"name": fmt.Sprintf("outage-json-%d", time.Now().UnixNano()), "manufacturer": "m", "serialNumber": fmt.Sprintf("sn-%d", time.Now().UnixNano())}}})
			require.NoError(t, err)
			body = string(b)
		}
		res, err := http.Post(api+"/"+flowv1connect.FlowName+"/"+c.method, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		var e struct{ Code, Message string }
		_ = json.Unmarshal(raw, &e)
		return res.StatusCode, e.Code, e.Message
	}
	requireUnavailable := func(c call, phase string) {
		t.Helper()
		err := c.grpc()
		require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%s, gRPC, %s: %v", c.name, phase, err)
		require.NotContains(t, err.Error(), "127.0.0.1", "%s: no socket address in the answer", c.name)
		status, code, msg := connectJSON(c)
		require.Equal(t, http.StatusServiceUnavailable, status, "%s, Connect, %s: %s %s", c.name, phase, code, msg)
		require.Equal(t, "unavailable", code)
		require.NotContains(t, msg, "127.0.0.1")
		require.NotContains(t, msg, "tcp")
		t.Logf("%s (%s): %q", c.name, phase, msg)
	}
	requireOK := func(c call, phase string) {
		t.Helper()
		err := c.grpc()
		if c.method == "GetTasksByIDs" && connect.CodeOf(err) == connect.CodeNotFound {
			err = nil // the database answered: no such task
		}
		require.NoError(t, err, "%s, gRPC, %s", c.name, phase)
		status, code, msg := connectJSON(c)
		if c.method == "GetTasksByIDs" && code == "not_found" {
			status = http.StatusOK
		}
		require.Equal(t, http.StatusOK, status, "%s, Connect, %s: %s %s", c.name, phase, code, msg)
	}
	for _, c := range calls {
		if c.method == "CreateOperationRule" {
			continue // once: its name is unique
		}
		requireOK(c, "before the outage")
	}

	// Down.
	require.NoError(t, cluster.Stop(ctx))
	for _, c := range calls {
		requireUnavailable(c, "database down")
	}
	code, body := ready()
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.NotContains(t, body, "127.0.0.1")
	t.Logf("/readyz while down: %d %s", code, strings.TrimSpace(body))

	// Back.
	require.NoError(t, cluster.Start(ctx))
	require.Eventually(t, func() bool {
		code, _ := ready()
		return code == http.StatusOK
	}, time.Minute, 50*time.Millisecond, "/readyz ready again")
	require.Eventually(t, func() bool {
		_, err := grpcClient.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{})
		return err == nil
	}, time.Minute, 50*time.Millisecond)
	// A pooled connection that died with the old server may still fail
	// a call (unavailable: the client retries); then every call works.
	stale := 0
	require.Eventually(t, func() bool {
		for _, c := range calls[:3] {
			if err := c.grpc(); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
				require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%s after the outage: %v", c.name, err)
				t.Logf("%s right after the outage: %v", c.name, err)
				stale++
				return false
			}
		}
		return true
	}, time.Minute, 20*time.Millisecond)
	for _, c := range calls[:3] {
		requireOK(c, "after the outage")
	}
	t.Logf("after the outage: %d calls answered unavailable before all worked", stale)
	// One statement per pool learns the server went away; the pool then
	// pings before use and drops its other dead connections (db/stale.go;
	// TestRestartCostsOneStaleCall proves it for one pool). These calls
	// use the server's two pools (requests, listings' checks), and the
	// readiness loops above usually learnt it already.
	require.LessOrEqual(t, stale, 2, "calls answered unavailable once the database was back")

	// Read-only, as a demoted primary or a standby is.
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	setReadOnly := func(on bool) {
		_, err := conn.Exec(ctx, fmt.Sprintf(`ALTER SYSTEM SET default_transaction_read_only = %t`, on))
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `SELECT pg_reload_conf()`)
		require.NoError(t, err)
	}
	setReadOnly(true)
	require.Eventually(t, func() bool {
		code, _ := ready()
		return code == http.StatusServiceUnavailable
	}, 30*time.Second, 50*time.Millisecond, "/readyz unready on a read-only database")
	code, body = ready()
	t.Logf("/readyz while read-only: %d %s", code, strings.TrimSpace(body))
	for _, c := range calls {
		if c.write {
			requireUnavailable(c, "database read-only")
		} else {
			requireOK(c, "database read-only")
		}
	}
	setReadOnly(false)
	require.Eventually(t, func() bool {
		code, _ := ready()
		return code == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "/readyz ready once writable")
	require.Eventually(t, func() bool { return calls[2].grpc() == nil }, 30*time.Second, 50*time.Millisecond)
}
