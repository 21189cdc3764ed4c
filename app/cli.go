package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// The CLI is `flow <noun> <verb> [args] [flags]`, a Connect client of a
// running server. A noun is a cliNoun value listed in cliNouns (run.go);
// adding one is one line there. Every verb gets the global flags:
//
//	--server ADDR   server address (FLOW_SERVER, default 127.0.0.1:50051)
//	-o table|json   output: aligned tables (default) or protojson
//
// Failed calls print `flow: <code>: <message>` (main prints the error) and
// exit non-zero.

// defaultServer is where the CLI looks for Flow when neither --server nor
// FLOW_SERVER says otherwise.
const defaultServer = "127.0.0.1:50051"

// cliNoun is one CLI noun (rack, component, ...) with its verbs in usage
// order.
type cliNoun struct {
	name    string
	summary string
	verbs   []cliVerb
}

// cliVerb is one verb of a noun.
type cliVerb struct {
	name    string
	args    string // usage of positional args and verb flags, e.g. "ID [--components]"
	summary string
	// flags declares the verb's own flags on fs; the returned run is called
	// after parsing with the positional arguments.
	flags func(fs *flag.FlagSet) runFunc
}

// runFunc runs a verb with its positional arguments.
type runFunc = func(ctx context.Context, c *cliEnv, args []string) error

// cliEnv is what a verb runs with.
type cliEnv struct {
	client flowv1connect.FlowClient
	out    io.Writer
	json   bool
}

// runNoun runs `flow <noun> <verb> ...`.
func runNoun(ctx context.Context, n cliNoun, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, nounUsage(n))
		if len(args) == 0 {
			return usageError{fmt.Errorf("%s needs a verb", n.name)}
		}
		return nil
	}
	if len(n.verbs) == 1 && n.verbs[0].name == "" {
		// A one-verb noun (flow bringup RACK...) takes its arguments directly.
		args = append([]string{""}, args...)
	}
	var verb *cliVerb
	for i := range n.verbs {
		if n.verbs[i].name == args[0] {
			verb = &n.verbs[i]
		}
	}
	if verb == nil {
		fmt.Fprint(stderr, nounUsage(n))
		return usageError{fmt.Errorf("unknown %s verb %q", n.name, args[0])}
	}
	fs := newFlagSet(n.name+" "+verb.name, stderr)
	server := fs.String("server", or(getenv("FLOW_SERVER"), defaultServer), "Flow server address, host:port or URL (FLOW_SERVER)")
	output := fs.String("o", "table", "output format: table or json")
	run := verb.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: flow %s %s %s\n\n%s\n\nflags:\n", n.name, verb.name, verb.args, verb.summary)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return usageError{fmt.Errorf("-o must be table or json, not %q", *output)}
	}
	env := &cliEnv{client: newCLIClient(*server), out: stdout, json: *output == "json"}
	return run(ctx, env, pos)
}

func nounUsage(n cliNoun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "flow %s: %s\n\nUsage:\n", n.name, n.summary)
	for _, v := range n.verbs {
		fmt.Fprintf(&b, "  flow %s %s %s\n      %s\n", n.name, v.name, v.args, v.summary)
	}
	fmt.Fprint(&b, "\nGlobal flags: --server ADDR (FLOW_SERVER, default "+defaultServer+"), -o table|json\n")
	return b.String()
}

// parseInterleaved parses flags that may come before, between or after
// positional arguments ("get ID --components").
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// newCLIClient returns a Connect (binary proto over HTTP/1.1) client of the
// server at addr ("host:port" or a URL).
func newCLIClient(addr string) flowv1connect.FlowClient {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return flowv1connect.NewFlowClient(&http.Client{Timeout: 60 * time.Second}, strings.TrimRight(base, "/"))
}

// emit prints msg as protojson with -o json, else calls table.
func (c *cliEnv) emit(msg proto.Message, table func(w io.Writer)) error {
	if c.json {
		b, err := protojson.Marshal(msg)
		if err != nil {
			return err
		}
		// protojson's spacing is deliberately unstable; re-indent so the
		// output is the same from run to run.
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return err
		}
		out.WriteByte('\n')
		_, err = out.WriteTo(c.out)
		return err
	}
	table(c.out)
	return nil
}

// printTable writes rows under headers, columns aligned.
func printTable(w io.Writer, headers []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(headers, "\t"))
	for _, r := range rows {
		for i := range r {
			if r[i] == "" {
				r[i] = "-"
			}
		}
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// readProtoJSON reads a protojson message from path ("-": stdin).
func readProtoJSON(path string, msg proto.Message) error {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return err
	}
	if err := protojson.Unmarshal(b, msg); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// wantArgs checks the number of positional arguments.
func wantArgs(args []string, n int, usage string) error {
	if len(args) != n {
		return usageError{fmt.Errorf("want %s", usage)}
	}
	return nil
}

// identifier turns a CLI argument into a wire Identifier: a UUID becomes
// the id, anything else the name.
func identifier(s string) *flowv1.Identifier {
	if _, err := uuid.Parse(s); err == nil {
		return &flowv1.Identifier{Id: &flowv1.UUID{Id: s}}
	}
	return &flowv1.Identifier{Name: s}
}

// stringQuery builds a filter query from a comma-separated CLI value.
func stringQuery(v string, wildcard bool) *flowv1.StringQueryInfo {
	return &flowv1.StringQueryInfo{Patterns: strings.Split(v, ","), IsWildcard: wildcard, UseOr: true}
}

// sortedKeys returns m's keys in order (for stable usage text).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
