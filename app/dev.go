package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/edge"
)

// devCommand is `flow dev`, the embedded default: a private PostgreSQL in a
// state folder, migrated, and Flow serving on it in dev mode. Data survives
// restarts; PostgreSQL stops when flow dev exits, Ctrl-C and SIGKILL
// included (pglocal.Cluster.Attached). The admin listener, the simulators
// and PostgreSQL take free ports unless told otherwise.
func devCommand(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	return command("dev", "run Flow on a private PostgreSQL (the embedded default), in dev mode, with the simulators", func(fs *pflag.FlagSet) func(context.Context) error {
		cfg, err := LoadConfig(getenv)
		o := devOptions{dataDir: configDefault(getenv, "FLOW_DEV_DATA_DIR")}
		fs.StringVar(&o.dataDir, "data-dir", o.dataDir, "state folder, created on first run and reused after (FLOW_DEV_DATA_DIR)")
		listen := fs.String("listen", "", "address to listen on (FLOW_LISTEN_ADDR; default 127.0.0.1:50051)")
		fs.IntVar(&o.seed, "seed", 0, "make sure demo racks 0..N-1 (GB200 NVL72 shape) exist; idempotent")
		fs.DurationVar(&o.simPhase, "sim-phase", 0, "time the simulators spend in each firmware-job phase, ingestion step and decommission step (default 10s; 1s makes demos and doc tests quick)")
		fs.DurationVar(&o.simPowerDelay, "sim-power-delay", 0, "time a power change takes in the simulators (default 5s)")
		if err != nil {
			return failing(err)
		}
		return func(ctx context.Context) error {
			if *listen != "" {
				cfg.ListenAddr = *listen
			} else if getenv("FLOW_LISTEN_ADDR") == "" {
				cfg.ListenAddr = "127.0.0.1:50051"
			}
			return runDev(ctx, cfg, o, stdout, stderr)
		}
	})
}

// devOptions are flow dev's flags.
type devOptions struct {
	dataDir  string
	seed     int
	simPhase time.Duration // the simulators' FirmwarePhase; 0: their default
	// simPowerDelay is the simulators' PowerDelay; 0: their default.
	simPowerDelay time.Duration
}

func runDev(ctx context.Context, cfg Config, o devOptions, stdout, stderr io.Writer) error {
	cfg.DevMode = true
	if !cfg.logFormatSet {
		cfg.LogFormat = "text"
	}
	if cfg.PollInterval == 0 {
		// The simulators' firmware jobs take seconds, not the minutes the
		// rules' 2m polls are made for.
		cfg.PollInterval = 2 * time.Second
	}
	if !cfg.SystemJobs.inventoryIntervalSet {
		cfg.SystemJobs.InventoryInterval = devInventoryInterval
	}
	if !cfg.firmwareReadIntervalSet {
		// A demo's rollout shows in its compliance at the next cycle.
		cfg.FirmwareReadInterval = 0
	}
	// flow dev looks for leaks every few seconds, as flow serve does on
	// the event-rule path (docs/event-rules.md).
	if !cfg.SystemJobs.leakIntervalSet && cfg.SystemJobs.LeakEventRules {
		cfg.SystemJobs.LeakDetectionInterval = devLeakDetectionInterval
	}
	// Every port flow dev picks itself is a free one (the banner says
	// which), so that several can run on one machine; only the API's
	// address is the user's to choose.
	if !cfg.adminAddrSet {
		cfg.AdminAddr = "127.0.0.1:0"
	}
	logger := newLogger(stderr, cfg.LogFormat, cfg.logLevel())

	dir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state folder: %w", err)
	}
	lock, err := pglocal.LockExclusive(filepath.Join(dir, "flow-dev.lock"))
	if err != nil {
		if errors.Is(err, pglocal.ErrLocked) {
			return fmt.Errorf("another flow dev is already running on %s: %w; stop it first or pass a different --data-dir", dir, err)
		}
		return err
	}
	defer lock.Unlock()
	if cfg.KeyPath == "" {
		if cfg.KeyPath, err = devDataKey(dir); err != nil {
			return err
		}
	}
	// A taken API port fails now, before PostgreSQL starts, not after.
	probe, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return listenError(cfg.ListenAddr, err)
	}
	_ = probe.Close()

	pgData, err := devPGDataDir(dir)
	if err != nil {
		return err
	}
	cluster, err := pglocal.New(pgData, 0)
	if err != nil {
		return err
	}
	// PostgreSQL stops with flow dev however it ends, kill -9 included.
	cluster.Attached = true
	if !cluster.Initialized() {
		logger.InfoContext(ctx, "creating private postgres cluster", "data_dir", pgData, "bin_dir", cluster.BinDir)
	}
	if err := cluster.Init(ctx); err != nil {
		return err
	}
	if err := cluster.Start(ctx); err != nil {
		return err
	}
	defer func() {
		logger.Info("stopping private postgres")
		if err := cluster.Stop(context.WithoutCancel(ctx)); err != nil {
			logger.Error("stop private postgres", "error", err.Error())
		}
	}()
	if err := db.CreateDatabase(ctx, cluster.URL("postgres"), "flow"); err != nil {
		return err
	}
	cfg.DatabaseURL = cluster.URL("flow")

	sims, err := devSimulators(&cfg, o.simPhase, o.simPowerDelay)
	if err != nil {
		return err
	}
	if sims != nil {
		defer func() { _ = sims.Close(context.WithoutCancel(ctx)) }()
		restored, err := loadSimState(dir, sims)
		if err != nil {
			return fmt.Errorf("restore the simulators' state (delete %s to start them afresh): %w", filepath.Join(dir, devSimStateFile), err)
		}
		logger.InfoContext(ctx, "simulators running", "nico_core_api_url", cfg.NICoURL, "psm_api_url", cfg.PSMURL, "state_restored", restored)
	}

	// Certificates given on purpose (CERTDIR, FLOW_TLS_*) make flow dev
	// serve mutual TLS with roles, as flow serve does: the way to try on
	// one machine what needs callers told apart (two-person approval).
	withTLS := cfg.CertDir != "" || cfg.TLS.Cert != ""
	if !withTLS && !edge.IsLoopback(cfg.ListenAddr) {
		logger.WarnContext(ctx, "flow dev serves cleartext without authentication, and --listen is not loopback: anyone who reaches the port is admin; use flow serve with certificates (docs/security.md) beyond this machine",
			"addr", cfg.ListenAddr)
	}
	srv, err := newServer(ctx, cfg, logger, serveOptions{migrate: true, cleartext: !withTLS})
	if err != nil {
		return err
	}
	if o.seed > 0 {
		added, err := seedDemoRacks(ctx, srv.pool, o.seed)
		if err != nil {
			return fmt.Errorf("seed demo racks: %w", err)
		}
		logger.InfoContext(ctx, "demo racks seeded", "wanted", o.seed, "added", added)
		if sims != nil {
			// Core's desired versions: the demo fleet's current set
			// (devseed.go), for flow baseline import.
			if err := seedDesiredFirmware(sims); err != nil {
				return fmt.Errorf("seed desired firmware: %w", err)
			}
		}
	}
	if sims != nil {
		stop, err := followInventory(ctx, sims, srv, logger, dir) // devseed.go
		if err != nil {
			return err
		}
		defer stop()
	}
	var simAdmin []string
	if sims != nil {
		simAdmin = []string{sims.nicoSrv.URL() + "/admin/", sims.psmSrv.URL() + "/admin/"}
	}
	if withTLS {
		printTLSBanner(stdout, srv.Addr().String(), srv.AdminAddr(), cfg.DatabaseURL, dir)
	} else {
		printBanner(stdout, srv.Addr().String(), srv.AdminAddr(), cfg.DatabaseURL, dir, simAdmin)
	}
	return srv.run(ctx)
}

// devSimulators starts the NICo Core and PSM simulators on loopback and
// points cfg at them, unless NICO_CORE_API_URL and PSM_API_URL are both set
// (then it returns nil). A variable the user set is left alone. The
// simulators start empty; runDev restores their saved state from the state
// folder (devsimstate.go), then seeds them from Flow's inventory and keeps
// them in step with it (devSeeder).
func devSimulators(cfg *Config, phase, powerDelay time.Duration) (*simulators, error) {
	if cfg.NICoURL != "" && cfg.PSMURL != "" {
		return nil, nil
	}
	sims, err := startSimulators(simOptions{nicoAddr: "127.0.0.1:0", psmAddr: "127.0.0.1:0", firmwarePhase: phase, powerDelay: powerDelay})
	if err != nil {
		return nil, err
	}
	cfg.NICoURL = or(cfg.NICoURL, sims.nicoSrv.URL())
	cfg.PSMURL = or(cfg.PSMURL, sims.psmSrv.URL())
	return sims, nil
}

// devPGDataDir returns where flow dev keeps PostgreSQL's files: <dir>/pg,
// unless PostgreSQL must run as the postgres user (we are root) and that user
// cannot reach <dir> (say, under /root). Then the files live in
// /var/tmp/flow-dev-<hash of dir>, recorded in <dir>/pgdata so every run
// finds them again.
func devPGDataDir(dir string) (string, error) {
	pointer := filepath.Join(dir, "pgdata")
	if b, err := os.ReadFile(pointer); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	local := filepath.Join(dir, "pg")
	if pglocal.ServerUserCanReach(dir) {
		return local, nil
	}
	sum := sha256.Sum256([]byte(dir))
	base := "/var/tmp"
	if st, err := os.Stat(base); err != nil || !st.IsDir() {
		base = os.TempDir()
	}
	alt := filepath.Join(base, "flow-dev-"+hex.EncodeToString(sum[:6]))
	if err := os.WriteFile(pointer, []byte(alt+"\n"), 0o644); err != nil {
		return "", err
	}
	return alt, nil
}

// printBanner prints flow dev's banner: the API, the admin listener's
// endpoints, the simulators' admin URLs (simAdmin: NICo Core's, PSM's; nil
// when both backends are real), the database and the state folder.
func printBanner(w io.Writer, addr, adminAddr, dbURL, dir string, simAdmin []string) {
	host := bannerHost(addr)
	admin := "off (FLOW_ADMIN_LISTEN_ADDR=off)"
	if adminAddr != "" {
		a := "http://" + bannerHost(adminAddr)
		admin = a + "/riverui/   (River UI)\n" +
			"             " + a + "/metrics    (Prometheus; also /healthz, /readyz; /debug/pprof/ with FLOW_PPROF=true)"
	}
	if len(simAdmin) == 2 {
		admin += "\n  Simulators " + simAdmin[0] + "   (NICo Core: devices, faults, journal)\n" +
			"             " + simAdmin[1] + "   (PSM)"
	}
	fmt.Fprintf(w, `
  Flow is running (dev mode)

  API        http://%[1]s   (gRPC, gRPC-Web and Connect JSON on one port)
             cleartext, no authentication: every caller is admin (flow serve
             needs certificates: docs/security.md)
  Console    http://%[1]s/ui/   (the site, racks, tasks, rollouts, leaks: docs/console.md)
             http://%[1]s/ui/jobs/   (River UI, the job queue)
  Admin      %[4]s
  Database   %[2]s
  State      %[3]s

  Try it:
    curl -s -X POST -H 'Content-Type: application/json' -d '{}' http://%[1]s/v1.Flow/Version
    grpcurl -plaintext %[1]s list v1.Flow
    grpcurl -plaintext -d '{}' %[1]s grpc.health.v1.Health/Check
    flow rack list --server %[1]s
    flow rack create -f examples/rack-g10.json --server %[1]s

  Ctrl-C stops Flow and its PostgreSQL; data stays in the state folder.

`, host, dbURL, dir, admin)
}

// printTLSBanner is flow dev's banner when it serves mutual TLS
// (CERTDIR or FLOW_TLS_* set): every call needs a client certificate.
func printTLSBanner(w io.Writer, addr, adminAddr, dbURL, dir string) {
	host := bannerHost(addr)
	fmt.Fprintf(w, `
  Flow is running (dev mode, mutual TLS)

  API        https://%[1]s   (gRPC, gRPC-Web and Connect JSON on one port)
             client certificates required; roles from FLOW_AUTHZ_POLICY
             (flow cert dev makes a CA, a server pair and operator, admin
             and viewer clients: docs/security.md)
  Admin      http://%[4]s/metrics
  Database   %[2]s
  State      %[3]s

  Try it:
    flow --ca CA --cert CERT --key KEY rack list --server %[1]s

  Ctrl-C stops Flow and its PostgreSQL; data stays in the state folder.

`, host, dbURL, dir, bannerHost(adminAddr))
}

// bannerHost turns a listen address into one to connect to.
func bannerHost(addr string) string {
	host := addr
	if strings.HasPrefix(host, ":") {
		host = "127.0.0.1" + host
	}
	if strings.HasPrefix(host, "0.0.0.0:") || strings.HasPrefix(host, "[::]:") {
		host = "127.0.0.1:" + host[strings.LastIndex(host, ":")+1:]
	}
	return host
}
