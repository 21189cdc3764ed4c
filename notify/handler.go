package notify

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/db"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// RackResolver finds a rack's ID by name or ID through dbtx (inventory,
// through app).
type RackResolver func(ctx context.Context, dbtx db.DBTX, ref string) (uuid.UUID, error)

// Handler serves the webhook methods of Flow's AdminService.
type Handler struct {
	pool  *pgxpool.Pool
	svc   *Service
	racks RackResolver
}

// NewHandler returns a Handler; racks resolves a subscription's scope
// (nil: racks by ID only).
func NewHandler(pool *pgxpool.Pool, svc *Service, racks RackResolver) *Handler {
	return &Handler{pool: pool, svc: svc, racks: racks}
}

// CreateWebhook creates a subscription.
func (h *Handler) CreateWebhook(ctx context.Context, req *adminv1.CreateWebhookRequest) (*adminv1.WebhookResponse, error) {
	in := Input{URL: req.GetUrl(), EventTypes: req.GetEventTypes(), Secret: req.GetSecret(), Description: req.GetDescription(), CreatedBy: caller.Identity(ctx),
		Batch: req.GetBatch(), BatchMax: int(req.GetBatchMax()), BatchMaxBytes: int(req.GetBatchMaxBytes())}
	var sub Subscription
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		for i, r := range req.GetRacks() {
			id, err := h.rack(ctx, tx, r)
			if err != nil {
				return invalid(fmt.Sprintf("racks[%d]", i), "%v", err)
			}
			in.RackIDs = append(in.RackIDs, id)
		}
		sub, err = h.svc.Create(ctx, tx, in)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.WebhookResponse{Webhook: toProto(sub)}, nil
}

func (h *Handler) rack(ctx context.Context, dbtx db.DBTX, ref string) (uuid.UUID, error) {
	if h.racks != nil {
		return h.racks(ctx, dbtx, ref)
	}
	id, err := uuid.Parse(ref)
	if err != nil {
		return uuid.Nil, fmt.Errorf("not a rack ID: %q", ref)
	}
	return id, nil
}

// ListWebhooks lists the subscriptions.
func (h *Handler) ListWebhooks(ctx context.Context, _ *adminv1.ListWebhooksRequest) (*adminv1.ListWebhooksResponse, error) {
	subs, err := h.svc.List(ctx, h.pool)
	if err != nil {
		return nil, connectError(err)
	}
	out := &adminv1.ListWebhooksResponse{Webhooks: make([]*adminv1.Webhook, 0, len(subs))}
	for _, s := range subs {
		out.Webhooks = append(out.Webhooks, toProto(s))
	}
	return out, nil
}

// GetWebhook returns one subscription.
func (h *Handler) GetWebhook(ctx context.Context, req *adminv1.GetWebhookRequest) (*adminv1.WebhookResponse, error) {
	id, err := parseID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	sub, err := h.svc.Get(ctx, h.pool, id)
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.WebhookResponse{Webhook: toProto(sub)}, nil
}

// DeleteWebhook deletes one subscription.
func (h *Handler) DeleteWebhook(ctx context.Context, req *adminv1.DeleteWebhookRequest) (*adminv1.WebhookResponse, error) {
	id, err := parseID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	var sub Subscription
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		sub, err = h.svc.Delete(ctx, tx, id)
		return err
	}); err != nil {
		return nil, connectError(err)
	}
	return &adminv1.WebhookResponse{Webhook: toProto(sub)}, nil
}

// TestWebhook sends a test event to one subscription.
func (h *Handler) TestWebhook(ctx context.Context, req *adminv1.TestWebhookRequest) (*adminv1.TestWebhookResponse, error) {
	id, err := parseID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	var did int64
	if err := db.BeginFunc(ctx, h.pool, func(ctx context.Context, tx pgx.Tx) (err error) {
		did, err = h.svc.Test(ctx, tx, id)
		return err
	}); err != nil {
		return nil, connectError(err)
	}
	return &adminv1.TestWebhookResponse{DeliveryId: did}, nil
}

// ListWebhookDeliveries lists deliveries, newest first.
func (h *Handler) ListWebhookDeliveries(ctx context.Context, req *adminv1.ListWebhookDeliveriesRequest) (*adminv1.ListWebhookDeliveriesResponse, error) {
	f := DeliveryFilter{Status: req.GetStatus(), Limit: int(req.GetLimit())}
	if req.GetWebhookId() != "" {
		id, err := parseID("webhook_id", req.GetWebhookId())
		if err != nil {
			return nil, err
		}
		f.SubscriptionID = &id
	}
	ds, err := h.svc.Deliveries(ctx, h.pool, f)
	if err != nil {
		return nil, connectError(err)
	}
	out := &adminv1.ListWebhookDeliveriesResponse{Deliveries: make([]*adminv1.WebhookDelivery, 0, len(ds))}
	for _, d := range ds {
		w := &adminv1.WebhookDelivery{Id: d.ID, EventId: d.EventID.String(), EventType: d.EventType, WebhookId: d.SubscriptionID.String(),
			Subject: d.Subject, Status: d.Status, Attempts: int32(d.Attempts), LastStatusCode: int32(d.LastStatusCode), LastError: d.LastError,
			CreatedAt: timestamppb.New(d.CreatedAt)}
		if d.Status == StatusPending {
			w.NextAttemptAt = timestamppb.New(d.NextAttemptAt)
		}
		if d.DeliveredAt != nil {
			w.DeliveredAt = timestamppb.New(*d.DeliveredAt)
		}
		out.Deliveries = append(out.Deliveries, w)
	}
	return out, nil
}

// RedriveWebhookDeliveries makes dead deliveries pending again.
func (h *Handler) RedriveWebhookDeliveries(ctx context.Context, req *adminv1.RedriveWebhookDeliveriesRequest) (*adminv1.RedriveWebhookDeliveriesResponse, error) {
	var all uuid.UUID
	if req.GetWebhookId() != "" {
		id, err := parseID("webhook_id", req.GetWebhookId())
		if err != nil {
			return nil, err
		}
		all = id
	}
	var ids []int64
	if err := db.BeginFunc(ctx, h.pool, func(ctx context.Context, tx pgx.Tx) (err error) {
		ids, err = h.svc.Redrive(ctx, tx, req.GetIds(), all)
		return err
	}); err != nil {
		return nil, connectError(err)
	}
	return &adminv1.RedriveWebhookDeliveriesResponse{Ids: ids}, nil
}

func toProto(s Subscription) *adminv1.Webhook {
	out := &adminv1.Webhook{Id: s.ID.String(), Url: s.URL, EventTypes: s.EventTypes, Description: s.Description, CreatedBy: s.CreatedBy,
		CreatedAt: timestamppb.New(s.CreatedAt), Batch: s.Batched(), BatchMax: int32(s.BatchMax), BatchMaxBytes: int32(s.BatchMaxBytes)}
	for _, r := range s.RackIDs {
		out.Racks = append(out.Racks, r.String())
	}
	return out
}

func parseID(field, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: want a webhook subscription's UUID, got %q", field, s))
	}
	return id, nil
}

func connectError(err error) error {
	switch {
	case errors.Is(err, ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrNoKey):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return err
}
