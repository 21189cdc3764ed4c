package engine_test

import (
	"context"
	"errors"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/engine"
)

// TestHoldsAdmitWithinCapacity: 12 runs whose first step holds resource
// "a" (capacity 3) never have more than 3 of them between their first call
// and their end; every run completes; runs holding "b" (no capacity) start
// at once; the waiting steps say why while they wait.
func TestHoldsAdmitWithinCapacity(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	ctx := context.Background()
	require.NoError(t, b.engine.SetCapacity(ctx, b.pool, "a", 3))
	plan := func(res string) engine.Plan {
		first := step("surge", testParams{Block: 150 * time.Millisecond}, "t1")
		first.Holds = []engine.Hold{{Resource: res, Amount: 1, Label: "budget of " + res, Unit: "transitions"}}
		return engine.Plan{Stages: []engine.Stage{
			{Steps: []engine.Step{first}},
			{Steps: []engine.Step{step("settle", testParams{Block: 50 * time.Millisecond}, "t1")}},
		}}
	}
	var as, bs []engine.RunID
	for range 12 {
		as = append(as, b.start(t, plan("a")))
	}
	for range 3 {
		bs = append(bs, b.start(t, plan("b")))
	}
	// Seen while the wave runs: a waiting step's reason.
	var reason string
	require.Eventually(t, func() bool {
		err := b.pool.QueryRow(ctx, `SELECT coalesce(max(progress->>'message'), '') FROM engine_step WHERE state = 'running' AND progress->>'message' LIKE 'waiting for%'`).Scan(&reason)
		return err == nil && reason != ""
	}, 30*time.Second, 10*time.Millisecond)
	require.Regexp(t, `^waiting for budget of a: 3 of 3 transitions in progress`, reason)

	type span struct{ from, to time.Time }
	var spans []span
	for _, id := range as {
		rep := b.wait(t, id)
		require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
		calls := b.calls(t, id)
		require.NotEmpty(t, calls)
		spans = append(spans, span{calls[0].StartedAt, *rep.EndedAt})
	}
	for _, id := range bs {
		require.Equal(t, engine.StateCompleted, b.wait(t, id).State)
	}
	// At no run's start were 3 others in their span already.
	for i, s := range spans {
		n := 0
		for j, o := range spans {
			if i != j && !o.from.After(s.from) && o.to.After(s.from) {
				n++
			}
		}
		require.LessOrEqual(t, n, 2, "run %d started with %d others holding a", i, n)
	}
	// b has no capacity: its runs never waited (their first calls came
	// before the last a run's, which waited for three waves).
	var bFirst []time.Time
	for _, id := range bs {
		bFirst = append(bFirst, b.calls(t, id)[0].StartedAt)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from.Before(spans[j].from) })
	require.True(t, slices.MaxFunc(bFirst, func(x, y time.Time) int { return x.Compare(y) }).Before(spans[len(spans)-1].from))
	use, err := b.engine.Resources(ctx, b.pool, []string{"a", "b"})
	require.NoError(t, err)
	require.Equal(t, []engine.ResourceUse{{Name: "a", Capacity: 3}, {Name: "b"}}, use)
}

// TestHoldsRefuseBadInput: bad holds and capacities are refused.
func TestHoldsRefuseBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	ctx := context.Background()
	for _, hs := range [][]engine.Hold{{{Resource: ""}}, {{Resource: "x", Amount: -1}}, {{Resource: "x"}, {Resource: "x"}}} {
		s := step("s", testParams{}, "t")
		s.Holds = hs
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.engine.Start(ctx, tx, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{s}}}})
			return err
		})
		require.True(t, errors.Is(err, engine.ErrInvalidHold), "%v: %v", hs, err)
	}
	require.ErrorIs(t, b.engine.SetCapacity(ctx, b.pool, "x", 0), engine.ErrInvalidCapacity)
	require.ErrorIs(t, b.engine.SetCapacity(ctx, b.pool, "", 1), engine.ErrInvalidCapacity)
}
