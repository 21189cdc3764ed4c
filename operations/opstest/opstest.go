// Package opstest sets up the task manager for tests: a fresh database, the
// real inventory and rules, an engine whose River client inserts jobs, and
// backend clients that are configured but unreachable, as the operations,
// schedule and event-rule tests use it. It also serves a v1.Flow handler
// over Connect and gRPC, and checks Connect errors.
//
// It is a normal package so that the test packages of operations and of
// its feature packages can share it, but only tests import it (enforced by
// app's TestImportRules): it calls testing and require, and fails the test
// on any setup error.
package opstest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
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
	"github.com/nicoflow/flow/firmware"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/psm"
)

// Racks answers RackExists from the real inventory, as app wires it.
type Racks struct{ Inv *inventory.Service }

// RackExists reports whether the rack is in the inventory.
func (l Racks) RackExists(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (bool, error) {
	_, err := l.Inv.Rack(ctx, dbtx, id, false)
	if errors.Is(err, inventory.ErrRackNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Config adjusts the task manager NewTasks sets up. The zero value is a
// task manager with no firmware keys that logs nothing.
type Config struct {
	Keys *firmware.Keyring
	// Logger is the actions' and the task manager's logger (the engine's
	// discards); nil discards.
	Logger *slog.Logger
	// RunEnded wires the engine's run ends to Tasks.RunsEnded, as app does.
	RunEnded bool
	// River adjusts the River config before the client is made: a
	// feature's queues and workers.
	River func(*river.Config)
	// Expiry is the task manager's ExpiryScheduler (nil: none).
	Expiry operations.ExpiryScheduler
}

// Bundle is a task manager on a fresh database whose engine can start runs
// (its River client inserts jobs) but works none until a test starts the
// River client.
type Bundle struct {
	Pool   *pgxpool.Pool
	Inv    *inventory.Service
	Rules  *operations.Service
	Engine *engine.Engine
	River  *river.Client[pgx.Tx]
	Tasks  *operations.Tasks
}

// NewTasks sets up a task manager on a fresh database (dbtest.NewPool).
func NewTasks(t testing.TB, cfg Config) *Bundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	inv := inventory.NewService()
	rules, err := operations.NewService(Racks{Inv: inv})
	require.NoError(t, err)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m := &Bundle{Pool: pool, Inv: inv, Rules: rules}
	ecfg := engine.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if cfg.RunEnded {
		ecfg.OnRunEnd = func(ctx context.Context, tx pgx.Tx, runs []engine.RunSummary) error {
			return m.Tasks.RunsEnded(ctx, tx, runs)
		}
	}
	m.Engine = engine.New(pool, ecfg)
	// Configured (submit refuses a type whose backend is not), unreachable:
	// steps that run fail, which the tests do not mind.
	nc, err := nico.NewClient("http://127.0.0.1:1")
	require.NoError(t, err)
	pc, err := psm.NewClient("http://127.0.0.1:1")
	require.NoError(t, err)
	managers := backend.New(backend.DefaultConfig(), nc, pc)
	operations.RegisterActions(m.Engine, operations.ActionDeps{Pool: pool, Backends: managers, Inv: inv, Logger: logger})
	rc := m.Engine.RiverConfig()
	if cfg.River != nil {
		cfg.River(rc)
	}
	m.River, err = river.NewClient(riverpgxv5.New(pool), rc)
	require.NoError(t, err)
	m.Engine.SetClient(m.River)
	m.Tasks = operations.NewTasks(operations.TasksConfig{Pool: pool, Rules: rules, Inv: inv, Engine: m.Engine, Backends: managers, Keys: cfg.Keys, Logger: logger, Expiry: cfg.Expiry})
	return m
}

// AddRack stores demo rack i (inventory.DemoRack) and returns it with its ID.
func (m *Bundle) AddRack(t testing.TB, i int) inventory.Rack {
	t.Helper()
	return AddRack(t, m.Pool, m.Inv, i)
}

// AddRack stores demo rack i (inventory.DemoRack) and returns it with its ID.
func AddRack(t testing.TB, pool *pgxpool.Pool, inv *inventory.Service, i int) inventory.Rack {
	t.Helper()
	ctx := context.Background()
	r := inventory.DemoRack(i)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		r.ID, err = inv.CreateRack(ctx, tx, r)
		return err
	}))
	return r
}

// Submit submits req in a transaction of its own and returns the tasks'
// IDs and Submit's error.
func (m *Bundle) Submit(t testing.TB, req operations.Request) ([]uuid.UUID, error) {
	t.Helper()
	var ids []uuid.UUID
	err := pgx.BeginFunc(context.Background(), m.Pool, func(tx pgx.Tx) (err error) {
		ids, err = m.Tasks.Submit(context.Background(), tx, req)
		return err
	})
	return ids, err
}

// TaskCount returns the number of tasks in the database.
func (m *Bundle) TaskCount(t testing.TB) int {
	t.Helper()
	var n int
	require.NoError(t, m.Pool.QueryRow(context.Background(), `SELECT count(*) FROM task`).Scan(&n))
	return n
}

// PowerOn is a power-on request for the whole rack.
func PowerOn(rack inventory.Rack) operations.Request {
	return operations.Request{
		Type: operations.OperationTypePowerControl, Code: operations.CodePowerOn,
		Targets: inventory.TargetSpec{Racks: []inventory.RackTarget{{Rack: inventory.RackRef{ID: rack.ID}}}},
	}
}

// Server is a v1.Flow handler served by Serve.
type Server struct {
	URL    string                   // base URL
	Client flowv1connect.FlowClient // Connect protocol
	GRPC   flowv1connect.FlowClient // gRPC over h2c
}

// Serve serves h over HTTP/1.1 and unencrypted HTTP/2 until the test ends.
func Serve(t testing.TB, h flowv1connect.FlowHandler) *Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(flowv1connect.NewFlowHandler(h))
	srv := httptest.NewUnstartedServer(mux)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protocols
	srv.Start()
	t.Cleanup(srv.Close)
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	return &Server{
		URL:    srv.URL,
		Client: flowv1connect.NewFlowLeanClient(srv.Client(), srv.URL),
		GRPC:   flowv1connect.NewFlowClient(&http.Client{Transport: &http.Transport{Protocols: &h2c}}, srv.URL, connect.WithGRPC()),
	}
}

// RequireCode checks that err is a *connect.Error with code whose message
// contains msg.
func RequireCode(t testing.TB, err error, code connect.Code, msg string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, connect.CodeOf(err), "%v", err)
	var ce *connect.Error
	require.True(t, errors.As(err, &ce))
	require.Contains(t, ce.Message(), msg)
}
