package reconcile_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/reconcile"
	"github.com/nicoflow/flow/sim"
	"github.com/nicoflow/flow/sim/nicosim"
)

// installed returns what Flow holds of the named component's installed
// firmware; it fails the test when Core never reported it.
func (b *syncBundle) installed(t *testing.T, name string) inventory.InstalledFirmware {
	t.Helper()
	fw, ok, err := b.inv.InstalledFirmware(b.ctx, b.pool, b.component(t, name).ID)
	require.NoError(t, err)
	require.True(t, ok, "%s: no installed firmware recorded", name)
	return fw
}

// firmwareRows returns every component_firmware row's transaction ID
// (xmin) by component: a row written again gets a new one.
func (b *syncBundle) firmwareRows(t *testing.T) map[uuid.UUID]string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT component_id, xmin::text FROM component_firmware`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[uuid.UUID]string{}
	for rows.Next() {
		var id uuid.UUID
		var xmin string
		require.NoError(t, rows.Scan(&id, &xmin))
		out[id] = xmin
	}
	require.NoError(t, rows.Err())
	return out
}

// readTimes returns the last successful versions read per component type
// (component_firmware_read).
func (b *syncBundle) readTimes(t *testing.T) map[string]time.Time {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT component_type, read_at FROM component_firmware_read`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var typ string
		var at time.Time
		require.NoError(t, rows.Scan(&typ, &at))
		out[typ] = at
	}
	require.NoError(t, rows.Err())
	return out
}

// realistic gives the named demo component in Core a GB200 device's every
// sub-component (a tray's two NICs), its BMC (PMC) version unchanged.
func (b *syncBundle) realistic(t *testing.T, name string, kind string) {
	t.Helper()
	c := b.component(t, name)
	fw := map[string]string{}
	for _, sc := range nicosim.SubComponents(kind) {
		fw[sc] = "1.0-" + sc
	}
	delete(fw, "bmc")
	delete(fw, "pmc")
	require.NoError(t, b.sim.Update(reconcile.HostMAC(c), nicosim.DevicePatch{Firmware: fw, Instances: nicosim.DefaultInstances(kind)}))
}

func TestSyncInstalledVersions(t *testing.T) {
	t.Parallel()
	// Page 4 reads Core's 18 compute trays, 9 switches and 8 shelves in
	// pages of 4 (the default reads each type as one page).
	for _, page := range []int{0, 4} {
		t.Run(fmt.Sprintf("page=%d", page), func(t *testing.T) {
			t.Parallel()
			testSyncInstalledVersions(t, setupSyncPaged(t, 1, page))
		})
	}
}

func testSyncInstalledVersions(t *testing.T, b *syncBundle) {
	b.realistic(t, "demo-0000-ct-00", nicosim.KindCompute)
	b.realistic(t, "demo-0000-sw-00", nicosim.KindNVSwitch)
	b.realistic(t, "demo-0000-ps-00", nicosim.KindPowerShelf)
	first := b.run(t)

	// Every device's versions, per sub-component, seen at the read.
	ct := b.installed(t, "demo-0000-ct-00")
	require.Equal(t, inventory.SubVersions{
		"bmc": {"FW 1.2.00GA"}, "bios": {"1.0-bios"}, "cec": {"1.0-cec"}, "nic": {"1.0-nic", "1.0-nic"},
		"cpld_mb": {"1.0-cpld_mb"}, "cpld_pdb": {"1.0-cpld_pdb"}, "gpu": {"1.0-gpu"},
	}, ct.Versions)
	require.True(t, ct.Reported)
	require.True(t, first.StartedAt.Equal(ct.SeenAt), "%v %v", first.StartedAt, ct.SeenAt)
	require.Equal(t, inventory.SubVersions{"bmc": {"NVOS 25.02"}, "cpld": {"1.0-cpld"}, "bios": {"1.0-bios"}, "nvos": {"1.0-nvos"}},
		b.installed(t, "demo-0000-sw-00").Versions)
	require.Equal(t, inventory.SubVersions{"pmc": {"PS 3.1.0"}, "psu": {"1.0-psu"}}, b.installed(t, "demo-0000-ps-00").Versions)
	require.Equal(t, inventory.SubVersions{"bmc": {"FW 1.2.00GA"}}, b.installed(t, "demo-0000-ct-17").Versions)
	rows := b.firmwareRows(t)
	require.Len(t, rows, 35, "one row a device")

	// A cycle with nothing new writes no component_firmware row, only
	// each type's read time; a reported device was seen at that read.
	again := b.run(t)
	for _, name := range []string{reconcile.PartCompute, reconcile.PartNVSwitch, reconcile.PartPowerShelf} {
		require.Zero(t, part(t, again, name).Changed, name)
	}
	require.Equal(t, rows, b.firmwareRows(t), "no row written")
	reads := b.readTimes(t)
	require.Len(t, reads, 3)
	for typ, at := range reads {
		require.True(t, again.StartedAt.Equal(at), "%s read at %v", typ, at)
	}
	require.True(t, again.StartedAt.Equal(b.installed(t, "demo-0000-ct-00").SeenAt))

	// Devices Core stops answering for (an unreported tray, a switch whose
	// item fails, a shelf gone from Core) are unreported, last seen at
	// the previous read, their versions kept.
	yes := true
	require.NoError(t, b.sim.Update(b.component(t, "demo-0000-ct-01").ExternalID, nicosim.DevicePatch{Unreported: &yes}))
	_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultItem, Method: "GetComponentInventory", Device: b.component(t, "demo-0000-sw-00").ExternalID, Status: "unavailable"})
	require.NoError(t, err)
	require.True(t, b.sim.Remove(b.component(t, "demo-0000-ps-00").ExternalID))
	third := b.run(t)
	require.EqualValues(t, 1, part(t, third, reconcile.PartCompute).Changed)
	require.EqualValues(t, 1, part(t, third, reconcile.PartNVSwitch).Changed)
	require.EqualValues(t, 1, part(t, third, reconcile.PartPowerShelf).Changed)
	for _, name := range []string{"demo-0000-ct-01", "demo-0000-sw-00", "demo-0000-ps-00"} {
		fw := b.installed(t, name)
		require.False(t, fw.Reported, name)
		require.True(t, again.StartedAt.Equal(fw.SeenAt), "%s seen at %v, want the previous read %v", name, fw.SeenAt, again.StartedAt)
		require.NotEmpty(t, fw.Versions, name)
	}
	require.Equal(t, inventory.SubVersions{"nvos": {"1.0-nvos"}, "bmc": {"NVOS 25.02"}, "cpld": {"1.0-cpld"}, "bios": {"1.0-bios"}},
		b.installed(t, "demo-0000-sw-00").Versions)
	// Unreported stays unreported without a write.
	rows = b.firmwareRows(t)
	b.run(t)
	require.Equal(t, rows, b.firmwareRows(t))
}

// TestSyncFailedVersionsRead: a failed read of the installed versions is
// a warning of its part, which still succeeds; no component_firmware row
// is written and the type's read time does not move, so nothing looks
// unreported for it.
func TestSyncFailedVersionsRead(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 1)
	b.realistic(t, "demo-0000-ct-00", nicosim.KindCompute)
	first := b.run(t)
	rows, reads := b.firmwareRows(t), b.readTimes(t)

	// Core now reports other versions, but its version reads fail: the
	// trays' list, and the switches' exploration reports.
	for _, name := range []string{"demo-0000-ct-00", "demo-0000-sw-03"} {
		require.NoError(t, b.sim.Update(b.component(t, name).ExternalID, nicosim.DevicePatch{Firmware: map[string]string{"bios": "9.9"}}))
	}
	for _, method := range []string{"ListComponentFirmwareVersions", "GetComponentInventory"} {
		_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultError, Method: method, Code: "unavailable", Message: "versions down"})
		require.NoError(t, err)
	}
	run := b.run(t)
	for _, name := range []string{reconcile.PartCompute, reconcile.PartNVSwitch, reconcile.PartPowerShelf} {
		p := part(t, run, name)
		require.True(t, p.OK, "%s: %s", name, p.Error)
		require.Zero(t, p.Changed, name)
		require.NotEmpty(t, p.Warnings, name)
	}
	require.Contains(t, strings.Join(part(t, run, reconcile.PartCompute).Warnings, "\n"), "ListComponentFirmwareVersions")
	require.Equal(t, rows, b.firmwareRows(t), "no row written")
	require.Equal(t, reads, b.readTimes(t), "the read times stay")
	ct := b.installed(t, "demo-0000-ct-00")
	require.True(t, ct.Reported)
	require.True(t, first.StartedAt.Equal(ct.SeenAt))
	require.Equal(t, []string{"1.0-bios"}, ct.Versions["bios"])

	// Once the reads answer again, the new versions land.
	b.sim.Faults().Clear()
	b.run(t)
	require.Equal(t, []string{"9.9"}, b.installed(t, "demo-0000-ct-00").Versions["bios"])
	require.Equal(t, []string{"9.9"}, b.installed(t, "demo-0000-sw-03").Versions["bios"])
}

// TestSyncInstalledVersionsWrittenElsewhere: a cycle that reads what the
// sync last recorded writes only the read time, unless component_firmware
// was written since by anyone else (its generation moved): then the rows
// are compared again and a row changed behind the sync's back is put
// right.
func TestSyncInstalledVersionsWrittenElsewhere(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 1)
	b.realistic(t, "demo-0000-ct-00", nicosim.KindCompute)
	b.run(t)
	rows := b.firmwareRows(t)
	b.run(t)
	require.Equal(t, rows, b.firmwareRows(t))

	ct := b.component(t, "demo-0000-ct-00").ID
	_, err := b.pool.Exec(b.ctx, `UPDATE component_firmware SET versions = '{"bios": ["0.1"]}' WHERE component_id = $1`, ct)
	require.NoError(t, err)
	run := b.run(t)
	require.EqualValues(t, 1, part(t, run, reconcile.PartCompute).Changed)
	require.Equal(t, []string{"1.0-bios"}, b.installed(t, "demo-0000-ct-00").Versions["bios"])
	require.Zero(t, part(t, b.run(t), reconcile.PartCompute).Changed)

	// Another process's sync (its own memory) agrees.
	other := reconcile.NewSyncer(reconcile.SyncConfig{Pool: b.pool, Inv: b.inv, Core: b.nc, Expected: true})
	again, err := other.Run(b.ctx, reconcile.TriggerManual)
	require.NoError(t, err)
	require.Zero(t, again.Changed())
}

// TestSyncFirmwareReadInterval: with FirmwareReadInterval set, a
// scheduled cycle reads a type's installed versions only once its last
// read is that old (Core's versions call is not made at all in between,
// and nothing of the versions is written, read times included); a manual
// cycle always reads them, and a type never read is read at once.
func TestSyncFirmwareReadInterval(t *testing.T) {
	t.Parallel()
	b := setupSync(t, 1)
	b.realistic(t, "demo-0000-ct-00", nicosim.KindCompute)
	syncer := reconcile.NewSyncer(reconcile.SyncConfig{Pool: b.pool, Inv: b.inv, Core: b.nc, Expected: true, FirmwareReadInterval: time.Hour})
	scheduled := func() reconcile.SyncRun {
		t.Helper()
		run, err := syncer.Run(b.ctx, reconcile.TriggerSchedule)
		require.NoError(t, err)
		for _, p := range run.Parts {
			require.True(t, p.OK, "%s: %s", p.Name, p.Error)
			require.Empty(t, p.Warnings, p.Name)
		}
		return run
	}
	versionCalls := func() int { return len(b.sim.Journal().Calls("ListComponentFirmwareVersions")) }

	// Never read: the first scheduled cycle reads every type.
	first := scheduled()
	reads := b.readTimes(t)
	require.Len(t, reads, 3)
	for typ, at := range reads {
		require.True(t, first.StartedAt.Equal(at), "%s read at %v", typ, at)
	}
	require.Equal(t, []string{"1.0-bios"}, b.installed(t, "demo-0000-ct-00").Versions["bios"])

	// Within the hour, scheduled cycles leave the versions alone: Core's
	// new versions are not read, no row or read time moves.
	for _, name := range []string{"demo-0000-ct-00", "demo-0000-sw-03", "demo-0000-ps-01"} {
		require.NoError(t, b.sim.Update(b.component(t, name).ExternalID, nicosim.DevicePatch{Firmware: map[string]string{"bios": "9.9", "psu": "9.9"}}))
	}
	calls, rows := versionCalls(), b.firmwareRows(t)
	run := scheduled()
	require.Zero(t, run.Changed())
	require.Equal(t, calls, versionCalls(), "no versions call")
	require.Equal(t, rows, b.firmwareRows(t), "no row written")
	require.Equal(t, reads, b.readTimes(t), "the read times stay")
	ct := b.installed(t, "demo-0000-ct-00")
	require.Equal(t, []string{"1.0-bios"}, ct.Versions["bios"])
	require.True(t, first.StartedAt.Equal(ct.SeenAt), "seen at the last read")

	// A manual cycle reads them.
	manual, err := syncer.Run(b.ctx, reconcile.TriggerManual)
	require.NoError(t, err)
	require.Greater(t, versionCalls(), calls)
	require.Equal(t, []string{"9.9"}, b.installed(t, "demo-0000-ct-00").Versions["bios"])
	require.Equal(t, []string{"9.9"}, b.installed(t, "demo-0000-sw-03").Versions["bios"])
	require.Equal(t, []string{"9.9"}, b.installed(t, "demo-0000-ps-01").Versions["psu"])
	for typ, at := range b.readTimes(t) {
		require.True(t, manual.StartedAt.Equal(at), "%s read at %v", typ, at)
	}

	// Once a type's last read is an hour old, the next scheduled cycle
	// reads that type (and only it).
	require.NoError(t, b.sim.Update(b.component(t, "demo-0000-ct-00").ExternalID, nicosim.DevicePatch{Firmware: map[string]string{"bios": "9.10"}}))
	require.NoError(t, b.sim.Update(b.component(t, "demo-0000-sw-03").ExternalID, nicosim.DevicePatch{Firmware: map[string]string{"bios": "9.10"}}))
	_, err = b.pool.Exec(b.ctx, `UPDATE component_firmware_read SET read_at = read_at - interval '61 minutes' WHERE component_type = 'Compute'`)
	require.NoError(t, err)
	late := scheduled()
	require.Equal(t, []string{"9.10"}, b.installed(t, "demo-0000-ct-00").Versions["bios"])
	require.Equal(t, []string{"9.9"}, b.installed(t, "demo-0000-sw-03").Versions["bios"], "switches read an hour ago at most")
	reads = b.readTimes(t)
	require.True(t, late.StartedAt.Equal(reads["Compute"]))
	require.True(t, manual.StartedAt.Equal(reads["NVSwitch"]))

	// A firmware task ended (MarkFirmwareReadDue, in its run's end): the
	// next scheduled cycle reads the types at once, once.
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		return b.inv.MarkFirmwareReadDue(b.ctx, tx, []inventory.ComponentType{inventory.ComponentTypeNVSwitch})
	}))
	marked := scheduled()
	require.Equal(t, []string{"9.10"}, b.installed(t, "demo-0000-sw-03").Versions["bios"], "read within the hour: a task made it due")
	require.True(t, marked.StartedAt.Equal(b.readTimes(t)["NVSwitch"]))
	calls = versionCalls()
	scheduled()
	require.Equal(t, calls, versionCalls(), "due once: the read cleared it")
}
