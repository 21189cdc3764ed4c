package nico_test

// The golden wire tests: our requests, encoded by the client, are read with
// upstream's descriptors (proto/contract), and upstream-shaped requests are
// sent as bytes to our simulator. Either way the meaning must survive: the
// right devices, the right action, the right version. The descriptor
// comparison (proto/contract) proves the shapes agree; these prove the
// client fills them the way upstream's server reads them.

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/proto/contract"
	"github.com/nicoflow/flow/proto/contract/contracttest"
)

type wireBundle struct {
	*testBundle
	rec *contracttest.Recorder
}

func wireSetup(t *testing.T) *wireBundle {
	t.Helper()
	rec := &contracttest.Recorder{}
	b := setupWith(t, func(h http.Handler) http.Handler { rec.Next = h; return rec })
	return &wireBundle{testBundle: b, rec: rec}
}

// sent decodes the last request our client sent to method with upstream's
// request descriptor.
func (b *wireBundle) sent(t *testing.T, method protoreflect.Name) protoreflect.Message {
	t.Helper()
	md := contracttest.Method(t, contract.CoreService, method)
	return contracttest.Decode(t, md.Input(), b.rec.Last(t, "/forge.Forge/"+string(method)))
}

// want is one expected value at a path of an upstream message.
type want map[string]any

func check(t *testing.T, m protoreflect.Message, w want) {
	t.Helper()
	for path, v := range w {
		require.Equal(t, v, contracttest.Get(t, m, path), "upstream reads %s differently", path)
	}
}

// Upstream's enum numbers, as the facts file gives them.
const (
	trayBMC, trayBIOS       = int32(1), int32(2)
	switchNVOS              = int32(4)
	shelfPMC                = int32(1)
	powerOn, powerForceOff  = int32(1), int32(3)
	powerGracefulRestart    = int32(4)
	statusSuccess, notFound = int32(0), int32(3)
	ingestionMachineCreated = int32(3)
	fwQueued                = int32(1)
)

// TestWireClientRequests encodes every request the client builds and reads
// it back as upstream's server would.
func TestWireClientRequests(t *testing.T) {
	t.Parallel()
	b := wireSetup(t)
	ctx := context.Background()
	fw := nico.FirmwareRequest{TargetVersion: "9.9", AccessToken: "tok", Force: true, BypassReadiness: true}
	ids := func(k nico.Kind, ids ...string) nico.Target { return nico.Target{Kind: k, IDs: ids} }
	macs := func(k nico.Kind, m ...string) nico.Target { return nico.Target{Kind: k, MACs: m} }
	withComponents := func(fr nico.FirmwareRequest, cs ...string) nico.FirmwareRequest { fr.Components = cs; return fr }

	for _, tt := range []struct {
		name   string
		call   func() error
		method protoreflect.Name
		want   want
		unset  []string
	}{
		{
			name: "FirmwareComputeByID",
			call: func() error {
				_, err := b.client.UpdateFirmware(ctx, ids(nico.KindCompute, "m1", "m2"), withComponents(fw, "bmc", "bios"))
				return err
			},
			method: "UpdateComponentFirmware",
			want: want{
				"compute_trays.machine_ids.machine_ids": 2, "compute_trays.machine_ids.machine_ids.0.id": "m1", "compute_trays.machine_ids.machine_ids.1.id": "m2",
				"compute_trays.components": 2, "compute_trays.components.0": trayBMC, "compute_trays.components.1": trayBIOS,
				"target_version": "9.9", "access_token": "tok", "force_update": true, "bypass_state_controller": true,
			},
			unset: []string{"compute_trays.bmc_macs", "switches", "power_shelves", "racks"},
		},
		{
			name: "FirmwareComputeByMAC",
			call: func() error {
				_, err := b.client.UpdateFirmware(ctx, macs(nico.KindCompute, "aa:00:00:00:00:01"), nico.FirmwareRequest{TargetVersion: "9.9"})
				return err
			},
			method: "UpdateComponentFirmware",
			want: want{
				"compute_trays.bmc_macs.mac_addresses": 1, "compute_trays.bmc_macs.mac_addresses.0": "aa:00:00:00:00:01",
				"compute_trays.components": 0, "target_version": "9.9", "force_update": false,
			},
			unset: []string{"compute_trays.machine_ids", "access_token"},
		},
		{
			name: "FirmwareSwitchByID",
			call: func() error {
				_, err := b.client.UpdateFirmware(ctx, ids(nico.KindSwitch, "s1"), withComponents(fw, "nvos"))
				return err
			},
			method: "UpdateComponentFirmware",
			want:   want{"switches.switch_ids.ids": 1, "switches.switch_ids.ids.0.id": "s1", "switches.components.0": switchNVOS},
			unset:  []string{"switches.bmc_macs", "compute_trays"},
		},
		{
			name: "FirmwareSwitchByMAC",
			call: func() error {
				_, err := b.client.UpdateFirmware(ctx, macs(nico.KindSwitch, "aa:00:00:00:01:01"), fw)
				return err
			},
			method: "UpdateComponentFirmware",
			want:   want{"switches.bmc_macs.mac_addresses.0": "aa:00:00:00:01:01"},
			unset:  []string{"switches.switch_ids"},
		},
		{
			name: "FirmwareShelfByID",
			call: func() error {
				_, err := b.client.UpdateFirmware(ctx, ids(nico.KindPowerShelf, "p1"), withComponents(fw, "pmc"))
				return err
			},
			method: "UpdateComponentFirmware",
			want:   want{"power_shelves.power_shelf_ids.ids.0.id": "p1", "power_shelves.components.0": shelfPMC},
			unset:  []string{"power_shelves.pmc_macs"},
		},
		{
			name: "FirmwareShelfByMAC",
			call: func() error {
				_, err := b.client.UpdateFirmware(ctx, macs(nico.KindPowerShelf, "aa:00:00:00:02:01"), fw)
				return err
			},
			method: "UpdateComponentFirmware",
			want:   want{"power_shelves.pmc_macs.mac_addresses.0": "aa:00:00:00:02:01"},
			unset:  []string{"power_shelves.power_shelf_ids"},
		},
		{
			name: "FirmwareRack",
			call: func() error {
				_, err := b.client.UpdateFirmware(ctx, ids(nico.KindRack, "r1"), nico.FirmwareRequest{TargetVersion: "9.9"})
				return err
			},
			method: "UpdateComponentFirmware",
			want:   want{"racks.rack_ids.rack_ids": 1, "racks.rack_ids.rack_ids.0.id": "r1", "target_version": "9.9"},
			unset:  []string{"compute_trays", "switches", "power_shelves"},
		},
		{
			name: "PowerComputeByID",
			call: func() error {
				_, err := b.client.PowerControl(ctx, ids(nico.KindCompute, "m1"), nico.PowerForceOff, true)
				return err
			},
			method: "ComponentPowerControl",
			want:   want{"machine_ids.machine_ids.0.id": "m1", "action": powerForceOff, "bypass_state_controller": true},
		},
		{
			name: "PowerSwitchByID",
			call: func() error {
				_, err := b.client.PowerControl(ctx, ids(nico.KindSwitch, "s1"), nico.PowerOn, false)
				return err
			},
			method: "ComponentPowerControl",
			want:   want{"switch_ids.ids.0.id": "s1", "action": powerOn, "bypass_state_controller": false},
		},
		{
			name: "PowerShelfByID",
			call: func() error {
				_, err := b.client.PowerControl(ctx, ids(nico.KindPowerShelf, "p1"), nico.PowerGracefulRestart, false)
				return err
			},
			method: "ComponentPowerControl",
			want:   want{"power_shelf_ids.ids.0.id": "p1", "action": powerGracefulRestart},
		},
		{
			name: "PowerComputeByMAC",
			call: func() error {
				_, err := b.client.PowerControl(ctx, macs(nico.KindCompute, "aa:00:00:00:00:02"), nico.PowerOn, false)
				return err
			},
			method: "ComponentPowerControl",
			want:   want{"compute_bmc_macs.mac_addresses.0": "aa:00:00:00:00:02", "action": powerOn},
			unset:  []string{"machine_ids"},
		},
		{
			name: "PowerSwitchByMAC",
			call: func() error {
				_, err := b.client.PowerControl(ctx, macs(nico.KindSwitch, "aa:00:00:00:01:01"), nico.PowerOn, false)
				return err
			},
			method: "ComponentPowerControl",
			want:   want{"switch_bmc_macs.mac_addresses.0": "aa:00:00:00:01:01"},
		},
		{
			name: "PowerShelfByMAC",
			call: func() error {
				_, err := b.client.PowerControl(ctx, macs(nico.KindPowerShelf, "aa:00:00:00:02:01"), nico.PowerOn, false)
				return err
			},
			method: "ComponentPowerControl",
			want:   want{"power_shelf_pmc_macs.mac_addresses.0": "aa:00:00:00:02:01"},
		},
		{
			name:   "InventoryByID",
			call:   func() error { _, err := b.client.Inventory(ctx, ids(nico.KindCompute, "m1")); return err },
			method: "GetComponentInventory",
			want:   want{"machine_ids.machine_ids.0.id": "m1"},
		},
		{
			name: "InventoryShelfByMAC",
			call: func() error {
				_, err := b.client.Inventory(ctx, macs(nico.KindPowerShelf, "aa:00:00:00:02:01"))
				return err
			},
			method: "GetComponentInventory",
			want:   want{"power_shelf_pmc_macs.mac_addresses.0": "aa:00:00:00:02:01"},
		},
		{
			name: "InventorySwitchByMAC",
			call: func() error {
				_, err := b.client.Inventory(ctx, macs(nico.KindSwitch, "aa:00:00:00:01:01"))
				return err
			},
			method: "GetComponentInventory",
			want:   want{"switch_bmc_macs.mac_addresses.0": "aa:00:00:00:01:01"},
		},
		{
			name:   "FirmwareStatusByID",
			call:   func() error { _, err := b.client.FirmwareStatus(ctx, ids(nico.KindSwitch, "s1")); return err },
			method: "GetComponentFirmwareStatus",
			want:   want{"switch_ids.ids.0.id": "s1"},
		},
		{
			name: "FirmwareStatusByMAC",
			call: func() error {
				_, err := b.client.FirmwareStatus(ctx, macs(nico.KindCompute, "aa:00:00:00:00:01"))
				return err
			},
			method: "GetComponentFirmwareStatus",
			want:   want{"compute_bmc_macs.mac_addresses.0": "aa:00:00:00:00:01"},
		},
		{
			name: "FirmwareStatusShelfByMAC",
			call: func() error {
				_, err := b.client.FirmwareStatus(ctx, macs(nico.KindPowerShelf, "aa:00:00:00:02:01"))
				return err
			},
			method: "GetComponentFirmwareStatus",
			want:   want{"power_shelf_pmc_macs.mac_addresses.0": "aa:00:00:00:02:01"},
		},
		{
			name:   "FirmwareStatusRack",
			call:   func() error { _, err := b.client.FirmwareStatus(ctx, ids(nico.KindRack, "r1")); return err },
			method: "GetComponentFirmwareStatus",
			want:   want{"rack_ids.rack_ids.0.id": "r1"},
		},
		{
			name:   "VersionsByID",
			call:   func() error { _, err := b.client.FirmwareVersions(ctx, ids(nico.KindPowerShelf, "p1")); return err },
			method: "ListComponentFirmwareVersions",
			want:   want{"power_shelf_ids.ids.0.id": "p1"},
		},
		{
			name: "VersionsByMAC",
			call: func() error {
				_, err := b.client.FirmwareVersions(ctx, macs(nico.KindSwitch, "aa:00:00:00:01:01"))
				return err
			},
			method: "ListComponentFirmwareVersions",
			want:   want{"switch_bmc_macs.mac_addresses.0": "aa:00:00:00:01:01"},
		},
		{
			name:   "VersionsRack",
			call:   func() error { _, err := b.client.FirmwareVersions(ctx, ids(nico.KindRack, "r1")); return err },
			method: "ListComponentFirmwareVersions",
			want:   want{"rack_ids.rack_ids.0.id": "r1"},
		},
		{
			name: "ExpectMachine",
			call: func() error {
				return b.client.AddExpectedMachine(ctx, nico.ExpectedMachine{BMCMAC: "aa:00:00:00:09:01", BMCUsername: "root", BMCPassword: "pw", ChassisSerial: "SN-X", RackID: "r9", BMCIP: "10.9.0.1", Labels: map[string]string{"model": "gb200"}})
			},
			method: "AddExpectedMachine",
			want: want{
				"bmc_mac_address": "aa:00:00:00:09:01", "bmc_username": "root", "bmc_password": "pw", "chassis_serial_number": "SN-X",
				"rack_id.id": "r9", "bmc_ip_address": "10.9.0.1", "metadata.labels": 1,
			},
			unset: []string{"default_pause_ingestion_and_poweron"},
		},
		{
			name: "ExpectSwitch",
			call: func() error {
				return b.client.AddExpectedSwitch(ctx, nico.ExpectedSwitch{BMCMAC: "aa:00:00:00:09:02", Serial: "SN-Y", RackID: "r9", BMCIP: "10.9.0.2", NVOSUsername: "admin", NVOSPassword: "nv"})
			},
			method: "AddExpectedSwitch",
			want:   want{"bmc_mac_address": "aa:00:00:00:09:02", "switch_serial_number": "SN-Y", "rack_id.id": "r9", "bmc_ip_address": "10.9.0.2", "nvos_username": "admin", "nvos_password": "nv"},
		},
		{
			name: "ExpectSwitchNoNVOS",
			call: func() error {
				return b.client.AddExpectedSwitch(ctx, nico.ExpectedSwitch{BMCMAC: "aa:00:00:00:09:03", Serial: "SN-Z"})
			},
			method: "AddExpectedSwitch",
			want:   want{"bmc_mac_address": "aa:00:00:00:09:03", "bmc_ip_address": ""},
			unset:  []string{"nvos_username", "nvos_password", "rack_id", "bmc_ip_address"},
		},
		{
			name: "ExpectShelf",
			call: func() error {
				return b.client.AddExpectedPowerShelf(ctx, nico.ExpectedPowerShelf{BMCMAC: "aa:00:00:00:09:04", Serial: "SN-W", RackID: "r9", BMCIP: "10.9.0.4"})
			},
			method: "AddExpectedPowerShelf",
			want:   want{"bmc_mac_address": "aa:00:00:00:09:04", "shelf_serial_number": "SN-W", "rack_id.id": "r9", "bmc_ip_address": "10.9.0.4"},
		},
		{
			name:   "AllowIngestion",
			call:   func() error { return b.client.AllowIngestion(ctx, "10.0.0.1") },
			method: "AllowIngestionAndPowerOn",
			want:   want{"ip_address": "10.0.0.1"},
			unset:  []string{"mac_address"},
		},
		{
			name:   "IngestionState",
			call:   func() error { _, err := b.client.IngestionState(ctx, "10.0.0.2"); return err },
			method: "DetermineMachineIngestionState",
			want:   want{"ip_address": "10.0.0.2"},
		},
		{
			name:   "DecommissionCompute",
			call:   func() error { return b.client.Decommission(ctx, nico.KindCompute, "m2") },
			method: "DecommissionManagedHost",
			want:   want{"machine_id.id": "m2"},
		},
		{
			name:   "DecommissionSwitch",
			call:   func() error { return b.client.Decommission(ctx, nico.KindSwitch, "s1") },
			method: "DecommissionSwitch",
			want:   want{"switch_id.id": "s1"},
		},
		{
			name:   "DecommissionShelf",
			call:   func() error { return b.client.Decommission(ctx, nico.KindPowerShelf, "p1") },
			method: "DecommissionPowerShelf",
			want:   want{"power_shelf_id.id": "p1"},
		},
		{
			name:   "Version",
			call:   func() error { _, err := b.client.Version(ctx); return err },
			method: "Version",
			want:   want{"display_config": true},
		},
		{
			name:   "FindMachinesByIds",
			call:   func() error { _, err := b.client.Machines(ctx, []string{"m1", "m2"}); return err },
			method: "FindMachinesByIds",
			want:   want{"machine_ids": 2, "machine_ids.0.id": "m1"},
		},
		{
			name:   "FindSwitchesByIds",
			call:   func() error { _, err := b.client.Switches(ctx, []string{"s1"}); return err },
			method: "FindSwitchesByIds",
			want:   want{"switch_ids.0.id": "s1"},
		},
		{
			name:   "FindPowerShelvesByIds",
			call:   func() error { _, err := b.client.PowerShelves(ctx, []string{"p1"}); return err },
			method: "FindPowerShelvesByIds",
			want:   want{"power_shelf_ids.0.id": "p1"},
		},
		{
			name:   "FindRacksByIds",
			call:   func() error { _, err := b.client.Racks(ctx, []string{"r1"}); return err },
			method: "FindRacksByIds",
			want:   want{"rack_ids.0.id": "r1"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Item failures (a device in the wrong state) do not matter
			// here; a failed call would, and so would a missing record.
			if err := tt.call(); err != nil {
				var e *nico.Error
				require.ErrorAs(t, err, &e)
				require.NotEmpty(t, e.Device, "the call itself failed: %v", err)
			}
			m := b.sent(t, tt.method)
			check(t, m, tt.want)
			for _, p := range tt.unset {
				require.False(t, contracttest.Has(t, m, p), "%s is set; upstream would read it", p)
			}
		})
	}
}

// TestWireUpstreamRequests sends requests built from upstream's own
// descriptors, as bytes, to the simulator, and checks the simulator acts on
// the devices and action they name and answers in upstream's shape.
func TestWireUpstreamRequests(t *testing.T) {
	t.Parallel()
	b := wireSetup(t)
	ctx := context.Background()
	hc := &http.Client{Timeout: 5 * time.Second}
	method := func(name protoreflect.Name) protoreflect.MethodDescriptor {
		return contracttest.Method(t, contract.CoreService, name)
	}
	call := func(name protoreflect.Name, text string) protoreflect.Message {
		t.Helper()
		return contracttest.Call(t, hc, b.url, method(name), text)
	}
	jobs := func(key string) []string {
		st, ok := b.sim.State(key)
		require.True(t, ok, key)
		return st.Jobs
	}
	versionOf := func(kind nico.Kind, id string) string {
		st, err := b.client.FirmwareStatus(ctx, nico.Target{Kind: kind, IDs: []string{id}})
		require.NoError(t, err)
		require.NotEmpty(t, st, id)
		return st[0].TargetVersion
	}

	t.Run("FirmwareComputeByID", func(t *testing.T) {
		res := call("UpdateComponentFirmware", `compute_trays { machine_ids { machine_ids { id: "m1" } } components: COMPUTE_TRAY_COMPONENT_BIOS } target_version: "5.0"`)
		check(t, res, want{"results": 1, "results.0.component_id": "m1", "results.0.status": statusSuccess})
		require.Equal(t, []string{"bios=queued"}, jobs("m1"))
		require.Equal(t, "5.0", versionOf(nico.KindCompute, "m1"))
	})
	t.Run("FirmwareComputeByMAC", func(t *testing.T) {
		res := call("UpdateComponentFirmware", `compute_trays { bmc_macs { mac_addresses: "aa:00:00:00:00:02" } components: COMPUTE_TRAY_COMPONENT_BMC } target_version: "5.1"`)
		check(t, res, want{"results.0.mac_address": "aa:00:00:00:00:02", "results.0.component_id": "m2", "results.0.status": statusSuccess})
		require.Equal(t, []string{"bmc=queued"}, jobs("m2"))
		require.Equal(t, "5.1", versionOf(nico.KindCompute, "m2"))
	})
	t.Run("FirmwareSwitchByID", func(t *testing.T) {
		res := call("UpdateComponentFirmware", `switches { switch_ids { ids { id: "s1" } } components: NV_SWITCH_COMPONENT_NVOS } target_version: "5.2"`)
		check(t, res, want{"results.0.component_id": "s1", "results.0.status": statusSuccess})
		require.Equal(t, []string{"nvos=queued"}, jobs("s1"))
	})
	t.Run("FirmwareShelfByMAC", func(t *testing.T) {
		res := call("UpdateComponentFirmware", `power_shelves { pmc_macs { mac_addresses: "aa:00:00:00:02:01" } components: POWER_SHELF_COMPONENT_PMC } target_version: "5.3"`)
		check(t, res, want{"results.0.mac_address": "aa:00:00:00:02:01", "results.0.status": statusSuccess})
		require.Equal(t, []string{"pmc=queued"}, jobs("p1"))
		require.Equal(t, "5.3", versionOf(nico.KindPowerShelf, "p1"))
	})
	t.Run("FirmwareUnknownDevice", func(t *testing.T) {
		res := call("UpdateComponentFirmware", `power_shelves { power_shelf_ids { ids { id: "nope" } } } target_version: "5.3"`)
		check(t, res, want{"results.0.component_id": "nope", "results.0.status": notFound})
	})
	t.Run("FirmwareRackThenStatusAndVersions", func(t *testing.T) {
		res := call("UpdateComponentFirmware", `racks { rack_ids { rack_ids { id: "r1" } } } target_version: "6.0"`)
		check(t, res, want{"results": 1, "results.0.component_id": "r1", "results.0.status": statusSuccess})
		for _, id := range []string{"m1", "m2", "s1", "p1"} {
			require.NotEmpty(t, jobs(id), id)
		}
		st := call("GetComponentFirmwareStatus", `rack_ids { rack_ids { id: "r1" } }`)
		require.Greater(t, contracttest.Get(t, st, "statuses").(int), 4)
		check(t, st, want{"statuses.0.result.component_id": "m1", "statuses.0.state": fwQueued, "statuses.0.target_version": "6.0"})
		vs := call("ListComponentFirmwareVersions", `rack_ids { rack_ids { id: "r1" } }`)
		check(t, vs, want{"devices": 4, "devices.0.result.component_id": "m1", "devices.3.result.component_id": "p1"})
	})
	t.Run("VersionsComputeSubcomponents", func(t *testing.T) {
		vs := call("ListComponentFirmwareVersions", `compute_bmc_macs { mac_addresses: "aa:00:00:00:00:01" }`)
		check(t, vs, want{
			"devices": 1, "devices.0.result.mac_address": "aa:00:00:00:00:01",
			"devices.0.compute_fw_versions":             2,
			"devices.0.compute_fw_versions.0.component": trayBIOS, "devices.0.compute_fw_versions.0.versions.0": "1.0",
			"devices.0.compute_fw_versions.1.component": trayBMC, "devices.0.compute_fw_versions.1.versions.0": "1.0",
		})
	})
	t.Run("PowerShelfByMAC", func(t *testing.T) {
		res := call("ComponentPowerControl", `power_shelf_pmc_macs { mac_addresses: "aa:00:00:00:02:01" } action: SYSTEM_POWER_CONTROL_FORCE_OFF`)
		check(t, res, want{"results.0.mac_address": "aa:00:00:00:02:01", "results.0.status": statusSuccess})
		b.clock.Advance(2 * time.Second)
		st, _ := b.sim.State("p1")
		require.Equal(t, "off", st.Power)
	})
	t.Run("PowerComputeByID", func(t *testing.T) {
		res := call("ComponentPowerControl", `machine_ids { machine_ids { id: "m2" } } action: SYSTEM_POWER_CONTROL_FORCE_OFF`)
		check(t, res, want{"results.0.component_id": "m2", "results.0.status": statusSuccess})
		b.clock.Advance(2 * time.Second)
		st, _ := b.sim.State("m2")
		require.Equal(t, "off", st.Power)
	})
	t.Run("Inventory", func(t *testing.T) {
		res := call("GetComponentInventory", `switch_ids { ids { id: "s1" } }`)
		check(t, res, want{"entries": 1, "entries.0.result.component_id": "s1", "entries.0.report.chassis.0.serial_number": "SN-S1"})
		require.True(t, contracttest.Has(t, res, "entries.0.report.chassis.0.serial_number"))
	})
	t.Run("Ingestion", func(t *testing.T) {
		res := call("DetermineMachineIngestionState", `ip_address: "10.0.0.1"`)
		check(t, res, want{"machine_ingestion_state": ingestionMachineCreated})
	})
	t.Run("Decommission", func(t *testing.T) {
		call("DecommissionSwitch", `switch_id { id: "s1" }`)
		require.Equal(t, 1, b.sim.Journal().CountFor("DecommissionSwitch", "s1"))
	})
	t.Run("FirmwareStatusUnknownState", func(t *testing.T) {
		// A device with no job: absent from the list, as Core answers.
		st := call("GetComponentFirmwareStatus", `switch_ids { ids { id: "nope" } }`)
		require.Equal(t, 0, contracttest.Get(t, st, "statuses"))
	})
}

// TestWireBytesOfATrayTarget pins the bytes of the smallest tray firmware
// request: compute_trays(1) { machine_ids(1) MachineIdList { machine_ids(1)
// { id(1) "m1" } } }. Before the fix field 1 was a bare repeated MachineId,
// 0a 04 0a 02 6d 31 inside the target, which upstream's decoder rejects.
func TestWireBytesOfATrayTarget(t *testing.T) {
	t.Parallel()
	b := wireSetup(t)
	_, err := b.client.UpdateFirmware(context.Background(), nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}}, nico.FirmwareRequest{})
	require.NoError(t, err)
	require.Equal(t, []byte{0x0a, 0x08, 0x0a, 0x06, 0x0a, 0x04, 0x0a, 0x02, 'm', '1'}, b.rec.Last(t, "/forge.Forge/UpdateComponentFirmware"))
}
