package inventory

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/types/known/emptypb"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// Handler serves the inventory methods of v1.Flow: rack and component CRUD
// and NVLink domains. app embeds it in the one v1.Flow handler.
type Handler struct {
	svc  *Service
	pool *pgxpool.Pool
}

// NewHandler returns a Handler running svc on pool.
func NewHandler(svc *Service, pool *pgxpool.Pool) *Handler {
	return &Handler{svc: svc, pool: pool}
}

// connectError maps the package's errors to Connect codes. Errors it does
// not know pass through; the app interceptor answers those as internal.
func connectError(err error) error {
	switch {
	case errors.Is(err, ErrInvalidArgument):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrRackNotFound), errors.Is(err, ErrComponentNotFound), errors.Is(err, ErrNVLDomainNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrRackExists), errors.Is(err, ErrComponentExists), errors.Is(err, ErrBMCExists), errors.Is(err, ErrRackInOtherDomain):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, ErrNotDeleted), errors.Is(err, ErrAmbiguous), errors.Is(err, ErrNoRack):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return err
}

func (h *Handler) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, h.pool, fn)
}

// ---- racks ---------------------------------------------------------------

// CreateExpectedRack implements v1.Flow.
func (h *Handler) CreateExpectedRack(ctx context.Context, req *flowv1.CreateExpectedRackRequest) (*flowv1.CreateExpectedRackResponse, error) {
	if req.GetRack() == nil {
		return nil, connectError(invalid("rack", "required"))
	}
	rack, err := rackFromProto(req.GetRack(), "rack")
	if err != nil {
		return nil, connectError(err)
	}
	var id uuid.UUID
	err = h.inTx(ctx, func(tx pgx.Tx) (err error) {
		id, err = h.svc.CreateRack(ctx, tx, rack)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.CreateExpectedRackResponse{Id: uuidProto(id)}, nil
}

// GetRackInfoByID implements v1.Flow.
func (h *Handler) GetRackInfoByID(ctx context.Context, req *flowv1.GetRackInfoByIDRequest) (*flowv1.GetRackInfoResponse, error) {
	id, err := parseUUID(req.GetId(), "id")
	if err != nil {
		return nil, connectError(err)
	}
	rack, err := h.svc.Rack(ctx, h.pool, id, req.GetWithComponents())
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.GetRackInfoResponse{Rack: rackToProto(rack)}, nil
}

// GetRackInfoBySerial implements v1.Flow.
func (h *Handler) GetRackInfoBySerial(ctx context.Context, req *flowv1.GetRackInfoBySerialRequest) (*flowv1.GetRackInfoResponse, error) {
	si := req.GetSerialInfo()
	rack, err := h.svc.RackBySerial(ctx, h.pool, si.GetManufacturer(), si.GetSerialNumber(), req.GetWithComponents())
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.GetRackInfoResponse{Rack: rackToProto(rack)}, nil
}

// GetListOfRacks implements v1.Flow.
func (h *Handler) GetListOfRacks(ctx context.Context, req *flowv1.GetListOfRacksRequest) (*flowv1.GetListOfRacksResponse, error) {
	q := RackQuery{WithComponents: req.GetWithComponents(), Page: pageFromProto(req.GetPagination())}
	for i, f := range req.GetFilters() {
		field := fmt.Sprintf("filters[%d]", i)
		rf, ok := f.GetField().(*flowv1.Filter_RackField)
		if !ok {
			return nil, connectError(invalid(field+".rack_field", "required (rack listings take rack filters)"))
		}
		var dst **StringQuery
		switch rf.RackField {
		case flowv1.RackFilterField_RACK_FILTER_FIELD_NAME:
			dst = &q.Name
		case flowv1.RackFilterField_RACK_FILTER_FIELD_MANUFACTURER:
			dst = &q.Manufacturer
		case flowv1.RackFilterField_RACK_FILTER_FIELD_MODEL:
			dst = &q.Model
		default:
			return nil, connectError(invalid(field+".rack_field", "unknown value %d", rf.RackField))
		}
		if *dst != nil {
			return nil, connectError(invalid(field+".rack_field", "%s given twice; put the patterns in one filter", rf.RackField))
		}
		*dst = stringQueryFromProto(f.GetQueryInfo())
	}
	if ob := req.GetOrderBy(); ob != nil {
		desc, err := directionFromProto(ob.GetDirection())
		if err != nil {
			return nil, connectError(err)
		}
		q.Order.Desc = desc
		if _, isComp := ob.GetField().(*flowv1.OrderBy_ComponentField); isComp {
			return nil, connectError(invalid("order_by.rack_field", "required (rack listings order by rack fields)"))
		}
		switch ob.GetRackField() {
		case flowv1.RackOrderByField_RACK_ORDER_BY_FIELD_UNSPECIFIED, flowv1.RackOrderByField_RACK_ORDER_BY_FIELD_NAME:
			q.Order.Key = "name"
		case flowv1.RackOrderByField_RACK_ORDER_BY_FIELD_MANUFACTURER:
			q.Order.Key = "manufacturer"
		case flowv1.RackOrderByField_RACK_ORDER_BY_FIELD_MODEL:
			q.Order.Key = "model"
		default:
			return nil, connectError(invalid("order_by.rack_field", "unknown value %d", ob.GetRackField()))
		}
	}
	racks, total, err := h.svc.ListRacks(ctx, h.pool, q)
	if err != nil {
		return nil, connectError(err)
	}
	out := &flowv1.GetListOfRacksResponse{Racks: make([]*flowv1.Rack, len(racks)), Total: total}
	for i, r := range racks {
		out.Racks[i] = rackToProto(r)
	}
	return out, nil
}

// PatchRack implements v1.Flow.
func (h *Handler) PatchRack(ctx context.Context, req *flowv1.PatchRackRequest) (*flowv1.PatchRackResponse, error) {
	pr := req.GetRack()
	if pr == nil {
		return nil, connectError(invalid("rack", "required"))
	}
	p := RackPatch{
		Name:         pr.GetInfo().GetName(),
		Manufacturer: pr.GetInfo().GetManufacturer(),
		SerialNumber: pr.GetInfo().GetSerialNumber(),
		Model:        pr.GetInfo().Model,
		Description:  pr.GetInfo().Description,
		ExternalID:   pr.GetExternalId(),
	}
	if pr.GetInfo().GetId() != nil {
		id, err := parseUUID(pr.GetInfo().GetId(), "rack.info.id")
		if err != nil {
			return nil, connectError(err)
		}
		p.ID = id
	}
	if l := pr.GetLocation(); l != nil {
		p.Location = Location{Region: l.GetRegion(), Datacenter: l.GetDatacenter(), Room: l.GetRoom(), Position: l.GetPosition()}
	}
	for i, pc := range pr.GetComponents() {
		c, err := componentFromProto(pc, fmt.Sprintf("rack.components[%d]", i), true)
		if err != nil {
			return nil, connectError(err)
		}
		p.Components = append(p.Components, c)
	}
	var report string
	err := h.inTx(ctx, func(tx pgx.Tx) (err error) {
		report, err = h.svc.PatchRack(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.PatchRackResponse{Report: report}, nil
}

// DeleteRack implements v1.Flow.
func (h *Handler) DeleteRack(ctx context.Context, req *flowv1.DeleteRackRequest) (*flowv1.DeleteRackResponse, error) {
	id, err := parseUUID(req.GetId(), "id")
	if err != nil {
		return nil, connectError(err)
	}
	if err := h.inTx(ctx, func(tx pgx.Tx) error { return h.svc.DeleteRack(ctx, tx, id) }); err != nil {
		return nil, connectError(err)
	}
	return &flowv1.DeleteRackResponse{}, nil
}

// PurgeRack implements v1.Flow.
func (h *Handler) PurgeRack(ctx context.Context, req *flowv1.PurgeRackRequest) (*flowv1.PurgeRackResponse, error) {
	id, err := parseUUID(req.GetId(), "id")
	if err != nil {
		return nil, connectError(err)
	}
	if err := h.inTx(ctx, func(tx pgx.Tx) error { return h.svc.PurgeRack(ctx, tx, id) }); err != nil {
		return nil, connectError(err)
	}
	return &flowv1.PurgeRackResponse{}, nil
}

// ---- components ----------------------------------------------------------

// GetComponentInfoByID implements v1.Flow.
func (h *Handler) GetComponentInfoByID(ctx context.Context, req *flowv1.GetComponentInfoByIDRequest) (*flowv1.GetComponentInfoResponse, error) {
	id, err := parseUUID(req.GetId(), "id")
	if err != nil {
		return nil, connectError(err)
	}
	c, rack, err := h.svc.ComponentWithRack(ctx, h.pool, id, req.GetWithRack())
	if err != nil {
		return nil, connectError(err)
	}
	return componentResponse(c, rack), nil
}

// GetComponentInfoBySerial implements v1.Flow. The manufacturer is compared
// ignoring case.
func (h *Handler) GetComponentInfoBySerial(ctx context.Context, req *flowv1.GetComponentInfoBySerialRequest) (*flowv1.GetComponentInfoResponse, error) {
	si := req.GetSerialInfo()
	c, rack, err := h.svc.ComponentBySerial(ctx, h.pool, si.GetManufacturer(), si.GetSerialNumber(), req.GetWithRack())
	if err != nil {
		return nil, connectError(err)
	}
	return componentResponse(c, rack), nil
}

func componentResponse(c Component, rack *Rack) *flowv1.GetComponentInfoResponse {
	out := &flowv1.GetComponentInfoResponse{Component: componentToProto(c)}
	if rack != nil {
		out.Rack = rackToProto(*rack)
	}
	return out
}

// GetComponents implements v1.Flow.
func (h *Handler) GetComponents(ctx context.Context, req *flowv1.GetComponentsRequest) (*flowv1.GetComponentsResponse, error) {
	q, err := ComponentQueryFromProto(req.TargetSpec, req.GetFilters())
	if err != nil {
		return nil, connectError(err)
	}
	q.Page = pageFromProto(req.GetPagination())
	if ob := req.GetOrderBy(); ob != nil {
		if q.Order, err = ComponentOrderFromProto(ob); err != nil {
			return nil, connectError(err)
		}
	}
	comps, total, err := h.svc.ListComponents(ctx, h.pool, q)
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.GetComponentsResponse{Components: componentsToProto(comps), Total: total}, nil
}

// ComponentQueryFromProto converts the selection part of a component query
// (GetComponents, ValidateComponents): an optional target spec (nil means
// everything) and component-flavoured filters. Paging and order are left
// zero. Errors: *FieldError naming the request field.
func ComponentQueryFromProto(spec *flowv1.OperationTargetSpec, filters []*flowv1.Filter) (ComponentQuery, error) {
	var q ComponentQuery
	if spec != nil {
		ts, err := TargetSpecFromProto(spec, "target_spec")
		if err != nil {
			return q, err
		}
		q.Scope = &ts
	}
	seen := map[flowv1.ComponentFilterField]bool{}
	for i, f := range filters {
		field := fmt.Sprintf("filters[%d]", i)
		cf, ok := f.GetField().(*flowv1.Filter_ComponentField)
		if !ok {
			return q, invalid(field+".component_field", "required (component listings take component filters)")
		}
		if seen[cf.ComponentField] {
			return q, invalid(field+".component_field", "%s given twice; put the patterns in one filter", cf.ComponentField)
		}
		seen[cf.ComponentField] = true
		sq := stringQueryFromProto(f.GetQueryInfo())
		switch cf.ComponentField {
		case flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_NAME:
			q.Name = sq
		case flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_MANUFACTURER:
			q.Manufacturer = sq
		case flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_MODEL:
			q.Model = sq
		case flowv1.ComponentFilterField_COMPONENT_FILTER_FIELD_TYPE:
			types, err := typesMatching(sq, field+".query_info.patterns")
			if err != nil {
				return q, err
			}
			q.Types = types
		default:
			return q, invalid(field+".component_field", "unknown value %d", cf.ComponentField)
		}
	}
	return q, nil
}

// ComponentOrderFromProto converts a component-flavoured OrderBy.
// Errors: *FieldError naming order_by's fields.
func ComponentOrderFromProto(ob *flowv1.OrderBy) (ComponentOrder, error) {
	var o ComponentOrder
	desc, err := directionFromProto(ob.GetDirection())
	if err != nil {
		return o, err
	}
	o.Desc = desc
	if _, isRack := ob.GetField().(*flowv1.OrderBy_RackField); isRack {
		return o, invalid("order_by.component_field", "required (component listings order by component fields)")
	}
	switch ob.GetComponentField() {
	case flowv1.ComponentOrderByField_COMPONENT_ORDER_BY_FIELD_UNSPECIFIED, flowv1.ComponentOrderByField_COMPONENT_ORDER_BY_FIELD_NAME:
		o.Key = "name"
	case flowv1.ComponentOrderByField_COMPONENT_ORDER_BY_FIELD_MANUFACTURER:
		o.Key = "manufacturer"
	case flowv1.ComponentOrderByField_COMPONENT_ORDER_BY_FIELD_MODEL:
		o.Key = "model"
	case flowv1.ComponentOrderByField_COMPONENT_ORDER_BY_FIELD_TYPE:
		o.Key = "type"
	default:
		return o, invalid("order_by.component_field", "unknown value %d", ob.GetComponentField())
	}
	return o, nil
}

// AddComponent implements v1.Flow.
func (h *Handler) AddComponent(ctx context.Context, req *flowv1.AddComponentRequest) (*flowv1.AddComponentResponse, error) {
	if req.GetComponent() == nil {
		return nil, connectError(invalid("component", "required"))
	}
	c, err := componentFromProto(req.GetComponent(), "component", false)
	if err != nil {
		return nil, connectError(err)
	}
	var stored Component
	err = h.inTx(ctx, func(tx pgx.Tx) (err error) {
		stored, err = h.svc.AddComponent(ctx, tx, c)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.AddComponentResponse{Component: componentToProto(stored)}, nil
}

// PatchComponent implements v1.Flow.
func (h *Handler) PatchComponent(ctx context.Context, req *flowv1.PatchComponentRequest) (*flowv1.PatchComponentResponse, error) {
	id, err := parseUUID(req.GetId(), "id")
	if err != nil {
		return nil, connectError(err)
	}
	p := ComponentPatch{ID: id, FirmwareVersion: req.FirmwareVersion, Description: req.Description}
	if p.Description != nil && *p.Description != "" && !jsonValid(*p.Description) {
		return nil, connectError(invalid("description", "must be a JSON string"))
	}
	if req.Position != nil {
		pos := positionFromProto(req.GetPosition())
		p.Position = &pos
	}
	if req.UpdateMask != nil {
		p.PositionFields = []string{}
		for _, path := range req.GetUpdateMask().GetPaths() {
			f, ok := strings.CutPrefix(path, "position.")
			if !ok || (f != "slot_id" && f != "tray_idx" && f != "host_id") {
				return nil, connectError(invalid("update_mask", "unknown path %q (supported: position.slot_id, position.tray_idx, position.host_id)", path))
			}
			p.PositionFields = append(p.PositionFields, f)
		}
		if len(p.PositionFields) > 0 && p.Position == nil {
			return nil, connectError(invalid("position", "required by update_mask"))
		}
	}
	if req.RackId != nil {
		rid, err := parseUUID(req.GetRackId(), "rack_id")
		if err != nil {
			return nil, connectError(err)
		}
		p.RackID = &rid
	}
	for i, b := range req.GetBmcs() {
		bmc, err := bmcFromProto(b, fmt.Sprintf("bmcs[%d]", i))
		if err != nil {
			return nil, connectError(err)
		}
		p.BMCs = append(p.BMCs, bmc)
	}
	var c Component
	err = h.inTx(ctx, func(tx pgx.Tx) (err error) {
		c, err = h.svc.PatchComponent(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.PatchComponentResponse{Component: componentToProto(c)}, nil
}

// DeleteComponent implements v1.Flow.
func (h *Handler) DeleteComponent(ctx context.Context, req *flowv1.DeleteComponentRequest) (*flowv1.DeleteComponentResponse, error) {
	id, err := parseUUID(req.GetId(), "id")
	if err != nil {
		return nil, connectError(err)
	}
	if err := h.inTx(ctx, func(tx pgx.Tx) error { return h.svc.DeleteComponent(ctx, tx, id) }); err != nil {
		return nil, connectError(err)
	}
	return &flowv1.DeleteComponentResponse{}, nil
}

// PurgeComponent implements v1.Flow.
func (h *Handler) PurgeComponent(ctx context.Context, req *flowv1.PurgeComponentRequest) (*flowv1.PurgeComponentResponse, error) {
	id, err := parseUUID(req.GetId(), "id")
	if err != nil {
		return nil, connectError(err)
	}
	if err := h.inTx(ctx, func(tx pgx.Tx) error { return h.svc.PurgeComponent(ctx, tx, id) }); err != nil {
		return nil, connectError(err)
	}
	return &flowv1.PurgeComponentResponse{}, nil
}

// ---- NVLink domains ------------------------------------------------------

// CreateNVLDomain implements v1.Flow.
func (h *Handler) CreateNVLDomain(ctx context.Context, req *flowv1.CreateNVLDomainRequest) (*flowv1.CreateNVLDomainResponse, error) {
	ident := req.GetNvlDomain().GetIdentifier()
	d := NVLDomain{Name: ident.GetName()}
	if ident.GetId() != nil {
		id, err := parseUUID(ident.GetId(), "nvl_domain.identifier.id")
		if err != nil {
			return nil, connectError(err)
		}
		d.ID = id
	}
	var id uuid.UUID
	err := h.inTx(ctx, func(tx pgx.Tx) (err error) {
		id, err = h.svc.CreateNVLDomain(ctx, tx, d)
		return err
	})
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.CreateNVLDomainResponse{Id: uuidProto(id)}, nil
}

// AttachRacksToNVLDomain implements v1.Flow.
func (h *Handler) AttachRacksToNVLDomain(ctx context.Context, req *flowv1.AttachRacksToNVLDomainRequest) (*emptypb.Empty, error) {
	domain, err := domainRefFromProto(req.GetNvlDomainIdentifier(), "nvl_domain_identifier")
	if err != nil {
		return nil, connectError(err)
	}
	racks, err := rackRefsFromProto(req.GetRackIdentifiers())
	if err != nil {
		return nil, connectError(err)
	}
	if err := h.inTx(ctx, func(tx pgx.Tx) error { return h.svc.AttachRacks(ctx, tx, domain, racks) }); err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// DetachRacksFromNVLDomain implements v1.Flow.
func (h *Handler) DetachRacksFromNVLDomain(ctx context.Context, req *flowv1.DetachRacksFromNVLDomainRequest) (*emptypb.Empty, error) {
	racks, err := rackRefsFromProto(req.GetRackIdentifiers())
	if err != nil {
		return nil, connectError(err)
	}
	if err := h.inTx(ctx, func(tx pgx.Tx) error { return h.svc.DetachRacks(ctx, tx, racks) }); err != nil {
		return nil, connectError(err)
	}
	return &emptypb.Empty{}, nil
}

// GetListOfNVLDomains implements v1.Flow.
func (h *Handler) GetListOfNVLDomains(ctx context.Context, req *flowv1.GetListOfNVLDomainsRequest) (*flowv1.GetListOfNVLDomainsResponse, error) {
	var q *StringQuery
	if req.GetInfo() != nil {
		q = stringQueryFromProto(req.GetInfo())
	}
	domains, total, err := h.svc.ListNVLDomains(ctx, h.pool, q, pageFromProto(req.GetPagination()))
	if err != nil {
		return nil, connectError(err)
	}
	out := &flowv1.GetListOfNVLDomainsResponse{NvlDomains: make([]*flowv1.NVLDomain, len(domains)), Total: total}
	for i, d := range domains {
		out.NvlDomains[i] = &flowv1.NVLDomain{Identifier: &flowv1.Identifier{Id: uuidProto(d.ID), Name: d.Name}}
	}
	return out, nil
}

// GetRacksForNVLDomain implements v1.Flow.
func (h *Handler) GetRacksForNVLDomain(ctx context.Context, req *flowv1.GetRacksForNVLDomainRequest) (*flowv1.GetRacksForNVLDomainResponse, error) {
	ref, err := domainRefFromProto(req.GetNvlDomainIdentifier(), "nvl_domain_identifier")
	if err != nil {
		return nil, connectError(err)
	}
	racks, err := h.svc.RacksForNVLDomain(ctx, h.pool, ref, false)
	if err != nil {
		return nil, connectError(err)
	}
	out := &flowv1.GetRacksForNVLDomainResponse{Racks: make([]*flowv1.Rack, len(racks))}
	for i, r := range racks {
		out.Racks[i] = rackToProto(r)
	}
	return out, nil
}

// ---- wire conversion -----------------------------------------------------

// TargetSpecFromProto converts a wire OperationTargetSpec, checking its
// shape (one kind, identifiers set, known types); field prefixes error
// fields. It returns *FieldError (ErrInvalidArgument) on bad input. The
// operations layer uses it before ResolveTargets.
func TargetSpecFromProto(spec *flowv1.OperationTargetSpec, field string) (TargetSpec, error) {
	var out TargetSpec
	switch t := spec.GetTargets().(type) {
	case *flowv1.OperationTargetSpec_Racks:
		for i, rt := range t.Racks.GetTargets() {
			f := fmt.Sprintf("%s.racks.targets[%d]", field, i)
			var ref RackRef
			switch id := rt.GetIdentifier().(type) {
			case *flowv1.RackTarget_Id:
				u, err := parseUUID(id.Id, f+".id")
				if err != nil {
					return TargetSpec{}, err
				}
				ref.ID = u
			case *flowv1.RackTarget_Name:
				ref.Name = id.Name
			case *flowv1.RackTarget_ExternalId:
				ref.ExternalID = id.ExternalId
			}
			if ref == (RackRef{}) {
				return TargetSpec{}, invalid(f, "give id, name or external_id")
			}
			types, err := typesFromProto(rt.GetComponentTypes(), f+".component_types")
			if err != nil {
				return TargetSpec{}, err
			}
			out.Racks = append(out.Racks, RackTarget{Rack: ref, Types: types})
		}
	case *flowv1.OperationTargetSpec_NvlDomains:
		for i, dt := range t.NvlDomains.GetTargets() {
			f := fmt.Sprintf("%s.nvl_domains.targets[%d]", field, i)
			var ref NVLDomainRef
			switch id := dt.GetIdentifier().(type) {
			case *flowv1.NVLDomainTarget_Id:
				u, err := parseUUID(id.Id, f+".id")
				if err != nil {
					return TargetSpec{}, err
				}
				ref.ID = u
			case *flowv1.NVLDomainTarget_Name:
				ref.Name = id.Name
			}
			if ref == (NVLDomainRef{}) {
				return TargetSpec{}, invalid(f, "give id or name")
			}
			types, err := typesFromProto(dt.GetComponentTypes(), f+".component_types")
			if err != nil {
				return TargetSpec{}, err
			}
			out.NVLDomains = append(out.NVLDomains, NVLDomainTarget{Domain: ref, Types: types})
		}
	case *flowv1.OperationTargetSpec_Components:
		for i, ct := range t.Components.GetTargets() {
			f := fmt.Sprintf("%s.components.targets[%d]", field, i)
			var ref ComponentRef
			switch id := ct.GetIdentifier().(type) {
			case *flowv1.ComponentTarget_Id:
				u, err := parseUUID(id.Id, f+".id")
				if err != nil {
					return TargetSpec{}, err
				}
				ref.ID = u
			case *flowv1.ComponentTarget_External:
				if id.External.GetId() == "" {
					return TargetSpec{}, invalid(f+".external.id", "must not be empty")
				}
				ref.ExternalID = id.External.GetId()
				if id.External.GetType() != flowv1.ComponentType_COMPONENT_TYPE_UNKNOWN {
					ct, err := typeFromProto(id.External.GetType(), f+".external.type")
					if err != nil {
						return TargetSpec{}, err
					}
					ref.ExternalType = ct
				}
			}
			if ref == (ComponentRef{}) {
				return TargetSpec{}, invalid(f, "give id or external")
			}
			out.Components = append(out.Components, ref)
		}
	}
	if len(out.Racks)+len(out.NVLDomains)+len(out.Components) == 0 {
		return TargetSpec{}, invalid(field, "must have exactly one of racks, nvl_domains, or components set")
	}
	return out, nil
}

func parseUUID(u *flowv1.UUID, field string) (uuid.UUID, error) {
	if u.GetId() == "" {
		return uuid.Nil, invalid(field, "required")
	}
	id, err := uuid.Parse(u.GetId())
	if err != nil {
		return uuid.Nil, invalid(field, "malformed UUID %q", u.GetId())
	}
	return id, nil
}

func jsonValid(s string) bool { return json.Valid([]byte(s)) }

func uuidProto(id uuid.UUID) *flowv1.UUID { return &flowv1.UUID{Id: id.String()} }

func pageFromProto(p *flowv1.Pagination) Page {
	return Page{Offset: p.GetOffset(), Limit: p.GetLimit()}
}

func directionFromProto(d string) (bool, error) {
	switch strings.ToUpper(d) {
	case "", "ASC":
		return false, nil
	case "DESC":
		return true, nil
	}
	return false, invalid("order_by.direction", "must be ASC or DESC, not %q", d)
}

func stringQueryFromProto(q *flowv1.StringQueryInfo) *StringQuery {
	if q == nil || len(q.GetPatterns()) == 0 {
		return nil
	}
	return &StringQuery{Patterns: q.GetPatterns(), Wildcard: q.GetIsWildcard(), AnyOf: q.GetUseOr()}
}

// typesMatching returns the component types whose enum value names
// (COMPONENT_TYPE_COMPUTE, ...) match q. Exact patterns must name a known
// type; wildcard patterns use the StringQuery syntax, case-insensitively.
func typesMatching(q *StringQuery, field string) ([]ComponentType, error) {
	if q == nil {
		return nil, nil
	}
	matches := func(pattern string, t ComponentType) (bool, error) {
		name := componentTypeToProto(t).String()
		if !q.Wildcard {
			return strings.EqualFold(pattern, name), nil
		}
		p := strings.NewReplacer("%", "*", "_", "?").Replace(strings.ToUpper(pattern))
		if !strings.ContainsAny(p, "*?") {
			p = "*" + p + "*"
		}
		ok, err := path.Match(p, name)
		if err != nil {
			return false, invalid(field, "bad pattern %q", pattern)
		}
		return ok, nil
	}
	out := []ComponentType{}
	for _, t := range ComponentTypes {
		hits := 0
		for _, p := range q.Patterns {
			ok, err := matches(p, t)
			if err != nil {
				return nil, err
			}
			if ok {
				hits++
			}
		}
		if (q.AnyOf && hits > 0) || (!q.AnyOf && hits == len(q.Patterns)) {
			out = append(out, t)
		}
	}
	if !q.Wildcard {
		for i, p := range q.Patterns {
			v, ok := flowv1.ComponentType_value[strings.ToUpper(p)]
			if !ok || v == 0 {
				return nil, invalid(fmt.Sprintf("%s[%d]", field, i), "unknown component type %q", p)
			}
		}
	}
	return out, nil
}

func typeFromProto(t flowv1.ComponentType, field string) (ComponentType, error) {
	switch t {
	case flowv1.ComponentType_COMPONENT_TYPE_COMPUTE:
		return ComponentTypeCompute, nil
	case flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH:
		return ComponentTypeNVSwitch, nil
	case flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF:
		return ComponentTypePowerShelf, nil
	case flowv1.ComponentType_COMPONENT_TYPE_TORSWITCH:
		return ComponentTypeToRSwitch, nil
	case flowv1.ComponentType_COMPONENT_TYPE_UMS:
		return ComponentTypeUMS, nil
	case flowv1.ComponentType_COMPONENT_TYPE_CDU:
		return ComponentTypeCDU, nil
	case flowv1.ComponentType_COMPONENT_TYPE_UNKNOWN:
		return "", invalid(field, "must not be COMPONENT_TYPE_UNKNOWN")
	}
	return "", invalid(field, "unknown component type %d", t)
}

func typesFromProto(ts []flowv1.ComponentType, field string) ([]ComponentType, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	out := make([]ComponentType, len(ts))
	for i, t := range ts {
		ct, err := typeFromProto(t, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return nil, err
		}
		out[i] = ct
	}
	return out, nil
}

func componentTypeToProto(t ComponentType) flowv1.ComponentType {
	switch t {
	case ComponentTypeCompute:
		return flowv1.ComponentType_COMPONENT_TYPE_COMPUTE
	case ComponentTypeNVSwitch:
		return flowv1.ComponentType_COMPONENT_TYPE_NVSWITCH
	case ComponentTypePowerShelf:
		return flowv1.ComponentType_COMPONENT_TYPE_POWERSHELF
	case ComponentTypeToRSwitch:
		return flowv1.ComponentType_COMPONENT_TYPE_TORSWITCH
	case ComponentTypeUMS:
		return flowv1.ComponentType_COMPONENT_TYPE_UMS
	case ComponentTypeCDU:
		return flowv1.ComponentType_COMPONENT_TYPE_CDU
	}
	return flowv1.ComponentType_COMPONENT_TYPE_UNKNOWN
}

func bmcFromProto(b *flowv1.BMCInfo, field string) (BMC, error) {
	var t BMCType
	switch b.GetType() {
	case flowv1.BMCType_BMC_TYPE_HOST:
		t = BMCTypeHost
	case flowv1.BMCType_BMC_TYPE_DPU:
		t = BMCTypeDPU
	default:
		return BMC{}, invalid(field+".type", "must be BMC_TYPE_HOST or BMC_TYPE_DPU")
	}
	mac, err := ParseMAC(b.GetMacAddress())
	if err != nil {
		return BMC{}, invalid(field+".mac_address", "%v", err)
	}
	return BMC{Type: t, MAC: mac, IP: b.IpAddress}, nil
}

func positionFromProto(p *flowv1.RackPosition) Position {
	return Position{SlotID: p.GetSlotId(), TrayIdx: p.GetTrayIdx(), HostID: p.GetHostId()}
}

func rackFromProto(r *flowv1.Rack, field string) (Rack, error) {
	info := r.GetInfo()
	out := Rack{
		Name:         info.GetName(),
		Manufacturer: info.GetManufacturer(),
		SerialNumber: info.GetSerialNumber(),
		Model:        info.Model,
		Description:  info.Description,
		ExternalID:   r.GetExternalId(),
	}
	if info.GetId() != nil {
		id, err := parseUUID(info.GetId(), field+".info.id")
		if err != nil {
			return Rack{}, err
		}
		out.ID = id
	}
	if l := r.GetLocation(); l != nil {
		out.Location = Location{Region: l.GetRegion(), Datacenter: l.GetDatacenter(), Room: l.GetRoom(), Position: l.GetPosition()}
	}
	for i, pc := range r.GetComponents() {
		c, err := componentFromProto(pc, fmt.Sprintf("%s.components[%d]", field, i), false)
		if err != nil {
			return Rack{}, err
		}
		out.Components = append(out.Components, c)
	}
	return out, nil
}

// componentFromProto converts a wire component. With lenientType an
// unknown type passes (PatchRack matches existing components by ID or
// serial and only needs a type for new ones).
func componentFromProto(c *flowv1.Component, field string, lenientType bool) (Component, error) {
	info := c.GetInfo()
	out := Component{
		Name:            info.GetName(),
		Manufacturer:    info.GetManufacturer(),
		SerialNumber:    info.GetSerialNumber(),
		Model:           info.Model,
		Description:     info.Description,
		FirmwareVersion: c.GetFirmwareVersion(),
		Position:        positionFromProto(c.GetPosition()),
		ExternalID:      c.GetComponentId(),
	}
	if c.GetType() != flowv1.ComponentType_COMPONENT_TYPE_UNKNOWN || !lenientType {
		t, err := typeFromProto(c.GetType(), field+".type")
		if err != nil {
			return Component{}, err
		}
		out.Type = t
	}
	if info.GetId() != nil {
		id, err := parseUUID(info.GetId(), field+".info.id")
		if err != nil {
			return Component{}, err
		}
		out.ID = id
	}
	if c.GetRackId() != nil {
		id, err := parseUUID(c.GetRackId(), field+".rack_id")
		if err != nil {
			return Component{}, err
		}
		out.RackID = &id
	}
	for i, b := range c.GetBmcs() {
		bmc, err := bmcFromProto(b, fmt.Sprintf("%s.bmcs[%d]", field, i))
		if err != nil {
			return Component{}, err
		}
		out.BMCs = append(out.BMCs, bmc)
	}
	return out, nil
}

func rackRefsFromProto(ids []*flowv1.Identifier) ([]RackRef, error) {
	out := make([]RackRef, len(ids))
	for i, ident := range ids {
		f := fmt.Sprintf("rack_identifiers[%d]", i)
		if ident.GetId() != nil {
			id, err := parseUUID(ident.GetId(), f+".id")
			if err != nil {
				return nil, err
			}
			out[i] = RackRef{ID: id}
			continue
		}
		if ident.GetName() == "" {
			return nil, invalid(f, "give id or name")
		}
		out[i] = RackRef{Name: ident.GetName()}
	}
	return out, nil
}

func domainRefFromProto(ident *flowv1.Identifier, field string) (NVLDomainRef, error) {
	if ident.GetId() != nil {
		id, err := parseUUID(ident.GetId(), field+".id")
		if err != nil {
			return NVLDomainRef{}, err
		}
		return NVLDomainRef{ID: id}, nil
	}
	if ident.GetName() == "" {
		return NVLDomainRef{}, invalid(field, "give id or name")
	}
	return NVLDomainRef{Name: ident.GetName()}, nil
}

// Resting values of fields that later work owns (spec/api.md §4.2): the
// power state is not synced yet, operability and leak detection have not
// looked at the component (UNKNOWN: fail closed), and no leak-handling task
// targets it (NONE).
const (
	restingPowerState         = ""
	restingPhase              = flowv1.Phase_PHASE_UNKNOWN
	restingLeakStatus         = flowv1.LeakStatus_LEAK_STATUS_UNKNOWN
	restingLeakHandlingStatus = flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_NONE
)

func taskStatsToProto(t TaskStats) *flowv1.TaskStats {
	return &flowv1.TaskStats{WaitingTaskCount: t.Waiting, PendingTaskCount: t.Pending, RunningTaskCount: t.Running}
}

func rackToProto(r Rack) *flowv1.Rack {
	out := &flowv1.Rack{
		Info: &flowv1.DeviceInfo{
			Id:           uuidProto(r.ID),
			Name:         r.Name,
			Manufacturer: r.Manufacturer,
			Model:        r.Model,
			SerialNumber: r.SerialNumber,
			Description:  r.Description,
		},
		Location: &flowv1.Location{
			Region:     r.Location.Region,
			Datacenter: r.Location.Datacenter,
			Room:       r.Location.Room,
			Position:   r.Location.Position,
		},
		TaskStats:       taskStatsToProto(r.TaskStats),
		ExternalId:      r.ExternalID,
		OperationStatus: restingPhase,
	}
	if r.NVLDomainID != nil {
		out.NvlDomainIds = []*flowv1.UUID{uuidProto(*r.NVLDomainID)}
	}
	if len(r.Components) > 0 {
		out.Components = componentsToProto(r.Components)
	}
	return out
}

func componentToProto(c Component) *flowv1.Component {
	return componentsToProto([]Component{c})[0]
}

// ComponentsToProto converts components to their wire form, as
// GetComponents returns them.
func ComponentsToProto(cs []Component) []*flowv1.Component { return componentsToProto(cs) }

// componentsToProto converts cs, allocating each kind of message in one
// slab and the UUIDs' text in one buffer: a rack page holds thousands of
// components, and allocating per message and per UUID string cost about a
// third of the conversion.
func componentsToProto(cs []Component) []*flowv1.Component {
	n, nBMCs, nUUIDs := len(cs), 0, len(cs)
	for _, c := range cs {
		nBMCs += len(c.BMCs)
		if c.RackID != nil {
			nUUIDs++
		}
		if c.NVLDomainID != nil {
			nUUIDs++
		}
	}
	var (
		out     = make([]*flowv1.Component, n)
		comps   = make([]flowv1.Component, n)
		infos   = make([]flowv1.DeviceInfo, n)
		pos     = make([]flowv1.RackPosition, n)
		status  = make([]flowv1.ComponentOperationStatus, n)
		stats   = make([]flowv1.TaskStats, n)
		uuids   = make([]flowv1.UUID, nUUIDs)
		bmcs    = make([]flowv1.BMCInfo, nBMCs)
		bmcPtrs = make([]*flowv1.BMCInfo, nBMCs)
		text    uuidText
	)
	text.grow(n)
	newUUID := func(s string) *flowv1.UUID {
		u := &uuids[0]
		uuids = uuids[1:]
		u.Id = s
		return u
	}
	// Components of one rack share its ID and domain: convert those once.
	var rackID, domainID uuid.UUID
	var rackText, domainText string
	for i, c := range cs {
		o := &comps[i]
		out[i] = o
		fillComponent(o, &infos[i], &pos[i], &status[i], &stats[i], c)
		o.Info.Id = newUUID(text.string(c.ID))
		if c.RackID != nil {
			if rackText == "" || *c.RackID != rackID {
				rackID, rackText = *c.RackID, text.string(*c.RackID)
			}
			o.RackId = newUUID(rackText)
		}
		if c.NVLDomainID != nil {
			if domainText == "" || *c.NVLDomainID != domainID {
				domainID, domainText = *c.NVLDomainID, text.string(*c.NVLDomainID)
			}
			o.NvlDomainId = newUUID(domainText)
		}
		if len(c.BMCs) > 0 {
			o.Bmcs, bmcPtrs = bmcPtrs[:len(c.BMCs):len(c.BMCs)], bmcPtrs[len(c.BMCs):]
			for j, b := range c.BMCs {
				t := flowv1.BMCType_BMC_TYPE_HOST
				if b.Type == BMCTypeDPU {
					t = flowv1.BMCType_BMC_TYPE_DPU
				}
				bm := &bmcs[0]
				bmcs = bmcs[1:]
				bm.Type, bm.MacAddress, bm.IpAddress = t, string(b.MAC), b.IP
				o.Bmcs[j] = bm
			}
		}
	}
	return out
}

// fillComponent sets out's fields from c, except the UUIDs and BMCs, using
// the given messages for its parts.
func fillComponent(out *flowv1.Component, info *flowv1.DeviceInfo, pos *flowv1.RackPosition, status *flowv1.ComponentOperationStatus, stats *flowv1.TaskStats, c Component) {
	info.Name, info.Manufacturer, info.Model, info.SerialNumber, info.Description = c.Name, c.Manufacturer, c.Model, c.SerialNumber, c.Description
	pos.SlotId, pos.TrayIdx, pos.HostId = c.Position.SlotID, c.Position.TrayIdx, c.Position.HostID
	status.Phase = phaseToProto(c.Status.Phase)
	status.Reason = c.Status.Reason
	status.BlockedOperations = status.BlockedOperations[:0]
	for _, op := range c.Status.Blocked {
		status.BlockedOperations = append(status.BlockedOperations, operationTypeToProto(op))
	}
	stats.WaitingTaskCount, stats.PendingTaskCount, stats.RunningTaskCount = c.TaskStats.Waiting, c.TaskStats.Pending, c.TaskStats.Running
	out.Type = componentTypeToProto(c.Type)
	out.Info = info
	out.FirmwareVersion = c.FirmwareVersion
	out.Position = pos
	out.ComponentId = c.ExternalID
	out.PowerState = restingPowerState
	out.Status = status
	out.LeakStatus = restingLeakStatus
	out.TaskStats = stats
	out.RackExternalId = c.RackExternalID
	out.LeakHandlingStatus = restingLeakHandlingStatus
}

// uuidText writes UUIDs' canonical text into one growing buffer and returns
// strings sharing it.
type uuidText struct{ b strings.Builder }

// grow makes room for n UUIDs.
func (t *uuidText) grow(n int) { t.b.Grow(36 * n) }

func (t *uuidText) string(id uuid.UUID) string {
	var buf [36]byte
	hex.Encode(buf[0:8], id[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], id[10:])
	n := t.b.Len()
	t.b.Write(buf[:])
	// A Builder never changes bytes it has written, so earlier strings stay
	// valid if it reallocates.
	return t.b.String()[n:]
}

// RackToProto returns r as the wire Rack that CreateExpectedRack accepts,
// components included. A nil rack or component ID travels as the zero UUID,
// which CreateExpectedRack replaces with a new one.
func RackToProto(r Rack) *flowv1.Rack { return rackToProto(r) }

var phases = map[string]flowv1.Phase{
	"initializing": flowv1.Phase_PHASE_INITIALIZING, "ready": flowv1.Phase_PHASE_READY,
	"in_use": flowv1.Phase_PHASE_IN_USE, "error": flowv1.Phase_PHASE_ERROR, "deleting": flowv1.Phase_PHASE_DELETING,
}

// phaseToProto maps a stored phase; unknown values are PHASE_UNKNOWN.
func phaseToProto(p string) flowv1.Phase { return phases[p] }

// operationTypeToProto maps a blocked operation type; the wire enum knows
// only power and firmware control.
func operationTypeToProto(op string) flowv1.OperationType {
	switch op {
	case "power_control":
		return flowv1.OperationType_OPERATION_TYPE_POWER_CONTROL
	case "firmware_control":
		return flowv1.OperationType_OPERATION_TYPE_FIRMWARE_CONTROL
	}
	return flowv1.OperationType_OPERATION_TYPE_UNKNOWN
}
