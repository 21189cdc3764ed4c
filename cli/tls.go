package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// TLSFiles names the PEM files a client uses for mutual TLS: CA verifies
// the server, Cert and Key identify the client.
type TLSFiles struct {
	CA, Cert, Key string
}

// Enabled reports whether any file is set.
func (f TLSFiles) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// spiffeCertDir is where Kubernetes mounts a pod's SVID (ca.crt, tls.crt,
// tls.key), as for the server.
const spiffeCertDir = "/var/run/secrets/spiffe.io"

// ClientTLSFiles returns the client's certificate files from flags (which
// win) and getenv, in the server's order: --ca/--cert/--key, else
// FLOW_TLS_CA / FLOW_TLS_CERT / FLOW_TLS_KEY, else CERTDIR's ca.crt,
// tls.crt and tls.key, else the SPIFFE mount when it holds all three (a
// pod's own SVID). It returns the zero TLSFiles when none is found: the
// client speaks cleartext.
func ClientTLSFiles(getenv func(string) string, ca, cert, key string) TLSFiles {
	f := TLSFiles{CA: or(ca, getenv("FLOW_TLS_CA")), Cert: or(cert, getenv("FLOW_TLS_CERT")), Key: or(key, getenv("FLOW_TLS_KEY"))}
	if f.Enabled() {
		return f
	}
	inDir := func(dir string) TLSFiles {
		return TLSFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	}
	if dir := getenv("CERTDIR"); dir != "" {
		return inDir(dir)
	}
	f = inDir(spiffeCertDir)
	for _, p := range []string{f.CA, f.Cert, f.Key} {
		if _, err := os.Stat(p); err != nil {
			return TLSFiles{}
		}
	}
	return f
}

// TLSConfig returns the tls.Config of a Flow client using files: the CA
// bundle verifies the server (without one, the system roots), the
// certificate and key are presented to it. It returns nil, nil for the
// zero TLSFiles (cleartext), and a usage error when only one of Cert and
// Key is given.
func TLSConfig(files TLSFiles) (*tls.Config, error) {
	if !files.Enabled() {
		return nil, nil
	}
	if (files.Cert == "") != (files.Key == "") {
		return nil, usageError{errors.New("--cert and --key (FLOW_TLS_CERT, FLOW_TLS_KEY) must be given together")}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if files.CA != "" {
		pem, err := os.ReadFile(files.CA)
		if err != nil {
			return nil, fmt.Errorf("TLS: read CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS: CA bundle %s holds no PEM certificate", files.CA)
		}
		cfg.RootCAs = pool
	}
	if files.Cert != "" {
		cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
		if err != nil {
			return nil, fmt.Errorf("TLS: load client certificate: %w", err)
		}
		// Present the certificate whatever CAs the server lists: the server
		// decides, and its refusal names the problem better than a silently
		// empty certificate would.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return cfg, nil
}

// HTTPClient returns the HTTP client and base URL a Flow client uses to
// reach addr ("host:port" or a URL) with files: over TLS, https:// (the
// scheme a bare host:port gets when certificates are given) and HTTP/2;
// without files, http://. An http:// address with certificates is a usage
// error rather than a silent cleartext call. A call through the client
// that gets no Flow answer (connection refused, not a Flow API, TLS wanted
// or refused) fails with an error naming the cause and the fix.
func HTTPClient(addr string, files TLSFiles, timeout time.Duration) (*http.Client, string, error) {
	cfg, err := TLSConfig(files)
	if err != nil {
		return nil, "", err
	}
	base := addr
	switch {
	case !strings.Contains(base, "://") && cfg != nil:
		base = "https://" + base
	case !strings.Contains(base, "://"):
		base = "http://" + base
	case strings.HasPrefix(base, "http://") && cfg != nil:
		return nil, "", usageError{fmt.Errorf("server %s is http:// but TLS certificates are given (--ca/--cert/--key, FLOW_TLS_*, CERTDIR): use https:// or a bare host:port", addr)}
	}
	base = strings.TrimRight(base, "/")
	var next http.RoundTripper = http.DefaultTransport
	if cfg != nil {
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetHTTP2(true)
		next = &http.Transport{TLSClientConfig: cfg, Protocols: &p, ForceAttemptHTTP2: true}
	}
	// apiTransport names the cause of a call that got no Flow answer
	// (reach.go).
	return &http.Client{Timeout: timeout, Transport: &apiTransport{next: next, base: base}}, base, nil
}
