package cli_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/app"
	"github.com/nicoflow/flow/cli"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/inventory"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim/nicosim"
	"github.com/nicoflow/flow/sim/simrun"
)

// The CLI's end-to-end tests run it against a real server: `flow serve`
// (app.Run) on a fresh database with both simulators, in this process. The
// only fakes are the simulators, at the network boundary.

// server is a running Flow server and its simulators.
type server struct {
	url   string
	dbURL string
	sims  *simrun.Simulators
	inv   *inventory.Service
}

// startServer runs flow serve with env's extra settings (power changes and
// firmware phases take 1ms, firmware polls every 100ms) until the test
// ends.
func startServer(t *testing.T, env map[string]string) *server {
	t.Helper()
	sims, err := simrun.Start(simrun.Options{NICoAddr: "127.0.0.1:0", PSMAddr: "127.0.0.1:0", PowerDelay: time.Millisecond, FirmwarePhase: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sims.Close(context.Background()) })
	port, err := pglocal.FreePort()
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := &server{url: "http://" + addr, dbURL: dbtest.NewDB(t), sims: sims, inv: inventory.NewService()}
	vars := map[string]string{
		"DATABASE_URL": s.dbURL, "FLOW_LISTEN_ADDR": addr,
		"NICO_CORE_API_URL": sims.NICoServer.URL(), "PSM_API_URL": sims.PSMServer.URL(),
		"FLOW_SHUTDOWN_TIMEOUT": "5s", "FLOW_FIRMWARE_POLL_INTERVAL": "100ms", "FLOW_LOG_LEVEL": "error",
		// Cleartext on loopback, as flow dev serves (the TLS tests set
		// certificates instead); no admin listener to collide on.
		"ALLOW_INSECURE_GRPC": "true", "FLOW_ADMIN_LISTEN": "off",
	}
	for k, v := range env {
		vars[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	// exited is closed when flow serve returns, with its error in runErr.
	exited := make(chan struct{})
	var runErr error
	go func() {
		defer close(exited)
		runErr = app.Run(ctx, []string{"flow", "serve"}, func(k string) string { return vars[k] })
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
		require.NoError(t, runErr)
	})
	client := flowv1connect.NewFlowClient(http.DefaultClient, s.url)
	require.Eventually(t, func() bool {
		select {
		case <-exited:
			t.Fatalf("flow serve ended: %v", runErr)
		default:
		}
		_, err := client.Version(context.Background(), &flowv1.VersionRequest{})
		return err == nil
	}, 60*time.Second, 20*time.Millisecond)
	return s
}

// rackOptions say how addRack stores a demo rack.
type rackOptions struct {
	off    bool // its devices start powered off
	linked bool // every component has a Core ID (what inventory sync would do), as decommission needs
}

// addRack stores demo rack i in Flow's inventory and seeds the simulators
// with its devices (BMC firmware 1.0).
func (s *server) addRack(t *testing.T, i int, o rackOptions) inventory.Rack {
	t.Helper()
	ctx := context.Background()
	r := inventory.DemoRack(i)
	if o.linked {
		for k := range r.Components {
			r.Components[k].ExternalID = uuid.NewString()
		}
	}
	pool, err := db.Open(ctx, s.dbURL, db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		r.ID, err = s.inv.CreateRack(ctx, tx, r)
		return err
	}))
	var devs []nicosim.Device
	for _, c := range r.Components {
		devs = append(devs, nicosim.Device{
			Kind: strings.ToLower(string(c.Type)), ID: c.ExternalID, Name: c.Name, Serial: c.SerialNumber,
			BMCMAC: c.BMCs[0].MAC.String(), RackID: r.ID.String(), PoweredOff: o.off, Firmware: map[string]string{"bmc": "1.0"},
			SlotID: int(c.Position.SlotID), TrayIndex: int(c.Position.TrayIdx),
		})
	}
	require.NoError(t, s.sims.Seed(devs))
	return r
}

// cliBundle runs CLI commands with env as the environment.
type cliBundle struct {
	env map[string]string
}

// client returns a Connect client of s.
func (s *server) client() flowv1connect.FlowClient {
	return flowv1connect.NewFlowClient(http.DefaultClient, s.url)
}

// bundle returns a CLI bundle pointed at s.
func (s *server) bundle() *cliBundle {
	return &cliBundle{env: map[string]string{"FLOW_SERVER": s.url}}
}

// flow runs `flow args...` (the client commands) and returns stdout, stderr
// and the error.
func (b *cliBundle) flow(args ...string) (string, string, error) {
	root := &cobra.Command{Use: "flow"}
	cli.AddCommands(root, cli.Options{Getenv: func(k string) string { return b.env[k] }, Stdin: strings.NewReader("")})
	var stdout, stderr bytes.Buffer
	err := cli.Execute(context.Background(), root, args, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// stamps are the time stamps that start the lines of watch and --wait off a
// terminal.
var stamps = regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d `)

// flowUnstamped is flow with the lines' time stamps removed from stdout.
func (b *cliBundle) flowUnstamped(args ...string) (string, string, error) {
	out, errOut, err := b.flow(args...)
	return stamps.ReplaceAllString(out, ""), errOut, err
}

// mustFlow runs flow and returns its trimmed stdout (without the time
// stamps of watch lines), failing on error.
func (b *cliBundle) mustFlow(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := b.flowUnstamped(args...)
	require.NoError(t, err, "flow %s: %s", strings.Join(args, " "), stderr)
	return strings.TrimSpace(out)
}

func requireFlowError(t *testing.T, b *cliBundle, contains string, args ...string) {
	t.Helper()
	_, _, err := b.flow(args...)
	require.Error(t, err, "flow %s", strings.Join(args, " "))
	require.Contains(t, err.Error(), contains)
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func newKeyFile(t *testing.T) string {
	t.Helper()
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	return writeFile(t, "key", base64.StdEncoding.EncodeToString(raw)+"\n")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
