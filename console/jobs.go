package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/nicoflow/flow/edge"
)

// JobsPrefix is where River UI (the job queue's dashboard) is served,
// behind the console's authentication: its pages at /ui/jobs/, its HTTP
// API at /ui/jobs/api/. The handler in Options.Jobs must be built with
// this prefix.
const JobsPrefix = "/ui/jobs"

// jobsCSP is River UI's Content-Security-Policy: its own script, styles
// and API only, as the console's, but its React components set inline
// styles.
const jobsCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// maxJobsBody bounds the body of a River UI call the wrapper reads for
// the audit line (River UI takes at most 1,000 job IDs a call).
const maxJobsBody = 64 << 10

// jobsRead reports whether a River UI call only reads: GET and HEAD.
// Every other method (River UI's POST /api/jobs/{cancel,delete,retry},
// PUT /api/queues/{name}/{pause,resume}, PATCH /api/queues/{name}) changes
// the job queue.
func jobsRead(method string) bool {
	return method == http.MethodGet || method == http.MethodHead
}

// jobs serves River UI under JobsPrefix. The user is already known and has
// a role (ServeHTTP): every role may read; only admins may change the
// queue (pause or resume a queue, change its settings, retry, cancel or
// delete jobs), only from the console's own origin (Sec-Fetch-Site and
// Origin: another site cannot drive the operator's browser), and each
// such call, allowed or not, writes an audit line as the API's calls do.
func (c *Console) jobs(w http.ResponseWriter, r *http.Request) {
	u := userFrom(r.Context())
	if c.opts.Jobs == nil {
		c.fail(w, r, u, http.StatusNotFound, errors.New("River UI is off on this server (FLOW_RIVERUI_ENABLED=false)"))
		return
	}
	w.Header().Set("Content-Security-Policy", jobsCSP)
	if jobsRead(r.Method) {
		c.opts.Jobs.ServeHTTP(w, r)
		return
	}
	a := edge.Audit{Identity: u.Identity, Method: "RiverUI " + r.Method + " " + r.URL.Path, RequestID: edge.RequestIDOf(r), Peer: r.RemoteAddr}
	w.Header().Set("X-Request-Id", a.RequestID)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxJobsBody+1))
	if err != nil {
		jobsRefuse(w, r, a, c, http.StatusBadRequest, "read the request: "+err.Error())
		return
	}
	if len(body) > maxJobsBody {
		jobsRefuse(w, r, a, c, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxJobsBody))
		return
	}
	a.Targets = jobsTargets(strings.TrimPrefix(r.URL.Path, JobsPrefix), body)
	if err := c.cop.Check(r); err != nil {
		jobsRefuse(w, r, a, c, http.StatusForbidden, "cross-site request refused: River UI's changes must come from its own pages (Sec-Fetch-Site and Origin are checked)")
		return
	}
	if u.Role != "admin" {
		jobsRefuse(w, r, a, c, http.StatusForbidden, fmt.Sprintf("%s %s needs role admin (pausing or resuming queues, retrying, cancelling or deleting jobs); identity %q has role %s", r.Method, r.URL.Path, u.Identity, u.Role))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := &statusWriter{ResponseWriter: w}
	c.opts.Jobs.ServeHTTP(rec, r)
	if rec.status >= 400 {
		a.Outcome = fmt.Sprintf("%d %s", rec.status, http.StatusText(rec.status))
	} else {
		a.Outcome = "ok"
	}
	a.Log(r.Context(), c.logger)
}

// jobsRefuse answers a refused River UI call with River UI's own error
// shape ({"message": ...}, which its pages show) and audits it.
func jobsRefuse(w http.ResponseWriter, r *http.Request, a edge.Audit, c *Console, status int, msg string) {
	a.Outcome, a.Error = fmt.Sprintf("%d %s", status, http.StatusText(status)), msg
	a.Log(r.Context(), c.logger)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

// jobsTargets names what a River UI call acts on, for its audit line: the
// queue in /api/queues/{name}[/pause|/resume], the job IDs a jobs call's
// body lists ({"ids": [...]}).
func jobsTargets(path string, body []byte) []string {
	var out []string
	if rest, ok := strings.CutPrefix(path, "/api/queues/"); ok {
		name, _, _ := strings.Cut(rest, "/")
		out = append(out, "queue="+edge.Truncate(name, 256))
	}
	var ids struct {
		IDs []json.RawMessage `json:"ids"`
	}
	if len(body) > 0 && json.Unmarshal(body, &ids) == nil {
		for _, id := range ids.IDs {
			out = append(out, "job_id="+edge.Truncate(strings.Trim(string(id), `"`), 32))
		}
	}
	return out
}

// statusWriter remembers the status an answer was given.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush lets River UI's answers stream as they would unwrapped.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
