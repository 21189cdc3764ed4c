package eventrule_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule"
)

// leakSource is a scripted NICo Core leak view.
type leakSource struct {
	mu                sync.Mutex
	machines, switchs []string
	machineErr        error
}

func (s *leakSource) set(machines ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.machines = machines
}

func (s *leakSource) LeakingMachineIDs(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.machines...), s.machineErr
}

func (s *leakSource) LeakingSwitchIDs(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.switchs...), nil
}

// linked gives every compute tray and switch of the bundle's rack a Core
// ID ("machine-<slot>", "switch-<slot>") and returns the tray of slot 10.
func (b *pipelineBundle) linked(t *testing.T) inventory.Component {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `UPDATE component SET external_id = CASE type WHEN 'Compute' THEN 'machine-' ELSE 'switch-' END || slot_id
		WHERE type IN ('Compute', 'NVSwitch')`)
	require.NoError(t, err)
	return b.at(t, inventory.ComponentTypeCompute, 10)
}

func (b *pipelineBundle) detector(src eventrule.LeakSource, events bool) *eventrule.LeakDetector {
	return eventrule.NewLeakDetector(eventrule.LeakDetectorConfig{
		Pool: b.pool, Inv: inventory.NewService(), Rules: b.rules, Tasks: b.tasks, Source: src, EventRules: events,
	})
}

func (b *pipelineBundle) leakStatus(t *testing.T, id uuid.UUID) inventory.LeakStatus {
	t.Helper()
	c, err := inventory.NewService().Component(context.Background(), b.pool, id)
	require.NoError(t, err)
	return c.LeakStatus
}

func (b *pipelineBundle) eventCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM event`).Scan(&n))
	return n
}

// TestLeakOccurrences: an occurrence lasts while the device stays in
// successful polls (one event, more observations), survives a failed poll,
// and ends when a successful poll leaves it out; leaking again is a new
// occurrence. leak_status follows each successful poll.
func TestLeakOccurrences(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	tray := b.linked(t)
	other := b.at(t, inventory.ComponentTypeCompute, 24)
	shelf := b.at(t, inventory.ComponentTypePowerShelf, 1)
	src := &leakSource{}
	d := b.detector(src, true)

	require.Equal(t, inventory.LeakUnknown, b.leakStatus(t, tray.ID))
	require.NoError(t, d.Run(ctx))
	require.Equal(t, inventory.LeakNotDetected, b.leakStatus(t, tray.ID))
	require.Equal(t, inventory.LeakUnknown, b.leakStatus(t, shelf.ID), "shelves are not polled")

	src.set("machine-10")
	for range 3 {
		require.NoError(t, d.Run(ctx))
	}
	require.Equal(t, 1, b.eventCount(t))
	require.Equal(t, inventory.LeakDetected, b.leakStatus(t, tray.ID))
	require.Equal(t, inventory.LeakNotDetected, b.leakStatus(t, other.ID))
	occ, err := d.Occurrences(ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, occ, 1)
	require.Regexp(t, `^compute/machine-10/[0-9a-f-]{36}$`, occ[0].SourceKey)
	key := occ[0].SourceKey

	// A failed poll changes nothing.
	src.machineErr = errors.New("core down")
	require.Error(t, d.Run(ctx))
	src.machineErr = nil
	src.set("machine-10")
	require.NoError(t, d.Run(ctx))
	occ, err = d.Occurrences(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, key, occ[0].SourceKey, "a failed poll does not end the occurrence")
	require.Equal(t, 1, b.eventCount(t))

	// Cleared, then back: a new occurrence and a new event.
	src.set()
	require.NoError(t, d.Run(ctx))
	require.Equal(t, inventory.LeakNotDetected, b.leakStatus(t, tray.ID))
	occ, err = d.Occurrences(ctx, b.pool)
	require.NoError(t, err)
	require.Empty(t, occ)
	src.set("machine-10")
	require.NoError(t, d.Run(ctx))
	require.Equal(t, 2, b.eventCount(t))
	occ, err = d.Occurrences(ctx, b.pool)
	require.NoError(t, err)
	require.NotEqual(t, key, occ[0].SourceKey)
}

// TestLeakDetectorsConcurrently: detectors of two processes polling at once
// (as if both were leader) still store one event for one occurrence.
func TestLeakDetectorsConcurrently(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	b.linked(t)
	src := &leakSource{machines: []string{"machine-10"}, switchs: []string{"switch-15"}}
	one, two := b.detector(src, true), b.detector(src, true)
	var wg sync.WaitGroup
	for range 5 {
		for _, d := range []*eventrule.LeakDetector{one, two} {
			wg.Go(func() { require.NoError(t, d.Run(context.Background())) })
		}
	}
	wg.Wait()
	require.Equal(t, 2, b.eventCount(t), "one event per leaking device")
	var obs int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT min(observations) FROM event`).Scan(&obs))
	require.Equal(t, 10, obs)
}

// TestLeakLegacyPath: without event rules, every cycle submits a forced
// power-off of each leaking device (upstream's behaviour), queued, with no
// trigger linkage; no event is stored.
func TestLeakLegacyPath(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	tray := b.linked(t)
	src := &leakSource{machines: []string{"machine-10"}}
	d := b.detector(src, false)
	require.NoError(t, d.Run(ctx))
	require.NoError(t, d.Run(ctx))
	require.Equal(t, 2, b.count(), "one task per cycle")
	require.Zero(t, b.eventCount(t))
	var code, trigger, by string
	var ids []uuid.UUID
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT operation_code, trigger_type, submitted_by, component_ids FROM task ORDER BY created_at LIMIT 1`).Scan(&code, &trigger, &by, &ids))
	require.Equal(t, "force_power_off", code)
	require.Empty(t, trigger)
	require.Equal(t, eventrule.LeakDetectionCreator, by)
	require.Equal(t, []uuid.UUID{tray.ID}, ids, "the leaking device only")
	require.Equal(t, inventory.LeakDetected, b.leakStatus(t, tray.ID))
}

// TestLeakOnUnknownDevice: a leaking ID Flow cannot place (a DPU, a device
// not in the inventory) fails no cycle and stores nothing; the others are
// still answered.
func TestLeakOnUnknownDevice(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	b.linked(t)
	src := &leakSource{machines: []string{"dpu-77", "machine-10"}}
	d := b.detector(src, true)
	require.NoError(t, d.Run(context.Background()))
	require.NoError(t, d.Run(context.Background()))
	require.Equal(t, 1, b.eventCount(t), "machine-10 only")
}

// TestLeakHandling: a component's leak handling follows the latest
// force-power-off task a leak execution submitted that covers it; tasks
// of the legacy path (no trigger) and components no such task covers are
// not reported.
func TestLeakHandling(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	tray, below, above := b.at(t, inventory.ComponentTypeCompute, 10), b.at(t, inventory.ComponentTypeCompute, 5), b.at(t, inventory.ComponentTypeCompute, 24)
	rules, _ := b.startExecutions(t)
	res, err := rules.Ingest(ctx, eventrule.LeakEventSource, leakOn("leak", tray.ID))
	require.NoError(t, err)
	exec := res.Executions[0]
	var task uuid.UUID
	require.Eventually(t, func() bool {
		var tasks []uuid.UUID
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT task_ids FROM event_action_execution WHERE id = $1`, exec).Scan(&tasks))
		if len(tasks) == 1 {
			task = tasks[0]
		}
		return task != uuid.Nil
	}, 10*time.Second, 20*time.Millisecond)
	// A legacy power-off of the component above: not a leak execution's.
	_, err = b.submit(t, operations.Request{
		Type: operations.OperationTypePowerControl, Code: operations.CodeForcePowerOff, Queue: true,
		Targets: inventory.TargetSpec{Components: []inventory.ComponentRef{{ID: above.ID}}},
	})
	require.NoError(t, err)

	ids := []uuid.UUID{tray.ID, below.ID, above.ID}
	for _, tt := range []struct {
		status operations.TaskStatus
		want   inventory.LeakHandling
	}{
		{operations.TaskPending, inventory.LeakHandlingShuttingDown},
		{operations.TaskRunning, inventory.LeakHandlingShuttingDown},
		{operations.TaskCompleted, inventory.LeakHandlingDown},
		{operations.TaskFailed, inventory.LeakHandlingFailed},
		{operations.TaskTerminated, inventory.LeakHandlingFailed},
	} {
		_, err := b.pool.Exec(ctx, `UPDATE task SET status = $2 WHERE id = $1`, task, string(tt.status))
		require.NoError(t, err)
		got, err := rules.LeakHandling(ctx, b.pool, ids)
		require.NoError(t, err)
		require.Equal(t, map[uuid.UUID]inventory.LeakHandling{tray.ID: tt.want, below.ID: tt.want}, got, "task %s", tt.status)
	}
	got, err := rules.LeakHandling(ctx, b.pool, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestLeakStatusBetweenFullPasses: between its full passes (every
// leakFullEvery cycles) leak detection writes only changes; a component
// linked meanwhile is detected at once if it leaks, and gets its
// not_detected status at the next full pass otherwise.
func TestLeakStatusBetweenFullPasses(t *testing.T) {
	t.Parallel()
	b := setupPipeline(t)
	ctx := context.Background()
	tray := b.linked(t)
	late := b.at(t, inventory.ComponentTypeCompute, 24)
	quiet := b.at(t, inventory.ComponentTypeCompute, 26)
	_, err := b.pool.Exec(ctx, `UPDATE component SET external_id = NULL WHERE id = ANY($1)`, []uuid.UUID{late.ID, quiet.ID})
	require.NoError(t, err)
	src := &leakSource{}
	d := b.detector(src, true)

	require.NoError(t, d.Run(ctx)) // full
	require.Equal(t, inventory.LeakNotDetected, b.leakStatus(t, tray.ID))
	require.Equal(t, inventory.LeakUnknown, b.leakStatus(t, late.ID), "not linked yet")

	_, err = b.pool.Exec(ctx, `UPDATE component SET external_id = 'machine-late' WHERE id = $1`, late.ID)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE component SET external_id = 'machine-quiet' WHERE id = $1`, quiet.ID)
	require.NoError(t, err)
	src.set("machine-late", "machine-10")
	require.NoError(t, d.Run(ctx)) // changes only
	require.Equal(t, inventory.LeakDetected, b.leakStatus(t, late.ID), "a leak on a component linked since the full pass")
	require.Equal(t, inventory.LeakDetected, b.leakStatus(t, tray.ID))
	require.Equal(t, inventory.LeakUnknown, b.leakStatus(t, quiet.ID), "not looked at until the next full pass")

	src.set("machine-late")
	require.NoError(t, d.Run(ctx)) // changes only
	require.Equal(t, inventory.LeakNotDetected, b.leakStatus(t, tray.ID), "no longer leaking")
	require.Equal(t, inventory.LeakDetected, b.leakStatus(t, late.ID))

	for range eventrule.LeakFullEvery {
		require.NoError(t, d.Run(ctx))
	}
	require.Equal(t, inventory.LeakNotDetected, b.leakStatus(t, quiet.ID), "the full pass looks at every component")
	require.Equal(t, inventory.LeakDetected, b.leakStatus(t, late.ID))
}
