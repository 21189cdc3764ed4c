package firmware

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCompareVersions orders the shapes Core and the vendors report.
func TestCompareVersions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		want int
		ok   bool
	}{
		{"1.2.00GA", "1.2.0", 0, true},
		{"FW 1.2.00GA", "FW 1.10.00GA", -1, true},
		{"FW 1.2.00GA", "fw 1.2.00ga", 0, true},
		{"NVOS 25.02", "NVOS 25.10", -1, true},
		{"NVOS 25.02.2104", "NVOS 25.02", 1, true},
		{"PS 3.1.0", "PS 3.1.1", -1, true},
		{"PS 3.1.0", "FW 3.1.0", 0, false},
		{"2.0", "2.0.0", 0, true},
		{"1.10", "1.9", 1, true},
		{"v1.10.3", "1.9.9", 1, true},
		{"0.0.1+build5", "0.0.1", 0, true},
		{"24.10.1-rc2", "24.10.1", -1, true},
		{"24.10.1-rc2", "24.10.1-rc10", -1, true},
		{"1.0-beta", "1.0-rc1", -1, true},
		{"1.0-rc1", "1.0.1", -1, true},
		{"2.1.0", "2.1.0a", -1, true},
		{"2.1.0a", "2.1.0b", -1, true},
		{"2.1.0b", "2.1.1", -1, true},
		{"GB200-BMC-2.3.1", "GB200-BMC-2.4.0", -1, true},
		{"BMC 13.2.5.1 (build 42)", "BMC 13.2.5.1 (build 42)", 0, true},
		{"", "1.0", 0, false},
		{"latest", "1.0", 0, false},
		{"latest", "LATEST", 0, true},
		{"1.0", "1.0 hotfix", 0, false},
	} {
		c, ok := CompareVersions(tt.a, tt.b)
		require.Equal(t, tt.ok, ok, "%q vs %q: comparable", tt.a, tt.b)
		if ok {
			require.Equal(t, tt.want, c, "%q vs %q", tt.a, tt.b)
			back, _ := CompareVersions(tt.b, tt.a)
			require.Equal(t, -tt.want, back, "%q vs %q, swapped", tt.b, tt.a)
		}
	}
}
