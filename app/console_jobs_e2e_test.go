package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/engine"
)

// TestRiverUIBehindTheConsole: River UI at /ui/jobs/ on the API port,
// under mutual TLS and a policy that knows the admin and the viewer but
// not the operator's certificate. No certificate gets no connection; an
// identity without a role is refused pages and API alike; the viewer
// reads the pages and River UI's API but its pause and its job cancel are
// refused 403 (River UI's error shape, naming the role needed) with
// nothing changed; the admin pauses and resumes the engine's queue and
// cancels a job; each change, allowed or not, writes one audit line
// (identity, method, targets, outcome, request ID); and a cross-origin
// change from the admin's browser is refused.
func TestRiverUIBehindTheConsole(t *testing.T) {
	t.Parallel()
	certs := t.TempDir()
	require.NoError(t, edge.WriteDevCerts(certs, nil))
	policy := filepath.Join(certs, "jobs-policy.yaml")
	require.NoError(t, os.WriteFile(policy, []byte("identities:\n  "+edge.DevSPIFFEID("admin")+": admin\n  "+edge.DevSPIFFEID("viewer")+": viewer\n"), 0o600))
	cfg, err := LoadConfig(env(map[string]string{
		"DATABASE_URL": dbtest.NewDB(t), "FLOW_LISTEN_ADDR": "127.0.0.1:0", "FLOW_ADMIN_LISTEN": "off",
		"FLOW_SHUTDOWN_TIMEOUT": "5s", "CERTDIR": certs, "FLOW_AUTHZ_POLICY": policy,
	}))
	require.NoError(t, err)
	require.True(t, cfg.RiverUIEnabled, "River UI is on by default")
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := newServer(ctx, cfg, newLogger(logs, "json", slogInfo), serveOptions{})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	s := &secureE2E{certs: certs, logs: logs, srv: srv}
	api := "https://" + srv.Addr().String()

	call := func(role, method, path, body, requestID string, header http.Header) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, api+path, strings.NewReader(body))
		require.NoError(t, err)
		for k, v := range header {
			req.Header[k] = v
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if requestID != "" {
			req.Header.Set("X-Request-Id", requestID)
		}
		res, err := s.httpClient(t, role).Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	audits := func(requestID string) []map[string]any {
		var out []map[string]any
		for _, line := range strings.Split(logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "audit" && m["request_id"] == requestID {
				out = append(out, m)
			}
		}
		return out
	}
	paused := func() bool {
		var at *time.Time
		require.NoError(t, srv.pool.QueryRow(ctx, `SELECT paused_at FROM river_queue WHERE name = $1`, engine.QueueName).Scan(&at))
		return at != nil
	}
	jobState := func(id int64) string {
		var st string
		require.NoError(t, srv.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, id).Scan(&st))
		return st
	}
	pause := "/ui/jobs/api/queues/" + engine.QueueName + "/pause"
	require.Eventually(t, func() bool {
		code, _ := call("viewer", "GET", "/ui/jobs/api/queues", "", "", nil)
		return code == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "River UI answers")

	t.Run("NoCertificateNoConnection", func(t *testing.T) {
		_, err := s.httpClient(t, "").Get(api + "/ui/jobs/")
		require.Error(t, err)
	})

	t.Run("IdentityWithoutRoleIsRefused", func(t *testing.T) {
		for _, p := range []string{"/ui/jobs/", "/ui/jobs/api/queues"} {
			code, body := call("operator", "GET", p, "", "", nil)
			require.Equal(t, http.StatusForbidden, code, p)
			require.Contains(t, body, "has no role", p)
		}
		code, _ := call("operator", "PUT", pause, "{}", "jobs-norole", nil)
		require.Equal(t, http.StatusForbidden, code)
		require.False(t, paused())
	})

	t.Run("ViewerReads", func(t *testing.T) {
		code, body := call("viewer", "GET", "/ui/jobs/", "", "", nil)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `<div id="root"`, "River UI's page")
		require.Contains(t, body, "/ui/jobs/assets/", "its assets under the console's prefix")
		code, body = call("viewer", "GET", "/ui/jobs/api/queues", "", "", nil)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `"name":"`+engine.QueueName+`"`)
	})

	// A job the admin will cancel: scheduled an hour out, so that nothing
	// works it meanwhile.
	job, err := srv.river.Insert(ctx, queueExpiryArgs{RackID: [16]byte{1}}, &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	cancelBody := `{"ids":["` + strconv.FormatInt(job.Job.ID, 10) + `"]}`

	t.Run("ViewerChangesAreRefusedAndAudited", func(t *testing.T) {
		code, body := call("viewer", "PUT", pause, "{}", "jobs-viewer-pause", nil)
		require.Equal(t, http.StatusForbidden, code)
		var msg struct{ Message string }
		require.NoError(t, json.Unmarshal([]byte(body), &msg), body)
		require.Contains(t, msg.Message, "needs role admin")
		require.False(t, paused(), "a refused pause paused the queue")
		code, _ = call("viewer", "POST", "/ui/jobs/api/jobs/cancel", cancelBody, "jobs-viewer-cancel", nil)
		require.Equal(t, http.StatusForbidden, code)
		require.Equal(t, "scheduled", jobState(job.Job.ID))

		a := audits("jobs-viewer-pause")
		require.Len(t, a, 1, "one audit line per refused change")
		require.Equal(t, edge.DevSPIFFEID("viewer"), a[0]["identity"])
		require.Equal(t, "RiverUI PUT "+pause, a[0]["method"])
		require.Equal(t, []any{"queue=" + engine.QueueName}, a[0]["targets"])
		require.Equal(t, "403 Forbidden", a[0]["outcome"])
		a = audits("jobs-viewer-cancel")
		require.Len(t, a, 1)
		require.Equal(t, []any{"job_id=" + strconv.FormatInt(job.Job.ID, 10)}, a[0]["targets"])
		// Reads are not audited.
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `"msg":"audit"`) {
				require.NotContains(t, line, "RiverUI GET", "a read was audited")
			}
		}
	})

	t.Run("AdminChangesAreAudited", func(t *testing.T) {
		code, body := call("admin", "PUT", pause, "{}", "jobs-admin-pause", nil)
		require.Equal(t, http.StatusOK, code, body)
		require.True(t, paused())
		a := audits("jobs-admin-pause")
		require.Len(t, a, 1)
		require.Equal(t, edge.DevSPIFFEID("admin"), a[0]["identity"])
		require.Equal(t, "RiverUI PUT "+pause, a[0]["method"])
		require.Equal(t, []any{"queue=" + engine.QueueName}, a[0]["targets"])
		require.Equal(t, "ok", a[0]["outcome"])
		require.NotEmpty(t, a[0]["peer"])

		code, body = call("admin", "PUT", "/ui/jobs/api/queues/"+engine.QueueName+"/resume", "{}", "jobs-admin-resume", nil)
		require.Equal(t, http.StatusOK, code, body)
		require.False(t, paused())
		require.Len(t, audits("jobs-admin-resume"), 1)

		code, body = call("admin", "POST", "/ui/jobs/api/jobs/cancel", cancelBody, "jobs-admin-cancel", nil)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "cancelled", jobState(job.Job.ID))
		a = audits("jobs-admin-cancel")
		require.Len(t, a, 1)
		require.Equal(t, "ok", a[0]["outcome"])
		require.Equal(t, []any{"job_id=" + strconv.FormatInt(job.Job.ID, 10)}, a[0]["targets"])
	})

	t.Run("CrossOriginChangeIsRefused", func(t *testing.T) {
		for _, h := range []http.Header{{"Origin": {"https://evil.example"}}, {"Sec-Fetch-Site": {"cross-site"}}} {
			code, _ := call("admin", "PUT", pause, "{}", "jobs-cross-site", h)
			require.Equal(t, http.StatusForbidden, code)
			require.False(t, paused())
		}
		for _, a := range audits("jobs-cross-site") {
			require.Equal(t, "403 Forbidden", a["outcome"])
			require.Contains(t, a["error"], "cross-site")
		}
	})
}
