package edge

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/caller"
)

// A call the console makes in process is the call of its user; nothing a
// client sends can make a request look like one.
func TestInProcessCallerIsTheUsersIdentity(t *testing.T) {
	t.Parallel()
	var got string
	h := withCaller(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = caller.Identity(r.Context()) }))

	r := httptest.NewRequest(http.MethodPost, "/v1.Flow/PowerOnRack", nil)
	h.ServeHTTP(httptest.NewRecorder(), r.WithContext(WithInProcessCaller(r.Context(), "olivia")))
	require.Equal(t, "olivia", got)

	r = httptest.NewRequest(http.MethodPost, "/v1.Flow/PowerOnRack", nil)
	r.Header.Set("X-Forwarded-User", "olivia")
	h.ServeHTTP(httptest.NewRecorder(), r)
	require.Equal(t, caller.Insecure, got, "a cleartext client is insecure, whatever it says")
	require.Equal(t, caller.Insecure, RequestIdentity(r))
}

func TestRoleName(t *testing.T) {
	t.Parallel()
	p, err := parsePolicy([]byte("identities:\n  olivia: operator\n  victor: viewer\n  spiffe://x/ns/ops/*: admin\n"))
	require.NoError(t, err)
	for id, want := range map[string]string{"olivia": "operator", "victor": "viewer", "spiffe://x/ns/ops/a": "admin", "mallory": "none", "": "none"} {
		require.Equal(t, want, p.RoleName(id), id)
	}
	var open *Policy
	require.Equal(t, "admin", open.RoleName(caller.Insecure), "no policy: everyone is admin")
	require.Equal(t, "none", open.RoleName(""), "a certificate naming nobody has no role")
	audit := AllowlistPolicy([]string{"spiffe://x/a"}, AuthzModeAudit)
	require.Equal(t, "admin", audit.RoleName("spiffe://x/other"), "audit mode lets every call through")
}
