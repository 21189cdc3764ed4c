// Package cli is flow's command-line client: the nouns rack, component,
// nvl-domain, rule, power, firmware, bringup, ingest, decommission, task and
// rollout,
// as cobra commands that talk to a running Flow server only through the
// generated Connect client (proto/gen/v1/flowv1connect). The server
// commands (serve, dev, db, ...) live in package app, which builds the root
// command and calls AddCommands.
//
// The conventions are kubectl's and gh's:
//
//	flow [--server ADDR] [-o table|wide|json|yaml] NOUN VERB [ARGS] [FLAGS]
//
// Global flags (--server, FLOW_SERVER, default 127.0.0.1:50051; -o; the
// TLS files --ca, --cert and --key, else FLOW_TLS_* or CERTDIR, tls.go) go
// anywhere on the line. Help (--help at every level, `flow help NOUN`) goes
// to stdout and exits 0. Bad usage exits 2 with a one-line error and a hint
// (ExitCode). Racks, components, rules and tasks are named by UUID or by
// name (tasks: by a unique UUID prefix); names are resolved through the API
// (resolve.go) and an ambiguous name is an error listing the candidates.
//
// # Adding a noun
//
// A noun is one file (schedule.go, rollout.go, sync.go, ...) holding one
// noun value and its printers:
//
//	var scheduleNoun = noun{
//		name:    "schedule",
//		summary: "task schedules",
//		verbs: []verb{
//			{name: "list", args: "[--rack R]", summary: "list schedules",
//				flags: func(fs *pflag.FlagSet) runFunc {
//					rack := fs.String("rack", "", "only this rack (UUID or name)")
//					return func(ctx context.Context, c *env, args []string) error {
//						if err := wantArgs(args, 0, "no arguments"); err != nil {
//							return err
//						}
//						res, err := c.client.ListSchedules(ctx, req)
//						...
//						return c.emit(res, func(w io.Writer) { printTable(w, headers, rows) })
//					}
//				}},
//		},
//	}
//
// and one line in nouns below. A verb declares its flags on fs and returns
// the function that runs with the positional arguments; c carries the
// client, the output writer and the -o format. Shared helpers: output.go
// (emit: -o json/yaml print the response message, table/wide call the
// table printer; printTable), resolve.go (resolveRack, resolveComponent,
// resolveRule, resolveTasks: names or IDs to UUIDs), wantArgs and
// usageError for bad usage (exit 2).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nicoflow/flow/proto/gen/flow/admin/v1/adminv1connect"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// DefaultServer is where the CLI looks for Flow when neither --server nor
// FLOW_SERVER says otherwise.
const DefaultServer = "127.0.0.1:50051"

// nouns are the CLI's nouns in help order; a new noun is one line here.
var nouns = []noun{
	withVerbs(rackNoun, rackSetVerb),
	componentNoun,
	nvlDomainNoun,
	ruleNoun,
	powerNoun,
	firmwareNoun, bringUpNoun, ingestNoun, decommissionNoun,
	withVerbs(taskNoun, taskReleaseVerb),
	withVerbs(rolloutNoun, rolloutReleaseVerb),
	scheduleNoun,
	eventRuleNoun, leakNoun,
	syncNoun,
	baselineNoun, complianceNoun,
	approvalNoun,
	windowNoun, freezeNoun,
	webhookNoun,
	powerBudgetNoun,
}

// GroupID is the help group of the client commands.
const GroupID = "client"

// Options configure AddCommands.
type Options struct {
	// Getenv reads the environment (FLOW_SERVER, FLOW_TLS_*, CERTDIR).
	Getenv func(string) string
	// Stdin is read by -f - and --credentials-stdin; nil: os.Stdin.
	Stdin io.Reader
}

// AddCommands adds the client nouns to root, and the global flags --server
// and -o (--output) as root's persistent flags.
func AddCommands(root *cobra.Command, o Options) {
	g := &globals{stdin: o.Stdin, getenv: o.Getenv}
	if g.stdin == nil {
		g.stdin = os.Stdin
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", or(o.Getenv("FLOW_SERVER"), DefaultServer), "Flow server address, host:port or URL (FLOW_SERVER)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table, wide, json, yaml (csv: flow compliance)")
	pf.StringVar(&g.ca, "ca", "", "CA bundle (PEM) that verifies the server; turns TLS on (FLOW_TLS_CA, else CERTDIR/ca.crt)")
	pf.StringVar(&g.cert, "cert", "", "client certificate (PEM) for mutual TLS (FLOW_TLS_CERT, else CERTDIR/tls.crt)")
	pf.StringVar(&g.key, "key", "", "private key (PEM) of --cert (FLOW_TLS_KEY, else CERTDIR/tls.key)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	if !root.ContainsGroup(GroupID) {
		root.AddGroup(&cobra.Group{ID: GroupID, Title: "Client commands (talk to a running server, --server or FLOW_SERVER):"})
	}
	for _, n := range nouns {
		root.AddCommand(n.command(g))
	}
}

// globals are the values of the global flags.
type globals struct {
	server        string
	output        string
	ca, cert, key string // TLS files; see ClientTLSFiles
	stdin         io.Reader
	getenv        func(string) string
}

// csv is for flow compliance only; other commands refuse it.
var outputFormats = []string{"table", "wide", "json", "yaml", "csv"}

// env returns what a verb runs with, checking -o.
func (g *globals) env(cmd *cobra.Command) (*env, error) {
	ok := false
	for _, f := range outputFormats {
		ok = ok || g.output == f
	}
	if !ok {
		return nil, usageError{fmt.Errorf("-o must be one of %s, not %q", strings.Join(outputFormats, ", "), g.output)}
	}
	files := ClientTLSFiles(g.getenv, g.ca, g.cert, g.key)
	hc, base, err := HTTPClient(g.server, files, 60*time.Second)
	if err != nil {
		return nil, err
	}
	// A sync cycle over a large site can take minutes: the admin client
	// waits longer than the API client.
	ahc, _, err := HTTPClient(g.server, files, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	return &env{client: flowv1connect.NewFlowLeanClient(hc, base), admin: adminv1connect.NewAdminServiceLeanClient(ahc, base), server: g.server, out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(),
		format: g.output, stdin: g.stdin}, nil
}

// noun is one CLI noun (rack, component, ...) with its verbs in help order.
// A noun with one verb named "" runs it itself (flow bringup RACK...).
type noun struct {
	name    string
	aliases []string
	summary string
	verbs   []verb
	// subnouns are nouns nested under this one (`flow schedule scope add`).
	subnouns []noun
}

// verb is one verb of a noun.
type verb struct {
	name    string
	aliases []string
	args    string // usage of positional args and verb flags, e.g. "ID [--components]"
	summary string
	// flags declares the verb's own flags on fs; the returned run is called
	// after parsing with the positional arguments.
	flags func(fs *pflag.FlagSet) runFunc
	// complete completes the positional arguments (names of racks, ...).
	complete completer
}

// runFunc runs a verb with its positional arguments.
type runFunc = func(ctx context.Context, c *env, args []string) error

// env is what a verb runs with.
type env struct {
	client flowv1connect.FlowClient
	admin  adminv1connect.AdminServiceClient // Flow's own admin service
	server string
	out    io.Writer
	errOut io.Writer
	format string // table, wide, json or yaml
	stdin  io.Reader
}

// structured reports whether -o asks for the response message (json, yaml)
// rather than a table.
func (c *env) structured() bool { return c.format == "json" || c.format == "yaml" }

// wide reports whether -o wide asks for the tables' extra columns.
func (c *env) wide() bool { return c.format == "wide" }

func (n noun) command(g *globals) *cobra.Command {
	if len(n.verbs) == 1 && n.verbs[0].name == "" {
		cmd := n.verbs[0].command(g)
		cmd.Use = n.name + " " + n.verbs[0].args
		cmd.Short, cmd.Long = n.summary, n.summary+".\n\n"+n.verbs[0].summary+"."
		cmd.Aliases, cmd.GroupID = n.aliases, GroupID
		return cmd
	}
	cmd := &cobra.Command{
		Use:     n.name,
		Aliases: n.aliases,
		Short:   n.summary,
		GroupID: GroupID,
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown %s verb %q", n.name, args[0])
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, ", "))
			}
			return usageError{errors.New(msg)}
		},
		ValidArgsFunction:          cobra.NoFileCompletions,
		SuggestionsMinimumDistance: 2,
	}
	for _, v := range n.verbs {
		cmd.AddCommand(v.command(g))
	}
	for _, sub := range n.subnouns {
		sc := sub.command(g)
		sc.GroupID = "" // groups are the root's
		cmd.AddCommand(sc)
	}
	return cmd
}

func (v verb) command(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     strings.TrimSpace(v.name + " " + v.args),
		Aliases: v.aliases,
		Short:   v.summary,
		Args:    cobra.ArbitraryArgs,
	}
	run := v.flags(cmd.Flags())
	cmd.Flags().SortFlags = false
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.env(cmd)
		if err != nil {
			return err
		}
		return explain(run(cmd.Context(), c, args))
	}
	if v.complete != nil {
		cmd.ValidArgsFunction = v.complete.cobra(g)
	} else {
		cmd.ValidArgsFunction = cobra.NoFileCompletions
	}
	for name, f := range flagCompleters {
		if cmd.Flags().Lookup(name) != nil {
			_ = cmd.RegisterFlagCompletionFunc(name, f.cobra(g))
		}
	}
	if cmd.Flags().Lookup("status") != nil && v.name == "list" {
		_ = cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions(taskStatuses, cobra.ShellCompDirectiveNoFileComp))
	}
	return cmd
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
