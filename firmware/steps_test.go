package firmware

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/backend"
)

func TestTargetVersionFor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in string
		ct       string
		want     string
	}{
		{"Plain", "1.2.3", "Compute", "1.2.3"},
		{"Empty", "", "Compute", ""},
		{"StringValue", `{"compute":"2.0","nvswitch":"3.0"}`, "NVSwitch", "3.0"},
		{"ObjectValue", `{"compute":{"bmc":"1"}}`, "Compute", `{"bmc":"1"}`},
		{"OtherTypeOnly", `{"compute":"2.0"}`, "PowerShelf", ""},
		{"UnrelatedObject", `{"bmc":"1"}`, "Compute", `{"bmc":"1"}`},
		{"UpstreamKeyCase", `{"Compute":"2.0","NVSwitch":"3.0"}`, "NVSwitch", "3.0"},
		{"EnumKey", `{"COMPONENT_TYPE_POWERSHELF":"4.0"}`, "PowerShelf", "4.0"},
		{"EnumKeyOtherType", `{"COMPONENT_TYPE_POWERSHELF":"4.0"}`, "Compute", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, VersionFor(tt.in, tt.ct))
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
