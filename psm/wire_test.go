package psm_test

// The golden wire tests for PSM, as nico's: our requests read with
// upstream's descriptors, upstream-shaped requests sent as bytes to our
// simulator.

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nicoflow/flow/proto/contract"
	"github.com/nicoflow/flow/proto/contract/contracttest"
	"github.com/nicoflow/flow/psm"
	"github.com/nicoflow/flow/sim"
)

// Upstream's enum numbers, as the facts file gives them.
const (
	componentPMC, componentPSU   = int32(0), int32(1)
	vendorLiteon, vendorDelta    = int32(1), int32(2)
	statusSuccess, statusInvalid = int32(0), int32(1)
	updateQueued                 = int32(1)
)

func wireSetup(t *testing.T) (*testBundle, *contracttest.Recorder) {
	t.Helper()
	rec := &contracttest.Recorder{}
	b := setupWith(t, func(h http.Handler) http.Handler { rec.Next = h; return rec })
	return b, rec
}

func check(t *testing.T, m protoreflect.Message, w map[string]any) {
	t.Helper()
	for path, v := range w {
		require.Equal(t, v, contracttest.Get(t, m, path), "upstream reads %s differently", path)
	}
}

// TestWireClientRequests encodes every request the PSM client builds and
// reads it back as upstream's PSM would.
func TestWireClientRequests(t *testing.T) {
	t.Parallel()
	b, rec := wireSetup(t)
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		call   func() error
		method protoreflect.Name
		want   map[string]any
	}{
		{
			name: "Register",
			call: func() error {
				_, err := b.client.Register(ctx, []psm.Registration{{MAC: "bb:00:00:00:00:09", IP: "10.1.0.9", Vendor: "delta", Username: "admin", Password: "pw"}, {MAC: mac1, IP: "10.1.0.1"}})
				return err
			},
			method: "RegisterPowershelves",
			want: map[string]any{
				"registration_requests": 2, "registration_requests.0.pmc_mac_address": "bb:00:00:00:00:09",
				"registration_requests.0.pmc_ip_address": "10.1.0.9", "registration_requests.0.pmc_vendor": vendorDelta,
				"registration_requests.0.pmc_credentials.username": "admin", "registration_requests.0.pmc_credentials.password": "pw",
				"registration_requests.1.pmc_vendor": vendorLiteon,
			},
		},
		{
			name:   "Shelves",
			call:   func() error { _, err := b.client.Shelves(ctx, []string{mac1, mac2}); return err },
			method: "GetPowershelves",
			want:   map[string]any{"pmc_macs": 2, "pmc_macs.0": mac1, "pmc_macs.1": mac2},
		},
		{
			name:   "PowerOn",
			call:   func() error { _, err := b.client.PowerOn(ctx, []string{mac2}); return err },
			method: "PowerOn",
			want:   map[string]any{"pmc_macs": 1, "pmc_macs.0": mac2},
		},
		{
			name:   "PowerOff",
			call:   func() error { _, err := b.client.PowerOff(ctx, []string{mac1}); return err },
			method: "PowerOff",
			want:   map[string]any{"pmc_macs.0": mac1},
		},
		{
			name: "UpdateFirmware",
			call: func() error {
				_, err := b.client.UpdateFirmware(ctx, []psm.FirmwareUpdate{{MAC: mac1, Component: psm.ComponentPSU, Version: "2.0.0"}, {MAC: mac2, Component: psm.ComponentPMC, Version: "2.1.0"}})
				return err
			},
			method: "UpdateFirmware",
			want: map[string]any{
				"upgrades": 2, "upgrades.0.pmc_mac_address": mac1, "upgrades.0.components": 1,
				"upgrades.0.components.0.component": componentPSU, "upgrades.0.components.0.upgradeTo.version": "2.0.0",
				"upgrades.1.components.0.component": componentPMC, "upgrades.1.components.0.upgradeTo.version": "2.1.0",
			},
		},
		{
			name: "FirmwareStatus",
			call: func() error {
				_, err := b.client.FirmwareStatus(ctx, []psm.FirmwareQuery{{MAC: mac1, Component: psm.ComponentPSU}})
				return err
			},
			method: "GetFirmwareUpdateStatus",
			want:   map[string]any{"queries": 1, "queries.0.pmc_mac_address": mac1, "queries.0.component": componentPSU},
		},
		{
			name:   "AvailableFirmware",
			call:   func() error { _, err := b.client.AvailableFirmware(ctx, []string{mac1}); return err },
			method: "ListAvailableFirmware",
			want:   map[string]any{"pmc_macs.0": mac1},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); err != nil {
				var e *psm.Error
				require.ErrorAs(t, err, &e)
				require.NotEmpty(t, e.Device, "the call itself failed: %v", err)
			}
			md := contracttest.Method(t, contract.PSMService, tt.method)
			m := contracttest.Decode(t, md.Input(), rec.Last(t, "/v1.PowershelfManager/"+string(tt.method)))
			check(t, m, tt.want)
		})
	}
}

// TestWireUpstreamRequests sends upstream-built PSM requests, as bytes, to
// the simulator: it must act on the shelves and components they name.
func TestWireUpstreamRequests(t *testing.T) {
	t.Parallel()
	b, _ := wireSetup(t)
	hc := &http.Client{Timeout: 5 * time.Second}
	call := func(name protoreflect.Name, text string) protoreflect.Message {
		t.Helper()
		return contracttest.Call(t, hc, b.url, contracttest.Method(t, contract.PSMService, name), text)
	}

	res := call("PowerOn", `pmc_macs: "`+mac2+`"`)
	check(t, res, map[string]any{"responses": 1, "responses.0.pmc_mac_address": mac2, "responses.0.status": statusSuccess})
	b.clock.Advance(2 * time.Second)
	st, ok := b.sim.State(mac2)
	require.True(t, ok)
	require.NotContains(t, st.PSUPower, false, "every PSU of the shelf powered on")

	// PSM upgrades PMC firmware only; a PSU request is refused per item.
	res = call("UpdateFirmware", `upgrades { pmc_mac_address: "`+mac1+`" components { component: PSU upgradeTo { version: "2.0.0" } } }`)
	check(t, res, map[string]any{"responses.0.pmc_mac_address": mac1, "responses.0.components.0.component": componentPSU, "responses.0.components.0.status": statusInvalid})
	res = call("UpdateFirmware", `upgrades { pmc_mac_address: "`+mac1+`" components { component: PMC upgradeTo { version: "2.0.0" } } }`)
	check(t, res, map[string]any{"responses.0.pmc_mac_address": mac1, "responses.0.components.0.component": componentPMC, "responses.0.components.0.status": statusSuccess})
	st, _ = b.sim.State(mac1)
	require.Contains(t, st.Jobs, "pmc")
	require.NotContains(t, st.Jobs, "psu")

	res = call("GetFirmwareUpdateStatus", `queries { pmc_mac_address: "`+mac1+`" component: PMC }`)
	check(t, res, map[string]any{"statuses": 1, "statuses.0.pmc_mac_address": mac1, "statuses.0.component": componentPMC, "statuses.0.state": updateQueued, "statuses.0.status": statusSuccess})

	res = call("GetPowershelves", `pmc_macs: "`+mac1+`"`)
	check(t, res, map[string]any{"powershelves": 1, "powershelves.0.pmc.mac_address": mac1, "powershelves.0.chassis.serial_number": "SN-P1", "powershelves.0.psus": 4})

	res = call("RegisterPowershelves", `registration_requests { pmc_mac_address: "bb:00:00:00:00:07" pmc_ip_address: "10.1.0.7" pmc_vendor: PMC_TYPE_DELTA pmc_credentials { username: "u" password: "p" } }`)
	check(t, res, map[string]any{"responses.0.pmc_mac_address": "bb:00:00:00:00:07", "responses.0.is_new": true, "responses.0.status": statusSuccess})
	_, ok = b.sim.State("bb:00:00:00:00:07")
	require.True(t, ok, "the upstream registration was kept")
}

// TestReplyUndecodable: a PSM reply that does not decode fails the call,
// named by method and retryable, and never reads as success.
func TestReplyUndecodable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultGarbage, Method: "UpdateFirmware", Times: 1})
	require.NoError(t, err)
	up := []psm.FirmwareUpdate{{MAC: mac1, Component: psm.ComponentPMC, Version: "2.0.0"}}
	res, err := b.client.UpdateFirmware(ctx, up)
	require.Nil(t, res)
	require.ErrorIs(t, err, psm.ErrUnreachable)
	require.Contains(t, err.Error(), "UpdateFirmware")
	require.Contains(t, err.Error(), "reply does not decode")
	res, err = b.client.UpdateFirmware(ctx, up)
	require.NoError(t, err)
	require.Len(t, res, 1)
}
