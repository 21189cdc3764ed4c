package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/cli"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/edge"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim/nicosim"
)

// tlsPostgres is a private PostgreSQL cluster that accepts TLS connections
// only, with a client certificate from ca (clientcert=verify-ca) and, for
// every user but postgres, a password.
type tlsPostgres struct {
	cluster *pglocal.Cluster
	certs   string // ca.crt, tls.crt, tls.key: its CA and a client pair
}

// startTLSPostgres starts the cluster, serving certs' tls.crt (valid for
// 127.0.0.1) and trusting certs' ca.crt for client certificates.
func startTLSPostgres(t *testing.T, certs string) *tlsPostgres {
	t.Helper()
	c := dbtest.InitCluster(t)
	dbtest.ServeTLS(t, c, certs)
	require.NoError(t, c.Start(context.Background()))
	return &tlsPostgres{cluster: c, certs: certs}
}

// adminConn connects as the superuser, over TLS with the client pair.
func (p *tlsPostgres) adminConn(t *testing.T, database string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbtest.SuperuserTLSURL(p.cluster, p.certs, database))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestServeAsUpstreamsChartDeploysIt runs `flow serve` with the arguments
// and environment upstream's Helm chart renders (helm/nico-flow, spec
// upstream-delta §4.6): FLOW_ENV=production, the DB_* set with DB_CERT_PATH
// pointing at the SPIFFE mount's ca.crt, NICO_CORE_API_URL, the six
// TEMPORAL_* variables, FLOW_DATA_ENCRYPTION_KEY_PATH, and in extraEnv
// upstream's enforcing allowlist. The database is reachable over TLS with a
// client certificate only. Paths are temporary folders instead of the
// chart's mounts; besides the chart's values the test sets only -p and the
// admin listener's address (free ports, as many test servers share the
// machine). It is not parallel: it points the SPIFFE mount (spiffeDir) at
// its certificates.
func TestServeAsUpstreamsChartDeploysIt(t *testing.T) {
	spiffe := t.TempDir() // /var/run/secrets/spiffe.io: ca.crt, tls.crt, tls.key
	require.NoError(t, edge.WriteDevCerts(spiffe, nil))
	old := spiffeDir
	spiffeDir = spiffe
	t.Cleanup(func() { spiffeDir = old })
	pg := startTLSPostgres(t, spiffe)
	admin := pg.adminConn(t, "postgres")
	ctx := context.Background()
	_, err := admin.Exec(ctx, `CREATE ROLE flow LOGIN PASSWORD 'chart-secret'`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `CREATE DATABASE flow OWNER flow`)
	require.NoError(t, err)
	// Cleartext is refused by pg_hba: what works below is TLS.
	_, err = pgx.Connect(ctx, fmt.Sprintf("postgres://flow:chart-secret@127.0.0.1:%d/flow?sslmode=disable", pg.cluster.Port))
	require.Error(t, err)

	// NICo Core over mutual TLS, as upstream's chart reaches it: a bare
	// host:port is called with the SPIFFE mount's certificates.
	core := nicosim.New(nicosim.Options{})
	var coreClients atomic.Int32
	coreSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) > 0 && r.TLS.PeerCertificates[0].Subject.CommonName == "flow-server" {
			coreClients.Add(1)
		}
		core.Handler().ServeHTTP(w, r)
	}))
	coreTLS, err := cli.TLSConfig(cli.TLSFiles{CA: filepath.Join(spiffe, "ca.crt"), Cert: filepath.Join(spiffe, "tls.crt"), Key: filepath.Join(spiffe, "tls.key")})
	require.NoError(t, err)
	corePair, err := tls.LoadX509KeyPair(filepath.Join(spiffe, "tls.crt"), filepath.Join(spiffe, "tls.key"))
	require.NoError(t, err)
	coreSrv.TLS = &tls.Config{Certificates: []tls.Certificate{corePair}, ClientCAs: coreTLS.RootCAs, ClientAuth: tls.RequireAndVerifyClientCert}
	coreSrv.EnableHTTP2 = true
	coreSrv.StartTLS()
	t.Cleanup(coreSrv.Close)
	secrets := t.TempDir()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keyPath := filepath.Join(secrets, "encryption-key") // /var/run/secrets/flow-data-encryption/encryption-key
	require.NoError(t, os.WriteFile(keyPath, []byte(base64.StdEncoding.EncodeToString(key)), 0o600))
	allowlist := filepath.Join(secrets, "allowed-identities")
	require.NoError(t, os.WriteFile(allowlist, []byte("\n"+edge.DevSPIFFEID("operator")+"\n"), 0o644))
	flowConfig := filepath.Join(secrets, "flowconfig.yaml") // the chart's ConfigMap, mounted at /etc/flow
	require.NoError(t, os.WriteFile(flowConfig, []byte("inventory_run_frequency: 1m\ndisable_inventory: false\nleak_detection_interval: 1m\ndisable_leak_detection: false\ntracing:\n  enabled: false\n"), 0o644))

	chart := map[string]string{
		"FLOW_ENV":                      "production",
		"DB_NAME":                       "flow",
		"DB_USER":                       "flow",
		"DB_PASSWORD":                   "chart-secret",
		"DB_HOST":                       "127.0.0.1",
		"DB_PORT":                       strconv.Itoa(pg.cluster.Port),
		"DB_CERT_PATH":                  filepath.Join(spiffe, "ca.crt"),
		"NICO_CORE_API_URL":             strings.TrimPrefix(coreSrv.URL, "https://"),
		"TEMPORAL_NAMESPACE":            "flow",
		"TEMPORAL_HOST":                 "temporal-frontend-headless.temporal.svc.cluster.local",
		"TEMPORAL_PORT":                 "7233",
		"TEMPORAL_CERT_PATH":            "/var/run/secrets/temporal-client-certs",
		"TEMPORAL_ENABLE_TLS":           "true",
		"TEMPORAL_SERVER_NAME":          "interservice.server.temporal.local",
		"FLOW_DATA_ENCRYPTION_KEY_PATH": keyPath,
		// extraEnv.flow
		"FLOW_AUTHORIZATION_MODE":                            "enforce",
		"FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE": allowlist,
		// not the chart's: a test-wide path and port
		"FLOW_CONFIG_FILE":       flowConfig,
		"FLOW_ADMIN_LISTEN_ADDR": "off",
	}
	port, err := pglocal.FreePort()
	require.NoError(t, err)
	metricsPort, err := pglocal.FreePort()
	require.NoError(t, err)
	args := []string{"flow", "serve", "-p", strconv.Itoa(port), "--metrics-port=" + strconv.Itoa(metricsPort)}

	t.Run("MissingClientKeyRefusesStartup", func(t *testing.T) {
		partial := t.TempDir()
		for _, f := range []string{"ca.crt", "tls.crt"} {
			b, err := os.ReadFile(filepath.Join(spiffe, f))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(partial, f), b, 0o600))
		}
		vars := map[string]string{}
		for k, v := range chart {
			vars[k] = v
		}
		vars["DB_CERT_PATH"] = filepath.Join(partial, "ca.crt")
		var stdout, stderr bytes.Buffer
		err := run(ctx, args, env(vars), &stdout, &stderr)
		require.ErrorContains(t, err, "DB_CERT_PATH "+filepath.Join(partial, "ca.crt")+": missing "+filepath.Join(partial, "tls.key"))
		require.Equal(t, 2, ExitCode(err))
		var tables int
		require.NoError(t, pg.adminConn(t, "flow").QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables))
		require.Zero(t, tables, "nothing written")
	})

	srvCtx, cancel := context.WithCancel(ctx)
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(srvCtx, args, env(chart), io.Discard, &stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, stderr.String())
		case <-time.After(time.Minute):
			t.Error("flow serve did not stop")
		}
	})

	url := "https://127.0.0.1:" + strconv.Itoa(port)
	clientFor := func(role string) flowv1connect.FlowClient {
		cfg, err := cli.TLSConfig(cli.TLSFiles{CA: filepath.Join(spiffe, "ca.crt"), Cert: filepath.Join(spiffe, role+".crt"), Key: filepath.Join(spiffe, role+".key")})
		require.NoError(t, err)
		return flowv1connect.NewFlowClient(tlsHTTPClient(cfg), url, connect.WithGRPC())
	}
	allowed, other := clientFor("operator"), clientFor("viewer")
	// serve migrates at start (FLOW_ENV is set), then serves.
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("flow serve ended: %v\n%s", err, stderr.String())
		default:
		}
		_, err := allowed.Version(ctx, &flowv1.VersionRequest{})
		return err == nil
	}, time.Minute, 100*time.Millisecond)

	_, err = allowed.CreateExpectedRack(ctx, &flowv1.CreateExpectedRackRequest{Rack: &flowv1.Rack{Info: &flowv1.DeviceInfo{Name: "chart-rack", Manufacturer: "NVIDIA", SerialNumber: "SN-CHART"}}})
	require.NoError(t, err, "a listed identity is admin")
	racks, err := allowed.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{})
	require.NoError(t, err)
	require.EqualValues(t, 1, racks.GetTotal())
	_, err = other.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{})
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "an identity not on the allowlist is refused")

	_, err = allowed.ValidateComponents(ctx, &flowv1.ValidateComponentsRequest{})
	require.NoError(t, err)
	require.Positive(t, coreClients.Load(), "Core was called over mutual TLS with the SPIFFE certificate")

	// Flow's tables live in the database reached over TLS as DB_USER.
	var owner string
	require.NoError(t, pg.adminConn(t, "flow").QueryRow(ctx, `SELECT tableowner FROM pg_tables WHERE tablename = 'rack'`).Scan(&owner))
	require.Equal(t, "flow", owner)
	var ssl int
	require.NoError(t, pg.adminConn(t, "postgres").QueryRow(ctx,
		`SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'flow' AND s.ssl AND s.client_dn <> ''`).Scan(&ssl))
	require.Positive(t, ssl, "Flow's connections use TLS with a client certificate")

	res, err := http.Get("http://127.0.0.1:" + strconv.Itoa(metricsPort) + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), "flow_")

	logs := stderr.String()
	require.Contains(t, logs, "upstream settings accepted and not needed")
	require.Contains(t, logs, "TEMPORAL_SERVER_NAME")
	require.Equal(t, 1, strings.Count(logs, "upstream settings accepted and not needed"), "one info line")
}
