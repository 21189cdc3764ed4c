package app

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/proctest"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim/nicosim"
)

// devRun is one `flow dev` running in-process.
type devRun struct {
	cancel context.CancelFunc
	done   chan error
	out    *syncBuffer
}

func startDev(t *testing.T, dir string) *devRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &devRun{cancel: cancel, done: make(chan error, 1), out: &syncBuffer{}}
	env := map[string]string{"FLOW_LOG_LEVEL": "warn"}
	go func() {
		r.done <- run(ctx, []string{"flow", "dev", "--data-dir", dir, "--listen", "127.0.0.1:0"}, func(k string) string { return env[k] }, r.out, r.out)
	}()
	return r
}

// devSlots bounds the tests running flow dev at once. Each flow dev
// initialises and starts a PostgreSQL cluster of its own and migrates it,
// the heaviest start in the package: with the package's parallel tests
// (TestMain), four of them starting together on two loaded cores took over
// the 90 s their banner is given.
var devSlots = make(chan struct{}, 2)

// devSlot takes one of devSlots for the rest of the test.
func devSlot(t *testing.T) {
	t.Helper()
	devSlots <- struct{}{}
	t.Cleanup(func() { <-devSlots })
}

// devStartSlot takes one of devSlots until the returned function is called
// (or the test ends): for a test that starts one flow dev, then only
// watches it (TestIdleDev), so its wait does not hold back other starts.
func devStartSlot(t *testing.T) (release func()) {
	t.Helper()
	devSlots <- struct{}{}
	release = sync.OnceFunc(func() { <-devSlots })
	t.Cleanup(release)
	return release
}

// devStartTimeout is how long flow dev may take to print its banner: it
// initialises, starts and migrates a PostgreSQL cluster of its own, which
// took over 90 s on two cores at a load average of 40.
const devStartTimeout = 3 * time.Minute

var bannerAddr = regexp.MustCompile(`API\s+https?://(\S+)`)

// addr waits for the banner and returns the API address.
func (r *devRun) addr(t *testing.T) string {
	t.Helper()
	var addr string
	require.Eventually(t, func() bool {
		select {
		case err := <-r.done:
			t.Fatalf("flow dev exited early: %v\n%s", err, r.out.String())
		default:
		}
		m := bannerAddr.FindStringSubmatch(r.out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, devStartTimeout, 20*time.Millisecond)
	return addr
}

func (r *devRun) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		require.NoError(t, err, r.out.String())
	case <-time.After(60 * time.Second):
		t.Fatal("flow dev did not stop")
	}
}

func TestDevKeepsDataAcrossRestartsAndStopsPostgres(t *testing.T) {
	t.Parallel()
	devSlot(t)
	dir, err := os.MkdirTemp("", "flow-dev-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()

	first := startDev(t, dir)
	addr := first.addr(t)
	banner := first.out.String()
	require.Contains(t, banner, "curl -s -X POST -H 'Content-Type: application/json' -d '{}' http://"+addr+"/v1.Flow/Version")
	require.Contains(t, banner, "grpcurl -plaintext "+addr+" list v1.Flow")
	require.Contains(t, banner, "cleartext, no authentication")
	// River UI is in the console and, in dev mode, on the admin listener.
	admin := regexp.MustCompile(`Admin\s+(http://\S+/riverui/)`).FindStringSubmatch(banner)
	require.NotNil(t, admin, banner)
	res, err := http.Get(admin[1])
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, banner, "http://"+addr+"/ui/jobs/   (River UI")
	res, err = http.Get("http://" + addr + "/ui/jobs/")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	// So are the simulators' pages the banner names.
	sims := regexp.MustCompile(`(http://\S+/admin/) +\((NICo Core|PSM)`).FindAllStringSubmatch(banner, -1)
	require.Len(t, sims, 2, banner)
	for _, m := range sims {
		res, err := http.Get(m[1])
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, m[1])
		require.Contains(t, string(body), "GET    /admin/devices", m[1])
	}

	client := flowv1connect.NewFlowClient(h2cClient(), "http://"+addr)
	_, err = client.Version(ctx, &flowv1.VersionRequest{})
	require.NoError(t, err)
	// Operation rules are wired to the server's database.
	rules, err := client.ListOperationRules(ctx, &flowv1.ListOperationRulesRequest{})
	require.NoError(t, err)
	require.Zero(t, rules.GetTotalCount())

	// A second flow dev on the same folder is refused, cleanly.
	var out bytes.Buffer
	err = run(ctx, []string{"flow", "dev", "--data-dir", dir, "--listen", "127.0.0.1:0"}, func(string) string { return "" }, &out, &out)
	require.Error(t, err)
	require.Contains(t, err.Error(), "another flow dev is already running on "+dir)

	writeDevMarker(t, banner)

	first.stop(t)
	_, err = os.Stat(filepath.Join(dir, devSimStateFile))
	require.NoError(t, err, "the simulators' state is saved in the state folder")
	cluster, err := pglocal.New(pgDataOf(t, dir), 0)
	require.NoError(t, err)
	require.False(t, cluster.Running(ctx), "postgres stopped with flow dev")

	second := startDev(t, dir)
	second.addr(t)
	requireDevMarker(t, second.out.String())
	second.stop(t)
	require.False(t, cluster.Running(ctx))
}

func pgDataOf(t *testing.T, dir string) string {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(dir, "pgdata")); err == nil {
		return strings.TrimSpace(string(b))
	}
	return filepath.Join(dir, "pg")
}

// TestDevSimulatorState: the simulators' state saved in the state folder
// comes back in a new pair of simulators (flow dev restarted), firmware job
// in progress included; a broken file is refused, naming it.
func TestDevSimulatorState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func() *simulators {
		sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", firmwarePhase: time.Hour})
		require.NoError(t, err)
		t.Cleanup(func() { sims.Close(context.Background()) })
		return sims
	}
	first := start()
	ok, err := loadSimState(dir, first)
	require.NoError(t, err)
	require.False(t, ok, "nothing saved yet")
	devs := []nicosim.Device{
		{Kind: nicosim.KindCompute, Name: "tray", BMCMAC: "aa:bb:00:00:00:01", PoweredOff: true, Firmware: map[string]string{"bmc": "1.0"}},
		{Kind: nicosim.KindPowerShelf, Name: "shelf", BMCMAC: "aa:bb:00:00:00:02"},
	}
	require.NoError(t, first.Seed(devs))
	c, err := nico.NewClient(first.nicoSrv.URL())
	require.NoError(t, err)
	_, err = c.UpdateFirmware(context.Background(), nico.Target{Kind: nico.KindCompute, MACs: []string{devs[0].BMCMAC}}, nico.FirmwareRequest{Components: []string{"bmc"}, TargetVersion: "2.0"})
	require.NoError(t, err)
	require.NoError(t, saveSimState(dir, first))

	second := start()
	ok, err = loadSimState(dir, second)
	require.NoError(t, err)
	require.True(t, ok)
	st, found := second.nico.State(devs[0].BMCMAC)
	require.True(t, found)
	require.Equal(t, "off", st.Power)
	require.Len(t, st.Jobs, 1, "the firmware job in progress is kept")
	_, found = second.psm.State(devs[1].BMCMAC)
	require.True(t, found)

	require.NoError(t, os.WriteFile(filepath.Join(dir, devSimStateFile), []byte("{"), 0o600))
	_, err = loadSimState(dir, start())
	require.ErrorContains(t, err, filepath.Join(dir, devSimStateFile))
}

// devProcess is `flow dev` running as a child process of the test, with
// no admin address set (FLOW_ADMIN_LISTEN_ADDR, FLOW_ADMIN_LISTEN).
type devProcess struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{} // closed once the process is reaped
}

func startDevProcess(t *testing.T, dir string) *devProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "--data-dir", dir, "--listen", "127.0.0.1:0")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOW_ADMIN_LISTEN") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "FLOW_TEST_CHILD=dev", "FLOW_LOG_LEVEL=warn")
	p := &devProcess{cmd: cmd, out: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// banner waits for flow dev's banner and returns it.
func (p *devProcess) banner(t *testing.T) string {
	t.Helper()
	require.Eventually(t, func() bool {
		select {
		case <-p.exited:
			t.Fatalf("flow dev exited early: %v\n%s", p.cmd.ProcessState, p.out.String())
		default:
		}
		return bannerAddr.MatchString(p.out.String())
	}, devStartTimeout, 20*time.Millisecond)
	return p.out.String()
}

func devDir(t *testing.T) string {
	t.Helper()
	// Not t.TempDir: the postgres user must reach it (we may be root).
	dir, err := os.MkdirTemp("", "flow-dev-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestDevSideBySide: two flow dev processes, each with its own --listen and
// state folder and no admin address set, both start and serve: every other
// port is one each picks free (the admin listener's too).
func TestDevSideBySide(t *testing.T) {
	t.Parallel()
	devSlot(t)
	ctx := context.Background()
	procs := []*devProcess{startDevProcess(t, devDir(t)), startDevProcess(t, devDir(t))}
	var admins []string
	for _, p := range procs {
		banner := p.banner(t)
		addr := bannerAddr.FindStringSubmatch(banner)[1]
		_, err := flowv1connect.NewFlowClient(h2cClient(), "http://"+addr).Version(ctx, &flowv1.VersionRequest{})
		require.NoError(t, err, banner)
		admin := regexp.MustCompile(`Admin\s+http://(\S+)/riverui/`).FindStringSubmatch(banner)
		require.NotNil(t, admin, banner)
		require.NotEqual(t, "127.0.0.1:50060", admin[1], "the admin listener's default is for flow serve")
		res, err := http.Get("http://" + admin[1] + "/readyz")
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		admins = append(admins, admin[1])
	}
	require.NotEqual(t, admins[0], admins[1])
}

// writeDevMarker stores a marker row in the database that the flow dev
// banner names.
func writeDevMarker(t *testing.T, banner string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, regexp.MustCompile(`Database\s+(\S+)`).FindStringSubmatch(banner)[1])
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TABLE dev_marker (v text); INSERT INTO dev_marker VALUES ('kept')`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
}

// requireDevMarker checks that the database the flow dev banner names holds
// writeDevMarker's row.
func requireDevMarker(t *testing.T, banner string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, regexp.MustCompile(`Database\s+(\S+)`).FindStringSubmatch(banner)[1])
	require.NoError(t, err)
	var v string
	require.NoError(t, conn.QueryRow(ctx, `SELECT v FROM dev_marker`).Scan(&v))
	require.Equal(t, "kept", v)
	require.NoError(t, conn.Close(ctx))
}

// TestDevKilledStopsItsPostgres: flow dev killed with SIGKILL leaves no
// PostgreSQL behind (the postmaster of its postmaster.pid is gone within
// seconds), and a new flow dev on the same state folder starts and finds
// the data.
func TestDevKilledStopsItsPostgres(t *testing.T) {
	t.Parallel()
	devSlot(t)
	ctx := context.Background()
	dir := devDir(t)
	p := startDevProcess(t, dir)
	banner := p.banner(t)
	writeDevMarker(t, banner)
	cluster, err := pglocal.New(pgDataOf(t, dir), 0)
	require.NoError(t, err)
	pid := cluster.PID()
	require.NotZero(t, pid, "postmaster.pid names the server")
	require.True(t, proctest.Alive(pid))

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.exited
	require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 10*time.Second, 50*time.Millisecond,
		"postgres (pid %d) outlived the flow dev killed with SIGKILL", pid)

	second := startDev(t, dir)
	second.addr(t)
	requireDevMarker(t, second.out.String())
	second.stop(t)
	require.False(t, cluster.Running(ctx))
}

// TestDevHelpShowsItsOwnFlags: flow dev --help (and every server command's)
// lists the command's own flags, not the client's global ones, which the
// server commands refuse; the client commands keep them.
func TestDevHelpShowsItsOwnFlags(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	help := func(args ...string) string {
		var out bytes.Buffer
		require.NoError(t, run(ctx, append(append([]string{"flow"}, args...), "--help"), func(string) string { return "" }, &out, &out))
		return out.String()
	}
	dev := help("dev")
	for _, f := range []string{"--data-dir", "--listen", "--seed", "--help"} {
		require.Contains(t, dev, f)
	}
	for _, cmd := range [][]string{{"dev"}, {"serve"}, {"db", "status"}, {"simulate"}, {"version"}} {
		out := help(cmd...)
		for _, f := range []string{"Global Flags", "--server", "--output", "--ca ", "--cert ", "--key "} {
			require.NotContains(t, out, f, "flow %s --help", strings.Join(cmd, " "))
		}
	}
	var out bytes.Buffer
	err := run(ctx, []string{"flow", "dev", "--server", "127.0.0.1:1"}, func(string) string { return "" }, &out, &out)
	require.ErrorContains(t, err, "--server is a flag of the client commands; flow dev does not take it")
	require.Equal(t, 2, ExitCode(err))
	err = run(ctx, []string{"flow", "db", "status", "-o", "json"}, func(string) string { return "" }, &out, &out)
	require.ErrorContains(t, err, "--output is a flag of the client commands")

	rack := help("rack", "list")
	require.Contains(t, rack, "Global Flags")
	require.Contains(t, rack, "--server")
}

// TestDevPortInUse: flow dev on a taken API port fails at once, before
// PostgreSQL starts, and says how to pick another port for the server and
// the CLI.
func TestDevPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"flow", "dev", "--data-dir", dir, "--listen", ln.Addr().String()}, func(string) string { return "" }, &out, &errOut)
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "listen on "+ln.Addr().String()+": the port is in use")
	require.Contains(t, msg, "--listen 127.0.0.1:PORT")
	require.Contains(t, msg, "make run ARGS='--listen 127.0.0.1:PORT'")
	require.Contains(t, msg, "FLOW_SERVER=127.0.0.1:PORT")
	for _, name := range []string{"pg", "pgdata"} {
		_, statErr := os.Stat(filepath.Join(dir, name))
		require.True(t, os.IsNotExist(statErr), "%s: no PostgreSQL was set up for a server that cannot listen", name)
	}
}

// TestDBStatusFindsFlowDev: flow db status with no database configured
// reads the running flow dev's database (its state folder records it), and
// with none running says what to set instead of dialling localhost:5432.
func TestDBStatusFindsFlowDev(t *testing.T) {
	t.Parallel()
	dir := devDir(t)
	env := func(k string) string {
		if k == "FLOW_DEV_DATA_DIR" {
			return dir
		}
		return ""
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"flow", "db", "status"}, env, &out, &errOut)
	require.Error(t, err)
	require.Contains(t, err.Error(), "no database configured and no flow dev running on "+dir+": set DATABASE_URL")
	require.NotContains(t, err.Error(), "5432")

	devSlot(t)
	p := startDevProcess(t, dir)
	p.banner(t)
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"flow", "db", "status"}, env, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "(flow dev's, in "+dir+")")
	require.Contains(t, out.String(), "status    up to date")
}
