package rulefile_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/rulefile"
)

// yamlRule returns a rule document for a batch file's rules list: one
// PowerControl step with a verification, indented as a list item.
func yamlRule(name, typ, code string, extra ...string) string {
	main := "PowerControl"
	post := `
        post_operation:
          - name: VerifyPowerStatus
            timeout: 5m
            poll_interval: 10s
            parameters:
              expected_status: on`
	if typ == "firmware_control" {
		main, post = "FirmwareControl", ""
	}
	return fmt.Sprintf(`
  - name: %s
    operation_type: %s
    operation_code: %s
%s
    rule_definition:
      steps:
      - component_type: powershelf
        stage: 1
        timeout: 15m
        retry: {max_attempts: 3, initial_interval: 5s, backoff_coefficient: 2.0}
        main_operation: {name: %s}%s
`, name, typ, code, strings.Join(extra, "\n"), main, post)
}

func TestParseBatch(t *testing.T) {
	t.Parallel()
	powerPair := yamlRule("on", "power_control", "power_on") + yamlRule("off", "power_control", "power_off")
	for _, tt := range []struct {
		name     string
		in       string
		contains []string // every one must appear; empty means valid
		keys     []string // for valid files: the rules' type.code in order
	}{
		{name: "PowerPair", in: "version: v1\nrules:" + powerPair, keys: []string{"power_control.power_on", "power_control.power_off"}},
		{name: "NoVersion", in: "rules:" + powerPair, keys: []string{"power_control.power_on", "power_control.power_off"}},
		{name: "IsDefaultTrue", in: "rules:" + yamlRule("on", "power_control", "power_on", "    is_default: true") + yamlRule("off", "power_control", "power_off"),
			keys: []string{"power_control.power_on", "power_control.power_off"}},
		{name: "FirmwareUpgrade", in: "rules:" + yamlRule("up", "firmware_control", "upgrade") + yamlRule("down", "firmware_control", "downgrade"),
			keys: []string{"firmware_control.upgrade", "firmware_control.downgrade"}},
		{name: "Mixed", in: "rules:" + powerPair + yamlRule("up", "firmware_control", "upgrade") + yamlRule("restart", "power_control", "restart"),
			keys: []string{"power_control.power_on", "power_control.power_off", "firmware_control.upgrade", "power_control.restart"}},
		{name: "JSON", in: `{"rules": [
			{"name": "on", "operation_type": "power_control", "operation_code": "power_on", "rule_definition": {"version": "v1", "steps": []}},
			{"name": "off", "operation_type": "power_control", "operation_code": "power_off", "rule_definition": {"steps": []}}]}`,
			keys: []string{"power_control.power_on", "power_control.power_off"}},

		{name: "Empty", in: "", contains: []string{"rule file is empty"}},
		{name: "NoRules", in: "version: v1\nrules: []\n", contains: []string{"rule file has no rules"}},
		{name: "BadYAML", in: "rules: [\n", contains: []string{"malformed YAML"}},
		{name: "TwoDocuments", in: "rules:" + powerPair + "---\nrules: []\n", contains: []string{"more than one document"}},
		{name: "NonStringKey", in: "rules:\n  - name: x\n    1: y\n", contains: []string{"mapping key 1 is not a string"}},
		{name: "UnknownTopKey", in: "rulez: []\n", contains: []string{`malformed rule file`, `unknown field "rulez"`}},
		{name: "NotAMapping", in: "- a\n- b\n", contains: []string{"malformed rule file"}},
		{name: "BadVersion", in: "version: v2\nrules:" + powerPair, contains: []string{"unsupported rule file version: v2 (current version: v1)"}},
		{name: "UnknownRuleKey", in: "rules:" + yamlRule("on", "power_control", "power_on", "    operation: power_on") + yamlRule("off", "power_control", "power_off"),
			contains: []string{`rule 0: malformed rule`, `unknown field "operation"`}},
		{name: "NotDefault", in: "rules:" + yamlRule("on", "power_control", "power_on", "    is_default: false") + yamlRule("off", "power_control", "power_off"),
			contains: []string{`rule 0 ("on"): is_default: rules loaded from a batch file are defaults`}},
		{name: "NoName", in: "rules:" + yamlRule(`""`, "power_control", "power_on") + yamlRule("off", "power_control", "power_off"),
			contains: []string{"rule 0: name: rule name is required"}},
		{name: "BringUpType", in: "rules:" + yamlRule("bu", "bring_up", "bring_up"),
			contains: []string{`rule 0 ("bu"): operation_type: must be power_control or firmware_control, got 'bring_up'`}},
		{name: "EnumSpelling", in: "rules:" + yamlRule("on", "OPERATION_TYPE_POWER_CONTROL", "power_on"),
			contains: []string{"operation_type: must be power_control or firmware_control, got 'OPERATION_TYPE_POWER_CONTROL'"}},
		{name: "BadCode", in: "rules:" + yamlRule("up", "power_control", "upgrade") + powerPair,
			contains: []string{`rule 0 ("up"): operation_code: invalid operation code 'upgrade' for operation type 'power_control'`}},
		{name: "NoDefinition", in: "rules:\n  - {name: on, operation_type: power_control, operation_code: power_on}\n" + powerPair[1:],
			contains: []string{`rule 0 ("on"): rule_definition: rule definition is required`}},
		{name: "UnknownStepKey", in: "rules:" + strings.Replace(powerPair, "stage: 1", "stage: 1\n        max_paralel: 2", 1),
			contains: []string{`rule 0 ("on"): rule_definition: malformed rule definition`, `unknown field "max_paralel"`}},
		{name: "BadDefinitionVersion", in: "rules:" + strings.Replace(powerPair, "      steps:", "      version: v2\n      steps:", 1),
			contains: []string{"rule_definition: unsupported rule definition version: v2 (current version: v1)"}},
		{name: "InvalidStep", in: "rules:" + strings.Replace(powerPair, "poll_interval: 10s", "poll_interval: 0s", 1),
			contains: []string{`rule 0 ("on"): rule_definition: step 0: post_operation[0]: action VerifyPowerStatus requires poll_interval`}},
		{name: "InternalAction", in: "rules:" + strings.Replace(powerPair, "{name: PowerControl}", "{name: BringUpControl}", 1),
			contains: []string{"step 0: main_operation: unknown action: BringUpControl"}},
		{name: "UnknownComponent", in: "rules:" + strings.Replace(powerPair, "powershelf", "nvlswitch", 1),
			contains: []string{"step 0: component type is unknown or invalid"}},
		{name: "Duplicate", in: "rules:" + powerPair + yamlRule("on again", "power_control", "power_on"),
			contains: []string{`rule 2 ("on again"): duplicate operation power_control.power_on (also rule 0)`}},
		{name: "PowerOnOnly", in: "rules:" + yamlRule("on", "power_control", "power_on"),
			contains: []string{"a file with power_control rules must also contain power_control.power_off"}},
		{name: "RestartOnly", in: "rules:" + yamlRule("r", "power_control", "restart"),
			contains: []string{"must also contain power_control.power_on", "must also contain power_control.power_off"}},
		{name: "FirmwareWithoutUpgrade", in: "rules:" + powerPair + yamlRule("down", "firmware_control", "downgrade"),
			contains: []string{"a file with firmware_control rules must also contain firmware_control.upgrade"}},
		{name: "EveryError", in: "rules:" + yamlRule(`""`, "power_control", "power_on") + yamlRule("x", "power_control", "nope"),
			contains: []string{"rule 0: name: rule name is required", `rule 1 ("x"): operation_code: invalid operation code 'nope'`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			specs, err := rulefile.ParseBatch([]byte(tt.in))
			if len(tt.contains) > 0 {
				require.Error(t, err)
				require.ErrorIs(t, err, operations.ErrInvalidRule)
				for _, c := range tt.contains {
					require.Contains(t, err.Error(), c)
				}
				return
			}
			require.NoError(t, err)
			var keys []string
			for _, s := range specs {
				keys = append(keys, s.Key())
				require.True(t, s.IsDefault)
				// The normalised definition is what the server accepts.
				def, err := ruledef.Parse(s.DefinitionJSON)
				require.NoError(t, err)
				require.NoError(t, def.Validate())
				require.Equal(t, s.Definition, def)
			}
			require.Equal(t, tt.keys, keys)
		})
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	const body = `
name: gentle
description: eight at a time
operation_type: power_control
operation_code: power_on
rule_definition:
  steps:
  - component_type: Compute
    stage: 2
    max_parallel: 8
    main_operation: {name: PowerControl}
    post_operation:
    - {name: Sleep, parameters: {duration: 30s}}
    - {name: VerifyPowerStatus, timeout: 10m, poll_interval: 15s, parameters: {expected_status: on}}
`
	spec, err := rulefile.Parse([]byte(body))
	require.NoError(t, err)
	require.Equal(t, "gentle", spec.Name)
	require.Equal(t, "eight at a time", spec.Description)
	require.Equal(t, "power_control.power_on", spec.Key())
	require.False(t, spec.IsDefault)
	require.Len(t, spec.Definition.Steps, 1)
	require.Equal(t, "on", *spec.Definition.Steps[0].PostOperation[1].Parameters.ExpectedStatus, "YAML 1.1 'on' stays a string")
	var def map[string]any
	require.NoError(t, json.Unmarshal(spec.DefinitionJSON, &def))
	require.Equal(t, "v1", def["version"])

	spec, err = rulefile.Parse([]byte(strings.Replace(body, "name: gentle", "name: gentle\nis_default: true", 1)))
	require.NoError(t, err)
	require.True(t, spec.IsDefault)

	for _, tt := range []struct{ name, in, contains string }{
		{name: "Empty", in: "# nothing\n", contains: "rule file is empty"},
		{name: "List", in: "- a\n", contains: "malformed rule"},
		{name: "Batch", in: "rules: []", contains: `unknown field "rules"`},
		{name: "BadStatus", in: strings.Replace(body, "expected_status: on", "expected_status: maybe", 1), contains: "expected_status must be 'on' or 'off', got 'maybe'"},
		{name: "BadDuration", in: strings.Replace(body, "duration: 30s", "duration: soon", 1), contains: `invalid duration "soon"`},
		{name: "WrongType", in: strings.Replace(body, "power_control", "decommission", 1), contains: "operation_type: must be power_control or firmware_control"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := rulefile.Parse([]byte(tt.in))
			require.ErrorIs(t, err, operations.ErrInvalidRule)
			require.Contains(t, err.Error(), tt.contains)
		})
	}
}

// TestExampleRuleFiles keeps examples/rules loadable.
func TestExampleRuleFiles(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../examples/rules/power-defaults.yaml")
	require.NoError(t, err)
	specs, err := rulefile.ParseBatch(b)
	require.NoError(t, err)
	require.Len(t, specs, 2)
	b, err = os.ReadFile("../../examples/rules/power-on-custom.yaml")
	require.NoError(t, err)
	spec, err := rulefile.Parse(b)
	require.NoError(t, err)
	require.Equal(t, "power_control.power_on", spec.Key())
}
