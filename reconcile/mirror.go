package reconcile

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
)

// Parts of the expected-inventory mirror (Core → Flow), which run first in
// a cycle when SyncConfig.Expected is set.
const (
	PartExpectedRacks      = "expected_racks"
	PartExpectedCompute    = "expected_compute"
	PartExpectedNVSwitch   = "expected_nvswitch"
	PartExpectedPowerShelf = "expected_powershelf"
)

// Label keys Core's expected objects carry (spec/orchestration.md §6.2).
const (
	labelChassisManufacturer = "chassis.manufacturer"
	labelChassisSerial       = "chassis.serial-number"
	labelChassisModel        = "chassis.model"
	labelLocationRegion      = "location.region"
	labelLocationDatacenter  = "location.datacenter"
	labelLocationRoom        = "location.room"
	labelLocationPosition    = "location.position"
	labelManufacturer        = "manufacturer"
	labelModel               = "model"
	labelSlotID              = "slot_id"
	labelTrayIdx             = "tray_idx"
	labelHostID              = "host_id"
)

// mirrorResult fills p from what a mirror pass did.
func mirrorResult(p *SyncPart, r inventory.MirrorResult) {
	p.Changed = r.Changed()
	p.Inserted, p.SoftDeleted, p.Adopted, p.Resurrected = r.Inserted, r.SoftDeleted, r.Adopted, r.Resurrected
	p.Warnings = append(p.Warnings, r.Warnings...)
}

// expectedRacks mirrors Core's expected racks (one transaction). A failed
// listing fails the part and changes nothing; a successful empty one
// soft-deletes every mirrored rack.
func (c *cycle) expectedRacks(ctx context.Context, p *SyncPart) error {
	rs, err := c.s.cfg.Core.ExpectedRacks(ctx)
	if err != nil {
		return err
	}
	in := make([]inventory.ExpectedRack, len(rs))
	for i, r := range rs {
		in[i] = inventory.ExpectedRack{
			ExternalID: r.RackID, Name: r.Name, Description: r.Description, ProfileID: r.ProfileID,
			Manufacturer: r.Labels[labelChassisManufacturer], SerialNumber: r.Labels[labelChassisSerial], Model: r.Labels[labelChassisModel],
			Location: inventory.Location{Region: r.Labels[labelLocationRegion], Datacenter: r.Labels[labelLocationDatacenter],
				Room: r.Labels[labelLocationRoom], Position: r.Labels[labelLocationPosition]},
		}
	}
	return pgx.BeginFunc(ctx, c.s.cfg.Pool, func(tx pgx.Tx) error {
		res, err := c.s.cfg.Inv.MirrorRacks(ctx, tx, in)
		if err != nil {
			return err
		}
		mirrorResult(p, res)
		return nil
	})
}

// coreExpected converts one Core expected component. A position label that is
// absent or not an integer leaves Flow's value (a malformed one is also a
// warning).
func coreExpected(p *SyncPart, mac, ip, serial, rackID, name, desc string, labels map[string]string) inventory.ExpectedComponent {
	pos := func(key string) *int32 {
		raw, ok := labels[key]
		if !ok || raw == "" {
			return nil
		}
		v, err := strconv.ParseInt(raw, 10, 32)
		if err != nil {
			p.Warnings = append(p.Warnings, fmt.Sprintf("%s: label %s=%q is not an integer; kept Flow's value", mac, key, raw))
			return nil
		}
		x := int32(v)
		return &x
	}
	return inventory.ExpectedComponent{
		MAC: mac, IP: ip, SerialNumber: serial, RackID: rackID, Name: name, Description: desc,
		Manufacturer: labels[labelManufacturer], Model: labels[labelModel],
		SlotID: pos(labelSlotID), TrayIdx: pos(labelTrayIdx), HostID: pos(labelHostID),
	}
}

func (c *cycle) mirrorComponents(ctx context.Context, p *SyncPart, t inventory.ComponentType, fetch func(context.Context) ([]inventory.ExpectedComponent, error)) error {
	var live []inventory.SyncComponent
	err := pgx.BeginFunc(ctx, c.s.cfg.Pool, func(tx pgx.Tx) error {
		res, err := c.s.cfg.Inv.MirrorComponents(ctx, tx, t, fetch)
		if err != nil {
			return err
		}
		mirrorResult(p, res)
		live = res.Live
		return nil
	})
	if err == nil && live != nil && len(live) <= c.s.cfg.HandOff {
		c.setListed(t, live)
	}
	return err
}

// The expected-list reads below run while the mirror reads Flow's rows
// (inventory.Service.MirrorComponents): they write p only before handing
// their answer over, and the mirror writes it only after.

func (c *cycle) expectedCompute(ctx context.Context, p *SyncPart) error {
	return c.mirrorComponents(ctx, p, inventory.ComponentTypeCompute, func(ctx context.Context) ([]inventory.ExpectedComponent, error) {
		ms, err := c.s.cfg.Core.ExpectedMachines(ctx)
		if err != nil {
			return nil, err
		}
		in := make([]inventory.ExpectedComponent, len(ms))
		for i, m := range ms {
			in[i] = coreExpected(p, m.BMCMAC, m.BMCIP, m.ChassisSerial, m.RackID, m.Name, m.Description, m.Labels)
		}
		return in, nil
	})
}

func (c *cycle) expectedSwitches(ctx context.Context, p *SyncPart) error {
	return c.mirrorComponents(ctx, p, inventory.ComponentTypeNVSwitch, func(ctx context.Context) ([]inventory.ExpectedComponent, error) {
		ss, err := c.s.cfg.Core.ExpectedSwitches(ctx)
		if err != nil {
			return nil, err
		}
		in := make([]inventory.ExpectedComponent, len(ss))
		for i, s := range ss {
			in[i] = coreExpected(p, s.BMCMAC, s.BMCIP, s.Serial, s.RackID, s.Name, s.Description, s.Labels)
		}
		return in, nil
	})
}

func (c *cycle) expectedShelves(ctx context.Context, p *SyncPart) error {
	return c.mirrorComponents(ctx, p, inventory.ComponentTypePowerShelf, func(ctx context.Context) ([]inventory.ExpectedComponent, error) {
		ps, err := c.s.cfg.Core.ExpectedPowerShelves(ctx)
		if err != nil {
			return nil, err
		}
		in := make([]inventory.ExpectedComponent, len(ps))
		for i, s := range ps {
			in[i] = coreExpected(p, s.BMCMAC, s.BMCIP, s.Serial, s.RackID, s.Name, s.Description, s.Labels)
		}
		return in, nil
	})
}

// dpusOf reads the DPU machines the hosts report and returns each host's
// DPU BMCs. A failed read fails the compute part (its DPU reconciliation
// cannot be done); a DPU without a valid BMC MAC is a warning.
func (c *cycle) dpusOf(ctx context.Context, p *SyncPart, hosts []nico.Machine) (map[string][]inventory.DPUBMC, error) {
	n := 0
	for _, h := range hosts {
		n += len(h.DPUIDs)
	}
	ids := make([]string, 0, n)
	for _, h := range hosts {
		ids = append(ids, h.DPUIDs...)
	}
	out := make(map[string][]inventory.DPUBMC, len(hosts))
	if len(ids) == 0 {
		return out, nil
	}
	ms, err := c.s.cfg.Core.Machines(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("read DPUs: %w", err)
	}
	byID := make(map[string]nico.Machine, len(ms))
	for _, m := range ms {
		byID[m.ID] = m
	}
	for _, h := range hosts {
		for _, id := range h.DPUIDs {
			m := byID[id]
			mac, err := inventory.ParseMAC(m.BMCMAC)
			if err != nil {
				p.Warnings = append(p.Warnings, fmt.Sprintf("DPU %s of %s: no valid BMC MAC", id, h.ID))
				continue
			}
			out[h.ID] = append(out[h.ID], inventory.DPUBMC{MAC: mac, IP: m.BMCIP})
		}
	}
	return out, nil
}
