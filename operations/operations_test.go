package operations

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseComponentType(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]ComponentType{
		"Compute": ComponentTypeCompute, "compute": ComponentTypeCompute, "COMPONENT_TYPE_COMPUTE": ComponentTypeCompute,
		"NVSwitch": ComponentTypeNVSwitch, "nvswitch": ComponentTypeNVSwitch, "component_type_nvswitch": ComponentTypeNVSwitch,
		"PowerShelf": ComponentTypePowerShelf, "ToRSwitch": ComponentTypeToRSwitch, "TORSWITCH": ComponentTypeToRSwitch,
		"UMS": ComponentTypeUMS, "ums": ComponentTypeUMS, "CDU": ComponentTypeCDU, "COMPONENT_TYPE_CDU": ComponentTypeCDU,
	} {
		got, ok := ParseComponentType(in)
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "Unknown", "COMPONENT_TYPE_UNKNOWN", "gpu", "COMPONENT_TYPE_"} {
		got, ok := ParseComponentType(in)
		require.False(t, ok, in)
		require.Equal(t, ComponentType(in), got, "an unknown name is kept as written")
	}

	// Rule definitions take the same spellings.
	var s struct {
		T ComponentType `json:"component_type"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"component_type":"COMPONENT_TYPE_POWERSHELF"}`), &s))
	require.Equal(t, ComponentTypePowerShelf, s.T)
}
