package edge

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/nicoflow/flow/caller"
)

// SPIFFECertDir is where Kubernetes (cert-manager's csi-driver-spiffe, or a
// SPIRE helper) mounts a workload's SVID: ca.crt, tls.crt and tls.key.
const SPIFFECertDir = "/var/run/secrets/spiffe.io"

// CertFiles names the PEM files of the API's certificates: the CA bundle
// that verifies clients, and the server's certificate and key.
type CertFiles struct {
	CA, Cert, Key string
}

// ErrTLSFilesIncomplete means some but not all of FLOW_TLS_CA,
// FLOW_TLS_CERT and FLOW_TLS_KEY are set.
var ErrTLSFilesIncomplete = errors.New("FLOW_TLS_CA, FLOW_TLS_CERT and FLOW_TLS_KEY must be set together")

// The file names inside CERTDIR and the SPIFFE mount.
const (
	certDirCA   = "ca.crt"
	certDirCert = "tls.crt"
	certDirKey  = "tls.key"
)

// ErrNoCertificates means no certificate source is configured or present.
var ErrNoCertificates = errors.New("TLS certificates required but not found: set FLOW_TLS_CA, FLOW_TLS_CERT and FLOW_TLS_KEY, " +
	"or CERTDIR (a folder with ca.crt, tls.crt and tls.key), or mount them at " + SPIFFECertDir +
	"; ALLOW_INSECURE_GRPC=true serves cleartext without authentication instead (local development only)")

// certSource is where the API's certificates come from.
type certSource struct {
	name  string // for the log: "FLOW_TLS_*", "CERTDIR /path", "SPIFFE mount …"
	files CertFiles
}

// resolveCertSource finds the API's certificates in upstream Flow's order:
// the explicit FLOW_TLS_* files, then CERTDIR, then the SPIFFE mount at
// spiffeDir. An explicit source whose files are missing is an error (the
// operator asked for it), some but not all FLOW_TLS_* files
// ErrTLSFilesIncomplete; an absent SPIFFE mount is ErrNoCertificates.
func resolveCertSource(explicit CertFiles, certDir, spiffeDir string) (certSource, error) {
	if explicit.CA != "" || explicit.Cert != "" || explicit.Key != "" {
		f := explicit
		if f.CA == "" || f.Cert == "" || f.Key == "" {
			return certSource{}, ErrTLSFilesIncomplete
		}
		return certSource{name: "FLOW_TLS_*", files: f}, requireFiles(f)
	}
	inDir := func(dir string) CertFiles {
		return CertFiles{CA: filepath.Join(dir, certDirCA), Cert: filepath.Join(dir, certDirCert), Key: filepath.Join(dir, certDirKey)}
	}
	if certDir != "" {
		f := inDir(certDir)
		return certSource{name: "CERTDIR " + certDir, files: f}, requireFiles(f)
	}
	f := inDir(spiffeDir)
	present := 0
	for _, p := range []string{f.CA, f.Cert, f.Key} {
		if _, err := os.Stat(p); err == nil {
			present++
		}
	}
	if present == 0 {
		return certSource{}, ErrNoCertificates
	}
	return certSource{name: "SPIFFE mount " + spiffeDir, files: f}, requireFiles(f)
}

func requireFiles(f CertFiles) error {
	for _, p := range []string{f.CA, f.Cert, f.Key} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
	}
	return nil
}

// CertReloader serves the API's TLS configuration from files that rotate
// (cert-manager and SPIRE replace them about hourly): before each handshake
// it checks the files and, when one changed, loads all three again. A load
// that fails (a rotation caught half-written, a key that does not match its
// certificate yet) keeps the previous configuration and is retried at the
// next handshake. Established connections keep the certificate they
// negotiated; nothing is cut.
type CertReloader struct {
	files  CertFiles
	logger *slog.Logger

	mu     sync.Mutex
	stamps [3]os.FileInfo // of CA, Cert, Key when last loaded
	cfg    *tls.Config
	failed bool // the last reload attempt failed (logged once)
}

// NewCertReloader loads files once; an error here stops the server.
func NewCertReloader(files CertFiles, logger *slog.Logger) (*CertReloader, error) {
	r := &CertReloader{files: files, logger: logger}
	stamps, err := r.stat()
	if err != nil {
		return nil, err
	}
	cfg, err := serverTLSConfig(files)
	if err != nil {
		return nil, err
	}
	r.cfg, r.stamps = cfg, stamps
	return r, nil
}

func (r *CertReloader) stat() ([3]os.FileInfo, error) {
	var out [3]os.FileInfo
	for i, p := range []string{r.files.CA, r.files.Cert, r.files.Key} {
		fi, err := os.Stat(p) // follows the symlinks Kubernetes swaps
		if err != nil {
			return out, fmt.Errorf("TLS: %w", err)
		}
		out[i] = fi
	}
	return out, nil
}

func sameStamp(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// config returns the current configuration, reloading it first when a file
// changed since the last load.
func (r *CertReloader) config() *tls.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamps, err := r.stat()
	if err == nil && sameStamp(stamps[0], r.stamps[0]) && sameStamp(stamps[1], r.stamps[1]) && sameStamp(stamps[2], r.stamps[2]) {
		return r.cfg
	}
	var cfg *tls.Config
	if err == nil {
		cfg, err = serverTLSConfig(r.files)
	}
	if err != nil {
		if !r.failed {
			r.logger.Warn("TLS certificate files changed but cannot be loaded; serving the previous ones", "error", err.Error())
			r.failed = true
		}
		return r.cfg
	}
	r.cfg, r.stamps, r.failed = cfg, stamps, false
	r.logger.Info("TLS certificates reloaded", "cert", r.files.Cert, "not_after", cfg.Certificates[0].Leaf.NotAfter)
	return cfg
}

// TLSConfig returns the server's tls.Config: every handshake gets the
// reloader's current certificate and CA bundle.
func (r *CertReloader) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.config(), nil
		},
	}
}

// serverTLSConfig reads files into a mutual-TLS server configuration:
// TLS 1.2 at least (1.3 is Go's preference), the server certificate, and
// client certificates required and verified against the CA bundle.
func serverTLSConfig(files CertFiles) (*tls.Config, error) {
	pool, err := readCAPool(files.CA)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		return nil, fmt.Errorf("TLS: load %s and %s: %w", files.Cert, files.Key, err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		NextProtos:   []string{"h2", "http/1.1"},
	}, nil
}

func readCAPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("TLS: read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS: CA bundle %s holds no PEM certificate", path)
	}
	return pool, nil
}

// certIdentity is who a verified client certificate names: its SPIFFE ID
// (the first spiffe:// URI SAN), else its subject common name, else "".
func certIdentity(cert *x509.Certificate) string {
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" {
			return u.String()
		}
	}
	return cert.Subject.CommonName
}

// Security is how the API port is protected: its certificates (nil:
// cleartext) and the authorization policy (nil: every identity is admin).
type Security struct {
	Certs  *CertReloader
	Policy *Policy
}

// SecurityConfig is what SetupSecurity reads: the settings that protect
// the API port.
type SecurityConfig struct {
	Files         CertFiles // FLOW_TLS_CA, FLOW_TLS_CERT, FLOW_TLS_KEY
	CertDir       string    // CERTDIR
	SPIFFEDir     string    // the SPIFFE mount; "" is SPIFFECertDir
	AllowInsecure bool      // ALLOW_INSECURE_GRPC
	PolicyPath    string    // FLOW_AUTHZ_POLICY
	// AuthzMode is upstream's FLOW_AUTHORIZATION_MODE (ParseAuthzMode):
	// AuthzModeAudit ("" too) or AuthzModeEnforce.
	AuthzMode string
	// AllowedIdentities is upstream's allowlist of SPIFFE IDs, from
	// AllowlistSource (the identities file or --allowed-service-identity);
	// see AllowlistPolicy. It cannot be combined with PolicyPath.
	AllowedIdentities []string
	AllowlistSource   string
	// RequireTLS, when not "", names why cleartext is refused even with
	// AllowInsecure (upstream: FLOW_ENV=staging or production).
	RequireTLS string
	ListenAddr string // the API's address, for the log
	// Cleartext serves without certificates whatever is configured (flow
	// dev).
	Cleartext bool
}

// SetupSecurity resolves the API's certificates and policy and logs what
// protects the port. Without certificates it fails with ErrNoCertificates
// (naming every source), unless cfg.AllowInsecure
// (ALLOW_INSECURE_GRPC=true, refused when cfg.RequireTLS says why) or
// cfg.Cleartext (flow dev) asks for cleartext; a policy cannot apply then
// (nobody is identified), so a policy, an allowlist or enforce mode with
// cleartext is refused. Some but not all FLOW_TLS_* files is
// ErrTLSFilesIncomplete. The policy is FLOW_AUTHZ_POLICY's, or upstream's
// allowlist and mode mapped on roles (AllowlistPolicy); both at once is an
// error, and so is enforce mode with neither.
func SetupSecurity(ctx context.Context, logger *slog.Logger, cfg SecurityConfig) (Security, error) {
	pol, err := LoadPolicy(cfg.PolicyPath)
	if err != nil {
		return Security{}, err
	}
	mode, err := ParseAuthzMode(cfg.AuthzMode)
	if err != nil {
		return Security{}, err
	}
	switch {
	case len(cfg.AllowedIdentities) > 0 && pol != nil:
		return Security{}, fmt.Errorf("FLOW_AUTHZ_POLICY and upstream's allowlist (%s) are both set: use one (a policy can give the listed identities the admin role)", cfg.AllowlistSource)
	case len(cfg.AllowedIdentities) > 0:
		pol = AllowlistPolicy(cfg.AllowedIdentities, mode)
	case mode == AuthzModeEnforce && pol == nil:
		return Security{}, errors.New("FLOW_AUTHORIZATION_MODE=enforce needs an allowlist (FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE or --allowed-service-identity) or FLOW_AUTHZ_POLICY: it would refuse every caller")
	}
	insecure := func(why string) (Security, error) {
		switch {
		case cfg.PolicyPath != "":
			return Security{}, fmt.Errorf("FLOW_AUTHZ_POLICY is set but the API serves cleartext (%s): no caller can be identified; configure certificates or unset the policy", why)
		case len(cfg.AllowedIdentities) > 0:
			return Security{}, fmt.Errorf("an allowlist (%s) is set but the API serves cleartext (%s): no caller can be identified; configure certificates or unset it", cfg.AllowlistSource, why)
		case mode == AuthzModeEnforce:
			return Security{}, fmt.Errorf("FLOW_AUTHORIZATION_MODE=enforce but the API serves cleartext (%s): no caller can be identified", why)
		}
		return Security{}, nil
	}
	if cfg.Cleartext {
		return insecure("flow dev")
	}
	src, err := resolveCertSource(cfg.Files, cfg.CertDir, cmp.Or(cfg.SPIFFEDir, SPIFFECertDir))
	switch {
	case errors.Is(err, ErrNoCertificates) && cfg.AllowInsecure && cfg.RequireTLS != "":
		return Security{}, fmt.Errorf("%s requires TLS certificates, so ALLOW_INSECURE_GRPC=true is refused: %w", cfg.RequireTLS, err)
	case errors.Is(err, ErrNoCertificates) && cfg.AllowInsecure:
		sec, err := insecure("ALLOW_INSECURE_GRPC=true")
		if err == nil {
			logger.WarnContext(ctx, "serving the API in cleartext without authentication (ALLOW_INSECURE_GRPC=true): anyone who reaches the port is admin; for local development only",
				"addr", cfg.ListenAddr, "identity", caller.Insecure)
		}
		return sec, err
	case errors.Is(err, ErrNoCertificates):
		return Security{}, err
	case err != nil:
		return Security{}, err
	}
	reloader, err := NewCertReloader(src.files, logger)
	if err != nil {
		return Security{}, err
	}
	leaf := reloader.cfg.Certificates[0].Leaf
	logger.InfoContext(ctx, "mutual TLS on the API: clients need a certificate from the CA bundle", "source", src.name,
		"cert", src.files.Cert, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter, "ca", src.files.CA)
	if cfg.AllowInsecure {
		logger.InfoContext(ctx, "ALLOW_INSECURE_GRPC=true is ignored: certificates are present")
	}
	switch {
	case len(cfg.AllowedIdentities) > 0:
		logger.InfoContext(ctx, "upstream authorization allowlist loaded: listed identities are admin, others "+map[bool]string{true: "are refused (enforce)", false: "are let through as admin with a warning per call (audit)"}[mode == AuthzModeEnforce],
			"source", cfg.AllowlistSource, "mode", mode, "entries", len(cfg.AllowedIdentities))
	case pol == nil:
		logger.WarnContext(ctx, "no authorization policy (FLOW_AUTHZ_POLICY): every client with a valid certificate is admin")
	default:
		logger.InfoContext(ctx, "authorization policy loaded", "path", cfg.PolicyPath, "entries", len(pol.exact)+len(pol.prefixes))
	}
	return Security{Certs: reloader, Policy: pol}, nil
}
