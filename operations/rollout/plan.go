package rollout

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/nicoflow/flow/operations"
)

// Candidate is one rack an operation run may target: the components it
// would run on, and where the rack stands (for physical-location ordering).
type Candidate struct {
	RackID     uuid.UUID
	Components map[operations.ComponentType][]uuid.UUID
	Row        string // location region/datacenter/room: racks sharing it form a row
	Position   string // location position inside the row
}

// PlannedTarget is a candidate placed in a run: its sequence and phase.
type PlannedTarget struct {
	Candidate
	Sequence int
	Phase    int
}

// seededOrder orders racks by SHA-256 of "<seed>:<rack uuid>", ties by the
// rack UUID string (spec/orchestration.md §2.3).
func seededOrder(seed string, cands []Candidate) []Candidate {
	type keyed struct {
		h [32]byte
		c Candidate
	}
	ks := make([]keyed, len(cands))
	for i, c := range cands {
		ks[i] = keyed{sha256.Sum256([]byte(seed + ":" + c.RackID.String())), c}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		if d := slices.Compare(a.h[:], b.h[:]); d != 0 {
			return d
		}
		return strings.Compare(a.c.RackID.String(), b.c.RackID.String())
	})
	out := make([]Candidate, len(ks))
	for i, k := range ks {
		out[i] = k.c
	}
	return out
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int) int { return (a + b - 1) / b }

// SelectCandidates returns the ⌈n·pct/100⌉ candidates first in the seeded
// hash order (1 % of 3 selects 1). The result depends only on the seed and
// the candidate set, not on the input order.
func SelectCandidates(cands []Candidate, pct int, seed string) []Candidate {
	ordered := seededOrder(seed, cands)
	return ordered[:ceilDiv(len(ordered)*pct, 100)]
}

// OrderTargets orders selected candidates for execution: random (the seeded
// hash order with the ordering seed) or physical location, row by row or
// one rack per row in turn. Rows are sorted by name, racks in a row by
// position then UUID.
func OrderTargets(cands []Candidate, o Ordering) []Candidate {
	if o.Kind != OrderingPhysicalLocation {
		return seededOrder(o.Seed, cands)
	}
	byRow := map[string][]Candidate{}
	var rows []string
	for _, c := range cands {
		if _, ok := byRow[c.Row]; !ok {
			rows = append(rows, c.Row)
		}
		byRow[c.Row] = append(byRow[c.Row], c)
	}
	slices.Sort(rows)
	for _, r := range rows {
		slices.SortFunc(byRow[r], func(a, b Candidate) int {
			return cmp.Or(comparePosition(a.Position, b.Position), strings.Compare(a.RackID.String(), b.RackID.String()))
		})
	}
	out := make([]Candidate, 0, len(cands))
	if o.Strategy == StrategyRowByRow {
		for _, r := range rows {
			out = append(out, byRow[r]...)
		}
		return out
	}
	for i := 0; len(out) < len(cands); i++ {
		for _, r := range rows {
			if i < len(byRow[r]) {
				out = append(out, byRow[r][i])
			}
		}
	}
	return out
}

// comparePosition compares positions "naturally": digit runs by value, so
// "G9" sorts before "G10".
func comparePosition(a, b string) int {
	for a != "" && b != "" {
		da, db := leadingDigits(a), leadingDigits(b)
		if da != "" && db != "" {
			na, nb := strings.TrimLeft(da, "0"), strings.TrimLeft(db, "0")
			if d := cmp.Compare(len(na), len(nb)); d != 0 {
				return d
			}
			if d := strings.Compare(na, nb); d != 0 {
				return d
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// PhaseSizes splits n ordered targets into phases (spec §2.3, cumulative
// ceiling boundaries): equal (phase i gets ⌈n(i+1)/k⌉ − ⌈ni/k⌉), percentage
// (boundary ⌈n·Σp/100⌉) or count (the listed counts, then a remainder phase
// when targets are left). An empty plan, counts exceeding n and any phase
// of size 0 are a *RunError naming the field.
func PhaseSizes(n int, p PhasePlan) ([]int, error) {
	if n == 0 {
		return nil, runInvalid("configuration.selector", "the plan selects no targets")
	}
	var sizes []int
	switch p.Kind {
	case PhasesEqual:
		k := p.Count
		for i := range k {
			sizes = append(sizes, ceilDiv(n*(i+1), k)-ceilDiv(n*i, k))
		}
	case PhasesPercentage:
		sum, prev := 0, 0
		for _, pct := range p.Percentages {
			sum += pct
			b := ceilDiv(n*sum, 100)
			sizes = append(sizes, b-prev)
			prev = b
		}
	case PhasesCount:
		left := n
		for _, c := range p.Counts {
			if c > left {
				return nil, runInvalid("configuration.options.phase_policy.count.phases", "the phase counts add up to more than the %d selected targets", n)
			}
			sizes = append(sizes, c)
			left -= c
		}
		if left > 0 {
			sizes = append(sizes, left)
		}
	default:
		return nil, runInvalid("configuration.options.phase_policy", "unknown phase plan %q", p.Kind)
	}
	for i, s := range sizes {
		if s == 0 {
			return nil, runInvalid("configuration.options.phase_policy", "phase %d would have no targets (%d targets selected)", i, n)
		}
	}
	return sizes, nil
}

// PlanTargets runs selection, ordering and phasing over the candidates and
// returns the frozen targets in sequence order.
func PlanTargets(cands []Candidate, sel Selector, opts RunOptions) ([]PlannedTarget, int, error) {
	chosen := SelectCandidates(cands, sel.Percentage, sel.Seed)
	ordered := OrderTargets(chosen, opts.Ordering)
	sizes, err := PhaseSizes(len(ordered), opts.Phases)
	if err != nil {
		return nil, 0, err
	}
	out := make([]PlannedTarget, 0, len(ordered))
	seq := 0
	for phase, size := range sizes {
		for range size {
			out = append(out, PlannedTarget{Candidate: ordered[seq], Sequence: seq, Phase: phase})
			seq++
		}
	}
	if seq != len(ordered) {
		return nil, 0, fmt.Errorf("phases cover %d of %d targets", seq, len(ordered))
	}
	return out, len(sizes), nil
}

// PlanWaves places the candidates in fixed waves: phase i holds the racks
// of waves[i], in that order. A rack named in no candidate, or twice, is a
// *RunError; candidates no wave names are left out.
func PlanWaves(cands []Candidate, waves [][]uuid.UUID) ([]PlannedTarget, error) {
	byRack := make(map[uuid.UUID]Candidate, len(cands))
	for _, c := range cands {
		byRack[c.RackID] = c
	}
	var out []PlannedTarget
	seen := map[uuid.UUID]bool{}
	for phase, w := range waves {
		if len(w) == 0 {
			return nil, runInvalid("waves", "wave %d has no racks", phase)
		}
		for _, id := range w {
			c, ok := byRack[id]
			switch {
			case !ok:
				return nil, runInvalid("waves", "rack %s of wave %d has no matching components", id, phase)
			case seen[id]:
				return nil, runInvalid("waves", "rack %s is in more than one wave", id)
			}
			seen[id] = true
			out = append(out, PlannedTarget{Candidate: c, Sequence: len(out), Phase: phase})
		}
	}
	return out, nil
}

// excludeComponents removes, component by component, what earlier runs
// already targeted; racks left empty disappear.
func excludeComponents(cands []Candidate, taken map[uuid.UUID]map[operations.ComponentType][]uuid.UUID) []Candidate {
	out := cands[:0:0]
	for _, c := range cands {
		prev, ok := taken[c.RackID]
		if !ok {
			out = append(out, c)
			continue
		}
		left := map[operations.ComponentType][]uuid.UUID{}
		for ct, ids := range c.Components {
			for _, id := range ids {
				if !slices.Contains(prev[ct], id) {
					left[ct] = append(left[ct], id)
				}
			}
		}
		if len(left) > 0 {
			c.Components = left
			out = append(out, c)
		}
	}
	return out
}
