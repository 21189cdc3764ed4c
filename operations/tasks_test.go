package operations_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/opstest"
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
	m      *opstest.Bundle
}

func setupTasks(t testing.TB, keys *firmware.Keyring) *taskBundle {
	t.Helper()
	m := opstest.NewTasks(t, opstest.Config{Keys: keys})
	return &taskBundle{pool: m.Pool, rules: m.Rules, engine: m.Engine, tasks: m.Tasks, rack: m.AddRack(t, 1), m: m,
		count: func() int { return m.TaskCount(t) }}
}

func (b *taskBundle) submit(t *testing.T, req operations.Request) ([]uuid.UUID, error) {
	t.Helper()
	return b.m.Submit(t, req)
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setupTasks(t, nil)
	req := opstest.PowerOn(b.rack)
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

	noRack := opstest.PowerOn(b.rack)
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
	req := opstest.PowerOn(b.rack)
	req.Auth = firmware.AuthData{Shared: &secret}
	_, err := b.submit(t, req)
	require.ErrorIs(t, err, operations.ErrNoEncryptionKey)
	require.Zero(t, b.count(), "refused before anything is written")
}
