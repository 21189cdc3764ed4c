package cli_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// setupRuleCLI starts a Flow server and returns a CLI bundle pointed at
// it, through a proxy that injects faults when given.
func setupRuleCLI(t *testing.T, faults ...ruleFaults) *cliBundle {
	t.Helper()
	s := startServer(t, nil)
	if len(faults) == 0 {
		return s.bundle()
	}
	return &cliBundle{env: map[string]string{"FLOW_SERVER": faults[0].proxy(t, s.url)}}
}

// ruleFaults fail the Nth CreateOperationRule or SetRuleAsDefault call
// (1-based; 0 never) with unavailable, to drive the batch loader's
// roll-back over a real server.
type ruleFaults struct {
	failCreate, failSetDefault int32
}

// proxy serves a reverse proxy of target that injects f and returns its URL.
func (f ruleFaults) proxy(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	var creates, setDefaults atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := false
		switch r.URL.Path {
		case flowv1connect.FlowCreateOperationRuleProcedure:
			fail = creates.Add(1) == f.failCreate
		case flowv1connect.FlowSetRuleAsDefaultProcedure:
			fail = setDefaults.Add(1) == f.failSetDefault
		}
		if fail {
			// A Connect unary error: the code and message as JSON.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"code":"unavailable","message":"injected fault"}`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestCLIRule(t *testing.T) {
	t.Parallel()
	b := setupRuleCLI(t)
	rackID := b.mustFlow(t, "rack", "create", "-f", "../examples/rack-g10.json")

	id := b.mustFlow(t, "rule", "create", "-f", "../examples/rules/power-on-custom.yaml")
	require.Len(t, id, 36)

	t.Run("GetTable", func(t *testing.T) {
		t.Parallel()
		out := b.mustFlow(t, "rule", "get", id)
		for _, want := range []string{
			"NAME         Gentle power on",
			"OPERATION    power_control.power_on",
			"DEFAULT      no",
			"stage 1\n  PowerShelf: all at once, timeout 15m, retry 3× from 5s ×2\n    main  PowerControl\n    post  VerifyPowerStatus timeout=5m poll_interval=10s expected_status=on",
			"stage 2\n  NVSwitch: all at once, timeout 15m, retry 3× from 1s ×2 max 1m (default)",
			"  Compute: 4 at a time, timeout 20m",
			"    post  Sleep duration=30s\n    post  VerifyPowerStatus timeout=10m poll_interval=15s expected_status=on",
		} {
			require.Contains(t, out, want)
		}
	})

	t.Run("GetJSON", func(t *testing.T) {
		t.Parallel()
		out := b.mustFlow(t, "rule", "get", id, "-o", "json")
		var r struct {
			ID                 struct{ ID string }
			Name               string
			OperationType      string
			OperationCode      string
			RuleDefinitionJSON string `json:"ruleDefinitionJson"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		require.Equal(t, id, r.ID.ID)
		require.Equal(t, "OPERATION_TYPE_POWER_CONTROL", r.OperationType)
		require.Equal(t, "power_on", r.OperationCode)
		def, err := ruledef.Parse([]byte(r.RuleDefinitionJSON))
		require.NoError(t, err)
		require.Len(t, def.Steps, 3)
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		requireFlowError(t, b, "not_found: operation rule not found", "rule", "get", "00000000-0000-0000-0000-000000000001")
		requireFlowError(t, b, `not_found: no rule is named "x"`, "rule", "get", "x")
		requireFlowError(t, b, "not_found: no rack is named \"nope\"", "rule", "associate", "nope", id)
		requireFlowError(t, b, "--type must be power_control or firmware_control", "rule", "list", "--type", "bring_up")
		bad := writeFile(t, "bad.yaml", "name: x\noperation_type: power_control\noperation_code: power_on\nrule_definition: {steps: [{component_type: Compute, stage: 0, main_operation: {name: PowerControl}}]}\n")
		requireFlowError(t, b, "bad.yaml: rule_definition: step 0: stage must be >= 1, got 0", "rule", "create", "-f", bad)
		requireFlowError(t, b, "nothing to update", "rule", "update", id)
		off := writeFile(t, "off.yaml", "name: x\noperation_type: power_control\noperation_code: power_off\nrule_definition: {steps: []}\n")
		requireFlowError(t, b, "the file is a power_control.power_off rule but rule "+id+" is power_control.power_on", "rule", "update", id, "-f", off)
	})

	t.Run("RackNames", func(t *testing.T) {
		t.Parallel()
		// "g1" is a substring of "g10" but names no rack; "dup" names two.
		requireFlowError(t, b, `not_found: no rack is named "g1"`, "rule", "associations", "g1")
		for _, serial := range []string{"S1", "S2"} {
			b.mustFlow(t, "rack", "create", "-f", writeFile(t, "r.json", `{"info": {"name": "dup", "manufacturer": "Acme", "serialNumber": "`+serial+`"}}`))
		}
		requireFlowError(t, b, `invalid_argument: 2 racks are named "dup"`, "rule", "associations", "dup")
	})

	t.Run("Lifecycle", func(t *testing.T) {
		t.Parallel()
		// A second rule, created from JSON, drives the write verbs so the
		// read subtests above see a stable first rule.
		file := writeFile(t, "rule.json", `{"name": "json rule", "operation_type": "power_control", "operation_code": "power_off",
			"rule_definition": {"version": "v1", "steps": [{"component_type": "Compute", "stage": 1, "main_operation": {"name": "PowerControl"}}]}}`)
		rid := b.mustFlow(t, "rule", "create", "-f", file)

		out := b.mustFlow(t, "rule", "list", "--type", "power_control")
		require.Contains(t, out, "json rule")
		require.Contains(t, out, "Gentle power on")
		require.Contains(t, out, "(2 of 2 rules)")
		require.Contains(t, b.mustFlow(t, "rule", "list", "--type", "firmware_control"), "(0 of 0 rules)")
		require.Contains(t, b.mustFlow(t, "rule", "list", "--limit", "1"), "(1 of 2 rules)")

		// Update: flags alone, then a file with a flag winning over it.
		b.mustFlow(t, "rule", "update", rid, "--name", "renamed", "--description", "d1")
		out = b.mustFlow(t, "rule", "get", rid)
		require.Contains(t, out, "NAME         renamed")
		require.Contains(t, out, "DESCRIPTION  d1")
		file2 := writeFile(t, "rule2.yaml", "name: from file\ndescription: d2\noperation_type: power_control\noperation_code: power_off\n"+
			"rule_definition:\n  steps:\n  - {component_type: NVSwitch, stage: 1, main_operation: {name: PowerControl}}\n  - {component_type: Compute, stage: 2, main_operation: {name: PowerControl}}\n")
		b.mustFlow(t, "rule", "update", rid, "-f", file2, "--name", "flag wins")
		out = b.mustFlow(t, "rule", "get", rid)
		require.Contains(t, out, "NAME         flag wins")
		require.Contains(t, out, "DESCRIPTION  d2")
		require.Contains(t, out, "stage 2\n  Compute")
		defFile := writeFile(t, "default.yaml", strings.Replace(string(must(os.ReadFile(file2))), "description: d2", "description: d2\nis_default: true", 1))
		requireFlowError(t, b, "update never changes it (use flow rule set-default)", "rule", "update", rid, "-f", defFile)

		// Default.
		require.Contains(t, b.mustFlow(t, "rule", "list", "--default"), "(0 of 0 rules)")
		b.mustFlow(t, "rule", "set-default", rid)
		out = b.mustFlow(t, "rule", "list", "--default")
		require.Contains(t, out, rid)
		require.Contains(t, out, "(1 of 1 rules)")
		require.Contains(t, b.mustFlow(t, "rule", "list", "--default=false"), "(1 of 1 rules)")

		// Associations, by rack name and by UUID.
		require.Equal(t, "rack g10 ("+rackID+") now uses rule \"flag wins\" ("+rid+")", b.mustFlow(t, "rule", "associate", "g10", rid))
		out = b.mustFlow(t, "rule", "associations", "g10")
		require.Contains(t, out, "power_control.power_off")
		require.Contains(t, out, rid)
		require.Contains(t, out, "flag wins")
		require.Equal(t, rid, b.mustFlow(t, "rule", "associations", rackID, "--type", "power_control", "--code", "power_off"))
		require.Contains(t, b.mustFlow(t, "rule", "associations", "g10", "-o", "json"), `"operationCode": "power_off"`)
		requireFlowError(t, b, "failed_precondition: operation rule is associated with racks", "rule", "delete", rid)
		require.Equal(t, "rack g10 ("+rackID+") no longer has a rule for power_control.power_off",
			b.mustFlow(t, "rule", "disassociate", "g10", "--type", "power_control", "--code", "power_off"))
		require.Contains(t, b.mustFlow(t, "rule", "associations", "g10", "--type", "power_control", "--code", "power_off"), "has no rule for power_control.power_off")
		requireFlowError(t, b, "want --type T and --code C", "rule", "disassociate", "g10")

		require.Equal(t, "deleted rule "+rid, b.mustFlow(t, "rule", "delete", rid))
		requireFlowError(t, b, "not_found", "rule", "get", rid)
	})
}

func TestCLIRuleLoad(t *testing.T) {
	t.Parallel()

	t.Run("DryRunWithoutServer", func(t *testing.T) {
		t.Parallel()
		// Nothing listens on port 1: a dry run must not need the server.
		b := &cliBundle{env: map[string]string{"FLOW_SERVER": "127.0.0.1:1"}}
		out := b.mustFlow(t, "rule", "load", "-f", "../examples/rules/power-defaults.yaml", "--dry-run")
		require.Contains(t, out, "power_control.power_on   Staged power on   3       3")
		require.Contains(t, out, "dry run: 2 rule(s) valid; nothing was sent to the server")
		out = b.mustFlow(t, "rule", "load", "-f", "../examples/rules/power-defaults.yaml", "--dry-run", "-o", "json")
		require.Contains(t, out, `"isDefault": true`)

		onlyOn := writeFile(t, "on.yaml", "rules:\n  - name: on\n    operation_type: power_control\n    operation_code: power_on\n    rule_definition: {steps: []}\n")
		requireFlowError(t, b, "on.yaml: rules: a file with power_control rules must also contain power_control.power_off", "rule", "load", "-f", onlyOn, "--dry-run")
		_, _, err := b.flow("rule", "load", "-f", onlyOn)
		require.ErrorIs(t, err, operations.ErrInvalidRule, "validation happens before any call")

		twoBad := writeFile(t, "two.yaml", "rules:\n  - {name: '', operation_type: power_control, operation_code: power_on}\n"+
			"  - {name: b, operation_type: power_control, operation_code: power_of, rule_definition: {}}\n")
		requireFlowError(t, b, "two.yaml:\n  rule 0: name: rule name is required\n  rule 1 (\"b\"): operation_code: invalid operation code 'power_of'", "rule", "load", "-f", twoBad, "--dry-run")
	})

	t.Run("LoadAndOverwrite", func(t *testing.T) {
		t.Parallel()
		b := setupRuleCLI(t)
		b.mustFlow(t, "rack", "create", "-f", "../examples/rack-g10.json")

		out := b.mustFlow(t, "rule", "load", "-f", "../examples/rules/power-defaults.yaml", "-o", "json")
		var first struct {
			Rules []struct {
				ID            struct{ ID string }
				OperationCode string
			}
		}
		require.NoError(t, json.Unmarshal([]byte(out), &first))
		require.Len(t, first.Rules, 2)
		oldOn, oldOff := first.Rules[0].ID.ID, first.Rules[1].ID.ID
		require.Equal(t, "power_on", first.Rules[0].OperationCode)
		require.Contains(t, b.mustFlow(t, "rule", "list", "--default"), "(2 of 2 rules)")

		// Without --overwrite nothing is written.
		requireFlowError(t, b, "already_exists: nothing loaded: power_control.power_on has default rule "+oldOn, "rule", "load", "-f", "../examples/rules/power-defaults.yaml")
		require.Contains(t, b.mustFlow(t, "rule", "list"), "(2 of 2 rules)")

		// The old power_on default is associated with a rack: --overwrite
		// replaces it as the default but keeps it, with its association.
		b.mustFlow(t, "rule", "associate", "g10", oldOn)
		out = b.mustFlow(t, "rule", "load", "-f", "../examples/rules/power-defaults.yaml", "--overwrite")
		require.Contains(t, out, "replaced "+oldOn+" (kept as non-default: racks are associated with it)")
		require.Contains(t, out, "replaced "+oldOff)

		defaults := b.mustFlow(t, "rule", "list", "--default")
		require.Contains(t, defaults, "(2 of 2 rules)")
		require.NotContains(t, defaults, oldOn)
		require.NotContains(t, defaults, oldOff)
		require.Contains(t, b.mustFlow(t, "rule", "get", oldOn), "DEFAULT      no")
		requireFlowError(t, b, "not_found", "rule", "get", oldOff)
		require.Equal(t, oldOn, b.mustFlow(t, "rule", "associations", "g10", "--type", "power_control", "--code", "power_on"))
		require.Contains(t, b.mustFlow(t, "rule", "list"), "(3 of 3 rules)")
	})

	t.Run("RollbackOnCreateFailure", func(t *testing.T) {
		t.Parallel()
		b := setupRuleCLI(t, ruleFaults{failCreate: 2})
		requireFlowError(t, b, "create rule 1 (power_control.power_off): unavailable: injected fault", "rule", "load", "-f", "../examples/rules/power-defaults.yaml")
		require.Contains(t, b.mustFlow(t, "rule", "list"), "(0 of 0 rules)", "the power_on default created first was rolled back")
	})

	t.Run("RollbackOnSetDefaultFailure", func(t *testing.T) {
		t.Parallel()
		b := setupRuleCLI(t, ruleFaults{failSetDefault: 2})
		before := b.mustFlow(t, "rule", "load", "-f", "../examples/rules/power-defaults.yaml")
		// power_on is switched (call 1), power_off fails (call 2), power_on
		// gets its old default back (call 3) and both new rules go.
		requireFlowError(t, b, "for power_control.power_off: unavailable: injected fault", "rule", "load", "-f", "../examples/rules/power-defaults.yaml", "--overwrite")
		out := b.mustFlow(t, "rule", "list", "--default")
		require.Contains(t, out, "(2 of 2 rules)")
		for _, line := range strings.Split(before, "\n")[1:] {
			require.Contains(t, out, strings.Fields(line)[len(strings.Fields(line))-2], "old default restored")
		}
		require.Contains(t, b.mustFlow(t, "rule", "list"), "(2 of 2 rules)", "new rules deleted")
	})
}
