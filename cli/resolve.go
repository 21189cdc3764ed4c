package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Names or IDs: every argument or flag that names a rack, component, rule
// or task takes its UUID or its name (a task, which has none: a unique
// prefix of its UUID). Names are resolved here, through the API; a name
// that matches several objects is an error listing them.

// pageLimit is the page size of the look-ups (the server's maximum).
const pageLimit = 1000

// resolver turns a name or UUID given on the command line into a UUID.
type resolver func(ctx context.Context, c *env, s string) (*flowv1.UUID, error)

// candidate is one object a name matched.
type candidate struct{ id, label string }

// pick returns the one match of name among cands.
func pick(kind, name string, cands []candidate) (*flowv1.UUID, error) {
	switch len(cands) {
	case 0:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no %s is named %q", kind, name))
	case 1:
		return &flowv1.UUID{Id: cands[0].id}, nil
	}
	list := make([]string, len(cands))
	for i, c := range cands {
		list[i] = c.id
		if c.label != "" {
			list[i] += " (" + c.label + ")"
		}
	}
	return nil, connect.NewError(connect.CodeInvalidArgument,
		fmt.Errorf("%d %ss are named %q: %s; give a UUID", len(cands), kind, name, strings.Join(list, ", ")))
}

func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil
}

// resolveRack turns a RACK argument into a rack UUID: a UUID is used as is,
// anything else must be exactly one rack's name.
func resolveRack(ctx context.Context, c *env, s string) (*flowv1.UUID, error) {
	if isUUID(s) {
		return &flowv1.UUID{Id: s}, nil
	}
	cands, err := liveRacksNamed(ctx, c, s)
	if err != nil {
		return nil, err
	}
	return pick("rack", s, cands)
}

// liveRacksNamed returns the live racks named s (labelled by serial).
func liveRacksNamed(ctx context.Context, c *env, s string) ([]candidate, error) {
	// The name filter matches substrings; page through the matches and keep
	// exact ones.
	var cands []candidate
	for offset := int32(0); ; {
		res, err := c.client.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{
			Filters: []*flowv1.Filter{{
				Field:     &flowv1.Filter_RackField{RackField: flowv1.RackFilterField_RACK_FILTER_FIELD_NAME},
				QueryInfo: &flowv1.StringQueryInfo{Patterns: []string{s}},
			}},
			Pagination: &flowv1.Pagination{Offset: offset, Limit: pageLimit},
		})
		if err != nil {
			return nil, err
		}
		for _, r := range res.GetRacks() {
			if r.GetInfo().GetName() == s {
				cands = append(cands, candidate{id: r.GetInfo().GetId().GetId(), label: r.GetInfo().GetSerialNumber()})
			}
		}
		offset += int32(len(res.GetRacks()))
		if len(res.GetRacks()) == 0 || offset >= res.GetTotal() {
			return cands, nil
		}
	}
}

// resolveComponent turns a COMPONENT argument into a component UUID: a UUID
// is used as is, anything else must be exactly one component's name.
func resolveComponent(ctx context.Context, c *env, s string) (*flowv1.UUID, error) {
	if isUUID(s) {
		return &flowv1.UUID{Id: s}, nil
	}
	var cands []candidate
	var racks []string
	for offset := int32(0); ; {
		res, err := c.client.GetComponents(ctx, &flowv1.GetComponentsRequest{
			Filters: []*flowv1.Filter{{
				Field:     &flowv1.Filter_ComponentField{ComponentField: flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_NAME},
				QueryInfo: &flowv1.StringQueryInfo{Patterns: []string{s}},
			}},
			Pagination: &flowv1.Pagination{Offset: offset, Limit: pageLimit},
		})
		if err != nil {
			return nil, err
		}
		for _, comp := range res.GetComponents() {
			if comp.GetInfo().GetName() == s {
				cands = append(cands, candidate{id: comp.GetInfo().GetId().GetId(), label: comp.GetRackId().GetId()})
				racks = append(racks, comp.GetRackId().GetId())
			}
		}
		offset += int32(len(res.GetComponents()))
		if len(res.GetComponents()) == 0 || offset >= res.GetTotal() {
			break
		}
	}
	if len(cands) > 1 {
		// Name the racks of the candidates: component names repeat across
		// racks.
		names := rackNamesByID(ctx, c, racks)
		for i := range cands {
			cands[i].label = "rack " + or(names[cands[i].label], cands[i].label)
		}
	}
	return pick("component", s, cands)
}

// resolveRule turns a RULE argument into a rule UUID: a UUID is used as is,
// anything else must be exactly one rule's name.
func resolveRule(ctx context.Context, c *env, s string) (*flowv1.UUID, error) {
	if isUUID(s) {
		return &flowv1.UUID{Id: s}, nil
	}
	var cands []candidate
	err := eachRule(ctx, c, func(r *flowv1.OperationRule) {
		if r.GetName() == s {
			cands = append(cands, candidate{id: r.GetId().GetId(), label: ruleKey(r)})
		}
	})
	if err != nil {
		return nil, err
	}
	return pick("rule", s, cands)
}

// eachRule calls f on every rule, newest first.
func eachRule(ctx context.Context, c *env, f func(*flowv1.OperationRule)) error {
	for offset := int32(0); ; {
		res, err := c.client.ListOperationRules(ctx, &flowv1.ListOperationRulesRequest{Offset: ptr(offset), Limit: ptr(int32(pageLimit))})
		if err != nil {
			return err
		}
		for _, r := range res.GetRules() {
			f(r)
		}
		offset += int32(len(res.GetRules()))
		if len(res.GetRules()) == 0 || offset >= res.GetTotalCount() {
			return nil
		}
	}
}

// minTaskPrefix is the shortest task UUID prefix the CLI resolves.
const minTaskPrefix = 4

// resolveTask turns a TASK argument into a task UUID: a UUID is used as
// is, anything else must be the prefix (at least 4 characters) of exactly
// one task's UUID, as git and docker take abbreviated IDs.
func resolveTask(ctx context.Context, c *env, s string) (*flowv1.UUID, error) {
	if isUUID(s) {
		return &flowv1.UUID{Id: s}, nil
	}
	s, err := idPrefix("task", "a task UUID", s)
	if err != nil {
		return nil, err
	}
	var cands []candidate
	err = eachTask(ctx, c, &flowv1.ListTasksRequest{}, func(t *flowv1.Task) bool {
		if strings.HasPrefix(t.GetId().GetId(), s) {
			cands = append(cands, candidate{id: t.GetId().GetId(), label: t.GetOperation() + " " + statusName(t.GetStatus())})
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if len(cands) == 0 {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no task ID starts with %q", s))
	}
	return pick("task", s, cands)
}

// idPrefix checks s, given for a kind's ID that is not a whole UUID, as a
// lower-case prefix of at least minTaskPrefix hexadecimal characters;
// whole names the whole ID in the refusal ("a task UUID").
func idPrefix(kind, whole, s string) (string, error) {
	s = strings.ToLower(s)
	if len(s) < minTaskPrefix || strings.Trim(s, "0123456789abcdef-") != "" {
		return "", usageError{fmt.Errorf("%s %q: want %s or a prefix of at least %d of its characters", kind, s, whole, minTaskPrefix)}
	}
	return s, nil
}

// eachTask calls f on the tasks req lists, newest first, page by page,
// until f returns false.
func eachTask(ctx context.Context, c *env, req *flowv1.ListTasksRequest, f func(*flowv1.Task) bool) error {
	req = proto.Clone(req).(*flowv1.ListTasksRequest)
	for offset := int32(0); ; {
		req.Pagination = &flowv1.Pagination{Offset: offset, Limit: pageLimit}
		res, err := c.client.ListTasks(ctx, req)
		if err != nil {
			return err
		}
		for _, t := range res.GetTasks() {
			if !f(t) {
				return nil
			}
		}
		offset += int32(len(res.GetTasks()))
		if len(res.GetTasks()) == 0 || offset >= res.GetTotal() {
			return nil
		}
	}
}

// resolveAll resolves each of args.
func resolveAll(ctx context.Context, c *env, r resolver, args []string) ([]*flowv1.UUID, error) {
	ids := make([]*flowv1.UUID, len(args))
	for i, a := range args {
		id, err := r(ctx, c, a)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}

// rackNamesByID returns the names of the racks ids, asking the server once
// per rack. A rack it cannot read (purged meanwhile) is left out, and shown
// by UUID.
func rackNamesByID(ctx context.Context, c *env, ids []string) map[string]string {
	names := map[string]string{}
	for _, id := range ids {
		if _, ok := names[id]; ok || id == "" {
			continue
		}
		names[id] = ""
		res, err := c.client.GetRackInfoByID(ctx, &flowv1.GetRackInfoByIDRequest{Id: &flowv1.UUID{Id: id}})
		if err == nil {
			names[id] = res.GetRack().GetInfo().GetName()
		}
	}
	return names
}

func rackLabel(names map[string]string, id string) string {
	return or(names[id], id)
}

// uuidValue checks a UUID given on the command line; a malformed one is an
// invalid_argument error, as the server would answer.
func uuidValue(what, s string) (*flowv1.UUID, error) {
	if !isUUID(s) {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: %q is not a UUID", what, s))
	}
	return &flowv1.UUID{Id: s}, nil
}

// pageFlags declares --offset and --limit.
func pageFlags(fs *pflag.FlagSet) func() *flowv1.Pagination {
	offset := fs.Int("offset", 0, "skip this many results")
	limit := fs.Int("limit", 0, "return at most this many results (server default when 0)")
	return func() *flowv1.Pagination {
		if *offset == 0 && *limit == 0 {
			return nil
		}
		return &flowv1.Pagination{Offset: int32(*offset), Limit: int32(*limit)}
	}
}

// idVerb is a verb that takes one object by name or UUID, makes one call
// and reports what it did ("deleted rack <id>").
func idVerb(name, arg, summary, done string, resolve resolver, complete completer, call func(context.Context, *env, *flowv1.UUID) (proto.Message, error)) verb {
	return verb{name: name, args: arg, summary: summary, complete: complete,
		flags: func(fs *pflag.FlagSet) runFunc {
			return func(ctx context.Context, c *env, args []string) error {
				if err := wantArgs(args, 1, arg); err != nil {
					return err
				}
				id, err := resolve(ctx, c, args[0])
				if err != nil {
					return err
				}
				res, err := call(ctx, c, id)
				if err != nil {
					return err
				}
				return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "%s %s\n", done, id.GetId()) })
			}
		}}
}

// completer lists the names a positional argument may take, for shell
// completion.
type completer func(ctx context.Context, c *env) ([]string, error)

// cobra returns the completion function of cobra: the names, asked of the
// server within 2 s (none when it does not answer), no file names.
func (f completer) cobra(g *globals) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		c, err := g.env(cmd)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		names, err := f(ctx, c)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// rackNameList lists every rack's name (completion of RACK).
func rackNameList(ctx context.Context, c *env) ([]string, error) {
	res, err := c.client.GetListOfRacks(ctx, &flowv1.GetListOfRacksRequest{Pagination: &flowv1.Pagination{Limit: pageLimit}})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(res.GetRacks()))
	for _, r := range res.GetRacks() {
		names = append(names, r.GetInfo().GetName())
	}
	return names, nil
}

// componentNameList lists the names of the first components (completion of
// COMPONENT; a fleet has more than a shell wants to offer).
func componentNameList(ctx context.Context, c *env) ([]string, error) {
	res, err := c.client.GetComponents(ctx, &flowv1.GetComponentsRequest{Pagination: &flowv1.Pagination{Limit: pageLimit}})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(res.GetComponents()))
	for _, comp := range res.GetComponents() {
		if n := comp.GetInfo().GetName(); n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}

// flagCompleters complete the flags that name objects, in every verb that
// has them.
var flagCompleters = map[string]completer{
	"rack":      rackNameList,
	"move-to":   rackNameList,
	"rule":      ruleNameList,
	"component": componentNameList,
}

// ruleNameList lists every rule's name (completion of RULE).
func ruleNameList(ctx context.Context, c *env) ([]string, error) {
	var names []string
	err := eachRule(ctx, c, func(r *flowv1.OperationRule) { names = append(names, r.GetName()) })
	return names, err
}

// activeTaskList lists the UUIDs of the unfinished tasks (completion of
// TASK for watch and cancel).
func activeTaskList(ctx context.Context, c *env) ([]string, error) {
	res, err := c.client.ListTasks(ctx, &flowv1.ListTasksRequest{ActiveOnly: true, Pagination: &flowv1.Pagination{Limit: pageLimit}})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, t := range res.GetTasks() {
		ids = append(ids, t.GetId().GetId())
	}
	return ids, nil
}

func ptr[T any](v T) *T { return &v }
