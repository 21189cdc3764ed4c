// Package app is Flow's composition root: configuration, logging, the server
// and its interceptors, wiring of every domain, and the server commands of
// flow (serve, dev, simulate, db, key, config, version). The client commands
// are package cli's, flow bench is package bench's; Run builds the one cobra
// command tree of both.
package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nicoflow/flow/bench"
	"github.com/nicoflow/flow/cli"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/pglocal"
	"github.com/nicoflow/flow/firmware"
)

// usageError marks errors caused by a bad command line or configuration; the
// process exits with status 2 for them.
func usageError(err error) error { return cli.UsageError(err) }

// ExitCode returns the process exit status for an error returned by Run: 2
// for bad usage, 130 for an interrupted watch, 1 otherwise.
func ExitCode(err error) int { return cli.ExitCode(err) }

// Run runs the flow command given by args (os.Args shape) with the
// environment read through getenv. It returns when the command is done or
// ctx is cancelled (SIGINT/SIGTERM).
func Run(ctx context.Context, args []string, getenv func(string) string) error {
	return run(ctx, args, getenv, os.Stdout, os.Stderr)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return cli.Execute(ctx, newRoot(getenv, stdout, stderr), args[1:], stdout, stderr)
}

// serverGroup is the help group of the server commands.
const serverGroup = "server"

// newRoot returns the command tree of flow: the server commands, then the
// client nouns of package cli.
func newRoot(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	b := ReadBuild()
	root := &cobra.Command{
		Use:     "flow",
		Short:   "rack inventory and durable rack operations on PostgreSQL",
		Long:    "flow: rack inventory and durable rack operations on PostgreSQL.\n\nOne binary: the server (flow serve, flow dev), its tools, and a CLI client of a running server.",
		Version: b.Version,
		Example: `  flow dev --seed 1                      # a server on a private PostgreSQL, one demo rack
  flow rack list                         # the CLI, against 127.0.0.1:50051 (--server, FLOW_SERVER)
  flow power on demo-0000 --wait         # power a rack on and follow the task
  flow task list --status running -o wide
  source <(flow completion bash)         # shell completion`,
	}
	root.SetVersionTemplate(versionText(b))
	root.AddGroup(&cobra.Group{ID: serverGroup, Title: "Server commands:"})
	for _, c := range []*cobra.Command{
		serveCommand(getenv, stderr),
		devCommand(getenv, stdout, stderr),
		simulateCommand(stdout, stderr),
		bench.Command(stdout, stderr),
		dbCommand(getenv, stdout),
		keyCommand(stdout, stderr),
		certCommand(stdout),
		configCommand(getenv, stdout),
		{
			Use:   "version",
			Short: "print build information",
			Args:  cobra.NoArgs,
			RunE: func(*cobra.Command, []string) error {
				_, err := io.WriteString(stdout, versionText(b))
				return err
			},
		},
	} {
		c.GroupID = serverGroup
		c.SetUsageTemplate(serverUsage)
		root.AddCommand(c)
	}
	cli.AddCommands(root, cli.Options{Getenv: getenv})
	root.PersistentPreRunE = refuseClientFlags
	return root
}

// serverUsage is cobra's usage template without its "Global Flags"
// section: the client's global flags (--server, -o, --ca, --cert, --key)
// mean nothing to a server command, so its help shows its own flags only.
var serverUsage = strings.Replace((&cobra.Command{}).UsageTemplate(), `{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}`, "", 1)

// refuseClientFlags refuses the client's global flags on a server command
// (flow dev --server X would otherwise be silently ignored).
func refuseClientFlags(cmd *cobra.Command, _ []string) error {
	top := cmd
	for top.HasParent() && top.Parent().HasParent() {
		top = top.Parent()
	}
	if top.GroupID != serverGroup {
		return nil
	}
	var err error
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if f.Changed && err == nil {
			err = usageError(fmt.Errorf("--%s is a flag of the client commands; %s does not take it", f.Name, cmd.CommandPath()))
		}
	})
	return err
}

func versionText(b Build) string {
	return fmt.Sprintf("flow %s\ncommit  %s\ntime    %s\ngo      %s\n", b.Version, or(b.Revision, "unknown"), or(b.Time, "unknown"), b.GoVersion)
}

// command returns a server command without positional arguments: flags
// declares its flags and returns the function that runs it.
func command(use, short string, flags func(fs *pflag.FlagSet) func(ctx context.Context) error) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs}
	run := flags(cmd.Flags())
	cmd.Flags().SortFlags = false
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return run(cmd.Context()) }
	return cmd
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// failing returns a run function that fails with err (configuration that
// did not load).
func failing(err error) func(context.Context) error {
	return func(context.Context) error { return err }
}

func serveCommand(getenv func(string) string, stderr io.Writer) *cobra.Command {
	var sf serveFlags
	cmd := command("serve", "run the server", func(fs *pflag.FlagSet) func(context.Context) error {
		cfg, err := LoadConfig(getenv)
		fs.StringVar(&cfg.ListenAddr, "listen", cfg.ListenAddr, "address to listen on (FLOW_LISTEN_ADDR)")
		fs.IntVarP(&sf.listenPort, "listen-port", "p", 50051, "port to listen on, on every interface (upstream's flag; same as --listen :PORT)")
		fs.IntVar(&sf.metricsPort, "metrics-port", DefaultMetricsPort, "serve /metrics, /healthz and /readyz on this port, on every interface (upstream's flag); not given: /metrics is on the admin listener only")
		fs.StringVarP(&sf.componentConfig, "component-config", "c", "", "component-manager YAML file (overrides COMPONENT_MANAGER_CONFIG)")
		fs.BoolVar(&cfg.DevMode, "dev-mode", cfg.DevMode, "enable server reflection and debug logging (FLOW_DEV_MODE); needs FLOW_ENV=development")
		fs.StringArrayVar(&sf.identities, "allowed-service-identity", nil, "SPIFFE ID allowed to call Flow, as admin (repeatable; upstream's flag; not with FLOW_AUTHORIZATION_ALLOWED_SERVICE_IDENTITIES_FILE)")
		fs.StringVar(&sf.caCert, "ca-cert", "", "CA bundle that client certificates must chain to (FLOW_TLS_CA; with --tls-cert and --tls-key)")
		fs.StringVar(&sf.tlsCert, "tls-cert", "", "server certificate (FLOW_TLS_CERT)")
		fs.StringVar(&sf.tlsKey, "tls-key", "", "server certificate's key (FLOW_TLS_KEY)")
		migrate := fs.Bool("migrate", false, "apply database migrations before serving (always when FLOW_ENV is set, as upstream's serve)")
		sf.changed = fs.Changed
		return func(ctx context.Context) error {
			if err != nil && sf.changed("component-config") {
				// -c replaces COMPONENT_MANAGER_CONFIG: a bad file there
				// does not count.
				again, againErr := LoadConfig(func(k string) string {
					if k == "COMPONENT_MANAGER_CONFIG" {
						return ""
					}
					return getenv(k)
				})
				if againErr == nil {
					again.ListenAddr, again.DevMode = cfg.ListenAddr, cfg.DevMode
					cfg, err = again, nil
				}
			}
			if err != nil {
				return err
			}
			if err := sf.finish(&cfg, getenv); err != nil {
				return err
			}
			logger := newLogger(stderr, cfg.LogFormat, cfg.logLevel())
			logger.InfoContext(ctx, "starting flow", "build", ReadBuild().Version, "config", cfg)
			if len(cfg.Unneeded) > 0 {
				logger.InfoContext(ctx, "upstream settings accepted and not needed: Flow runs on PostgreSQL alone, without Temporal", "variables", cfg.Unneeded)
			}
			srv, err := newServer(ctx, cfg, logger, serveOptions{migrate: *migrate || cfg.EnvSet})
			if err != nil {
				return err
			}
			return srv.run(ctx)
		}
	})
	return cmd
}

// errSchemaBehind is returned by flow db status when migrations are
// pending, so that scripts can test it (exit status 1).
var errSchemaBehind = errors.New("the schema is behind: run `flow db migrate`")

func dbCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	db := &cobra.Command{Use: "db", Short: "schema management: migrate, status", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	db.AddCommand(command("migrate", "apply Flow's and River's migrations; --rollback takes Flow's schema back", func(fs *pflag.FlagSet) func(context.Context) error {
		rollback := fs.StringP("rollback", "r", "", "roll Flow's schema back instead: 'last' undoes the newest applied migration, a version (flow db status shows them, e.g. 120) undoes every newer one; refused while tasks are active")
		force := fs.Bool("force", false, "with --rollback: roll back even while tasks are waiting, pending or running")
		fs.Bool("ignore-signature-changes", false, "upstream's escape hatch: accepted, not needed (Flow's migrations carry no signatures)")
		_ = fs.MarkHidden("ignore-signature-changes")
		return func(ctx context.Context) error {
			if fs.Changed("rollback") {
				return runRollback(ctx, *rollback, *force, getenv, stdout)
			}
			if *force {
				return usageError(errors.New("--force goes with --rollback"))
			}
			return runDB(ctx, "migrate", getenv, stdout)
		}
	}))
	db.AddCommand(command("status", "print the schema versions; exits 1 when migrations are pending", func(*pflag.FlagSet) func(context.Context) error {
		return func(ctx context.Context) error { return runDB(ctx, "status", getenv, stdout) }
	}))
	return db
}

// upstreamRollbackTime is the layout of upstream's --rollback value: its
// migrations are named by timestamp, Flow's by number.
const upstreamRollbackTime = "2006-01-02T15:04:05"

// runRollback is flow db migrate --rollback TARGET: TARGET is "last" or a
// migration version. It refuses while tasks are active, unless forced:
// their engine runs checkpoint into the tables a down migration may drop.
func runRollback(ctx context.Context, target string, force bool, getenv func(string) string, stdout io.Writer) error {
	var to *uint
	switch t := strings.TrimSpace(target); {
	case t == "last":
	case t == "":
		return usageError(errors.New("--rollback needs a target: last, or a migration version such as 120 (flow db status shows the current one)"))
	default:
		if _, err := time.Parse(upstreamRollbackTime, t); err == nil {
			return usageError(fmt.Errorf("--rollback %s: upstream's migrations are named by time, Flow's by number: give last, or a version such as 120 (flow db status shows the current one)", t))
		}
		v, err := strconv.ParseUint(t, 10, 32)
		if err != nil {
			return usageError(fmt.Errorf("--rollback %q: want last, or a migration version such as 120", t))
		}
		u := uint(v)
		to = &u
	}
	cfg, err := LoadConfig(getenv)
	if err != nil {
		return err
	}
	if !force {
		n, err := activeTasks(ctx, cfg.DatabaseURL)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: %d task(s) are waiting, pending or running; let them finish or cancel them, stop the servers, or pass --force", db.ErrRollback, n)
		}
	}
	from, now, err := db.Rollback(cfg.DatabaseURL, to)
	if err != nil {
		return err
	}
	st, err := db.ReadStatus(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database  %s\nflow      %d (rolled back from %d; latest %d)\nriver     %d (latest %d, unchanged)\nstatus    rolled back: serve with the binary that matches migration %d, or run `flow db migrate` to go forward again\n",
		RedactURL(cfg.DatabaseURL), now, from, st.FlowLatest, st.RiverVersion, st.RiverLatest, now)
	return nil
}

// activeTasks counts the tasks that are waiting, pending or running (0
// before the task table exists).
func activeTasks(ctx context.Context, databaseURL string) (int, error) {
	pool, err := db.Open(ctx, databaseURL, db.PoolConfig{MaxConns: 1})
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('task') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var n int
	err = pool.QueryRow(ctx, `SELECT count(*) FROM task WHERE status IN ('waiting', 'pending', 'running')`).Scan(&n)
	return n, err
}

// runDB is flow db migrate and flow db status.
func runDB(ctx context.Context, sub string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := LoadConfig(getenv)
	if err != nil {
		return err
	}
	note := ""
	if !dbConfigured(getenv) {
		// Nothing says which database: the running flow dev's, if any
		// (its state folder records its PostgreSQL), rather than the
		// localhost:5432 default no flow dev user has.
		url, dir, err := devDatabaseURL(getenv)
		if err != nil {
			return err
		}
		cfg.DatabaseURL, note = url, "  (flow dev's, in "+dir+")"
	}
	readStatus := db.ReadStatus
	if sub == "migrate" {
		readStatus = db.Migrate
	}
	st, err := readStatus(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database  %s%s\nflow      %d (latest %d)%s\nriver     %d (latest %d)\n",
		RedactURL(cfg.DatabaseURL), note, st.FlowVersion, st.FlowLatest, dirtyNote(st.FlowDirty), st.RiverVersion, st.RiverLatest)
	if !st.UpToDate() {
		fmt.Fprintln(stdout, "status    behind: run `flow db migrate`")
		return errSchemaBehind
	}
	fmt.Fprintln(stdout, "status    up to date")
	if sub == "status" {
		return printPruneStats(ctx, cfg, stdout)
	}
	return nil
}

// dbConfigured reports whether DATABASE_URL or any DB_* variable is set.
func dbConfigured(getenv func(string) string) bool {
	for _, v := range ConfigVars {
		if (v.Name == "DATABASE_URL" || strings.HasPrefix(v.Name, "DB_")) && getenv(v.Name) != "" {
			return true
		}
	}
	return false
}

// devDatabaseURL is the database of the flow dev running on the state
// folder FLOW_DEV_DATA_DIR names (default .flow/dev), or an error saying
// what to set when none runs there.
func devDatabaseURL(getenv func(string) string) (url, dir string, err error) {
	dir, err = filepath.Abs(configDefault(getenv, "FLOW_DEV_DATA_DIR"))
	if err != nil {
		return "", "", err
	}
	noDev := fmt.Errorf("no database configured and no flow dev running on %s: set DATABASE_URL "+
		"(or DB_HOST, DB_PORT, DB_USER, DB_PASSWORD, DB_NAME), or start flow dev (make run), "+
		"or name its state folder with FLOW_DEV_DATA_DIR", dir)
	if _, err := os.Stat(dir); err != nil {
		return "", dir, noDev
	}
	// Where flow dev keeps PostgreSQL (devPGDataDir), read without
	// writing: the pointer file, else <dir>/pg.
	pgData := filepath.Join(dir, "pg")
	if b, err := os.ReadFile(filepath.Join(dir, "pgdata")); err == nil {
		pgData = strings.TrimSpace(string(b))
	}
	cluster := &pglocal.Cluster{DataDir: pgData}
	port, ok := cluster.RunningPort()
	if !ok {
		return "", dir, noDev
	}
	cluster.Port = port
	return cluster.URL("flow"), dir, nil
}

// printPruneStats prints what each retention rule has pruned and the
// oldest row it kept (docs/operations.md#sizing-and-retention).
func printPruneStats(ctx context.Context, cfg Config, stdout io.Writer) error {
	pool, err := db.Open(ctx, cfg.DatabaseURL, db.PoolConfig{MaxConns: 1})
	if err != nil {
		return err
	}
	defer pool.Close()
	stats, err := db.ReadPruneStats(ctx, pool)
	if err != nil {
		return err
	}
	r := cfg.Retention
	fmt.Fprintf(stdout, "retention tasks %s, operation runs %s, events %s, river jobs %s, webhook deliveries %s, dead letters %s (pruned every %s)\n",
		retentionText(r.Tasks), retentionText(r.OperationRuns), retentionText(r.Events), retentionText(r.RiverJobs),
		retentionText(r.NotifyDelivered), retentionText(r.NotifyDead), r.Interval)
	if len(stats) == 0 {
		fmt.Fprintln(stdout, "pruned    nothing yet")
		return nil
	}
	for _, s := range stats {
		oldest := "none left"
		if s.OldestKept != nil {
			oldest = s.OldestKept.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(stdout, "pruned    %-20s %d rows (last cycle %s; oldest kept %s)\n", s.Name, s.RowsPruned, s.LastRunAt.UTC().Format(time.RFC3339), oldest)
	}
	return nil
}

func dirtyNote(dirty bool) string {
	if dirty {
		return " DIRTY: a migration failed half-way; fix the schema, then force the version"
	}
	return ""
}

func keyCommand(stdout, stderr io.Writer) *cobra.Command {
	key := &cobra.Command{Use: "key", Short: "data-encryption keys: generate, id", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	key.AddCommand(&cobra.Command{
		Use: "generate", Short: "print a new data-encryption key (base64; its ID on stderr)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			raw := make([]byte, 32)
			if _, err := rand.Read(raw); err != nil {
				return err
			}
			fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(raw))
			fmt.Fprintln(stderr, "key id", firmware.KeyID(raw))
			return nil
		},
	}, &cobra.Command{
		Use: "id FILE", Short: "print the ID (SHA-256 fingerprint) of a key file", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			raw, err := firmware.ParseKey(b)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			fmt.Fprintln(stdout, firmware.KeyID(raw))
			return nil
		},
	})
	return key
}

func configCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "print every environment variable Flow reads: the value in effect (secrets masked), the default and the meaning",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			printConfig(stdout, getenv)
			fmt.Fprintln(stdout)
			printUpstream(stdout, getenv)
			return nil
		},
	}
}

// printConfig prints ConfigVars with the values getenv gives them: set
// values as they are (a password masked), unset ones as their default.
func printConfig(w io.Writer, getenv func(string) string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tVALUE\tDEFAULT\tMEANING")
	for _, v := range ConfigVars {
		val := getenv(v.Name)
		switch {
		case val == "":
			val = or(v.Default, "-") + " (default)"
		case v.Name == "DB_PASSWORD":
			val = "xxxxx"
		case strings.HasSuffix(v.Name, "DATABASE_URL"):
			val = RedactURL(val)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, val, or(v.Default, "-"), v.Meaning)
	}
	tw.Flush()
}
