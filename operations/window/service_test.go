package window_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/opstest"
	"github.com/nicoflow/flow/operations/rollout"
	"github.com/nicoflow/flow/operations/window"
	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// clock is the test clock the task manager, the runs and the handler read.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// wakes records the durable wakes scheduled (queue expiry / window wake
// jobs per rack, run wakes per run).
type wakes struct {
	mu    sync.Mutex
	racks map[uuid.UUID][]time.Time
	runs  map[uuid.UUID][]time.Time
}

func (w *wakes) rack(_ context.Context, _ pgx.Tx, id uuid.UUID, at time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.racks[id] = append(w.racks[id], at)
	return nil
}

func (w *wakes) run(_ context.Context, _ pgx.Tx, id uuid.UUID, at time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.runs[id] = append(w.runs[id], at)
	return nil
}

func (w *wakes) scheduled(m map[uuid.UUID][]time.Time, id uuid.UUID, at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range m[id] {
		if x.Equal(at) {
			return true
		}
	}
	return false
}

type bundle struct {
	m     *opstest.Bundle
	svc   *window.Service
	h     *window.Handler
	runs  *rollout.Service
	clock *clock
	wakes *wakes
	racks []inventory.Rack
}

// t0 is a Friday, 12:00 UTC; the test windows open on Saturdays at 02:00
// UTC for 4h.
var (
	t0      = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	satOpen = time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
)

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{clock: &clock{t: t0}, wakes: &wakes{racks: map[uuid.UUID][]time.Time{}, runs: map[uuid.UUID][]time.Time{}}}
	b.m = opstest.NewTasks(t, opstest.Config{RunEnded: true, Expiry: b.wakes.rack})
	for i := range 2 {
		b.racks = append(b.racks, b.m.AddRack(t, i))
	}
	b.svc = window.NewService(window.Config{Inv: b.m.Inv})
	b.m.Tasks.SetStartGate(b.svc)
	b.m.Tasks.SetClock(b.clock.Now)
	b.runs = rollout.NewService(rollout.Config{Pool: b.m.Pool, Tasks: b.m.Tasks, Inv: b.m.Inv, Wake: b.wakes.run})
	b.runs.SetWindowGate(b.svc)
	b.runs.SetClock(b.clock.Now)
	b.m.Tasks.OnTaskEnd(b.runs.TasksEnded)
	b.h = window.NewHandler(b.m.Pool, b.svc, b.m.Tasks, b.runs)
	b.h.SetClock(b.clock.Now)
	return b
}

func (b *bundle) create(t *testing.T, req *adminv1.CreateWindowRequest) *adminv1.Window {
	t.Helper()
	res, err := b.h.CreateWindow(context.Background(), req)
	require.NoError(t, err)
	return res.GetWindow()
}

// saturdays is a window over the site, Saturdays 02:00 UTC for 4h.
func saturdays() *adminv1.CreateWindowRequest {
	return &adminv1.CreateWindowRequest{Kind: "window", Name: "saturdays", Cron: "0 2 * * SAT", TimeZone: "UTC", Duration: durationpb.New(4 * time.Hour),
		Scope: &adminv1.WindowScope{Site: true}}
}

// runOptions run one target at a time.
func runOptions() rollout.RunOptions {
	return rollout.RunOptions{MaxConcurrent: 1, Gates: []rollout.Gate{{Kind: rollout.GateFailureCount, Threshold: 10}}}
}

func powerCycle(r inventory.Rack) operations.Request {
	req := opstest.PowerOn(r)
	req.Code = operations.CodeRestart
	return req
}

func (b *bundle) task(t *testing.T, id uuid.UUID) operations.Task {
	t.Helper()
	tasks, err := b.m.Tasks.Get(context.Background(), []uuid.UUID{id})
	require.NoError(t, err)
	return tasks[0]
}

// TestPowerCycleWaitsForTheWindow: a power cycle submitted outside every
// window waits (not refused) with the reason and the next opening, not
// expiring by its queue timeout; a durable wake is scheduled at the
// opening, where it starts. A power on (not disruptive) starts at once.
func TestPowerCycleWaitsForTheWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := b.create(t, saturdays())
	require.False(t, w.GetOpenNow())
	require.True(t, w.GetNextChange().AsTime().Equal(satOpen))

	// The dry run says so first, and writes nothing.
	var plan operations.SubmissionPlan
	require.NoError(t, pgx.BeginTxFunc(ctx, b.m.Pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) (err error) {
		plan, err = b.m.Tasks.Preview(ctx, tx, powerCycle(b.racks[0]))
		return err
	}))
	require.Len(t, plan.Racks, 1)
	require.True(t, plan.Racks[0].Waiting)
	require.Equal(t, `outside maintenance window "saturdays"; next window opens at 2026-12-05T02:00:00Z`, plan.Racks[0].Held)
	require.Zero(t, b.m.TaskCount(t))

	ids, err := b.m.Submit(t, powerCycle(b.racks[0]))
	require.NoError(t, err)
	task := b.task(t, ids[0])
	require.Equal(t, operations.TaskWaiting, task.Status)
	require.Equal(t, `Held: outside maintenance window "saturdays"; next window opens at 2026-12-05T02:00:00Z`, task.Message)
	require.True(t, b.wakes.scheduled(b.wakes.racks, b.racks[0].ID, satOpen), "a wake at the opening")
	require.True(t, task.QueueExpiresAt.After(satOpen), "no expiry by the queue timeout before the window")

	// Hours later, still before the window: the sweep keeps it waiting.
	b.clock.Set(satOpen.Add(-time.Minute))
	require.NoError(t, b.m.Tasks.Sweep(ctx))
	require.Equal(t, operations.TaskWaiting, b.task(t, ids[0]).Status)

	// Not disruptive: not held.
	on, err := b.m.Submit(t, opstest.PowerOn(b.racks[1]))
	require.NoError(t, err)
	require.Equal(t, operations.TaskPending, b.task(t, on[0]).Status)

	// The window opens: the wake promotes the rack, the task starts.
	b.clock.Set(satOpen)
	require.NoError(t, b.m.Tasks.PromoteRack(ctx, b.racks[0].ID))
	task = b.task(t, ids[0])
	require.Equal(t, operations.TaskPending, task.Status)
	require.NotNil(t, task.RunID)

	// Inside the window a power cycle starts at once.
	_, err = b.m.Tasks.Cancel(ctx, on[0])
	require.NoError(t, err)
	b.clock.Set(satOpen.Add(time.Hour))
	ids, err = b.m.Submit(t, powerCycle(b.racks[1]))
	require.NoError(t, err)
	require.Equal(t, operations.TaskPending, b.task(t, ids[0]).Status)
}

// TestFirmwareTaskCarriesItsWindow: a firmware upgrade held outside the
// window starts at the opening with the window it starts in as its time
// window (start_time, end_time: what Core is told); one submitted inside
// the window carries it from the start.
func TestFirmwareTaskCarriesItsWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.create(t, saturdays())
	upgrade := func(r inventory.Rack) operations.Request {
		req := opstest.PowerOn(r)
		req.Type, req.Code, req.Payload = operations.OperationTypeFirmwareControl, operations.CodeUpgrade, operations.Payload{Operation: 1, TargetVersion: "2.0"}
		return req
	}
	window := func(id uuid.UUID) (start, end int64) {
		var info []byte
		require.NoError(t, b.m.Pool.QueryRow(ctx, "SELECT information FROM task WHERE id = $1", id).Scan(&info))
		var p operations.Payload
		require.NoError(t, json.Unmarshal(info, &p))
		return p.StartTime, p.EndTime
	}
	ids, err := b.m.Submit(t, upgrade(b.racks[0]))
	require.NoError(t, err)
	require.Equal(t, operations.TaskWaiting, b.task(t, ids[0]).Status)
	start, end := window(ids[0])
	require.Zero(t, start, "no window while it waits")
	require.Zero(t, end)

	b.clock.Set(satOpen)
	require.NoError(t, b.m.Tasks.PromoteRack(ctx, b.racks[0].ID))
	require.Equal(t, operations.TaskPending, b.task(t, ids[0]).Status)
	start, end = window(ids[0])
	require.Equal(t, satOpen.Unix(), start)
	require.Equal(t, satOpen.Add(4*time.Hour).Unix(), end)

	b.clock.Set(satOpen.Add(time.Hour))
	ids, err = b.m.Submit(t, upgrade(b.racks[1]))
	require.NoError(t, err)
	require.Equal(t, operations.TaskPending, b.task(t, ids[0]).Status)
	start, end = window(ids[0])
	require.Equal(t, satOpen.Unix(), start)
	require.Equal(t, satOpen.Add(4*time.Hour).Unix(), end)
}

// TestFreezeHoldsAndLeakRunsInAFreeze: a freeze wins over an open window; a
// leak response is never held; an admin's release lets one task start,
// recording who and why.
func TestFreezeHoldsAndLeakRunsInAFreeze(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.create(t, saturdays())
	freezeEnd := satOpen.Add(time.Hour)
	b.create(t, &adminv1.CreateWindowRequest{Kind: "freeze", Name: "incident", StartsAt: timestamppb.New(t0), EndsAt: timestamppb.New(freezeEnd),
		Scope: &adminv1.WindowScope{Racks: []string{b.racks[0].Name}}})
	b.clock.Set(satOpen.Add(30 * time.Minute)) // the window is open, the freeze too

	ids, err := b.m.Submit(t, powerCycle(b.racks[0]))
	require.NoError(t, err)
	task := b.task(t, ids[0])
	require.Equal(t, operations.TaskWaiting, task.Status)
	require.Equal(t, `Held: in freeze "incident" until 2026-12-05T03:00:00Z; next window opens at 2026-12-05T03:00:00Z`, task.Message)
	require.True(t, b.wakes.scheduled(b.wakes.racks, b.racks[0].ID, freezeEnd))

	// The freeze covers rack 0 only.
	other, err := b.m.Submit(t, powerCycle(b.racks[1]))
	require.NoError(t, err)
	require.Equal(t, operations.TaskPending, b.task(t, other[0]).Status)

	// A leak response (force power off, pre-empting) runs in the freeze.
	leak := opstest.PowerOn(b.racks[0])
	leak.Code, leak.Preempt = operations.CodeForcePowerOff, true
	leak.Payload.Leak = &operations.LeakTrigger{EventID: "leak-1", ObservedAt: t0.UnixNano()}
	var leakIDs []uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, b.m.Pool, func(tx pgx.Tx) (err error) {
		leakIDs, err = b.m.Tasks.Submit(ctx, tx, leak)
		return err
	}))
	require.Equal(t, operations.TaskPending, b.task(t, leakIDs[0]).Status)

	// Release: bad input, then the held task starts once nothing
	// conflicts (the leak response holds the rack: it waits for that).
	_, err = b.h.ReleaseTaskFromWindows(ctx, &adminv1.ReleaseTaskFromWindowsRequest{Id: ids[0].String()})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "reason: is required")
	_, err = b.h.ReleaseTaskFromWindows(ctx, &adminv1.ReleaseTaskFromWindowsRequest{Id: uuid.NewString(), Reason: "x"})
	opstest.RequireCode(t, err, connect.CodeNotFound, "task not found")
	_, err = b.h.ReleaseTaskFromWindows(ctx, &adminv1.ReleaseTaskFromWindowsRequest{Id: other[0].String(), Reason: "x"})
	opstest.RequireCode(t, err, connect.CodeFailedPrecondition, "is not waiting")
	_, err = b.m.Tasks.Cancel(ctx, leakIDs[0])
	require.NoError(t, err)
	res, err := b.h.ReleaseTaskFromWindows(ctx, &adminv1.ReleaseTaskFromWindowsRequest{Id: ids[0].String(), Reason: "vendor on site"})
	require.NoError(t, err)
	require.Equal(t, "pending", res.GetStatus())
	require.Contains(t, res.GetMessage(), "Promoted: no conflicting active tasks; released from maintenance windows by ")
	require.Contains(t, res.GetMessage(), ": vendor on site")
}

// TestRolloutPausesBetweenTargets: a run claims targets inside the window;
// when it closes the running child finishes, the next target stays
// unclaimed (no task started outside) with the reason and a wake at the
// next opening, where it resumes by itself. A released run claims at once.
func TestRolloutPausesBetweenTargets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.create(t, saturdays())
	b.clock.Set(satOpen.Add(3*time.Hour + 50*time.Minute)) // 10 minutes before the close

	version := "2.0"
	in := rollout.CreateRunInput{Name: "upgrade", Waves: [][]uuid.UUID{{b.racks[0].ID, b.racks[1].ID}},
		Options: runOptions(), Template: rollout.RunTemplate{TargetVersion: &version}}
	var runID uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, b.m.Pool, func(tx pgx.Tx) (err error) {
		runID, err = b.runs.Create(ctx, tx, in)
		return err
	}))
	targets, _, err := b.runs.ListTargets(ctx, b.m.Pool, runID, rollout.TargetFilter{})
	require.NoError(t, err)
	require.Len(t, targets, 2)
	require.Equal(t, rollout.TargetSubmitted, targets[0].Status)
	require.Equal(t, rollout.TargetPending, targets[1].Status)
	first := *targets[0].TaskID
	require.Equal(t, operations.TaskPending, b.task(t, first).Status)

	// The window closes while the child runs; the child ends after it.
	b.clock.Set(satOpen.Add(4*time.Hour + 5*time.Minute))
	_, err = b.m.Tasks.Cancel(ctx, first)
	require.NoError(t, err)
	nextOpen := satOpen.AddDate(0, 0, 7)
	run, err := b.runs.Run(ctx, b.m.Pool, runID)
	require.NoError(t, err)
	require.Equal(t, rollout.RunRunning, run.Status)
	require.Contains(t, run.Message, `1 target held by maintenance windows (outside maintenance window "saturdays"); next window opens at 2026-12-12T02:00:00Z`)
	targets, _, err = b.runs.ListTargets(ctx, b.m.Pool, runID, rollout.TargetFilter{})
	require.NoError(t, err)
	require.Equal(t, rollout.TargetPending, targets[1].Status, "no task started outside the window")
	require.Equal(t, 1, b.m.TaskCount(t))
	require.True(t, b.wakes.scheduled(b.wakes.runs, runID, nextOpen), "a wake at the next opening")

	// A wake before the opening changes nothing.
	b.clock.Set(nextOpen.Add(-time.Minute))
	require.NoError(t, b.runs.Wake(ctx, runID))
	require.Equal(t, 1, b.m.TaskCount(t))

	// The window opens: the wake claims the target, its task starts.
	b.clock.Set(nextOpen)
	require.NoError(t, b.runs.Wake(ctx, runID))
	targets, _, err = b.runs.ListTargets(ctx, b.m.Pool, runID, rollout.TargetFilter{})
	require.NoError(t, err)
	require.Equal(t, rollout.TargetSubmitted, targets[1].Status)
	require.Equal(t, operations.TaskPending, b.task(t, *targets[1].TaskID).Status)
}

// TestReleasedRunClaimsOutsideWindows: an admin's release lets a held run
// claim now; its child task is not held.
func TestReleasedRunClaimsOutsideWindows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.create(t, saturdays())
	version := "2.0"
	var runID uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, b.m.Pool, func(tx pgx.Tx) (err error) {
		runID, err = b.runs.Create(ctx, tx, rollout.CreateRunInput{Name: "upgrade", Waves: [][]uuid.UUID{{b.racks[0].ID}},
			Options: runOptions(), Template: rollout.RunTemplate{TargetVersion: &version}})
		return err
	}))
	require.Equal(t, 0, b.m.TaskCount(t), "outside the window nothing is claimed")
	_, err := b.h.ReleaseRunFromWindows(ctx, &adminv1.ReleaseRunFromWindowsRequest{Id: runID.String()})
	opstest.RequireCode(t, err, connect.CodeInvalidArgument, "reason: is required")
	_, err = b.h.ReleaseRunFromWindows(ctx, &adminv1.ReleaseRunFromWindowsRequest{Id: uuid.NewString(), Reason: "x"})
	opstest.RequireCode(t, err, connect.CodeNotFound, "operation run not found")
	res, err := b.h.ReleaseRunFromWindows(ctx, &adminv1.ReleaseRunFromWindowsRequest{Id: runID.String(), Reason: "security fix"})
	require.NoError(t, err)
	require.Contains(t, res.GetMessage(), "released from maintenance windows by ")
	require.Contains(t, res.GetMessage(), ": security fix")
	targets, _, err := b.runs.ListTargets(ctx, b.m.Pool, runID, rollout.TargetFilter{})
	require.NoError(t, err)
	require.Equal(t, rollout.TargetSubmitted, targets[0].Status)
	require.Equal(t, operations.TaskPending, b.task(t, *targets[0].TaskID).Status)
}

// TestCreateWindowBadInput: each bad input is InvalidArgument naming the
// field, and nothing is written.
func TestCreateWindowBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	from, until := timestamppb.New(t0), timestamppb.New(t0.Add(time.Hour))
	site := &adminv1.WindowScope{Site: true}
	for _, tt := range []struct {
		name string
		req  *adminv1.CreateWindowRequest
		msg  string
	}{
		{"MalformedCron", &adminv1.CreateWindowRequest{Name: "w", Cron: "0 2 * * XYZ", TimeZone: "UTC", Duration: durationpb.New(time.Hour), Scope: site}, `cron: invalid cron expression "0 2 * * XYZ"`},
		{"UnknownTimeZone", &adminv1.CreateWindowRequest{Name: "w", Cron: "0 2 * * SAT", TimeZone: "Europe/Atlantis", Duration: durationpb.New(time.Hour), Scope: site}, `time_zone: unknown time zone "Europe/Atlantis"`},
		{"ZeroDuration", &adminv1.CreateWindowRequest{Name: "w", Cron: "0 2 * * SAT", TimeZone: "UTC", Scope: site}, "duration: must be positive, not 0s"},
		{"NegativeDuration", &adminv1.CreateWindowRequest{Name: "w", Cron: "0 2 * * SAT", TimeZone: "UTC", Duration: durationpb.New(-time.Hour), Scope: site}, "duration: must be positive, not -1h0m0s"},
		{"EndsBeforeItStarts", &adminv1.CreateWindowRequest{Name: "w", StartsAt: until, EndsAt: from, Scope: site}, "ends_at: 2026-12-04T12:00:00Z is not after starts_at 2026-12-04T13:00:00Z"},
		{"NoPeriod", &adminv1.CreateWindowRequest{Name: "w", Scope: site}, "cron: give either cron (with time_zone and duration) or starts_at and ends_at"},
		{"ScopeNamesNothing", &adminv1.CreateWindowRequest{Name: "w", StartsAt: from, EndsAt: until}, "scope: names nothing"},
		{"UnknownRack", &adminv1.CreateWindowRequest{Name: "w", StartsAt: from, EndsAt: until, Scope: &adminv1.WindowScope{Racks: []string{b.racks[0].Name, "nope"}}}, `scope.racks[1]: rack not found`},
		{"HallWithoutRacks", &adminv1.CreateWindowRequest{Name: "w", StartsAt: from, EndsAt: until, Scope: &adminv1.WindowScope{Halls: []string{"hall-0", "hall-O"}}}, `scope.halls[1]: no rack is in hall "hall-O" (halls: hall-0)`},
		{"RowWithoutRacks", &adminv1.CreateWindowRequest{Name: "w", StartsAt: from, EndsAt: until, Scope: &adminv1.WindowScope{Rows: []string{"row-42"}}}, `scope.rows[0]: no rack is in row "row-42" (rows: 00)`},
		{"UnknownDomain", &adminv1.CreateWindowRequest{Name: "w", StartsAt: from, EndsAt: until, Scope: &adminv1.WindowScope{NvlDomains: []string{"nope"}}}, `scope.nvl_domains[0]:`},
		{"BadKind", &adminv1.CreateWindowRequest{Kind: "blackout", Name: "w", StartsAt: from, EndsAt: until, Scope: site}, `kind: must be window or freeze, not "blackout"`},
		{"NoName", &adminv1.CreateWindowRequest{StartsAt: from, EndsAt: until, Scope: site}, "name: is required"},
	} {
		_, err := b.h.CreateWindow(ctx, tt.req)
		opstest.RequireCode(t, err, connect.CodeInvalidArgument, tt.msg)
	}
	res, err := b.h.ListWindows(ctx, &adminv1.ListWindowsRequest{})
	require.NoError(t, err)
	require.Empty(t, res.GetWindows(), "nothing written")

	// A taken name is AlreadyExists; the same name as a freeze is fine.
	b.create(t, saturdays())
	_, err = b.h.CreateWindow(ctx, saturdays())
	opstest.RequireCode(t, err, connect.CodeAlreadyExists, `a window named "saturdays"`)
	f := saturdays()
	f.Kind = "freeze"
	b.create(t, f)
	got, err := b.h.GetWindow(ctx, &adminv1.GetWindowRequest{Kind: "freeze", Id: "saturdays"})
	require.NoError(t, err)
	require.Equal(t, "freeze", got.GetWindow().GetKind())
	_, err = b.h.DeleteWindow(ctx, &adminv1.DeleteWindowRequest{Kind: "window", Id: "nope"})
	opstest.RequireCode(t, err, connect.CodeNotFound, `window "nope"`)
}
