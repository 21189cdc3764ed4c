package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/reconcile"
	"github.com/nicoflow/flow/sim/nicosim"
)

// devSeedInterval is how often `flow dev` mirrors inventory changes into its
// simulators.
const devSeedInterval = 2 * time.Second

// devSeeder keeps flow dev's simulators in step with Flow's inventory: every
// live compute tray, NVLink switch and power shelf exists in the NICo Core
// simulator (shelves in the PSM simulator too) with the same serial, BMC
// MAC, firmware version, position and rack, so ValidateComponents on an
// untouched dev fleet reports no diffs.
//
// It only adds devices it has not seeded before and removes those whose
// component left the inventory (deleted or purged); a device it already
// seeded is never re-seeded, so its simulated state (power, jobs) survives,
// and one removed through the simulator's admin surface stays gone (that is
// how a lost device is simulated).
type devSeeder struct {
	sims   *simulators
	inv    *inventory.Service
	pool   *pgxpool.Pool
	logger *slog.Logger

	// stateDir, when set, is where the simulators' state is saved.
	stateDir string

	mu     sync.Mutex
	seeded map[string]bool // BMC MACs seeded from the inventory
}

func newDevSeeder(sims *simulators, pool *pgxpool.Pool, logger *slog.Logger) *devSeeder {
	return &devSeeder{sims: sims, inv: inventory.NewService(), pool: pool, logger: logger, seeded: map[string]bool{}}
}

// sync mirrors the inventory once and returns how many devices it added and
// removed.
func (d *devSeeder) sync(ctx context.Context) (added, removed int, err error) {
	var comps []inventory.Component
	for {
		page, total, err := d.inv.ListComponents(ctx, d.pool, inventory.ComponentQuery{Page: inventory.Page{Offset: int32(len(comps)), Limit: inventory.MaxPageLimit}})
		if err != nil {
			return 0, 0, err
		}
		comps = append(comps, page...)
		if len(page) == 0 || len(comps) >= int(total) {
			break
		}
	}
	want := simDevices(comps)
	d.mu.Lock()
	defer d.mu.Unlock()
	live := make(map[string]bool, len(want))
	var fresh []nicosim.Device
	for _, dev := range want {
		live[dev.BMCMAC] = true
		if !d.seeded[dev.BMCMAC] {
			fresh = append(fresh, dev)
		}
	}
	if len(fresh) > 0 {
		if err := d.sims.Seed(fresh); err != nil {
			return 0, 0, err
		}
		for _, dev := range fresh {
			d.seeded[dev.BMCMAC] = true
		}
	}
	for mac := range d.seeded {
		if !live[mac] {
			d.sims.nico.Remove(mac)
			d.sims.psm.Remove(mac)
			delete(d.seeded, mac)
			removed++
		}
	}
	return len(fresh), removed, nil
}

// followInventory seeds sims from srv's inventory now and then every
// devSeedInterval in the background, saving the simulators' state into
// stateDir after each pass (when stateDir is set); stop ends the background
// work, saves a last time and waits. Devices the simulators already hold
// (restored from stateDir) count as seeded: their state is kept.
func followInventory(ctx context.Context, sims *simulators, srv *server, logger *slog.Logger, stateDir string) (stop func(), err error) {
	seeder := newDevSeeder(sims, srv.pool, logger)
	seeder.stateDir = stateDir
	for _, d := range sims.nico.States() {
		seeder.seeded[d.BMCMAC] = true
	}
	added, _, err := seeder.sync(ctx)
	if err != nil {
		return nil, fmt.Errorf("seed simulators from inventory: %w", err)
	}
	logger.InfoContext(ctx, "simulators seeded from inventory", "devices", added)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { seeder.run(ctx, devSeedInterval) })
	return func() {
		cancel()
		wg.Wait()
		seeder.save()
	}, nil
}

// save writes the simulators' state into the state folder, if any.
func (d *devSeeder) save() {
	if d.stateDir == "" {
		return
	}
	if err := saveSimState(d.stateDir, d.sims); err != nil {
		d.logger.Warn("save simulator state", "error", err.Error())
	}
}

// run calls sync every interval until ctx is done.
func (d *devSeeder) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		added, removed, err := d.sync(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			d.logger.WarnContext(ctx, "seed simulators from inventory", "error", err.Error())
		case added > 0 || removed > 0:
			d.logger.InfoContext(ctx, "simulators follow inventory", "added", added, "removed", removed)
		}
		d.save()
	}
}

// simDevices is the simulated hardware Flow's components describe. Only
// compute trays, NVLink switches and power shelves with a BMC are
// simulated; identity follows spec/southbound.md §5.4:
//
//   - BMC MAC (PMC MAC for shelves): the host BMC's, normalised; the
//     correlation key on both sides.
//   - Core ID: the component's external ID (wire component_id) when Flow
//     has one, otherwise the component's Flow UUID, so IDs are stable
//     across restarts of flow dev.
//   - Core rack ID: the rack's external ID, otherwise the rack's Flow UUID.
//   - DPUs: one per DPU BMC of a compute tray, Core ID dpu-<MAC hex>.
//   - Serial, name and position as in the inventory; the firmware version
//     as the BMC version ("bmc"; "pmc" for shelves), which is where
//     inventory sync reads a component's firmware version from.
func simDevices(comps []inventory.Component) []nicosim.Device {
	var out []nicosim.Device
	for _, c := range comps {
		mac := reconcile.HostMAC(c)
		if mac == "" {
			continue
		}
		dev := nicosim.Device{
			ID: or(c.ExternalID, c.ID.String()), Name: c.Name, Serial: c.SerialNumber, BMCMAC: mac,
			SlotID: int(c.Position.SlotID), TrayIndex: int(c.Position.TrayIdx), HostID: int(c.Position.HostID),
			Firmware: map[string]string{},
		}
		for _, b := range c.BMCs {
			if string(b.MAC) == mac && b.IP != nil {
				dev.BMCIP = *b.IP
			}
			if b.Type == inventory.BMCTypeDPU && c.Type == inventory.ComponentTypeCompute {
				dpu := nicosim.DPU{ID: "dpu-" + strings.ReplaceAll(string(b.MAC), ":", ""), BMCMAC: string(b.MAC)}
				if b.IP != nil {
					dpu.BMCIP = *b.IP
				}
				dev.DPUs = append(dev.DPUs, dpu)
			}
		}
		if c.RackID != nil {
			dev.RackID = or(c.RackExternalID, c.RackID.String())
		}
		fwKey := "bmc"
		switch c.Type {
		case inventory.ComponentTypeCompute:
			dev.Kind = nicosim.KindCompute
		case inventory.ComponentTypeNVSwitch:
			dev.Kind = nicosim.KindNVSwitch
		case inventory.ComponentTypePowerShelf:
			dev.Kind, fwKey = nicosim.KindPowerShelf, "pmc"
		default:
			continue
		}
		if c.FirmwareVersion != "" {
			dev.Firmware[fwKey] = c.FirmwareVersion
		}
		out = append(out, dev)
	}
	return out
}
