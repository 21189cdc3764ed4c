package nico_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/nico"
	"github.com/nicoflow/flow/sim/nicosim"
)

func TestSyncReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.sim.SeedRacks([]nicosim.Rack{
		{ID: "r1", GroupID: "g1", ProfileID: "gb200", Name: "rack one", Labels: map[string]string{"chassis.serial-number": "RS1"}, Alerts: []string{"leak"}},
		{ID: "r2", NoHealth: true, Unexpected: true},
	}))

	power, err := b.client.PowerStates(ctx, []string{"m1", "m2"})
	require.NoError(t, err)
	require.Equal(t, map[string]nico.PowerState{"m1": nico.PowerStateOn, "m2": nico.PowerStateOn}, power)

	pos, err := b.client.Positions(ctx, []string{"m1"})
	require.NoError(t, err)
	require.EqualValues(t, 0, *pos["m1"].SlotID)

	racks, err := b.client.Racks(ctx, []string{"r1", "r2", "nope"})
	require.NoError(t, err)
	require.Len(t, racks, 2)
	require.Equal(t, "g1", racks[0].GroupID)
	require.Equal(t, "leak", racks[0].Health.Alerts[0].ID)
	require.Nil(t, racks[1].Health)

	exp, err := b.client.ExpectedRacks(ctx)
	require.NoError(t, err)
	require.Len(t, exp, 1)
	require.Equal(t, nico.ExpectedRack{RackID: "r1", ProfileID: "gb200", GroupID: "g1", Name: "rack one", Labels: map[string]string{"chassis.serial-number": "RS1"}}, exp[0])

	// The admin surface changes a device in place: state, alerts,
	// firmware, position, NVLink domain, power.
	req, err := http.NewRequest(http.MethodPatch, b.url+"/admin/devices/m1", bytes.NewBufferString(
		`{"state":"Failed","alerts":["overheat"],"firmware":{"bmc":"9.9"},"slot_id":7,"powered_off":true}`))
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNoContent, res.StatusCode)
	require.NoError(t, b.sim.Update("s1", nicosim.DevicePatch{NVLinkDomain: ptr("0b7c7a2e-4a53-4d59-9b39-6b7b2d9e8f10")}))

	ms, err := b.client.Machines(ctx, []string{"m1"})
	require.NoError(t, err)
	require.Equal(t, "Failed", ms[0].State)
	require.Equal(t, "overheat", ms[0].Health.Alerts[0].ID)
	power, err = b.client.PowerStates(ctx, []string{"m1"})
	require.NoError(t, err)
	require.Equal(t, nico.PowerStateOff, power["m1"])
	pos, err = b.client.Positions(ctx, []string{"m1"})
	require.NoError(t, err)
	require.EqualValues(t, 7, *pos["m1"].SlotID)
	inv, err := b.client.Inventory(ctx, nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}})
	require.NoError(t, err)
	require.Equal(t, "9.9", inv[0].BMCFirmware())
	sw, err := b.client.Switches(ctx, []string{"s1"})
	require.NoError(t, err)
	require.Equal(t, "0b7c7a2e-4a53-4d59-9b39-6b7b2d9e8f10", sw[0].NVLinkDomain)
	require.NotNil(t, sw[0].Health)

	req, err = http.NewRequest(http.MethodPatch, b.url+"/admin/devices/nope", bytes.NewBufferString(`{}`))
	require.NoError(t, err)
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode)
}

func ptr[T any](v T) *T { return &v }
