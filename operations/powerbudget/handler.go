package powerbudget

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/caller"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// Handler serves the power budget methods of flow.admin.v1.AdminService.
type Handler struct{ svc *Service }

// NewHandler returns a Handler over svc.
func NewHandler(svc *Service) *Handler { return &Handler{svc: svc} }

// SetPowerBudget implements flow.admin.v1.AdminService.
func (h *Handler) SetPowerBudget(ctx context.Context, req *adminv1.SetPowerBudgetRequest) (*adminv1.SetPowerBudgetResponse, error) {
	b, err := h.svc.Set(ctx, req.GetFeed(), int(req.GetMaxTransitions()), req.MaxKw, caller.Identity(ctx))
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.SetPowerBudgetResponse{Budget: toProto(b)}, nil
}

// ListPowerBudgets implements flow.admin.v1.AdminService.
func (h *Handler) ListPowerBudgets(ctx context.Context, _ *adminv1.ListPowerBudgetsRequest) (*adminv1.ListPowerBudgetsResponse, error) {
	all, err := h.svc.List(ctx)
	if err != nil {
		return nil, err
	}
	out := &adminv1.ListPowerBudgetsResponse{Budgets: make([]*adminv1.PowerBudget, len(all))}
	for i, b := range all {
		out.Budgets[i] = toProto(b)
	}
	return out, nil
}

// DeletePowerBudget implements flow.admin.v1.AdminService.
func (h *Handler) DeletePowerBudget(ctx context.Context, req *adminv1.DeletePowerBudgetRequest) (*adminv1.DeletePowerBudgetResponse, error) {
	if req.GetFeed() == "" {
		return nil, connectError(errors.Join(ErrInvalid, errors.New("feed: required")))
	}
	b, err := h.svc.Delete(ctx, req.GetFeed())
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.DeletePowerBudgetResponse{Budget: toProto(b)}, nil
}

func toProto(b Budget) *adminv1.PowerBudget {
	p := &adminv1.PowerBudget{
		Feed: b.Feed, HasBudget: b.Set, MaxTransitions: int32(b.MaxTransitions), MaxKw: b.MaxKW,
		TransitionsInUse: int32(b.Transitions), KwInUse: b.KW, Waiting: int32(b.Waiting),
		Halls: b.Halls, Racks: int32(b.Racks), UpdatedBy: b.UpdatedBy,
	}
	if p.Halls == nil {
		p.Halls = []string{}
	}
	if !b.UpdatedAt.IsZero() {
		p.UpdatedAt = timestamppb.New(b.UpdatedAt)
	}
	return p
}

func connectError(err error) error {
	switch {
	case errors.Is(err, ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrUnknownFeed), errors.Is(err, ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	}
	return err
}
