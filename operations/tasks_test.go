package operations_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/psm"
)

// taskBundle is a task manager on a fresh database whose engine can start
// runs (its River client inserts jobs) but works none: these tests look at
// what submission writes.
type taskBundle struct {
	pool   *pgxpool.Pool
	rules  *operations.Service
	engine *engine.Engine
	tasks  *operations.Tasks
	rack   inventory.Rack
	count  func() int
}

func setupTasks(t testing.TB, keys *firmware.Keyring) *taskBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	inv := inventory.NewService()
	rack := inventory.DemoRack(1)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		rack.ID, err = inv.CreateRack(ctx, tx, rack)
		return err
	}))
	rules, err := operations.NewService(inventoryRacks{inv: inv})
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := engine.New(pool, engine.Config{Logger: logger})
	// Configured (submit refuses a type whose backend is not), never
	// called: the River client is not started here.
	nc, err := nico.NewClient("http://127.0.0.1:1")
	require.NoError(t, err)
	pc, err := psm.NewClient("http://127.0.0.1:1")
	require.NoError(t, err)
	managers := backend.New(backend.DefaultConfig(), nc, pc)
	operations.RegisterActions(e, operations.ActionDeps{Pool: pool, Backends: managers, Inv: inv, Logger: logger})
	client, err := river.NewClient(riverpgxv5.New(pool), e.RiverConfig())
	require.NoError(t, err)
	e.SetClient(client)
	tasks := operations.NewTasks(operations.TasksConfig{Pool: pool, Rules: rules, Inv: inv, Engine: e, Backends: managers, Keys: keys, Logger: logger})
	return &taskBundle{pool: pool, rules: rules, engine: e, tasks: tasks, rack: rack, count: func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task`).Scan(&n))
		return n
	}}
}

func (b *taskBundle) submit(t *testing.T, req operations.Request) ([]uuid.UUID, error) {
	t.Helper()
	var ids []uuid.UUID
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		ids, err = b.tasks.Submit(context.Background(), tx, req)
		return err
	})
	return ids, err
}

func powerOn(rack inventory.Rack) operations.Request {
	return operations.Request{
		Type: operations.OperationTypePowerControl, Code: operations.CodePowerOn,
		Targets: inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{ID: rack.ID}}}},
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setupTasks(t, nil)
	req := powerOn(b.rack)
	req.IdempotencyKey, req.RequiredRackID = "schedule-7/fire-42", b.rack.ID
	first, err := b.submit(t, req)
	require.NoError(t, err)
	require.Len(t, first, 1)
	again, err := b.submit(t, req)
	require.NoError(t, err)
	require.Equal(t, first, again, "a repeated submission returns the task it created")
	require.Equal(t, 1, b.count())

	other := req
	other.RequiredRackID = uuid.New()
	_, err = b.submit(t, other)
	require.ErrorIs(t, err, operations.ErrInvalidRequest, "the key belongs to another rack")

	noRack := powerOn(b.rack)
	noRack.IdempotencyKey = "k"
	_, err = b.submit(t, noRack)
	require.ErrorIs(t, err, operations.ErrInvalidRequest)
	require.ErrorContains(t, err, "idempotency_key")
	require.Equal(t, 1, b.count())
}

func TestCredentialsNeedAKey(t *testing.T) {
	t.Parallel()
	secret := "s3cret-token"
	b := setupTasks(t, nil)
	req := powerOn(b.rack)
	req.Auth = firmware.AuthData{Shared: &secret}
	_, err := b.submit(t, req)
	require.ErrorIs(t, err, operations.ErrNoEncryptionKey)
	require.Zero(t, b.count(), "refused before anything is written")
}
