package operations_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nicoflow/flow/operations/ruledef"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
)

// setupRuleFuzz is setupTasks with the rules service as a server wires
// it: the engine's plan check at create and update.
func setupRuleFuzz(t testing.TB) *taskBundle {
	b := setupTasks(t, nil)
	b.rules.SetPlanCheck(b.engine.CheckPlan)
	return b
}

// FuzzRuleDefinition: a rule definition is accepted ⇔ it runs. Whatever
// the bytes, CreateRule either refuses them with a ValidationError on
// rule_definition_json (never another error, never a panic; a definition
// that passes the rule's own validation is refused only because the engine
// cannot run it), or stores a rule that a power-control submit on a real
// rack then starts (or finds no step for the rack's components), never
// refused by the engine.
func FuzzRuleDefinition(f *testing.F) {
	b := setupRuleFuzz(f)
	codes := operations.OperationTypePowerControl.Codes()
	for _, r := range operations.BuiltinRules() {
		def, err := json.Marshal(r.Definition)
		require.NoError(f, err)
		f.Add(uint8(0), def)
	}
	for _, def := range []string{
		`{"steps":[{"component_type":"Compute","stage":1,"timeout":"1h","main_operation":{"name":"PowerControl"}}]}`,
		`{"steps":[{"component_type":"Compute","stage":1,"retry":{"max_attempts":100000000,"initial_interval":"1s","backoff_coefficient":2},"main_operation":{"name":"PowerControl"}}]}`,
		`{"steps":[{"component_type":"Compute","stage":1,"timeout":"20m","max_parallel":1,"retry":{"max_attempts":1000,"initial_interval":"1s","backoff_coefficient":2,"max_interval":"24h"},"main_operation":{"name":"PowerControl"}}]}`,
		`{"steps":[{"component_type":"PowerShelf","stage":1,"timeout":"5s","retry":{"max_attempts":3,"initial_interval":"100ms","backoff_coefficient":2},"main_operation":{"name":"PowerControl"},"post_operation":[{"name":"VerifyPowerStatus","timeout":"30s","poll_interval":"200ms","parameters":{"expected_status":"on"}}]}]}`,
		`{"steps":[{"component_type":"Compute","stage":1,"main_operation":{"name":"Sleep","parameters":{"duration":"2562047h"}}}]}`,
		`{"steps":[{"component_type":"Compute","stage":1,"main_operation":{"name":"VerifyPowerStatus","timeout":"2562047h47m16s","poll_interval":"1ns","parameters":{"expected_status":"on"}}}]}`,
		`{"steps":[{"component_type":"Compute","stage":1,"delay_after":"9223372036854775807","main_operation":{"name":"PowerControl"}}]}`,
		`{"version":"v1","steps":[]}`,
		`{"steps":[{"component_type":"NVSwitch","stage":2,"max_parallel":-1,"main_operation":{"name":"PowerControl"}}]}`,
		`[]`, `{"steps":null}`, `{"version":"v2"}`, `{"steps":[{"component_type":"Compute","stage":1,"main_operation":{"name":"PowerControl"}}],"x":1}`,
	} {
		f.Add(uint8(0), []byte(def))
	}
	f.Fuzz(func(t *testing.T, c uint8, def []byte) {
		// A stuck query fails the input instead of hanging the worker.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		code := codes[int(c)%len(codes)]
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		rule, err := b.rules.CreateRule(ctx, tx, operations.RuleInput{Name: "fuzz", Type: operations.OperationTypePowerControl, Code: code, Definition: def})
		if err != nil {
			var ve *operations.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, "rule_definition_json", ve.Field, "%v", err)
			if parsed, perr := ruledef.Parse(def); perr == nil && parsed.Validate() == nil {
				require.Contains(t, ve.Msg, "rule cannot run", "refused for another reason than running: %v", err)
			}
			return
		}
		_, err = b.tasks.Submit(ctx, tx, operations.Request{
			Type: operations.OperationTypePowerControl, Code: code, RuleID: rule.ID,
			Targets: inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{ID: b.rack.ID}}}},
		})
		if err != nil {
			require.NotErrorIs(t, err, operations.ErrRuleNotRunnable, "an accepted rule does not run: %v", err)
			require.ErrorIs(t, err, operations.ErrNotApplicable, "submit with an accepted rule: %v", err)
		}
	})
}
