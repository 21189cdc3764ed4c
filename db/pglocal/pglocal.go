// Package pglocal runs a private PostgreSQL cluster from the machine's own
// server binaries. It backs `flow dev` (a cluster in a state folder that
// survives restarts) and dbtest (one throwaway cluster per test run).
//
// PostgreSQL refuses to run as root. When the current process is root, every
// server command (initdb, pg_ctl, postgres) runs as the "postgres" system user
// and the data folder is handed to that user.
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoBinaries is returned when no PostgreSQL server binaries can be found.
var ErrNoBinaries = errors.New("pglocal: PostgreSQL server binaries (initdb, pg_ctl, postgres) not found on PATH or under /usr/lib/postgresql/*/bin; install them, e.g. `apt-get install postgresql` on Debian/Ubuntu or `brew install postgresql@16` on macOS")

// ErrLocked is returned by Lock when another process holds the cluster folder.
var ErrLocked = errors.New("pglocal: cluster folder is in use by another process")

// distroBinGlob is where Debian and Ubuntu install server binaries.
var distroBinGlob = "/usr/lib/postgresql/*/bin"

// FindBinDir returns the folder holding initdb, pg_ctl and postgres: the one
// on PATH first, then the newest /usr/lib/postgresql/<version>/bin.
func FindBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		dir := filepath.Dir(p)
		if hasServer(dir) {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob(distroBinGlob)
	sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
	for _, dir := range matches {
		if hasServer(dir) {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

func versionOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

// Cluster is a private PostgreSQL cluster in DataDir, listening on 127.0.0.1
// only, with trust authentication for the superuser "postgres".
type Cluster struct {
	BinDir  string // folder of initdb, pg_ctl and postgres
	DataDir string // PGDATA
	Port    int    // TCP port on 127.0.0.1

	// Settings are extra `-c name=value` server settings.
	Settings map[string]string

	cred *syscall.Credential // non-nil when server commands run as another user
}

// New returns a Cluster for dataDir using the binaries found by FindBinDir.
// It resolves the "postgres" system user when running as root.
func New(dataDir string, port int) (*Cluster, error) {
	bin, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{BinDir: bin, DataDir: abs, Port: port}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pglocal: running as root, so PostgreSQL must run as the \"postgres\" system user, which does not exist (installing Debian's postgresql package creates it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return c, nil
}

// URL returns a connection URL for database name.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, database)
}

// Initialized reports whether DataDir already holds a cluster.
func (c *Cluster) Initialized() bool {
	_, err := os.Stat(filepath.Join(c.DataDir, "PG_VERSION"))
	return err == nil
}

// Init creates the cluster with initdb unless it already exists.
func (c *Cluster) Init(ctx context.Context) error {
	if c.Initialized() {
		return nil
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("pglocal: create data folder: %w", err)
	}
	if err := c.handOver(c.DataDir); err != nil {
		return err
	}
	out, err := c.command(ctx, "initdb", "-D", c.DataDir, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pglocal: initdb: %w: %s", err, lastLines(out, 5))
	}
	return nil
}

// handOver gives dir to the server user and checks that the user can reach it.
func (c *Cluster) handOver(dir string) error {
	if c.cred == nil {
		return nil
	}
	if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		return fmt.Errorf("pglocal: hand %s to the postgres user: %w", dir, err)
	}
	if p := c.blockedAt(filepath.Dir(dir)); p != "" {
		return fmt.Errorf("pglocal: PostgreSQL runs as the postgres user, which cannot enter %s; choose a data folder outside it (e.g. /var/tmp/flow-dev) or run `chmod o+x %s`", p, p)
	}
	return nil
}

// blockedAt returns the first folder at or above dir that the server user
// cannot enter, or "" when it can reach dir.
func (c *Cluster) blockedAt(dir string) string {
	for p := dir; p != "/" && p != "."; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			continue // not created yet; its parent decides
		}
		if s, ok := st.Sys().(*syscall.Stat_t); ok && s.Uid == c.cred.Uid {
			continue
		}
		if st.Mode().Perm()&0o001 == 0 {
			return p
		}
	}
	return ""
}

// ServerUserCanReach reports whether the server commands can enter dir: true
// when not running as root, else whether the postgres user can reach it.
func ServerUserCanReach(dir string) bool {
	c, err := New(dir, 0)
	if err != nil || c.cred == nil {
		return true // New reports its own error when the caller uses it
	}
	return c.blockedAt(dir) == ""
}

// Start starts the server and waits until it accepts connections. A server
// left running in DataDir by a process that died is stopped first.
func (c *Cluster) Start(ctx context.Context) error {
	if c.Running(ctx) {
		if err := c.Stop(ctx); err != nil {
			return err
		}
	}
	if c.Port == 0 {
		p, err := FreePort()
		if err != nil {
			return err
		}
		c.Port = p
	}
	opts := []string{"-c", "listen_addresses=127.0.0.1", "-p", strconv.Itoa(c.Port), "-c", "unix_socket_directories="}
	keys := make([]string, 0, len(c.Settings))
	for k := range c.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		opts = append(opts, "-c", k+"="+c.Settings[k])
	}
	logFile := filepath.Join(c.DataDir, "postgres.log")
	cmd := c.command(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", c.DataDir, "-l", logFile, "-o", strings.Join(opts, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logFile)
		return fmt.Errorf("pglocal: start server: %w: %s %s", err, lastLines(out, 3), lastLines(log, 5))
	}
	return nil
}

// Running reports whether a server is running in DataDir.
func (c *Cluster) Running(ctx context.Context) bool {
	if !c.Initialized() {
		return false
	}
	return c.command(ctx, "pg_ctl", "status", "-D", c.DataDir).Run() == nil
}

// Stop shuts the server down (fast mode: disconnect clients, clean shutdown).
func (c *Cluster) Stop(ctx context.Context) error {
	out, err := c.command(ctx, "pg_ctl", "stop", "-w", "-t", "60", "-m", "fast", "-D", c.DataDir).CombinedOutput()
	if err != nil && c.Running(ctx) {
		return fmt.Errorf("pglocal: stop server: %w: %s", err, lastLines(out, 3))
	}
	return nil
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, name), args...)
	// Own process group: a Ctrl-C in the terminal reaches Flow, which then
	// stops the server in order, rather than killing it mid-flight.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

// FreePort returns a TCP port on 127.0.0.1 that is free right now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitReady polls addr until it accepts TCP connections or the timeout passes.
func WaitReady(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
