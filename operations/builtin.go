package operations

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nicoflow/flow/operations/ruledef"
)

// builtinRulesJSON holds the built-in rules of spec/execution.md §7.5 as data.
// Unlike user rules they may use the internal actions (BringUpControl,
// WaitBringUp, InjectExpectation, VerifyFirmwareConsistency).
//
//go:embed builtin_rules.json
var builtinRulesJSON []byte

type builtinRuleEntry struct {
	Name           string          `json:"name"`
	Description    string          `json:"description"`
	OperationType  OperationType   `json:"operation_type"`
	OperationCodes []OperationCode `json:"operation_codes"`
	RuleDefinition json.RawMessage `json:"rule_definition"`
}

type builtinKey struct {
	t    OperationType
	code OperationCode
}

var loadBuiltins = sync.OnceValues(func() (map[builtinKey]Rule, error) {
	return parseBuiltinRules(builtinRulesJSON)
})

func parseBuiltinRules(data []byte) (map[builtinKey]Rule, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var entries []builtinRuleEntry
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("built-in rules: %w", err)
	}
	out := map[builtinKey]Rule{}
	for _, e := range entries {
		if e.Name == "" {
			return nil, fmt.Errorf("built-in rule without a name")
		}
		def, err := ruledef.Parse(e.RuleDefinition)
		if err != nil {
			return nil, fmt.Errorf("built-in rule %q: %w", e.Name, err)
		}
		if err := def.ValidateBuiltin(); err != nil {
			return nil, fmt.Errorf("built-in rule %q: %w", e.Name, err)
		}
		if len(e.OperationCodes) == 0 {
			return nil, fmt.Errorf("built-in rule %q has no operation codes", e.Name)
		}
		for _, code := range e.OperationCodes {
			if !e.OperationType.HasCode(code) {
				return nil, fmt.Errorf("built-in rule %q: invalid operation code '%s' for operation type '%s'", e.Name, code, e.OperationType)
			}
			k := builtinKey{e.OperationType, code}
			if _, dup := out[k]; dup {
				return nil, fmt.Errorf("built-in rules: two rules for %s.%s", e.OperationType, code)
			}
			out[k] = Rule{Name: e.Name, Description: e.Description, Type: e.OperationType, Code: code, Definition: def}
		}
	}
	return out, nil
}

// LoadBuiltinRules parses and validates the embedded built-in rules. NewService
// calls it, so a broken built-in rule stops the server at startup.
func LoadBuiltinRules() error {
	_, err := loadBuiltins()
	return err
}

// BuiltinRule returns the built-in rule for (t, code) and whether one exists.
// Built-in rules have a nil ID. The returned rule is a deep copy.
func BuiltinRule(t OperationType, code OperationCode) (Rule, bool) {
	m, err := loadBuiltins()
	if err != nil {
		return Rule{}, false
	}
	r, ok := m[builtinKey{t, code}]
	if !ok {
		return Rule{}, false
	}
	r.Definition = r.Definition.Clone()
	return r, true
}

// BuiltinRules returns every built-in rule, one per (type, code), ordered by
// type then code as listed in OperationTypes and OperationType.Codes.
func BuiltinRules() []Rule {
	var out []Rule
	for _, t := range OperationTypes() {
		for _, c := range t.Codes() {
			if r, ok := BuiltinRule(t, c); ok {
				out = append(out, r)
			}
		}
	}
	return out
}

// MinimalRule returns the "Minimal Default Rule for T.C" used for a (type,
// code) without a built-in rule: zero steps, so it fails the applicability
// check at submission (spec §7.4).
func MinimalRule(t OperationType, code OperationCode) Rule {
	return Rule{
		Name: fmt.Sprintf("Minimal Default Rule for %s.%s", t, code),
		Type: t, Code: code,
		Definition: ruledef.Definition{Version: ruledef.Version, Steps: []ruledef.Step{}},
	}
}

// ingestFirmwareSteps are the steps IngestFirmwareRule adds after the
// built-in ingest rule's: the compute trays' firmware, then the NVLink
// switches', each upgraded to the version the component manager holds as
// desired (an ingest task names none), with the upgrade rule's budgets.
const ingestFirmwareSteps = `{"version": "v1", "steps": [
 {"component_type": "Compute", "stage": 2, "timeout": "45m",
  "retry": {"max_attempts": 2, "initial_interval": "30s", "backoff_coefficient": 1.5},
  "main_operation": {"name": "FirmwareControl", "parameters": {"operation": "upgrade", "poll_interval": "2m", "poll_timeout": "45m"}}},
 {"component_type": "NVSwitch", "stage": 3, "timeout": "45m",
  "retry": {"max_attempts": 2, "initial_interval": "30s", "backoff_coefficient": 1.5},
  "main_operation": {"name": "FirmwareControl", "parameters": {"operation": "upgrade", "poll_interval": "2m", "poll_timeout": "45m"}}}
]}`

// IngestFirmwareRule is the built-in ingest rule with a firmware upgrade of
// the compute trays and NVLink switches after their expectations are
// injected (upstream issue 2976: "Perform Firmware Update in Rack Ingestion
// Path"). Ingest tasks run it instead of the plain built-in when the
// service's SetIngestFirmwareUpgrade is on (FLOW_INGEST_FIRMWARE_UPGRADE).
func IngestFirmwareRule() (Rule, error) {
	r, ok := BuiltinRule(OperationTypeBringUp, CodeIngest)
	if !ok {
		return Rule{}, errors.New("no built-in ingest rule")
	}
	extra, err := ruledef.Parse([]byte(ingestFirmwareSteps))
	if err != nil {
		return Rule{}, fmt.Errorf("ingest firmware steps: %w", err)
	}
	r.Name = "Hardcoded Default Ingest with Firmware Upgrade"
	r.Description = "Ingest: inject expectations for compute trays and NVLink switches, then upgrade their firmware to the component manager's desired version; power shelves excluded"
	r.Definition.Steps = append(r.Definition.Steps, extra.Steps...)
	if err := r.Definition.ValidateBuiltin(); err != nil {
		return Rule{}, fmt.Errorf("built-in rule %q: %w", r.Name, err)
	}
	return r, nil
}
