package window

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/rollout"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// Handler serves the maintenance-window methods of Flow's AdminService.
type Handler struct {
	pool  *pgxpool.Pool
	svc   *Service
	tasks *operations.Tasks
	runs  *rollout.Service
	now   func() time.Time
}

// NewHandler returns a Handler; tasks and runs take the releases.
func NewHandler(pool *pgxpool.Pool, svc *Service, tasks *operations.Tasks, runs *rollout.Service) *Handler {
	return &Handler{pool: pool, svc: svc, tasks: tasks, runs: runs, now: time.Now}
}

// SetClock makes the answers' open_now and next_change read now (tests).
func (h *Handler) SetClock(now func() time.Time) { h.now = now }

// CreateWindow creates a window or a freeze.
func (h *Handler) CreateWindow(ctx context.Context, req *adminv1.CreateWindowRequest) (*adminv1.WindowResponse, error) {
	in := Input{Kind: Kind(req.GetKind()), Name: req.GetName(), Description: req.GetDescription(), Cron: req.GetCron(), TimeZone: req.GetTimeZone(),
		CreatedBy: caller.Identity(ctx)}
	if in.Kind == "" {
		in.Kind = KindWindow
	}
	if d := req.GetDuration(); d != nil {
		in.Duration = d.AsDuration()
	}
	if req.StartsAt != nil {
		t := req.GetStartsAt().AsTime()
		in.StartsAt = &t
	}
	if req.EndsAt != nil {
		t := req.GetEndsAt().AsTime()
		in.EndsAt = &t
	}
	sc := req.GetScope()
	in.Site, in.Halls, in.Rows = sc.GetSite(), sc.GetHalls(), sc.GetRows()
	for _, d := range sc.GetNvlDomains() {
		if id, err := uuid.Parse(d); err == nil {
			in.NVLDomains = append(in.NVLDomains, inventory.NVLDomainRef{ID: id})
		} else {
			in.NVLDomains = append(in.NVLDomains, inventory.NVLDomainRef{Name: d})
		}
	}
	for _, r := range sc.GetRacks() {
		if id, err := uuid.Parse(r); err == nil {
			in.Racks = append(in.Racks, inventory.RackRef{ID: id})
		} else {
			in.Racks = append(in.Racks, inventory.RackRef{Name: r})
		}
	}
	var w Window
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		w, err = h.svc.Create(ctx, tx, in)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.WindowResponse{Window: h.toProto(w)}, nil
}

// ListWindows lists windows and freezes.
func (h *Handler) ListWindows(ctx context.Context, req *adminv1.ListWindowsRequest) (*adminv1.ListWindowsResponse, error) {
	k := Kind(req.GetKind())
	if k != "" && !k.Valid() {
		return nil, connectError(invalid("kind", "must be window, freeze or empty, not %q", k))
	}
	ws, err := h.svc.List(ctx, h.pool, k)
	if err != nil {
		return nil, connectError(err)
	}
	out := &adminv1.ListWindowsResponse{Windows: make([]*adminv1.Window, 0, len(ws))}
	for _, w := range ws {
		out.Windows = append(out.Windows, h.toProto(w))
	}
	return out, nil
}

// GetWindow returns one window or freeze.
func (h *Handler) GetWindow(ctx context.Context, req *adminv1.GetWindowRequest) (*adminv1.WindowResponse, error) {
	k := Kind(req.GetKind())
	if k != "" && !k.Valid() {
		return nil, connectError(invalid("kind", "must be window or freeze, not %q", k))
	}
	w, err := h.svc.Get(ctx, h.pool, k, req.GetId())
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.WindowResponse{Window: h.toProto(w)}, nil
}

// DeleteWindow deletes one window or freeze.
func (h *Handler) DeleteWindow(ctx context.Context, req *adminv1.DeleteWindowRequest) (*adminv1.WindowResponse, error) {
	k := Kind(req.GetKind())
	if k != "" && !k.Valid() {
		return nil, connectError(invalid("kind", "must be window or freeze, not %q", k))
	}
	var w Window
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		w, err = h.svc.Delete(ctx, tx, k, req.GetId())
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.WindowResponse{Window: h.toProto(w)}, nil
}

// ReleaseTaskFromWindows releases one waiting task from windows.
func (h *Handler) ReleaseTaskFromWindows(ctx context.Context, req *adminv1.ReleaseTaskFromWindowsRequest) (*adminv1.ReleaseTaskFromWindowsResponse, error) {
	id, err := uuid.Parse(req.GetId())
	if err != nil {
		return nil, connectError(invalid("id", "not a task ID: %q", req.GetId()))
	}
	task, err := h.tasks.Release(ctx, id, caller.Identity(ctx), req.GetReason())
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.ReleaseTaskFromWindowsResponse{Status: string(task.Status), Message: task.Message}, nil
}

// ReleaseRunFromWindows releases one operation run from windows and
// advances it.
func (h *Handler) ReleaseRunFromWindows(ctx context.Context, req *adminv1.ReleaseRunFromWindowsRequest) (*adminv1.ReleaseRunFromWindowsResponse, error) {
	id, err := uuid.Parse(req.GetId())
	if err != nil {
		return nil, connectError(invalid("id", "not an operation run ID: %q", req.GetId()))
	}
	if err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		return h.svc.ReleaseRun(ctx, tx, id, caller.Identity(ctx), req.GetReason())
	}); err != nil {
		return nil, connectError(err)
	}
	if err := h.runs.Wake(ctx, id); err != nil {
		return nil, connectError(err)
	}
	run, err := h.runs.Run(ctx, h.pool, id)
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.ReleaseRunFromWindowsResponse{Status: string(run.Status), Message: run.Message}, nil
}

func (h *Handler) toProto(w Window) *adminv1.Window {
	out := &adminv1.Window{
		Id: w.ID.String(), Kind: string(w.Kind), Name: w.Name, Description: w.Description, Cron: w.Cron, TimeZone: w.TimeZone,
		CreatedBy: w.CreatedBy, CreatedAt: timestamppb.New(w.CreatedAt),
		Scope: &adminv1.WindowScope{Site: w.Scope.Site, Halls: w.Scope.Halls, Rows: w.Scope.Rows},
	}
	if w.Duration > 0 {
		out.Duration = durationpb.New(w.Duration)
	}
	if w.StartsAt != nil {
		out.StartsAt, out.EndsAt = timestamppb.New(*w.StartsAt), timestamppb.New(*w.EndsAt)
	}
	for _, id := range w.Scope.NVLDomainIDs {
		out.Scope.NvlDomains = append(out.Scope.NvlDomains, id.String())
	}
	for _, id := range w.Scope.RackIDs {
		out.Scope.Racks = append(out.Scope.Racks, id.String())
	}
	now := h.now()
	out.OpenNow = w.Open(now)
	if out.OpenNow {
		out.NextChange = timestamppb.New(w.closes(now))
	} else if n, ok := w.NextOpen(now); ok {
		out.NextChange = timestamppb.New(n)
	}
	return out
}

func connectError(err error) error {
	switch {
	case errors.Is(err, ErrInvalid), errors.Is(err, operations.ErrInvalidRequest):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrRunNotFound), errors.Is(err, operations.ErrTaskNotFound), errors.Is(err, rollout.ErrRunNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, operations.ErrNotWaiting):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return err
}
