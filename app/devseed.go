package app

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
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
	for i := range want {
		withFirmwareMix(&want[i])
	}
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

// The installed firmware flow dev's simulated devices start with
// (docs/simulators.md, "flow dev's firmware mix"): every device carries
// its kind's sub-components (nicosim.SubComponents; a tray's two NICs) at
// the current set below, its BMC (a shelf's PMC) at the component's
// inventory firmware version, so that Flow's firmware_version column and
// Core agree. Demo racks (inventory.DemoRack, recognised by their
// components' serials) then deviate, by rack index and slot only, so a
// given --seed always starts with the same mix:
//
//   - racks 1, 11, 21, … (index % 10 == 1): every device at the previous
//     set (behind);
//   - racks 5, 15, 25, …: compute tray 03's NICs and shelf 06's PSU at the
//     previous version (behind on one sub-component);
//   - demo-0000-ct-00: BIOS ahead of the current set (the one device
//     ahead);
//   - demo-0002-ct-04 and demo-0003-ct-09: unreported (Core cannot read
//     their versions).
//
// demoDesiredFirmware is the current set as Core's desired versions, so
// that `flow baseline import` makes a baseline of it.
var (
	demoCurrent = map[string]map[string]string{
		nicosim.KindCompute:    {"bios": "1.3.2", "cec": "2.1.28", "nic": "28.43.1014", "cpld_mb": "0.2.1.9", "cpld_pdb": "0.1.0.7", "gpu": "97.0.52.1"},
		nicosim.KindNVSwitch:   {"cpld": "1.3.8", "bios": "1.1.12", "nvos": "25.02.2553"},
		nicosim.KindPowerShelf: {"psu": "1.4.2"},
	}
	demoPrevious = map[string]map[string]string{
		nicosim.KindCompute:    {"bios": "1.2.7", "cec": "2.1.19", "nic": "28.41.1000", "cpld_mb": "0.2.1.6", "cpld_pdb": "0.1.0.5", "gpu": "96.0.74.1"},
		nicosim.KindNVSwitch:   {"cpld": "1.3.5", "bios": "1.1.10", "nvos": "25.02.1312"},
		nicosim.KindPowerShelf: {"psu": "1.3.9"},
	}
	// demoAhead is the one device ahead and its sub-component's version.
	demoAhead = struct{ name, component, version string }{"demo-0000-ct-00", "bios", "1.4.0"}
	// demoUnreported are the devices whose versions Core cannot read.
	demoUnreported = []string{"demo-0002-ct-04", "demo-0003-ct-09"}
)

// demoSerial matches a demo component's serial: rack index, kind prefix,
// index within the kind.
var demoSerial = regexp.MustCompile(`^DEMO(\d{5})(ct|sw|ps)(\d{2})$`)

// withFirmwareMix gives d the sub-components and versions flow dev's
// devices start with (see demoCurrent).
func withFirmwareMix(d *nicosim.Device) {
	if d.Firmware == nil {
		d.Firmware = map[string]string{}
	}
	set := demoCurrent[d.Kind]
	if m := demoSerial.FindStringSubmatch(d.Serial); m != nil {
		rack, _ := strconv.Atoi(m[1])
		idx, _ := strconv.Atoi(m[3])
		name := fmt.Sprintf("demo-%04d-%s-%02d", rack, m[2], idx)
		switch {
		case rack%10 == 1:
			set = demoPrevious[d.Kind]
		case rack%10 == 5 && (name == fmt.Sprintf("demo-%04d-ct-03", rack) || name == fmt.Sprintf("demo-%04d-ps-06", rack)):
			set = maps.Clone(set)
			for _, c := range []string{"nic", "psu"} {
				if _, ok := set[c]; ok {
					set[c] = demoPrevious[d.Kind][c]
				}
			}
		case name == demoAhead.name:
			set = maps.Clone(set)
			set[demoAhead.component] = demoAhead.version
		}
		d.Unreported = slices.Contains(demoUnreported, name)
	}
	for c, v := range set {
		if _, ok := d.Firmware[c]; !ok {
			d.Firmware[c] = v
		}
	}
	d.Instances = nicosim.DefaultInstances(d.Kind)
}

// demoDesiredFirmware is the current set of demo devices as Core's
// desired versions, one entry per demo vendor and model, with the BMC
// (PMC) version of the demo rack's components.
func demoDesiredFirmware() []nicosim.DesiredFirmware {
	var out []nicosim.DesiredFirmware
	seen := map[inventory.ComponentType]bool{}
	for _, c := range inventory.DemoRack(0).Components {
		if seen[c.Type] {
			continue
		}
		seen[c.Type] = true
		kind, key := nicosim.KindCompute, "bmc"
		switch c.Type {
		case inventory.ComponentTypeNVSwitch:
			kind = nicosim.KindNVSwitch
		case inventory.ComponentTypePowerShelf:
			kind, key = nicosim.KindPowerShelf, "pmc"
		}
		e := nicosim.DesiredFirmware{Vendor: c.Manufacturer, Components: maps.Clone(demoCurrent[kind])}
		if c.Model != nil {
			e.Model = *c.Model
		}
		e.Components[key] = c.FirmwareVersion
		out = append(out, e)
	}
	return out
}

// seedDesiredFirmware gives the Core simulator the demo devices' desired
// versions, unless it holds some already (restored from the state folder,
// or set through its admin surface).
func seedDesiredFirmware(sims *simulators) error {
	if len(sims.nico.DesiredFirmware()) > 0 {
		return nil
	}
	return sims.nico.SetDesiredFirmware(demoDesiredFirmware())
}
