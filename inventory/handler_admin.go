package inventory

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// AdminHandler serves the inventory methods of Flow's own admin service
// (flow.admin.v1.AdminService, "Inventory"): what operator tools need of the
// inventory beyond v1.Flow. app embeds it in the admin handler.
type AdminHandler struct {
	svc  *Service
	pool *pgxpool.Pool
}

// NewAdminHandler returns an AdminHandler running svc on pool.
func NewAdminHandler(svc *Service, pool *pgxpool.Pool) *AdminHandler {
	return &AdminHandler{svc: svc, pool: pool}
}

// FindDeletedRacks implements flow.admin.v1.AdminService: the soft-deleted
// racks named req.name, which v1.Flow's reads leave out.
func (h *AdminHandler) FindDeletedRacks(ctx context.Context, req *adminv1.FindDeletedRacksRequest) (*adminv1.FindDeletedRacksResponse, error) {
	racks, err := h.svc.DeletedRacks(ctx, h.pool, req.GetName())
	if err != nil {
		return nil, connectError(err)
	}
	out := &adminv1.FindDeletedRacksResponse{Racks: make([]*adminv1.DeletedRack, len(racks))}
	for i, r := range racks {
		dr := &adminv1.DeletedRack{Id: r.ID.String(), Name: r.Name, Manufacturer: r.Manufacturer, SerialNumber: r.SerialNumber}
		if r.DeletedAt != nil {
			dr.DeletedAt = timestamppb.New(*r.DeletedAt)
		}
		out.Racks[i] = dr
	}
	return out, nil
}

// SetRackPlacement implements flow.admin.v1.AdminService: a rack's power
// feed and coolant loop.
func (h *AdminHandler) SetRackPlacement(ctx context.Context, req *adminv1.SetRackPlacementRequest) (*adminv1.SetRackPlacementResponse, error) {
	if req.GetRack() == "" {
		return nil, connectError(invalid("rack", "required: the rack's UUID or name"))
	}
	if req.PowerFeed == nil && req.CoolantLoop == nil {
		return nil, connectError(invalid("power_feed", "give power_feed or coolant_loop (\"\" clears)"))
	}
	var rack Rack
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		rack, err = h.svc.SetRackPlacement(ctx, tx, ParseRackRef(req.GetRack()), Placement{PowerFeed: req.PowerFeed, CoolantLoop: req.CoolantLoop})
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.SetRackPlacementResponse{RackId: rack.ID.String(), RackName: rack.Name, PowerFeed: rack.PowerFeed, CoolantLoop: rack.CoolantLoop}, nil
}
