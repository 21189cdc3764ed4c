package operations_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/opstest"
)

// TestSubmitMany: requests submitted together are admitted one after the
// other, each seeing those before it: on one rack the second is refused
// (REJECT) or waits (QUEUE) behind the first, racks named by name are
// found, a repeated idempotency key answers with the first task, and a bad
// request fails alone, having written nothing.
func TestSubmitMany(t *testing.T) {
	t.Parallel()
	b := setupTasks(t, nil)
	ctx := context.Background()
	inv := inventory.NewService()
	other := inventory.DemoRack(2)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		other.ID, err = inv.CreateRack(ctx, tx, other)
		return err
	}))
	// other runs its associated rule, b.rack the built-in one (no default
	// rule): the batch resolves both in one query.
	builtin, ok := operations.BuiltinRule(operations.OperationTypePowerControl, operations.CodePowerOn)
	require.True(t, ok)
	def, err := json.Marshal(builtin.Definition)
	require.NoError(t, err)
	var custom operations.Rule
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		if custom, err = b.rules.CreateRule(ctx, tx, operations.RuleInput{Name: "custom-on", Type: operations.OperationTypePowerControl, Code: operations.CodePowerOn, Definition: def}); err != nil {
			return err
		}
		_, err = b.rules.AssociateRule(ctx, tx, other.ID, custom.ID)
		return err
	}))
	byName := func(r inventory.Rack) operations.Request {
		req := opstest.PowerOn(r)
		req.Targets = inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{Name: r.Name}}}}
		return req
	}
	keyed := opstest.PowerOn(other)
	keyed.IdempotencyKey, keyed.RequiredRackID = "fire-1", other.ID
	queued := opstest.PowerOn(b.rack)
	queued.Queue = true
	missing := opstest.PowerOn(b.rack)
	missing.Targets = inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{Name: "no-such-rack"}}}}

	subs := []*operations.Submission{
		{Req: byName(b.rack)}, // 0: admitted
		{Req: byName(b.rack)}, // 1: conflicts with 0
		{Req: queued},         // 2: waits behind 0
		{Req: keyed},          // 3: admitted
		{Req: keyed},          // 4: the task of 3
		{Req: missing},        // 5: not found
		{Req: operations.Request{Type: "nope"}},
	}
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return b.tasks.SubmitMany(ctx, tx, subs)
	}))
	require.NoError(t, subs[0].Err)
	require.Len(t, subs[0].IDs, 1)
	require.ErrorIs(t, subs[1].Err, operations.ErrConflict)
	require.ErrorContains(t, subs[1].Err, subs[0].IDs[0].String(), "the conflict names the task submitted before it")
	require.Empty(t, subs[1].IDs)
	require.NoError(t, subs[2].Err)
	require.NoError(t, subs[3].Err)
	require.NoError(t, subs[4].Err)
	require.Equal(t, subs[3].IDs, subs[4].IDs)
	require.ErrorIs(t, subs[5].Err, inventory.ErrRackNotFound)
	require.ErrorIs(t, subs[6].Err, operations.ErrInvalidRequest)
	require.Equal(t, 3, b.count())

	got, err := b.tasks.Get(ctx, append(append(subs[0].IDs, subs[2].IDs...), subs[3].IDs...))
	require.NoError(t, err)
	status := map[string]operations.TaskStatus{}
	rules := map[string]string{}
	for _, task := range got {
		status[task.ID.String()] = task.Status
		rules[task.ID.String()] = task.RuleName
	}
	require.Equal(t, "custom-on", rules[subs[3].IDs[0].String()], "the rack's associated rule")
	require.Equal(t, builtin.Name, rules[subs[0].IDs[0].String()], "no association, no default: the built-in rule")
	require.Equal(t, operations.TaskPending, status[subs[0].IDs[0].String()])
	require.Equal(t, operations.TaskWaiting, status[subs[2].IDs[0].String()])
	require.Equal(t, operations.TaskPending, status[subs[3].IDs[0].String()])

	// A later submission sees them all: the key still answers with its
	// task, and the rack is still busy.
	again, err := b.submit(t, keyed)
	require.NoError(t, err)
	require.Equal(t, subs[3].IDs, again)
	_, err = b.submit(t, opstest.PowerOn(b.rack))
	require.ErrorIs(t, err, operations.ErrConflict)
}
