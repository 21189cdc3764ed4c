package firmware

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExpected: what a completed update must have installed, from the
// task's target version and sub-targets, per component type.
func TestExpected(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, version, ct string
		components        []string
		want              map[string]string
	}{
		{name: "PlainCompute", version: "2.0", ct: "Compute", want: map[string]string{"bmc": "2.0"}},
		{name: "PlainSwitch", version: "3.0", ct: "NVSwitch", want: map[string]string{"bmc": "3.0"}},
		{name: "PlainShelf", version: "1.4", ct: "PowerShelf", want: map[string]string{"pmc": "1.4"}},
		{name: "SubTargets", version: "2.0", ct: "Compute", components: []string{"BIOS", "nic"}, want: map[string]string{"bios": "2.0", "nic": "2.0"}},
		{name: "Empty", version: "", ct: "Compute"},
		{name: "Blank", version: "  ", ct: "Compute"},
		{name: "PerType", version: `{"compute":"2.0","nvswitch":"3.0"}`, ct: "NVSwitch", want: map[string]string{"bmc": "3.0"}},
		{name: "PerTypeOtherType", version: `{"compute":"2.0"}`, ct: "PowerShelf"},
		{name: "PerTypeMap", version: `{"compute":{"bmc":"2.0","BIOS":"3.1"},"nvswitch":"3.0"}`, ct: "Compute", want: map[string]string{"bmc": "2.0", "bios": "3.1"}},
		{name: "PerTypeMapSwitch", version: `{"compute":{"bmc":"2.0","bios":"3.1"},"nvswitch":"3.0"}`, ct: "NVSwitch", want: map[string]string{"bmc": "3.0"}},
		{name: "SubComponentMap", version: `{"bmc":"2.0","cpld":"1.1"}`, ct: "NVSwitch", want: map[string]string{"bmc": "2.0", "cpld": "1.1"}},
		{name: "MapNarrowedBySubTargets", version: `{"compute":{"bmc":"2.0","bios":"3.1"}}`, ct: "Compute", components: []string{"bios"}, want: map[string]string{"bios": "3.1"}},
		{name: "MapNumber", version: `{"compute":{"bmc":2.5}}`, ct: "Compute", want: map[string]string{"bmc": "2.5"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Expected(tt.version, tt.ct, tt.components)
			if len(tt.want) == 0 {
				require.Empty(t, got)
				return
			}
			require.Equal(t, tt.want, got)
		})
	}
}

// TestMismatches: every instance at its target passes; anything else says
// the sub-component, the installed version(s) and the target.
func TestMismatches(t *testing.T) {
	t.Parallel()
	want := map[string]string{"bmc": "2.0", "nic": "1.2.0"}
	for _, tt := range []struct {
		name      string
		installed map[string][]string
		want      []string
	}{
		{name: "AtTarget", installed: map[string][]string{"bmc": {"2.0.0"}, "nic": {"1.2.00GA", "v1.2"}, "bios": {"9"}}},
		{name: "Old", installed: map[string][]string{"bmc": {"1.0"}, "nic": {"1.2.0"}}, want: []string{"bmc installed 1.0, target 2.0"}},
		{name: "Newer", installed: map[string][]string{"bmc": {"2.1"}, "nic": {"1.2.0"}}, want: []string{"bmc installed 2.1, target 2.0"}},
		{name: "OneOfTwoInstances", installed: map[string][]string{"bmc": {"2.0"}, "nic": {"1.2.0", "1.1.9"}}, want: []string{"nic installed 1.2.0 and 1.1.9, target 1.2.0"}},
		{name: "NotReported", installed: map[string][]string{"bmc": {"2.0"}}, want: []string{"nic not reported, target 1.2.0"}},
		{name: "NotComparable", installed: map[string][]string{"bmc": {"unknown"}, "nic": {"1.2.0"}}, want: []string{"bmc installed unknown, target 2.0 (not comparable)"}},
		{name: "Nothing", installed: nil, want: []string{"bmc not reported, target 2.0", "nic not reported, target 1.2.0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Mismatches(want, tt.installed))
		})
	}
}
