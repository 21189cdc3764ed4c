package nicosim

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	forgepb "github.com/nicoflow/flow/proto/gen/forge"
)

// FirmwareWindow is the firmware update time window Core holds for a
// machine (SetFirmwareUpdateTimeWindow).
type FirmwareWindow struct {
	Start, End time.Time
}

// SetFirmwareUpdateTimeWindow records the window of each machine: every
// machine must be a known compute tray (NotFound names the first that is
// not, and nothing is recorded), and the window must end after it starts
// (InvalidArgument).
func (h *handler) SetFirmwareUpdateTimeWindow(ctx context.Context, req *forgepb.SetFirmwareUpdateTimeWindowRequest) (_ *forgepb.SetFirmwareUpdateTimeWindowResponse, err error) {
	const method = "SetFirmwareUpdateTimeWindow"
	var ids []string
	for _, m := range req.GetMachineIds() {
		ids = append(ids, m.GetId())
	}
	defer h.end(method, ids, &err)
	if err := h.begin(ctx, method, ids); err != nil {
		return nil, err
	}
	start, end := req.GetStartTimestamp().AsTime(), req.GetEndTimestamp().AsTime()
	if req.StartTimestamp == nil || req.EndTimestamp == nil || !end.After(start) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("start_timestamp and end_timestamp: want a window that ends after it starts"))
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	for _, id := range ids {
		if h.s.byID(KindCompute, id) == nil {
			return nil, connect.NewError(connect.CodeNotFound, errors.New(KindCompute+" "+id+" not found"))
		}
	}
	if h.s.fwWindows == nil {
		h.s.fwWindows = map[string]FirmwareWindow{}
	}
	for _, id := range ids {
		h.s.fwWindows[id] = FirmwareWindow{Start: start, End: end}
	}
	return &forgepb.SetFirmwareUpdateTimeWindowResponse{}, nil
}

// FirmwareWindowOf returns the firmware update time window Core holds for
// machine id; false when none was set.
func (s *Sim) FirmwareWindowOf(id string) (FirmwareWindow, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.fwWindows[id]
	return w, ok
}
