package eventrule_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule"
	"github.com/nicoflow/flow/operations/opstest"
)

// recorder is an ExecutionEnqueuer that only records what it was asked to
// enqueue.
type recorder struct {
	mu  sync.Mutex
	ids []uuid.UUID
}

func (r *recorder) enqueue(_ context.Context, _ pgx.Tx, ids []uuid.UUID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, ids...)
	return nil
}

// pipelineBundle is an event-rule processor on the task bundle's database
// and demo rack, with a recording enqueuer.
type pipelineBundle struct {
	*taskBundle
	rules *eventrule.Service
	jobs  *recorder
	comps []inventory.Component // the rack's components, with IDs
}

func setupPipeline(t *testing.T) *pipelineBundle {
	t.Helper()
	tb := setupTasks(t)
	inv := inventory.NewService()
	jobs := &recorder{}
	rules := eventrule.NewService(eventrule.Config{Pool: tb.pool, Inv: inv, Tasks: tb.tasks, Enqueue: jobs.enqueue})
	rack, err := inv.Rack(context.Background(), tb.pool, tb.rack.ID, true)
	require.NoError(t, err)
	return &pipelineBundle{taskBundle: tb, rules: rules, jobs: jobs, comps: rack.Components}
}

func (b *pipelineBundle) at(t *testing.T, ct inventory.ComponentType, slot int32) inventory.Component {
	t.Helper()
	for _, c := range b.comps {
		if c.Type == ct && c.Position.SlotID == slot {
			return c
		}
	}
	t.Fatalf("no %s in slot %d", ct, slot)
	return inventory.Component{}
}

// slotsUpTo returns the IDs of the rack's components in slots 1..slot,
// sorted.
func (b *pipelineBundle) slotsUpTo(slot int32) []uuid.UUID {
	var out []uuid.UUID
	for _, c := range b.comps {
		if c.Position.SlotID > 0 && c.Position.SlotID <= slot {
			out = append(out, c.ID)
		}
	}
	return sortIDs(out)
}

func sortIDs(ids []uuid.UUID) []uuid.UUID {
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	return ids
}

func leakOn(key string, id uuid.UUID) eventrule.Envelope {
	return eventrule.Envelope{
		Key: key, Type: eventrule.EventTypeLeakDetected, Severity: eventrule.SeverityCritical,
		Resource: eventrule.Resource{Kind: eventrule.ResourceComponent, ID: id},
	}
}

// execution is a stored execution as the tests read it.
type execution struct {
	Action, Type, Status, Reason, Message string
	Plan                                  struct {
		Racks []struct {
			RackID       uuid.UUID   `json:"rack_id"`
			ComponentIDs []uuid.UUID `json:"component_ids"`
		} `json:"racks"`
		SubmittedBy string `json:"submitted_by"`
	}
}

func (b *pipelineBundle) executions(t *testing.T, event uuid.UUID) []execution {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT action_name, action_type, status, coalesce(reason, ''), status_message, plan
		FROM event_action_execution WHERE event_id = $1 ORDER BY action_name`, event)
	require.NoError(t, err)
	defer rows.Close()
	var out []execution
	for rows.Next() {
		var x execution
		var plan []byte
		require.NoError(t, rows.Scan(&x.Action, &x.Type, &x.Status, &x.Reason, &x.Message, &plan))
		require.NoError(t, json.Unmarshal(plan, &x.Plan))
		out = append(out, x)
	}
	require.NoError(t, rows.Err())
	return out
}

func (b *pipelineBundle) ingest(t *testing.T, env eventrule.Envelope) eventrule.IngestResult {
	t.Helper()
	res, err := b.rules.Ingest(context.Background(), eventrule.LeakEventSource, env)
	require.NoError(t, err)
	return res
}

// TestLeakageResolver: the built-in answers a leak by powering off the
// leaking component and every component of its rack in a lower slot, slot
// 0 included; a rack event takes the whole rack; only a component whose
// slot is missing (negative, as the sync writes it) resolves nothing
// (skipped, no_targets).
func TestLeakageResolver(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	// Slot 31's tray has no slot; slot 29's is moved to slot 0.
	noSlot := b.at(t, inventory.ComponentTypeCompute, 31)
	_, err := b.pool.Exec(ctx, `UPDATE component SET slot_id = $2 WHERE id = $1`, noSlot.ID, inventory.NoSlot)
	require.NoError(t, err)
	slot0 := b.at(t, inventory.ComponentTypeCompute, 29)
	_, err = b.pool.Exec(ctx, `UPDATE component SET slot_id = 0 WHERE id = $1`, slot0.ID)
	require.NoError(t, err)
	// b.comps holds the positions as seeded: slot0's tray is in slot 29
	// there.
	withSlot0 := func(ids []uuid.UUID) []uuid.UUID {
		return sortIDs(append(slices.DeleteFunc(ids, func(id uuid.UUID) bool { return id == slot0.ID }), slot0.ID))
	}
	all := make([]uuid.UUID, 0, len(b.comps))
	for _, c := range b.comps {
		all = append(all, c.ID)
	}
	for _, tt := range []struct {
		name    string
		env     eventrule.Envelope
		want    []uuid.UUID // nil: skipped
		message string
	}{
		{"ComputeSlot10", leakOn("a", b.at(t, inventory.ComponentTypeCompute, 10).ID), withSlot0(b.slotsUpTo(10)), ""},
		{"LowestCompute", leakOn("b", b.at(t, inventory.ComponentTypeCompute, 5).ID), withSlot0(b.slotsUpTo(5)), ""},
		{"BottomShelf", leakOn("c", b.at(t, inventory.ComponentTypePowerShelf, 1).ID), withSlot0(b.slotsUpTo(1)), ""},
		{"Switch", leakOn("d", b.at(t, inventory.ComponentTypeNVSwitch, 15).ID), withSlot0(b.slotsUpTo(15)), ""},
		{"TopCompute", leakOn("e", b.at(t, inventory.ComponentTypeCompute, 30).ID), withSlot0(b.slotsUpTo(30)), ""},
		{"RackEvent", eventrule.Envelope{Key: "f", Type: eventrule.EventTypeLeakDetected, Severity: eventrule.SeverityCritical,
			Resource: eventrule.Resource{Kind: eventrule.ResourceRack, ID: b.rack.ID}}, sortIDs(all), ""},
		// Slot 0 is a slot: its leak powers it off (nothing is below it).
		{"Slot0", leakOn("h", slot0.ID), []uuid.UUID{slot0.ID}, ""},
		{"MissingSlot", leakOn("g", noSlot.ID), nil, "has no slot"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := b.ingest(t, tt.env)
			require.False(t, res.Duplicate)
			xs := b.executions(t, res.EventID)
			require.Len(t, xs, 1)
			x := xs[0]
			require.Equal(t, "power_off_affected_components", x.Action)
			require.Equal(t, "submit_task", x.Type)
			require.Equal(t, eventrule.BuiltInRuleCreator, x.Plan.SubmittedBy)
			if tt.want == nil {
				require.Equal(t, "skipped", x.Status)
				require.Equal(t, "no_targets", x.Reason)
				require.Contains(t, x.Message, tt.message)
				require.NotContains(t, b.jobs.ids, res.Executions[0], "a skipped execution gets no job")
				return
			}
			require.Equal(t, "pending", x.Status)
			require.Len(t, x.Plan.Racks, 1)
			require.Equal(t, b.rack.ID, x.Plan.Racks[0].RackID)
			require.Equal(t, tt.want, x.Plan.Racks[0].ComponentIDs)
			require.Contains(t, b.jobs.ids, res.Executions[0], "enqueued in the same transaction")
		})
	}
}

// TestObserveCountsStoredOccurrences: Observe adds one observation to each
// stored occurrence of its source among the keys, in one statement, and
// returns the keys it did not find (to be ingested whole), touching no
// other source's event.
func TestObserveCountsStoredOccurrences(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	tray := b.at(t, inventory.ComponentTypeCompute, 10)
	k1 := b.ingest(t, leakOn("k1", tray.ID))
	k2 := b.ingest(t, leakOn("k2", tray.ID))
	other, err := b.rules.Ingest(ctx, "other_source", leakOn("k3", tray.ID))
	require.NoError(t, err)

	missing, err := b.rules.Observe(ctx, eventrule.LeakEventSource, []string{"k1", "k2", "k3", "k4"})
	require.NoError(t, err)
	require.Equal(t, []string{"k3", "k4"}, missing, "k3 is another source's, k4 was never stored")
	obs := func(id uuid.UUID) (n int) {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT observations FROM event WHERE id = $1`, id).Scan(&n))
		return n
	}
	require.Equal(t, 2, obs(k1.EventID))
	require.Equal(t, 2, obs(k2.EventID))
	require.Equal(t, 1, obs(other.EventID))
	missing, err = b.rules.Observe(ctx, eventrule.LeakEventSource, nil)
	require.NoError(t, err)
	require.Empty(t, missing)
}

func TestIngestDeduplicates(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	tray := b.at(t, inventory.ComponentTypeCompute, 10)
	first := b.ingest(t, leakOn("k1", tray.ID))
	for range 3 {
		again := b.ingest(t, leakOn("k1", tray.ID))
		require.True(t, again.Duplicate)
		require.Equal(t, first.EventID, again.EventID)
		require.Empty(t, again.Executions, "no re-planning")
	}
	var obs, events, execs int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT observations FROM event WHERE id = $1`, first.EventID).Scan(&obs))
	require.Equal(t, 4, obs)
	// The same key from another source, or another key, is another event.
	_, err := b.rules.Ingest(ctx, "other_source", leakOn("k1", tray.ID))
	require.NoError(t, err)
	b.ingest(t, leakOn("k2", tray.ID))
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM event), (SELECT count(*) FROM event_action_execution)`).Scan(&events, &execs))
	require.Equal(t, 3, events)
	require.Equal(t, 3, execs)
	require.Len(t, b.jobs.ids, 3)
}

// TestIngestConcurrently: many ingestions of one occurrence at once store
// one event with one execution.
func TestIngestConcurrently(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	tray := b.at(t, inventory.ComponentTypeCompute, 10)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, err := b.rules.Ingest(context.Background(), eventrule.LeakEventSource, leakOn("same", tray.ID))
			require.NoError(t, err)
		})
	}
	wg.Wait()
	var events, execs, obs int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM event), (SELECT count(*) FROM event_action_execution), (SELECT max(observations) FROM event)`).Scan(&events, &execs, &obs))
	require.Equal(t, 1, events)
	require.Equal(t, 1, execs)
	require.Equal(t, 8, obs)
}

func TestIngestUnresolvable(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	rackless := b.at(t, inventory.ComponentTypeCompute, 24)
	_, err := b.pool.Exec(ctx, `UPDATE component SET rack_id = NULL WHERE id = $1`, rackless.ID)
	require.NoError(t, err)
	tray := b.at(t, inventory.ComponentTypeCompute, 10)
	for _, tt := range []struct {
		name   string
		source string
		env    eventrule.Envelope
		want   string
	}{
		{"UnknownComponent", eventrule.LeakEventSource, leakOn("a", uuid.New()), "component not found"},
		{"UnknownExternalID", eventrule.LeakEventSource, eventrule.Envelope{Key: "b", Type: eventrule.EventTypeLeakDetected, Severity: eventrule.SeverityCritical,
			Resource: eventrule.Resource{Kind: eventrule.ResourceComponent, ExternalID: "machine-9999", ComponentType: operations.ComponentTypeCompute}}, "machine-9999"},
		{"RacklessComponent", eventrule.LeakEventSource, leakOn("c", rackless.ID), "has no rack"},
		{"UnknownRack", eventrule.LeakEventSource, eventrule.Envelope{Key: "d", Type: eventrule.EventTypeLeakDetected, Severity: eventrule.SeverityCritical,
			Resource: eventrule.Resource{Kind: eventrule.ResourceRack, ID: uuid.New()}}, "rack not found"},
		{"BadSource", "Nico-Core", leakOn("e", tray.ID), "source name"},
		{"NoKey", eventrule.LeakEventSource, leakOn("", tray.ID), "key is empty"},
		{"BadSeverity", eventrule.LeakEventSource, eventrule.Envelope{Key: "f", Type: eventrule.EventTypeLeakDetected, Severity: "loud",
			Resource: eventrule.Resource{Kind: eventrule.ResourceComponent, ID: tray.ID}}, "severity"},
		{"UnsupportedType", eventrule.LeakEventSource, eventrule.Envelope{Key: "g", Type: "hardware.fan.failed", Severity: eventrule.SeverityCritical,
			Resource: eventrule.Resource{Kind: eventrule.ResourceComponent, ID: tray.ID}}, "unsupported event type"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.rules.Ingest(ctx, tt.source, tt.env)
			require.ErrorIs(t, err, eventrule.ErrUnresolvable)
			require.Contains(t, err.Error(), tt.want)
		})
	}
	var events int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM event`).Scan(&events))
	require.Zero(t, events, "nothing stored")
	require.Empty(t, b.jobs.ids)
}

// TestIngestWithBoundRule: a bound rule's actions are filtered by their
// conditions and planned by their target strategies; only the applicable
// ones are snapshotted, and later rule edits leave the event as planned.
func TestIngestWithBoundRule(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	offWith := func(name string, strategy eventrule.TargetStrategy, cond eventrule.Condition) eventrule.Action {
		return eventrule.Action{Name: name, Condition: cond, SubmitTask: &eventrule.SubmitTaskSpec{
			Operation:      eventrule.TaskOperation{Type: operations.OperationTypePowerControl, Code: operations.CodeForcePowerOff},
			TargetStrategy: strategy, ConflictStrategy: eventrule.ConflictQueue,
		}}
	}
	actions := []eventrule.Action{
		{Name: "note", Noop: &eventrule.NoopSpec{Reason: "seen"}},
		offWith("just_it", eventrule.TargetComponent, eventrule.Condition{}),
		offWith("whole_rack", eventrule.TargetRack, eventrule.Condition{Severities: []eventrule.Severity{eventrule.SeverityCritical}}),
		offWith("switches_only", eventrule.TargetComponent, eventrule.Condition{ComponentTypes: []operations.ComponentType{operations.ComponentTypeNVSwitch}}),
		offWith("warnings_only", eventrule.TargetRack, eventrule.Condition{Severities: []eventrule.Severity{eventrule.SeverityWarning}}),
	}
	var rule eventrule.Rule
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		if rule, err = b.rules.Create(ctx, tx, eventrule.RuleInput{Name: "site", EventType: eventrule.EventTypeLeakDetected, Actions: actions, CreatedBy: "alice"}); err != nil {
			return err
		}
		if _, err = b.rules.Bind(ctx, tx, rule.ID, eventrule.Scope{Type: eventrule.ScopeSite}); err != nil {
			return err
		}
		_, err = b.rules.SetEnabled(ctx, tx, rule.ID, true)
		return err
	}))
	tray := b.at(t, inventory.ComponentTypeCompute, 10)
	res := b.ingest(t, leakOn("k", tray.ID))
	xs := b.executions(t, res.EventID)
	names := make([]string, len(xs))
	for i, x := range xs {
		names[i] = x.Action
	}
	require.Equal(t, []string{"just_it", "note", "whole_rack"}, names, "only the applicable actions")
	require.Equal(t, "pending", xs[0].Status)
	require.Equal(t, []uuid.UUID{tray.ID}, xs[0].Plan.Racks[0].ComponentIDs)
	require.Equal(t, "alice", xs[0].Plan.SubmittedBy, "tasks are submitted as the rule's creator")
	require.Equal(t, "completed", xs[1].Status, "a noop is done when planned")
	require.Len(t, xs[2].Plan.Racks[0].ComponentIDs, len(b.comps))
	require.Len(t, b.jobs.ids, 2, "the noop needs no job")

	var applied uuid.UUID
	var policy []byte
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT applied_rule_id, effective_policy FROM event WHERE id = $1`, res.EventID).Scan(&applied, &policy))
	require.Equal(t, rule.ID, applied)
	require.NotContains(t, string(policy), "switches_only")
	require.NotContains(t, string(policy), "warnings_only")

	// A rack event: COMPONENT cannot resolve it (skipped); RACK can.
	rackRes := b.ingest(t, eventrule.Envelope{Key: "r", Type: eventrule.EventTypeLeakDetected, Severity: eventrule.SeverityCritical,
		Resource: eventrule.Resource{Kind: eventrule.ResourceRack, ID: b.rack.ID}})
	xs = b.executions(t, rackRes.EventID)
	require.Len(t, xs, 3, "switches_only never matches a rack event")
	require.Equal(t, "just_it", xs[0].Action)
	require.Equal(t, "skipped", xs[0].Status)
	require.Contains(t, xs[0].Message, "COMPONENT cannot resolve a rack event")

	// Editing the rule afterwards does not touch stored events.
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.rules.ReplaceActions(ctx, tx, rule.ID, []eventrule.Action{{Name: "other", Noop: &eventrule.NoopSpec{}}})
		return err
	}))
	var after []byte
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT effective_policy FROM event WHERE id = $1`, res.EventID).Scan(&after))
	require.JSONEq(t, string(policy), string(after))
}

// TestExecutionRetriesAndFailures runs executions on a real River worker:
// a submission the rack rejects (REJECT on a busy rack) is deferred with
// attempt_failed and retried after the backoff; a plan no retry can fix
// fails at once.
func TestExecutionRetriesAndFailures(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	rules, client := b.startExecutions(t)

	// The rack is busy with a power-on; a REJECT rule's power-off conflicts.
	_, err := b.submit(t, opstest.PowerOn(b.rack))
	require.NoError(t, err)
	reject := eventrule.Action{Name: "off_or_fail", SubmitTask: &eventrule.SubmitTaskSpec{
		Operation:      eventrule.TaskOperation{Type: operations.OperationTypePowerControl, Code: operations.CodeForcePowerOff},
		TargetStrategy: eventrule.TargetComponent, ConflictStrategy: eventrule.ConflictReject,
	}}
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		r, err := rules.Create(ctx, tx, eventrule.RuleInput{Name: "reject", EventType: eventrule.EventTypeLeakDetected, Actions: []eventrule.Action{reject}})
		if err != nil {
			return err
		}
		if _, err := rules.Bind(ctx, tx, r.ID, eventrule.Scope{Type: eventrule.ScopeRack, RackID: b.rack.ID}); err != nil {
			return err
		}
		_, err = rules.SetEnabled(ctx, tx, r.ID, true)
		return err
	}))
	res, err := rules.Ingest(ctx, eventrule.LeakEventSource, leakOn("busy", b.at(t, inventory.ComponentTypeCompute, 10).ID))
	require.NoError(t, err)
	exec := res.Executions[0]
	var status, reason, message string
	var attempts int
	var next *time.Time
	read := func() {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT status, coalesce(reason, ''), attempts, status_message, next_attempt_at FROM event_action_execution WHERE id = $1`, exec).
			Scan(&status, &reason, &attempts, &message, &next))
	}
	require.Eventually(t, func() bool { read(); return status == "deferred" }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, "attempt_failed", reason)
	require.Equal(t, 1, attempts)
	require.Contains(t, message, "conflicting task")
	require.NotNil(t, next)
	require.WithinDuration(t, time.Now().Add(10*time.Second), *next, 3*time.Second, "first backoff is 10s")
	var scheduled time.Time
	var jobAttempts int
	var jobState string
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT state, scheduled_at, attempt FROM river_job WHERE id = $1`, jobOf(t, b, exec)).
			Scan(&jobState, &scheduled, &jobAttempts))
		return jobState == "retryable"
	}, 5*time.Second, 20*time.Millisecond)
	require.WithinDuration(t, *next, scheduled, 2*time.Second, "River retries when the row says")
	require.Equal(t, 1, jobAttempts)

	// A plan that cannot be read fails at once and is not retried.
	res, err = rules.Ingest(ctx, eventrule.LeakEventSource, leakOn("broken", b.at(t, inventory.ComponentTypeCompute, 5).ID))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE event_action_execution SET plan = '{"version": 99}' WHERE id = $1`, res.Executions[0])
	require.NoError(t, err)
	// The job may have run before the update; the busy rack rejects it
	// then, so wait for its retry in either case.
	exec = res.Executions[0]
	require.Eventually(t, func() bool { read(); return status == "failed" || status == "deferred" }, 10*time.Second, 20*time.Millisecond)
	if status == "deferred" {
		// The row says deferred before River has ended the attempt; a
		// retry asked for while the job still runs is a no-op, and the
		// real retry would come only after the 10 s backoff.
		require.Eventually(t, func() bool {
			var st string
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, jobOf(t, b, exec)).Scan(&st))
			return st == "retryable"
		}, 5*time.Second, 20*time.Millisecond)
		_, err = client.JobRetry(ctx, jobOf(t, b, exec))
		require.NoError(t, err)
		require.Eventually(t, func() bool { read(); return status == "failed" }, 10*time.Second, 20*time.Millisecond)
	}
	require.Contains(t, message, "plan version 99")
	var state string
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, jobOf(t, b, exec)).Scan(&state))
		return state == "cancelled"
	}, 5*time.Second, 20*time.Millisecond, "a permanent failure cancels the job")
}

// startExecutions starts a River client working event-rule executions
// (only) and returns an event-rule processor that enqueues on it.
func (b *pipelineBundle) startExecutions(t *testing.T) (*eventrule.Service, *river.Client[pgx.Tx]) {
	t.Helper()
	worker := &eventrule.ExecutionWorker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{
		Queues:  map[string]river.QueueConfig{eventrule.Queue: {MaxWorkers: 2}},
		Workers: workers, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	rules := eventrule.NewService(eventrule.Config{Pool: b.pool, Inv: inventory.NewService(), Tasks: b.tasks, Enqueue: eventrule.RiverExecutionEnqueuer(client)})
	worker.Rules = rules
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() { _ = client.Stop(context.Background()) })
	return rules, client
}

// TestExecutionRescue: an execution whose job was lost (its process was
// killed mid-run, and River would rescue the job only after its 30 min
// window) is run again by RescueStale once it is StaleExecutionAge overdue;
// a fresh one is left alone.
func TestExecutionRescue(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	// Planned with the recorder: the execution has no job at all.
	lost := b.ingest(t, leakOn("lost", b.at(t, inventory.ComponentTypeCompute, 10).ID)).Executions[0]
	fresh := b.ingest(t, leakOn("fresh", b.at(t, inventory.ComponentTypeCompute, 24).ID)).Executions[0]
	_, err := b.pool.Exec(ctx, `UPDATE event_action_execution SET updated_at = now() - interval '1 minute' WHERE id = $1`, lost)
	require.NoError(t, err)
	rules, _ := b.startExecutions(t)
	n, err := rules.RescueStale(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var status string
	var tasks []uuid.UUID
	require.Eventually(t, func() bool {
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT status, task_ids FROM event_action_execution WHERE id = $1`, lost).Scan(&status, &tasks))
		return status == "completed"
	}, 10*time.Second, 20*time.Millisecond)
	require.Len(t, tasks, 1, "the rescued execution submitted its task")
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT status FROM event_action_execution WHERE id = $1`, fresh).Scan(&status))
	require.Equal(t, "pending", status, "not overdue yet: left to its own job")
	n, err = rules.RescueStale(ctx, 10)
	require.NoError(t, err)
	require.Zero(t, n, "nothing else is overdue")
}

func jobOf(t *testing.T, b *pipelineBundle, exec uuid.UUID) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT id FROM river_job WHERE kind = 'operations.event_rule_execution' AND args->>'execution_id' = $1`, exec.String()).Scan(&id))
	return id
}

func TestExecutionBackoff(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 4: time.Minute, 10: time.Minute, 100: time.Minute} {
		require.Equal(t, want, eventrule.ExecutionBackoff(n), "after attempt %d", n)
	}
	require.Equal(t, 4, eventrule.ExecutionMaxAttempts)
}
