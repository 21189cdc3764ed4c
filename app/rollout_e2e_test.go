package app

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/rollout"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim"
)

// rolloutBench is a firmware bench with n racks.
type rolloutBench struct {
	*fwBench
	racks []inventory.Rack
}

func newRolloutBench(t *testing.T, n int, phase time.Duration) *rolloutBench {
	t.Helper()
	b := &rolloutBench{fwBench: newFWBench(t, phase)}
	for i := range n {
		b.racks = append(b.racks, b.addRack(t, 300+i, false))
	}
	return b
}

// rolloutRequest is a create request over the whole site with the given
// options; mutate it further as needed.
type rolloutOpts struct {
	pct, concurrency int
	phases           *flowv1.OperationRunPhasePolicy
	gates            []*flowv1.OperationRunSafetyGate
	retry            *flowv1.OperationRunConflictRetryPolicy
	seed             string
}

func rolloutRequest(name string, o rolloutOpts) *flowv1.CreateOperationRunRequest {
	if o.pct == 0 {
		o.pct = 100
	}
	if len(o.gates) == 0 {
		o.gates = []*flowv1.OperationRunSafetyGate{rateGate(50)}
	}
	opts := &flowv1.OperationRunOptions{
		MaxConcurrentTargets: int32(o.concurrency),
		SafetyPolicy:         &flowv1.OperationRunSafetyPolicy{Gates: o.gates},
		PhasePolicy:          o.phases,
		OrderingPolicy:       &flowv1.OperationRunOrderingPolicy{Ordering: &flowv1.OperationRunOrderingPolicy_Random{Random: &flowv1.OperationRunRandomOrdering{Seed: o.seed}}},
	}
	if o.retry != nil {
		opts.ConflictPolicy = &flowv1.OperationRunConflictPolicy{Strategy: &flowv1.OperationRunConflictPolicy_Retry{Retry: o.retry}}
	}
	return &flowv1.CreateOperationRunRequest{
		Name: name,
		Configuration: &flowv1.OperationRunConfiguration{
			Selector:  &flowv1.OperationRunSelector{Selector: &flowv1.OperationRunSelector_Percentage{Percentage: &flowv1.PercentageSelector{Percentage: int32(o.pct), Seed: "select"}}},
			Options:   opts,
			Operation: &flowv1.OperationRunOperation{Operation: &flowv1.OperationRunOperation_UpgradeFirmware{UpgradeFirmware: &flowv1.UpgradeFirmwareRequest{TargetVersion: ptr("2.0")}}},
		},
	}
}

func rateGate(pct int32) *flowv1.OperationRunSafetyGate {
	return &flowv1.OperationRunSafetyGate{Gate: &flowv1.OperationRunSafetyGate_FailureRate{FailureRate: &flowv1.OperationRunFailureRateGate{FailureThresholdPercent: pct}}}
}

func countGate(n int32) *flowv1.OperationRunSafetyGate {
	return &flowv1.OperationRunSafetyGate{Gate: &flowv1.OperationRunSafetyGate_FailureCount{FailureCount: &flowv1.OperationRunFailureCountGate{FailureThresholdCount: n}}}
}

func equalPhases(k int32, auto bool) *flowv1.OperationRunPhasePolicy {
	return &flowv1.OperationRunPhasePolicy{
		Plan:          &flowv1.OperationRunPhasePolicy_Equal{Equal: &flowv1.EqualOperationRunPhases{PhaseCount: k}},
		AdvancePolicy: &flowv1.OperationRunPhaseAdvancePolicy{AutoAdvance: auto},
	}
}

func createRun(t testing.TB, c flowv1connect.FlowClient, req *flowv1.CreateOperationRunRequest) *flowv1.UUID {
	t.Helper()
	res, err := c.CreateOperationRun(context.Background(), req)
	require.NoError(t, err)
	return res.GetId()
}

func getRun(t testing.TB, c flowv1connect.FlowClient, id *flowv1.UUID) *flowv1.OperationRun {
	t.Helper()
	res, err := c.GetOperationRun(context.Background(), &flowv1.GetOperationRunRequest{Id: id, IncludeStats: true})
	require.NoError(t, err)
	return res.GetOperationRun()
}

// waitRun polls a run until cond holds and returns it.
func waitRun(t testing.TB, c flowv1connect.FlowClient, id *flowv1.UUID, within time.Duration, cond func(*flowv1.OperationRun) bool) *flowv1.OperationRun {
	t.Helper()
	var run *flowv1.OperationRun
	require.Eventually(t, func() bool {
		run = getRun(t, c, id)
		return cond(run)
	}, within, 20*time.Millisecond, "run state: %v", func() any { return run.GetSummary() })
	return run
}

func runIs(status flowv1.OperationRunStatus, reason flowv1.OperationRunStatusReason) func(*flowv1.OperationRun) bool {
	return func(r *flowv1.OperationRun) bool {
		return r.GetSummary().GetState().GetStatus() == status && r.GetSummary().GetState().GetReason() == reason
	}
}

func allTargets(t testing.TB, c flowv1connect.FlowClient, id *flowv1.UUID) []*flowv1.OperationRunTarget {
	t.Helper()
	res, err := c.ListOperationRunTargets(context.Background(), &flowv1.ListOperationRunTargetsRequest{
		OperationRunId: id, PhaseScope: flowv1.OperationRunTargetPhaseScope_OPERATION_RUN_TARGET_PHASE_SCOPE_CURRENT_AND_COMPLETED_PHASES,
	})
	require.NoError(t, err)
	return res.GetTargets()
}

// maxOverlap is the most child tasks of run id that ran at once, from the
// tasks' start and finish times (started_at is stamped when the first step
// runs, after the creating transaction commits; created_at, the creating
// transaction's start, can precede the end of the child whose slot it
// took).
func maxOverlap(t testing.TB, dbURL string, id *flowv1.UUID) int {
	t.Helper()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT coalesce(max(c), 0) FROM (
			SELECT (SELECT count(*) FROM task o WHERE o.trigger_id = $1 AND o.started_at <= t.started_at AND coalesce(o.finished_at, 'infinity') > t.started_at) AS c
			FROM task t WHERE t.trigger_id = $1) s`, id.GetId()).Scan(&n))
	return n
}

// TestRolloutThreePhases: 20 racks, three auto-advancing phases (7, 7, 6),
// at most 4 at once; every rack is upgraded once and the run completes.
func TestRolloutThreePhases(t *testing.T) {
	t.Parallel()
	b := newRolloutBench(t, 20, time.Millisecond)
	srv := b.serve(t, nil, nil)
	id := createRun(t, srv.client, rolloutRequest("three phases", rolloutOpts{concurrency: 4, phases: equalPhases(3, true)}))
	run := waitRun(t, srv.client, id, 3*time.Minute, func(r *flowv1.OperationRun) bool {
		return r.GetSummary().GetFinishedAt() != nil
	})
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED, run.GetSummary().GetState().GetStatus(), run.GetSummary().GetStatusMessage())
	require.EqualValues(t, 3, run.GetSummary().GetTotalPhases())
	require.EqualValues(t, 2, run.GetStats().GetCurrentPhaseStats().GetPhaseIndex())
	require.EqualValues(t, 20, run.GetStats().GetCumulativePhaseStats().GetOutcomeCounts().GetCompleted())
	require.NotEmpty(t, run.GetConfiguration().GetOptions().GetOrderingPolicy().GetRandom().GetSeed())
	require.Equal(t, 30*time.Second, run.GetConfiguration().GetOptions().GetConflictPolicy().GetRetry().GetInitialRetryDelay().AsDuration(), "defaults are stored")
	targets := allTargets(t, srv.client, id)
	require.Len(t, targets, 20)
	phases := map[int32]int{}
	for i, tg := range targets {
		require.EqualValues(t, i, tg.GetSequenceIndex())
		require.Equal(t, flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_COMPLETED, tg.GetStatus(), tg.GetMessage())
		require.NotEmpty(t, tg.GetTaskId().GetId())
		phases[tg.GetPhaseIndex()]++
	}
	require.Equal(t, map[int32]int{0: 7, 1: 7, 2: 6}, phases)
	for _, r := range b.racks {
		for _, mac := range macs(r, inventory.ComponentTypeCompute) {
			require.Equal(t, 1, b.sims.nico.Journal().CountFor("UpdateComponentFirmware", mac), mac)
		}
	}
	overlap := maxOverlap(t, b.dbURL, id)
	require.LessOrEqual(t, overlap, 4)
	require.GreaterOrEqual(t, overlap, 2, "targets ran concurrently")
	t.Logf("%d children at most at once; %s from start to finish", overlap, run.GetSummary().GetFinishedAt().AsTime().Sub(run.GetSummary().GetStartedAt().AsTime()).Round(time.Millisecond))
}

// TestRolloutPhaseGates: with manual advancement the run pauses after each
// phase until it is advanced (with the right expected index).
func TestRolloutPhaseGates(t *testing.T) {
	t.Parallel()
	b := newRolloutBench(t, 6, time.Millisecond)
	srv := b.serve(t, nil, nil)
	ctx := context.Background()
	id := createRun(t, srv.client, rolloutRequest("gated", rolloutOpts{concurrency: 2, phases: equalPhases(3, false)}))
	gate := runIs(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_PHASE_GATE)
	for phase := int32(0); phase < 2; phase++ {
		run := waitRun(t, srv.client, id, time.Minute, gate)
		require.Equal(t, phase, run.GetStats().GetCurrentPhaseStats().GetPhaseIndex())
		require.EqualValues(t, 2, run.GetStats().GetCurrentPhaseStats().GetOutcomeCounts().GetCompleted())
		require.EqualValues(t, 2*(phase+1), run.GetStats().GetCumulativePhaseStats().GetOutcomeCounts().GetCompleted())
		time.Sleep(200 * time.Millisecond)
		require.Len(t, tasksOf(t, srv.client, id), int(2*(phase+1)), "nothing of the next phase starts at a gate")
		_, err := srv.client.ResumeOperationRun(ctx, &flowv1.ResumeOperationRunRequest{Id: id})
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "a phase gate is advanced, not resumed: %v", err)
		_, err = srv.client.AdvanceOperationRunPhase(ctx, &flowv1.AdvanceOperationRunPhaseRequest{Id: id, ExpectedPhaseIndex: ptr(phase + 2)})
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
		require.Contains(t, err.Error(), "expected_phase_index")
		require.True(t, gate(getRun(t, srv.client, id)), "a rejected advance changes nothing")
		out, err := srv.client.AdvanceOperationRunPhase(ctx, &flowv1.AdvanceOperationRunPhaseRequest{Id: id, ExpectedPhaseIndex: ptr(phase + 1)})
		require.NoError(t, err)
		require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_RUNNING, out.GetSummary().GetState().GetStatus())
		require.Equal(t, phase+1, getRun(t, srv.client, id).GetStats().GetCurrentPhaseStats().GetPhaseIndex())
	}
	run := waitRun(t, srv.client, id, time.Minute, func(r *flowv1.OperationRun) bool { return r.GetSummary().GetFinishedAt() != nil })
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED, run.GetSummary().GetState().GetStatus())
	_, err := srv.client.AdvanceOperationRunPhase(ctx, &flowv1.AdvanceOperationRunPhaseRequest{Id: id})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "controls on a terminal run")
	_, err = srv.client.PauseOperationRun(ctx, &flowv1.PauseOperationRunRequest{Id: id})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
}

func tasksOf(t testing.TB, c flowv1connect.FlowClient, id *flowv1.UUID) []string {
	t.Helper()
	var out []string
	for _, tg := range allTargets(t, c, id) {
		if tg.GetTaskId() != nil {
			out = append(out, tg.GetTaskId().GetId())
		}
	}
	return out
}

// planOrder is the order the run will take the bench's racks in (all
// selected, random ordering with seed).
func planOrder(racks []inventory.Rack, seed string) []inventory.Rack {
	cands := make([]rollout.Candidate, len(racks))
	byID := map[uuid.UUID]inventory.Rack{}
	for i, r := range racks {
		cands[i] = rollout.Candidate{RackID: r.ID}
		byID[r.ID] = r
	}
	var out []inventory.Rack
	for _, c := range rollout.OrderTargets(cands, rollout.Ordering{Kind: rollout.OrderingRandom, Seed: seed}) {
		out = append(out, byID[c.RackID])
	}
	return out
}

// TestRolloutSafetyGate: two racks fail; a count gate of 2 pauses the run,
// no further target is claimed while the running children finish; resuming
// acknowledges the two failures and the run finishes with failures.
func TestRolloutSafetyGate(t *testing.T) {
	t.Parallel()
	b := newRolloutBench(t, 10, 20*time.Millisecond)
	order := planOrder(b.racks, "gate-seed")
	for _, r := range order[:2] {
		_, err := b.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultFail, Method: "UpdateComponentFirmware", Device: macs(r, inventory.ComponentTypeCompute)[0], Phase: "in_progress", Message: "flash write error"})
		require.NoError(t, err)
	}
	srv := b.serve(t, nil, nil)
	ctx := context.Background()
	id := createRun(t, srv.client, rolloutRequest("gated by failures", rolloutOpts{concurrency: 3, gates: []*flowv1.OperationRunSafetyGate{countGate(2)}, seed: "gate-seed"}))
	run := waitRun(t, srv.client, id, time.Minute, runIs(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_SAFETY_GATE))
	require.Contains(t, run.GetSummary().GetStatusMessage(), "safety gate 0 tripped: 2 targets failed")
	// Children already running finish; nothing new is claimed.
	require.Eventually(t, func() bool {
		for _, tg := range allTargets(t, srv.client, id) {
			if tg.GetStatus() == flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_SUBMITTED {
				return false
			}
		}
		return true
	}, time.Minute, 20*time.Millisecond)
	claimed := tasksOf(t, srv.client, id)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, claimed, tasksOf(t, srv.client, id), "no claims while paused")
	require.Less(t, len(claimed), 10)
	run = getRun(t, srv.client, id)
	require.EqualValues(t, 2, run.GetStats().GetCurrentPhaseStats().GetOutcomeCounts().GetFailed())
	require.True(t, runIs(flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED, flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_SAFETY_GATE)(run), "stays paused as children end")
	// Resume acknowledges the failures seen: the gate does not re-trip at once.
	out, err := srv.client.ResumeOperationRun(ctx, &flowv1.ResumeOperationRunRequest{Id: id})
	require.NoError(t, err)
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_RUNNING, out.GetSummary().GetState().GetStatus(), out.GetSummary().GetStatusMessage())
	run = waitRun(t, srv.client, id, time.Minute, func(r *flowv1.OperationRun) bool { return r.GetSummary().GetFinishedAt() != nil })
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED_WITH_FAILURES, run.GetSummary().GetState().GetStatus(), run.GetSummary().GetStatusMessage())
	require.EqualValues(t, 8, run.GetStats().GetCumulativePhaseStats().GetOutcomeCounts().GetCompleted())
	for _, r := range order[:2] {
		for _, tg := range allTargets(t, srv.client, id) {
			if tg.GetRackId().GetId() == r.ID.String() {
				require.Equal(t, flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_FAILED, tg.GetStatus())
				require.Contains(t, tg.GetMessage(), "flash write error") // the fault injected on that rack's tray
			}
		}
	}
}

// TestRolloutBusyRack: a rack busy with another task blocks its target,
// which retries with backoff and runs as soon as the rack is free.
func TestRolloutBusyRack(t *testing.T) {
	t.Parallel()
	b := newRolloutBench(t, 3, time.Millisecond)
	busy := b.racks[1]
	fid, err := b.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultStuck, Method: "UpdateComponentFirmware", Device: macs(busy, inventory.ComponentTypeCompute)[0], Phase: "in_progress", Times: 1})
	require.NoError(t, err)
	srv := b.serve(t, nil, nil)
	ctx := context.Background()
	other, err := srv.client.UpgradeFirmware(ctx, &flowv1.UpgradeFirmwareRequest{TargetSpec: rackSpec(busy.Name)})
	require.NoError(t, err)
	id := createRun(t, srv.client, rolloutRequest("around a busy rack", rolloutOpts{concurrency: 3, retry: &flowv1.OperationRunConflictRetryPolicy{
		InitialRetryDelay: durationpb.New(200 * time.Millisecond), MaxRetryDelay: durationpb.New(time.Second),
	}}))
	blocked := func() *flowv1.OperationRunTarget {
		for _, tg := range allTargets(t, srv.client, id) {
			if tg.GetRackId().GetId() == busy.ID.String() {
				return tg
			}
		}
		return nil
	}
	tg := blocked()
	require.Equal(t, flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_BLOCKED, tg.GetStatus())
	require.Contains(t, tg.GetMessage(), other.GetTaskIds()[0].GetId(), "the message names the blocking task")
	// The others finish; the busy rack's target keeps retrying.
	require.Eventually(t, func() bool {
		run := getRun(t, srv.client, id)
		return run.GetStats().GetCurrentPhaseStats().GetOutcomeCounts().GetCompleted() == 2
	}, time.Minute, 20*time.Millisecond)
	// Wake-ups are River scheduled jobs, moved to available every few
	// seconds: allow for that.
	require.Eventually(t, func() bool { return retryAttempts(t, b.dbURL, busy.ID) >= 3 }, 20*time.Second, 50*time.Millisecond, "retried with backoff")
	require.Equal(t, flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_BLOCKED, blocked().GetStatus())
	// Free the rack: its target runs at once.
	b.sims.nico.Faults().Remove(fid)
	_, err = srv.client.CancelTask(ctx, &flowv1.CancelTaskRequest{TaskId: other.GetTaskIds()[0]})
	require.NoError(t, err)
	run := waitRun(t, srv.client, id, time.Minute, func(r *flowv1.OperationRun) bool { return r.GetSummary().GetFinishedAt() != nil })
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED, run.GetSummary().GetState().GetStatus(), run.GetSummary().GetStatusMessage())
}

func retryAttempts(t testing.TB, dbURL string, rack uuid.UUID) int {
	t.Helper()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbURL, db.PoolConfig{MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce((retry_state->>'attempts')::int, 0) FROM operation_run_target WHERE rack_id = $1`, rack).Scan(&n))
	return n
}

// TestRolloutCancel: cancel stops claims, cancels the running children and
// marks the targets not yet started skipped.
func TestRolloutCancel(t *testing.T) {
	t.Parallel()
	b := newRolloutBench(t, 6, time.Millisecond)
	_, err := b.sims.nico.Faults().Add(sim.Fault{Kind: sim.FaultStuck, Method: "UpdateComponentFirmware", Phase: "in_progress"})
	require.NoError(t, err)
	srv := b.serve(t, nil, nil)
	ctx := context.Background()
	id := createRun(t, srv.client, rolloutRequest("to cancel", rolloutOpts{concurrency: 2}))
	require.Eventually(t, func() bool { return len(b.sims.nico.Journal().Calls("GetComponentFirmwareStatus")) > 2 }, 30*time.Second, 10*time.Millisecond)
	out, err := srv.client.CancelOperationRun(ctx, &flowv1.CancelOperationRunRequest{Id: id, Reason: "wrong bundle"})
	require.NoError(t, err)
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_CANCELLED, out.GetSummary().GetState().GetStatus())
	require.Equal(t, "operation run cancelled: wrong bundle", out.GetSummary().GetStatusMessage())
	require.NotNil(t, out.GetSummary().GetFinishedAt())
	counts := map[flowv1.OperationRunTargetStatus]int{}
	var children []*flowv1.UUID
	for _, tg := range allTargets(t, srv.client, id) {
		counts[tg.GetStatus()]++
		if tg.GetTaskId() != nil {
			children = append(children, tg.GetTaskId())
		}
	}
	require.Equal(t, map[flowv1.OperationRunTargetStatus]int{
		flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_TERMINATED: 2,
		flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_SKIPPED:    4,
	}, counts)
	res, err := srv.client.GetTasksByIDs(ctx, &flowv1.GetTasksByIDsRequest{TaskIds: children})
	require.NoError(t, err)
	for _, task := range res.GetTasks() {
		require.Equal(t, flowv1.TaskStatus_TASK_STATUS_TERMINATED, task.GetStatus())
	}
	// Cancelling again returns the run unchanged; nothing else starts.
	again, err := srv.client.CancelOperationRun(ctx, &flowv1.CancelOperationRunRequest{Id: id})
	require.NoError(t, err)
	require.Equal(t, out.GetSummary().GetStatusMessage(), again.GetSummary().GetStatusMessage())
	time.Sleep(300 * time.Millisecond)
	require.Len(t, tasksOf(t, srv.client, id), 2)
	_, err = srv.client.ResumeOperationRun(ctx, &flowv1.ResumeOperationRunRequest{Id: id})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
}

// TestRolloutBadInput: each bad request is refused with the right code and
// a message naming the field, and nothing is written.
func TestRolloutBadInput(t *testing.T) {
	t.Parallel()
	b := newRolloutBench(t, 3, time.Millisecond)
	srv := b.serve(t, nil, nil)
	ctx := context.Background()
	base := func() *flowv1.CreateOperationRunRequest {
		return rolloutRequest("bad", rolloutOpts{concurrency: 2})
	}
	fw := func(r *flowv1.CreateOperationRunRequest) *flowv1.UpgradeFirmwareRequest {
		return r.GetConfiguration().GetOperation().GetUpgradeFirmware()
	}
	for _, tt := range []struct {
		name  string
		edit  func(*flowv1.CreateOperationRunRequest)
		code  connect.Code
		field string
	}{
		{"EmptyName", func(r *flowv1.CreateOperationRunRequest) { r.Name = "  " }, connect.CodeInvalidArgument, "name"},
		{"Percentage0", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetSelector().GetPercentage().Percentage = 0
		}, connect.CodeInvalidArgument, "selector.percentage.percentage"},
		{"Percentage101", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetSelector().GetPercentage().Percentage = 101
		}, connect.CodeInvalidArgument, "selector.percentage.percentage"},
		{"NoSelector", func(r *flowv1.CreateOperationRunRequest) { r.GetConfiguration().Selector = nil }, connect.CodeInvalidArgument, "configuration.selector.percentage"},
		{"ZeroConcurrency", func(r *flowv1.CreateOperationRunRequest) { r.GetConfiguration().GetOptions().MaxConcurrentTargets = 0 }, connect.CodeInvalidArgument, "max_concurrent_targets"},
		{"NoGates", func(r *flowv1.CreateOperationRunRequest) { r.GetConfiguration().GetOptions().SafetyPolicy = nil }, connect.CodeInvalidArgument, "safety_policy.gates"},
		{"RateGateZero", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetOptions().GetSafetyPolicy().Gates = []*flowv1.OperationRunSafetyGate{rateGate(0)}
		}, connect.CodeInvalidArgument, "gates[0].failure_rate.failure_threshold_percent"},
		{"CountGateZero", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetOptions().GetSafetyPolicy().Gates = []*flowv1.OperationRunSafetyGate{rateGate(10), countGate(0)}
		}, connect.CodeInvalidArgument, "gates[1].failure_count.failure_threshold_count"},
		{"EmptyGate", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetOptions().GetSafetyPolicy().Gates = []*flowv1.OperationRunSafetyGate{{}}
		}, connect.CodeInvalidArgument, "gates[0]"},
		{"PercentagesNot100", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetOptions().PhasePolicy = &flowv1.OperationRunPhasePolicy{Plan: &flowv1.OperationRunPhasePolicy_Percentage{Percentage: &flowv1.PercentageOperationRunPhases{
				Phases: []*flowv1.OperationRunPercentagePhase{{Percentage: 50}, {Percentage: 40}}}}}
		}, connect.CodeInvalidArgument, "phase_policy.percentage.phases"},
		{"EmptyPhase", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetOptions().PhasePolicy = equalPhases(4, true) // 3 racks
		}, connect.CodeInvalidArgument, "phase 3 would have no targets"},
		{"ZeroPhases", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetOptions().PhasePolicy = equalPhases(0, true)
		}, connect.CodeInvalidArgument, "phase_policy.equal.phase_count"},
		{"CountsTooBig", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetOptions().PhasePolicy = &flowv1.OperationRunPhasePolicy{Plan: &flowv1.OperationRunPhasePolicy_Count{Count: &flowv1.CountOperationRunPhases{
				Phases: []*flowv1.OperationRunCountPhase{{Count: 2}, {Count: 2}}}}}
		}, connect.CodeInvalidArgument, "phase_policy.count.phases"},
		{"MaxDelayBelowInitial", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetOptions().ConflictPolicy = &flowv1.OperationRunConflictPolicy{Strategy: &flowv1.OperationRunConflictPolicy_Retry{Retry: &flowv1.OperationRunConflictRetryPolicy{
				InitialRetryDelay: durationpb.New(time.Minute), MaxRetryDelay: durationpb.New(time.Second)}}}
		}, connect.CodeInvalidArgument, "conflict_policy.retry.max_retry_delay"},
		{"MaxDelayBelowDefaultInitial", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetOptions().ConflictPolicy = &flowv1.OperationRunConflictPolicy{Strategy: &flowv1.OperationRunConflictPolicy_Retry{Retry: &flowv1.OperationRunConflictRetryPolicy{
				MaxRetryDelay: durationpb.New(time.Second)}}}
		}, connect.CodeInvalidArgument, "conflict_policy.retry.max_retry_delay"},
		{"FilterWithTargetSpec", func(r *flowv1.CreateOperationRunRequest) {
			fw(r).TargetSpec = rackSpec(b.racks[0].Name)
			r.GetConfiguration().GetOperation().TargetScope = &flowv1.OperationRunTargetScope{DefaultScopeComponentFilter: &flowv1.ComponentFilter{
				Filter: &flowv1.ComponentFilter_Types{Types: &flowv1.ComponentTypes{Types: []flowv1.ComponentType{flowv1.ComponentType_COMPONENT_TYPE_COMPUTE}}}}}
		}, connect.CodeInvalidArgument, "default_scope_component_filter"},
		{"UnknownExcludedRun", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetOperation().TargetScope = &flowv1.OperationRunTargetScope{ExcludeOperationRunIds: []*flowv1.UUID{{Id: uuid.NewString()}}}
		}, connect.CodeNotFound, "exclude_operation_run_ids"},
		{"UnknownRack", func(r *flowv1.CreateOperationRunRequest) { fw(r).TargetSpec = rackSpec("no-such-rack") }, connect.CodeNotFound, "no-such-rack"},
		{"NoOperation", func(r *flowv1.CreateOperationRunRequest) { r.GetConfiguration().Operation = nil }, connect.CodeInvalidArgument, "upgrade_firmware"},
		{"CredentialsWithoutKey", func(r *flowv1.CreateOperationRunRequest) {
			fw(r).AuthenticationData = &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_Shared{Shared: "s3cret"}}
		}, connect.CodeFailedPrecondition, "FLOW_DATA_ENCRYPTION_KEY_PATH"},
		{"UnknownStrategy", func(r *flowv1.CreateOperationRunRequest) {
			r.GetConfiguration().GetOptions().OrderingPolicy = &flowv1.OperationRunOrderingPolicy{Ordering: &flowv1.OperationRunOrderingPolicy_PhysicalLocation{PhysicalLocation: &flowv1.OperationRunPhysicalLocationOrdering{}}}
		}, connect.CodeInvalidArgument, "physical_location.strategy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := base()
			tt.edit(req)
			_, err := srv.client.CreateOperationRun(ctx, req)
			require.Equal(t, tt.code, connect.CodeOf(err), "%v", err)
			require.Contains(t, err.Error(), tt.field)
		})
	}
	list, err := srv.client.ListOperationRuns(ctx, &flowv1.ListOperationRunsRequest{})
	require.NoError(t, err)
	require.Zero(t, list.GetTotal(), "nothing written")
	require.Empty(t, b.sims.nico.Journal().Calls("UpdateComponentFirmware"))
	for _, stats := range []bool{false, true} {
		_, err = srv.client.GetOperationRun(ctx, &flowv1.GetOperationRunRequest{Id: &flowv1.UUID{Id: uuid.NewString()}, IncludeStats: stats})
		require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "include_stats %v", stats)
	}
	_, err = srv.client.PauseOperationRun(ctx, &flowv1.PauseOperationRunRequest{})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))

	// A run on a third of the site, listed and filtered; a second run that
	// excludes it plans over the rest.
	req := base()
	req.Name = "first third"
	req.GetConfiguration().GetSelector().GetPercentage().Percentage = 33
	first := createRun(t, srv.client, req)
	req = base()
	req.Name = "the rest"
	req.GetConfiguration().GetOperation().TargetScope = &flowv1.OperationRunTargetScope{ExcludeOperationRunIds: []*flowv1.UUID{first}}
	rest := createRun(t, srv.client, req)
	a, b2 := allTargets(t, srv.client, first), allTargets(t, srv.client, rest)
	require.Len(t, a, 1)
	require.Len(t, b2, 2)
	for _, tg := range b2 {
		require.NotEqual(t, a[0].GetRackId().GetId(), tg.GetRackId().GetId())
	}
	list, err = srv.client.ListOperationRuns(ctx, &flowv1.ListOperationRunsRequest{Filter: &flowv1.OperationRunFilter{Name: &flowv1.StringQueryInfo{Patterns: []string{"rest"}, IsWildcard: true}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, list.GetTotal())
	require.Equal(t, rest.GetId(), list.GetOperationRuns()[0].GetId().GetId())
	list, err = srv.client.ListOperationRuns(ctx, &flowv1.ListOperationRunsRequest{})
	require.NoError(t, err)
	require.EqualValues(t, 2, list.GetTotal())
	require.Equal(t, rest.GetId(), list.GetOperationRuns()[0].GetId().GetId(), "newest first")
}

// TestRolloutSealsCredentials: firmware credentials in a run's template
// are stored sealed, never in plaintext (the run row, its child tasks and
// River's jobs), and each child task carries its own sealed copy.
func TestRolloutSealsCredentials(t *testing.T) {
	t.Parallel()
	b := newRolloutBench(t, 2, time.Millisecond)
	srv := b.serve(t, map[string]string{"FLOW_DATA_ENCRYPTION_KEY_PATH": newKeyFile(t)}, nil)
	const secret = "tok-rollout-91c3"
	req := rolloutRequest("with credentials", rolloutOpts{concurrency: 2})
	req.GetConfiguration().GetOperation().GetUpgradeFirmware().AuthenticationData = &flowv1.FirmwareAuthenticationData{Value: &flowv1.FirmwareAuthenticationData_Shared{Shared: secret}}
	id := createRun(t, srv.client, req)
	run := waitRun(t, srv.client, id, time.Minute, func(r *flowv1.OperationRun) bool { return r.GetSummary().GetFinishedAt() != nil })
	require.Equal(t, flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED, run.GetSummary().GetState().GetStatus(), run.GetSummary().GetStatusMessage())
	require.Nil(t, run.GetConfiguration().GetOperation().GetUpgradeFirmware().GetAuthenticationData(), "never echoed")
	ctx := context.Background()
	pool, err := db.Open(ctx, b.dbURL, db.PoolConfig{MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	var plain, sealedRuns, sealedTasks int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM operation_run r WHERE r::text LIKE '%' || $1 || '%') +
		(SELECT count(*) FROM task k WHERE k::text LIKE '%' || $1 || '%') +
		(SELECT count(*) FROM river_job j WHERE j::text LIKE '%' || $1 || '%')`, secret).Scan(&plain))
	require.Zero(t, plain)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM operation_run WHERE operation_template->'authentication_data'->>'key_id' <> ''`).Scan(&sealedRuns))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task WHERE trigger_id = $1 AND information->'authentication_data'->>'key_id' <> ''`, id.GetId()).Scan(&sealedTasks))
	require.Equal(t, 1, sealedRuns)
	require.Equal(t, 2, sealedTasks)
}
