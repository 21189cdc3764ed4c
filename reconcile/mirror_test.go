package reconcile_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/reconcile"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

// coreRack declares in the simulator a rack Flow has never seen, as an
// operator would in Core: expected rack core-<n> with chassis and location
// labels, and its components (demo rack n's shape, DPUs included) as
// expected and present devices. It returns the rack as Flow should come to
// hold it (Flow IDs unset).
func (b *syncBundle) coreRack(t *testing.T, n int) inventory.Rack {
	t.Helper()
	r := inventory.DemoRack(n)
	r.ExternalID = fmt.Sprintf("core-%d", n)
	sr := expectedSimRack(r)
	sr.Name = "" // Core has no name for it: Flow names it after its rack ID
	require.NoError(t, b.sim.SeedRacks([]nicosim.Rack{sr}))
	var devs []nicosim.Device
	for _, c := range r.Components {
		devs = append(devs, expectedSimDevice(c, r.ExternalID))
	}
	require.NoError(t, b.sim.Seed(devs))
	return r
}

// liveRack returns Flow's live rack with this chassis, with components.
func (b *syncBundle) liveRack(t *testing.T, manufacturer, serial string) inventory.Rack {
	t.Helper()
	got, err := b.inv.RackBySerial(b.ctx, b.pool, manufacturer, serial, true)
	require.NoError(t, err)
	return got
}

func requireAllOK(t *testing.T, run reconcile.SyncRun) {
	t.Helper()
	for _, p := range run.Parts {
		require.True(t, p.OK, "%s: %s", p.Name, p.Error)
	}
}

func TestMirrorCreatesRackAndComponentsFromCore(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 1)
	b.run(t)
	want := b.coreRack(t, 7)

	run := b.run(t)
	requireAllOK(t, run)
	require.EqualValues(t, 1, part(t, run, reconcile.PartExpectedRacks).Inserted)
	require.EqualValues(t, 18, part(t, run, reconcile.PartExpectedCompute).Inserted)
	require.EqualValues(t, 9, part(t, run, reconcile.PartExpectedNVSwitch).Inserted)
	require.EqualValues(t, 8, part(t, run, reconcile.PartExpectedPowerShelf).Inserted)

	got := b.liveRack(t, want.Manufacturer, want.SerialNumber)
	require.Equal(t, "core-7", got.ExternalID)
	require.Equal(t, "core-7", got.Name, "named after its rack ID when Core gives no name")
	require.Equal(t, want.Model, got.Model)
	require.Equal(t, want.Location, got.Location)
	require.Len(t, got.Components, 35)
	byName := map[string]inventory.Component{}
	for _, c := range got.Components {
		byName[c.Name] = c
	}
	for _, w := range want.Components {
		c, ok := byName[w.Name]
		require.True(t, ok, "component %s", w.Name)
		require.Equal(t, w.Type, c.Type)
		require.Equal(t, w.SerialNumber, c.SerialNumber)
		require.Equal(t, w.Manufacturer, c.Manufacturer)
		require.Equal(t, w.Model, c.Model)
		require.Equal(t, w.Position, c.Position)
		// The same cycle's actual sync linked it and gave compute trays
		// their DPUs: the mirror writes the host BMC, the compute sync
		// the DPU BMCs.
		require.NotEmpty(t, c.ExternalID, w.Name)
		require.ElementsMatch(t, w.BMCs, c.BMCs, w.Name)
		require.Equal(t, w.FirmwareVersion, c.FirmwareVersion, "firmware comes from the actual sync")
	}
	require.Empty(t, b.drifts(t), "Core's new rack is neither missing nor unexpected")

	again := b.run(t)
	requireAllOK(t, again)
	require.Zero(t, again.Changed(), "%+v", again.Parts)
}

func TestMirrorAdoptsCreateExpectedRackBySerial(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 0)
	// An operator registers the rack in Flow first (CreateExpectedRack),
	// without a Core rack ID; Flow names it and Core does not.
	r := inventory.DemoRack(3)
	r.Name, r.Location.Room = "my-rack", ""
	var id uuid.UUID
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		id, err = b.inv.CreateRack(b.ctx, tx, r)
		return err
	}))
	// Core lists it as rack core-3, with the same chassis and a room.
	sr := expectedSimRack(r)
	sr.ID, sr.Name, sr.Labels["location.room"] = "core-3", "", "hall-9"
	require.NoError(t, b.sim.SeedRacks([]nicosim.Rack{sr}))

	run := b.run(t)
	requireAllOK(t, run)
	p := part(t, run, reconcile.PartExpectedRacks)
	require.Equal(t, 1, p.Adopted)
	require.Zero(t, p.Inserted)
	got, err := b.inv.Rack(b.ctx, b.pool, id, false)
	require.NoError(t, err, "the same row (UUID) is adopted, not a new one created")
	require.Equal(t, "core-3", got.ExternalID)
	require.Equal(t, "my-rack", got.Name, "a name Core does not give is Flow's")
	require.Equal(t, "hall-9", got.Location.Room)
	racks, _, err := b.inv.ListRacks(b.ctx, b.pool, inventory.RackQuery{})
	require.NoError(t, err)
	require.Len(t, racks, 1)

	// The adopted rack is now mirrored: when Core drops it, Flow follows;
	// when Core lists it again, the same row comes back.
	require.True(t, b.sim.RemoveRack("core-3"))
	run = b.run(t)
	require.EqualValues(t, 1, part(t, run, reconcile.PartExpectedRacks).SoftDeleted)
	_, err = b.inv.Rack(b.ctx, b.pool, id, false)
	require.ErrorIs(t, err, inventory.ErrRackNotFound)
	require.NoError(t, b.sim.SeedRacks([]nicosim.Rack{sr}))
	run = b.run(t)
	require.Equal(t, 1, part(t, run, reconcile.PartExpectedRacks).Resurrected)
	got, err = b.inv.Rack(b.ctx, b.pool, id, false)
	require.NoError(t, err)
	require.Equal(t, "core-3", got.ExternalID)
}

func TestMirrorSoftDeletesWhatCoreRemovesAndResurrects(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 1)
	want := b.coreRack(t, 8)
	b.run(t)
	rack := b.liveRack(t, want.Manufacturer, want.SerialNumber)
	var gone inventory.Component
	for _, c := range rack.Components {
		if c.Name == "demo-0008-ct-04" {
			gone = c
		}
	}
	require.NotEqual(t, uuid.Nil, gone.ID)

	// The device leaves Core (both its expected entry and the machine).
	require.True(t, b.sim.Remove(reconcile.HostMAC(gone)))
	run := b.run(t)
	requireAllOK(t, run)
	require.EqualValues(t, 1, part(t, run, reconcile.PartExpectedCompute).SoftDeleted)
	_, err := b.inv.Component(b.ctx, b.pool, gone.ID)
	require.ErrorIs(t, err, inventory.ErrComponentNotFound)
	require.Len(t, b.liveRack(t, want.Manufacturer, want.SerialNumber).Components, 34)
	require.Empty(t, b.drifts(t), "a soft-deleted component is not missing")
	// Flow's own rack (never listed by Core) is untouched.
	require.Len(t, b.liveRack(t, b.racks[0].Manufacturer, b.racks[0].SerialNumber).Components, 35)

	// It comes back: same UUID.
	var w inventory.Component
	for _, c := range want.Components {
		if c.Name == gone.Name {
			w = c
		}
	}
	require.NoError(t, b.sim.Seed([]nicosim.Device{expectedSimDevice(w, "core-8")}))
	run = b.run(t)
	require.Equal(t, 1, part(t, run, reconcile.PartExpectedCompute).Resurrected)
	back, err := b.inv.Component(b.ctx, b.pool, gone.ID)
	require.NoError(t, err)
	require.Equal(t, rack.ID, *back.RackID)
}

func TestMirrorEmptyAnswerSoftDeletesFailedAnswerKeeps(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 1)
	want := b.coreRack(t, 9)
	b.run(t)
	require.Len(t, b.liveRack(t, want.Manufacturer, want.SerialNumber).Components, 35)

	// A failed listing changes nothing, even with Core's list emptied.
	for _, c := range want.Components {
		if c.Type == inventory.ComponentTypeCompute {
			require.True(t, b.sim.Remove(reconcile.HostMAC(c)))
		}
	}
	_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultError, Method: "GetAllExpectedMachines", Code: "unavailable", Times: 1})
	require.NoError(t, err)
	run := b.run(t)
	p := part(t, run, reconcile.PartExpectedCompute)
	require.False(t, p.OK)
	require.Contains(t, p.Error, "GetAllExpectedMachines")
	require.Zero(t, p.Changed)
	require.True(t, part(t, run, reconcile.PartExpectedNVSwitch).OK, "one failed listing fails only its part")
	require.Len(t, b.liveRack(t, want.Manufacturer, want.SerialNumber).Components, 35)

	// A successful empty answer is authoritative: every mirrored compute
	// tray goes; Flow's own compute trays and the other types stay.
	run = b.run(t)
	p = part(t, run, reconcile.PartExpectedCompute)
	require.True(t, p.OK, p.Error)
	require.EqualValues(t, 18, p.SoftDeleted)
	left := b.liveRack(t, want.Manufacturer, want.SerialNumber).Components
	require.Len(t, left, 17)
	for _, c := range left {
		require.NotEqual(t, inventory.ComponentTypeCompute, c.Type)
	}
	require.Len(t, b.liveRack(t, b.racks[0].Manufacturer, b.racks[0].SerialNumber).Components, 35)

	// A failed rack listing keeps the racks; an empty one soft-deletes the
	// mirrored rack only.
	require.True(t, b.sim.RemoveRack("core-9"))
	_, err = b.sim.Faults().Add(sim.Fault{Kind: sim.FaultError, Method: "GetAllExpectedRacks", Code: "internal", Times: 1})
	require.NoError(t, err)
	run = b.run(t)
	require.False(t, part(t, run, reconcile.PartExpectedRacks).OK)
	b.liveRack(t, want.Manufacturer, want.SerialNumber)
	require.True(t, b.sim.RemoveRack("core-rack-0"))
	run = b.run(t)
	require.True(t, part(t, run, reconcile.PartExpectedRacks).OK)
	_, err = b.inv.RackBySerial(b.ctx, b.pool, want.Manufacturer, want.SerialNumber, false)
	require.ErrorIs(t, err, inventory.ErrRackNotFound)
	// Flow's rack core-rack-0 was adopted by the first cycle (Core listed
	// it), so Core dropping it soft-deletes it too.
	_, err = b.inv.Rack(b.ctx, b.pool, b.racks[0].ID, false)
	require.ErrorIs(t, err, inventory.ErrRackNotFound)
}

func TestSyncDPUChildrenFollowCore(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 1)
	b.run(t)
	ct := b.component(t, "demo-0000-ct-02")
	dpus := func() []string {
		var out []string
		for _, bm := range b.component(t, ct.Name).BMCs {
			if bm.Type == inventory.BMCTypeDPU {
				out = append(out, bm.MAC.String())
			}
		}
		return out
	}
	require.Len(t, dpus(), 2)

	// One DPU swapped for a new board, the other gone.
	swapped := []nicosim.DPU{{ID: "new-dpu", BMCMAC: "0a:00:00:00:00:99", BMCIP: "10.9.9.9"}}
	require.NoError(t, b.sim.Update(ct.ExternalID, nicosim.DevicePatch{DPUs: &swapped}))
	run := b.run(t)
	requireAllOK(t, run)
	require.EqualValues(t, 3, part(t, run, reconcile.PartCompute).Changed, "two DPU BMCs removed, one added")
	require.Equal(t, []string{"0a:00:00:00:00:99"}, dpus())
	got := b.component(t, ct.Name)
	for _, bm := range got.BMCs {
		if bm.Type == inventory.BMCTypeDPU {
			require.Equal(t, "10.9.9.9", *bm.IP)
		}
	}
	require.Zero(t, b.run(t).Changed())

	// A failing DPU read fails the compute part and keeps the DPUs.
	other := []nicosim.DPU{{ID: "other-dpu", BMCMAC: "0a:00:00:00:00:98"}}
	require.NoError(t, b.sim.Update(ct.ExternalID, nicosim.DevicePatch{DPUs: &other}))
	_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultDrop, Method: "FindMachinesByIds", Device: "other-dpu", Times: 1})
	require.NoError(t, err)
	run = b.run(t)
	p := part(t, run, reconcile.PartCompute)
	require.False(t, p.OK)
	require.Contains(t, p.Error, "DPU")
	require.Equal(t, []string{"0a:00:00:00:00:99"}, dpus())
}

func TestSyncTopologySoftDeletesEmptiedDomains(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 2)
	group := func(g string) {
		require.NoError(t, b.sim.SeedRacks([]nicosim.Rack{{ID: "core-rack-0", GroupID: g}, {ID: "core-rack-1", GroupID: g}}))
	}
	domainOf := func(i int) uuid.UUID {
		r, err := b.inv.Rack(b.ctx, b.pool, b.racks[i].ID, false)
		require.NoError(t, err)
		require.NotNil(t, r.NVLDomainID)
		return *r.NVLDomainID
	}
	listed := func() []uuid.UUID {
		ds, _, err := b.inv.ListNVLDomains(b.ctx, b.pool, nil, inventory.Page{Limit: 100})
		require.NoError(t, err)
		var out []uuid.UUID
		for _, d := range ds {
			out = append(out, d.ID)
		}
		return out
	}
	group("group-a")
	b.run(t)
	a := domainOf(0)
	require.Equal(t, []uuid.UUID{a}, listed())

	// Both racks regrouped: a new domain holds them; group-a's domain is
	// empty and soft-deleted.
	group("group-b")
	run := b.run(t)
	require.True(t, part(t, run, reconcile.PartTopology).OK)
	bd := domainOf(0)
	require.NotEqual(t, a, bd)
	require.Equal(t, bd, domainOf(1))
	require.Equal(t, []uuid.UUID{bd}, listed())
	_, err := b.inv.NVLDomain(b.ctx, b.pool, inventory.NVLDomainRef{ID: a})
	require.ErrorIs(t, err, inventory.ErrNVLDomainNotFound)
	require.Zero(t, b.run(t).Changed())

	// group-a comes back: its domain is resurrected (same UUID); group-b's
	// is emptied in turn.
	group("group-a")
	b.run(t)
	require.Equal(t, a, domainOf(0))
	require.Equal(t, []uuid.UUID{a}, listed())
}

// TestMirrorAdoptsIngestedComponentsKeepingWhatCoreDoesNotSay: Flow's own
// ingestion declares a tray to Core with its rack's Flow UUID, its serial
// and no labels; the mirror adopts the tray without changing it. A label
// Core does send is written; a malformed one keeps Flow's value and warns.
func TestMirrorAdoptsIngestedComponentsKeepingWhatCoreDoesNotSay(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 1)
	b.run(t)
	ct := b.component(t, "demo-0000-ct-05")
	require.NoError(t, b.nc.AddExpectedMachine(b.ctx, nico.ExpectedMachine{
		BMCMAC: reconcile.HostMAC(ct), ChassisSerial: ct.SerialNumber, RackID: b.racks[0].ID.String(),
	}))
	run := b.run(t)
	requireAllOK(t, run)
	p := part(t, run, reconcile.PartExpectedCompute)
	require.Equal(t, 1, p.Adopted)
	got := b.component(t, ct.Name)
	require.Equal(t, ct.Position, got.Position)
	require.Equal(t, ct.Manufacturer, got.Manufacturer)
	require.Equal(t, ct.Model, got.Model)
	require.Equal(t, b.racks[0].ID, *got.RackID)
	require.Zero(t, b.run(t).Changed())

	// Core now says slot 12 and a tray index it cannot parse.
	require.NoError(t, b.nc.AddExpectedMachine(b.ctx, nico.ExpectedMachine{
		BMCMAC: reconcile.HostMAC(ct), ChassisSerial: ct.SerialNumber, RackID: "core-rack-0",
		Labels: map[string]string{"slot_id": "12", "tray_idx": "two", "model": "GB300"},
	}))
	run = b.run(t)
	p = part(t, run, reconcile.PartExpectedCompute)
	require.True(t, p.OK, p.Error)
	require.EqualValues(t, 1, p.Changed)
	require.Contains(t, strings.Join(p.Warnings, "\n"), `tray_idx="two" is not an integer`)
	got = b.component(t, ct.Name)
	require.EqualValues(t, 12, got.Position.SlotID)
	require.Equal(t, ct.Position.TrayIdx, got.Position.TrayIdx)
	require.Equal(t, "GB300", *got.Model)
	require.Equal(t, b.racks[0].ID, *got.RackID, "core-rack-0 is the same rack")
}
