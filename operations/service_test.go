package operations_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/operations"
)

func TestNewServiceNeedsRackLookup(t *testing.T) {
	t.Parallel()
	_, err := operations.NewService(nil)
	require.Error(t, err)
}

// TestResolveRule walks the resolution order of spec/execution.md §7.4:
// explicit rule → rack association → default → built-in → minimal.
func TestResolveRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rack, otherRack := b.newRack(t), b.newRack(t)
	power := operations.OperationTypePowerControl

	create := func(name string, code operations.OperationCode, isDefault bool) uuid.UUID {
		var id uuid.UUID
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			r, err := b.svc.CreateRule(ctx, tx, operations.RuleInput{
				Name: name, Type: power, Code: code, IsDefault: isDefault,
				Definition: []byte(`{"steps":[{"component_type":"Compute","stage":1,"main_operation":{"name":"PowerControl"}}]}`),
			})
			id = r.ID
			return err
		}))
		return id
	}
	resolve := func(req operations.ResolveRequest) operations.ResolvedRule {
		t.Helper()
		r, err := b.svc.ResolveRule(ctx, b.pool, req)
		require.NoError(t, err)
		return r
	}
	onReq := operations.ResolveRequest{RackID: rack, Type: power, Code: operations.CodePowerOn}

	// Nothing stored: the built-in rule.
	got := resolve(onReq)
	require.Equal(t, operations.RuleSourceBuiltin, got.Source)
	require.Equal(t, "Hardcoded Default Power On", got.Rule.Name)
	require.Equal(t, uuid.Nil, got.Rule.ID)

	// No built-in for warm_reset: the minimal rule with zero steps.
	got = resolve(operations.ResolveRequest{RackID: rack, Type: power, Code: operations.CodeWarmReset})
	require.Equal(t, operations.RuleSourceMinimal, got.Source)
	require.Equal(t, "Minimal Default Rule for power_control.warm_reset", got.Rule.Name)
	require.Empty(t, got.Rule.Definition.Steps)

	// A default rule beats the built-in.
	def := create("default", operations.CodePowerOn, true)
	create("not default", operations.CodePowerOn, false)
	got = resolve(onReq)
	require.Equal(t, operations.RuleSourceDefault, got.Source)
	require.Equal(t, def, got.Rule.ID)

	// A rack association beats the default, for that rack only.
	assoc := create("rack specific", operations.CodePowerOn, false)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.svc.AssociateRule(ctx, tx, rack, assoc)
		return err
	}))
	got = resolve(onReq)
	require.Equal(t, operations.RuleSourceRackAssociation, got.Source)
	require.Equal(t, assoc, got.Rule.ID)
	got = resolve(operations.ResolveRequest{RackID: otherRack, Type: power, Code: operations.CodePowerOn})
	require.Equal(t, operations.RuleSourceDefault, got.Source)
	// …and for its own code only.
	got = resolve(operations.ResolveRequest{RackID: rack, Type: power, Code: operations.CodePowerOff})
	require.Equal(t, operations.RuleSourceBuiltin, got.Source)
	require.Equal(t, "Hardcoded Default Power Off", got.Rule.Name)

	// An association needs no default rule beside it.
	offAssoc := create("rack specific off", operations.CodePowerOff, false)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.svc.AssociateRule(ctx, tx, rack, offAssoc)
		return err
	}))
	got = resolve(operations.ResolveRequest{RackID: rack, Type: power, Code: operations.CodePowerOff})
	require.Equal(t, operations.RuleSourceRackAssociation, got.Source)
	require.Equal(t, offAssoc, got.Rule.ID)

	// An explicit rule beats everything.
	explicit := create("explicit", operations.CodePowerOn, false)
	req := onReq
	req.RuleID = explicit
	got = resolve(req)
	require.Equal(t, operations.RuleSourceExplicit, got.Source)
	require.Equal(t, explicit, got.Rule.ID)

	// Hazard fixed: an explicit rule for another code is rejected.
	req.RuleID = create("power off rule", operations.CodePowerOff, false)
	_, err := b.svc.ResolveRule(ctx, b.pool, req)
	require.ErrorIs(t, err, operations.ErrRuleMismatch)
	require.Contains(t, err.Error(), "is for power_control.power_off, not power_control.power_on")

	// A missing explicit rule is not found, not silently skipped.
	req.RuleID = uuid.New()
	_, err = b.svc.ResolveRule(ctx, b.pool, req)
	require.ErrorIs(t, err, operations.ErrRuleNotFound)

	// Types outside the wire enum resolve to their built-ins.
	got = resolve(operations.ResolveRequest{RackID: rack, Type: operations.OperationTypeBringUp, Code: operations.CodeIngest})
	require.Equal(t, operations.RuleSourceBuiltin, got.Source)
	require.Equal(t, "Hardcoded Default Ingest", got.Rule.Name)
	got = resolve(operations.ResolveRequest{Type: operations.OperationTypeDecommission, Code: operations.CodeDecommission})
	require.Equal(t, operations.RuleSourceBuiltin, got.Source)

	// FLOW_INGEST_FIRMWARE_UPGRADE: ingest tasks run the built-in with the
	// firmware steps; other operations are unchanged.
	require.NoError(t, b.svc.SetIngestFirmwareUpgrade(true))
	got = resolve(operations.ResolveRequest{RackID: rack, Type: operations.OperationTypeBringUp, Code: operations.CodeIngest})
	require.Equal(t, operations.RuleSourceBuiltin, got.Source)
	require.Equal(t, "Hardcoded Default Ingest with Firmware Upgrade", got.Rule.Name)
	var stages []string
	for _, st := range got.Rule.Definition.Steps {
		stages = append(stages, fmt.Sprintf("%d %s %s", st.Stage, st.ComponentType, st.MainOperation.Name))
	}
	require.Equal(t, []string{"1 Compute InjectExpectation", "1 NVSwitch InjectExpectation", "2 Compute FirmwareControl", "3 NVSwitch FirmwareControl"}, stages)
	got.Rule.Definition.Steps[0].Stage = 9
	again := resolve(operations.ResolveRequest{RackID: rack, Type: operations.OperationTypeBringUp, Code: operations.CodeIngest})
	require.Equal(t, 1, again.Rule.Definition.Steps[0].Stage, "each resolution gets its own copy")
	require.Equal(t, "Hardcoded Default Bring Up", resolve(operations.ResolveRequest{RackID: rack, Type: operations.OperationTypeBringUp, Code: operations.CodeBringUp}).Rule.Name)
	require.NoError(t, b.svc.SetIngestFirmwareUpgrade(false))
	require.Equal(t, "Hardcoded Default Ingest", resolve(operations.ResolveRequest{RackID: rack, Type: operations.OperationTypeBringUp, Code: operations.CodeIngest}).Rule.Name)

	// An invalid (type, code) is a validation error.
	_, err = b.svc.ResolveRule(ctx, b.pool, operations.ResolveRequest{Type: power, Code: operations.CodeUpgrade})
	require.ErrorIs(t, err, operations.ErrInvalidRule)
}

// TestResolvedRuleIsFrozen shows the resolved definition is the caller's
// copy: later edits of the rule do not reach it.
func TestResolvedRuleIsFrozen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var id uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		r, err := b.svc.CreateRule(ctx, tx, operations.RuleInput{
			Name: "d", Type: operations.OperationTypeFirmwareControl, Code: operations.CodeUpgrade, IsDefault: true,
			Definition: []byte(`{"steps":[{"component_type":"Compute","stage":1,"main_operation":{"name":"FirmwareControl"}}]}`),
		})
		id = r.ID
		return err
	}))
	got, err := b.svc.ResolveRule(ctx, b.pool, operations.ResolveRequest{Type: operations.OperationTypeFirmwareControl, Code: operations.CodeUpgrade})
	require.NoError(t, err)
	require.Equal(t, id, got.Rule.ID)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.svc.UpdateRule(ctx, tx, id, operations.RuleChange{Definition: []byte(`{"steps":[]}`)})
		return err
	}))
	require.Len(t, got.Rule.Definition.Steps, 1)
}
