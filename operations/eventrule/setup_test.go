package eventrule_test

import (
	"context"
	"errors"
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
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/operations"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/psm"
)

// The task manager event rules submit to, set up as the operations tests
// set it up.

// inventoryRacks answers RackExists from the real inventory, as app wires it.
type inventoryRacks struct{ inv *inventory.Service }

func (l inventoryRacks) RackExists(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (bool, error) {
	_, err := l.inv.Rack(ctx, dbtx, id, false)
	if errors.Is(err, inventory.ErrRackNotFound) {
		return false, nil
	}
	return err == nil, err
}

type unimplemented struct {
	flowv1connect.UnimplementedFlowHandler
}

func pbID(id uuid.UUID) *flowv1.UUID { return &flowv1.UUID{Id: id.String()} }

// taskBundle is a task manager on a fresh database whose engine can start
// runs (its River client inserts jobs) but works none.
type taskBundle struct {
	pool  *pgxpool.Pool
	tasks *operations.Tasks
	rack  inventory.Rack
	count func() int
}

func setupTasks(t testing.TB) *taskBundle {
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
	tasks := operations.NewTasks(operations.TasksConfig{Pool: pool, Rules: rules, Inv: inv, Engine: e, Backends: managers, Logger: logger})
	return &taskBundle{pool: pool, tasks: tasks, rack: rack, count: func() int {
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
