package edge

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

func TestCheckSPIFFEID(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		id, err string
	}{
		{id: "spiffe://nico.local/nico-system/sa/nico-flow"},
		{id: "spiffe://example.org"},
		{id: "spiffe://a_b.c-d/X.y_z-1"},
		{id: "# a comment", err: "is not a SPIFFE ID"},
		{id: "https://example.org/x", err: "is not a SPIFFE ID"},
		{id: "spiffe:///ns/x", err: "trust domain is empty"},
		{id: "spiffe://Example.org/x", err: "trust domain may hold only"},
		{id: "spiffe://example.org/ns//x", err: "empty segment"},
		{id: "spiffe://example.org/ns/", err: "empty segment"},
		{id: "spiffe://example.org/ns/../x", err: `may not hold ".."`},
		{id: "spiffe://example.org/ns x", err: "path segment may hold only"},
	} {
		t.Run(tt.id, func(t *testing.T) {
			t.Parallel()
			err := CheckSPIFFEID(tt.id)
			if tt.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.err)
		})
	}
}

func TestLoadAllowedIdentities(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	require.NoError(t, os.WriteFile(good, []byte("  spiffe://nico.local/ns/a  \n\n\tspiffe://nico.local/ns/b\n"), 0o644))
	ids, err := LoadAllowedIdentities(good)
	require.NoError(t, err)
	require.Equal(t, []string{"spiffe://nico.local/ns/a", "spiffe://nico.local/ns/b"}, ids)

	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("spiffe://nico.local/ns/a\n\n# not a comment\n"), 0o644))
	_, err = LoadAllowedIdentities(bad)
	require.ErrorContains(t, err, "FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE "+bad+" line 3: ")

	_, err = LoadAllowedIdentities(filepath.Join(dir, "missing"))
	require.ErrorContains(t, err, "FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE: ")
	require.ErrorContains(t, err, filepath.Join(dir, "missing"))

	for in, want := range map[string]string{"": AuthzModeAudit, "audit": AuthzModeAudit, "ENFORCE": AuthzModeEnforce, "enforcing": AuthzModeEnforce} {
		got, err := ParseAuthzMode(in)
		require.NoError(t, err)
		require.Equal(t, want, got, in)
	}
	_, err = ParseAuthzMode("strict")
	require.ErrorContains(t, err, `FLOW_AUTHORIZATION_MODE: "strict" is not a mode (want audit or enforce)`)
}

// TestAllowlistPolicy: a listed identity is admin; an unlisted one is
// refused in enforce mode and let through, logged, in audit mode.
func TestAllowlistPolicy(t *testing.T) {
	t.Parallel()
	listed, other := "spiffe://nico.local/ns/a", "spiffe://nico.local/ns/b"
	for _, mode := range []string{AuthzModeEnforce, AuthzModeAudit} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			logs := &syncBuffer{}
			a := authorizer{policy: AllowlistPolicy([]string{listed}, mode), logger: slog.New(slog.NewTextHandler(logs, nil))}
			ctx := func(id string) context.Context { return caller.WithIdentity(context.Background(), id) }
			require.NoError(t, a.check(ctx(listed), flowv1connect.FlowDecommissionRackProcedure), "listed: admin")
			require.NoError(t, a.check(ctx(other), "/grpc.health.v1.Health/Check"), "health needs no role")
			err := a.check(ctx(other), flowv1connect.FlowGetListOfRacksProcedure)
			if mode == AuthzModeEnforce {
				require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
				require.Empty(t, logs.String())
				return
			}
			require.NoError(t, err)
			require.Contains(t, logs.String(), "authorization audit")
			require.Contains(t, logs.String(), other)
		})
	}
}

func TestSetupSecurityUpstreamAuthorization(t *testing.T) {
	t.Parallel()
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte("identities:\n  a: admin\n"), 0o644))
	ids := []string{"spiffe://nico.local/ns/a"}
	empty := t.TempDir() // no SPIFFE mount there
	for _, tt := range []struct {
		name string
		cfg  SecurityConfig
		err  string
	}{
		{"PolicyAndAllowlist", SecurityConfig{PolicyPath: policyFile, AllowedIdentities: ids, AllowlistSource: "--allowed-service-identity"}, "FLOW_AUTHZ_POLICY and upstream's allowlist (--allowed-service-identity) are both set"},
		{"EnforceWithoutAllowlist", SecurityConfig{AuthzMode: "enforce", AllowInsecure: true, SPIFFEDir: empty}, "FLOW_AUTHORIZATION_MODE=enforce needs an allowlist"},
		{"AllowlistInCleartext", SecurityConfig{AllowedIdentities: ids, AllowlistSource: "F", AllowInsecure: true, SPIFFEDir: empty}, "an allowlist (F) is set but the API serves cleartext (ALLOW_INSECURE_GRPC=true)"},
		{"EnforcePolicyInDev", SecurityConfig{AuthzMode: "enforce", PolicyPath: policyFile, Cleartext: true}, "FLOW_AUTHZ_POLICY is set but the API serves cleartext (flow dev)"},
		{"ProductionRefusesCleartext", SecurityConfig{AllowInsecure: true, SPIFFEDir: empty, RequireTLS: "FLOW_ENV=production"}, "FLOW_ENV=production requires TLS certificates, so ALLOW_INSECURE_GRPC=true is refused"},
		{"BadMode", SecurityConfig{AuthzMode: "x", Cleartext: true}, "FLOW_AUTHORIZATION_MODE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := SetupSecurity(context.Background(), slog.New(slog.DiscardHandler), tt.cfg)
			require.ErrorContains(t, err, tt.err)
		})
	}
	// Audit mode without an allowlist, in cleartext: upstream's default.
	sec, err := SetupSecurity(context.Background(), slog.New(slog.DiscardHandler), SecurityConfig{AuthzMode: "audit", AllowInsecure: true, SPIFFEDir: empty})
	require.NoError(t, err)
	require.Nil(t, sec.Policy)
}
