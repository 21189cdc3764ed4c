package inventory

import (
	"context"

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
