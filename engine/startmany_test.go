package engine_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/engine"
)

// TestStartMany: runs started together each get their own steps, stages,
// labels, trace context and timeout, and all complete; a bad plan among
// them is named by its index, and nothing of any is written.
func TestStartMany(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	ctx := context.Background()
	traceparent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	plans := []engine.Plan{
		{Owner: "a", Labels: map[string]string{"task_id": "task-a"}, Stages: []engine.Stage{
			{Name: "one", Steps: []engine.Step{step("a1", testParams{}, "t1"), step("a2", testParams{}, "t2")}},
			{Name: "two", Steps: []engine.Step{step("a3", testParams{}, "t3")}},
		}},
		{Owner: "b", Timeout: time.Hour, Trace: map[string]string{"traceparent": traceparent}, Stages: []engine.Stage{
			{Name: "only", Steps: []engine.Step{step("b1", testParams{}, "t1")}},
		}},
		{Owner: "c", Timeout: 2 * time.Hour, Stages: []engine.Stage{
			{Name: "x", Steps: []engine.Step{step("c1", testParams{}, "t1")}},
			{Name: "y", Steps: []engine.Step{step("c2", testParams{}, "t1"), step("c3", testParams{}, "t2")}},
		}},
	}
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	ids, err := b.engine.StartMany(ctx, tx, plans)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Len(t, ids, 3)
	require.Len(t, map[engine.RunID]bool{ids[0]: true, ids[1]: true, ids[2]: true}, 3)

	for i, id := range ids {
		rep := b.wait(t, id)
		require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
		require.Equal(t, plans[i].Owner, rep.Owner)
		require.Len(t, rep.Stages, len(plans[i].Stages))
		for s, st := range rep.Stages {
			require.Len(t, st.Steps, len(plans[i].Stages[s].Steps))
			for j, step := range st.Steps {
				require.Equal(t, plans[i].Stages[s].Steps[j].Name, step.Name)
			}
		}
		if plans[i].Timeout > 0 {
			require.Equal(t, rep.CreatedAt.Add(plans[i].Timeout).Truncate(time.Millisecond), rep.TimeoutAt.Truncate(time.Millisecond))
		} else {
			require.Nil(t, rep.TimeoutAt)
		}
	}
	// Each run with a timeout had its own timeout job, recorded on it and
	// deleted when the run ended.
	var recorded, left int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(DISTINCT r.timeout_job_id), count(j.id) FROM engine_run r
		LEFT JOIN river_job j ON j.id = r.timeout_job_id
		WHERE r.id = ANY($1)`, []int64{int64(ids[0]), int64(ids[1]), int64(ids[2])}).Scan(&recorded, &left))
	require.Equal(t, 2, recorded)
	require.Zero(t, left, "the ended runs' timeout jobs went with them")
	// The first stage's jobs carry their plan's labels and trace context;
	// a's second stage went on in one of them, which names it now.
	rows, err := b.pool.Query(ctx, `SELECT (args->>'step_id')::bigint, metadata FROM river_job WHERE kind = 'engine.run_step'
		AND (args->>'step_id')::bigint IN (SELECT id FROM engine_step WHERE run_id = ANY($1))`,
		[]int64{int64(ids[0]), int64(ids[1])})
	require.NoError(t, err)
	metas := map[string]int{}
	var handedOn []any
	for rows.Next() {
		var stepID int64
		var meta map[string]any
		require.NoError(t, rows.Scan(&stepID, &meta))
		require.Equal(t, strconv.FormatInt(stepID, 10), meta["step_id"])
		switch {
		case meta["task_id"] == "task-a":
			require.Nil(t, meta["traceparent"])
			metas["a"]++
			if meta["stage"] == "two" {
				handedOn = append(handedOn, meta["step"])
			}
		case meta["traceparent"] == traceparent:
			metas["b"]++
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"a": 2, "b": 1}, metas)
	require.Equal(t, []any{"a3"}, handedOn)

	t.Run("BadPlanNamed", func(t *testing.T) {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
		var before int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM engine_run`).Scan(&before))
		bad := engine.Plan{Metadata: json.RawMessage(`[1]`), Stages: plans[1].Stages}
		_, err = b.engine.StartMany(ctx, tx, []engine.Plan{plans[0], bad, plans[2]})
		var pe *engine.PlanError
		require.ErrorAs(t, err, &pe)
		require.ErrorIs(t, err, engine.ErrInvalidMetadata)
		require.Equal(t, 1, pe.Plan)
		var after int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM engine_run`).Scan(&after))
		require.Equal(t, before, after)
	})
}

// TestUrgentRunsJobsComeFirst: every job of an urgent run, its later
// stages' included, is on the urgent queue (its own workers) with River
// priority 1 (fetched before any other job waiting), every job of another
// run on the engine queue with priority 2, and the urgent run's jobs are
// tagged "urgent".
func TestUrgentRunsJobsComeFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, engine.Config{})
	ctx := context.Background()
	two := func(owner string, urgent bool) engine.Plan {
		return engine.Plan{Owner: owner, Urgent: urgent, Labels: map[string]string{"task_id": owner}, Stages: []engine.Stage{
			{Name: "one", Steps: []engine.Step{step(owner+"1", testParams{}, "t1"), step(owner+"2", testParams{}, "t2")}},
			{Name: "two", Steps: []engine.Step{step(owner+"3", testParams{}, "t3")}},
		}}
	}
	plans := []engine.Plan{two("normal", false), two("leak", true)}
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	ids, err := b.engine.StartMany(ctx, tx, plans)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.NotContains(t, plans[1].Labels, "priority", "the caller's plans are left as they were")
	for i, id := range ids {
		require.Equal(t, engine.StateCompleted, b.wait(t, id).State)
		rows, err := b.pool.Query(ctx, `SELECT priority, queue, tags FROM river_job WHERE kind = 'engine.run_step'
			AND (args->>'step_id')::bigint IN (SELECT id FROM engine_step WHERE run_id = $1)`, int64(id))
		require.NoError(t, err)
		n := 0
		for rows.Next() {
			var priority int
			var queue string
			var tags []string
			require.NoError(t, rows.Scan(&priority, &queue, &tags))
			if i == 1 {
				require.Equal(t, 1, priority)
				require.Equal(t, engine.UrgentQueue, queue)
				require.Contains(t, tags, "urgent")
			} else {
				require.Equal(t, 2, priority)
				require.Equal(t, engine.QueueName, queue)
				require.NotContains(t, tags, "urgent")
			}
			n++
		}
		require.NoError(t, rows.Err())
		require.Positive(t, n)
	}
}
