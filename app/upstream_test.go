package app

import (
	"bytes"
	"context"
	"github.com/jackc/pgx/v5/pgxpool"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/edge"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/sim/nicosim"
)

// TestLoadConfigUpstream covers each variable of upstream's deployment
// surface that LoadConfig reads (docs/operations.md, Deployment settings).
func TestLoadConfigUpstream(t *testing.T) {
	t.Parallel()
	certs := t.TempDir() // ca.crt, tls.crt, tls.key
	require.NoError(t, edge.WriteDevCerts(certs, nil))
	caOnly := t.TempDir()
	copyFile(t, filepath.Join(certs, "ca.crt"), filepath.Join(caOnly, "ca.crt"))
	noKey := t.TempDir()
	copyFile(t, filepath.Join(certs, "ca.crt"), filepath.Join(noKey, "ca.crt"))
	copyFile(t, filepath.Join(certs, "tls.crt"), filepath.Join(noKey, "tls.crt"))
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o644))
	allow := filepath.Join(t.TempDir(), "allowed")
	require.NoError(t, os.WriteFile(allow, []byte("spiffe://nico.local/a\n\n  spiffe://nico.local/b  \n"), 0o644))
	badAllow := filepath.Join(t.TempDir(), "allowed")
	require.NoError(t, os.WriteFile(badAllow, []byte("spiffe://nico.local/a\nnico-flow\n"), 0o644))
	comps := filepath.Join(t.TempDir(), "components.yaml")
	require.NoError(t, os.WriteFile(comps, []byte("component_managers:\n  compute: nico\n  powershelf: nico\n"), 0o644))

	for _, tt := range []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, cfg Config)
		wantErr string
	}{
		{name: "FlowEnvUnset", env: map[string]string{}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, "development", cfg.Env)
			require.False(t, cfg.EnvSet)
			require.Empty(t, cfg.requireTLS())
		}},
		{name: "FlowEnvProduction", env: map[string]string{"FLOW_ENV": "production"}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, "production", cfg.Env)
			require.True(t, cfg.EnvSet)
			require.Equal(t, "FLOW_ENV=production", cfg.requireTLS())
		}},
		{name: "FlowEnvStaging", env: map[string]string{"FLOW_ENV": "staging"}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, "FLOW_ENV=staging", cfg.requireTLS())
		}},
		{name: "FlowEnvBad", env: map[string]string{"FLOW_ENV": "prod"}, wantErr: `FLOW_ENV must be development, staging or production, got "prod"`},
		{name: "TemporalAcceptedNotNeeded", env: map[string]string{
			"TEMPORAL_HOST": "temporal", "TEMPORAL_PORT": "not-checked", "TEMPORAL_NAMESPACE": "flow", "TEMPORAL_ENABLE_TLS": "true",
			"TEMPORAL_CERT_PATH": "/nowhere", "TEMPORAL_SERVER_NAME": "x", "FLOW_DB_MIGRATION_IGNORE_SIGNATURE_CHANGES": "true", "REPORT_NICO_API_VERSION": "1",
		}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, acceptedUnneeded, cfg.Unneeded)
		}},
		{name: "DBCertPathCAFile", env: map[string]string{"DB_HOST": "db", "DB_CERT_PATH": filepath.Join(caOnly, "ca.crt")}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, "postgres://postgres@db:5432/flow?sslmode=verify-full&sslrootcert="+escape(filepath.Join(caOnly, "ca.crt")), cfg.DatabaseURL)
		}},
		{name: "DBCertPathCAWithClientPair", env: map[string]string{"DB_CERT_PATH": filepath.Join(certs, "ca.crt")}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, "postgres://postgres@localhost:5432/flow?sslcert="+escape(filepath.Join(certs, "tls.crt"))+"&sslkey="+escape(filepath.Join(certs, "tls.key"))+
				"&sslmode=verify-full&sslrootcert="+escape(filepath.Join(certs, "ca.crt")), cfg.DatabaseURL)
		}},
		{name: "DBCertPathFolder", env: map[string]string{"DB_CERT_PATH": certs}, check: func(t *testing.T, cfg Config) {
			require.Contains(t, cfg.DatabaseURL, "sslrootcert="+escape(filepath.Join(certs, "ca.crt")))
			require.Contains(t, cfg.DatabaseURL, "sslkey="+escape(filepath.Join(certs, "tls.key")))
		}},
		{name: "DBCertPathFolderWithoutClientPair", env: map[string]string{"DB_CERT_PATH": caOnly},
			wantErr: "DB_CERT_PATH " + caOnly + ": missing " + filepath.Join(caOnly, "tls.crt") + " (the client certificate), " + filepath.Join(caOnly, "tls.key")},
		{name: "DBCertPathKeyMissing", env: map[string]string{"DB_CERT_PATH": filepath.Join(noKey, "ca.crt")},
			wantErr: "missing " + filepath.Join(noKey, "tls.key") + " (the client certificate's key)"},
		{name: "DBCertPathMissing", env: map[string]string{"DB_CERT_PATH": "/nowhere/ca.crt"}, wantErr: "DB_CERT_PATH: stat /nowhere/ca.crt"},
		{name: "DBCertPathNotPEM", env: map[string]string{"DB_CERT_PATH": notPEM}, wantErr: notPEM + " holds no PEM certificate"},
		{name: "DBCertPathWithDatabaseURL", env: map[string]string{"DATABASE_URL": "postgres://a@b/c", "DB_CERT_PATH": certs}, wantErr: "DB_CERT_PATH is set with DATABASE_URL"},
		{name: "DBPortNotANumber", env: map[string]string{"DB_PORT": "pg"}, wantErr: `DB_PORT must be a port number, got "pg"`},
		{name: "DBHostBracketedIPv6", env: map[string]string{"DB_HOST": "[fd00::1]"}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, "postgres://postgres@[fd00::1]:5432/flow?sslmode=prefer", cfg.DatabaseURL)
		}},
		{name: "DBHostIPv6", env: map[string]string{"DB_HOST": "fd00::1"}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, "postgres://postgres@[fd00::1]:5432/flow?sslmode=prefer", cfg.DatabaseURL)
		}},
		{name: "DBHostList", env: map[string]string{"DB_HOST": "pg-a.example, pg-b.example", "DB_PASSWORD": "pw"}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, "postgres://postgres:pw@pg-a.example:5432,pg-b.example:5432/flow?sslmode=prefer&target_session_attrs=read-write", cfg.DatabaseURL)
			require.Equal(t, "postgres://postgres:xxxxx@pg-a.example:5432,pg-b.example:5432/flow?sslmode=prefer&target_session_attrs=read-write", RedactURL(cfg.DatabaseURL))
			pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
			require.NoError(t, err)
			require.Equal(t, "pg-a.example", pc.ConnConfig.Host)
			var hosts []string
			for _, f := range pc.ConnConfig.Fallbacks {
				hosts = append(hosts, f.Host)
			}
			require.Contains(t, hosts, "pg-b.example", "the second host is tried when the first does not take writes")
			require.NotNil(t, pc.ConnConfig.ValidateConnect, "read-write sessions only")
		}},
		{name: "DBHostListIPv6", env: map[string]string{"DB_HOST": "pg-a,[fd00::1]"}, wantErr: "DB_HOST: an IPv6 address ([fd00::1]) cannot be one of several hosts"},
		{name: "AuthorizationModeDefault", env: map[string]string{}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, "audit", cfg.AuthzMode)
			require.Empty(t, cfg.AllowedIdentities)
		}},
		{name: "AuthorizationModeEnforce", env: map[string]string{"FLOW_AUTHORIZATION_MODE": "enforce"}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, "enforce", cfg.AuthzMode)
		}},
		{name: "AuthorizationModeBad", env: map[string]string{"FLOW_AUTHORIZATION_MODE": "on"}, wantErr: "FLOW_AUTHORIZATION_MODE"},
		{name: "AllowlistFile", env: map[string]string{"FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE": allow}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, []string{"spiffe://nico.local/a", "spiffe://nico.local/b"}, cfg.AllowedIdentities)
			require.Contains(t, cfg.allowlistSource, allow)
		}},
		{name: "AllowlistFileBadLine", env: map[string]string{"FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE": badAllow}, wantErr: badAllow + " line 2: "},
		{name: "AllowlistFileUnreadable", env: map[string]string{"FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE": "/nowhere/allowed"}, wantErr: "/nowhere/allowed"},
		{name: "AllowlistFileBlank", env: map[string]string{"FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE": " "}, wantErr: "FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE is set but blank"},
		{name: "ComponentManagerCompute", env: map[string]string{"COMPONENT_MANAGER_COMPUTE": " mock "}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, backend.ImplMock, cfg.Components.Managers[backend.Compute])
			require.Equal(t, backend.ImplNICo, cfg.Components.Managers[backend.NVSwitch])
		}},
		{name: "ComponentManagerOverridesAfterFile", env: map[string]string{"COMPONENT_MANAGER_CONFIG": comps, "COMPONENT_MANAGER_POWERSHELF": "mock", "COMPONENT_MANAGER_NVSWITCH": "mock"}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, map[backend.ComponentType]backend.Implementation{backend.Compute: "nico", backend.NVSwitch: "mock", backend.PowerShelf: "mock"}, cfg.Components.Managers)
		}},
		{name: "ComponentManagerBad", env: map[string]string{"COMPONENT_MANAGER_COMPUTE": "nicolegacy"}, wantErr: `COMPONENT_MANAGER_COMPUTE: implementation "nicolegacy" is not available`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(env(tt.env))
			requireConfig(t, cfg, err, tt.wantErr, tt.check)
		})
	}
}

// TestServeFlagsUpstream covers upstream's flags of flow serve.
func TestServeFlagsUpstream(t *testing.T) {
	t.Parallel()
	comps := filepath.Join(t.TempDir(), "components.yaml")
	require.NoError(t, os.WriteFile(comps, []byte("component_managers:\n  compute: mock\n"), 0o644))
	require.NoError(t, os.WriteFile(comps+".other", []byte("component_managers:\n  compute: nico\n"), 0o644))
	allow := filepath.Join(t.TempDir(), "allowed")
	require.NoError(t, os.WriteFile(allow, []byte("spiffe://nico.local/a\n"), 0o644))
	for _, tt := range []struct {
		name    string
		env     map[string]string
		flags   serveFlags
		set     []string // flags given
		devMode bool
		check   func(t *testing.T, cfg Config)
		wantErr string
	}{
		{name: "ListenPort", flags: serveFlags{listenPort: 7000}, set: []string{"listen-port"}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, ":7000", cfg.ListenAddr)
		}},
		{name: "ListenPortBad", flags: serveFlags{listenPort: 70000}, set: []string{"listen-port"}, wantErr: "--listen-port must be a port number"},
		{name: "NoMetricsPort", check: func(t *testing.T, cfg Config) {
			require.Empty(t, cfg.MetricsAddr)
			require.Equal(t, ":50051", cfg.ListenAddr)
		}},
		{name: "MetricsPort", flags: serveFlags{metricsPort: DefaultMetricsPort}, set: []string{"metrics-port"}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, ":9360", cfg.MetricsAddr)
		}},
		{name: "MetricsPortWithoutMetrics", env: map[string]string{"FLOW_METRICS": "false"}, flags: serveFlags{metricsPort: 9360}, set: []string{"metrics-port"}, wantErr: "FLOW_METRICS=false"},
		{name: "ComponentConfigWinsOverTheVariable", env: map[string]string{"COMPONENT_MANAGER_CONFIG": comps + ".other"}, flags: serveFlags{componentConfig: comps}, set: []string{"component-config"}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, map[backend.ComponentType]backend.Implementation{backend.Compute: "mock"}, cfg.Components.Managers)
		}},
		{name: "ComponentConfigMissing", flags: serveFlags{componentConfig: "/nowhere.yaml"}, set: []string{"component-config"}, wantErr: "--component-config: open /nowhere.yaml"},
		{name: "AllowedServiceIdentity", flags: serveFlags{identities: []string{"spiffe://nico.local/a", "spiffe://nico.local/b"}}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, []string{"spiffe://nico.local/a", "spiffe://nico.local/b"}, cfg.AllowedIdentities)
			require.Equal(t, "--allowed-service-identity", cfg.allowlistSource)
		}},
		{name: "AllowedServiceIdentityBad", flags: serveFlags{identities: []string{"nico-flow"}}, wantErr: `--allowed-service-identity: "nico-flow" is not a SPIFFE ID`},
		{name: "AllowedServiceIdentityWithFile", env: map[string]string{"FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE": allow}, flags: serveFlags{identities: []string{"spiffe://nico.local/a"}},
			wantErr: "--allowed-service-identity cannot be combined with FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE"},
		{name: "TLSFlags", flags: serveFlags{caCert: "ca", tlsCert: "crt", tlsKey: "key"}, check: func(t *testing.T, cfg Config) {
			require.Equal(t, TLSFiles{CA: "ca", Cert: "crt", Key: "key"}, cfg.TLS)
		}},
		{name: "TLSFlagsPartial", flags: serveFlags{caCert: "ca"}, wantErr: "--ca-cert, --tls-cert and --tls-key must be given together"},
		{name: "DevModeInDevelopment", devMode: true, check: func(t *testing.T, cfg Config) { require.True(t, cfg.DevMode) }},
		{name: "DevModeInProduction", env: map[string]string{"FLOW_ENV": "production"}, devMode: true, wantErr: "--dev-mode (FLOW_DEV_MODE) is refused with FLOW_ENV=production"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(env(tt.env))
			require.NoError(t, err)
			cfg.DevMode = tt.devMode
			f := tt.flags
			f.changed = func(name string) bool {
				for _, s := range tt.set {
					if s == name {
						return true
					}
				}
				return false
			}
			err = f.finish(&cfg, env(tt.env))
			requireConfig(t, cfg, err, tt.wantErr, tt.check)
		})
	}
}

// TestServeRefusesDevModeInProduction runs the command line: the flag and
// FLOW_ENV meet in flow serve, before anything is started.
func TestServeRefusesDevModeInProduction(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"flow", "serve", "--dev-mode", "-p", "1", "-c", "/nowhere.yaml", "--metrics-port=9360", "--allowed-service-identity", "spiffe://a/b"},
		env(map[string]string{"FLOW_ENV": "production", "DATABASE_URL": "postgres://unused@127.0.0.1:1/x"}), &stdout, &stderr)
	require.ErrorContains(t, err, "--dev-mode (FLOW_DEV_MODE) is refused with FLOW_ENV=production")
	require.ErrorContains(t, err, "--component-config: open /nowhere.yaml")
	require.Equal(t, 2, ExitCode(err))

	// -c replaces COMPONENT_MANAGER_CONFIG, whose file then does not count.
	comps := filepath.Join(t.TempDir(), "components.yaml")
	require.NoError(t, os.WriteFile(comps, []byte("component_managers:\n  compute: mock\n"), 0o644))
	err = run(context.Background(), []string{"flow", "serve", "--dev-mode", "-c", comps},
		env(map[string]string{"FLOW_ENV": "production", "COMPONENT_MANAGER_CONFIG": "/nowhere.yaml"}), &stdout, &stderr)
	require.ErrorContains(t, err, "configuration: --dev-mode (FLOW_DEV_MODE) is refused with FLOW_ENV=production: it needs FLOW_ENV=development")
	require.NotContains(t, err.Error(), "nowhere")
}

// TestConfigShowsUpstreamNames: flow config prints upstream's settings
// beside Flow's.
func TestConfigShowsUpstreamNames(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"flow", "config"}, env(map[string]string{"FLOW_ENV": "staging", "TEMPORAL_HOST": "t"}), &out, &out))
	s := out.String()
	require.Regexp(t, `\nUPSTREAM\s+VALUE\s+FLOW\n`, s)
	require.Regexp(t, `\nFLOW_ENV\s+staging\s+FLOW_ENV \(staging`, s)
	require.Regexp(t, `\nserve -p, --listen-port PORT\s+-\s+--listen-port, -p: FLOW_LISTEN_ADDR=:PORT\n`, s)
	require.Regexp(t, `\nTEMPORAL_HOST\s+t \s+`, s)
	require.Regexp(t, `\nTEMPORAL_\* \(6 variables\)\s+-\s+accepted, not needed`, s)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o600))
}

func escape(p string) string { return url.QueryEscape(p) }

// TestMockComponentManager: a type configured as upstream's mock is
// answered by Flow's in-process Core simulator; the others still reach
// their backends.
func TestMockComponentManager(t *testing.T) {
	t.Parallel()
	e := startE2E(t, time.Millisecond, func(env map[string]string) { env["COMPONENT_MANAGER_COMPUTE"] = "mock" })
	require.NotNil(t, e.srv.mock)
	rack := e.addRack(t, 8, true) // seeds the backends' simulators, powered off
	var computes []nicosim.Device
	for _, c := range rack.Components {
		if c.Type == inventory.ComponentTypeCompute {
			computes = append(computes, nicosim.Device{Kind: nicosim.KindCompute, Name: c.Name, Serial: c.SerialNumber, BMCMAC: c.BMCs[0].MAC.String(), RackID: rack.ID.String(), PoweredOff: true})
		}
	}
	require.NoError(t, e.srv.mock.sim.Seed(computes))
	res, err := e.client.PowerOnRack(context.Background(), &flowv1.PowerOnRackRequest{TargetSpec: rackSpec(rack.Name)})
	require.NoError(t, err)
	task := e.wait(t, res.GetTaskIds()[0])
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus(), task.GetMessage())
	compute := macOf(rack, inventory.ComponentTypeCompute, 0)
	st, ok := e.srv.mock.sim.State(compute)
	require.True(t, ok)
	require.Equal(t, "on", st.Power, "the mock powered the compute tray on")
	require.Equal(t, "off", e.power(t, compute), "Core was not asked about compute")
	require.Equal(t, "on", e.power(t, macOf(rack, inventory.ComponentTypeNVSwitch, 0)), "switches still go to Core")
}

// TestUpstreamCoreTLS: a bare host:port NICO_CORE_API_URL is called over
// mutual TLS with the API's certificates, as upstream does.
func TestUpstreamCoreTLS(t *testing.T) {
	t.Parallel()
	certs := t.TempDir()
	require.NoError(t, edge.WriteDevCerts(certs, nil))
	inDir := TLSFiles{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, "tls.crt"), Key: filepath.Join(certs, "tls.key")}
	for _, tt := range []struct {
		name string
		env  map[string]string
		want TLSFiles
	}{
		{"HostPortWithCertDir", map[string]string{"NICO_CORE_API_URL": "nico-api:1079", "CERTDIR": certs}, inDir},
		{"HostPortWithTLSFiles", map[string]string{"NICO_CORE_API_URL": "nico-api:1079", "FLOW_TLS_CA": "a", "FLOW_TLS_CERT": "b", "FLOW_TLS_KEY": "c"}, TLSFiles{CA: "a", Cert: "b", Key: "c"}},
		{"HTTPURLKeepsFlowsMeaning", map[string]string{"NICO_CORE_API_URL": "http://nico-api:1079", "CERTDIR": certs}, TLSFiles{}},
		{"NICoTLSWins", map[string]string{"NICO_CORE_API_URL": "nico-api:1079", "CERTDIR": certs, "FLOW_NICO_TLS_CA": "x"}, TLSFiles{}},
		{"NoCertificates", map[string]string{"NICO_CORE_API_URL": "nico-api:1079", "CERTDIR": t.TempDir()}, TLSFiles{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfig(env(tt.env))
			require.NoError(t, err)
			require.Equal(t, tt.want, upstreamCoreTLS(cfg))
		})
	}
	cfg, err := reloadingClientTLS(inDir)
	require.NoError(t, err)
	pair, err := cfg.GetClientCertificate(nil)
	require.NoError(t, err)
	require.NotEmpty(t, pair.Certificate)
}
