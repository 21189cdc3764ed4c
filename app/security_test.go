package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// TestEveryFlowMethodHasARole reads the methods from the generated service
// descriptor: a new v1.Flow method without a role in methodRoles fails
// here, and so does a stale entry.
func TestEveryFlowMethodHasARole(t *testing.T) {
	t.Parallel()
	methods := flowv1.File_flow_proto.Services().ByName("Flow").Methods()
	require.Equal(t, 76, methods.Len())
	listed := map[string]bool{}
	for i := 0; i < methods.Len(); i++ {
		procedure := "/v1.Flow/" + string(methods.Get(i).Name())
		role, ok := methodRoles[procedure]
		require.True(t, ok, "%s has no role in methodRoles (app/authz.go)", procedure)
		require.Contains(t, []Role{roleViewer, roleOperator, roleAdmin}, role, procedure)
		listed[procedure] = true
	}
	// Flow's admin service is listed too.
	admin := adminv1.File_flow_admin_v1_admin_proto.Services().ByName("AdminService").Methods()
	for i := 0; i < admin.Len(); i++ {
		procedure := "/flow.admin.v1.AdminService/" + string(admin.Get(i).Name())
		role, ok := methodRoles[procedure]
		require.True(t, ok, "%s has no role in methodRoles (app/authz.go)", procedure)
		require.Contains(t, []Role{roleViewer, roleOperator, roleAdmin}, role, procedure)
		listed[procedure] = true
	}
	for procedure := range methodRoles {
		require.True(t, listed[procedure], "methodRoles lists %s, which neither v1.Flow nor the admin service has", procedure)
	}
	// Spot checks of the table.
	for procedure, want := range map[string]Role{
		flowv1connect.FlowGetListOfRacksProcedure:      roleViewer,
		flowv1connect.FlowPowerOnRackProcedure:         roleOperator,
		flowv1connect.FlowUpgradeFirmwareProcedure:     roleOperator,
		flowv1connect.FlowCancelTaskProcedure:          roleOperator,
		flowv1connect.FlowCreateTaskScheduleProcedure:  roleOperator,
		flowv1connect.FlowCreateOperationRunProcedure:  roleOperator,
		flowv1connect.FlowCreateExpectedRackProcedure:  roleAdmin,
		flowv1connect.FlowDecommissionRackProcedure:    roleAdmin,
		flowv1connect.FlowCreateOperationRuleProcedure: roleAdmin,
		flowv1connect.FlowCreateEventRuleProcedure:     roleAdmin,
		"/grpc.health.v1.Health/Check":                 roleAny,
		"/grpc.reflection.v1.ServerReflection/Info":    roleViewer,
		"/flow.admin.v1.Admin/SomethingNew":            roleAdmin,
	} {
		require.Equal(t, want, procedureRole(procedure), procedure)
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	p, err := parsePolicy([]byte(`
identities:
  spiffe://example.org/ns/ops/*: operator
  spiffe://example.org/ns/ops/sa/lead: admin
  spiffe://example.org/*: viewer
  dashboard: viewer
`))
	require.NoError(t, err)
	for id, want := range map[string]Role{
		"spiffe://example.org/ns/ops/sa/lead": roleAdmin,    // exact wins
		"spiffe://example.org/ns/ops/sa/bot":  roleOperator, // longest pattern
		"spiffe://example.org/ns/other/sa/x":  roleViewer,
		"dashboard":                           roleViewer,
		"spiffe://evil.org/ns/ops/sa/bot":     roleNone,
		"spiffe://example.org/ns/ops":         roleViewer, // the pattern needs the slash
		"dashboard2":                          roleNone,
	} {
		require.Equal(t, want, p.roleOf(id), id)
	}
	require.Equal(t, roleAdmin, (*policy)(nil).roleOf("anyone"), "no policy: admin")

	for _, tt := range []struct{ name, yaml, want string }{
		{"UnknownRole", "identities:\n  a: root\n", `"a": unknown role "root"`},
		{"MidWildcard", "identities:\n  spiffe://*/ns: viewer\n", "a wildcard may only end a pattern"},
		{"NoSlash", "identities:\n  spiffe://x/ns*: viewer\n", "a wildcard may only end a pattern"},
		{"Empty", "identities: {}\n", "no identity listed"},
		{"UnknownKey", "identity:\n  a: viewer\n", "field identity not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parsePolicy([]byte(tt.yaml))
			require.ErrorContains(t, err, tt.want)
		})
	}
	_, err = loadPolicy(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorContains(t, err, "FLOW_AUTHZ_POLICY")
}

func TestResolveCertSource(t *testing.T) {
	t.Parallel()
	certs := t.TempDir()
	require.NoError(t, writeDevCerts(certs, nil))
	empty := t.TempDir()
	explicit := TLSFiles{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, "tls.crt"), Key: filepath.Join(certs, "tls.key")}

	// Explicit files win over CERTDIR and the SPIFFE mount.
	src, err := resolveCertSource(Config{TLS: explicit, CertDir: empty}, certs)
	require.NoError(t, err)
	require.Equal(t, "FLOW_TLS_*", src.name)
	// CERTDIR next, even when the SPIFFE mount has files.
	src, err = resolveCertSource(Config{CertDir: certs}, empty)
	require.NoError(t, err)
	require.Equal(t, "CERTDIR "+certs, src.name)
	require.Equal(t, explicit, src.files)
	// Then the SPIFFE mount.
	src, err = resolveCertSource(Config{}, certs)
	require.NoError(t, err)
	require.Equal(t, "SPIFFE mount "+certs, src.name)
	// Nothing anywhere.
	_, err = resolveCertSource(Config{}, empty)
	require.ErrorIs(t, err, errNoCertificates)
	// A source that was asked for but is missing files is an error of its
	// own, never a silent fall-through to cleartext.
	_, err = resolveCertSource(Config{CertDir: empty}, certs)
	require.ErrorContains(t, err, filepath.Join(empty, "ca.crt"))
	require.NotErrorIs(t, err, errNoCertificates)
	_, err = resolveCertSource(Config{TLS: TLSFiles{CA: explicit.CA}}, certs)
	require.ErrorContains(t, err, "must be set together")

	_, err = LoadConfig(env(map[string]string{"FLOW_TLS_CERT": "x.crt"}))
	require.ErrorContains(t, err, "FLOW_TLS_CA, FLOW_TLS_CERT and FLOW_TLS_KEY must be set together")
	_, err = LoadConfig(env(map[string]string{"ALLOW_INSECURE_GRPC": "yes please"}))
	require.ErrorContains(t, err, "ALLOW_INSECURE_GRPC must be true or false")
}

// TestServeRefusesToStartWithoutCertificates runs `flow serve` as a child
// process with no certificate anywhere: it exits non-zero naming the three
// sources and the way out.
func TestServeRefusesToStartWithoutCertificates(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FLOW_TEST_CHILD=serve", "DATABASE_URL=postgres://unused@127.0.0.1:1/x",
		"FLOW_LISTEN_ADDR=127.0.0.1:0", "FLOW_ADMIN_LISTEN=off",
		"ALLOW_INSECURE_GRPC=", "FLOW_TLS_CA=", "FLOW_TLS_CERT=", "FLOW_TLS_KEY=", "CERTDIR=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.NotZero(t, exit.ExitCode())
	for _, want := range []string{"TLS certificates required", "FLOW_TLS_CA", "CERTDIR", spiffeCertDir, "ALLOW_INSECURE_GRPC=true"} {
		require.Contains(t, stderr.String(), want)
	}
}

// TestServeInsecureOptIn: with ALLOW_INSECURE_GRPC=true flow serve serves
// cleartext, warns, and every caller is the admin "insecure"; a policy file
// with cleartext is refused (it could identify nobody).
func TestServeInsecureOptIn(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"DATABASE_URL": dbtest.NewDB(t), "FLOW_LISTEN_ADDR": "127.0.0.1:0", "FLOW_ADMIN_LISTEN": "off", "ALLOW_INSECURE_GRPC": "true"}
	cfg, err := LoadConfig(env(vars))
	require.NoError(t, err)
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := newServer(ctx, cfg, newLogger(logs, "json", -4), serveOptions{})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	require.Contains(t, logs.String(), "serving the API in cleartext without authentication (ALLOW_INSECURE_GRPC=true)")
	_, err = flowv1connect.NewFlowClient(h2cClient(), "http://"+srv.Addr().String()).CreateExpectedRack(ctx, &flowv1.CreateExpectedRackRequest{
		Rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Name: "cleartext", Manufacturer: "NVIDIA", SerialNumber: "SN-cleartext"}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"identity":"insecure"`) }, 5*time.Second, 10*time.Millisecond)

	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte("identities:\n  a: admin\n"), 0o644))
	cfg.AuthzPolicy = policyFile
	_, err = newServer(ctx, cfg, newLogger(logs, "json", 0), serveOptions{})
	require.ErrorContains(t, err, "FLOW_AUTHZ_POLICY is set but the API serves cleartext")
}

func TestValidRequestID(t *testing.T) {
	t.Parallel()
	require.True(t, validRequestID("req-1_ABC.def:9"))
	require.False(t, validRequestID(""))
	require.False(t, validRequestID("has space"))
	require.False(t, validRequestID(`quote"`))
	require.False(t, validRequestID(strings.Repeat("x", 129)))
}

// TestCertReloaderKeepsTheOldCertificateOnAHalfWrittenRotation: a rotation
// caught between the certificate and the key keeps serving the previous
// pair (one warning), and the next handshake after the key lands reloads.
func TestCertReloaderKeepsTheOldCertificateOnAHalfWrittenRotation(t *testing.T) {
	t.Parallel()
	dir, fresh := t.TempDir(), t.TempDir()
	require.NoError(t, writeDevCerts(dir, nil))
	require.NoError(t, writeDevCerts(fresh, nil))
	logs := &syncBuffer{}
	files := TLSFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	r, err := newCertReloader(files, newLogger(logs, "json", 0))
	require.NoError(t, err)
	old := r.config().Certificates[0].Certificate[0]
	replace := func(name string) {
		b, err := os.ReadFile(filepath.Join(fresh, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".tmp"), b, 0o600))
		require.NoError(t, os.Rename(filepath.Join(dir, name+".tmp"), filepath.Join(dir, name)))
	}
	replace("tls.crt") // the key is still the old one
	require.Equal(t, old, r.config().Certificates[0].Certificate[0])
	require.Equal(t, old, r.config().Certificates[0].Certificate[0])
	require.Equal(t, 1, strings.Count(logs.String(), "cannot be loaded; serving the previous ones"))
	replace("tls.key")
	replace("ca.crt")
	got := r.config()
	require.NotEqual(t, old, got.Certificates[0].Certificate[0])
	require.Contains(t, logs.String(), "TLS certificates reloaded")
	require.Equal(t, uint16(tls.VersionTLS12), got.MinVersion)
	require.Equal(t, tls.RequireAndVerifyClientCert, got.ClientAuth)
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:50060": true, "[::1]:1": true, "localhost:9": true, "127.8.0.1:1": true,
		":50060": false, "0.0.0.0:1": false, "10.1.2.3:4": false, "[::]:1": false, "nonsense": false,
	} {
		require.Equal(t, want, isLoopback(addr), addr)
	}
}

// TestPolicyNeedsTLS: flow dev (cleartext) with a policy file is refused,
// as ALLOW_INSECURE_GRPC is: a policy could identify nobody.
func TestPolicyNeedsTLS(t *testing.T) {
	t.Parallel()
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte("identities:\n  a: admin\n"), 0o644))
	_, err := setupSecurity(context.Background(), Config{AuthzPolicy: policyFile}, newLogger(io.Discard, "json", 0), true)
	require.ErrorContains(t, err, "FLOW_AUTHZ_POLICY is set but the API serves cleartext (flow dev)")
	sec, err := setupSecurity(context.Background(), Config{}, newLogger(io.Discard, "json", 0), true)
	require.NoError(t, err)
	require.Nil(t, sec.reloader)
	require.Nil(t, sec.policy)
}
