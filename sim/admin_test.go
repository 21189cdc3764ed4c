package sim

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAdminAnswersLoopbackOnly(t *testing.T) {
	t.Parallel()
	h := loopbackOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for addr, want := range map[string]int{
		"127.0.0.1:4000": http.StatusNoContent,
		"[::1]:4000":     http.StatusNoContent,
		"10.0.0.8:4000":  http.StatusForbidden,
		"[fe80::1]:4000": http.StatusForbidden,
		"garbage":        http.StatusForbidden,
	} {
		req := httptest.NewRequest(http.MethodGet, "/admin/journal", nil)
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, want, rec.Code, addr)
	}
}
