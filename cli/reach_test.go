package cli

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
)

// TestReachPostgreSQL: --server pointed at a real PostgreSQL (the tests'
// own) says the address is not a Flow API, as docs/cli.md shows, not
// connect's "unavailable: unexpected EOF".
func TestReachPostgreSQL(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(dbtest.NewDB(t))
	require.NoError(t, err)
	require.NotEmpty(t, u.Port(), "the test server listens on TCP: %s", u.Redacted())
	_, _, err = flow(map[string]string{}, "--server", u.Host, "rack", "list")
	require.Error(t, err)
	require.Equal(t, 1, ExitCode(err))
	require.Contains(t, err.Error(), "http://"+u.Host+" is not a Flow API: it did not answer HTTP (EOF). A PostgreSQL port, or another service?")
	require.NotContains(t, err.Error(), "unavailable")
}
