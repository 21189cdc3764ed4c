package edge

import (
	"context"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"
)

// Health serves grpc.health.v1.Health for the server ("") and v1.Flow. It
// answers SERVING until shutdown begins, then NOT_SERVING, so load balancers
// drain the instance before it stops.
type Health struct {
	mu      sync.Mutex
	serving bool
	changed chan struct{} // closed and replaced on every change
}

// NewHealth returns a Health that answers SERVING.
func NewHealth() *Health {
	return &Health{serving: true, changed: make(chan struct{})}
}

// SetServing records the server's status and wakes every Watch.
func (h *Health) SetServing(serving bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.serving == serving {
		return
	}
	h.serving = serving
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *Health) status(service string) (healthv1.HealthCheckResponse_ServingStatus, <-chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if service != "" && service != flowv1connect.FlowName {
		return healthv1.HealthCheckResponse_SERVICE_UNKNOWN, h.changed, false
	}
	if h.serving {
		return healthv1.HealthCheckResponse_SERVING, h.changed, true
	}
	return healthv1.HealthCheckResponse_NOT_SERVING, h.changed, true
}

// Check implements grpc.health.v1.Health/Check.
func (h *Health) Check(_ context.Context, req *healthv1.HealthCheckRequest) (*healthv1.HealthCheckResponse, error) {
	st, _, known := h.status(req.GetService())
	if !known {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %q", req.GetService()))
	}
	return &healthv1.HealthCheckResponse{Status: st}, nil
}

// Watch implements grpc.health.v1.Health/Watch.
func (h *Health) Watch(ctx context.Context, req *healthv1.HealthCheckRequest, stream *connect.ServerStream[healthv1.HealthCheckResponse]) error {
	for {
		st, changed, _ := h.status(req.GetService())
		if err := stream.Send(&healthv1.HealthCheckResponse{Status: st}); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

var _ healthHandler = (*Health)(nil)
