package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/nico"
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
	env := map[string]string{"FLOW_LOG_LEVEL": "warn", "FLOW_ADMIN_LISTEN": "127.0.0.1:0"}
	go func() {
		r.done <- run(ctx, []string{"flow", "dev", "--data-dir", dir, "--listen", "127.0.0.1:0"}, func(k string) string { return env[k] }, r.out, r.out)
	}()
	return r
}

var bannerAddr = regexp.MustCompile(`API\s+http://(\S+)`)

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
	}, 90*time.Second, 20*time.Millisecond)
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
	// River UI is on the admin listener, not the API port.
	admin := regexp.MustCompile(`Admin\s+(http://\S+/riverui/)`).FindStringSubmatch(banner)
	require.NotNil(t, admin, banner)
	res, err := http.Get(admin[1])
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

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

	dbURL := regexp.MustCompile(`Database\s+(\S+)`).FindStringSubmatch(banner)[1]
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TABLE dev_marker (v text); INSERT INTO dev_marker VALUES ('kept')`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	first.stop(t)
	_, err = os.Stat(filepath.Join(dir, devSimStateFile))
	require.NoError(t, err, "the simulators' state is saved in the state folder")
	cluster, err := pglocal.New(pgDataOf(t, dir), 0)
	require.NoError(t, err)
	require.False(t, cluster.Running(ctx), "postgres stopped with flow dev")

	second := startDev(t, dir)
	second.addr(t)
	dbURL = regexp.MustCompile(`Database\s+(\S+)`).FindStringSubmatch(second.out.String())[1]
	conn, err = pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	var v string
	require.NoError(t, conn.QueryRow(ctx, `SELECT v FROM dev_marker`).Scan(&v))
	require.Equal(t, "kept", v)
	require.NoError(t, conn.Close(ctx))
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

// TestIdleDevIsQuietAndJSONOnRequest runs `flow dev` with its default
// level (debug for Flow's own lines) and FLOW_LOG_FORMAT=json, waits for it
// to settle, then counts what it logs in one idle minute: fewer than 5
// lines, and every line it ever wrote to stderr is a JSON object.
func TestIdleDevIsQuietAndJSONOnRequest(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "flow-dev-idle-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	env := map[string]string{"FLOW_LOG_FORMAT": "json", "FLOW_ADMIN_LISTEN_ADDR": "127.0.0.1:0"}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"flow", "dev", "--data-dir", dir, "--listen", "127.0.0.1:0"}, func(k string) string { return env[k] }, stdout, stderr)
	}()
	r := &devRun{cancel: cancel, done: done, out: stdout}
	r.addr(t)
	banner := stdout.String()
	require.Regexp(t, `Admin\s+http://\S+/riverui/`, banner)
	require.Regexp(t, `http://\S+/metrics`, banner)
	require.Regexp(t, `Simulators http://\S+/admin/`, banner)

	time.Sleep(10 * time.Second) // startup: migrations, first sync cycle, leader election
	settled := strings.Count(stderr.String(), "\n")
	time.Sleep(time.Minute)
	idle := strings.Split(strings.TrimSpace(stderr.String()), "\n")[settled:]
	require.Less(t, len(idle), 5, "idle flow dev logged in one minute:\n%s", strings.Join(idle, "\n"))
	r.stop(t)
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &v), "not a JSON line: %s", line)
		require.Contains(t, v, "msg")
	}
}
