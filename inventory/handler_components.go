package inventory

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

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
	release, err := h.acquireBuild(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
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
	if req.GetComponent().GetInfo() == nil {
		return nil, connectError(invalid("component.info", "required (serial_number and manufacturer identify the component)"))
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
	if req.Position != nil {
		pos, err := positionFromProto(req.GetPosition(), "position")
		if err != nil {
			return nil, connectError(err)
		}
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
