package dbtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/pglocal"
)

// InitCluster initialises a PostgreSQL cluster of the test's own, one it
// may stop, restart, promote or serve over TLS, unlike NewDB's shared
// server. Its folder is under /var/tmp, reachable by the postgres user
// the server runs as when the test runs as root; the cluster is stopped
// and the folder removed when the test ends. Set Settings (or call
// ServeTLS) before starting it.
func InitCluster(t testing.TB) *pglocal.Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "flow-test-pg-")
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	port, err := restartablePort()
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	c, err := pglocal.New(filepath.Join(dir, "pgdata"), port)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if err := c.Init(context.Background()); err != nil {
		t.Fatalf("dbtest: init cluster: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// restartablePort is a port free now, below Linux's ephemeral range
// (ip_local_port_range, 32768–60999 by default). A test that stops its
// cluster and starts it again needs the port to stay free in between;
// every other server and client of the test run binds port 0, which the
// kernel answers from the ephemeral range, so none can take it while the
// server is down (a port from that range was taken so once, failing the
// restart with "could not create any TCP/IP sockets").
func restartablePort() (int, error) {
	const lo, hi = 15000, 32000
	for range 100 {
		p := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port between %d and %d", lo, hi)
}

// StartCluster is InitCluster, started with settings (nil: the defaults)
// and Flow's and River's migrations applied to its postgres database,
// whose URL it returns.
func StartCluster(t testing.TB, settings map[string]string) (*pglocal.Cluster, string) {
	t.Helper()
	c := InitCluster(t)
	c.Settings = settings
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("dbtest: start cluster: %v", err)
	}
	url := c.URL("postgres")
	if _, err := db.Migrate(ctx, url); err != nil {
		t.Fatalf("dbtest: migrate: %v", err)
	}
	return c, url
}

// RestartableSettings are the settings of a cluster a test stops and
// starts under load: no fsync (the data dies with the test), room for two
// servers' pools, and a server log that keeps quiet about the clients it
// drops.
func RestartableSettings(maxConnections int) map[string]string {
	return map[string]string{"fsync": "off", "max_connections": strconv.Itoa(maxConnections), "log_min_messages": "fatal"}
}

// ServeTLS makes the initialised, not yet started cluster c accept only
// TLS connections from loopback with a client certificate signed by
// certs' ca.crt (clientcert=verify-ca), serving certs' tls.crt (which
// must be valid for 127.0.0.1); the postgres user needs nothing more,
// every other user also its password. SuperuserTLSURL is the URL to reach
// it.
func ServeTLS(t testing.TB, c *pglocal.Cluster, certs string) {
	t.Helper()
	write := func(name string, b []byte) {
		p := filepath.Join(c.DataDir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatalf("dbtest: %v", err)
		}
		if u, err := user.Lookup("postgres"); err == nil && os.Geteuid() == 0 {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatalf("dbtest: %v", err)
			}
		} // not root: the server runs as us
	}
	for src, dst := range map[string]string{"tls.crt": "server.crt", "tls.key": "server.key", "ca.crt": "root.crt"} {
		b, err := os.ReadFile(filepath.Join(certs, src))
		if err != nil {
			t.Fatalf("dbtest: %v", err)
		}
		write(dst, b)
	}
	write("pg_hba.conf", []byte("hostssl all postgres 127.0.0.1/32 trust clientcert=verify-ca\n"+
		"hostssl all all 127.0.0.1/32 scram-sha-256 clientcert=verify-ca\n"))
	if c.Settings == nil {
		c.Settings = map[string]string{}
	}
	for k, v := range map[string]string{"ssl": "on", "ssl_cert_file": "server.crt", "ssl_key_file": "server.key", "ssl_ca_file": "root.crt"} {
		c.Settings[k] = v
	}
}

// SuperuserTLSURL is the URL of database on a cluster ServeTLS set up, as
// the postgres user with certs' client pair, verifying the server's name.
func SuperuserTLSURL(c *pglocal.Cluster, certs, database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=verify-full&sslrootcert=%s&sslcert=%s&sslkey=%s", c.Port, database,
		filepath.Join(certs, "ca.crt"), filepath.Join(certs, "tls.crt"), filepath.Join(certs, "tls.key"))
}
