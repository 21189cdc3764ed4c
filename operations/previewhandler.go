package operations

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// previewKey marks a context whose v1 submission is previewed, not
// written: the v1 method converts and checks the request as it always
// does, then TaskHandler.submit plans it into the previewCall.
type previewKey struct{}

type previewCall struct {
	plan SubmissionPlan
}

// preview plans req in a read-only transaction into pv.
func (h *TaskHandler) preview(ctx context.Context, pv *previewCall, req Request) (*flowv1.SubmitTaskResponse, error) {
	err := pgx.BeginTxFunc(ctx, h.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) (err error) {
		pv.plan, err = h.tasks.Preview(ctx, tx, req)
		return err
	})
	if err != nil {
		return nil, taskError(err)
	}
	return &flowv1.SubmitTaskResponse{}, nil
}

// PreviewHandler implements AdminService.PreviewSubmission
// (docs/change-safety.md "Plan preview").
type PreviewHandler struct {
	tasks *TaskHandler
}

// NewPreviewHandler returns a PreviewHandler previewing through tasks' v1
// methods.
func NewPreviewHandler(tasks *TaskHandler) *PreviewHandler {
	return &PreviewHandler{tasks: tasks}
}

// PreviewSubmission plans a v1 power or firmware request as its v1 method
// would write it, and writes nothing.
func (h *PreviewHandler) PreviewSubmission(ctx context.Context, req *adminv1.PreviewSubmissionRequest) (*adminv1.PreviewSubmissionResponse, error) {
	pv := &previewCall{}
	ctx = context.WithValue(ctx, previewKey{}, pv)
	var err error
	switch r := req.GetRequest().(type) {
	case *adminv1.PreviewSubmissionRequest_PowerOn:
		_, err = h.tasks.PowerOnRack(ctx, r.PowerOn)
	case *adminv1.PreviewSubmissionRequest_PowerOff:
		_, err = h.tasks.PowerOffRack(ctx, r.PowerOff)
	case *adminv1.PreviewSubmissionRequest_PowerReset:
		_, err = h.tasks.PowerResetRack(ctx, r.PowerReset)
	case *adminv1.PreviewSubmissionRequest_AcPowerCycle:
		_, err = h.tasks.ACPowerCycleRack(ctx, r.AcPowerCycle)
	case *adminv1.PreviewSubmissionRequest_UpgradeFirmware:
		_, err = h.tasks.UpgradeFirmware(ctx, r.UpgradeFirmware)
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("request: give power_on, power_off, power_reset, ac_power_cycle or upgrade_firmware"))
	}
	if err != nil {
		return nil, err
	}
	p := pv.plan
	res := &adminv1.PreviewSubmissionResponse{
		OperationType: string(p.Type), OperationCode: string(p.Code), Refusal: p.Refusal, PlanHash: p.Hash, ApprovalRequired: p.ApprovalRequired,
	}
	for _, r := range p.Racks {
		res.Racks = append(res.Racks, PlannedRackToProto(r))
	}
	return res, nil
}

// PlannedRackToProto converts a planned rack for the admin service.
func PlannedRackToProto(r PlannedRack) *adminv1.PlannedRack {
	out := &adminv1.PlannedRack{RackId: r.RackID.String(), Rack: r.Rack, Rule: r.RuleName, Waiting: r.Waiting, Leaks: r.Leaks, Held: r.Held}
	for _, id := range orderedIDs(r.Components) {
		out.ComponentIds = append(out.ComponentIds, id.String())
	}
	for _, c := range r.Conflicts {
		out.Conflicts = append(out.Conflicts, c.String())
	}
	return out
}
