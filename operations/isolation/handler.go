package isolation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// Handler implements the leak-tier methods of Flow's admin service
// (AcknowledgeIsolation, ClearIsolation, OverrideIsolation, ListIsolations,
// ReportFacilityLeak, ListFacilityLeakReports); app embeds it.
type Handler struct {
	pool *pgxpool.Pool
	svc  *Service
}

// NewHandler returns the handler.
func NewHandler(pool *pgxpool.Pool, svc *Service) *Handler { return &Handler{pool: pool, svc: svc} }

// rackRef reads a rack given by name or UUID (field names it in errors).
func rackRef(field, s string) (inventory.RackRef, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return inventory.RackRef{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: required (a rack name or UUID)", field))
	}
	if id, err := uuid.Parse(s); err == nil {
		return inventory.RackRef{ID: id}, nil
	}
	return inventory.RackRef{Name: s}, nil
}

func connectError(err error) error {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, ErrInvalid), errors.Is(err, inventory.ErrInvalidArgument):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, inventory.ErrRackNotFound), errors.Is(err, ErrUnknownLoop):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrNotPending), errors.Is(err, ErrNotIsolated), errors.Is(err, inventory.ErrAmbiguous):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return err
}

// onRack resolves rack field ref and runs fn on it in one transaction, then
// returns the isolation fn returns, with its rack's placement.
func (h *Handler) onRack(ctx context.Context, ref string, fn func(tx pgx.Tx, rack uuid.UUID) (Isolation, error)) (*adminv1.IsolationResponse, uuid.UUID, error) {
	rr, err := rackRef("rack", ref)
	if err != nil {
		return nil, uuid.Nil, err
	}
	var iso Isolation
	var p Placement
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		r, err := h.svc.cfg.Inv.ResolveRack(ctx, tx, rr)
		if err != nil {
			return err
		}
		if iso, err = fn(tx, r.ID); err != nil {
			return err
		}
		p, err = h.svc.placement(ctx, tx, r.ID)
		return err
	})
	if err != nil {
		return nil, uuid.Nil, connectError(err)
	}
	return &adminv1.IsolationResponse{Isolation: toProto(iso, p)}, iso.RackID, nil
}

// AcknowledgeIsolation records the facility's acknowledgement.
func (h *Handler) AcknowledgeIsolation(ctx context.Context, req *adminv1.AcknowledgeIsolationRequest) (*adminv1.IsolationResponse, error) {
	res, _, err := h.onRack(ctx, req.GetRack(), func(tx pgx.Tx, rack uuid.UUID) (Isolation, error) {
		return h.svc.Acknowledge(ctx, tx, rack, caller.Identity(ctx), req.GetNote())
	})
	return res, err
}

// ClearIsolation ends a rack's isolation, then starts the waiting tasks of
// its loop that no longer wait.
func (h *Handler) ClearIsolation(ctx context.Context, req *adminv1.ClearIsolationRequest) (*adminv1.IsolationResponse, error) {
	res, rack, err := h.onRack(ctx, req.GetRack(), func(tx pgx.Tx, rack uuid.UUID) (Isolation, error) {
		return h.svc.Clear(ctx, tx, rack, caller.Identity(ctx), req.GetReason())
	})
	if err != nil {
		return nil, err
	}
	h.svc.Wake(context.WithoutCancel(ctx), rack)
	return res, nil
}

// OverrideIsolation records an admin's override for one rack.
func (h *Handler) OverrideIsolation(ctx context.Context, req *adminv1.OverrideIsolationRequest) (*adminv1.OverrideIsolationResponse, error) {
	rr, err := rackRef("rack", req.GetRack())
	if err != nil {
		return nil, err
	}
	var out []Isolation
	var rack uuid.UUID
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		r, err := h.svc.cfg.Inv.ResolveRack(ctx, tx, rr)
		if err != nil {
			return err
		}
		rack = r.ID
		out, err = h.svc.Override(ctx, tx, r.ID, caller.Identity(ctx), req.GetReason())
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	res := &adminv1.OverrideIsolationResponse{}
	for _, o := range out {
		res.Isolations = append(res.Isolations, toProto(o, h.placementOf(ctx, h.pool, o.RackID)))
	}
	h.svc.Wake(context.WithoutCancel(ctx), rack)
	return res, nil
}

func (h *Handler) placementOf(ctx context.Context, dbtx db.DBTX, rack uuid.UUID) Placement {
	p, _ := h.svc.placement(ctx, dbtx, rack)
	return p
}

// ListIsolations lists isolations.
func (h *Handler) ListIsolations(ctx context.Context, req *adminv1.ListIsolationsRequest) (*adminv1.ListIsolationsResponse, error) {
	if req.GetLimit() < 0 || req.GetLimit() > 1000 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("limit: must be 0 to 1000, got %d", req.GetLimit()))
	}
	list, err := h.svc.List(ctx, h.pool, !req.GetAll(), int(req.GetLimit()))
	if err != nil {
		return nil, err
	}
	res := &adminv1.ListIsolationsResponse{Isolations: []*adminv1.Isolation{}}
	for _, o := range list {
		res.Isolations = append(res.Isolations, toProto(o, h.placementOf(ctx, h.pool, o.RackID)))
	}
	return res, nil
}

// ReportFacilityLeak answers a BMS leak report (the critical tier).
func (h *Handler) ReportFacilityLeak(ctx context.Context, req *adminv1.ReportFacilityLeakRequest) (*adminv1.FacilityLeakReport, error) {
	in := ReportInput{Loop: req.GetCoolantLoop(), Summary: req.GetSummary(), By: caller.Identity(ctx)}
	if strings.TrimSpace(req.GetRack()) != "" {
		rr, err := rackRef("rack", req.GetRack())
		if err != nil {
			return nil, err
		}
		in.Rack = &rr
	}
	var rep Report
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		rep, err = h.svc.Report(ctx, tx, in)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return reportToProto(rep), nil
}

// ListFacilityLeakReports lists the BMS's reports (a bms caller's own
// only).
func (h *Handler) ListFacilityLeakReports(ctx context.Context, req *adminv1.ListFacilityLeakReportsRequest) (*adminv1.ListFacilityLeakReportsResponse, error) {
	if req.GetLimit() < 0 || req.GetLimit() > 1000 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("limit: must be 0 to 1000, got %d", req.GetLimit()))
	}
	by := ""
	if caller.Role(ctx) == "bms" {
		by = caller.Identity(ctx)
	}
	list, err := h.svc.Reports(ctx, h.pool, by, int(req.GetLimit()))
	if err != nil {
		return nil, err
	}
	res := &adminv1.ListFacilityLeakReportsResponse{Reports: []*adminv1.FacilityLeakReport{}}
	for _, r := range list {
		res.Reports = append(res.Reports, reportToProto(r))
	}
	return res, nil
}

func ts(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

func ids(in []uuid.UUID) []string {
	out := make([]string, len(in))
	for i, id := range in {
		out[i] = id.String()
	}
	return out
}

func toProto(i Isolation, p Placement) *adminv1.Isolation {
	out := &adminv1.Isolation{
		Id: i.ID.String(), RackId: i.RackID.String(), RackName: p.Name, PowerFeed: p.Feed, CoolantLoop: p.Loop,
		Tier: string(i.Tier), Reason: i.Reason, ComponentIds: ids(i.ComponentIDs),
		ObservedAt: timestamppb.New(i.ObservedAt), RequestedAt: timestamppb.New(i.RequestedAt), Sends: int32(i.Sends),
		AcknowledgedAt: ts(i.AcknowledgedAt), AcknowledgedBy: i.AcknowledgedBy, AckNote: i.AckNote,
		ClearedAt: ts(i.ClearedAt), ClearedBy: i.ClearedBy, ClearReason: i.ClearReason,
	}
	if i.ReportID != nil {
		out.ReportId = i.ReportID.String()
	}
	if i.AcknowledgedAt == nil && i.ClearedAt == nil {
		out.NextSendAt = timestamppb.New(i.NextSendAt)
	}
	return out
}

func reportToProto(r Report) *adminv1.FacilityLeakReport {
	out := &adminv1.FacilityLeakReport{Id: r.ID.String(), ReportedBy: r.ReportedBy, CoolantLoop: r.Loop, Summary: r.Summary,
		RackIds: ids(r.RackIDs), ReportedAt: timestamppb.New(r.ReportedAt)}
	if r.RackID != nil {
		out.RackId = r.RackID.String()
	}
	return out
}
