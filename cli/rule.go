package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nicoflow/flow/operations/ruledef"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"

	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/rulefile"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CLI noun of operation rules: rule. Rule files are YAML or JSON in the
// format of rulefile.Parse (one rule) and rulefile.ParseBatch
// (the batch loader); see docs/operation-rules.md.

var ruleNoun = noun{
	name:    "rule",
	summary: "operation rules: how power and firmware operations run, per default or per rack",
	verbs: []verb{
		{name: "create", args: "-f FILE", summary: "create a rule from a YAML or JSON rule file (- for stdin); prints its ID",
			flags: func(fs *pflag.FlagSet) runFunc {
				file := fs.StringP("file", "f", "", "rule file, YAML or JSON (- for stdin)")
				return func(ctx context.Context, c *env, args []string) error {
					if *file == "" || len(args) > 0 {
						return usageError{errors.New("want -f FILE")}
					}
					spec, err := c.readRuleSpec(*file)
					if err != nil {
						return err
					}
					res, err := c.client.CreateOperationRule(ctx, &flowv1.CreateOperationRuleRequest{
						Name: spec.Name, Description: spec.Description,
						OperationType: ruleTypeToProto(spec.Type), OperationCode: string(spec.Code),
						RuleDefinitionJson: string(spec.DefinitionJSON), IsDefault: spec.IsDefault,
					})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintln(w, res.GetId().GetId()) })
				}
			}},
		{name: "update", complete: ruleNameList, args: "RULE [-f FILE] [--name N] [--description D]", summary: "change a rule's name, description and/or definition (-f: a rule file of the same operation; flags win over the file)",
			flags: func(fs *pflag.FlagSet) runFunc {
				file := fs.StringP("file", "f", "", "rule file, YAML or JSON (- for stdin): its name, description and definition replace the rule's")
				name := fs.String("name", "", "new name")
				descr := fs.String("description", "", "new description (may be empty)")
				return func(ctx context.Context, c *env, args []string) error {
					id, err := ruleArg(ctx, c, args)
					if err != nil {
						return err
					}
					set := flagsSet(fs)
					req := &flowv1.UpdateOperationRuleRequest{RuleId: id}
					if *file != "" {
						spec, err := c.readRuleSpec(*file)
						if err != nil {
							return err
						}
						// Type, code and the default flag never change on
						// update; refuse a file that says otherwise rather
						// than silently ignore it.
						cur, err := c.client.GetOperationRule(ctx, &flowv1.GetOperationRuleRequest{RuleId: id})
						if err != nil {
							return err
						}
						if got, want := spec.Key(), ruleKey(cur); got != want {
							return fmt.Errorf("%s: the file is a %s rule but rule %s is %s; the operation of a rule cannot change", *file, got, id.GetId(), want)
						}
						if spec.IsDefault != cur.GetIsDefault() {
							return fmt.Errorf("%s: is_default is %t but rule %s has %t; update never changes it (use flow rule set-default)", *file, spec.IsDefault, id.GetId(), cur.GetIsDefault())
						}
						req.Name, req.Description = &spec.Name, &spec.Description
						def := string(spec.DefinitionJSON)
						req.RuleDefinitionJson = &def
					}
					if set["name"] {
						req.Name = name
					}
					if set["description"] {
						req.Description = descr
					}
					if req.Name == nil && req.Description == nil && req.RuleDefinitionJson == nil {
						return usageError{errors.New("nothing to update: give -f FILE, --name or --description")}
					}
					res, err := c.client.UpdateOperationRule(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "updated rule %s\n", id.GetId()) })
				}
			}},
		{name: "delete", args: "RULE", complete: ruleNameList, summary: "delete a rule (refused while racks are associated with it)",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					id, err := ruleArg(ctx, c, args)
					if err != nil {
						return err
					}
					res, err := c.client.DeleteOperationRule(ctx, &flowv1.DeleteOperationRuleRequest{RuleId: id})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "deleted rule %s\n", id.GetId()) })
				}
			}},
		{name: "get", args: "RULE", complete: ruleNameList, summary: "show a rule and its stages, steps and actions (-o json: the rule with rule_definition_json)",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					id, err := ruleArg(ctx, c, args)
					if err != nil {
						return err
					}
					res, err := c.client.GetOperationRule(ctx, &flowv1.GetOperationRuleRequest{RuleId: id})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printRule(w, res) })
				}
			}},
		{name: "list", args: "[--type T] [--default[=false]] [--offset N] [--limit N]", summary: "list rules, newest first",
			flags: func(fs *pflag.FlagSet) runFunc {
				typ := fs.String("type", "", "only this operation type: power_control or firmware_control")
				def := fs.Bool("default", false, "only default rules (--default=false: only non-default rules)")
				offset := fs.Int("offset", 0, "skip this many rules")
				limit := fs.Int("limit", 0, "return at most this many rules (server default 100 when 0)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					req := &flowv1.ListOperationRulesRequest{}
					if *typ != "" {
						t, err := ruleTypeArg(*typ)
						if err != nil {
							return err
						}
						req.OperationType = &t
					}
					set := flagsSet(fs)
					if set["default"] {
						req.IsDefault = def
					}
					if set["offset"] {
						req.Offset = ptr(int32(*offset))
					}
					if set["limit"] {
						req.Limit = ptr(int32(*limit))
					}
					res, err := c.client.ListOperationRules(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						printRules(w, res.GetRules())
						fmt.Fprintf(w, "(%d of %d rules)\n", len(res.GetRules()), res.GetTotalCount())
					})
				}
			}},
		{name: "set-default", args: "RULE", complete: ruleNameList, summary: "make a rule the default for its operation (replaces the previous default atomically)",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					id, err := ruleArg(ctx, c, args)
					if err != nil {
						return err
					}
					res, err := c.client.SetRuleAsDefault(ctx, &flowv1.SetRuleAsDefaultRequest{RuleId: id})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "rule %s is now the default for its operation\n", id.GetId()) })
				}
			}},
		{name: "associate", complete: rackNameList, args: "RACK RULE", summary: "make a rack use a rule (both by name or UUID) for the rule's operation, ahead of the default",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 2, "RACK RULE"); err != nil {
						return err
					}
					ruleID, err := resolveRule(ctx, c, args[1])
					if err != nil {
						return err
					}
					rackID, err := resolveRack(ctx, c, args[0])
					if err != nil {
						return err
					}
					res, err := c.client.AssociateRuleWithRack(ctx, &flowv1.AssociateRuleWithRackRequest{RackId: rackID, RuleId: ruleID})
					if err != nil {
						return err
					}
					if c.structured() {
						return c.emit(res, nil)
					}
					rack, rule := nameOf(rackNamesByID(ctx, c, []string{rackID.GetId()}), rackID), ruleName(ctx, c, ruleID)
					return c.emit(res, func(w io.Writer) {
						fmt.Fprintf(w, "rack %s now uses rule %s\n", rack, rule)
					})
				}
			}},
		{name: "disassociate", complete: rackNameList, args: "RACK --type T --code C", summary: "remove a rack's rule for an operation (the default or built-in rule applies again)",
			flags: func(fs *pflag.FlagSet) runFunc {
				typ := fs.String("type", "", "operation type: power_control or firmware_control")
				code := fs.String("code", "", "operation code, e.g. power_on")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "RACK"); err != nil {
						return err
					}
					if *typ == "" || *code == "" {
						return usageError{errors.New("want --type T and --code C")}
					}
					t, err := ruleTypeArg(*typ)
					if err != nil {
						return err
					}
					if err := ruleCodeArg(*typ, *code); err != nil {
						return err
					}
					rackID, err := resolveRack(ctx, c, args[0])
					if err != nil {
						return err
					}
					res, err := c.client.DisassociateRuleFromRack(ctx, &flowv1.DisassociateRuleFromRackRequest{RackId: rackID, OperationType: t, OperationCode: *code})
					if err != nil {
						return err
					}
					if c.structured() {
						return c.emit(res, nil)
					}
					rack := nameOf(rackNamesByID(ctx, c, []string{rackID.GetId()}), rackID)
					return c.emit(res, func(w io.Writer) {
						fmt.Fprintf(w, "rack %s no longer has a rule for %s.%s\n", rack, *typ, *code)
					})
				}
			}},
		{name: "associations", complete: rackNameList, args: "RACK [--type T --code C]", summary: "list a rack's (UUID or name) rule associations, or show the one for an operation",
			flags: func(fs *pflag.FlagSet) runFunc {
				typ := fs.String("type", "", "with --code: only this operation type")
				code := fs.String("code", "", "with --type: only this operation code")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "RACK"); err != nil {
						return err
					}
					if (*typ == "") != (*code == "") {
						return usageError{errors.New("give both --type and --code, or neither")}
					}
					if *typ != "" {
						if _, err := ruleTypeArg(*typ); err != nil {
							return err
						}
						if err := ruleCodeArg(*typ, *code); err != nil {
							return err
						}
					}
					rackID, err := resolveRack(ctx, c, args[0])
					if err != nil {
						return err
					}
					if *typ != "" {
						t, err := ruleTypeArg(*typ)
						if err != nil {
							return err
						}
						res, err := c.client.GetRackRuleAssociation(ctx, &flowv1.GetRackRuleAssociationRequest{RackId: rackID, OperationType: t, OperationCode: *code})
						if err != nil {
							return err
						}
						return c.emit(res, func(w io.Writer) {
							if res.GetRuleId().GetId() == "" {
								rack := nameOf(rackNamesByID(ctx, c, []string{rackID.GetId()}), rackID)
								fmt.Fprintf(w, "rack %s has no rule for %s.%s (the default or built-in rule applies)\n", rack, *typ, *code)
								return
							}
							// The bare UUID, for scripts.
							fmt.Fprintln(w, res.GetRuleId().GetId())
						})
					}
					res, err := c.client.ListRackRuleAssociations(ctx, &flowv1.ListRackRuleAssociationsRequest{RackId: rackID})
					if err != nil {
						return err
					}
					if c.structured() {
						return c.emit(res, nil)
					}
					rows := make([][]string, len(res.GetAssociations()))
					names := map[string]string{}
					for i, a := range res.GetAssociations() {
						// Rule names make the table readable; an association
						// keeps its rule alive, so the look-up normally
						// succeeds.
						name, ok := names[a.GetRuleId().GetId()]
						if !ok {
							if r, err := c.client.GetOperationRule(ctx, &flowv1.GetOperationRuleRequest{RuleId: a.GetRuleId()}); err == nil {
								name = r.GetName()
							}
							names[a.GetRuleId().GetId()] = name
						}
						rows[i] = []string{ruleTypeName(a.GetOperationType()) + "." + a.GetOperationCode(), a.GetRuleId().GetId(), name, fmtTime(a.GetUpdatedAt().AsTime())}
					}
					printTable(c.out, []string{"OPERATION", "RULE", "NAME", "UPDATED"}, rows)
					return nil
				}
			}},
		{name: "load", args: "-f FILE [--dry-run] [--overwrite]", summary: "load a YAML batch of default rules (--dry-run: validate locally only; --overwrite: replace existing defaults)",
			flags: func(fs *pflag.FlagSet) runFunc {
				file := fs.StringP("file", "f", "", "batch rule file, YAML or JSON (- for stdin)")
				dryRun := fs.Bool("dry-run", false, "validate the file as the server would, without contacting it")
				overwrite := fs.Bool("overwrite", false, "replace existing default rules of the same operations (not atomic across operations; see docs)")
				return func(ctx context.Context, c *env, args []string) error {
					if *file == "" || len(args) > 0 {
						return usageError{errors.New("want -f FILE")}
					}
					b, err := c.readFileArg(*file)
					if err != nil {
						return err
					}
					specs, err := rulefile.ParseBatch(b)
					if err != nil {
						return fileError{*file, err}
					}
					if *dryRun {
						return c.emit(specsToProto(specs, nil), func(w io.Writer) {
							rows := make([][]string, len(specs))
							for i, s := range specs {
								rows[i] = []string{s.Key(), s.Name, strconv.Itoa(len(s.Definition.Stages())), strconv.Itoa(len(s.Definition.Steps))}
							}
							printTable(w, []string{"OPERATION", "NAME", "STAGES", "STEPS"}, rows)
							fmt.Fprintf(w, "dry run: %d rule(s) valid; nothing was sent to the server\n", len(specs))
						})
					}
					results, err := loadRules(ctx, c, specs, *overwrite)
					if results == nil {
						return err
					}
					// The rules are loaded; err, if any, is about cleaning
					// up replaced rules, reported after the results.
					ids := make([]string, len(results))
					for i, r := range results {
						ids[i] = r.id
					}
					if perr := c.emit(specsToProto(specs, ids), func(w io.Writer) {
						rows := make([][]string, len(results))
						for i, r := range results {
							rows[i] = []string{specs[i].Key(), specs[i].Name, r.id, r.outcome}
						}
						printTable(w, []string{"OPERATION", "NAME", "ID", "RESULT"}, rows)
					}); perr != nil {
						return perr
					}
					return err
				}
			}},
	},
}

// loadResult is what `rule load` did for one rule of the file.
type loadResult struct {
	id      string
	outcome string
}

// loadRules creates specs as the default rules of their operations, as
// safely as the API allows (there is no batch or transaction across calls):
//
//  1. Read the current defaults. Without overwrite, any operation that
//     already has one stops the load before anything is written.
//  2. Create every rule: as the default where the operation has none (the
//     server refuses a second default, so a concurrent writer cannot be
//     overwritten), as a non-default where it replaces one. If any create
//     fails, the rules created so far are deleted again.
//  3. With overwrite, SetRuleAsDefault on each replacing rule: the switch
//     from the old default to the new one is one server transaction, so the
//     operation is never without a default. If one fails, the operations
//     already switched get their old defaults back and the created rules
//     are deleted (a new rule whose old default cannot be restored is kept,
//     and the error names its operation).
//  4. Delete each replaced default. One that racks are associated with is
//     kept (as a non-default rule, associations intact) and reported; a rack
//     association is never dropped.
//
// It returns nil results when nothing was loaded (whatever was created has
// been rolled back, or the error says what could not be). Results with an
// error mean the rules are loaded but a replaced rule could not be deleted.
func loadRules(ctx context.Context, c *env, specs []rulefile.Rule, overwrite bool) ([]loadResult, error) {
	current, err := listDefaults(ctx, c)
	if err != nil {
		return nil, err
	}
	old := make([]*flowv1.OperationRule, len(specs))
	var conflicts []string
	for i, s := range specs {
		if r, ok := current[s.Key()]; ok {
			old[i] = r
			conflicts = append(conflicts, fmt.Sprintf("%s has default rule %s (%q)", s.Key(), r.GetId().GetId(), r.GetName()))
		}
	}
	if len(conflicts) > 0 && !overwrite {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("nothing loaded: %s; use --overwrite to replace", strings.Join(conflicts, "; ")))
	}

	results := make([]loadResult, len(specs))
	var created []int
	for i, s := range specs {
		res, err := c.client.CreateOperationRule(ctx, &flowv1.CreateOperationRuleRequest{
			Name: s.Name, Description: s.Description,
			OperationType: ruleTypeToProto(s.Type), OperationCode: string(s.Code),
			RuleDefinitionJson: string(s.DefinitionJSON), IsDefault: old[i] == nil,
		})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("create rule %d (%s): %w", i, s.Key(), err), rollbackRules(ctx, c, results, created))
		}
		results[i].id = res.GetId().GetId()
		results[i].outcome = "created"
		created = append(created, i)
	}

	var replaced []int
	for i := range specs {
		if old[i] == nil {
			continue
		}
		if _, err := c.client.SetRuleAsDefault(ctx, &flowv1.SetRuleAsDefaultRequest{RuleId: &flowv1.UUID{Id: results[i].id}}); err != nil {
			// The replaced defaults still exist: make them the defaults
			// again, then delete the rules this load created. A new rule
			// whose old default could not be restored stays, so that its
			// operation keeps a default.
			errs := []error{fmt.Errorf("set rule %s as default for %s: %w", results[i].id, specs[i].Key(), err)}
			keep := map[int]bool{}
			for _, j := range replaced {
				if _, err := c.client.SetRuleAsDefault(context.WithoutCancel(ctx), &flowv1.SetRuleAsDefaultRequest{RuleId: old[j].GetId()}); err != nil {
					keep[j] = true
					errs = append(errs, fmt.Errorf("roll back: %s is left with the new default %s: restore %s: %w", specs[j].Key(), results[j].id, old[j].GetId().GetId(), err))
				}
			}
			var undo []int
			for _, j := range created {
				if !keep[j] {
					undo = append(undo, j)
				}
			}
			return nil, errors.Join(append(errs, rollbackRules(ctx, c, results, undo))...)
		}
		replaced = append(replaced, i)
		results[i].outcome = "replaced " + old[i].GetId().GetId()
	}

	var errs []error
	for _, i := range replaced {
		_, err := c.client.DeleteOperationRule(ctx, &flowv1.DeleteOperationRuleRequest{RuleId: old[i].GetId()})
		switch {
		case err == nil:
		case connect.CodeOf(err) == connect.CodeFailedPrecondition:
			results[i].outcome += " (kept as non-default: racks are associated with it)"
		default:
			results[i].outcome += " (not deleted)"
			errs = append(errs, fmt.Errorf("delete replaced rule %s: %w", old[i].GetId().GetId(), err))
		}
	}
	return results, errors.Join(errs...)
}

// rollbackRules deletes the rules created by an unfinished load, returning
// what could not be deleted.
func rollbackRules(ctx context.Context, c *env, results []loadResult, created []int) error {
	var errs []error
	for _, i := range created {
		if _, err := c.client.DeleteOperationRule(context.WithoutCancel(ctx), &flowv1.DeleteOperationRuleRequest{RuleId: &flowv1.UUID{Id: results[i].id}}); err != nil {
			errs = append(errs, fmt.Errorf("roll back: delete rule %s: %w", results[i].id, err))
		}
	}
	return errors.Join(errs...)
}

// listDefaults returns every default rule by "type.code".
func listDefaults(ctx context.Context, c *env) (map[string]*flowv1.OperationRule, error) {
	out := map[string]*flowv1.OperationRule{}
	for offset := int32(0); ; {
		res, err := c.client.ListOperationRules(ctx, &flowv1.ListOperationRulesRequest{IsDefault: ptr(true), Offset: ptr(offset), Limit: ptr(int32(operations.MaxListLimit))})
		if err != nil {
			return nil, err
		}
		for _, r := range res.GetRules() {
			out[ruleKey(r)] = r
		}
		offset += int32(len(res.GetRules()))
		if len(res.GetRules()) == 0 || offset >= res.GetTotalCount() {
			return out, nil
		}
	}
}

// ruleArg resolves the one RULE argument (name or UUID).
func ruleArg(ctx context.Context, c *env, args []string) (*flowv1.UUID, error) {
	if err := wantArgs(args, 1, "RULE"); err != nil {
		return nil, err
	}
	return resolveRule(ctx, c, args[0])
}

// ruleTypeArg parses a --type value.
// ruleCodeArg refuses a --code that is not one of --type's operation
// codes, listing them (an unknown code would match no association and
// answer as if the rack had none).
func ruleCodeArg(typ, code string) error {
	t := operations.OperationType(typ)
	if t.HasCode(operations.OperationCode(code)) {
		return nil
	}
	var codes []string
	for _, c := range t.Codes() {
		codes = append(codes, string(c))
	}
	return usageError{fmt.Errorf("--code: %q is not an operation code of %s (want %s)", code, typ, strings.Join(codes, ", "))}
}

func ruleTypeArg(s string) (flowv1.OperationType, error) {
	t := ruleTypeToProto(operations.OperationType(s))
	if t == flowv1.OperationType_OPERATION_TYPE_UNKNOWN {
		return t, usageError{fmt.Errorf("--type must be power_control or firmware_control, not %q", s)}
	}
	return t, nil
}

func ruleTypeToProto(t operations.OperationType) flowv1.OperationType {
	switch t {
	case operations.OperationTypePowerControl:
		return flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL
	case operations.OperationTypeFirmwareControl:
		return flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL
	}
	return flowv1.OperationType_OPERATION_TYPE_UNKNOWN
}

// ruleTypeName returns the lowercase name of a wire operation type
// ("power_control").
func ruleTypeName(t flowv1.OperationType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "OPERATION_TYPE_"))
}

func ruleKey(r *flowv1.OperationRule) string {
	return ruleTypeName(r.GetOperationType()) + "." + r.GetOperationCode()
}

// flagsSet returns the names of the flags given on the command line.
// ruleName is "NAME (UUID)" for an operation rule, the UUID alone when it
// cannot be read.
func ruleName(ctx context.Context, c *env, id *flowv1.UUID) string {
	r, err := c.client.GetOperationRule(ctx, &flowv1.GetOperationRuleRequest{RuleId: id})
	if err != nil || r.GetName() == "" {
		return id.GetId()
	}
	return fmt.Sprintf("%q (%s)", r.GetName(), id.GetId())
}

// nameOf is "NAME (UUID)" when names has id's name, else the UUID.
func nameOf(names map[string]string, id *flowv1.UUID) string {
	if n := names[id.GetId()]; n != "" {
		return n + " (" + id.GetId() + ")"
	}
	return id.GetId()
}

func flagsSet(fs *pflag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { set[f.Name] = true })
	return set
}

func (c *env) readRuleSpec(path string) (rulefile.Rule, error) {
	b, err := c.readFileArg(path)
	if err != nil {
		return rulefile.Rule{}, err
	}
	spec, err := rulefile.Parse(b)
	if err != nil {
		return rulefile.Rule{}, fileError{path, err}
	}
	return spec, nil
}

// fileError is a rejected rule file. Several problems (errors.Join) print
// one per line under the file name.
type fileError struct {
	path string
	err  error
}

func (e fileError) Error() string {
	msg := e.err.Error()
	if strings.Contains(msg, "\n") {
		return e.path + ":\n  " + strings.ReplaceAll(msg, "\n", "\n  ")
	}
	return e.path + ": " + msg
}

func (e fileError) Unwrap() error { return e.err }

// specsToProto returns specs as the rules they become (ids may be nil), for
// `rule load -o json`.
func specsToProto(specs []rulefile.Rule, ids []string) *flowv1.ListOperationRulesResponse {
	res := &flowv1.ListOperationRulesResponse{TotalCount: int32(len(specs))}
	for i, s := range specs {
		r := &flowv1.OperationRule{
			Name: s.Name, Description: s.Description,
			OperationType: ruleTypeToProto(s.Type), OperationCode: string(s.Code),
			RuleDefinitionJson: string(s.DefinitionJSON), IsDefault: s.IsDefault,
		}
		if ids != nil {
			r.Id = &flowv1.UUID{Id: ids[i]}
		}
		res.Rules = append(res.Rules, r)
	}
	return res
}

func printRules(w io.Writer, rules []*flowv1.OperationRule) {
	rows := make([][]string, len(rules))
	for i, r := range rules {
		stages, steps := "?", "?"
		if def, err := ruledef.Parse([]byte(r.GetRuleDefinitionJson())); err == nil {
			stages, steps = strconv.Itoa(len(def.Stages())), strconv.Itoa(len(def.Steps))
		}
		rows[i] = []string{r.GetId().GetId(), r.GetName(), ruleKey(r), yesNo(r.GetIsDefault()), stages, steps, fmtTime(r.GetUpdatedAt().AsTime())}
	}
	printTable(w, []string{"ID", "NAME", "OPERATION", "DEFAULT", "STAGES", "STEPS", "UPDATED"}, rows)
}

// printRule prints one rule: its header, then each stage with its steps and
// their actions in execution order.
func printRule(w io.Writer, r *flowv1.OperationRule) {
	fmt.Fprintf(w, "ID           %s\nNAME         %s\nDESCRIPTION  %s\nOPERATION    %s\nDEFAULT      %s\nCREATED      %s\nUPDATED      %s\n",
		r.GetId().GetId(), r.GetName(), or(r.GetDescription(), "-"), ruleKey(r), yesNo(r.GetIsDefault()),
		fmtTime(r.GetCreatedAt().AsTime()), fmtTime(r.GetUpdatedAt().AsTime()))
	def, err := ruledef.Parse([]byte(r.GetRuleDefinitionJson()))
	if err != nil {
		fmt.Fprintf(w, "\ndefinition unreadable: %v\n", err)
		return
	}
	if len(def.Steps) == 0 {
		fmt.Fprintln(w, "\nno steps")
		return
	}
	for _, st := range def.Stages() {
		fmt.Fprintf(w, "\nstage %d\n", st.Number)
		for _, s := range st.Steps {
			batch := "all at once"
			if s.MaxParallel > 0 {
				batch = fmt.Sprintf("%d at a time", s.MaxParallel)
			}
			timeout := "timeout " + fmtDur(s.CallTimeout())
			if s.Timeout == 0 {
				timeout += " (default)"
			}
			rp := s.RetryPolicy()
			retry := fmt.Sprintf("retry %d× from %s ×%g", rp.MaxAttempts, fmtDur(rp.InitialInterval.Std()), rp.BackoffCoefficient)
			if rp.MaxInterval > 0 {
				retry += " max " + fmtDur(rp.MaxInterval.Std())
			}
			if s.Retry == nil {
				retry += " (default)"
			}
			fmt.Fprintf(w, "  %s: %s, %s, %s\n", s.ComponentType, batch, timeout, retry)
			for _, a := range s.PreOperation {
				fmt.Fprintf(w, "    pre   %s\n", fmtAction(a))
			}
			fmt.Fprintf(w, "    main  %s\n", fmtAction(s.MainOperation))
			for _, a := range s.PostOperation {
				fmt.Fprintf(w, "    post  %s\n", fmtAction(a))
			}
			if s.DelayAfter > 0 {
				fmt.Fprintf(w, "    then  sleep %s\n", fmtDur(s.DelayAfter.Std()))
			}
		}
	}
}

// fmtAction renders an action as "Name key=value ..." with its timeout and
// poll interval first, then its parameters by key.
func fmtAction(a ruledef.Action) string {
	parts := []string{string(a.Name)}
	if a.Timeout > 0 {
		parts = append(parts, "timeout="+fmtDur(a.Timeout.Std()))
	}
	if a.PollInterval > 0 {
		parts = append(parts, "poll_interval="+fmtDur(a.PollInterval.Std()))
	}
	var params map[string]any
	if b, err := json.Marshal(a.Parameters); err == nil && json.Unmarshal(b, &params) == nil {
		keys := make([]string, 0, len(params))
		for k := range params {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := params[k]
			if s, ok := v.(string); ok {
				if d, err := time.ParseDuration(s); err == nil {
					v = fmtDur(d)
				}
			}
			if l, ok := v.([]any); ok {
				strs := make([]string, len(l))
				for i := range l {
					strs[i] = fmt.Sprint(l[i])
				}
				v = strings.Join(strs, ",")
			}
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}

// fmtDur prints a duration without trailing zero units ("15m", "1h30m").
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func fmtTime(t time.Time) string {
	if t.IsZero() || t.Unix() == 0 {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
