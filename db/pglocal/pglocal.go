// Package pglocal runs a private PostgreSQL cluster from the machine's own
// server binaries. It backs `flow dev` (a cluster in a state folder that
// survives restarts) and dbtest (one throwaway cluster per test run).
//
// PostgreSQL refuses to run as root. When the current process is root, every
// server command (initdb, pg_ctl, postgres) runs as the "postgres" system user
// and the data folder is handed to that user.
//
// A cluster is either daemonised by pg_ctl, outliving the process that
// started it until Stop (dbtest shares one between test processes), or
// Attached: postgres runs in the foreground as a child of this process and
// stops with it, however it ends (flow dev).
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
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

	// Attached makes Start run postgres in the foreground as a child of
	// this process instead of daemonising it with pg_ctl, so that the
	// server stops when this process ends, however it ends: on Linux the
	// kernel sends the server SIGINT (fast shutdown) when its parent dies,
	// SIGKILL included (PR_SET_PDEATHSIG). Elsewhere a killed parent leaves
	// the server running, and the next Start on DataDir stops it first.
	Attached bool

	cred   *syscall.Credential // non-nil when server commands run as another user
	server *child              // the attached server while it runs
}

// child is an attached server: the postgres process this process started.
type child struct {
	proc *os.Process
	done chan struct{} // closed once the process is reaped
	err  error         // its exit, valid after done
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
// left running in DataDir by a process that died is stopped first. When
// Port is 0, Start picks a free port, and picks again should another
// process take it before the server binds it.
func (c *Cluster) Start(ctx context.Context) error {
	if c.Running(ctx) {
		if err := c.Stop(ctx); err != nil {
			return err
		}
	}
	pick := c.Port == 0
	for attempt := 1; ; attempt++ {
		if pick {
			p, err := freePort()
			if err != nil {
				return err
			}
			c.Port = p
		}
		err := c.start(ctx)
		if err == nil {
			return nil
		}
		if !pick || attempt == 3 || !errors.Is(err, errPortTaken) {
			if pick {
				c.Port = 0
			}
			return err
		}
	}
}

// errPortTaken is start's error when another process holds Port.
var errPortTaken = errors.New("pglocal: port in use")

// start starts the server once on Port.
func (c *Cluster) start(ctx context.Context) error {
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
	var logFrom int64 // where this start's lines begin in the log
	if st, err := os.Stat(logFile); err == nil {
		logFrom = st.Size()
	}
	var err error
	if c.Attached {
		err = c.startAttached(ctx, opts, logFile)
	} else {
		cmd := c.command(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", c.DataDir, "-l", logFile, "-o", strings.Join(opts, " "))
		if out, cerr := cmd.CombinedOutput(); cerr != nil {
			err = fmt.Errorf("%w: %s", cerr, lastLines(out, 3))
		}
	}
	if err == nil {
		return nil
	}
	log := readFrom(logFile, logFrom)
	if strings.Contains(string(log), "Address already in use") {
		err = fmt.Errorf("%w (%d): %w", errPortTaken, c.Port, err)
	}
	return fmt.Errorf("pglocal: start server: %w: %s", err, lastLines(log, 5))
}

// startAttached runs postgres in the foreground as this process's child
// (see Attached) and waits until it is ready, or has exited.
func (c *Cluster) startAttached(ctx context.Context, opts []string, logFile string) error {
	log, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	defer log.Close() // the child has its own copy
	if c.cred != nil {
		// pg_ctl -l, run as the server user, may append to it later.
		_ = log.Chown(int(c.cred.Uid), int(c.cred.Gid))
	}
	cmd := exec.Command(filepath.Join(c.BinDir, "postgres"), append([]string{"-D", c.DataDir}, opts...)...)
	cmd.SysProcAttr = c.sysProcAttr()
	dieWithParent(cmd.SysProcAttr)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout, cmd.Stderr = log, log

	ch := &child{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The kernel sends the parent-death signal when the thread that
		// started the child ends, not the process: this goroutine keeps
		// its thread until the child is reaped.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		ch.proc = cmd.Process
		started <- nil
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	if err := <-started; err != nil {
		return err
	}
	if err := c.waitReady(ctx, ch); err != nil {
		_ = ch.stop(context.WithoutCancel(ctx), 10*time.Second)
		return err
	}
	c.server = ch
	return nil
}

// waitReady waits until the attached server says it is ready in
// postmaster.pid (as pg_ctl -w does), for 60 seconds at most.
func (c *Cluster) waitReady(ctx context.Context, ch *child) error {
	deadline := time.After(60 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if pid, status, ok := c.postmasterStatus(); ok && pid == ch.proc.Pid && status == "ready" {
			return nil
		}
		select {
		case <-ch.done:
			return fmt.Errorf("server exited: %v", ch.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return errors.New("server not ready after 60s")
		case <-tick.C:
		}
	}
}

// postmasterStatus reads postmaster.pid: the postmaster's PID and its
// status line (starting, ready, stopping, standby).
func (c *Cluster) postmasterStatus() (pid int, status string, ok bool) {
	b, err := os.ReadFile(filepath.Join(c.DataDir, "postmaster.pid"))
	if err != nil {
		return 0, "", false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 {
		return 0, "", false
	}
	pid, err = strconv.Atoi(strings.TrimSpace(lines[0]))
	return pid, strings.TrimSpace(lines[7]), err == nil
}

// PID returns the PID of the server running in DataDir, from its
// postmaster.pid, or 0 when none is recorded.
func (c *Cluster) PID() int {
	b, err := os.ReadFile(filepath.Join(c.DataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// stop shuts the attached server down: SIGINT (fast shutdown); if it is
// still running after grace or once ctx is done, SIGQUIT (immediate
// shutdown; the next start recovers), and at last SIGKILL. It returns once
// the server is reaped.
func (ch *child) stop(ctx context.Context, grace time.Duration) error {
	_ = ch.proc.Signal(syscall.SIGINT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-ch.done:
		return nil
	case <-ctx.Done():
	case <-t.C:
	}
	_ = ch.proc.Signal(syscall.SIGQUIT)
	select {
	case <-ch.done:
		return errors.New("server did not stop on SIGINT; stopped it with SIGQUIT")
	case <-time.After(5 * time.Second):
	}
	_ = ch.proc.Kill()
	<-ch.done
	return errors.New("server did not stop on SIGINT or SIGQUIT; killed it")
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
	if ch := c.server; ch != nil {
		c.server = nil
		if err := ch.stop(ctx, 60*time.Second); err != nil {
			return fmt.Errorf("pglocal: stop server: %w", err)
		}
		return nil
	}
	out, err := c.command(ctx, "pg_ctl", "stop", "-w", "-t", "60", "-m", "fast", "-D", c.DataDir).CombinedOutput()
	if err != nil && c.Running(ctx) {
		return fmt.Errorf("pglocal: stop server: %w: %s", err, lastLines(out, 3))
	}
	return nil
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.binary(name), args...)
	cmd.SysProcAttr = c.sysProcAttr()
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

// binary returns the path of the server program name: in BinDir, or, when
// BinDir holds links to a few programs only (/usr/local/bin linking to a
// distribution's pg_ctl, initdb and postgres), beside the program pg_ctl
// links to (pg_basebackup, say).
func (c *Cluster) binary(name string) string {
	p := filepath.Join(c.BinDir, name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if real, err := filepath.EvalSymlinks(filepath.Join(c.BinDir, "pg_ctl")); err == nil {
		if alt := filepath.Join(filepath.Dir(real), name); alt != p {
			if _, err := os.Stat(alt); err == nil {
				return alt
			}
		}
	}
	return p
}

// sysProcAttr runs a server command as the server user, in its own process
// group: a Ctrl-C in the terminal reaches Flow, which then stops the server
// in order, rather than killing it mid-flight.
func (c *Cluster) sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
}

// readFrom returns the file's bytes from offset on (nil when unreadable).
func readFrom(path string, offset int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	b, _ := io.ReadAll(f)
	return b
}

// freePort is FreePort; tests replace it.
var freePort = FreePort

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

// RunningPort returns the port of a server running in DataDir and ready for
// connections, from its postmaster.pid; ok is false when none runs there
// (no pid file, a dead PID, or a server still starting or stopping).
func (c *Cluster) RunningPort() (port int, ok bool) {
	b, err := os.ReadFile(filepath.Join(c.DataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 || strings.TrimSpace(lines[7]) != "ready" {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil && !errors.Is(syscall.Kill(pid, 0), syscall.EPERM) {
		return 0, false
	}
	port, err = strconv.Atoi(strings.TrimSpace(lines[3]))
	return port, err == nil && port > 0
}
