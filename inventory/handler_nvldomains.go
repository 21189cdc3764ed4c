package inventory

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// CreateNVLDomain implements v1.Flow.
func (h *Handler) CreateNVLDomain(ctx context.Context, req *flowv1.CreateNVLDomainRequest) (*flowv1.CreateNVLDomainResponse, error) {
	ident := req.GetNvlDomain().GetIdentifier()
	name, err := trimmed(ident.GetName(), "nvl_domain.identifier.name")
	if err != nil {
		return nil, connectError(err)
	}
	d := NVLDomain{Name: name}
	if ident.GetId() != nil {
		id, err := parseUUID(ident.GetId(), "nvl_domain.identifier.id")
		if err != nil {
			return nil, connectError(err)
		}
		d.ID = id
	}
	// As upstream: the external ID is kept as given; a cluster ID that is not
	// a non-zero UUID is dropped.
	d.ExternalID = req.GetNvlDomain().GetExternalId()
	if c, err := uuid.Parse(req.GetNvlDomain().GetNmxcClusterId()); err == nil && c != uuid.Nil {
		d.NMXCClusterID = &c
	}
	var id uuid.UUID
	err = h.inTx(ctx, func(tx pgx.Tx) (err error) {
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
		out.NvlDomains[i] = domainToProto(d)
	}
	return out, nil
}

func domainToProto(d NVLDomain) *flowv1.NVLDomain {
	out := &flowv1.NVLDomain{Identifier: &flowv1.Identifier{Id: uuidProto(d.ID), Name: d.Name}}
	if d.ExternalID != "" {
		out.ExternalId = &d.ExternalID
	}
	if d.NMXCClusterID != nil {
		out.NmxcClusterId = proto.String(d.NMXCClusterID.String())
	}
	return out
}

// GetNVLinkDomain implements v1.Flow.
func (h *Handler) GetNVLinkDomain(ctx context.Context, req *flowv1.GetNVLinkDomainRequest) (*flowv1.GetNVLinkDomainResponse, error) {
	d, err := h.svc.NVLinkDomain(ctx, h.pool, req.GetId(), req.GetWithComponents())
	if err != nil {
		return nil, connectError(err)
	}
	return &flowv1.GetNVLinkDomainResponse{Domain: nvlinkDomainToProto(d)}, nil
}

// GetListOfNVLinkDomains implements v1.Flow.
func (h *Handler) GetListOfNVLinkDomains(ctx context.Context, req *flowv1.GetListOfNVLinkDomainsRequest) (*flowv1.GetListOfNVLinkDomainsResponse, error) {
	var q *StringQuery
	if req.GetInfo() != nil {
		q = stringQueryFromProto(req.GetInfo())
	}
	domains, total, err := h.svc.ListNVLinkDomains(ctx, h.pool, q, NVLinkDomainOrder(req.GetOrderBy()), pageFromProto(req.GetPagination()), req.GetWithComponents())
	if err != nil {
		return nil, connectError(err)
	}
	out := &flowv1.GetListOfNVLinkDomainsResponse{Domains: make([]*flowv1.NVLinkDomain, len(domains)), Total: total}
	for i, d := range domains {
		out.Domains[i] = nvlinkDomainToProto(d)
	}
	return out, nil
}

// nvlinkDomainToProto builds the wire read model: the member racks'
// components concatenated rack after rack (without task stats or leak
// handling, as upstream returns them on this path).
func nvlinkDomainToProto(d NVLinkDomain) *flowv1.NVLinkDomain {
	out := &flowv1.NVLinkDomain{
		Id: d.ExternalID, RackGroupId: d.ExternalID, Name: d.Name,
		OperationStatus: phaseToProto(d.Phase()),
	}
	if t, ok := d.Topology(); ok {
		out.Topology = &t
	}
	if d.NMXCClusterID != nil {
		out.NmxcClusterId = proto.String(d.NMXCClusterID.String())
	}
	var comps []Component
	for _, r := range d.Racks {
		comps = append(comps, r.Components...)
	}
	if len(comps) > 0 {
		out.Components = componentsToProto(comps)
		for _, c := range out.Components {
			c.TaskStats = nil
			c.LeakHandlingStatus = flowv1.LeakHandlingStatus(0)
		}
	}
	return out
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
