package app

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// allowedImports is the dependency rule of the design (ARCHITECTURE.md,
// STYLE.md): dependencies point down, app composes everything, the engine
// knows no domain, and only nico and psm (and the component managers over
// them) speak to the backends. Generated code (proto/gen, dbsqlc) is
// allowed everywhere it is used; it is checked separately below.
var allowedImports = map[string][]string{
	"db":           {},
	"caller":       {},
	"db/pglocal":   {},
	"db/dbtest":    {"db", "db/pglocal"},
	"engine":       {"db"},
	"inventory":    {"db"},
	"firmware":     {"db", "engine", "inventory", "backend", "nico", "psm"},
	"sim":          {},
	"telemetry":    {},
	"sim/simrun":   {"sim", "nico/nicosim", "psm/psmsim"},
	"nico":         {},
	"nico/nicosim": {"sim", "nico"},
	"psm":          {},
	"psm/psmsim":   {"sim", "psm"},
	"backend":      {"nico", "psm"},
	"reconcile":    {"db", "inventory", "backend", "nico", "psm"},
	"operations":   {"db", "caller", "engine", "inventory", "backend", "firmware", "nico", "psm"},
	"cmd/flow":     {"app"},
	// cli talks to the server only through the generated Connect client;
	// operations only for the rule file format (parsed client-side, so
	// that rule load --dry-run checks a file exactly as the server would).
	"cli": {"operations"},
	// bench drives a server child through the API, with the simulators in
	// its own process; it reads rules to count engine steps.
	"bench":    {"cli", "db", "db/pglocal", "inventory", "operations", "nico/nicosim", "sim", "sim/simrun"},
	"proto":    {},
	"proto/v1": {},
	// doctest runs the documents' examples against a flow dev it builds.
	"doctest": {},
}

type listedPackage struct {
	ImportPath string
	Imports    []string
}

func TestImportRules(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "github.com/nicoflow/flow/...").Output()
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	const mod = "github.com/nicoflow/flow/"
	seen := 0
	for dec.More() {
		var p listedPackage
		require.NoError(t, dec.Decode(&p))
		pkg := strings.TrimPrefix(p.ImportPath, mod)
		if strings.HasPrefix(pkg, "proto/gen/") || strings.HasSuffix(pkg, "/internal/dbsqlc") || pkg == "app" {
			continue
		}
		allowed, ok := allowedImports[pkg]
		require.True(t, ok, "package %s has no import rule: add it to allowedImports", pkg)
		seen++
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			dep := strings.TrimPrefix(imp, mod)
			switch {
			case dep == "app" && pkg != "cmd/flow":
				t.Errorf("%s imports app: only cmd/flow may", pkg)
			case strings.HasPrefix(dep, "proto/gen/forge"):
				require.True(t, pkg == "nico" || pkg == "nico/nicosim", "%s imports NICo Core's generated code; only nico may", pkg)
			case strings.HasPrefix(dep, "proto/gen/psm"):
				require.True(t, pkg == "psm" || pkg == "psm/psmsim", "%s imports PSM's generated code; only psm may", pkg)
			case strings.HasPrefix(dep, "proto/gen/"), dep == pkg+"/internal/dbsqlc":
			default:
				require.Contains(t, allowed, dep, "%s may not import %s", pkg, dep)
			}
		}
	}
	require.Greater(t, seen, 10)
}
