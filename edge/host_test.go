package edge

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHostsAllows(t *testing.T) {
	t.Parallel()
	h := NewHosts([]string{"flow.internal:50051", ":50060", "127.0.0.1:0"}, []string{" Flow.Example.COM ", ""})
	for _, tt := range []struct {
		host string
		want bool
	}{
		{"localhost:50051", true},
		{"LOCALHOST", true},
		{"app.localhost:8080", true},
		{"127.0.0.1:50060", true},
		{"[::1]:50051", true},
		{"10.1.2.3:50051", true},
		{"flow.internal:50051", true},
		{"flow.internal.", true},
		{"flow.example.com", true},
		{"", true},
		{"evil.example", false},
		{"evil.example:50060", false},
		{"localhost.evil.example", false},
		{"flow.internal.evil.example", false},
	} {
		require.Equal(t, tt.want, h.Allows(tt.host), tt.host)
	}
	require.True(t, NewHosts(nil, []string{"*"}).Allows("evil.example"))
}

// TestAdminListenerRefusesRebinding: through the admin mux behind the Host
// list, a Host of evil.example gets 421 (River UI's pause included), and a
// state-changing River UI call from another origin gets 403, while its
// pages and same-origin calls work.
func TestAdminListenerRefusesRebinding(t *testing.T) {
	t.Parallel()
	var paused int
	riverUI := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			paused++
		}
		w.WriteHeader(http.StatusOK)
	})
	h := NewHosts([]string{"127.0.0.1:50060"}, nil).Wrap(NewAdminMux(AdminOptions{RiverUI: riverUI}))
	do := func(method, host, path string, header http.Header) int {
		req := httptest.NewRequest(method, "http://127.0.0.1:50060"+path, nil)
		req.Host = host
		for k, v := range header {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	const pause = "/riverui/api/queues/engine/pause"
	for _, tt := range []struct {
		name, method, host, path string
		header                   http.Header
		want                     int
	}{
		{name: "Healthz", method: "GET", host: "127.0.0.1:50060", path: "/healthz", want: http.StatusOK},
		{name: "RebindHealthz", method: "GET", host: "evil.example:50060", path: "/healthz", want: http.StatusMisdirectedRequest},
		{name: "RebindUI", method: "GET", host: "evil.example", path: "/riverui/", want: http.StatusMisdirectedRequest},
		{name: "RebindPause", method: "PUT", host: "evil.example:50060", path: pause, want: http.StatusMisdirectedRequest},
		{name: "CrossOriginPause", method: "PUT", host: "127.0.0.1:50060", path: pause, header: http.Header{"Origin": {"http://evil.example"}}, want: http.StatusForbidden},
		{name: "CrossSitePause", method: "PUT", host: "127.0.0.1:50060", path: pause, header: http.Header{"Sec-Fetch-Site": {"cross-site"}}, want: http.StatusForbidden},
		{name: "SameSitePause", method: "PUT", host: "localhost:50060", path: pause, header: http.Header{"Sec-Fetch-Site": {"same-site"}}, want: http.StatusForbidden},
		{name: "CrossOriginRead", method: "GET", host: "127.0.0.1:50060", path: "/riverui/api/queues", header: http.Header{"Origin": {"http://evil.example"}}, want: http.StatusOK},
		{name: "SameOriginPause", method: "PUT", host: "127.0.0.1:50060", path: pause, header: http.Header{"Origin": {"http://127.0.0.1:50060"}, "Sec-Fetch-Site": {"same-origin"}}, want: http.StatusOK},
		{name: "ScriptPause", method: "PUT", host: "localhost:50060", path: pause, want: http.StatusOK},
	} {
		require.Equal(t, tt.want, do(tt.method, tt.host, tt.path, tt.header), tt.name)
	}
	require.Equal(t, 2, paused, "only the same-origin and script pauses reach River UI")
}
