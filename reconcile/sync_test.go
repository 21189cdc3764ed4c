package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/reconcile"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

type syncBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	inv    *inventory.Service
	racks  []inventory.Rack
	sim    *nicosim.Sim
	nc     *nico.Client
	syncer *reconcile.Syncer
}

// setupSync creates demo racks with Core rack IDs core-rack-<i> and a NICo
// Core simulator holding exactly their compute trays, switches and shelves
// (same MACs, positions and firmware), and a Syncer between them.
func setupSync(t *testing.T, racks int) *syncBundle {
	t.Helper()
	return setupSyncPaged(t, racks, 0)
}

// setupSyncPaged is setupSync with a Syncer that reads Core page devices
// and Flow page components at a time, the mirror handing no listing on
// (0: the defaults).
func setupSyncPaged(t *testing.T, racks, page int) *syncBundle {
	t.Helper()
	b := &syncBundle{ctx: context.Background(), pool: dbtest.NewPool(t), inv: inventory.NewService()}
	b.sim = nicosim.New(nicosim.Options{})
	var devs []nicosim.Device
	var simRacks []nicosim.Rack
	for i := range racks {
		r := inventory.DemoRack(i)
		r.ExternalID = fmt.Sprintf("core-rack-%d", i)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.inv.CreateRack(b.ctx, tx, r)
			return err
		}))
		got, err := b.inv.RackBySerial(b.ctx, b.pool, r.Manufacturer, r.SerialNumber, true)
		require.NoError(t, err)
		b.racks = append(b.racks, got)
		simRacks = append(simRacks, nicosim.Rack{ID: r.ExternalID})
		for k, c := range got.Components {
			d := nicosim.Device{ID: fmt.Sprintf("core-%d-%02d", i, k), RackID: r.ExternalID, Name: c.Name, Serial: c.SerialNumber,
				BMCMAC: reconcile.HostMAC(c), Firmware: map[string]string{"bmc": c.FirmwareVersion},
				SlotID: int(c.Position.SlotID), TrayIndex: int(c.Position.TrayIdx), HostID: int(c.Position.HostID), DPUs: simDPUs(c)}
			switch c.Type {
			case inventory.ComponentTypeCompute:
				d.Kind = nicosim.KindCompute
			case inventory.ComponentTypeNVSwitch:
				d.Kind, d.BMCIP = nicosim.KindNVSwitch, fmt.Sprintf("10.0.%d.%d", i, k) // also its NVOS IP
			case inventory.ComponentTypePowerShelf:
				d.Kind, d.Firmware = nicosim.KindPowerShelf, map[string]string{"pmc": c.FirmwareVersion}
			}
			devs = append(devs, d)
		}
	}
	require.NoError(t, b.sim.Seed(devs))
	require.NoError(t, b.sim.SeedRacks(simRacks))
	srv, err := sim.Listen("127.0.0.1:0", b.sim.Handler())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	nc, err := nico.NewClient(srv.URL(), nico.WithTimeout(10*time.Second))
	require.NoError(t, err)
	b.nc = nc
	cfg := reconcile.SyncConfig{Pool: b.pool, Inv: b.inv, Core: nc, Expected: true, Page: page}
	if page > 0 {
		cfg.HandOff = -1 // the actual sync reads Flow's components in pages of page too
	}
	b.syncer = reconcile.NewSyncer(cfg)
	return b
}

// simDPUs is the simulated DPUs of c: one per DPU BMC, with ID
// <component name>-dpu-<n>.
func simDPUs(c inventory.Component) []nicosim.DPU {
	var out []nicosim.DPU
	for _, b := range c.BMCs {
		if b.Type == inventory.BMCTypeDPU {
			out = append(out, nicosim.DPU{ID: fmt.Sprintf("%s-dpu-%d", c.Name, len(out)), BMCMAC: b.MAC.String()})
		}
	}
	return out
}

func (b *syncBundle) run(t *testing.T) reconcile.SyncRun {
	t.Helper()
	run, err := b.syncer.Run(b.ctx, reconcile.TriggerManual)
	require.NoError(t, err)
	return run
}

func part(t *testing.T, run reconcile.SyncRun, name string) reconcile.SyncPart {
	t.Helper()
	for _, p := range run.Parts {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no part %s in %+v", name, run.Parts)
	return reconcile.SyncPart{}
}

// component returns the component named name as Flow holds it now.
func (b *syncBundle) component(t *testing.T, name string) inventory.Component {
	t.Helper()
	for _, r := range b.racks {
		for _, c := range r.Components {
			if c.Name == name {
				got, err := b.inv.Component(b.ctx, b.pool, c.ID)
				require.NoError(t, err)
				return got
			}
		}
	}
	t.Fatalf("no component %s", name)
	return inventory.Component{}
}

func (b *syncBundle) drifts(t *testing.T) []reconcile.Drift {
	t.Helper()
	ds, err := b.syncer.Drifts(b.ctx, b.pool)
	require.NoError(t, err)
	return ds
}

func TestSyncFirstCycleLinksAndSecondWritesNothing(t *testing.T) {
	t.Parallel()
	// Page 4 reads Core's 18 compute trays, 9 switches and 8 shelves in
	// pages of 4 (the default reads each type as one page).
	for _, page := range []int{0, 4} {
		t.Run(fmt.Sprintf("page=%d", page), func(t *testing.T) {
			t.Parallel()
			testSyncFirstCycleLinksAndSecondWritesNothing(t, setupSyncPaged(t, 1, page))
		})
	}
}

func testSyncFirstCycleLinksAndSecondWritesNothing(t *testing.T, b *syncBundle) {
	run := b.run(t)
	for _, p := range run.Parts {
		require.True(t, p.OK, "%s: %s", p.Name, p.Error)
	}
	// Each device's row, then its installed versions' (component_firmware).
	require.EqualValues(t, 2*18, part(t, run, reconcile.PartCompute).Changed)
	require.EqualValues(t, 2*9, part(t, run, reconcile.PartNVSwitch).Changed)
	require.EqualValues(t, 2*8, part(t, run, reconcile.PartPowerShelf).Changed)
	// The rack Core lists under its external ID is adopted (nothing else
	// about it differs); Core expects no component, and the components are
	// Flow's own, so the component mirror leaves them alone.
	require.EqualValues(t, 1, part(t, run, reconcile.PartExpectedRacks).Changed)
	require.Equal(t, 1, part(t, run, reconcile.PartExpectedRacks).Adopted)
	require.Zero(t, part(t, run, reconcile.PartExpectedCompute).Changed)
	require.Empty(t, b.drifts(t))

	ct := b.component(t, "demo-0000-ct-00")
	st, ok := b.sim.State(reconcile.HostMAC(ct))
	require.True(t, ok)
	require.Equal(t, st.ID, ct.ExternalID)
	require.Equal(t, "on", ct.PowerState)
	require.Equal(t, "ready", ct.Status.Phase)
	require.Empty(t, ct.Status.Blocked)
	sw := b.component(t, "demo-0000-sw-00")
	require.NotNil(t, sw.Description)
	require.Contains(t, *sw.Description, `"nvos_ip":"10.0.0.`)

	again := b.run(t)
	require.Zero(t, again.Changed(), "%+v", again.Parts)
	for _, p := range again.Parts {
		require.False(t, p.DriftChanged, p.Name)
	}
	latest, err := b.syncer.Latest(b.ctx)
	require.NoError(t, err)
	require.Equal(t, again.ID, latest.ID)
	require.Len(t, latest.Parts, 9)
}

func TestSyncFirmwarePowerPositionHealthAndState(t *testing.T) {
	t.Parallel()
	// Page 4 reads Core's 18 compute trays, 9 switches and 8 shelves in
	// pages of 4 (the default reads each type as one page).
	for _, page := range []int{0, 4} {
		t.Run(fmt.Sprintf("page=%d", page), func(t *testing.T) {
			t.Parallel()
			testSyncFirmwarePowerPositionHealthAndState(t, setupSyncPaged(t, 1, page))
		})
	}
}

func testSyncFirmwarePowerPositionHealthAndState(t *testing.T, b *syncBundle) {
	b.run(t)
	ct := b.component(t, "demo-0000-ct-01")
	off, failed, alerts := true, "Failed/HostFailure", []string{"overheat"}
	slot := 29
	require.NoError(t, b.sim.Update(ct.ExternalID, nicosim.DevicePatch{
		Firmware: map[string]string{"bmc": "FW 9.9"}, PoweredOff: &off, SlotID: &slot, State: &failed, Alerts: &alerts,
	}))
	sw := b.component(t, "demo-0000-sw-02")
	require.NoError(t, b.sim.Update(sw.ExternalID, nicosim.DevicePatch{Firmware: map[string]string{"bmc": "NVOS 26.01"}}))
	run := b.run(t)
	// The tray's row and its installed versions' row (its BMC changed).
	require.EqualValues(t, 2, part(t, run, reconcile.PartCompute).Changed)

	got := b.component(t, "demo-0000-ct-01")
	require.Equal(t, "FW 9.9", got.FirmwareVersion)
	require.Equal(t, "off", got.PowerState)
	require.Equal(t, "error", got.Status.Phase)
	require.Equal(t, "Failed/HostFailure", got.Status.Reason)
	require.ElementsMatch(t, []string{"power_control", "firmware_control"}, got.Status.Blocked)
	require.Contains(t, string(got.Health), "overheat")
	require.Equal(t, "NVOS 26.01", b.component(t, "demo-0000-sw-02").FirmwareVersion)

	// The wire shows it, and the rack's operation status follows.
	wire := inventory.ComponentsToProto([]inventory.Component{got})[0]
	require.Equal(t, "off", wire.GetPowerState())
	require.Equal(t, "PHASE_ERROR", wire.GetStatus().GetPhase().String())
	require.Equal(t, "nicosim", wire.GetHealth().GetSource())
	require.Len(t, wire.GetHealth().GetAlerts(), 1)
	require.Equal(t, "overheat", wire.GetHealth().GetAlerts()[0].GetId())
	require.NotNil(t, wire.GetHealth().GetAlerts()[0].GetInAlertSince())
	rack, err := b.inv.Rack(b.ctx, b.pool, b.racks[0].ID, false)
	require.NoError(t, err)
	require.Equal(t, "error", rack.OperationPhase)
	require.Equal(t, "PHASE_ERROR", inventory.RackToProto(rack).GetOperationStatus().String())

	// The readiness gate now holds power and firmware operations on it.
	blocking, err := b.inv.Blocking(b.ctx, b.pool, []uuid.UUID{got.ID}, "power_control", false)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{got.ID}, blocking)

	// The position change is a MISMATCH drift.
	ds := b.drifts(t)
	require.Len(t, ds, 1)
	require.Equal(t, "mismatch", ds[0].Kind)
	require.Equal(t, got.ID, *ds[0].ComponentID)
	require.Equal(t, "position.slot_id", ds[0].Fields[0].Field)
	require.Equal(t, "6", ds[0].Fields[0].Expected)
	require.Equal(t, "29", ds[0].Fields[0].Actual)

	// Alert cleared, back to Ready: health holds no alert, gate open.
	ready, none := "Ready", []string{}
	require.NoError(t, b.sim.Update(ct.ExternalID, nicosim.DevicePatch{State: &ready, Alerts: &none}))
	b.run(t)
	got = b.component(t, "demo-0000-ct-01")
	require.Equal(t, "ready", got.Status.Phase)
	require.NotContains(t, string(got.Health), "overheat")
	require.Empty(t, inventory.ComponentsToProto([]inventory.Component{got})[0].GetHealth().GetAlerts())
	blocking, err = b.inv.Blocking(b.ctx, b.pool, []uuid.UUID{got.ID}, "power_control", false)
	require.NoError(t, err)
	require.Empty(t, blocking)
	rack, err = b.inv.Rack(b.ctx, b.pool, b.racks[0].ID, false)
	require.NoError(t, err)
	require.Equal(t, "ready", rack.OperationPhase)
}

func TestSyncMissingAndUnexpected(t *testing.T) {
	t.Parallel()
	// Page 4 reads Core's 18 compute trays, 9 switches and 8 shelves in
	// pages of 4 (the default reads each type as one page).
	for _, page := range []int{0, 4} {
		t.Run(fmt.Sprintf("page=%d", page), func(t *testing.T) {
			t.Parallel()
			testSyncMissingAndUnexpected(t, setupSyncPaged(t, 1, page))
		})
	}
}

func testSyncMissingAndUnexpected(t *testing.T, b *syncBundle) {
	b.run(t)
	ct := b.component(t, "demo-0000-ct-03")
	require.True(t, b.sim.Remove(ct.ExternalID))
	require.NoError(t, b.sim.Seed([]nicosim.Device{{Kind: nicosim.KindPowerShelf, ID: "stray", BMCMAC: "0a:00:00:00:00:01", RackID: "core-rack-0"}}))
	b.run(t)
	ds := b.drifts(t)
	require.Len(t, ds, 2)
	kinds := map[string]reconcile.Drift{}
	for _, d := range ds {
		kinds[d.Kind] = d
	}
	require.Equal(t, ct.ID, *kinds["missing_in_actual"].ComponentID)
	require.Equal(t, "Compute", string(kinds["missing_in_actual"].Type))
	require.Nil(t, kinds["missing_in_expected"].ComponentID)
	require.Equal(t, "stray", kinds["missing_in_expected"].ExternalID)
	require.Equal(t, "0a:00:00:00:00:01", kinds["missing_in_expected"].MAC)
}

func TestSyncFailedListingKeepsThatTypesDrift(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 1)
	ct := b.component(t, "demo-0000-ct-00")
	sw := b.component(t, "demo-0000-sw-00")
	b.run(t) // links external IDs
	ct, sw = b.component(t, ct.Name), b.component(t, sw.Name)
	require.True(t, b.sim.Remove(ct.ExternalID))
	require.True(t, b.sim.Remove(sw.ExternalID))
	b.run(t)
	require.Len(t, b.drifts(t), 2)

	// Both come back; the switch listing fails this cycle: compute drifts
	// are replaced (gone), the switch's stay.
	require.NoError(t, b.sim.Seed([]nicosim.Device{
		{Kind: nicosim.KindCompute, ID: ct.ExternalID, BMCMAC: reconcile.HostMAC(ct), SlotID: 5, TrayIndex: 0, Firmware: map[string]string{"bmc": ct.FirmwareVersion}},
		{Kind: nicosim.KindNVSwitch, ID: sw.ExternalID, BMCMAC: reconcile.HostMAC(sw), SlotID: 15, Firmware: map[string]string{"bmc": sw.FirmwareVersion}},
	}))
	_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultError, Method: "FindSwitchIds", Code: "unavailable", Times: 1})
	require.NoError(t, err)
	run := b.run(t)
	require.True(t, part(t, run, reconcile.PartCompute).OK)
	p := part(t, run, reconcile.PartNVSwitch)
	require.False(t, p.OK)
	require.Contains(t, p.Error, "FindSwitchIds")
	require.False(t, part(t, run, reconcile.PartTopology).OK, "topology needs this cycle's switch listing")
	require.True(t, part(t, run, reconcile.PartPowerShelf).OK)
	ds := b.drifts(t)
	require.Len(t, ds, 1)
	require.Equal(t, sw.ID, *ds[0].ComponentID)

	b.run(t)
	require.Empty(t, b.drifts(t))
}

func TestSyncTopologyAndRackHealth(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 3)
	cluster := uuid.New()
	require.NoError(t, b.sim.SeedRacks([]nicosim.Rack{
		{ID: "core-rack-0", GroupID: "group-a", Alerts: []string{"rack-leak"}},
		{ID: "core-rack-1", GroupID: "group-a"},
		{ID: "core-rack-2"},
	}))
	for _, r := range b.racks[:2] {
		for _, c := range r.Components {
			if c.Type == inventory.ComponentTypeNVSwitch {
				s := cluster.String()
				require.NoError(t, b.sim.Update(reconcile.HostMAC(c), nicosim.DevicePatch{NVLinkDomain: &s}))
			}
		}
	}
	run := b.run(t)
	require.True(t, part(t, run, reconcile.PartTopology).OK, part(t, run, reconcile.PartTopology).Error)
	require.EqualValues(t, 3, part(t, run, reconcile.PartTopology).Changed) // one domain, two racks
	r0, err := b.inv.Rack(b.ctx, b.pool, b.racks[0].ID, false)
	require.NoError(t, err)
	r1, err := b.inv.Rack(b.ctx, b.pool, b.racks[1].ID, false)
	require.NoError(t, err)
	r2, err := b.inv.Rack(b.ctx, b.pool, b.racks[2].ID, false)
	require.NoError(t, err)
	require.NotNil(t, r0.NVLDomainID)
	require.Equal(t, r0.NVLDomainID, r1.NVLDomainID)
	require.Nil(t, r2.NVLDomainID, "an ungrouped rack is left alone")
	// The wire reads carry what the sync wrote: the rack's health, its
	// domain's external ID, and the NVLink-domain read model.
	w0 := inventory.RackToProto(r0)
	require.Equal(t, "rack-leak", w0.GetHealth().GetAlerts()[0].GetId())
	require.Equal(t, []string{"group-a"}, w0.GetNvlDomainExternalIds())
	require.Empty(t, inventory.RackToProto(r2).GetNvlDomainExternalIds())
	dom, err := b.inv.NVLinkDomain(b.ctx, b.pool, "group-a", true)
	require.NoError(t, err)
	require.Len(t, dom.Racks, 2)
	require.Equal(t, cluster, *dom.NMXCClusterID)
	require.Empty(t, dom.Name, "a domain the sync made has no name")
	racks, err := b.inv.SyncRacks(b.ctx, b.pool)
	require.NoError(t, err)
	for _, r := range racks {
		switch r.ID {
		case b.racks[0].ID:
			require.Contains(t, string(r.Health), "rack-leak")
			require.Equal(t, "group-a", r.GroupID)
		case b.racks[2].ID:
			require.NotContains(t, string(r.Health), "rack-leak")
		}
	}
	again := b.run(t)
	require.Zero(t, again.Changed(), "%+v", again.Parts)

	// A failed rack read keeps the topology and the health.
	_, err = b.sim.Faults().Add(sim.Fault{Kind: sim.FaultError, Method: "FindRacksByIds", Code: "internal", Times: 1})
	require.NoError(t, err)
	run = b.run(t)
	require.False(t, part(t, run, reconcile.PartTopology).OK)
	require.False(t, part(t, run, reconcile.PartRackHealth).OK)
	r0, err = b.inv.Rack(b.ctx, b.pool, b.racks[0].ID, false)
	require.NoError(t, err)
	require.NotNil(t, r0.NVLDomainID)
}

func TestValidateReadsPersistedDrift(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 1)
	b.run(t)
	ct := b.component(t, "demo-0000-ct-02")
	slot := 30
	require.NoError(t, b.sim.Update(ct.ExternalID, nicosim.DevicePatch{SlotID: &slot}))
	sw := b.component(t, "demo-0000-sw-01")
	require.True(t, b.sim.Remove(sw.ExternalID))
	require.NoError(t, b.sim.Seed([]nicosim.Device{{Kind: nicosim.KindCompute, ID: "stray", BMCMAC: "0a:00:00:00:00:02", RackID: "core-rack-0"}}))

	svc := reconcile.NewService(b.inv, nil).WithDrift(b.syncer)
	// Before the next sync, the stored drift says nothing changed.
	rep, err := svc.Validate(b.ctx, b.pool, reconcile.Query{})
	require.NoError(t, err)
	require.Zero(t, rep.Total)
	require.Equal(t, 35, rep.Match)
	require.NotNil(t, rep.CheckedAt)

	run := b.run(t)
	rep, err = svc.Validate(b.ctx, b.pool, reconcile.Query{})
	require.NoError(t, err)
	require.Equal(t, run.StartedAt, rep.CheckedAt.UTC())
	require.Equal(t, 3, rep.Total)
	require.Equal(t, 1, rep.Missing)
	require.Equal(t, 1, rep.Unexpected)
	require.Equal(t, 1, rep.Mismatch)
	require.Equal(t, 33, rep.Match)
	for _, d := range rep.Diffs {
		switch d.Type {
		case 1:
			require.Equal(t, sw.ID.String(), d.ID)
		case 2:
			require.Equal(t, "stray", d.ComponentID)
		case 3:
			require.Equal(t, ct.ID.String(), d.ID)
			require.Equal(t, "position.slot_id", d.Fields[0].Field)
			require.Equal(t, "30", d.Fields[0].Actual)
		}
	}

	// Scoped to switches: only the missing switch.
	rep, err = svc.Validate(b.ctx, b.pool, reconcile.Query{Selection: inventory.ComponentQuery{Types: []inventory.ComponentType{inventory.ComponentTypeNVSwitch}}})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Total)
	require.Equal(t, 1, rep.Missing)

	// Live needs the component managers, which this service lacks.
	_, err = svc.Validate(b.ctx, b.pool, reconcile.Query{Live: true})
	require.ErrorIs(t, err, reconcile.ErrNotConfigured)
}
