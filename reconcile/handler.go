package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/backend"
	"github.com/nicoflow/flow/inventory"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Handler serves ValidateComponents of v1.Flow. app embeds it in the one
// v1.Flow handler.
type Handler struct {
	svc  *Service
	pool *pgxpool.Pool
}

// NewHandler returns a Handler running svc on pool.
func NewHandler(svc *Service, pool *pgxpool.Pool) *Handler {
	return &Handler{svc: svc, pool: pool}
}

// connectError maps inventory and backend errors to Connect codes. Unknown
// errors pass through; the app interceptor answers those as internal.
func connectError(err error) error {
	switch {
	case errors.Is(err, inventory.ErrInvalidArgument):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, inventory.ErrRackNotFound), errors.Is(err, inventory.ErrComponentNotFound), errors.Is(err, inventory.ErrNVLDomainNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, inventory.ErrAmbiguous), errors.Is(err, inventory.ErrNoRack):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, ErrNotConfigured), errors.Is(err, backend.ErrNotConfigured):
		// The message names the variable to set (NICO_CORE_API_URL…).
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, backend.ErrUnreachable), errors.Is(err, backend.ErrNotFound):
		// NotFound here means a device vanished between Core's listing and
		// its read: retrying gives a consistent answer.
		return connect.NewError(connect.CodeUnavailable, err)
	case errors.Is(err, backend.ErrRejected), errors.Is(err, backend.ErrUnsupported):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return err
}

func invalid(field, reason string) error {
	return connect.NewError(connect.CodeInvalidArgument, errors.New(field+": "+reason))
}

// Headers of ValidateComponents beyond the v1 contract (which has no field
// for them).
const (
	// ValidateModeHeader set to "live" asks the component managers now
	// instead of reading the drift the last inventory sync persisted.
	ValidateModeHeader = "Flow-Validate-Mode"
	// DriftCheckedAtHeader, on the answer, is when the inventory sync the
	// diffs come from started (RFC 3339); absent for a live check.
	DriftCheckedAtHeader = "Flow-Drift-Checked-At"
)

// ValidateComponents implements v1.Flow. It answers from the drift the
// last inventory sync persisted (saying when, in DriftCheckedAtHeader), or
// live when no sync has run or the request's ValidateModeHeader is "live".
func (h *Handler) ValidateComponents(ctx context.Context, req *flowv1.ValidateComponentsRequest) (*flowv1.ValidateComponentsResponse, error) {
	sel, err := inventory.ComponentQueryFromProto(req.TargetSpec, req.GetFilters())
	if err != nil {
		return nil, connectError(err)
	}
	q := Query{Selection: sel}
	call, hasCall := connect.CallInfoForHandlerContext(ctx)
	if hasCall {
		switch mode := call.RequestHeader().Get(ValidateModeHeader); mode {
		case "", "stored":
		case "live":
			q.Live = true
		default:
			return nil, invalid(ValidateModeHeader+" header", fmt.Sprintf("must be live or stored, not %q", mode))
		}
	}
	if p := req.Pagination; p != nil {
		if p.GetOffset() < 0 {
			return nil, invalid("pagination.offset", "must not be negative")
		}
		if p.GetLimit() < 0 {
			return nil, invalid("pagination.limit", "must not be negative")
		}
		q.Offset, q.Limit = int(p.GetOffset()), int(p.GetLimit())
	}
	if ob := req.OrderBy; ob != nil {
		o, err := inventory.ComponentOrderFromProto(ob)
		if err != nil {
			return nil, connectError(err)
		}
		switch o.Key {
		case "name":
		case "type":
			q.OrderByType = true
		default:
			return nil, invalid("order_by.component_field", "the diff list orders by NAME or TYPE only (a device Flow does not know has no manufacturer or model)")
		}
		q.Descending = o.Desc
	}
	rep, err := h.svc.Validate(ctx, h.pool, q)
	if err != nil {
		return nil, connectError(err)
	}
	if hasCall && rep.CheckedAt != nil {
		call.ResponseHeader().Set(DriftCheckedAtHeader, rep.CheckedAt.UTC().Format(time.RFC3339))
	}
	out := &flowv1.ValidateComponentsResponse{
		Diffs:           make([]*flowv1.ComponentDiff, len(rep.Diffs)),
		TotalDiffs:      int32(rep.Total),
		MissingCount:    int32(rep.Missing),
		UnexpectedCount: int32(rep.Unexpected),
		MismatchCount:   int32(rep.Mismatch),
		MatchCount:      int32(rep.Match),
	}
	var comps []inventory.Component
	for _, d := range rep.Diffs {
		if d.Component != nil {
			comps = append(comps, *d.Component)
		}
	}
	protos := inventory.ComponentsToProto(comps)
	for i, d := range rep.Diffs {
		pd := &flowv1.ComponentDiff{
			Type:                flowv1.DiffType(d.Type),
			ComponentId:         d.ComponentID,
			ComponentMacAddress: d.MAC,
		}
		if d.ID != "" {
			pd.Id = &flowv1.UUID{Id: d.ID}
		}
		if d.Component != nil {
			pd.Expected, protos = protos[0], protos[1:]
		}
		if d.Actual != nil {
			pd.Actual = actualToProto(d.Actual)
		}
		for _, f := range d.Fields {
			pd.FieldDiffs = append(pd.FieldDiffs, &flowv1.FieldDiff{FieldName: f.Field, ExpectedValue: f.Expected, ActualValue: f.Actual})
		}
		out.Diffs[i] = pd
	}
	return out, nil
}

var typeToProto = map[backend.ComponentType]flowv1.ComponentType{
	backend.Compute:    flowv1.ComponentType_COMPONENT_TYPE_COMPUTE,
	backend.NVSwitch:   flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH,
	backend.PowerShelf: flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF,
}

// actualToProto is the component as the manager reports it: type, manager
// ID, identity MAC, serial, firmware and (Core's) rack ID.
func actualToProto(a *backend.Actual) *flowv1.Component {
	c := &flowv1.Component{
		Type:            typeToProto[a.Type],
		Info:            &flowv1.DeviceInfo{Name: a.Name, SerialNumber: a.Serial},
		FirmwareVersion: a.FirmwareVersion,
		ComponentId:     a.ExternalID,
		RackExternalId:  a.RackID,
	}
	if a.BMCMAC != "" {
		c.Bmcs = []*flowv1.BMCInfo{{Type: flowv1.BMCType_BMC_TYPE_HOST, MacAddress: backend.NormalizeMAC(a.BMCMAC)}}
	}
	if a.Position != nil {
		c.Position = &flowv1.RackPosition{SlotId: int32(a.Position.SlotID), TrayIdx: int32(a.Position.TrayIndex), HostId: int32(a.Position.HostID)}
	}
	return c
}

// SyncHandler serves the inventory-sync methods of Flow's admin service
// (flow.admin.v1.AdminService); app embeds it in the admin handler.
type SyncHandler struct {
	syncer *Syncer
}

// NewSyncHandler returns a SyncHandler over syncer.
func NewSyncHandler(syncer *Syncer) *SyncHandler { return &SyncHandler{syncer: syncer} }

// RunSync implements AdminService: one cycle now.
func (h *SyncHandler) RunSync(ctx context.Context, _ *adminv1.RunSyncRequest) (*adminv1.RunSyncResponse, error) {
	run, err := h.syncer.Run(ctx, TriggerManual)
	if err != nil {
		return nil, err
	}
	return &adminv1.RunSyncResponse{Cycle: cycleToProto(run)}, nil
}

// GetSyncStatus implements AdminService: the last cycle.
func (h *SyncHandler) GetSyncStatus(ctx context.Context, _ *adminv1.GetSyncStatusRequest) (*adminv1.GetSyncStatusResponse, error) {
	run, err := h.syncer.Latest(ctx)
	if errors.Is(err, ErrNoSyncYet) {
		return nil, connect.NewError(connect.CodeNotFound, err)
	} else if err != nil {
		return nil, err
	}
	return &adminv1.GetSyncStatusResponse{Cycle: cycleToProto(run)}, nil
}

func cycleToProto(r SyncRun) *adminv1.SyncCycle {
	c := &adminv1.SyncCycle{Id: r.ID, StartedAt: timestamppb.New(r.StartedAt), Duration: durationpb.New(r.Duration), Trigger: r.Trigger, RowsChanged: r.Changed()}
	for _, p := range r.Parts {
		c.Parts = append(c.Parts, &adminv1.SyncPart{
			Name: p.Name, Ok: p.OK, Error: p.Error, RowsChanged: p.Changed, Drifts: int32(p.Drifts), DriftChanged: p.DriftChanged, Warnings: p.Warnings,
			Inserted: p.Inserted, SoftDeleted: p.SoftDeleted, Adopted: int32(p.Adopted), Resurrected: int32(p.Resurrected),
		})
	}
	return c
}
