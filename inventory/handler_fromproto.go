package inventory

import (
	"fmt"
	"path"
	"strings"

	"github.com/google/uuid"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

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
			case *flowv1.NVLDomainTarget_ExternalId:
				if strings.TrimSpace(id.ExternalId) == "" {
					return TargetSpec{}, invalid(f+".external_id", "must not be blank")
				}
				ref.ExternalID = id.ExternalId
			}
			if ref == (NVLDomainRef{}) {
				return TargetSpec{}, invalid(f, "give id, name or external_id")
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
		return uuid.Nil, invalid(field, "malformed UUID %q", clip(u.GetId()))
	}
	return id, nil
}

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
	// A pattern matches a type by upstream's name or by the enum's name,
	// case-insensitively.
	matches := func(pattern string, t ComponentType) (bool, error) {
		if !q.Wildcard {
			got, ok := ParseComponentType(pattern)
			return ok && got == t, nil
		}
		p := strings.NewReplacer("%", "*", "_", "?").Replace(strings.ToUpper(pattern))
		if !strings.ContainsAny(p, "*?") {
			p = "*" + p + "*"
		}
		for _, name := range []string{strings.ToUpper(string(t)), t.EnumName()} {
			ok, err := path.Match(p, name)
			if err != nil {
				return false, invalid(field, "bad pattern %q", pattern)
			}
			if ok {
				return true, nil
			}
		}
		return false, nil
	}
	if !q.Wildcard {
		for i, p := range q.Patterns {
			if _, ok := ParseComponentType(p); !ok {
				return nil, invalid(fmt.Sprintf("%s[%d]", field, i), "unknown component type %q (want %s)", p, ComponentTypeNames)
			}
		}
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
	ip, err := ipFromProto(b.IpAddress, field+".ip_address")
	if err != nil {
		return BMC{}, err
	}
	return BMC{Type: t, MAC: mac, IP: ip}, nil
}

func rackFromProto(r *flowv1.Rack, field string) (Rack, error) {
	info := r.GetInfo()
	di, err := deviceInfoFromProto(info, field+".info")
	if err != nil {
		return Rack{}, err
	}
	out := Rack{
		Name:         di.Name,
		Manufacturer: di.Manufacturer,
		SerialNumber: di.SerialNumber,
		Model:        di.Model,
		Description:  di.Description,
		ExternalID:   strings.TrimSpace(r.GetExternalId()),
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
	di, err := deviceInfoFromProto(info, field+".info")
	if err != nil {
		return Component{}, err
	}
	pos, err := positionFromProto(c.GetPosition(), field+".position")
	if err != nil {
		return Component{}, err
	}
	out := Component{
		Name:            di.Name,
		Manufacturer:    di.Manufacturer,
		SerialNumber:    di.SerialNumber,
		Model:           di.Model,
		Description:     di.Description,
		FirmwareVersion: strings.TrimSpace(c.GetFirmwareVersion()),
		Position:        pos,
		ExternalID:      strings.TrimSpace(c.GetComponentId()),
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
