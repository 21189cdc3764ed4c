package doctest

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeNamesEveryFuzzTarget: the README's Development table names each
// fuzz target the Makefile runs, and no other.
func TestReadmeNamesEveryFuzzTarget(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile("../Makefile")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^FUZZ_TARGETS\s*\?=\s*(.+)$`).FindSubmatch(mk)
	require.NotNil(t, m, "Makefile has no FUZZ_TARGETS")
	var want []string
	for _, f := range strings.Fields(string(m[1])) {
		want = append(want, strings.SplitN(f, ":", 2)[0])
	}
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `make fuzz` \\|.*$").Find(readme)
	require.NotNil(t, row, "README has no make fuzz row")
	got := regexp.MustCompile("`(Fuzz[A-Za-z]+)`").FindAllSubmatch(row, -1)
	var names []string
	for _, g := range got {
		names = append(names, string(g[1]))
	}
	require.ElementsMatch(t, want, names, "README's make fuzz row: %s", row)
}
