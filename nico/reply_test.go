package nico_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nicoflow/flow/nico"
	forgepb "github.com/nicoflow/flow/proto/gen/forge"
	"github.com/nicoflow/flow/proto/gen/forge/forgepbconnect"
	"github.com/nicoflow/flow/sim"
)

// futureCore answers with fields this build does not know, as a newer Core
// would: at the top of the reply and inside each item.
type futureCore struct {
	forgepbconnect.UnimplementedForgeHandler
}

func unknownField(num protowire.Number, s string) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func (futureCore) ComponentPowerControl(_ context.Context, req *forgepb.ComponentPowerControlRequest) (*forgepb.ComponentPowerControlResponse, error) {
	res := &forgepb.ComponentPowerControlResponse{}
	for _, m := range req.GetMachineIds().GetMachineIds() {
		id := m.GetId()
		r := &forgepb.ComponentResult{ComponentId: &id}
		r.ProtoReflect().SetUnknown(unknownField(77, "a field from the future"))
		res.Results = append(res.Results, r)
	}
	res.ProtoReflect().SetUnknown(unknownField(99, "another"))
	return res, nil
}

func (futureCore) ListComponentFirmwareVersions(_ context.Context, req *forgepb.ListComponentFirmwareVersionsRequest) (*forgepb.ListComponentFirmwareVersionsResponse, error) {
	id := req.GetMachineIds().GetMachineIds()[0].GetId()
	cv := &forgepb.ComputeTrayFirmwareVersions{Component: forgepb.ComputeTrayComponent_COMPUTE_TRAY_COMPONENT_HGX_BMC, Versions: []string{"4.2"}}
	cv.ProtoReflect().SetUnknown(unknownField(9, "x"))
	d := &forgepb.DeviceFirmwareVersions{Result: &forgepb.ComponentResult{ComponentId: &id}, Versions: []string{"bundle-7"}, ComputeFwVersions: []*forgepb.ComputeTrayFirmwareVersions{cv}}
	d.ProtoReflect().SetUnknown(unknownField(40, "y"))
	return &forgepb.ListComponentFirmwareVersionsResponse{Devices: []*forgepb.DeviceFirmwareVersions{d}}, nil
}

// TestReplyUnknownFieldsIgnored: a reply carrying fields we do not know
// still reads, with the fields we know intact.
func TestReplyUnknownFieldsIgnored(t *testing.T) {
	t.Parallel()
	_, h := forgepbconnect.NewForgeHandler(futureCore{})
	srv, err := sim.Listen("127.0.0.1:0", h)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close(canceled()) })
	c, err := nico.NewClient(srv.URL(), nico.WithTimeout(5*time.Second))
	require.NoError(t, err)
	ctx := context.Background()

	res, err := c.PowerControl(ctx, nico.Target{Kind: nico.KindCompute, IDs: []string{"m1", "m2"}}, nico.PowerOn, false)
	require.NoError(t, err)
	require.Len(t, res, 2)
	require.Equal(t, "m2", res[1].Key)

	vs, err := c.FirmwareVersions(ctx, nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}})
	require.NoError(t, err)
	require.Equal(t, []nico.DeviceVersions{{
		Key: "m1", ID: "m1", Versions: []string{"bundle-7"},
		Components: []nico.ComponentVersions{{Component: "hgx_bmc", Versions: []string{"4.2"}}},
	}}, vs)
	entries, err := c.FirmwareVersionsRaw(ctx, []string{"m1"})
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "m1", string(entries[0].ID))
	dv, err := entries[0].Decode()
	require.NoError(t, err)
	require.Equal(t, vs[0], dv, "a raw entry with unknown fields decodes as FirmwareVersions reads it")
}

// TestReplyUndecodable: a reply that does not decode fails the call, named
// by method and retryable, and never reads as success.
func TestReplyUndecodable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, tt := range []struct {
		method string
		call   func() (any, error)
	}{
		{"UpdateComponentFirmware", func() (any, error) {
			res, err := b.client.UpdateFirmware(ctx, nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}}, nico.FirmwareRequest{TargetVersion: "2.0"})
			return res, err
		}},
		{"GetComponentFirmwareStatus", func() (any, error) {
			res, err := b.client.FirmwareStatus(ctx, nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}})
			return res, err
		}},
		{"ComponentPowerControl", func() (any, error) {
			res, err := b.client.PowerControl(ctx, nico.Target{Kind: nico.KindSwitch, MACs: []string{"aa:00:00:00:01:01"}}, nico.PowerOn, false)
			return res, err
		}},
		{"ListComponentFirmwareVersions", func() (any, error) {
			res, err := b.client.FirmwareVersions(ctx, nico.Target{Kind: nico.KindRack, IDs: []string{"r1"}})
			return res, err
		}},
	} {
		t.Run(tt.method, func(t *testing.T) {
			_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultGarbage, Method: tt.method, Times: 1})
			require.NoError(t, err)
			res, err := tt.call()
			require.Error(t, err)
			require.Nil(t, res, "nothing is read from a reply that does not decode")
			require.ErrorIs(t, err, nico.ErrUnreachable, "a garbled reply is retried, as any transport fault")
			var e *nico.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tt.method, e.Method)
			require.Contains(t, err.Error(), tt.method)
			require.Contains(t, err.Error(), "reply does not decode")
			require.Equal(t, 1, len(b.sim.Journal().Calls(tt.method)), "the garbled call was journalled")
			require.Equal(t, "garbled", b.sim.Journal().Calls(tt.method)[0].Code)
			_, err = tt.call()
			require.NoError(t, err, "the fault fired once; the retry reads")
		})
	}
}

// TestLyingDevice: a lie fault makes the job end COMPLETED while the
// installed versions, read back, keep the old version; the other tray's
// update lands.
func TestLyingDevice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.sim.Faults().Add(sim.Fault{Kind: sim.FaultLie, Method: "UpdateComponentFirmware", Device: "m1"})
	require.NoError(t, err)
	trays := nico.Target{Kind: nico.KindCompute, IDs: []string{"m1", "m2"}}
	_, err = b.client.UpdateFirmware(ctx, trays, nico.FirmwareRequest{TargetVersion: "2.0", Components: []string{"bmc"}})
	require.NoError(t, err)
	b.clock.Advance(10 * time.Minute)
	st, err := b.client.FirmwareStatus(ctx, trays)
	require.NoError(t, err)
	require.Len(t, st, 2)
	for _, s := range st {
		require.Equal(t, nico.FirmwareCompleted, s.State, s.Key)
	}
	vs, err := b.client.FirmwareVersions(ctx, trays)
	require.NoError(t, err)
	bmc := map[string]string{}
	for _, d := range vs {
		for _, c := range d.Components {
			if c.Component == "bmc" {
				bmc[d.Key] = c.Versions[0]
			}
		}
	}
	require.Equal(t, map[string]string{"m1": "1.0", "m2": "2.0"}, bmc, "m1 said completed and kept 1.0")
}

// TestFirmwareVersionsRaw: the entries of FirmwareVersionsRaw decode to
// what FirmwareVersions reads, item failures included, each named by its
// Core ID; an unchanged device's entry keeps its bytes from one read to
// the next and a changed one's differ; a reply that does not decode fails
// the call as FirmwareVersions does.
func TestFirmwareVersionsRaw(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := []string{"m1", "m2", "m9"}
	decoded := func() ([]nico.DeviceVersions, map[string][]byte) {
		t.Helper()
		entries, err := b.client.FirmwareVersionsRaw(ctx, ids)
		require.NoError(t, err)
		var out []nico.DeviceVersions
		bytes := map[string][]byte{}
		for _, e := range entries {
			dv, err := e.Decode()
			require.NoError(t, err)
			require.Equal(t, dv.ID, string(e.ID))
			out = append(out, dv)
			bytes[dv.Key] = e.Bytes
		}
		return out, bytes
	}
	want, err := b.client.FirmwareVersions(ctx, nico.Target{Kind: nico.KindCompute, IDs: ids})
	require.NoError(t, err)
	got, before := decoded()
	require.Equal(t, want, got)
	require.Len(t, got, 3)
	require.ErrorIs(t, got[2].Err, nico.ErrNotFound, "m9 is not Core's: an item failure, as FirmwareVersions reads it")

	_, err = b.client.UpdateFirmware(ctx, nico.Target{Kind: nico.KindCompute, IDs: []string{"m1"}}, nico.FirmwareRequest{TargetVersion: "2.0", Components: []string{"bmc"}})
	require.NoError(t, err)
	b.clock.Advance(10 * time.Minute)
	_, after := decoded()
	require.NotEqual(t, before["m1"], after["m1"], "m1's BMC moved to 2.0")
	require.Equal(t, before["m2"], after["m2"])
	require.Equal(t, before["m9"], after["m9"])

	_, err = b.sim.Faults().Add(sim.Fault{Kind: sim.FaultGarbage, Method: "ListComponentFirmwareVersions", Times: 1})
	require.NoError(t, err)
	entries, err := b.client.FirmwareVersionsRaw(ctx, ids)
	require.Nil(t, entries)
	require.ErrorIs(t, err, nico.ErrUnreachable)
	require.ErrorContains(t, err, "ListComponentFirmwareVersions")
	require.ErrorContains(t, err, "reply does not decode")

	_, err = b.client.FirmwareVersionsRaw(ctx, nil)
	require.ErrorIs(t, err, nico.ErrRejected, "no devices named")
}
