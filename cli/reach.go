package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"connectrpc.com/connect"
)

// Reaching the server: when a call does not get a Flow answer, the CLI
// says why in words, with the address it tried and what to do, instead of
// the transport's error. apiTransport sees every exchange, so it can tell
// a refused connection, an address that is not a Flow API (the admin
// listener, a simulator, PostgreSQL), a server that wants TLS or a client
// certificate, and a server that speaks cleartext to a TLS client.

// reachError is a call that got no Flow answer; its message names the
// cause, the address and the fix. The command prints it as it is (see
// explain).
type reachError struct {
	msg string
	err error // the transport's error, if any
}

func (e *reachError) Error() string { return e.msg }

// Unwrap returns the transport's error, but not an end of stream (a
// server that hung up, as PostgreSQL does on an HTTP request): connect
// takes a transport error that is io.EOF for its own end-of-stream
// sentinel and replaces it, this message and all, by "unavailable:
// unexpected EOF".
func (e *reachError) Unwrap() error {
	if errors.Is(e.err, io.EOF) {
		return nil
	}
	return e.err
}

// explain returns the reachError inside err when err is the failed call
// itself (a call that got no Flow answer), so that the message printed is
// its own, not Connect's code and URL around it; any other error
// (including one that wraps a failed call with more to say) is returned
// unchanged.
func explain(err error) error {
	var re *reachError
	switch err.(type) {
	case *connect.Error, *url.Error:
		if errors.As(err, &re) {
			return re
		}
	}
	return err
}

// apiTransport wraps next, turning the exchanges that did not reach a Flow
// API into reachErrors inside Connect errors: Unavailable for a server
// that does not answer (as before, so that watch and --wait retry it),
// FailedPrecondition for an address that answers but is not a Flow API or
// wants other TLS settings.
type apiTransport struct {
	next http.RoundTripper
	base string // the server's URL
}

// defaultHint says where the address came from, for a refused connection.
const defaultHint = "the address comes from --server, else FLOW_SERVER, else " + DefaultServer

func (t *apiTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		if re := t.transportCause(err); re != nil {
			code := connect.CodeFailedPrecondition
			if errors.Is(err, syscall.ECONNREFUSED) {
				code = connect.CodeUnavailable
			}
			return nil, connect.NewError(code, re)
		}
		return nil, err
	}
	if re := t.answerCause(req, res); re != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, re)
	}
	return res, nil
}

// transportCause names the cause of a failed exchange, nil when it is none
// the CLI knows.
func (t *apiTransport) transportCause(err error) *reachError {
	msg := err.Error()
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return &reachError{fmt.Sprintf("cannot reach Flow at %s: connection refused (nothing listens there). Is `flow dev` (or `flow serve`) running? %s", t.base, defaultHint), err}
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"), errors.As(err, &header) && string(header.RecordHeader[:]) == "HTTP/":
		return &reachError{fmt.Sprintf("%s answers in cleartext, but the CLI speaks TLS (certificates from --ca/--cert/--key, FLOW_TLS_* or CERTDIR): use http://%s, or drop the certificates", t.base, hostPort(t.base)), err}
	case errors.As(err, &header):
		return &reachError{fmt.Sprintf("%s is not a Flow API over TLS: it did not answer the TLS handshake (%v)", t.base, err), err}
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid):
		return &reachError{fmt.Sprintf("%s: the server's TLS certificate is not trusted (%v): give --ca FILE, the CA bundle that signed it (FLOW_TLS_CA, CERTDIR/ca.crt)", t.base, err), err}
	case strings.Contains(msg, "remote error: tls:"), strings.HasPrefix(t.base, "https://") && hungUp(err):
		// Under TLS 1.3 the server checks the client's certificate after
		// the client's side of the handshake is done, so its refusal may
		// reach the client as an alert, or only as the connection it
		// closed under the request being written.
		return &reachError{fmt.Sprintf("%s refused the TLS handshake (%v): it wants a client certificate it trusts: give --cert and --key (FLOW_TLS_CERT/FLOW_TLS_KEY, CERTDIR/tls.crt and tls.key), signed by a CA the server accepts", t.base, err), err}
	case strings.Contains(msg, "malformed HTTP") && (strings.Contains(msg, `\x15\x03`) || strings.Contains(msg, `\x16\x03`)):
		return &reachError{fmt.Sprintf("%s wants TLS (it answered with a TLS record): give --ca FILE (the CA of its certificate) and, for mutual TLS, --cert and --key (FLOW_TLS_*, CERTDIR)", t.base), err}
	case strings.Contains(msg, "malformed HTTP"), hungUp(err), strings.Contains(msg, "readLoopPeekFailLocked"):
		// The last: the server spoke before the request was written (a
		// PostgreSQL error packet, at load), which Go's transport reports
		// as an unsolicited response on an idle connection.
		return &reachError{fmt.Sprintf("%s is not a Flow API: it did not answer HTTP (%v). A PostgreSQL port, or another service? Flow's API listens on FLOW_LISTEN_ADDR (default %s)", t.base, err, DefaultServer), err}
	}
	return nil
}

// hungUp reports whether err says the server closed the connection
// instead of answering: an early end of stream, a reset, a broken pipe,
// or the transport's own use of the connection it had to close.
func hungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// answerCause names why an HTTP answer is not Flow's, nil when it may be:
// any answer in a Connect content type, and every status but 404 and 400
// (Flow's own middleware answers others in plain text).
func (t *apiTransport) answerCause(req *http.Request, res *http.Response) *reachError {
	if res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusBadRequest {
		return nil
	}
	ct, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	if ct == "application/json" || ct == "application/proto" || strings.HasPrefix(ct, "application/connect") || strings.HasPrefix(ct, "application/grpc") {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	_ = res.Body.Close()
	if res.StatusCode == http.StatusBadRequest {
		if strings.Contains(string(body), "HTTPS") {
			return &reachError{fmt.Sprintf("%s wants TLS, but the CLI spoke cleartext: give --ca FILE (the CA of the server's certificate) and, for mutual TLS, --cert and --key (FLOW_TLS_CA/FLOW_TLS_CERT/FLOW_TLS_KEY, or CERTDIR)", t.base), nil}
		}
		return &reachError{fmt.Sprintf("%s is not a Flow API: it answered %s to %s %s (%s)", t.base, res.Status, req.Method, req.URL.Path, firstLine(body)), nil}
	}
	what := "the Flow admin listener, a NICo Core or PSM simulator, another web server, or a Flow server too old for this call?"
	if t.isAdminListener(req) {
		what = "it is Flow's admin listener (metrics, health; FLOW_ADMIN_LISTEN_ADDR)"
	}
	return &reachError{fmt.Sprintf("%s is not a Flow API: %s %s answers 404 Not Found (%s). Flow's API listens on FLOW_LISTEN_ADDR (default %s); point --server (FLOW_SERVER) there",
		t.base, req.Method, req.URL.Path, what, DefaultServer), nil}
}

// isAdminListener reports whether the server's / answers like Flow's admin
// listener.
func (t *apiTransport) isAdminListener(req *http.Request) bool {
	r, err := http.NewRequestWithContext(context.WithoutCancel(req.Context()), http.MethodGet, t.base+"/", nil)
	if err != nil {
		return false
	}
	res, err := t.next.RoundTrip(r)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 256))
	return strings.HasPrefix(string(body), "Flow admin listener")
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if s == "" {
		return "no body"
	}
	return s
}

// hostPort is base without its scheme.
func hostPort(base string) string {
	if _, rest, ok := strings.Cut(base, "://"); ok {
		return rest
	}
	return base
}
