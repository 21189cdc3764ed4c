package console

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// inProcess is an http.RoundTripper that serves each request with the
// API's handler in this process: the console's calls go through the
// API's whole chain (limits, identity, log line, audit, roles) without a
// socket.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &recorder{header: http.Header{}}
	req.RemoteAddr = "in-process"
	req.RequestURI = req.URL.RequestURI()
	if req.Body == nil {
		req.Body = http.NoBody
	}
	t.h.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return &http.Response{
		Status:        http.StatusText(rec.status),
		StatusCode:    rec.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rec.header,
		Trailer:       rec.trailer(),
		Body:          io.NopCloser(&rec.body),
		ContentLength: int64(rec.body.Len()),
		Request:       req,
	}, nil
}

// recorder collects a handler's answer.
type recorder struct {
	header      http.Header
	status      int
	body        bytes.Buffer
	wroteHeader bool
	snapshot    http.Header // the header when it was written
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.wroteHeader {
		return
	}
	r.wroteHeader, r.status = true, code
	r.snapshot = r.header.Clone()
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	return r.body.Write(b)
}

func (r *recorder) Flush() {}

// trailer returns the trailers the handler declared (Trailer header) or
// set after writing (http.TrailerPrefix), as net/http would send them.
func (r *recorder) trailer() http.Header {
	t := http.Header{}
	for k, vs := range r.header {
		if after, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			t[http.CanonicalHeaderKey(after)] = vs
		}
	}
	if r.snapshot != nil {
		for _, k := range r.snapshot.Values("Trailer") {
			if vs, ok := r.header[http.CanonicalHeaderKey(k)]; ok {
				t[http.CanonicalHeaderKey(k)] = vs
			}
		}
		// What was sent is the header as written.
		for k := range r.header {
			if _, ok := r.snapshot[k]; !ok {
				delete(r.header, k)
			}
		}
	}
	return t
}
