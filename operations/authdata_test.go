package operations

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

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
