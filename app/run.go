// Package app is Flow's composition root: configuration, logging, the server
// and its interceptors, wiring of every domain, and the flow commands.
package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/firmware"
)

// usageError marks errors caused by a bad command line or configuration; the
// process exits with status 2 for them.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// ExitCode returns the process exit status for an error returned by Run.
func ExitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

const usage = `flow: rack inventory and durable rack operations on PostgreSQL

Usage:
  flow serve [--listen ADDR] [--dev-mode] [--migrate]   run the server
  flow dev [--data-dir DIR] [--listen ADDR] [--seed N]  run Flow on a private PostgreSQL (the embedded default)
  flow simulate [--demo] [--seed FILE]                  run the NICo Core and PSM simulators (see simulate --help)
  flow bench [--racks N] [--components M] [--latency D] benchmark power-on against the simulators (docs/bench.md)
  flow db migrate                                       apply Flow's and River's migrations
  flow db status                                        print the schema versions
  flow version                                          print build information
  flow config                                           print every environment variable Flow reads
  flow key generate                                     print a new data-encryption key (base64)
  flow key id FILE                                      print the ID (SHA-256 fingerprint) of a key file
  flow cert dev DIR [--host NAME]                       write a throwaway CA, server and per-role client certificates (docs/security.md)

CLI (a Connect client of a running server; --server ADDR or FLOW_SERVER,
default 127.0.0.1:50051; -o table|json):
  flow rack create|list|get|patch|delete|purge          racks
  flow component list|get|add|patch|delete|purge        components
  flow nvl-domain create|attach|detach|list|racks       NVLink domains
  flow rule create|update|delete|get|list|set-default  operation rules (YAML or JSON files)
  flow rule associate|disassociate|associations|load    per-rack rules; YAML batch of defaults
  flow power on|off|reset|cycle RACK... [--wait]        power operations, one task per rack
  flow task list|get|cancel|watch                       tasks and their stage and step progress
  flow firmware upgrade RACK... [--credentials-file F]  firmware upgrades (docs/firmware.md)
  flow bringup|ingest|decommission RACK... [--wait]     bring-up, ingestion, decommission (docs/rack-operations.md)

Run 'flow <command> --help' for a command's flags, 'flow <noun>' for its verbs.
`

// cliNouns are the CLI's nouns (cli.go); a new noun is one line here.
var cliNouns = []cliNoun{
	rackNoun,
	componentNoun,
	nvlDomainNoun,
	ruleNoun,
	powerNoun,
	firmwareNoun, bringUpNoun, ingestNoun, decommissionNoun,
	taskNoun,
}

// Run runs the flow command given by args (os.Args shape) with the
// environment read through getenv. It returns when the command is done or
// ctx is cancelled (SIGINT/SIGTERM).
func Run(ctx context.Context, args []string, getenv func(string) string) error {
	return run(ctx, args, getenv, os.Stdout, os.Stderr)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		fmt.Fprint(stderr, usage)
		return usageError{errors.New("no command given")}
	}
	cmd, rest := args[1], args[2:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, getenv, stderr)
	case "dev":
		return runDev(ctx, rest, getenv, stdout, stderr)
	case "db":
		return runDB(ctx, rest, getenv, stdout, stderr)
	case "simulate":
		return runSimulate(ctx, rest, stdout, stderr)
	case "bench":
		return runBench(ctx, rest, stdout, stderr)
	case "version", "--version":
		b := ReadBuild()
		fmt.Fprintf(stdout, "flow %s\ncommit  %s\ntime    %s\ngo      %s\n", b.Version, or(b.Revision, "unknown"), or(b.Time, "unknown"), b.GoVersion)
		return nil
	case "config":
		fmt.Fprintf(stdout, "%-30s %-12s %s\n", "VARIABLE", "DEFAULT", "MEANING")
		for _, v := range ConfigVars {
			fmt.Fprintf(stdout, "%-30s %-12s %s\n", v.Name, or(v.Default, "-"), v.Meaning)
		}
		return nil
	case "key":
		return runKey(rest, stdout, stderr)
	case "cert":
		return runCert(rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	for _, n := range cliNouns {
		if n.name == cmd {
			return runNoun(ctx, n, rest, getenv, stdout, stderr)
		}
	}
	fmt.Fprint(stderr, usage)
	return usageError{fmt.Errorf("unknown command %q", cmd)}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("flow "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, turning flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	return nil
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := LoadConfig(getenv)
	if err != nil {
		return err
	}
	fs := newFlagSet("serve", stderr)
	fs.StringVar(&cfg.ListenAddr, "listen", cfg.ListenAddr, "address to listen on (FLOW_LISTEN_ADDR)")
	fs.BoolVar(&cfg.DevMode, "dev-mode", cfg.DevMode, "enable server reflection and debug logging (FLOW_DEV_MODE)")
	migrate := fs.Bool("migrate", false, "apply database migrations before serving")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger := newLogger(stderr, cfg.LogFormat, cfg.logLevel())
	logger.InfoContext(ctx, "starting flow", "build", ReadBuild().Version, "config", cfg)
	srv, err := newServer(ctx, cfg, logger, serveOptions{migrate: *migrate})
	if err != nil {
		return err
	}
	return srv.run(ctx)
}

func runDB(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "migrate" && args[0] != "status") {
		fmt.Fprint(stderr, "usage: flow db migrate | flow db status\n")
		return usageError{errors.New("db needs a subcommand: migrate or status")}
	}
	cfg, err := LoadConfig(getenv)
	if err != nil {
		return err
	}
	if err := parseFlags(newFlagSet("db "+args[0], stderr), args[1:]); err != nil {
		return err
	}
	readStatus := db.ReadStatus
	if args[0] == "migrate" {
		readStatus = db.Migrate
	}
	st, err := readStatus(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database  %s\nflow      %d (latest %d)%s\nriver     %d (latest %d)\n",
		RedactURL(cfg.DatabaseURL), st.FlowVersion, st.FlowLatest, dirtyNote(st.FlowDirty), st.RiverVersion, st.RiverLatest)
	if !st.UpToDate() {
		fmt.Fprintln(stdout, "status    behind: run `flow db migrate`")
	} else {
		fmt.Fprintln(stdout, "status    up to date")
	}
	return nil
}

func dirtyNote(dirty bool) string {
	if dirty {
		return " DIRTY: a migration failed half-way; fix the schema, then force the version"
	}
	return ""
}

func runKey(args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) == 1 && args[0] == "generate":
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return err
		}
		fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(raw))
		fmt.Fprintln(stderr, "key id", firmware.KeyID(raw))
		return nil
	case len(args) == 2 && args[0] == "id":
		b, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		raw, err := firmware.ParseKey(b)
		if err != nil {
			return fmt.Errorf("%s: %w", args[1], err)
		}
		fmt.Fprintln(stdout, firmware.KeyID(raw))
		return nil
	}
	fmt.Fprint(stderr, "usage: flow key generate | flow key id FILE\n")
	return usageError{errors.New("key needs a subcommand: generate or id FILE")}
}
