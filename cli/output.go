package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/google/uuid"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// emit prints msg as protojson with -o json, as YAML with -o yaml, else
// calls table (which reads c.wide() for -o wide).
func (c *env) emit(msg proto.Message, table func(w io.Writer)) error {
	switch c.format {
	case "json":
		b, err := marshalJSON(msg)
		if err != nil {
			return err
		}
		_, err = c.out.Write(b)
		return err
	case "yaml":
		b, err := marshalYAML(msg)
		if err != nil {
			return err
		}
		_, err = c.out.Write(b)
		return err
	case "csv":
		return usageError{errors.New("-o csv is for flow compliance; use -o json or yaml here")}
	}
	table(c.out)
	return nil
}

// marshalJSON returns msg as indented protojson ending in a newline.
func marshalJSON(msg proto.Message) ([]byte, error) {
	b, err := protojson.Marshal(msg)
	if err != nil {
		return nil, err
	}
	// protojson's spacing is deliberately unstable; re-indent so the output
	// is the same from run to run.
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// marshalYAML returns msg's protojson as YAML, fields in protojson's order.
// JSON is YAML, so the YAML library reads protojson into a node tree (which
// keeps the order, unlike a map) and writes it back in block style.
func marshalYAML(msg proto.Message) ([]byte, error) {
	b, err := protojson.Marshal(msg)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	blockStyle(&doc)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return out.Bytes(), enc.Close()
}

// blockStyle drops the flow style and quoting that JSON's syntax gave the
// nodes; the encoder quotes what needs it (strings that would read as
// numbers or booleans, say).
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
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
func (c *env) readProtoJSON(path string, msg proto.Message) error {
	b, err := c.readFileArg(path)
	if err != nil {
		return err
	}
	if err := protojson.Unmarshal(b, msg); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readFileArg reads path ("-": stdin).
func (c *env) readFileArg(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(c.stdin)
	}
	return os.ReadFile(path)
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
