package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/operations/eventrule"
	"github.com/nicoflow/flow/psm"
)

// TLSFiles names the PEM files of a backend connection. Any file set turns
// TLS on; Cert and Key together add a client certificate (mTLS); without CA
// the system roots verify the server.
type TLSFiles struct {
	CA, Cert, Key string
}

// Enabled reports whether any file is set.
func (f TLSFiles) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

func (f TLSFiles) check(prefix string) error {
	if (f.Cert == "") != (f.Key == "") {
		return fmt.Errorf("%s_CERT and %s_KEY must be set together", prefix, prefix)
	}
	return nil
}

// Config returns the tls.Config the files describe, or nil when TLS is off.
func (f TLSFiles) Config() (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("read CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", f.CA)
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// upstreamCoreTLS is upstream's TLS to NICo Core: without FLOW_NICO_TLS_*,
// a NICO_CORE_API_URL without a scheme (upstream's host:port) is called
// over mutual TLS with the API's own certificates (FLOW_TLS_*, else
// CERTDIR, else the SPIFFE mount) when all three files are present. An
// http:// or https:// URL keeps Flow's own meaning.
func upstreamCoreTLS(cfg Config) TLSFiles {
	if cfg.NICoTLS.Enabled() || cfg.NICoURL == "" || strings.Contains(cfg.NICoURL, "://") {
		return TLSFiles{}
	}
	if cfg.TLS.Enabled() {
		return cfg.TLS
	}
	dir := cmp.Or(cfg.CertDir, spiffeDir)
	f := TLSFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	for _, p := range []string{f.CA, f.Cert, f.Key} {
		if _, err := os.Stat(p); err != nil {
			return TLSFiles{}
		}
	}
	return f
}

// reloadingClientTLS is f's client configuration whose certificate is read
// again when its files change (SPIFFE certificates rotate); a rotation
// caught half-written keeps the previous pair.
func reloadingClientTLS(f TLSFiles) (*tls.Config, error) {
	cfg, err := f.Config()
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	cur := cfg.Certificates[0]
	stamp := func() string {
		var b strings.Builder
		for _, p := range []string{f.Cert, f.Key} {
			if st, err := os.Stat(p); err == nil {
				fmt.Fprintf(&b, "%d/%d;", st.ModTime().UnixNano(), st.Size())
			}
		}
		return b.String()
	}
	last := stamp()
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		if now := stamp(); now != last {
			if pair, err := tls.LoadX509KeyPair(f.Cert, f.Key); err == nil {
				cur, last = pair, now
			}
		}
		return &cur, nil
	}
	return cfg, nil
}

// backends are Flow's southbound clients and the component managers over
// them. An unset URL leaves that client unconfigured: Flow starts, and
// operations needing it fail with ErrNotConfigured (FailedPrecondition).
type backends struct {
	nico     *nico.Client
	psm      *psm.Client
	managers *backend.Managers
}

// newBackends builds the clients and managers cfg describes.
func newBackends(cfg Config, interceptors func(backend string) []connect.Interceptor) (*backends, error) {
	nicoTLS, err := cfg.NICoTLS.Config()
	if err != nil {
		return nil, fmt.Errorf("NICo Core TLS: %w", err)
	}
	if files := upstreamCoreTLS(cfg); nicoTLS == nil && files.Enabled() {
		if nicoTLS, err = reloadingClientTLS(files); err != nil {
			return nil, fmt.Errorf("NICo Core TLS (the API's certificates, as upstream): %w", err)
		}
	}
	psmTLS, err := cfg.PSMTLS.Config()
	if err != nil {
		return nil, fmt.Errorf("PSM TLS: %w", err)
	}
	if interceptors == nil {
		interceptors = func(string) []connect.Interceptor { return nil }
	}
	nopts := []nico.Option{nico.WithTimeout(cfg.Components.NICoTimeout), nico.WithInterceptors(interceptors("nico")...)}
	if nicoTLS != nil {
		nopts = append(nopts, nico.WithTLS(nicoTLS))
	}
	nc, err := nico.NewClient(cfg.NICoURL, nopts...)
	if err != nil {
		return nil, fmt.Errorf("NICO_CORE_API_URL: %w", err)
	}
	popts := []psm.Option{psm.WithTimeout(cfg.Components.PSMTimeout), psm.WithInterceptors(interceptors("psm")...)}
	if psmTLS != nil {
		popts = append(popts, psm.WithTLS(psmTLS))
	}
	pc, err := psm.NewClient(cfg.PSMURL, popts...)
	if err != nil {
		return nil, fmt.Errorf("PSM_API_URL: %w", err)
	}
	return &backends{nico: nc, psm: pc, managers: backend.New(cfg.Components, nc, pc)}, nil
}

// logStatus says which backends are configured; Flow runs without either,
// and only what needs a missing one fails (naming the variable to set).
func (b *backends) logStatus(ctx context.Context, logger *slog.Logger) {
	for _, x := range []struct {
		name, setting string
		ok            bool
	}{
		{"NICo Core", "NICO_CORE_API_URL", b.nico.Configured()},
		{"PSM", "PSM_API_URL", b.psm.Configured()},
	} {
		if !x.ok {
			logger.WarnContext(ctx, "backend is not configured; operations that need it will fail", "backend", x.name, "setting", x.setting)
		}
	}
}

// unknownLeakPowerOff forces a leaking device Flow does not hold off
// through Core, by its Core ID (docs/event-rules.md): nil when Core is not
// configured.
func unknownLeakPowerOff(c *nico.Client) eventrule.UnknownPowerOff {
	if c == nil || !c.Configured() {
		return nil
	}
	return func(ctx context.Context, kind, id string) error {
		k := nico.KindCompute
		if kind == "nvswitch" {
			k = nico.KindSwitch
		}
		_, err := c.PowerControl(ctx, nico.Target{Kind: k, IDs: []string{id}}, nico.PowerForceOff, true)
		return err
	}
}
