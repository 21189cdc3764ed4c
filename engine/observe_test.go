package engine_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/engine"
)

// recorder is an engine.Observer that keeps what it hears.
type recorder struct {
	mu     sync.Mutex
	calls  []engine.CallEvent
	steps  []engine.StepEvent
	stages []engine.StageEvent
	runs   []engine.RunSummary
	groups int
}

func (r *recorder) CallEnded(_ context.Context, ev engine.CallEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, ev)
}

func (r *recorder) StepEnded(_ context.Context, ev engine.StepEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, ev)
}

func (r *recorder) StageStarted(_ context.Context, ev engine.StageEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stages = append(r.stages, ev)
}

func (r *recorder) RunEnded(_ context.Context, run engine.RunSummary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, run)
}

func (r *recorder) CheckpointCommitted(steps int, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.groups++
	}
}

// TestJobsTellTheTruth runs a two-stage plan whose second stage fails: every
// job carries the run's labels with its stage, step and action in its River
// metadata and tags; the failed step's job (one of the first stage's,
// handed on: its metadata names the step it works now) ends discarded with
// the step's error, the completed one completed; the run's timeout job is deleted
// with the run; and the observer heard each call, step, stage and the run's
// end, with the labels.
func TestJobsTellTheTruth(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	b := setup(t, engine.Config{Observer: rec})
	labels := map[string]string{"task_id": "6e3fa521-3a03-4987-a8c2-172fd0df92ca", "rack": "rack 7/a", "operation": "power_on"}
	id := b.start(t, engine.Plan{Labels: labels, Timeout: time.Hour, Stages: []engine.Stage{
		{Name: "first", Steps: []engine.Step{step("ok", testParams{}, "t1"), step("ok", testParams{}, "t3")}},
		{Name: "second", Steps: []engine.Step{{Name: "bad", Action: "test.record", Params: testParams{FailTimes: 5, Permanent: true}, Targets: []string{"t2"}}}},
	}})
	rep := b.wait(t, id)
	require.Equal(t, engine.StateFailed, rep.State)

	type job struct {
		Kind, State string
		Tags        []string
		Meta        map[string]any
		Errors      []struct{ Error string }
	}
	rows, err := b.pool.Query(context.Background(), `SELECT kind, state::text, tags, metadata, to_jsonb(errors) FROM river_job
		WHERE (args->>'run_id')::bigint = $1 OR (args->>'step_id')::bigint IN (SELECT id FROM engine_step WHERE run_id = $1) ORDER BY id`, id)
	require.NoError(t, err)
	defer rows.Close()
	var jobs []job
	for rows.Next() {
		var j job
		var meta, errs []byte
		require.NoError(t, rows.Scan(&j.Kind, &j.State, &j.Tags, &meta, &errs))
		require.NoError(t, json.Unmarshal(meta, &j.Meta))
		if len(errs) > 0 && string(errs) != "null" {
			require.NoError(t, json.Unmarshal(errs, &j.Errors))
		}
		jobs = append(jobs, j)
	}
	require.NoError(t, rows.Err())
	require.Len(t, jobs, 2, "a job per first-stage step, the second stage's step in one of them; the run's timeout job went with the run")
	ok, bad := jobs[0], jobs[1]
	if ok.State != "completed" {
		ok, bad = bad, ok
	}
	require.Equal(t, "engine.run_step", ok.Kind)
	require.Equal(t, "completed", ok.State)
	require.Equal(t, "ok", ok.Meta["step"])
	require.Equal(t, "first", ok.Meta["stage"])
	require.Equal(t, "test.record", ok.Meta["action"])
	for k, v := range labels {
		require.Equal(t, v, ok.Meta[k])
		require.Equal(t, v, bad.Meta[k], "the next stage's jobs carry the labels too")
	}
	require.ElementsMatch(t, []string{"6e3fa521-3a03-4987-a8c2-172fd0df92ca", "rack_7_a", "power_on", "test_record"}, ok.Tags)

	require.Equal(t, "discarded", bad.State)
	require.Equal(t, "second", bad.Meta["stage"])
	require.NotEmpty(t, bad.Errors)
	require.Contains(t, bad.Errors[len(bad.Errors)-1].Error, "test failure")

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.calls, 3)
	require.Equal(t, labels, rec.calls[0].Labels)
	require.Error(t, rec.calls[2].Err)
	require.Len(t, rec.steps, 3)
	require.Equal(t, engine.StateCompleted, rec.steps[0].State)
	require.Equal(t, engine.StateCompleted, rec.steps[1].State)
	require.Equal(t, engine.StateFailed, rec.steps[2].State)
	require.Equal(t, "bad", rec.steps[2].Step)
	require.Contains(t, rec.steps[2].Error, "test failure")
	require.Equal(t, labels, rec.steps[2].Labels)
	require.Positive(t, rec.steps[2].Duration)
	require.Len(t, rec.stages, 1)
	require.Equal(t, 1, rec.stages[0].Stage)
	require.Equal(t, "second", rec.stages[0].StageName)
	require.Equal(t, "first", rec.stages[0].Ended)
	require.Len(t, rec.runs, 1)
	require.Equal(t, engine.StateFailed, rec.runs[0].State)
	require.Equal(t, labels, rec.runs[0].Labels)
	require.Positive(t, rec.groups)
}
