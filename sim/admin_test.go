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

// fakeAdmin is the least an Admin is; leakyAdmin adds leak sensors.
type fakeAdmin struct{ journal *Journal }

func (f fakeAdmin) Journal() *Journal   { return f.journal }
func (fakeAdmin) Faults() *Faults       { return NewFaults(1) }
func (fakeAdmin) Devices() any          { return []string{} }
func (fakeAdmin) SeedJSON([]byte) error { return nil }
func (fakeAdmin) Remove(string) bool    { return false }

type leakyAdmin struct{ fakeAdmin }

func (leakyAdmin) SetLeak(string, bool) error { return nil }
func (leakyAdmin) LeaksJSON() any             { return []string{} }

// TestAdminIndexListsTheRoutesServed: GET /admin/ (the URL flow dev's
// banner prints) answers with the routes this simulator serves, and only
// those.
func TestAdminIndexListsTheRoutesServed(t *testing.T) {
	t.Parallel()
	get := func(a Admin, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = "127.0.0.1:4000"
		rec := httptest.NewRecorder()
		AdminHandler(a).ServeHTTP(rec, req)
		return rec
	}
	plain := fakeAdmin{journal: &Journal{}}
	rec := get(plain, "/admin/")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
	require.Contains(t, rec.Body.String(), "GET    /admin/devices")
	require.Contains(t, rec.Body.String(), "POST   /admin/faults")
	require.Contains(t, rec.Body.String(), "GET    /admin/journal")
	require.NotContains(t, rec.Body.String(), "/admin/leaks")
	require.NotContains(t, rec.Body.String(), "/admin/racks")
	require.Contains(t, get(leakyAdmin{plain}, "/admin/").Body.String(), "PUT    /admin/leaks/{device}")
	// Every listed GET route answers.
	for _, path := range []string{"/admin/journal", "/admin/faults", "/admin/devices"} {
		require.Equal(t, http.StatusOK, get(plain, path).Code, path)
	}
	require.Equal(t, http.StatusOK, get(leakyAdmin{plain}, "/admin/leaks").Code)
	require.Equal(t, http.StatusNotFound, get(plain, "/admin/nothing").Code)
}
