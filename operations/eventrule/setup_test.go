package eventrule_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/opstest"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// The task manager event rules submit to, set up as the operations tests
// set it up (opstest).

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
	m     *opstest.Bundle
}

func setupTasks(t testing.TB) *taskBundle {
	t.Helper()
	m := opstest.NewTasks(t, opstest.Config{})
	return &taskBundle{pool: m.Pool, tasks: m.Tasks, rack: m.AddRack(t, 1), m: m,
		count: func() int { return m.TaskCount(t) }}
}

func (b *taskBundle) submit(t *testing.T, req operations.Request) ([]uuid.UUID, error) {
	t.Helper()
	return b.m.Submit(t, req)
}
