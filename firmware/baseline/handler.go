package baseline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/caller"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/rollout"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// Handler serves the baseline and compliance methods of Flow's
// AdminService.
type Handler struct {
	pool *pgxpool.Pool
	svc  *Service
	runs *rollout.Service
}

// NewHandler returns a Handler.
func NewHandler(pool *pgxpool.Pool, svc *Service, runs *rollout.Service) *Handler {
	return &Handler{pool: pool, svc: svc, runs: runs}
}

// CreateBaseline creates a baseline at revision 1.
func (h *Handler) CreateBaseline(ctx context.Context, req *adminv1.CreateBaselineRequest) (*adminv1.BaselineResponse, error) {
	var b Baseline
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		b, err = h.svc.Create(ctx, tx, req.GetName(), req.GetDescription(), entriesFromProto(req.GetEntries()), SourceManual, caller.Identity(ctx), req.GetActivate())
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.BaselineResponse{Baseline: baselineToProto(b)}, nil
}

// UpdateBaseline writes a new revision.
func (h *Handler) UpdateBaseline(ctx context.Context, req *adminv1.UpdateBaselineRequest) (*adminv1.BaselineResponse, error) {
	if strings.TrimSpace(req.GetName()) == "" {
		return nil, connectError(invalid("name", "is required"))
	}
	var b Baseline
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		b, err = h.svc.Update(ctx, tx, req.GetName(), int(req.GetBaseRevision()), req.GetDescription(), entriesFromProto(req.GetEntries()), SourceManual, caller.Identity(ctx), req.GetActivate())
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.BaselineResponse{Baseline: baselineToProto(b)}, nil
}

// GetBaseline returns one revision with its history.
func (h *Handler) GetBaseline(ctx context.Context, req *adminv1.GetBaselineRequest) (*adminv1.BaselineResponse, error) {
	b, err := h.svc.Get(ctx, h.pool, Ref{Name: req.GetName(), Revision: int(req.GetRevision())})
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.BaselineResponse{Baseline: baselineToProto(b)}, nil
}

// ListBaselines lists every baseline at its newest revision.
func (h *Handler) ListBaselines(ctx context.Context, _ *adminv1.ListBaselinesRequest) (*adminv1.ListBaselinesResponse, error) {
	bs, err := h.svc.List(ctx, h.pool)
	if err != nil {
		return nil, connectError(err)
	}
	out := &adminv1.ListBaselinesResponse{Baselines: make([]*adminv1.Baseline, 0, len(bs))}
	for _, b := range bs {
		out.Baselines = append(out.Baselines, baselineToProto(b))
	}
	return out, nil
}

// ActivateBaseline makes a revision the site's active baseline.
func (h *Handler) ActivateBaseline(ctx context.Context, req *adminv1.ActivateBaselineRequest) (*adminv1.BaselineResponse, error) {
	var b Baseline
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		b, err = h.svc.Activate(ctx, tx, Ref{Name: req.GetName(), Revision: int(req.GetRevision())}, caller.Identity(ctx))
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.BaselineResponse{Baseline: baselineToProto(b)}, nil
}

// ImportBaseline reads Core's desired versions into a baseline.
func (h *Handler) ImportBaseline(ctx context.Context, req *adminv1.ImportBaselineRequest) (*adminv1.BaselineResponse, error) {
	name := strings.TrimSpace(req.GetName())
	if err := CheckName("name", name); err != nil {
		return nil, connectError(err)
	}
	entries, warnings, err := h.svc.Import(ctx, h.pool)
	if err != nil {
		return nil, connectError(err)
	}
	desc := req.GetDescription()
	if desc == "" {
		desc = "imported from NICo Core's desired versions"
	}
	var b Baseline
	err = pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		if req.GetBaseRevision() == 0 {
			b, err = h.svc.Create(ctx, tx, name, desc, entries, SourceCore, caller.Identity(ctx), req.GetActivate())
		} else {
			b, err = h.svc.Update(ctx, tx, name, int(req.GetBaseRevision()), desc, entries, SourceCore, caller.Identity(ctx), req.GetActivate())
		}
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &adminv1.BaselineResponse{Baseline: baselineToProto(b), Warnings: warnings}, nil
}

// GetCompliance returns a compliance report.
func (h *Handler) GetCompliance(ctx context.Context, req *adminv1.GetComplianceRequest) (*adminv1.GetComplianceResponse, error) {
	q := Query{Ref: Ref{Name: req.GetBaseline(), Revision: int(req.GetRevision())}, States: req.GetStates(),
		Row: req.GetRow(), Hall: req.GetHall(), Offset: int(req.GetOffset()), Limit: int(req.GetLimit()), GroupBy: req.GetGroupBy()}
	if t := req.GetComponentType(); t != "" {
		pt, ok := ParseType(t)
		if !ok {
			return nil, connectError(invalid("component_type", "unknown component type %q: give compute, nvswitch or powershelf", t))
		}
		q.Type = pt
	}
	inv := h.svc.cfg.Inventory
	for i, r := range req.GetRacks() {
		rack, err := inv.ResolveRack(ctx, h.pool, rackRef(r))
		if err != nil {
			return nil, connectError(fmt.Errorf("racks[%d]: %w", i, err))
		}
		q.RackIDs = append(q.RackIDs, rack.ID)
	}
	if d := strings.TrimSpace(req.GetNvlDomain()); d != "" {
		ref := inventory.NVLDomainRef{Name: d}
		if id, err := uuid.Parse(d); err == nil {
			ref = inventory.NVLDomainRef{ID: id}
		}
		dom, err := inv.NVLDomain(ctx, h.pool, ref)
		if err != nil {
			return nil, connectError(fmt.Errorf("nvl_domain: %w", err))
		}
		q.DomainID = &dom.ID
	}
	r, err := h.svc.Compliance(ctx, h.pool, q)
	if err != nil {
		return nil, connectError(err)
	}
	out := &adminv1.GetComplianceResponse{Baseline: r.Baseline.Name, Revision: int32(r.Baseline.Revision.Revision),
		Total: int32(r.Total), Site: countsToProto(r.Site), ComputedAt: timestamppb.New(r.ComputedAt)}
	for _, d := range r.Devices {
		out.Devices = append(out.Devices, deviceToProto(d))
	}
	for _, g := range r.Groups {
		out.Groups = append(out.Groups, &adminv1.ComplianceGroup{Kind: g.Kind, Key: g.Key, Name: g.Name, Counts: countsToProto(g.Counts), State: g.Counts.State()})
	}
	return out, nil
}

// ApplyBaseline plans (and unless a dry run, creates) the run that brings
// the site to its baseline.
func (h *Handler) ApplyBaseline(ctx context.Context, req *adminv1.ApplyBaselineRequest) (*adminv1.ApplyBaselineResponse, error) {
	in := ApplyInput{Ref: Ref{Name: req.GetBaseline()}, RunName: req.GetRunName(), CanaryRacks: int(req.GetCanaryRacks()), Waves: int(req.GetWaves()),
		MaxConcurrent: int(req.GetMaxConcurrent()), MaxFailures: int(req.GetMaxFailures()), DryRun: req.GetDryRun(),
		IncludeDowngrades: req.GetIncludeDowngrades(), AllowOverlap: req.GetAllowOverlap(), CreatedBy: caller.Identity(ctx)}
	var p ApplyPlan
	err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) (err error) {
		p, err = h.svc.Apply(ctx, tx, h.runs, in)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	out := &adminv1.ApplyBaselineResponse{Message: p.Message, Racks: int32(p.Racks), Devices: int32(p.Devices), TargetVersion: p.TargetVersion}
	if p.RunID != uuid.Nil {
		out.RunId = p.RunID.String()
	}
	for i, w := range p.Waves {
		aw := &adminv1.ApplyWave{Phase: int32(i), NvlDomains: w.Domains}
		for _, r := range w.Racks {
			aw.Racks = append(aw.Racks, r.Name)
		}
		out.Waves = append(out.Waves, aw)
	}
	return out, nil
}

// GetInstalledFirmware returns a component's installed firmware.
func (h *Handler) GetInstalledFirmware(ctx context.Context, req *adminv1.GetInstalledFirmwareRequest) (*adminv1.GetInstalledFirmwareResponse, error) {
	s := strings.TrimSpace(req.GetComponent())
	if s == "" {
		return nil, connectError(invalid("component", "is required (a component UUID or Core ID)"))
	}
	ref := inventory.ComponentRef{ExternalID: s}
	if id, err := uuid.Parse(s); err == nil {
		ref = inventory.ComponentRef{ID: id}
	}
	inv := h.svc.cfg.Inventory
	c, err := inv.ResolveComponent(ctx, h.pool, ref)
	if err != nil {
		return nil, connectError(fmt.Errorf("component: %w", err))
	}
	in, known, err := inv.InstalledFirmware(ctx, h.pool, c.ID)
	if err != nil {
		return nil, connectError(err)
	}
	out := &adminv1.GetInstalledFirmwareResponse{ComponentId: c.ID.String(), Known: known}
	if known {
		out.Reported = in.Reported
		out.SeenAt, out.ChangedAt = timestamppb.New(in.SeenAt), timestamppb.New(in.ChangedAt)
		for _, k := range sortedKeys(in.Versions) {
			out.Components = append(out.Components, &adminv1.InstalledSubComponent{Component: k, Versions: in.Versions[k]})
		}
	}
	return out, nil
}

func sortedKeys(m inventory.SubVersions) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func rackRef(s string) inventory.RackRef {
	s = strings.TrimSpace(s)
	if id, err := uuid.Parse(s); err == nil {
		return inventory.RackRef{ID: id}
	}
	return inventory.RackRef{Name: s}
}

// connectError maps the package's and its dependencies' errors to Connect
// codes; unknown errors pass through (the app logs them as internal).
func connectError(err error) error {
	var ne *nico.Error
	switch {
	case errors.Is(err, ErrInvalid), errors.Is(err, inventory.ErrInvalidArgument), errors.Is(err, inventory.ErrAmbiguous):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrNotFound), errors.Is(err, inventory.ErrRackNotFound), errors.Is(err, inventory.ErrComponentNotFound),
		errors.Is(err, inventory.ErrNVLDomainNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, ErrStale):
		return connect.NewError(connect.CodeAborted, err)
	case errors.Is(err, ErrNothingToImport):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, ErrNoActive):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%w: activate one (flow baseline activate NAME) or name one", err))
	case errors.As(err, &ne):
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("NICo Core: %w", err))
	case errors.Is(err, rollout.ErrRunOverlap):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, rollout.ErrRunInvalid), errors.Is(err, rollout.ErrRunNotFound):
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	return operations.TaskError(err)
}

func entriesFromProto(in []*adminv1.BaselineEntry) []Entry {
	out := make([]Entry, len(in))
	for i, e := range in {
		out[i] = Entry{ComponentType: e.GetComponentType(), Component: e.GetComponent(), Version: e.GetVersion(),
			Vendor: e.GetVendor(), Model: e.GetModel(), RackProfile: e.GetRackProfile()}
	}
	return out
}

func baselineToProto(b Baseline) *adminv1.Baseline {
	out := &adminv1.Baseline{Id: b.ID.String(), Name: b.Name, Revision: int32(b.Revision.Revision), LatestRevision: int32(b.LatestRevision),
		Description: b.Description, CreatedAt: timestamppb.New(b.CreatedAt), CreatedBy: b.CreatedBy, Source: b.Source,
		ActiveRevision: int32(b.ActiveRevision), ActivatedBy: b.ActivatedBy}
	if b.ActiveRevision != 0 {
		out.ActivatedAt = timestamppb.New(b.ActivatedAt)
	}
	for _, e := range b.Entries {
		out.Entries = append(out.Entries, &adminv1.BaselineEntry{ComponentType: e.ComponentType, Component: e.Component, Version: e.Version,
			Vendor: e.Vendor, Model: e.Model, RackProfile: e.RackProfile})
	}
	for _, r := range b.History {
		out.History = append(out.History, &adminv1.BaselineRevision{Revision: int32(r.Revision), CreatedAt: timestamppb.New(r.CreatedAt),
			CreatedBy: r.CreatedBy, Source: r.Source, EntryCount: int32(len(r.Entries)), Description: r.Description})
	}
	return out
}

func countsToProto(c Counts) *adminv1.ComplianceCounts {
	return &adminv1.ComplianceCounts{Total: int32(c.Total), Compliant: int32(c.Compliant), Upgrade: int32(c.Upgrade), Downgrade: int32(c.Downgrade),
		Unknown: int32(c.Unknown), Updating: int32(c.Updating), NotCovered: int32(c.NotCovered)}
}

func deviceToProto(d DeviceState) *adminv1.DeviceCompliance {
	dev := d.Device
	out := &adminv1.DeviceCompliance{ComponentId: dev.ID.String(), Name: dev.Name, ComponentType: typeOf(dev.Type), ExternalId: dev.ExternalID,
		RackName: dev.RackName, NvlDomain: dev.DomainName, Row: dev.Row, Hall: dev.Hall, State: d.State, Reason: d.Reason}
	if dev.RackID != nil {
		out.RackId = dev.RackID.String()
	}
	if t := d.SeenAt(); t != nil {
		out.SeenAt = timestamppb.New(*t)
	}
	if d.TaskID != nil {
		out.TaskId = d.TaskID.String()
	}
	for _, x := range d.Differences {
		out.Differences = append(out.Differences, &adminv1.SubComponentCompliance{Component: x.Component, State: x.State, Desired: x.Desired,
			Installed: x.Installed, Reason: x.Reason})
	}
	return out
}
