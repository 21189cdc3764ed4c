package app

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/eventrule"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
)

// leakInterval is the leak-detection interval of the leak tests.
const leakInterval = time.Second

// leakConfig writes a flowconfig.yaml with a 1s leak-detection interval and
// an inventory sync that only runs when asked (runSync).
func leakConfig(t testing.TB) string {
	return writeFile(t, "flowconfig.yaml", "leak_detection_interval: 1s\ninventory_run_frequency: 1h\n")
}

// startLeakE2E is startE2E with event-rule leak detection every second.
func startLeakE2E(t testing.TB) *e2e {
	t.Helper()
	cfg := leakConfig(t)
	return startE2E(t, 10*time.Millisecond, func(env map[string]string) {
		env["FLOW_CONFIG_FILE"] = cfg
		env["FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED"] = "true"
	})
}

// runSync runs one inventory-sync cycle on the server at url, which links
// the components to their Core IDs (leak detection names devices by them).
func runSync(t testing.TB, url string) {
	t.Helper()
	res, err := http.Post(url+"/flow.admin.v1.AdminService/RunSync", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}

// leakRack is a stored demo rack with its components as Flow holds them
// (IDs, positions, Core IDs after a sync).
type leakRack struct {
	inventory.Rack
}

// component returns the rack's component of type ct in slot.
func (r leakRack) component(t testing.TB, ct inventory.ComponentType, slot int32) inventory.Component {
	t.Helper()
	for _, c := range r.Components {
		if c.Type == ct && c.Position.SlotID == slot {
			return c
		}
	}
	t.Fatalf("rack %s has no %s in slot %d", r.Name, ct, slot)
	return inventory.Component{}
}

// below returns the IDs of the component in slot and of every component
// of the rack in a lower slot: what a leak in slot affects.
func (r leakRack) below(slot int32) []uuid.UUID {
	var out []uuid.UUID
	for _, c := range r.Components {
		if c.Position.SlotID > 0 && c.Position.SlotID <= slot {
			out = append(out, c.ID)
		}
	}
	slices.SortFunc(out, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func openPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), url, db.PoolConfig{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// readRack reads rack id back with its components.
func readRack(t testing.TB, pool *pgxpool.Pool, id uuid.UUID) leakRack {
	t.Helper()
	r, err := inventory.NewService().Rack(context.Background(), pool, id, true)
	require.NoError(t, err)
	return leakRack{r}
}

// leakTasks returns the tasks on rack, oldest first.
func leakTasks(t testing.TB, client flowv1connect.FlowClient, rack uuid.UUID) []*flowv1.Task {
	t.Helper()
	id := rack.String()
	res, err := client.ListTasks(context.Background(), &flowv1.ListTasksRequest{RackId: &flowv1.UUID{Id: id}})
	require.NoError(t, err)
	out := res.GetTasks()
	slices.Reverse(out)
	return out
}

func taskComponentIDs(task *flowv1.Task) []uuid.UUID {
	var out []uuid.UUID
	for _, c := range task.GetComponentUuids() {
		out = append(out, uuid.MustParse(c.GetId()))
	}
	slices.SortFunc(out, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func componentInfo(t testing.TB, client flowv1connect.FlowClient, id uuid.UUID) *flowv1.Component {
	t.Helper()
	res, err := client.GetComponentInfoByID(context.Background(), &flowv1.GetComponentInfoByIDRequest{Id: &flowv1.UUID{Id: id.String()}})
	require.NoError(t, err)
	return res.GetComponent()
}

// waitPolled waits for the first successful leak poll to have looked at
// component id (NOT_DETECTED), so leak detection is running: a server's
// first cycle comes one interval after River elects it leader.
func waitPolled(t testing.TB, client flowv1connect.FlowClient, id uuid.UUID) {
	t.Helper()
	require.Eventually(t, func() bool {
		return componentInfo(t, client, id).GetLeakStatus() == flowv1.LeakStatus_LEAK_STATUS_NOT_DETECTED
	}, 30*time.Second, 50*time.Millisecond, "a successful poll sets NOT_DETECTED")
}

// countEvents counts the stored leak events and their executions.
func countEvents(t testing.TB, pool *pgxpool.Pool) (events, executions int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM event), (SELECT count(*) FROM event_action_execution)`).Scan(&events, &executions))
	return events, executions
}

// TestLeakEndToEnd: a leak on the compute tray in slot 10 of a demo rack
// is answered within one detection interval by one force-power-off task
// covering that tray and every lower-slot component, which completes and
// leaves them off; the leak staying on makes no second task; clearing it
// and setting it again makes exactly one more.
func TestLeakEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startLeakE2E(t)
	pool := openPool(t, e.dbURL)
	stored := e.addRack(t, 11, false)
	// Before the sync links the tray to its Core ID no leak poll can
	// cover it (after it, on a loaded machine, the 1 s poll may come
	// before this read).
	unlinked := readRack(t, pool, stored.ID).component(t, inventory.ComponentTypeCompute, 10)
	require.Empty(t, unlinked.ExternalID, "not linked before the sync")
	require.Equal(t, flowv1.LeakStatus_LEAK_STATUS_UNKNOWN, componentInfo(t, e.client, unlinked.ID).GetLeakStatus(), "before any poll")
	runSync(t, e.url)
	rack := readRack(t, pool, stored.ID)
	tray := rack.component(t, inventory.ComponentTypeCompute, 10)
	require.Equal(t, unlinked.ID, tray.ID)
	require.NotEmpty(t, tray.ExternalID, "the sync linked the tray to its Core ID")
	affected := rack.below(10)
	require.Len(t, affected, 10, "slots 1-10: four power shelves and six compute trays")

	waitPolled(t, e.client, tray.ID)

	set := time.Now()
	require.NoError(t, e.sims.nico.SetLeak(tray.ExternalID, true))
	var task *flowv1.Task
	require.Eventually(t, func() bool {
		tasks := leakTasks(t, e.client, rack.ID)
		if len(tasks) == 0 {
			return false
		}
		task = tasks[0]
		return true
	}, 15*time.Second, 20*time.Millisecond, "a task (within one interval when the machine is not loaded: BenchmarkLeakResponse measures it)")
	t.Logf("leak set → task submitted in %s", time.Since(set).Round(time.Millisecond))
	require.Equal(t, "force_power_off", task.GetOperation())
	require.Equal(t, affected, taskComponentIDs(task), "the leaking tray and everything below it")
	require.Equal(t, flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_SHUTTING_DOWN, componentInfo(t, e.client, tray.ID).GetLeakHandlingStatus())

	// The leak stays on for ten more intervals: no second response.
	time.Sleep(10 * leakInterval)
	require.Len(t, leakTasks(t, e.client, rack.ID), 1, "one occurrence, one task")
	events, _ := countEvents(t, pool)
	require.Equal(t, 1, events)
	var observations int
	require.NoError(t, pool.QueryRow(ctx, `SELECT observations FROM event`).Scan(&observations))
	require.GreaterOrEqual(t, observations, 8, "every poll observed the same occurrence")
	var summary string
	require.NoError(t, pool.QueryRow(ctx, `SELECT summary FROM event`).Scan(&summary))
	require.Equal(t, "NICo Core reports a coolant leak on compute "+tray.Name+" ("+tray.ExternalID+")", summary, "the tray named, its Core ID beside it")

	done := e.wait(t, task.GetId())
	require.Equal(t, flowv1.TaskStatus_TASK_STATUS_COMPLETED, done.GetStatus(), done.GetMessage())
	for _, c := range rack.Components {
		power := e.power(t, c.BMCs[0].MAC.String())
		if slices.Contains(affected, c.ID) {
			require.Equal(t, "off", power, "%s (slot %d) is off", c.Name, c.Position.SlotID)
		} else {
			require.Equal(t, "on", power, "%s (slot %d) above the leak stays on", c.Name, c.Position.SlotID)
		}
	}
	info := componentInfo(t, e.client, tray.ID)
	require.Equal(t, flowv1.LeakStatus_LEAK_STATUS_DETECTED, info.GetLeakStatus())
	require.Equal(t, flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_DOWN, info.GetLeakHandlingStatus())
	below := componentInfo(t, e.client, rack.component(t, inventory.ComponentTypeCompute, 5).ID)
	require.Equal(t, flowv1.LeakStatus_LEAK_STATUS_NOT_DETECTED, below.GetLeakStatus(), "it does not leak")
	require.Equal(t, flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_DOWN, below.GetLeakHandlingStatus(), "but it was shut down for the leak")
	above := componentInfo(t, e.client, rack.component(t, inventory.ComponentTypeCompute, 24).ID)
	require.Equal(t, flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_NONE, above.GetLeakHandlingStatus())

	// The task records the execution that submitted it.
	var triggerType, triggerID, key, submittedBy string
	require.NoError(t, pool.QueryRow(ctx, `SELECT trigger_type, trigger_id, idempotency_key, submitted_by FROM task WHERE id = $1`, task.GetId().GetId()).
		Scan(&triggerType, &triggerID, &key, &submittedBy))
	require.Equal(t, eventrule.TriggerExecution, triggerType)
	require.Equal(t, "event-rule-execution:"+triggerID+":rack:"+rack.ID.String(), key)
	require.Equal(t, eventrule.BuiltInRuleCreator, submittedBy)
	var status string
	var attempts int
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, attempts FROM event_action_execution WHERE id = $1`, triggerID).Scan(&status, &attempts))
	require.Equal(t, "completed", status)
	require.Equal(t, 1, attempts)

	// Cleared, then set again: a new occurrence, exactly one new response.
	require.NoError(t, e.sims.nico.SetLeak(tray.ExternalID, false))
	require.Eventually(t, func() bool {
		return componentInfo(t, e.client, tray.ID).GetLeakStatus() == flowv1.LeakStatus_LEAK_STATUS_NOT_DETECTED
	}, 15*time.Second, 50*time.Millisecond)
	time.Sleep(2 * leakInterval)
	require.Len(t, leakTasks(t, e.client, rack.ID), 1, "clearing a leak submits nothing")
	require.NoError(t, e.sims.nico.SetLeak(tray.ExternalID, true))
	require.Eventually(t, func() bool { return len(leakTasks(t, e.client, rack.ID)) == 2 }, 15*time.Second, 20*time.Millisecond)
	time.Sleep(3 * leakInterval)
	require.Len(t, leakTasks(t, e.client, rack.ID), 2, "exactly one new response")
	events, executions := countEvents(t, pool)
	require.Equal(t, 2, events)
	require.Equal(t, 2, executions)
}

// TestLeakRackBoundRule: a persisted rule with a noop action, bound to one
// rack and enabled, replaces the built-in for that rack only.
func TestLeakRackBoundRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startLeakE2E(t)
	pool := openPool(t, e.dbURL)
	quiet, loud := e.addRack(t, 12, false), e.addRack(t, 13, false)
	runSync(t, e.url)

	rule, err := e.client.CreateEventRule(ctx, &flowv1.CreateEventRuleRequest{
		Name: "log only", EventType: eventrule.EventTypeLeakDetected,
		Actions: []*flowv1.EventRuleAction{{Name: "log_only", Spec: &flowv1.EventRuleAction_Noop{Noop: &flowv1.EventRuleNoopAction{Reason: "drill"}}}},
	})
	require.NoError(t, err)
	_, err = e.client.CreateEventRuleBinding(ctx, &flowv1.CreateEventRuleBindingRequest{RuleId: rule.GetId(), Scope: &flowv1.EventRuleScope{
		Type: flowv1.EventRuleScopeType_EVENT_RULE_SCOPE_TYPE_RACK, Id: &flowv1.UUID{Id: quiet.ID.String()}}})
	require.NoError(t, err)
	_, err = e.client.EnableEventRule(ctx, &flowv1.EnableEventRuleRequest{RuleId: rule.GetId()})
	require.NoError(t, err)

	quietTray := readRack(t, pool, quiet.ID).component(t, inventory.ComponentTypeCompute, 10)
	loudTray := readRack(t, pool, loud.ID).component(t, inventory.ComponentTypeCompute, 10)
	waitPolled(t, e.client, quietTray.ID)
	require.NoError(t, e.sims.nico.SetLeak(quietTray.ExternalID, true))
	require.NoError(t, e.sims.nico.SetLeak(loudTray.ExternalID, true))
	require.Eventually(t, func() bool { return len(leakTasks(t, e.client, loud.ID)) == 1 }, 15*time.Second, 20*time.Millisecond, "the built-in answers the other rack")
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM event WHERE rack_id = $1`, quiet.ID).Scan(&n))
		return n == 1
	}, 15*time.Second, 20*time.Millisecond)
	time.Sleep(2 * leakInterval)
	require.Empty(t, leakTasks(t, e.client, quiet.ID), "the bound noop rule submits nothing")
	var applied, action, status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT e.applied_rule_id, x.action_name, x.status FROM event e JOIN event_action_execution x ON x.event_id = e.id WHERE e.rack_id = $1`, quiet.ID).
		Scan(&applied, &action, &status))
	require.Equal(t, rule.GetId().GetId(), applied)
	require.Equal(t, "log_only", action)
	require.Equal(t, "completed", status)
	require.NoError(t, pool.QueryRow(ctx, `SELECT applied_rule_id FROM event WHERE rack_id = $1`, loud.ID).Scan(&applied))
	require.Equal(t, eventrule.BuiltInLeakRuleID.String(), applied)
	require.Equal(t, flowv1.LeakStatus_LEAK_STATUS_DETECTED, componentInfo(t, e.client, quietTray.ID).GetLeakStatus())
	require.Equal(t, flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_NONE, componentInfo(t, e.client, quietTray.ID).GetLeakHandlingStatus())
}
