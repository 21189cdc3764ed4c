package rollout_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/operations/rollout"
)

func TestPhaseSizes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		n    int
		plan rollout.PhasePlan
		want []int
		err  string
	}{
		{name: "Equal10By3", n: 10, plan: rollout.PhasePlan{Kind: rollout.PhasesEqual, Count: 3}, want: []int{4, 3, 3}},
		{name: "Equal5By3", n: 5, plan: rollout.PhasePlan{Kind: rollout.PhasesEqual, Count: 3}, want: []int{2, 2, 1}},
		{name: "Equal1", n: 7, plan: rollout.PhasePlan{Kind: rollout.PhasesEqual, Count: 1}, want: []int{7}},
		{name: "Percentage10_30_60", n: 10, plan: rollout.PhasePlan{Kind: rollout.PhasesPercentage, Percentages: []int{10, 30, 60}}, want: []int{1, 3, 6}},
		{name: "Percentage7_50_50", n: 7, plan: rollout.PhasePlan{Kind: rollout.PhasesPercentage, Percentages: []int{50, 50}}, want: []int{4, 3}},
		{name: "Count2_3", n: 10, plan: rollout.PhasePlan{Kind: rollout.PhasesCount, Counts: []int{2, 3}}, want: []int{2, 3, 5}},
		{name: "CountExact", n: 5, plan: rollout.PhasePlan{Kind: rollout.PhasesCount, Counts: []int{2, 3}}, want: []int{2, 3}},
		{name: "CountTooMany", n: 4, plan: rollout.PhasePlan{Kind: rollout.PhasesCount, Counts: []int{2, 3}}, err: "phase_policy.count.phases"},
		{name: "EqualEmptyPhase", n: 2, plan: rollout.PhasePlan{Kind: rollout.PhasesEqual, Count: 3}, err: "phase 2 would have no targets"},
		{name: "PercentageEmptyPhase", n: 1, plan: rollout.PhasePlan{Kind: rollout.PhasesPercentage, Percentages: []int{50, 50}}, err: "phase 1 would have no targets"},
		{name: "Empty", n: 0, plan: rollout.PhasePlan{Kind: rollout.PhasesEqual, Count: 1}, err: "selects no targets"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := rollout.PhaseSizes(tt.n, tt.plan)
			if tt.err != "" {
				require.ErrorIs(t, err, rollout.ErrRunInvalid)
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func candidates(n int) []rollout.Candidate {
	out := make([]rollout.Candidate, n)
	for i := range out {
		out[i] = rollout.Candidate{RackID: uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "rack-%d", i))}
	}
	return out
}

func TestSelectCandidates(t *testing.T) {
	t.Parallel()
	cands := candidates(40)
	first := rollout.SelectCandidates(cands, 25, "seed-a")
	require.Len(t, first, 10)
	// Stable for a seed whatever the input order.
	shuffled := append([]rollout.Candidate(nil), cands...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	require.Equal(t, first, rollout.SelectCandidates(shuffled, 25, "seed-a"))
	// A larger share of the same seed keeps the smaller one as its prefix.
	require.Equal(t, first, rollout.SelectCandidates(cands, 50, "seed-a")[:10])
	// Another seed picks another set.
	require.NotEqual(t, first, rollout.SelectCandidates(cands, 25, "seed-b"))
	// Ceiling: 1 % of 3 is 1.
	require.Len(t, rollout.SelectCandidates(candidates(3), 1, "x"), 1)
	require.Len(t, rollout.SelectCandidates(candidates(3), 100, "x"), 3)
}

func TestOrderTargets(t *testing.T) {
	t.Parallel()
	cands := candidates(12)
	random := rollout.OrderTargets(cands, rollout.Ordering{Kind: rollout.OrderingRandom, Seed: "o1"})
	require.ElementsMatch(t, cands, random)
	require.Equal(t, random, rollout.OrderTargets(random, rollout.Ordering{Kind: rollout.OrderingRandom, Seed: "o1"}), "seeded order is stable")
	require.NotEqual(t, random, rollout.OrderTargets(cands, rollout.Ordering{Kind: rollout.OrderingRandom, Seed: "o2"}))

	// Three rows of sizes 3, 2, 1; positions need natural order (G9 < G10).
	loc := []struct{ row, pos string }{{"dc/b", "G10"}, {"dc/a", "G2"}, {"dc/b", "G9"}, {"dc/c", "G1"}, {"dc/a", "G1"}, {"dc/a", "G10"}}
	var racks []rollout.Candidate
	for i, l := range loc {
		c := cands[i]
		c.Row, c.Position = l.row, l.pos
		racks = append(racks, c)
	}
	label := func(cs []rollout.Candidate) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Row+"@"+c.Position)
		}
		return out
	}
	require.Equal(t, []string{"dc/a@G1", "dc/a@G2", "dc/a@G10", "dc/b@G9", "dc/b@G10", "dc/c@G1"},
		label(rollout.OrderTargets(racks, rollout.Ordering{Kind: rollout.OrderingPhysicalLocation, Strategy: rollout.StrategyRowByRow})))
	require.Equal(t, []string{"dc/a@G1", "dc/b@G9", "dc/c@G1", "dc/a@G2", "dc/b@G10", "dc/a@G10"},
		label(rollout.OrderTargets(racks, rollout.Ordering{Kind: rollout.OrderingPhysicalLocation, Strategy: rollout.StrategyOnePerRowRoundRobin})))
}

func TestPlanTargets(t *testing.T) {
	t.Parallel()
	cands := candidates(20)
	opts := rollout.RunOptions{
		Ordering: rollout.Ordering{Kind: rollout.OrderingRandom, Seed: "ord"},
		Phases:   rollout.PhasePlan{Kind: rollout.PhasesEqual, Count: 3},
	}
	plan, phases, err := rollout.PlanTargets(cands, rollout.Selector{Percentage: 50, Seed: "sel"}, opts)
	require.NoError(t, err)
	require.Equal(t, 3, phases)
	require.Len(t, plan, 10)
	counts := map[int]int{}
	for i, p := range plan {
		require.Equal(t, i, p.Sequence)
		counts[p.Phase]++
		if i > 0 {
			require.GreaterOrEqual(t, p.Phase, plan[i-1].Phase)
		}
	}
	require.Equal(t, map[int]int{0: 4, 1: 3, 2: 3}, counts)
	again, _, err := rollout.PlanTargets(cands, rollout.Selector{Percentage: 50, Seed: "sel"}, opts)
	require.NoError(t, err)
	require.Equal(t, plan, again)
}
