package app

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/edge"
)

// Upstream Flow's deployment environments (FLOW_ENV).
const (
	envDevelopment = "development"
	envStaging     = "staging"
	envProduction  = "production"
)

// DefaultMetricsPort is upstream's --metrics-port default (its chart's
// ports.metrics).
const DefaultMetricsPort = 9360

// acceptedUnneeded are upstream variables Flow accepts and does not need:
// Temporal's (Flow has no Temporal), the migration-signature escape hatch
// (golang-migrate keeps no signatures) and the Core version probe.
var acceptedUnneeded = []string{
	"TEMPORAL_HOST", "TEMPORAL_PORT", "TEMPORAL_NAMESPACE", "TEMPORAL_ENABLE_TLS", "TEMPORAL_CERT_PATH", "TEMPORAL_SERVER_NAME",
	"FLOW_DB_MIGRATION_IGNORE_SIGNATURE_CHANGES", "REPORT_NICO_API_VERSION",
}

// componentOverrides are the per-type overrides applied after the
// component-manager file: upstream's COMPONENT_MANAGER_COMPUTE, and the same
// for the two other types.
var componentOverrides = []struct {
	name string
	typ  backend.ComponentType
}{
	{"COMPONENT_MANAGER_COMPUTE", backend.Compute},
	{"COMPONENT_MANAGER_NVSWITCH", backend.NVSwitch},
	{"COMPONENT_MANAGER_POWERSHELF", backend.PowerShelf},
}

// loadUpstream reads the upstream settings that have no Flow equivalent of
// their own into cfg: FLOW_ENV, the accepted-and-unneeded variables, the
// authorization mode and its allowlist file. It returns every problem.
func loadUpstream(getenv func(string) string, cfg *Config) []string {
	var errs []string
	switch env := strings.TrimSpace(getenv("FLOW_ENV")); env {
	case "":
		cfg.Env = envDevelopment
	case envDevelopment, envStaging, envProduction:
		cfg.Env, cfg.EnvSet = env, true
	default:
		errs = append(errs, fmt.Sprintf("FLOW_ENV must be development, staging or production, got %q", env))
	}
	for _, name := range acceptedUnneeded {
		if getenv(name) != "" {
			cfg.Unneeded = append(cfg.Unneeded, name)
		}
	}
	mode, err := edge.ParseAuthzMode(getenv("FLOW_AUTHORIZATION_MODE"))
	if err != nil {
		errs = append(errs, err.Error())
	}
	cfg.AuthzMode = mode
	if v := getenv("FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE"); v != "" {
		path := strings.TrimSpace(v)
		if path == "" {
			return append(errs, "FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE is set but blank")
		}
		ids, err := edge.LoadAllowedIdentities(path)
		if err != nil {
			return append(errs, err.Error())
		}
		cfg.AllowedIdentities, cfg.allowlistSource = ids, "FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE "+path
	}
	return errs
}

// loadComponents reads the component-manager file at path (the embedded
// default when ""; a file is authoritative, as upstream) and applies the
// COMPONENT_MANAGER_<TYPE> overrides.
func loadComponents(path string, getenv func(string) string) (backend.Config, error) {
	comps, err := backend.LoadConfig(path)
	if err != nil {
		return comps, err
	}
	for _, o := range componentOverrides {
		if err := comps.Override(o.typ, getenv(o.name)); err != nil {
			return comps, fmt.Errorf("%s: %w", o.name, err)
		}
	}
	return comps, nil
}

// databaseURL builds the PostgreSQL URL from upstream's DB_* set: DB_HOST
// (a bracketed IPv6 address too, or a comma-separated list of hosts, which
// adds target_session_attrs=read-write), DB_PORT (an integer), DB_USER,
// DB_PASSWORD, DB_NAME, and DB_CERT_PATH for TLS (dbTLS).
func databaseURL(getenv func(string) string) (string, []string) {
	def := func(name string) string { return configDefault(getenv, name) }
	var errs []string
	port := def("DB_PORT")
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		errs = append(errs, fmt.Sprintf("DB_PORT must be a port number, got %q", port))
	}
	// DB_HOST may list several hosts (a primary and its standbys, as
	// Patroni or CloudNativePG run them): every connection goes to the one
	// that takes writes (target_session_attrs=read-write), so a failover
	// needs no change of setting (docs/operations.md).
	var hosts []string
	for _, h := range strings.Split(def("DB_HOST"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	var joined []string
	for _, h := range hosts {
		bare := strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if len(hosts) > 1 && strings.Contains(bare, ":") {
			errs = append(errs, fmt.Sprintf("DB_HOST: an IPv6 address (%s) cannot be one of several hosts; give host names, or DATABASE_URL", h))
		}
		joined = append(joined, net.JoinHostPort(bare, port))
	}
	if len(joined) == 0 {
		errs = append(errs, "DB_HOST is empty")
		joined = []string{net.JoinHostPort("localhost", port)}
	}
	u := url.URL{Scheme: "postgres", Host: strings.Join(joined, ","), Path: "/" + def("DB_NAME"), RawQuery: "sslmode=prefer"}
	if pw := getenv("DB_PASSWORD"); pw != "" {
		u.User = url.UserPassword(def("DB_USER"), pw)
	} else {
		u.User = url.User(def("DB_USER"))
	}
	if path := getenv("DB_CERT_PATH"); path != "" {
		q, err := dbTLS(path)
		if err != nil {
			errs = append(errs, err.Error())
		}
		u.RawQuery = q.Encode()
	}
	if len(joined) > 1 {
		q := u.Query()
		q.Set("target_session_attrs", "read-write")
		u.RawQuery = q.Encode()
	}
	return u.String(), errs
}

// dbTLS returns the URL parameters of TLS to PostgreSQL from DB_CERT_PATH,
// always sslmode=verify-full (the server's certificate must chain to the CA
// and name DB_HOST). path is either upstream's CA file (the chart mounts
// the SPIFFE secret and points at its ca.crt), with the client certificate
// tls.crt and key tls.key used when they sit beside it, or a folder holding
// ca.crt, tls.crt and tls.key. A missing file is an error naming it.
func dbTLS(path string) (url.Values, error) {
	q := url.Values{"sslmode": {"verify-full"}}
	st, err := os.Stat(path)
	if err != nil {
		return q, fmt.Errorf("DB_CERT_PATH: %w", err)
	}
	dir, ca := filepath.Dir(path), path
	if st.IsDir() {
		dir, ca = path, filepath.Join(path, "ca.crt")
	}
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	var missing []string
	present := func(p string) bool {
		_, err := os.Stat(p)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, fmt.Sprintf("%s (%v)", p, err))
			return true
		}
		return err == nil
	}
	hasCA, hasCert, hasKey := present(ca), present(cert), present(key)
	switch {
	case !hasCA:
		missing = append(missing, ca+" (the CA that signed PostgreSQL's certificate)")
	case st.IsDir() || hasCert || hasKey:
		if !hasCert {
			missing = append(missing, cert+" (the client certificate)")
		}
		if !hasKey {
			missing = append(missing, key+" (the client certificate's key)")
		}
	}
	if len(missing) > 0 {
		return q, fmt.Errorf("DB_CERT_PATH %s: missing %s", path, strings.Join(missing, ", "))
	}
	if pem, err := os.ReadFile(ca); err != nil {
		return q, fmt.Errorf("DB_CERT_PATH: %w", err)
	} else if !strings.Contains(string(pem), "-----BEGIN CERTIFICATE-----") {
		return q, fmt.Errorf("DB_CERT_PATH: %s holds no PEM certificate", ca)
	}
	q.Set("sslrootcert", ca)
	if hasCert {
		q.Set("sslcert", cert)
		q.Set("sslkey", key)
	}
	return q, nil
}

// serveFlags are flow serve's flags that need more than a field of Config:
// upstream's spellings, applied by finish once the command line is parsed.
type serveFlags struct {
	listenPort      int      // -p, --listen-port
	metricsPort     int      // --metrics-port
	componentConfig string   // -c, --component-config
	identities      []string // --allowed-service-identity
	caCert          string   // --ca-cert
	tlsCert         string   // --tls-cert
	tlsKey          string   // --tls-key
	changed         func(name string) bool
}

// finish applies the upstream flags to cfg and checks what only the whole
// command line can tell: --dev-mode only with FLOW_ENV=development, the
// allowlist from one source, the three TLS files together.
func (f serveFlags) finish(cfg *Config, getenv func(string) string) error {
	var errs []string
	if f.changed("listen-port") {
		if f.listenPort < 1 || f.listenPort > 65535 {
			errs = append(errs, "--listen-port must be a port number")
		}
		cfg.ListenAddr = ":" + strconv.Itoa(f.listenPort)
	}
	if f.changed("metrics-port") {
		if f.metricsPort < 1 || f.metricsPort > 65535 {
			errs = append(errs, "--metrics-port must be a port number")
		}
		cfg.MetricsAddr = ":" + strconv.Itoa(f.metricsPort)
		if !cfg.Metrics {
			errs = append(errs, "--metrics-port is given but FLOW_METRICS=false: there are no metrics to serve")
		}
	}
	if f.changed("component-config") {
		cfg.ComponentConfig = f.componentConfig
		comps, err := loadComponents(f.componentConfig, getenv)
		if err != nil {
			errs = append(errs, strings.Replace(err.Error(), "COMPONENT_MANAGER_CONFIG", "--component-config", 1))
		}
		cfg.Components = comps
	}
	if len(f.identities) > 0 {
		if cfg.allowlistSource != "" {
			errs = append(errs, "--allowed-service-identity cannot be combined with FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE")
		}
		for _, id := range f.identities {
			if err := edge.CheckSPIFFEID(id); err != nil {
				errs = append(errs, "--allowed-service-identity: "+err.Error())
			}
		}
		cfg.AllowedIdentities, cfg.allowlistSource = f.identities, "--allowed-service-identity"
	}
	if f.caCert != "" || f.tlsCert != "" || f.tlsKey != "" {
		if f.caCert == "" || f.tlsCert == "" || f.tlsKey == "" {
			errs = append(errs, "--ca-cert, --tls-cert and --tls-key must be given together")
		}
		cfg.TLS = TLSFiles{CA: f.caCert, Cert: f.tlsCert, Key: f.tlsKey}
	}
	if cfg.DevMode && cfg.Env != envDevelopment {
		errs = append(errs, fmt.Sprintf("--dev-mode (FLOW_DEV_MODE) is refused with FLOW_ENV=%s: it needs FLOW_ENV=development", cfg.Env))
	}
	if len(errs) > 0 {
		return usageError(fmt.Errorf("configuration: %s", strings.Join(errs, "; ")))
	}
	return nil
}

// requireTLS says why cleartext is refused (FLOW_ENV=staging or
// production), or "".
func (c Config) requireTLS() string {
	if c.Env == envStaging || c.Env == envProduction {
		return "FLOW_ENV=" + c.Env
	}
	return ""
}

// upstreamSetting is one setting of upstream Flow's deployment surface and
// what Flow does with it (`flow config`, docs/operations.md).
type upstreamSetting struct {
	Upstream, Flow string
}

// upstreamSettings lists upstream's flags and variables beside Flow's.
var upstreamSettings = []upstreamSetting{
	{"serve -p, --listen-port PORT", "--listen-port, -p: FLOW_LISTEN_ADDR=:PORT"},
	{"serve --metrics-port PORT", "--metrics-port: /metrics (and /healthz, /readyz) on :PORT; not given: no such listener, /metrics stays on FLOW_ADMIN_LISTEN_ADDR"},
	{"serve -c, --component-config FILE", "--component-config, -c: COMPONENT_MANAGER_CONFIG"},
	{"serve --dev-mode", "--dev-mode (FLOW_DEV_MODE); refused unless FLOW_ENV=development"},
	{"serve --allowed-service-identity ID", "--allowed-service-identity: the allowlist (listed IDs are admin)"},
	{"--ca-cert, --tls-cert, --tls-key", "same flags on serve: FLOW_TLS_CA, FLOW_TLS_CERT, FLOW_TLS_KEY"},
	{"FLOW_ENV", "FLOW_ENV (staging, production: certificates required, no --dev-mode; set: serve migrates at start)"},
	{"DB_HOST, DB_PORT, DB_USER, DB_PASSWORD, DB_NAME", "same names (DATABASE_URL overrides them)"},
	{"DB_CERT_PATH", "DB_CERT_PATH: TLS to PostgreSQL, sslmode=verify-full, client certificate beside the CA"},
	{"NICO_CORE_API_URL", "same name; a bare host:port is called over mutual TLS with the API's certificates, as upstream"},
	{"CERTDIR", "same name"},
	{"ALLOW_INSECURE_GRPC", "same name (refused with FLOW_ENV=staging or production)"},
	{"FLOW_AUTHORIZATION_MODE", "same name: audit (default) or enforce; FLOW_AUTHZ_POLICY is the richer option"},
	{"FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE", "same name: listed SPIFFE IDs are admin"},
	{"FLOW_DATA_ENCRYPTION_KEY_PATH", "same name (FLOW_DATA_DECRYPTION_KEY_PATHS adds retired keys)"},
	{"COMPONENT_MANAGER_CONFIG", "same name (mock: Flow's in-process Core simulator)"},
	{"COMPONENT_MANAGER_COMPUTE", "same name (and COMPONENT_MANAGER_NVSWITCH, COMPONENT_MANAGER_POWERSHELF)"},
	{"FLOW_CONFIG_FILE, /etc/flow/flowconfig.yaml", "same name and path"},
	{"FLOW_EXPECTED_INVENTORY_SYNC_ENABLED", "same name (unparseable: startup refused, not off)"},
	{"FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED", "same name"},
	{"OTEL_*", "same names"},
	{"TEMPORAL_* (6 variables)", "accepted, not needed (no Temporal): one info line at startup"},
	{"FLOW_DB_MIGRATION_IGNORE_SIGNATURE_CHANGES", "accepted, not needed (no migration signatures)"},
	{"REPORT_NICO_API_VERSION", "accepted, not needed"},
}

// printUpstream prints upstreamSettings with the values getenv gives the
// variables among them.
func printUpstream(w io.Writer, getenv func(string) string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tVALUE\tFLOW")
	for _, s := range upstreamSettings {
		val := "-"
		if !strings.ContainsAny(s.Upstream, " ,*") {
			val = or(getenv(s.Upstream), "-")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Upstream, val, s.Flow)
	}
	tw.Flush()
}
