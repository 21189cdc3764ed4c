package cli

import (
	"net/url"
	"regexp"
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
	// PostgreSQL closes the connection on the HTTP request: the client
	// reads EOF, or, when the close beats its read, a reset, or, when it
	// beats the request's write, a write on a closed connection (seen in
	// a loaded make test).
	require.Regexp(t, `http://`+regexp.QuoteMeta(u.Host)+` is not a Flow API: it did not answer HTTP \((EOF|read tcp .*: connection reset by peer|.*write tcp .*: (use of closed network connection|broken pipe|connection reset by peer))\)\. A PostgreSQL port, or another service\?`, err.Error())
	require.NotContains(t, err.Error(), "unavailable")
}
