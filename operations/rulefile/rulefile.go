// Package rulefile reads rule files: what `flow rule create -f` and
// `flow rule load -f` read (spec/execution.md §7.2), checked as the server
// checks CreateOperationRule. The server never reads them, so the format
// lives beside the operations package, not in it.
package rulefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nicoflow/flow/operations/ruledef"

	"go.yaml.in/yaml/v3"

	"github.com/nicoflow/flow/operations"
)

// Rule files are what `flow rule create -f` and `flow rule load -f` read
// (spec/execution.md §7.2). A rule document is YAML or JSON (JSON is read as
// YAML, so either works everywhere):
//
//	name: gentle power on
//	description: eight trays at a time
//	operation_type: power_control      # or firmware_control
//	operation_code: power_on
//	is_default: false
//	rule_definition:                    # a ruledef.Definition as an object
//	  version: v1
//	  steps: [...]
//
// A batch file for the loader holds several rule documents under `rules`,
// with an optional file `version` (only v1):
//
//	version: v1
//	rules:
//	  - name: ...
//
// Unknown keys are rejected at every level, as in rule definitions.

// Version is the only version of the batch rule file format.
const Version = "v1"

// Rule is one rule read from a rule file, validated as
// CreateOperationRule would validate it. DefinitionJSON is the normalised
// definition to send as rule_definition_json.
type Rule struct {
	Name           string
	Description    string
	Type           operations.OperationType
	Code           operations.OperationCode
	IsDefault      bool
	Definition     ruledef.Definition
	DefinitionJSON []byte
}

// Key returns "type.code", e.g. "power_control.power_on".
func (r Rule) Key() string { return string(r.Type) + "." + string(r.Code) }

// ruleDoc is a rule document as written; decoded from JSON with unknown
// fields disallowed.
type ruleDoc struct {
	Name           string          `json:"name"`
	Description    string          `json:"description"`
	OperationType  string          `json:"operation_type"`
	OperationCode  string          `json:"operation_code"`
	IsDefault      *bool           `json:"is_default"`
	RuleDefinition json.RawMessage `json:"rule_definition"`
}

type ruleFileDoc struct {
	Version string            `json:"version"`
	Rules   []json.RawMessage `json:"rules"`
}

// ParseRule reads one rule document (YAML or JSON) and validates it as
// the server validates CreateOperationRule: name, an operation type users may
// write rules for (power_control, firmware_control), a code of that type and
// a valid v1 definition. Errors match ErrInvalidRule.
func Parse(data []byte) (Rule, error) {
	raw, err := yamlToJSON(data)
	if err != nil {
		return Rule{}, err
	}
	if bytes.Equal(raw, []byte("null")) {
		return Rule{}, invalid("", "rule file is empty")
	}
	return parseRuleDoc(raw, false)
}

// ParseBatch reads a batch rule file for the YAML loader and checks it
// whole (spec §7.2): every rule valid as in ParseRule; every rule a
// default (is_default may be omitted or true, never false); no (type, code)
// twice; a file with any power_control rule has both power_on and power_off;
// a file with any firmware_control rule has upgrade. It reports every
// problem it finds, joined; all match ErrInvalidRule. The rules are returned
// in file order with IsDefault set.
func ParseBatch(data []byte) ([]Rule, error) {
	raw, err := yamlToJSON(data)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(raw, []byte("null")) {
		return nil, invalid("rules", "rule file is empty")
	}
	var doc ruleFileDoc
	if err := strictJSON(raw, &doc); err != nil {
		return nil, invalid("", "malformed rule file: %v", err)
	}
	if doc.Version != "" && doc.Version != Version {
		return nil, invalid("version", "unsupported rule file version: %s (current version: %s)", doc.Version, Version)
	}
	if len(doc.Rules) == 0 {
		return nil, invalid("rules", "rule file has no rules")
	}
	var errs []error
	var specs []Rule
	seen := map[string]int{}
	for i, r := range doc.Rules {
		spec, err := parseRuleDoc(r, true)
		if err != nil {
			errs = append(errs, ruleError(i, spec.Name, err))
			continue
		}
		if j, dup := seen[spec.Key()]; dup {
			errs = append(errs, ruleError(i, spec.Name, invalid("", "duplicate operation %s (also rule %d)", spec.Key(), j)))
			continue
		}
		seen[spec.Key()] = i
		specs = append(specs, spec)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	has := func(t operations.OperationType) bool {
		return slices.ContainsFunc(specs, func(s Rule) bool { return s.Type == t })
	}
	for _, req := range []struct {
		t     operations.OperationType
		codes []operations.OperationCode
	}{
		{operations.OperationTypePowerControl, []operations.OperationCode{operations.CodePowerOn, operations.CodePowerOff}},
		{operations.OperationTypeFirmwareControl, []operations.OperationCode{operations.CodeUpgrade}},
	} {
		if !has(req.t) {
			continue
		}
		for _, c := range req.codes {
			if _, ok := seen[string(req.t)+"."+string(c)]; !ok {
				errs = append(errs, invalid("rules", "a file with %s rules must also contain %s.%s", req.t, req.t, c))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return specs, nil
}

// ruleError prefixes err with the rule's position (and name when known),
// keeping it matchable as ErrInvalidRule.
func ruleError(i int, name string, err error) error {
	prefix := fmt.Sprintf("rule %d", i)
	if name != "" {
		prefix += fmt.Sprintf(" (%q)", name)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

func parseRuleDoc(raw []byte, batch bool) (Rule, error) {
	var doc ruleDoc
	if err := strictJSON(raw, &doc); err != nil {
		return Rule{}, invalid("", "malformed rule: %v", err)
	}
	spec := Rule{
		Name: doc.Name, Description: doc.Description,
		Type: operations.OperationType(doc.OperationType), Code: operations.OperationCode(doc.OperationCode),
	}
	switch {
	case doc.IsDefault != nil:
		spec.IsDefault = *doc.IsDefault
	case batch:
		spec.IsDefault = true
	}
	if batch && !spec.IsDefault {
		return spec, invalid("is_default", "rules loaded from a batch file are defaults; remove is_default: false (use flow rule create for a non-default rule)")
	}
	if strings.TrimSpace(spec.Name) == "" {
		return spec, invalid("name", "rule name is required")
	}
	// The public API's operations.OperationType enum has only these two.
	if spec.Type != operations.OperationTypePowerControl && spec.Type != operations.OperationTypeFirmwareControl {
		return spec, invalid("operation_type", "must be %s or %s, got '%s'", operations.OperationTypePowerControl, operations.OperationTypeFirmwareControl, spec.Type)
	}
	if err := operations.ValidateRuleHeader(spec.Name, spec.Type, spec.Code); err != nil {
		return spec, err
	}
	def, defJSON, err := parseDefinition(doc.RuleDefinition)
	if err != nil {
		var ve *operations.ValidationError
		if errors.As(err, &ve) && ve.Field == "rule_definition_json" {
			ve.Field = "rule_definition"
		}
		return spec, err
	}
	spec.Definition, spec.DefinitionJSON = def, defJSON
	return spec, nil
}

// strictJSON decodes one JSON value into v, rejecting unknown fields and
// trailing data.
func strictJSON(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("unexpected data after the document")
	}
	return nil
}

// yamlToJSON reads one YAML (or JSON) document and returns it as JSON.
// Mapping keys must be strings; YAML 1.1 spellings such as on/off stay
// strings.
func yamlToJSON(data []byte) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return []byte("null"), nil
		}
		return nil, invalid("", "malformed YAML: %v", err)
	}
	var extra any
	if err := dec.Decode(&extra); err == nil {
		return nil, invalid("", "malformed YAML: more than one document")
	}
	v, err := jsonValue(v, "")
	if err != nil {
		return nil, invalid("", "malformed YAML: %v", err)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, invalid("", "malformed YAML: %v", err)
	}
	return raw, nil
}

// jsonValue converts a decoded YAML value into one json.Marshal accepts.
func jsonValue(v any, path string) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			c, err := jsonValue(e, path+"."+k)
			if err != nil {
				return nil, err
			}
			v[k] = c
		}
		return v, nil
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("%s: mapping key %v is not a string", strings.TrimPrefix(path, "."), k)
			}
			c, err := jsonValue(e, path+"."+ks)
			if err != nil {
				return nil, err
			}
			out[ks] = c
		}
		return out, nil
	case []any:
		for i, e := range v {
			c, err := jsonValue(e, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			v[i] = c
		}
		return v, nil
	}
	return v, nil
}

// invalid is a validation error on field, as the server's: it matches
// operations.ErrInvalidRule.
func invalid(field, format string, args ...any) error {
	return &operations.ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// parseDefinition decodes and validates a rule definition as the server
// does, and returns its normalised JSON.
func parseDefinition(data []byte) (ruledef.Definition, []byte, error) {
	def, err := ruledef.Parse(data)
	if err != nil {
		return ruledef.Definition{}, nil, err
	}
	if err := def.Validate(); err != nil {
		return ruledef.Definition{}, nil, err
	}
	raw, err := json.Marshal(def)
	if err != nil {
		return ruledef.Definition{}, nil, fmt.Errorf("encode rule definition: %w", err)
	}
	return def, raw, nil
}
