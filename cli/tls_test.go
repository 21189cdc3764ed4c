package cli

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClientTLSFiles(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	// Flags win over the environment, FLOW_TLS_* over CERTDIR.
	got := ClientTLSFiles(env(map[string]string{"FLOW_TLS_CA": "env-ca", "FLOW_TLS_CERT": "env.crt", "FLOW_TLS_KEY": "env.key", "CERTDIR": "/d"}), "flag-ca", "", "")
	require.Equal(t, TLSFiles{CA: "flag-ca", Cert: "env.crt", Key: "env.key"}, got)
	got = ClientTLSFiles(env(map[string]string{"CERTDIR": "/d"}), "", "", "")
	require.Equal(t, TLSFiles{CA: filepath.Join("/d", "ca.crt"), Cert: filepath.Join("/d", "tls.crt"), Key: filepath.Join("/d", "tls.key")}, got)
	// Nothing (and no SPIFFE mount on a test machine): cleartext.
	require.False(t, ClientTLSFiles(env(nil), "", "", "").Enabled())
}

func TestHTTPClientSchemes(t *testing.T) {
	t.Parallel()
	_, base, err := HTTPClient("127.0.0.1:50051", TLSFiles{}, time.Second)
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:50051", base)
	_, _, err = HTTPClient("127.0.0.1:50051", TLSFiles{Cert: "c.crt"}, time.Second)
	require.ErrorContains(t, err, "--cert and --key")
	_, _, err = HTTPClient("127.0.0.1:50051", TLSFiles{CA: filepath.Join(t.TempDir(), "missing.crt")}, time.Second)
	require.ErrorContains(t, err, "read CA bundle")
}
