package inventory

import (
	"context"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory/internal/dbsqlc"
)

// attachBMCsAndStats adds bmcs (of comps) and task stats to comps in place.
func (s *Service) attachBMCsAndStats(ctx context.Context, dbtx db.DBTX, comps []Component, bmcs []dbsqlc.BMC) error {
	index := make(map[uuid.UUID]int, len(comps))
	for i, c := range comps {
		index[c.ID] = i
	}
	for _, b := range bmcs {
		c := &comps[index[b.ComponentID]]
		c.BMCs = append(c.BMCs, BMC{Type: BMCType(b.Type), MAC: MAC(b.MACAddress), IP: b.IPAddress})
	}
	sortBMCs(comps)
	return s.addTaskStats(ctx, dbtx, comps)
}

// sortBMCs orders each component's BMCs: host first, then by MAC.
func sortBMCs(comps []Component) {
	for i := range comps {
		if len(comps[i].BMCs) > 1 {
			slices.SortFunc(comps[i].BMCs, func(a, b BMC) int {
				if a.Type != b.Type {
					if a.Type == BMCTypeHost {
						return -1
					}
					return 1
				}
				return strings.Compare(string(a.MAC), string(b.MAC))
			})
		}
	}
}

// validateBMC normalises b.MAC in place.
func validateBMC(b *BMC, field string) error {
	if b.Type != BMCTypeHost && b.Type != BMCTypeDPU {
		return invalid(field+".type", "must be BMC_TYPE_HOST or BMC_TYPE_DPU")
	}
	mac, err := ParseMAC(string(b.MAC))
	if err != nil {
		return invalid(field+".mac_address", "%v", err)
	}
	b.MAC = mac
	return nil
}
