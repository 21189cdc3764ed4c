package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/cli"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// secureE2E is a Flow server with mutual TLS from `flow cert dev`
// certificates (CERTDIR), the dev policy, the simulators and a client per
// role.
type secureE2E struct {
	*e2e
	certs string
	logs  *syncBuffer
	srv   *server
}

// startSecureE2E runs flow serve's server with CERTDIR=certs (written by
// writeDevCerts when empty) and, when withPolicy, the dev policy.yaml.
func startSecureE2E(t *testing.T, withPolicy bool) *secureE2E {
	t.Helper()
	certs := t.TempDir()
	require.NoError(t, edge.WriteDevCerts(certs, nil))
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", powerDelay: time.Millisecond, firmwarePhase: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { sims.Close(context.Background()) })
	vars := map[string]string{
		"DATABASE_URL": dbtest.NewDB(t), "FLOW_LISTEN_ADDR": "127.0.0.1:0", "FLOW_ADMIN_LISTEN": "off",
		"NICO_CORE_API_URL": sims.nicoSrv.URL(), "PSM_API_URL": sims.psmSrv.URL(),
		"FLOW_SHUTDOWN_TIMEOUT": "5s", "CERTDIR": certs, "FLOW_APPROVAL_THRESHOLD": "0",
	}
	if withPolicy {
		vars["FLOW_AUTHZ_POLICY"] = filepath.Join(certs, "policy.yaml")
	}
	cfg, err := LoadConfig(env(vars))
	require.NoError(t, err)
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := newServer(ctx, cfg, newLogger(logs, "json", -4), serveOptions{})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	s := &secureE2E{certs: certs, logs: logs, srv: srv}
	url := "https://" + srv.Addr().String()
	s.e2e = &e2e{client: s.client(t, "admin"), sims: sims, url: url, inv: inventory.NewService(), dbURL: vars["DATABASE_URL"]}
	return s
}

// httpClient returns an HTTP/2 client presenting role's certificate ("":
// none) and trusting the dev CA.
func (s *secureE2E) httpClient(t *testing.T, role string) *http.Client {
	t.Helper()
	files := cli.TLSFiles{CA: filepath.Join(s.certs, "ca.crt")}
	if role != "" {
		files.Cert, files.Key = filepath.Join(s.certs, role+".crt"), filepath.Join(s.certs, role+".key")
	}
	cfg, err := cli.TLSConfig(files)
	require.NoError(t, err)
	return tlsHTTPClient(cfg)
}

func tlsHTTPClient(cfg *tls.Config) *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetHTTP1(true)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Protocols: &p, ForceAttemptHTTP2: true}, Timeout: 30 * time.Second}
}

// client is a Connect client for role.
func (s *secureE2E) client(t *testing.T, role string, opts ...connect.ClientOption) flowv1connect.FlowClient {
	return flowv1connect.NewFlowClient(s.httpClient(t, role), "https://"+s.srv.Addr().String(), opts...)
}

// postJSON calls procedure with body as Connect JSON, as curl does.
func (s *secureE2E) postJSON(t *testing.T, role, procedure, body string) (int, map[string]any) {
	t.Helper()
	res, err := s.httpClient(t, role).Post("https://"+s.srv.Addr().String()+procedure, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	out := map[string]any{}
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return res.StatusCode, out
}

// taskCount counts the task rows: a denied call writes none.
func (s *secureE2E) taskCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, s.srv.pool.QueryRow(context.Background(), `SELECT count(*) FROM task`).Scan(&n))
	return n
}

func (s *secureE2E) rackCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, s.srv.pool.QueryRow(context.Background(), `SELECT count(*) FROM rack`).Scan(&n))
	return n
}

func TestMTLSRefusesClientsWithoutAValidCertificate(t *testing.T) {
	t.Parallel()
	s := startSecureE2E(t, true)
	ctx := context.Background()

	// No client certificate: the handshake fails, no call is made.
	// (The client sees the alert or a broken pipe, as TLS 1.3 timing has
	// it; the server's log says why.)
	_, err := s.client(t, "").Version(ctx, &flowv1.VersionRequest{})
	require.Error(t, err)
	require.Eventually(t, func() bool { return strings.Contains(s.logs.String(), "client didn't provide a certificate") }, 5*time.Second, 10*time.Millisecond,
		"the server refused the handshake")

	// A certificate from another CA: refused at the handshake as well.
	other := t.TempDir()
	require.NoError(t, edge.WriteDevCerts(other, nil))
	cfg, err := cli.TLSConfig(cli.TLSFiles{CA: filepath.Join(s.certs, "ca.crt"), Cert: filepath.Join(other, "admin.crt"), Key: filepath.Join(other, "admin.key")})
	require.NoError(t, err)
	_, err = flowv1connect.NewFlowClient(tlsHTTPClient(cfg), s.url).Version(ctx, &flowv1.VersionRequest{})
	require.Error(t, err)
	require.Eventually(t, func() bool { return strings.Contains(s.logs.String(), "certificate signed by unknown authority") }, 5*time.Second, 10*time.Millisecond,
		"the server refused the handshake")

	// Cleartext on the TLS port gets nowhere either.
	_, err = flowv1connect.NewFlowClient(h2cClient(), "http://"+s.srv.Addr().String(), connect.WithGRPC()).Version(ctx, &flowv1.VersionRequest{})
	require.Error(t, err)

	// The server's TLS floor is 1.2.
	cfg, err = cli.TLSConfig(cli.TLSFiles{CA: filepath.Join(s.certs, "ca.crt"), Cert: filepath.Join(s.certs, "admin.crt"), Key: filepath.Join(s.certs, "admin.key")})
	require.NoError(t, err)
	cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS11, tls.VersionTLS11
	_, err = flowv1connect.NewFlowClient(tlsHTTPClient(cfg), s.url).Version(ctx, &flowv1.VersionRequest{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "protocol version")

	// The right certificate works, over TLS 1.3.
	res, err := s.httpClient(t, "viewer").Post(s.url+"/v1.Flow/Version", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, uint16(tls.VersionTLS13), res.TLS.Version)
	require.Equal(t, "HTTP/2.0", res.Proto)
}

// TestRolesOverGRPCAndConnect: a viewer reads but cannot power on, an
// operator powers on but cannot create racks, an admin does both; through
// gRPC and through Connect JSON; a denied call writes nothing.
func TestRolesOverGRPCAndConnect(t *testing.T) {
	t.Parallel()
	s := startSecureE2E(t, true)
	ctx := context.Background()
	rack := s.addRack(t, 31, true)
	newRack := func(name string) *flowv1.CreateExpectedRackRequest {
		return &flowv1.CreateExpectedRackRequest{Rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Name: name, Manufacturer: "NVIDIA", SerialNumber: "SN-" + name}}}
	}

	for _, proto := range []struct {
		name string
		opts []connect.ClientOption
	}{{"gRPC", []connect.ClientOption{connect.WithGRPC()}}, {"gRPC-Web", []connect.ClientOption{connect.WithGRPCWeb()}}, {"Connect", nil}} {
		viewer, operator, admin := s.client(t, "viewer", proto.opts...), s.client(t, "operator", proto.opts...), s.client(t, "admin", proto.opts...)

		// viewer: lists racks, PowerOnRack denied, nothing written.
		list, err := viewer.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{})
		require.NoError(t, err, proto.name)
		require.NotEmpty(t, list.GetRacks())
		tasks := s.taskCount(t)
		_, err = viewer.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
		require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), proto.name)
		require.Contains(t, err.Error(), "/v1.Flow/PowerOnRack needs role operator")
		require.Contains(t, err.Error(), `"`+edge.DevSPIFFEID("viewer")+`" has role viewer`)
		require.Equal(t, tasks, s.taskCount(t), "a denied call writes nothing")

		// operator: powers on, cannot create a rack.
		res, err := operator.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
		require.NoError(t, err, proto.name)
		require.Len(t, res.GetTaskIds(), 1)
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, s.wait(t, res.GetTaskIds()[0]).GetStatus())
		racks := s.rackCount(t)
		_, err = operator.CreateExpectedRack(ctx, newRack("op-"+proto.name))
		require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), proto.name)
		require.Contains(t, err.Error(), "/v1.Flow/CreateExpectedRack needs role admin")
		require.Equal(t, racks, s.rackCount(t))

		// admin: both.
		res, err = admin.PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
		require.NoError(t, err, proto.name)
		s.wait(t, res.GetTaskIds()[0])
		_, err = admin.CreateExpectedRack(ctx, newRack("admin-"+proto.name))
		require.NoError(t, err, proto.name)
		require.Equal(t, racks+1, s.rackCount(t))
	}

	// Connect JSON as curl sends it.
	status, body := s.postJSON(t, "viewer", "/v1.Flow/GetListOfRacks", `{}`)
	require.Equal(t, http.StatusOK, status)
	require.NotEmpty(t, body["racks"])
	tasks := s.taskCount(t)
	status, body = s.postJSON(t, "viewer", "/v1.Flow/PowerOnRack", `{"targetSpec":{"racks":{"targets":[{"name":"`+rack.Name+`"}]}}}`)
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, "permission_denied", body["code"])
	require.Contains(t, body["message"], "needs role operator")
	require.Equal(t, tasks, s.taskCount(t))
	status, _ = s.postJSON(t, "operator", "/v1.Flow/PowerOnRack", `{"targetSpec":{"racks":{"targets":[{"name":"`+rack.Name+`"}]}}}`)
	require.Equal(t, http.StatusOK, status)
	status, body = s.postJSON(t, "operator", "/v1.Flow/CreateExpectedRack", `{"rack":{"info":{"name":"curl-op","manufacturer":"NVIDIA","serialNumber":"SN-curl-op"}}}`)
	require.Equal(t, http.StatusForbidden, status, body)
	status, body = s.postJSON(t, "admin", "/v1.Flow/CreateExpectedRack", `{"rack":{"info":{"name":"curl-admin","manufacturer":"NVIDIA","serialNumber":"SN-curl-admin"}}}`)
	require.Equal(t, http.StatusOK, status, body)

	// gRPC health needs a certificate, not a role.
	status, _ = s.postJSON(t, "viewer", "/grpc.health.v1.Health/Check", `{}`)
	require.Equal(t, http.StatusOK, status)
}

// TestAuditLineAndSubmitter: an operator's PowerOnRack writes one audit line
// naming the identity, method, targets, outcome and request ID, and the
// task records its submitter (shown in its report).
func TestAuditLineAndSubmitter(t *testing.T) {
	t.Parallel()
	s := startSecureE2E(t, true)
	ctx := context.Background()
	rack := s.addRack(t, 32, true)

	callCtx, call := connect.NewClientContext(ctx)
	call.RequestHeader().Set("X-Request-Id", "req-audit-1")
	res, err := s.client(t, "operator", connect.WithGRPC()).PowerOnRack(callCtx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name), Description: "audit me"})
	require.NoError(t, err)
	require.Equal(t, "req-audit-1", call.ResponseHeader().Get("X-Request-Id"))
	taskID := res.GetTaskIds()[0].GetId()

	var audits []map[string]any
	for _, line := range strings.Split(s.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "audit" && m["request_id"] == "req-audit-1" {
			audits = append(audits, m)
		}
	}
	require.Len(t, audits, 1, s.logs.String())
	a := audits[0]
	require.Equal(t, edge.DevSPIFFEID("operator"), a["identity"])
	require.Equal(t, "/v1.Flow/PowerOnRack", a["method"])
	require.Equal(t, "ok", a["outcome"])
	require.Equal(t, []any{"target_spec.racks.targets.name=" + rack.Name, "result.task_ids=" + taskID}, a["targets"])
	require.NotEmpty(t, a["peer"])

	// A denied call is audited too, with its outcome; reads are not.
	_, err = s.client(t, "viewer").PowerOffRack(ctx, &flowv1.PowerOffRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
	_, err = s.client(t, "viewer").GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{})
	require.NoError(t, err)
	var denied, reads int
	for _, line := range strings.Split(s.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "audit" {
			continue
		}
		switch m["method"] {
		case "/v1.Flow/PowerOffRack":
			denied++
			require.Equal(t, "permission_denied", m["outcome"])
			require.Equal(t, edge.DevSPIFFEID("viewer"), m["identity"])
		case "/v1.Flow/GetListOfRacks":
			reads++
		}
	}
	require.Equal(t, 1, denied)
	require.Zero(t, reads)

	// The task records who submitted it, in the database and its report.
	var by string
	require.NoError(t, s.srv.pool.QueryRow(ctx, `SELECT submitted_by FROM task WHERE id = $1`, taskID).Scan(&by))
	require.Equal(t, edge.DevSPIFFEID("operator"), by)
	task := s.wait(t, res.GetTaskIds()[0])
	var rep operations.Report
	require.NoError(t, json.Unmarshal([]byte(task.GetReport()), &rep))
	require.Equal(t, edge.DevSPIFFEID("operator"), rep.SubmittedBy)

	// A schedule submits what it fires as the identity that created it,
	// whoever triggers it (the trigger itself is audited under its caller).
	sched, err := s.client(t, "admin").CreateTaskSchedule(ctx, &flowv1.CreateTaskScheduleRequest{
		Schedule:  &flowv1.ScheduleConfig{Name: "nightly-on", Spec: &flowv1.ScheduleSpec{Type: flowv1.ScheduleSpecType_SCHEDULE_SPEC_TYPE_INTERVAL, Spec: "24h"}},
		Operation: &flowv1.ScheduledOperation{Operation: &flowv1.ScheduledOperation_PowerOn{PowerOn: &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)}}},
	})
	require.NoError(t, err)
	s.wait(t, res.GetTaskIds()[0])
	fired, err := s.client(t, "operator").TriggerTaskSchedule(ctx, &flowv1.TriggerTaskScheduleRequest{Id: sched.GetId()})
	require.NoError(t, err)
	require.Len(t, fired.GetTaskIds(), 1)
	require.NoError(t, s.srv.pool.QueryRow(ctx, `SELECT submitted_by FROM task WHERE id = $1`, fired.GetTaskIds()[0].GetId()).Scan(&by))
	require.Equal(t, edge.DevSPIFFEID("admin"), by)

	// An operation run submits its child tasks as the identity that
	// created it.
	run, err := s.client(t, "operator").CreateOperationRun(ctx, rolloutRequest("audited rollout", rolloutOpts{concurrency: 1}))
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var children []string
		rows, err := s.srv.pool.Query(ctx, `SELECT submitted_by FROM task WHERE trigger_id = $1`, run.GetId().GetId())
		require.NoError(c, err)
		children, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(c, err)
		require.NotEmpty(c, children)
		for _, by := range children {
			require.Equal(c, edge.DevSPIFFEID("operator"), by)
		}
	}, time.Minute, 100*time.Millisecond)
}

// TestNoPolicyMakesEveryCertificateAdmin: without FLOW_AUTHZ_POLICY every
// client with a certificate from the CA is admin, and the log says so.
func TestNoPolicyMakesEveryCertificateAdmin(t *testing.T) {
	t.Parallel()
	s := startSecureE2E(t, false)
	require.Contains(t, s.logs.String(), "every client with a valid certificate is admin")
	_, err := s.client(t, "viewer").CreateExpectedRack(context.Background(), &flowv1.CreateExpectedRackRequest{
		Rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Name: "by-viewer", Manufacturer: "NVIDIA", SerialNumber: "SN-by-viewer"}}})
	require.NoError(t, err)
}

// TestCertificateRotationKeepsConnections rotates the server certificate
// files while a client follows a task the way `flow task watch` does
// (GetTasksByIDs again and again over one HTTP/2 connection; v1.Flow has no
// server stream): the followed connection is never cut, and new
// connections get the new certificate.
func TestCertificateRotationKeepsConnections(t *testing.T) {
	t.Parallel()
	s := startSecureE2E(t, true)
	ctx := context.Background()
	rack := s.addRack(t, 33, true)
	watcher := s.client(t, "viewer", connect.WithGRPC())
	res, err := s.client(t, "operator").PowerOnRack(ctx, &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	ids := res.GetTaskIds()

	serverCert := func(c *http.Client) []byte {
		r, err := c.Post(s.url+"/v1.Flow/Version", "application/json", strings.NewReader("{}"))
		require.NoError(t, err)
		r.Body.Close()
		return r.TLS.PeerCertificates[0].Raw
	}
	before := serverCert(s.httpClient(t, "viewer"))

	// The watch: polls until told to stop, counting the connections it
	// opens (one, if nothing is cut).
	stop := make(chan struct{})
	polls := make(chan error, 1)
	var conns, calls atomic.Int32
	trace := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			conns.Add(1)
		}
	}})
	go func() {
		for {
			select {
			case <-stop:
				polls <- nil
				return
			default:
			}
			if _, err := watcher.GetTasksByIDs(trace, &flowv1.GetTasksByIDsRequest{TaskIds: ids}); err != nil {
				polls <- err
				return
			}
			calls.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	polling := func(n int32) {
		t.Helper()
		require.Eventually(t, func() bool { return calls.Load() >= n }, 30*time.Second, 5*time.Millisecond, "the watch stalled")
	}
	polling(3)

	// Rotate: a new CA and certificates written over the old files, as a
	// cert-manager renewal would (a new CA too: the hardest case).
	fresh := t.TempDir()
	require.NoError(t, edge.WriteDevCerts(fresh, nil))
	for _, name := range []string{"ca.crt", "tls.crt", "tls.key", "viewer.crt", "viewer.key"} {
		b, err := os.ReadFile(filepath.Join(fresh, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(s.certs, name+".tmp"), b, 0o600))
		require.NoError(t, os.Rename(filepath.Join(s.certs, name+".tmp"), filepath.Join(s.certs, name)))
	}
	var after []byte
	require.Eventually(t, func() bool {
		after = serverCert(s.httpClient(t, "viewer")) // a new connection, new files
		return !bytes.Equal(after, before)
	}, 10*time.Second, 20*time.Millisecond)
	newCert, err := tls.LoadX509KeyPair(filepath.Join(fresh, "tls.crt"), filepath.Join(fresh, "tls.key"))
	require.NoError(t, err)
	require.Equal(t, newCert.Certificate[0], after, "new connections get the new certificate")
	polling(calls.Load() + 3) // the watch keeps polling after the rotation
	close(stop)
	// The watcher holds the old CA's viewer certificate, which the rotated
	// server no longer accepts: it kept working only on its first
	// connection.
	require.NoError(t, <-polls, "the watch connection was not cut")
	require.GreaterOrEqual(t, calls.Load(), int32(6))
	require.Equal(t, int32(1), conns.Load(), "one connection for the whole watch")
	_, err = s.client(t, "").Version(ctx, &flowv1.VersionRequest{})
	require.Error(t, err)
	require.Contains(t, s.logs.String(), "TLS certificates reloaded")
}

// TestCLIOverMTLS: the CLI speaks mutual TLS with --ca/--cert/--key (before
// the noun, as in docs/security.md) or FLOW_TLS_*, and reports a denied
// call.
func TestCLIOverMTLS(t *testing.T) {
	t.Parallel()
	s := startSecureE2E(t, true)
	rack := s.addRack(t, 34, true)
	addr := s.srv.Addr().String()
	ctx := context.Background()
	cliRun := func(vars map[string]string, args ...string) (string, error) {
		var out syncBuffer
		err := run(ctx, append([]string{"flow"}, args...), env(vars), &out, &out)
		return out.String(), err
	}
	f := func(name string) string { return filepath.Join(s.certs, name) }

	out, err := cliRun(nil, "--ca", f("ca.crt"), "--cert", f("viewer.crt"), "--key", f("viewer.key"), "rack", "list", "--server", addr)
	require.NoError(t, err, out)
	require.Contains(t, out, rack.Name)

	operator := map[string]string{"FLOW_TLS_CA": f("ca.crt"), "FLOW_TLS_CERT": f("operator.crt"), "FLOW_TLS_KEY": f("operator.key"), "FLOW_SERVER": addr}
	out, err = cliRun(operator, "power", "on", rack.Name, "--wait")
	require.NoError(t, err, out)
	out, err = cliRun(operator, "task", "list")
	require.NoError(t, err, out)
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	out, err = cliRun(operator, "task", "get", id)
	require.NoError(t, err, out)
	require.Regexp(t, `SUBMITTED BY\s+`+edge.DevSPIFFEID("operator"), out)

	out, err = cliRun(nil, "--ca", f("ca.crt"), "--cert", f("viewer.crt"), "--key", f("viewer.key"), "--server", addr, "power", "off", rack.Name)
	require.Error(t, err)
	require.Contains(t, err.Error()+out, "needs role operator")

	// Without a certificate, or in cleartext, the CLI gets nowhere.
	_, err = cliRun(nil, "--ca", f("ca.crt"), "rack", "list", "--server", addr)
	require.Error(t, err)
	_, err = cliRun(nil, "rack", "list", "--server", addr)
	require.Error(t, err)
	_, err = cliRun(nil, "--ca", f("ca.crt"), "--cert", f("viewer.crt"), "rack", "list", "--server", addr)
	require.ErrorContains(t, err, "--cert and --key")
	_, err = cliRun(nil, "--ca", f("ca.crt"), "--cert", f("viewer.crt"), "--key", f("viewer.key"), "rack", "list", "--server", "http://"+addr)
	require.ErrorContains(t, err, "use https://")
}
