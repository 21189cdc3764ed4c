package rollout

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/operations"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// AdminHandler implements the admin service's run methods of change
// safety (docs/change-safety.md): PreviewOperationRun and Flow's own
// CreateOperationRun.
type AdminHandler struct {
	pool *pgxpool.Pool
	runs *Service
}

// NewAdminHandler returns an AdminHandler over pool.
func NewAdminHandler(pool *pgxpool.Pool, runs *Service) *AdminHandler {
	return &AdminHandler{pool: pool, runs: runs}
}

// PreviewOperationRun plans a v1 create request in a read-only
// transaction and returns the plan it would freeze, writing nothing.
func (h *AdminHandler) PreviewOperationRun(ctx context.Context, req *adminv1.PreviewOperationRunRequest) (*adminv1.PreviewOperationRunResponse, error) {
	if req.GetRequest() == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("request is required"))
	}
	in, err := createInputFromProto(req.GetRequest())
	if err != nil {
		return nil, runError(err)
	}
	in.CreatedBy = caller.Identity(ctx)
	var p Preview
	err = pgx.BeginTxFunc(ctx, h.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) (err error) {
		p, err = h.runs.Preview(ctx, tx, in)
		return err
	})
	if err != nil {
		return nil, runError(err)
	}
	res := &adminv1.PreviewOperationRunResponse{
		PlanHash: p.Plan.Hash, SelectorSeed: p.Plan.Input.Selector.Seed, OrderingSeed: p.Plan.Input.Options.Ordering.Seed,
		ApprovalRequired: p.ApprovalRequired,
	}
	res.Phases = make([]*adminv1.PlannedPhase, p.Plan.Phases)
	for i := range res.Phases {
		res.Phases[i] = &adminv1.PlannedPhase{Index: int32(i)}
	}
	for _, t := range p.Plan.Targets {
		pr := operations.PlannedRackToProto(operations.PlannedRack{RackID: t.RackID, Rack: p.Names[t.RackID], Components: t.Components, Leaks: p.Leaks[t.RackID]})
		for _, a := range p.Tasks[t.RackID] {
			pr.Conflicts = append(pr.Conflicts, a.String())
		}
		res.Phases[t.Phase].Racks = append(res.Phases[t.Phase].Racks, pr)
	}
	for _, o := range p.Overlaps {
		res.OverlappingRuns = append(res.OverlappingRuns, o.String())
	}
	starts := make([]string, len(p.Starts))
	for i, st := range p.Starts {
		starts[i] = st.String()
	}
	res.Windows = strings.Join(starts, "; ")
	return res, nil
}

// CreateOperationRun creates a run from a v1 create request with Flow's
// own options (allow_overlap), answering its plan hash and, when it waits
// for approval, the approval request.
func (h *AdminHandler) CreateOperationRun(ctx context.Context, req *adminv1.CreateOperationRunRequest) (*adminv1.CreateOperationRunResponse, error) {
	if req.GetRequest() == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("request is required"))
	}
	in, err := createInputFromProto(req.GetRequest())
	if err != nil {
		return nil, runError(err)
	}
	in.CreatedBy = caller.Identity(ctx)
	in.AllowOverlap = req.GetAllowOverlap()
	var c Created
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		c, err = h.runs.CreatePlanned(ctx, tx, in)
		return err
	})
	if err != nil {
		return nil, runError(err)
	}
	res := &adminv1.CreateOperationRunResponse{Id: c.ID.String(), PlanHash: c.Plan.Hash}
	if c.ApprovalID != uuid.Nil {
		res.ApprovalId = c.ApprovalID.String()
	}
	return res, nil
}
