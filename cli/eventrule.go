package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CLI nouns of event rules (docs/event-rules.md): event-rule, with bind,
// unbind and binding for the (event type, scope) slots, and leak, the
// components leak detection found leaking. A rule is named by UUID or name;
// the built-in leakage rule by its UUID or "built-in".

// leakEventType is the one supported event type, every event-rule verb's
// default.
const leakEventType = "hardware.leak.detected"

var eventRuleNoun = noun{
	name:    "event-rule",
	aliases: []string{"event-rules"},
	summary: "event rules: how Flow answers events such as a coolant leak, per site or per rack",
	verbs: []verb{
		{name: "create", args: "(-f FILE | NAME (--noop REASON | --power-off [--target affected|rack|component] [--reject]) [--description D])",
			summary: "create a rule (it starts disabled: enable it, and bind it with bind); FILE is a CreateEventRuleRequest in YAML or JSON",
			flags: func(fs *pflag.FlagSet) runFunc {
				file := fs.StringP("file", "f", "", "the rule as a CreateEventRuleRequest, YAML or JSON (- for stdin)")
				descr := fs.String("description", "", "description")
				eventType := fs.String("event-type", leakEventType, "event type")
				action := actionFlags(fs)
				return func(ctx context.Context, c *env, args []string) error {
					req := &flowv1.CreateEventRuleRequest{}
					if *file != "" {
						if len(args) > 0 {
							return usageError{errors.New("want -f FILE or NAME, not both")}
						}
						if err := c.readYAMLOrJSON(*file, req); err != nil {
							return err
						}
					} else {
						if len(args) != 1 {
							return usageError{errors.New("want NAME and an action (--noop REASON or --power-off), or -f FILE")}
						}
						a, err := action(true)
						if err != nil {
							return err
						}
						req = &flowv1.CreateEventRuleRequest{Name: args[0], Description: *descr, EventType: *eventType, Actions: []*flowv1.EventRuleAction{a}}
					}
					r, err := c.client.CreateEventRule(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(r, func(w io.Writer) { printEventRule(w, r) })
				}
			}},
		{name: "get", args: "RULE", summary: "show a rule and its actions",
			flags: func(fs *pflag.FlagSet) runFunc {
				return func(ctx context.Context, c *env, args []string) error {
					id, err := eventRuleArg(ctx, c, args)
					if err != nil {
						return err
					}
					r, err := c.client.GetEventRule(ctx, &flowv1.GetEventRuleRequest{RuleId: id})
					if err != nil {
						return err
					}
					return c.emit(r, func(w io.Writer) { printEventRule(w, r) })
				}
			}},
		{name: "list", args: "[--enabled | --disabled] [--event-type T]", summary: "list rules: persisted ones, then the built-ins",
			flags: func(fs *pflag.FlagSet) runFunc {
				enabled := fs.Bool("enabled", false, "only enabled rules")
				disabled := fs.Bool("disabled", false, "only disabled rules")
				eventType := fs.String("event-type", "", "only rules of this event type")
				page := pageFlags(fs)
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					req := &flowv1.ListEventRulesRequest{Pagination: page()}
					switch {
					case *enabled && *disabled:
						return usageError{errors.New("--enabled and --disabled exclude each other")}
					case *enabled:
						req.Enabled = ptr(true)
					case *disabled:
						req.Enabled = ptr(false)
					}
					if *eventType != "" {
						req.EventType = eventType
					}
					res, err := c.client.ListEventRules(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) { printEventRules(w, res.GetRules(), c.wide()) })
				}
			}},
		{name: "update", args: "RULE (--name N [--description D] | -f FILE | --noop REASON | --power-off ...)",
			summary: "replace a rule's name and description, or its actions (from FILE, a YAML or JSON list of actions or an object with actions, or one action from the flags)",
			flags: func(fs *pflag.FlagSet) runFunc {
				name := fs.String("name", "", "new name")
				descr := fs.String("description", "", "new description (replaced together with the name)")
				file := fs.StringP("file", "f", "", "new actions, YAML or JSON (- for stdin)")
				action := actionFlags(fs)
				return func(ctx context.Context, c *env, args []string) error {
					id, err := eventRuleArg(ctx, c, args)
					if err != nil {
						return err
					}
					set := flagsSet(fs)
					req := &flowv1.UpdateEventRuleRequest{RuleId: id}
					a, err := action(false)
					if err != nil {
						return err
					}
					switch {
					case (set["name"] || set["description"]) && (*file != "" || a != nil):
						return usageError{errors.New("change the name and description, or the actions: one per call")}
					case set["name"] || set["description"]:
						if !set["name"] {
							cur, err := c.client.GetEventRule(ctx, &flowv1.GetEventRuleRequest{RuleId: id})
							if err != nil {
								return err
							}
							*name = cur.GetName()
						}
						req.Update = &flowv1.UpdateEventRuleRequest_Metadata{Metadata: &flowv1.EventRuleMetadataUpdate{Name: *name, Description: *descr}}
					case *file != "" && a != nil:
						return usageError{errors.New("give -f FILE or one action's flags, not both")}
					case *file != "":
						actions, err := c.readActions(*file)
						if err != nil {
							return err
						}
						req.Update = &flowv1.UpdateEventRuleRequest_Actions{Actions: &flowv1.EventRuleActionsUpdate{Actions: actions}}
					case a != nil:
						req.Update = &flowv1.UpdateEventRuleRequest_Actions{Actions: &flowv1.EventRuleActionsUpdate{Actions: []*flowv1.EventRuleAction{a}}}
					default:
						return usageError{errors.New("nothing to change: give --name, -f FILE or an action")}
					}
					r, err := c.client.UpdateEventRule(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(r, func(w io.Writer) { printEventRule(w, r) })
				}
			}},
		idVerb("enable", "RULE", "enable a rule (its definition is checked again)", "enabled event rule", resolveEventRule, eventRuleNameList,
			func(ctx context.Context, c *env, id *flowv1.UUID) (proto.Message, error) {
				return c.client.EnableEventRule(ctx, &flowv1.EnableEventRuleRequest{RuleId: id})
			}),
		idVerb("disable", "RULE", "disable a rule: its bindings stay, and selection skips it", "disabled event rule", resolveEventRule, eventRuleNameList,
			func(ctx context.Context, c *env, id *flowv1.UUID) (proto.Message, error) {
				return c.client.DisableEventRule(ctx, &flowv1.DisableEventRuleRequest{RuleId: id})
			}),
		idVerb("delete", "RULE", "delete a rule and its bindings", "deleted event rule", resolveEventRule, eventRuleNameList,
			func(ctx context.Context, c *env, id *flowv1.UUID) (proto.Message, error) {
				return c.client.DeleteEventRule(ctx, &flowv1.DeleteEventRuleRequest{RuleId: id})
			}),
		{name: "effective", args: "(--rack R | --component C) [--event-type T]", summary: "which rule answers an event at a rack or component: its rack's bound rule, else the site's, else the built-in",
			flags: func(fs *pflag.FlagSet) runFunc {
				rack := fs.String("rack", "", "rack (name or UUID)")
				comp := fs.String("component", "", "component (name or UUID)")
				eventType := fs.String("event-type", leakEventType, "event type")
				return func(ctx context.Context, c *env, args []string) error {
					if len(args) > 0 || (*rack == "") == (*comp == "") {
						return usageError{errors.New("want --rack R or --component C")}
					}
					req := &flowv1.GetEffectiveEventRuleRequest{EventType: *eventType}
					if *rack != "" {
						id, err := resolveRack(ctx, c, *rack)
						if err != nil {
							return err
						}
						req.Target = &flowv1.GetEffectiveEventRuleRequest_RackId{RackId: id}
					} else {
						id, err := resolveComponent(ctx, c, *comp)
						if err != nil {
							return err
						}
						req.Target = &flowv1.GetEffectiveEventRuleRequest_ComponentId{ComponentId: id}
					}
					r, err := c.client.GetEffectiveEventRule(ctx, req)
					if err != nil {
						return err
					}
					return c.emit(r, func(w io.Writer) { printEventRule(w, r) })
				}
			}},
		{name: "bind", args: "RULE (--site | --rack R)", summary: "put a rule in the site's or a rack's slot for its event type",
			flags: func(fs *pflag.FlagSet) runFunc {
				scope := scopeFlags(fs)
				return func(ctx context.Context, c *env, args []string) error {
					id, err := eventRuleArg(ctx, c, args)
					if err != nil {
						return err
					}
					sc, err := scope(ctx, c)
					if err != nil {
						return err
					}
					b, err := c.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: id, Scope: sc})
					if err != nil {
						return err
					}
					if c.structured() {
						return c.emit(b, nil)
					}
					names := bindingNames(ctx, c, b)
					return c.emit(b, func(w io.Writer) { printBinding(w, b, names, c.wide()) })
				}
			}},
		{name: "unbind", args: "(--site | --rack R) [--event-type T]", summary: "clear the site's or a rack's slot",
			flags: func(fs *pflag.FlagSet) runFunc {
				scope := scopeFlags(fs)
				eventType := fs.String("event-type", leakEventType, "event type")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					sc, err := scope(ctx, c)
					if err != nil {
						return err
					}
					res, err := c.client.DeleteEventRuleBinding(ctx, &flowv1.DeleteEventRuleBindingRequest{EventType: *eventType, Scope: sc})
					if err != nil {
						return err
					}
					names := rackNamesByID(ctx, c, []string{sc.GetId().GetId()})
					return c.emit(res, func(w io.Writer) { fmt.Fprintf(w, "unbound %s at %s\n", *eventType, scopeLabel(sc, names)) })
				}
			}},
		{name: "binding", args: "(--site | --rack R) [--event-type T]", summary: "show the binding in the site's or a rack's slot",
			flags: func(fs *pflag.FlagSet) runFunc {
				scope := scopeFlags(fs)
				eventType := fs.String("event-type", leakEventType, "event type")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					sc, err := scope(ctx, c)
					if err != nil {
						return err
					}
					b, err := c.client.GetEventRuleBinding(ctx, &flowv1.GetEventRuleBindingRequest{EventType: *eventType, Scope: sc})
					if err != nil {
						return err
					}
					if c.structured() {
						return c.emit(b, nil)
					}
					names := bindingNames(ctx, c, b)
					return c.emit(b, func(w io.Writer) { printBinding(w, b, names, c.wide()) })
				}
			}},
	},
}

// actionFlags declares the flags of one action (--noop, --power-off…) and
// returns the function that builds it: nil when none is given, unless
// required.
func actionFlags(fs *pflag.FlagSet) func(required bool) (*flowv1.EventRuleAction, error) {
	noop := fs.String("noop", "", "a noop action with this reason (records the event, does nothing)")
	powerOff := fs.Bool("power-off", false, "a force-power-off action")
	target := fs.String("target", "affected", "targets of --power-off: affected (the leaking component and everything below it), rack or component")
	reject := fs.Bool("reject", false, "--power-off fails on a busy rack instead of queueing")
	actionName := fs.String("action-name", "", "the action's name (default: log_only for --noop, power_off for --power-off)")
	return func(required bool) (*flowv1.EventRuleAction, error) {
		set := flagsSet(fs)
		switch {
		case set["noop"] && *powerOff:
			return nil, usageError{errors.New("--noop and --power-off exclude each other: one action per command (use -f FILE for more)")}
		case set["noop"]:
			return &flowv1.EventRuleAction{Name: or(*actionName, "log_only"), Spec: &flowv1.EventRuleAction_Noop{Noop: &flowv1.EventRuleNoopAction{Reason: *noop}}}, nil
		case *powerOff:
			st := &flowv1.EventRuleSubmitTaskAction{
				ConflictStrategy: flowv1.EventRuleConflictStrategy_EVENT_RULE_CONFLICT_STRATEGY_QUEUE,
				Operation: &flowv1.TaskOperation{Operation: &flowv1.TaskOperation_PowerControl{PowerControl: &flowv1.PowerControlTaskOperation{
					Operation: flowv1.PowerControlOperation_POWER_CONTROL_OPERATION_FORCE_POWER_OFF,
				}}},
			}
			if *reject {
				st.ConflictStrategy = flowv1.EventRuleConflictStrategy_EVENT_RULE_CONFLICT_STRATEGY_REJECT
			}
			switch *target {
			case "affected":
				st.TargetStrategy = flowv1.EventRuleTargetStrategy_EVENT_RULE_TARGET_STRATEGY_AFFECTED_COMPONENTS
			case "rack":
				st.TargetStrategy = flowv1.EventRuleTargetStrategy_EVENT_RULE_TARGET_STRATEGY_RACK
			case "component":
				st.TargetStrategy = flowv1.EventRuleTargetStrategy_EVENT_RULE_TARGET_STRATEGY_COMPONENT
			default:
				return nil, usageError{fmt.Errorf("--target: want affected, rack or component, not %q", *target)}
			}
			return &flowv1.EventRuleAction{Name: or(*actionName, "power_off"), Spec: &flowv1.EventRuleAction_SubmitTask{SubmitTask: st}}, nil
		case required:
			return nil, usageError{errors.New("want an action: --noop REASON or --power-off")}
		}
		return nil, nil
	}
}

// scopeFlags declares --site and --rack and returns the function that
// builds the scope.
func scopeFlags(fs *pflag.FlagSet) func(ctx context.Context, c *env) (*flowv1.EventRuleScope, error) {
	site := fs.Bool("site", false, "the site-wide slot")
	rack := fs.String("rack", "", "the slot of this rack (name or UUID)")
	return func(ctx context.Context, c *env) (*flowv1.EventRuleScope, error) {
		if *site == (*rack != "") {
			return nil, usageError{errors.New("want --site or --rack R")}
		}
		if *site {
			return &flowv1.EventRuleScope{Type: flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_SITE}, nil
		}
		id, err := resolveRack(ctx, c, *rack)
		if err != nil {
			return nil, err
		}
		return &flowv1.EventRuleScope{Type: flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_RACK, Id: id}, nil
	}
}

// readYAMLOrJSON reads a protojson message written as JSON or YAML.
func (c *env) readYAMLOrJSON(path string, msg proto.Message) error {
	b, err := c.readFileArg(path)
	if err != nil {
		return err
	}
	b, err = yamlToJSON(b)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := protojson.Unmarshal(b, msg); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readActions reads an action list: a YAML or JSON list of actions, or an
// object with an actions field (a rule file).
func (c *env) readActions(path string) ([]*flowv1.EventRuleAction, error) {
	b, err := c.readFileArg(path)
	if err != nil {
		return nil, err
	}
	if b, err = yamlToJSON(b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if strings.HasPrefix(strings.TrimSpace(string(b)), "[") {
		b = append(append([]byte(`{"actions":`), b...), '}')
	}
	var u flowv1.EventRuleActionsUpdate
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &u); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return u.GetActions(), nil
}

// yamlToJSON converts YAML (JSON is YAML) to JSON.
func yamlToJSON(b []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func eventRuleArg(ctx context.Context, c *env, args []string) (*flowv1.UUID, error) {
	if len(args) != 1 {
		return nil, usageError{errors.New("want RULE (name or UUID)")}
	}
	return resolveEventRule(ctx, c, args[0])
}

// resolveEventRule turns a RULE argument into a rule UUID: a UUID as is,
// "built-in" the built-in leakage rule, anything else exactly one rule's
// name.
func resolveEventRule(ctx context.Context, c *env, s string) (*flowv1.UUID, error) {
	if isUUID(s) {
		return &flowv1.UUID{Id: s}, nil
	}
	var cands []candidate
	err := eachEventRule(ctx, c, func(r *flowv1.EventRule) {
		if r.GetName() == s || (s == "built-in" && r.GetReadOnly()) {
			cands = append(cands, candidate{id: r.GetId().GetId()})
		}
	})
	if err != nil {
		return nil, err
	}
	return pick("event rule", s, cands)
}

func eachEventRule(ctx context.Context, c *env, f func(*flowv1.EventRule)) error {
	for offset := int32(0); ; {
		res, err := c.client.ListEventRules(ctx, &flowv1.ListEventRulesRequest{Pagination: &flowv1.Pagination{Offset: offset, Limit: pageLimit}})
		if err != nil {
			return err
		}
		for _, r := range res.GetRules() {
			f(r)
		}
		offset += int32(len(res.GetRules()))
		if len(res.GetRules()) == 0 || int64(offset) >= res.GetTotal() {
			return nil
		}
	}
}

func eventRuleNameList(ctx context.Context, c *env) ([]string, error) {
	var out []string
	err := eachEventRule(ctx, c, func(r *flowv1.EventRule) {
		if !r.GetReadOnly() {
			out = append(out, r.GetName())
		}
	})
	return out, err
}

func printEventRules(w io.Writer, rules []*flowv1.EventRule, wide bool) {
	headers := []string{"ID", "NAME", "EVENT TYPE", "ENABLED", "KIND", "ACTIONS"}
	if wide {
		headers = append(headers, "DESCRIPTION")
	}
	var rows [][]string
	for _, r := range rules {
		kind := "persisted"
		if r.GetReadOnly() {
			kind = "built-in"
		}
		var names []string
		for _, a := range r.GetActions() {
			names = append(names, a.GetName())
		}
		row := []string{r.GetId().GetId(), r.GetName(), r.GetEventType(), yesNo(r.GetEnabled()), kind, strings.Join(names, ",")}
		if wide {
			row = append(row, r.GetDescription())
		}
		rows = append(rows, row)
	}
	printTable(w, headers, rows)
}

func printEventRule(w io.Writer, r *flowv1.EventRule) {
	kind := "persisted"
	if r.GetReadOnly() {
		kind = "built-in (read-only)"
	}
	fmt.Fprintf(w, "ID:           %s\nName:         %s\nDescription:  %s\nEvent type:   %s\nEnabled:      %s\nKind:         %s\n",
		r.GetId().GetId(), r.GetName(), or(r.GetDescription(), "-"), r.GetEventType(), yesNo(r.GetEnabled()), kind)
	fmt.Fprintln(w, "Actions:")
	for _, a := range r.GetActions() {
		fmt.Fprintf(w, "  %s: %s%s\n", a.GetName(), fmtEventAction(a), fmtCondition(a.GetCondition()))
	}
}

func fmtEventAction(a *flowv1.EventRuleAction) string {
	switch s := a.GetSpec().(type) {
	case *flowv1.EventRuleAction_SubmitTask:
		st := s.SubmitTask
		op := "?"
		switch o := st.GetOperation().GetOperation().(type) {
		case *flowv1.TaskOperation_PowerControl:
			op = strings.ToLower(strings.TrimPrefix(o.PowerControl.GetOperation().String(), "POWER_CONTROL_OPERATION_"))
		case *flowv1.TaskOperation_FirmwareControl:
			op = "firmware " + strings.ToLower(strings.TrimPrefix(o.FirmwareControl.GetOperation().String(), "FIRMWARE_CONTROL_OPERATION_"))
		}
		return fmt.Sprintf("submit task %s on %s (conflict %s)", op,
			strings.ToLower(strings.TrimPrefix(st.GetTargetStrategy().String(), "EVENT_RULE_TARGET_STRATEGY_")),
			strings.ToLower(strings.TrimPrefix(st.GetConflictStrategy().String(), "EVENT_RULE_CONFLICT_STRATEGY_")))
	case *flowv1.EventRuleAction_SendAlert:
		return fmt.Sprintf("send %s alert %q", strings.ToLower(strings.TrimPrefix(s.SendAlert.GetSeverity().String(), "EVENT_RULE_SEVERITY_")), s.SendAlert.GetMessage())
	case *flowv1.EventRuleAction_Noop:
		return fmt.Sprintf("noop (%s)", or(s.Noop.GetReason(), "no reason given"))
	}
	return "no spec"
}

func fmtCondition(c *flowv1.EventRuleActionCondition) string {
	var parts []string
	for _, s := range c.GetSeverities() {
		parts = append(parts, strings.ToLower(strings.TrimPrefix(s.String(), "EVENT_RULE_SEVERITY_")))
	}
	for _, t := range c.GetComponentTypes() {
		parts = append(parts, strings.ToLower(strings.TrimPrefix(t.String(), "COMPONENT_TYPE_")))
	}
	if len(parts) == 0 {
		return ""
	}
	return " when " + strings.Join(parts, ", ")
}

// scopeLabel is "site" or "rack NAME" (the UUID when names lacks it).
func scopeLabel(s *flowv1.EventRuleScope, names map[string]string) string {
	if s.GetType() == flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_RACK {
		return "rack " + rackLabel(names, s.GetId().GetId())
	}
	return "site"
}

// bindingNames returns the names of a binding's rule and rack by UUID; one
// it cannot read is left out, and shown by UUID.
func bindingNames(ctx context.Context, c *env, b *flowv1.EventRuleBinding) map[string]string {
	names := rackNamesByID(ctx, c, []string{b.GetScope().GetId().GetId()})
	if r, err := c.client.GetEventRule(ctx, &flowv1.GetEventRuleRequest{RuleId: b.GetRuleId()}); err == nil {
		names[b.GetRuleId().GetId()] = r.GetName()
	}
	return names
}

// printBinding prints a binding with its rule and rack by name; wide adds
// their UUIDs.
func printBinding(w io.Writer, b *flowv1.EventRuleBinding, names map[string]string, wide bool) {
	headers := []string{"ID", "RULE", "EVENT TYPE", "SCOPE"}
	row := []string{b.GetId().GetId(), rackLabel(names, b.GetRuleId().GetId()), b.GetEventType(), scopeLabel(b.GetScope(), names)}
	if wide {
		headers = append(headers, "RULE ID", "RACK ID")
		row = append(row, b.GetRuleId().GetId(), or(b.GetScope().GetId().GetId(), "-"))
	}
	printTable(w, headers, [][]string{row})
}

var leakNoun = noun{
	name:    "leak",
	aliases: []string{"leaks"},
	summary: "coolant leaks: the components leak detection found leaking, and how far Flow's response has got",
	verbs: []verb{
		{name: "list", args: "[--all]", summary: "components whose leak is DETECTED or that a leak response covers, with the handling status",
			flags: func(fs *pflag.FlagSet) runFunc {
				all := fs.Bool("all", false, "every component leak detection has looked at, leaking or not")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 0, "no arguments"); err != nil {
						return err
					}
					res := &flowv1.GetComponentsResponse{}
					for offset := int32(0); ; {
						page, err := c.client.GetComponents(ctx, &flowv1.GetComponentsRequest{Pagination: &flowv1.Pagination{Offset: offset, Limit: pageLimit}})
						if err != nil {
							return err
						}
						for _, comp := range page.GetComponents() {
							leaking := comp.GetLeakStatus() == flowv1.LeakStatus_LEAK_STATUS_DETECTED
							handled := comp.GetLeakHandlingStatus() != flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_NONE
							looked := comp.GetLeakStatus() != flowv1.LeakStatus_LEAK_STATUS_UNKNOWN
							if leaking || handled || (*all && looked) {
								res.Components = append(res.Components, comp)
							}
						}
						offset += int32(len(page.GetComponents()))
						if len(page.GetComponents()) == 0 || offset >= page.GetTotal() {
							break
						}
					}
					res.Total = int32(len(res.Components))
					// Leaks on devices Flow does not hold have no component:
					// the occurrences name them by Core ID.
					occ, err := c.admin.ListLeakOccurrences(ctx, &adminv1.ListLeakOccurrencesRequest{})
					if err != nil {
						return err
					}
					var unknown []*adminv1.LeakOccurrence
					for _, o := range occ.GetOccurrences() {
						if o.GetComponentId() == "" {
							unknown = append(unknown, o)
						}
					}
					return c.emit(res, func(w io.Writer) {
						if len(res.GetComponents()) > 0 || len(unknown) == 0 {
							printLeaks(ctx, c, w, res.GetComponents())
						}
						printUnknownLeaks(w, unknown)
					})
				}
			}},
		{name: "override", args: "COMPONENT --reason TEXT", summary: "let operations that power COMPONENT on through again while its current leak is open (admin, audited; the next leak needs a new override)",
			flags: func(fs *pflag.FlagSet) runFunc {
				reason := fs.String("reason", "", "why powering the component on is safe (required; recorded and audited)")
				return func(ctx context.Context, c *env, args []string) error {
					if err := wantArgs(args, 1, "COMPONENT (a name, UUID or Core ID)"); err != nil {
						return err
					}
					if strings.TrimSpace(*reason) == "" {
						return errors.New("--reason is required: say why powering the component on is safe")
					}
					id := args[0]
					if !isUUID(id) {
						// A name, else a Core ID the server resolves.
						if u, err := resolveComponent(ctx, c, id); err == nil {
							id = u.GetId()
						}
					}
					res, err := c.admin.OverrideLeak(ctx, &adminv1.OverrideLeakRequest{ComponentId: id, Reason: *reason})
					if err != nil {
						return err
					}
					return c.emit(res, func(w io.Writer) {
						fmt.Fprintf(w, "leak of component %s (detected %s) overridden by %s at %s: %s\n", res.GetComponentId(),
							res.GetDetectedAt().AsTime().Local().Format(time.RFC3339), res.GetOverriddenBy(),
							res.GetOverriddenAt().AsTime().Local().Format(time.RFC3339), res.GetReason())
					})
				}
			}},
		leakReportVerb, leakReportsVerb,
	},
}

// printUnknownLeaks lists the leaks on devices Flow does not hold.
func printUnknownLeaks(w io.Writer, occ []*adminv1.LeakOccurrence) {
	if len(occ) == 0 {
		return
	}
	fmt.Fprintln(w, "\nleaks on devices flow does not hold:")
	rows := make([][]string, len(occ))
	for i, o := range occ {
		rows[i] = []string{o.GetExternalId(), o.GetKind(), o.GetStartedAt().AsTime().Local().Format(time.RFC3339), or(o.GetUnknownOutcome(), "-")}
	}
	printTable(w, []string{"CORE ID", "KIND", "SINCE", "ANSWER"}, rows)
}

func printLeaks(ctx context.Context, c *env, w io.Writer, comps []*flowv1.Component) {
	if len(comps) == 0 {
		fmt.Fprintln(w, "no leaks")
		return
	}
	var racks []string
	for _, comp := range comps {
		racks = append(racks, comp.GetRackId().GetId())
	}
	names := rackNamesByID(ctx, c, racks)
	var rows [][]string
	for _, comp := range comps {
		rows = append(rows, []string{
			comp.GetInfo().GetName(), rackLabel(names, comp.GetRackId().GetId()),
			strings.ToLower(strings.TrimPrefix(comp.GetType().String(), "COMPONENT_TYPE_")),
			fmt.Sprint(comp.GetPosition().GetSlotId()),
			strings.TrimPrefix(comp.GetLeakStatus().String(), "LEAK_STATUS_"),
			strings.TrimPrefix(comp.GetLeakHandlingStatus().String(), "LEAK_HANDLING_STATUS_"),
			comp.GetPowerState(),
		})
	}
	printTable(w, []string{"COMPONENT", "RACK", "TYPE", "SLOT", "LEAK", "HANDLING", "POWER"}, rows)
}
