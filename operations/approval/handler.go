package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/caller"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// Handler implements the admin service's approval methods.
type Handler struct {
	pool *pgxpool.Pool
	svc  *Service
}

// NewHandler returns a Handler over pool.
func NewHandler(pool *pgxpool.Pool, svc *Service) *Handler { return &Handler{pool: pool, svc: svc} }

// ListApprovals lists pending requests (all with all set), newest first.
func (h *Handler) ListApprovals(ctx context.Context, req *adminv1.ListApprovalsRequest) (*adminv1.ListApprovalsResponse, error) {
	rs, err := h.svc.List(ctx, h.pool, req.GetAll())
	if err != nil {
		return nil, err
	}
	res := &adminv1.ListApprovalsResponse{}
	for _, r := range rs {
		res.Approvals = append(res.Approvals, toProto(r, false))
	}
	return res, nil
}

// GetApproval returns a request with its plan.
func (h *Handler) GetApproval(ctx context.Context, req *adminv1.GetApprovalRequest) (*adminv1.Approval, error) {
	id, err := parseID(req.GetId())
	if err != nil {
		return nil, err
	}
	r, err := h.svc.Get(ctx, h.pool, id)
	if err != nil {
		return nil, connectError(err)
	}
	return toProto(r, true), nil
}

// Approve approves a request by the hash of the plan the caller saw.
func (h *Handler) Approve(ctx context.Context, req *adminv1.ApproveRequest) (*adminv1.Approval, error) {
	id, err := parseID(req.GetId())
	if err != nil {
		return nil, err
	}
	r, err := h.svc.Approve(ctx, id, req.GetPlanHash(), caller.Identity(ctx))
	if err != nil {
		return nil, connectError(err)
	}
	return toProto(r, false), nil
}

// Reject rejects (or, for its requester, withdraws) a request.
func (h *Handler) Reject(ctx context.Context, req *adminv1.RejectRequest) (*adminv1.Approval, error) {
	id, err := parseID(req.GetId())
	if err != nil {
		return nil, err
	}
	r, err := h.svc.Reject(ctx, id, req.GetReason(), caller.Identity(ctx))
	if err != nil {
		return nil, connectError(err)
	}
	return toProto(r, false), nil
}

func parseID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("id: want an approval request's UUID, got %q", s))
	}
	return id, nil
}

func connectError(err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrDecided), errors.Is(err, ErrExpired), errors.Is(err, ErrOwnRequest),
		errors.Is(err, ErrHashMismatch), errors.Is(err, ErrStale):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	// A subject's refusal (a run cancelled meanwhile) is a precondition.
	return connect.NewError(connect.CodeFailedPrecondition, err)
}

// planView is the JSON plan a subject records: phases of racks.
type planView struct {
	Phases [][]struct {
		RackID     uuid.UUID   `json:"rack_id"`
		Components []uuid.UUID `json:"component_ids"`
	} `json:"phases"`
}

func toProto(r Request, withPlan bool) *adminv1.Approval {
	out := &adminv1.Approval{
		Id: r.ID.String(), Kind: r.Kind, Summary: r.Summary, Racks: int32(r.Racks), RequestedBy: r.RequestedBy,
		RequestedAt: timestamppb.New(r.CreatedAt), ExpiresAt: timestamppb.New(r.ExpiresAt), Status: r.Status,
		DecidedBy: r.DecidedBy, Reason: r.Reason, PlanHash: r.PlanHash,
	}
	for _, id := range r.SubjectIDs {
		out.SubjectIds = append(out.SubjectIds, id.String())
	}
	if r.DecidedAt != nil {
		out.DecidedAt = timestamppb.New(*r.DecidedAt)
	}
	if withPlan {
		var v planView
		_ = json.Unmarshal(r.Plan, &v)
		for i, ph := range v.Phases {
			p := &adminv1.PlannedPhase{Index: int32(i)}
			for _, rk := range ph {
				pr := &adminv1.PlannedRack{RackId: rk.RackID.String(), Rack: rk.RackID.String()}
				for _, c := range rk.Components {
					pr.ComponentIds = append(pr.ComponentIds, c.String())
				}
				p.Racks = append(p.Racks, pr)
			}
			out.Phases = append(out.Phases, p)
		}
	}
	return out
}
