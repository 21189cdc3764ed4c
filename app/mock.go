package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

// mockBackend answers upstream's mock component manager: Flow's NICo Core
// simulator served in process on a loopback port, with its client. It
// starts empty, learns devices as Flow declares them (ingestion injects
// the expectations), and forgets everything when the process ends.
type mockBackend struct {
	sim    *nicosim.Sim
	srv    *sim.Server
	client *nico.Client
}

// startMock starts the simulator that answers the types cfg manages with
// mock.
func startMock(ctx context.Context, cfg Config, logger *slog.Logger) (*mockBackend, error) {
	// Mock hardware answers at once: power changes, firmware phases and
	// lifecycle steps take a tenth of a second.
	const step = 100 * time.Millisecond
	m := &mockBackend{sim: nicosim.New(nicosim.Options{PowerDelay: step, FirmwarePhase: step, IngestionStep: step, DecommissionStep: step})}
	var err error
	if m.srv, err = sim.Listen("127.0.0.1:0", m.sim.Handler()); err != nil {
		return nil, fmt.Errorf("mock component manager: %w", err)
	}
	if m.client, err = nico.NewClient(m.srv.URL(), nico.WithTimeout(cfg.Components.NICoTimeout)); err != nil {
		_ = m.srv.Close(ctx)
		return nil, fmt.Errorf("mock component manager: %w", err)
	}
	logger.InfoContext(ctx, "mock component manager: these component types are answered by Flow's in-process NICo Core simulator, not by hardware",
		"types", mockTypes(cfg), "simulator", m.srv.URL())
	return m, nil
}

func mockTypes(cfg Config) []string {
	var out []string
	for t, impl := range cfg.Components.Managers {
		if impl == "mock" {
			out = append(out, string(t))
		}
	}
	slices.Sort(out)
	return out
}

// closeMock stops the mock simulator, if any.
func (s *server) closeMock(ctx context.Context) {
	if s.mock != nil {
		_ = s.mock.srv.Close(context.WithoutCancel(ctx))
	}
}
