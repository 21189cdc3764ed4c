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
	"db":         {},
	"caller":     {},
	"db/pglocal": {},
	"db/dbtest":  {"db", "db/pglocal"},
	"engine":     {"db"},
	"inventory":  {"db"},
	"firmware":   {"db", "engine", "inventory", "backend", "nico", "psm"},
	"telemetry":  {},
	// logtest is a log sink for tests, proctest a process check for
	// tests; only tests import them.
	"logtest":  {},
	"proctest": {},
	// nico calls through lean directly for the replies it decodes on
	// demand (lean.Conn.CallRaw: the inventory sync's versions reads).
	"nico": {"proto/lean"},
	"psm":  {},
	// sim is the simulators' floor (clock, journal, faults, admin, serving);
	// each simulator sits under it and may also use its backend client's
	// names (the alert a leak raises); simrun runs both. Nothing under sim
	// is imported by nico or psm.
	"sim":         {},
	"sim/nicosim": {"sim", "nico"},
	"sim/psmsim":  {"sim", "psm"},
	"sim/simrun":  {"sim", "sim/nicosim", "sim/psmsim"},
	"backend":     {"nico", "psm"},
	"reconcile":   {"db", "inventory", "backend", "nico", "psm"},
	"operations":  {"db", "caller", "engine", "inventory", "backend", "firmware", "nico", "psm", "operations/ruledef"},
	// ruledef is the rule format, a leaf: the task manager, the rule
	// files and the CLI read rules through it, without one another.
	"operations/ruledef": {"inventory"},
	// edge is the request edge (limits, strict JSON, identity, roles,
	// audit, TLS, health): no domain, only the caller's identity.
	"edge": {"caller"},
	// event rules and leak detection reach the task manager only through
	// its exported API; operations imports none of them.
	"operations/eventrule": {"db", "caller", "inventory", "operations"},
	"operations/schedule":  {"db", "caller", "inventory", "firmware", "operations"},
	"cmd/flow":             {"app"},
	"cmd/testsum":          {},
	// cli talks to the server only through the generated Connect client;
	// operations only for the rule file format (parsed client-side, so
	// that rule load --dry-run checks a file exactly as the server would);
	// inventory only for the placement-name check, so that a rack file
	// with a bad feed or loop is refused before its rack is created.
	"cli":                 {"inventory", "operations", "operations/ruledef", "operations/rulefile"},
	"operations/rulefile": {"operations", "operations/ruledef"},
	// bench drives a server child through the API, with the simulators in
	// its own process; it reads rules to count engine steps, and writes
	// its synthetic event stream through notify's outbox (the server's
	// delivery jobs send it).
	"bench":                       {"cli", "db", "db/pglocal", "inventory", "notify", "operations", "operations/ruledef", "sim", "sim/nicosim", "sim/simrun"},
	"proto":                       {},
	"proto/v1":                    {},
	"proto/contract":              {},
	"proto/contract/contracttest": {"proto/contract"},
	// lean runs the generated lean clients (proto/gen's *connect
	// packages import it), protoc-gen-lean writes them; neither knows
	// anything of Flow.
	"proto/lean":                     {},
	"proto/internal/protoc-gen-lean": {},
	// doctest runs the documents' examples against a flow dev it builds.
	"doctest": {},
	// deploy/helm holds only the Helm chart's tests (they import app and
	// Helm's and Kubernetes' packages, compiled nowhere else).
	"deploy/helm": {},

	// The console is a client of the API in the same process (edge's
	// handler, under the user's identity); it reads the site-wide
	// aggregates with SQL.
	"console": {"edge", "inventory"},

	// The task manager's features reach it only through its exported API.
	"operations/rollout": {"db", "caller", "engine", "inventory", "firmware", "operations"},
	// approvals answer the runs' Approver; they import none of the work.
	"operations/approval": {"db", "caller"},
	"firmware/baseline":   {"db", "caller", "inventory", "firmware", "nico", "operations", "operations/rollout"},
	// windows and freezes answer the task manager's and the runs' gates
	// (operations.StartGate, rollout.WindowGate); neither imports them.
	"operations/window": {"db", "caller", "inventory", "operations", "operations/rollout"},
	// rack isolation (the severe and critical leak tiers) and the
	// coolant-loop hold answer the task manager's gates; it imports none
	// of them.
	"operations/isolation": {"db", "caller", "inventory", "operations", "operations/ruledef"},
	// power budgets set the engine's per-feed capacities and name the
	// holds the task manager's power transitions take.
	"operations/powerbudget": {"db", "caller", "engine", "inventory", "operations"},
	// notify delivers what the others emit (app wires the emissions); it
	// seals signing secrets with firmware's keyring.
	"notify": {"db", "caller", "firmware"},
	// opstest sets up the task manager for the tests of operations and
	// its features; only tests import it (no rule lists it).
	"operations/opstest": {"db", "db/dbtest", "engine", "inventory", "backend", "firmware", "nico", "psm", "operations"},
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
				require.True(t, pkg == "nico" || pkg == "sim/nicosim", "%s imports NICo Core's generated code; only nico (and its simulator) may", pkg)
			case strings.HasPrefix(dep, "proto/gen/psm"):
				require.True(t, pkg == "psm" || pkg == "sim/psmsim", "%s imports PSM's generated code; only psm (and its simulator) may", pkg)
			case strings.HasPrefix(dep, "proto/gen/"), dep == pkg+"/internal/dbsqlc":
			default:
				require.Contains(t, allowed, dep, "%s may not import %s", pkg, dep)
			}
		}
	}
	require.Greater(t, seen, 10)
}
