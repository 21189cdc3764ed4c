package edge

import (
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/logtest"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer = logtest.Buffer

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
		require.True(t, ok, "%s has no role in methodRoles (edge/authz.go)", procedure)
		require.Contains(t, []Role{roleViewer, roleOperator, roleAdmin}, role, procedure)
		listed[procedure] = true
	}
	// Flow's admin service is listed too.
	admin := adminv1.File_flow_admin_v1_admin_proto.Services().ByName("AdminService").Methods()
	for i := 0; i < admin.Len(); i++ {
		procedure := "/flow.admin.v1.AdminService/" + string(admin.Get(i).Name())
		role, ok := methodRoles[procedure]
		require.True(t, ok, "%s has no role in methodRoles (edge/authz.go)", procedure)
		require.Contains(t, []Role{roleViewer, roleOperator, roleAdmin, roleBMS}, role, procedure)
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
	require.Equal(t, roleAdmin, (*Policy)(nil).roleOf("anyone"), "no policy: admin")

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
	_, err = LoadPolicy(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorContains(t, err, "FLOW_AUTHZ_POLICY")
}

func TestResolveCertSource(t *testing.T) {
	t.Parallel()
	certs := t.TempDir()
	require.NoError(t, WriteDevCerts(certs, nil))
	empty := t.TempDir()
	explicit := CertFiles{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, "tls.crt"), Key: filepath.Join(certs, "tls.key")}

	// Explicit files win over CERTDIR and the SPIFFE mount.
	src, err := resolveCertSource(explicit, empty, certs)
	require.NoError(t, err)
	require.Equal(t, "FLOW_TLS_*", src.name)
	// CERTDIR next, even when the SPIFFE mount has files.
	src, err = resolveCertSource(CertFiles{}, certs, empty)
	require.NoError(t, err)
	require.Equal(t, "CERTDIR "+certs, src.name)
	require.Equal(t, explicit, src.files)
	// Then the SPIFFE mount.
	src, err = resolveCertSource(CertFiles{}, "", certs)
	require.NoError(t, err)
	require.Equal(t, "SPIFFE mount "+certs, src.name)
	// Nothing anywhere.
	_, err = resolveCertSource(CertFiles{}, "", empty)
	require.ErrorIs(t, err, ErrNoCertificates)
	// A source that was asked for but is missing files is an error of its
	// own, never a silent fall-through to cleartext.
	_, err = resolveCertSource(CertFiles{}, empty, certs)
	require.ErrorContains(t, err, filepath.Join(empty, "ca.crt"))
	require.NotErrorIs(t, err, ErrNoCertificates)
	_, err = resolveCertSource(CertFiles{CA: explicit.CA}, "", certs)
	require.ErrorContains(t, err, "must be set together")
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
	require.NoError(t, WriteDevCerts(dir, nil))
	require.NoError(t, WriteDevCerts(fresh, nil))
	logs := &syncBuffer{}
	files := CertFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	r, err := NewCertReloader(files, slog.New(slog.NewJSONHandler(logs, nil)))
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
		require.Equal(t, want, IsLoopback(addr), addr)
	}
}

// TestPolicyNeedsTLS: flow dev (cleartext) with a policy file is refused,
// as ALLOW_INSECURE_GRPC is: a policy could identify nobody.
func TestPolicyNeedsTLS(t *testing.T) {
	t.Parallel()
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte("identities:\n  a: admin\n"), 0o644))
	_, err := SetupSecurity(context.Background(), slog.New(slog.DiscardHandler), SecurityConfig{PolicyPath: policyFile, Cleartext: true})
	require.ErrorContains(t, err, "FLOW_AUTHZ_POLICY is set but the API serves cleartext (flow dev)")
	sec, err := SetupSecurity(context.Background(), slog.New(slog.DiscardHandler), SecurityConfig{Cleartext: true})
	require.NoError(t, err)
	require.Nil(t, sec.Certs)
	require.Nil(t, sec.Policy)
}

// TestBMSRole (issue 45): an identity with role bms may report facility
// leaks and list reports, nothing else; an admin may report too; an
// operator (or viewer) may not, and the refusal names the role needed.
func TestBMSRole(t *testing.T) {
	t.Parallel()
	p, err := parsePolicy([]byte(`
identities:
  spiffe://example.org/ns/facility/sa/bms: bms
  spiffe://example.org/ns/ops/sa/op: operator
  spiffe://example.org/ns/ops/sa/lead: admin
`))
	require.NoError(t, err)
	a := authorizer{policy: p}
	report := adminv1connect.AdminServiceReportFacilityLeakProcedure
	as := func(id string) context.Context { return caller.WithIdentity(context.Background(), id) }
	const bms, op, lead = "spiffe://example.org/ns/facility/sa/bms", "spiffe://example.org/ns/ops/sa/op", "spiffe://example.org/ns/ops/sa/lead"
	require.Equal(t, roleBMS, p.roleOf(bms))
	require.NoError(t, a.check(as(bms), report))
	require.NoError(t, a.check(as(bms), adminv1connect.AdminServiceListFacilityLeakReportsProcedure))
	require.NoError(t, a.check(as(lead), report))
	for _, proc := range []string{
		adminv1connect.AdminServiceAcknowledgeIsolationProcedure, adminv1connect.AdminServiceListIsolationsProcedure,
		flowv1connect.FlowGetListOfRacksProcedure, flowv1connect.FlowPowerOnRackProcedure,
	} {
		err := a.check(as(bms), proc)
		require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), proc)
		require.ErrorContains(t, err, "has role bms")
	}
	err = a.check(as(op), report)
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
	require.ErrorContains(t, err, "needs role bms")
	require.NoError(t, a.check(as(op), adminv1connect.AdminServiceAcknowledgeIsolationProcedure))
	require.Equal(t, "bms", p.RoleName(bms))
}
