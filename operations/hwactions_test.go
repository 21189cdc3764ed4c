package operations

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/backend"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

func TestAuthFromProto(t *testing.T) {
	t.Parallel()
	s := func(v string) *string { return &v }
	shared := func(v string) *flowv1.FirmwareAuthenticationData {
		return &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_Shared{Shared: v}}
	}
	perComponent := func(p *flowv1.PerComponentFirmwareAuthenticationData) *flowv1.FirmwareAuthenticationData {
		return &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_PerComponent{PerComponent: p}}
	}
	for _, tt := range []struct {
		name      string
		in        *flowv1.FirmwareAuthenticationData
		sub       []string
		wantEmpty bool
		wantErr   string
	}{
		{name: "Absent", wantEmpty: true},
		{name: "SharedEmpty", in: shared(""), wantEmpty: true},
		{name: "PerComponentAllEmpty", in: perComponent(&flowv1.PerComponentFirmwareAuthenticationData{Compute: s("")}), wantEmpty: true},
		{name: "Shared", in: shared("x")},
		{name: "PerComponent", in: perComponent(&flowv1.PerComponentFirmwareAuthenticationData{Nvswitch: s("y")})},
		{name: "ValueUnset", in: &flowv1.FirmwareAuthenticationData{}, wantErr: "authentication data value is required"},
		{name: "PerComponentNil", in: perComponent(nil), wantErr: "per-component authentication data is required"},
		{name: "DPUOnly", in: shared("x"), sub: []string{"dpu"}, wantErr: "dpu-only firmware updates do not support authentication data"},
		{name: "DPUAndBMC", in: shared("x"), sub: []string{"dpu", "bmc"}},
		{name: "DPUOnlyNoData", in: shared(""), sub: []string{"dpu"}, wantEmpty: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := authFromProto(tt.in, tt.sub)
			if tt.wantErr != "" {
				require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantEmpty, got.Empty())
		})
	}
}

func TestTargetVersionFor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in string
		ct       ComponentType
		want     string
	}{
		{"Plain", "1.2.3", ComponentTypeCompute, "1.2.3"},
		{"Empty", "", ComponentTypeCompute, ""},
		{"StringValue", `{"compute":"2.0","nvswitch":"3.0"}`, ComponentTypeNVSwitch, "3.0"},
		{"ObjectValue", `{"compute":{"bmc":"1"}}`, ComponentTypeCompute, `{"bmc":"1"}`},
		{"OtherTypeOnly", `{"compute":"2.0"}`, ComponentTypePowerShelf, ""},
		{"UnrelatedObject", `{"bmc":"1"}`, ComponentTypeCompute, `{"bmc":"1"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, targetVersionFor(tt.in, tt.ct))
		})
	}
}

func TestJobStarted(t *testing.T) {
	t.Parallel()
	st := func(kv ...string) []backend.FirmwareStatus {
		var out []backend.FirmwareStatus
		for i := 0; i < len(kv); i += 2 {
			out = append(out, backend.FirmwareStatus{Key: kv[i], State: backend.FirmwareState(kv[i+1])})
		}
		return out
	}
	for _, tt := range []struct {
		name   string
		before map[string]backend.FirmwareState
		now    []backend.FirmwareStatus
		want   bool
	}{
		{"NoJobBeforeOrAfter", map[string]backend.FirmwareState{"a": "unknown"}, st("a", "unknown"), false},
		{"NoSnapshotNoJob", nil, st("a", "unknown"), false},
		{"NoSnapshotJobSeen", nil, st("a", "queued"), true},
		{"JobQueued", map[string]backend.FirmwareState{"a": "unknown", "b": "unknown"}, st("a", "unknown", "b", "queued"), true},
		{"FreshJobCompleted", map[string]backend.FirmwareState{"a": "unknown"}, st("a", "completed"), true},
		{"OldJobUnchanged", map[string]backend.FirmwareState{"a": "completed"}, st("a", "completed"), false},
		{"EmptyAnswer", map[string]backend.FirmwareState{"a": "unknown"}, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, jobStarted(tt.before, tt.now))
		})
	}
}
