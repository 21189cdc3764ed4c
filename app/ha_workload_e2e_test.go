package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
	"github.com/nicoflow/flow/proto/gen/v1/flowv1connect"
	"github.com/nicoflow/flow/sim/nicosim"
)

// The Patroni chaos test's workload (issue 46): 200 racks, in four parts.
//
//   - Racks 0–149: each round works on 15 of them, 8 forced resets and 7
//     firmware upgrades (UpgradeFirmware to 2.0), the window moving by 15
//     each round; after ten rounds the roles swap, so 20 rounds give each
//     of the 150 one reset and one upgrade.
//   - Racks 150–189: one operation run (a firmware rollout, 2 at once),
//     one phase per round with manual advancement: the test opens the
//     round's phase before its fault, so the rollout advances under it.
//   - Racks 190–199: five interval schedules of haScheduleEvery, two racks
//     each, powering the compute trays on (overlap QUEUE, so every firing
//     submits both racks' tasks), firing the whole run.
const (
	haRoundRacks    = 150
	haRolloutRacks  = 40
	haScheduleRacks = 10
	haPerRound      = 15
	haResetsPerRnd  = 8
	haSchedules     = 5
	haScheduleEvery = 5 * time.Second
	haRacks         = haRoundRacks + haRolloutRacks + haScheduleRacks
)

type haWorkload struct {
	r                 *replicaSetup
	dbURL             string
	started           time.Time
	rackID            map[string]string // name → id
	rackName          map[string]string // id → name
	devsByRack        map[string][]nicosim.Device
	roundRacks        []string
	rolloutRacks      []string
	scheduleRacks     []string
	run               *flowv1.UUID
	phases            int
	schedules         []string
	firings, late     int
	lateInFault       int
	faults            [][2]time.Time // each fault's window, for the report
	firmwareCalls     int
	firmwareRepeats   int
	rolloutFirmware   int
	rolloutRepeats    int
	scheduleTasksSeen int
}

func newHAWorkload(t *testing.T, r *replicaSetup, dbURL string, faults int) *haWorkload {
	t.Helper()
	require.Len(t, r.names, haRacks)
	w := &haWorkload{r: r, dbURL: dbURL, started: time.Now(), rackID: map[string]string{}, rackName: map[string]string{}, devsByRack: map[string][]nicosim.Device{}}
	w.roundRacks = r.names[:haRoundRacks]
	w.rolloutRacks = r.names[haRoundRacks : haRoundRacks+haRolloutRacks]
	w.scheduleRacks = r.names[haRoundRacks+haRolloutRacks:]
	ctx := context.Background()
	rows, err := r.pool(t).Query(ctx, `SELECT name, id::text FROM rack`)
	require.NoError(t, err)
	for rows.Next() {
		var name, id string
		require.NoError(t, rows.Scan(&name, &id))
		w.rackID[name], w.rackName[id] = id, name
	}
	require.NoError(t, rows.Err())
	for _, d := range r.devs {
		// The simulator's Core ID: once inventory sync has linked the
		// components, Flow names them by it instead of their BMC MAC.
		st, ok := r.sims.nico.State(d.BMCMAC)
		require.True(t, ok, d.Name)
		d.ID = st.ID
		name := w.rackName[d.RackID]
		w.devsByRack[name] = append(w.devsByRack[name], d)
	}
	w.phases = min(max(faults, 1), haRolloutRacks)
	return w
}

// round returns the racks round f resets and upgrades.
func (w *haWorkload) round(f int) (resets, upgrades []string) {
	n := len(w.roundRacks)
	start := (f * haPerRound) % n
	swapped := (f*haPerRound/n)%2 == 1
	for i := range haPerRound {
		name := w.roundRacks[(start+i)%n]
		if (i < haResetsPerRnd) != swapped {
			resets = append(resets, name)
		} else {
			upgrades = append(upgrades, name)
		}
	}
	return resets, upgrades
}

// start creates the schedules and the rollout (its first phase starts at
// once).
func (w *haWorkload) start(t *testing.T, client flowv1connect.FlowClient) {
	t.Helper()
	ctx := context.Background()
	for i := range haSchedules {
		name := fmt.Sprintf("ha-%d", i)
		req := scheduleReq(name, "interval", haScheduleEvery.String(), flowv1.OverlapPolicy_OVERLAP_POLICY_QUEUE, w.scheduleRacks[2*i], w.scheduleRacks[2*i+1])
		for _, target := range req.GetOperation().GetPowerOn().GetTargetSpec().GetRacks().GetTargets() {
			target.ComponentTypes = []flowv1.ComponentType{flowv1.ComponentType_COMPONENT_TYPE_COMPUTE}
		}
		_, err := client.CreateTaskSchedule(ctx, req)
		require.NoError(t, err)
		w.schedules = append(w.schedules, name)
	}
	req := rolloutRequest("ha rollout", rolloutOpts{concurrency: 2, phases: equalPhases(int32(w.phases), false)})
	req.Configuration.Operation.GetUpgradeFirmware().TargetSpec = rackSpec(w.rolloutRacks...)
	w.run = createRun(t, client, req)
}

// advance opens phase f of the rollout (f ≥ 1), retrying through errors;
// a refusal with the run already in phase f is an earlier try's answer
// lost.
func (w *haWorkload) advance(t *testing.T, client func(i int) flowv1connect.FlowClient, f int) {
	t.Helper()
	if f == 0 || f >= w.phases {
		return
	}
	deadline := time.Now().Add(2 * time.Minute)
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := client(try%2).AdvanceOperationRunPhase(ctx, &flowv1.AdvanceOperationRunPhaseRequest{Id: w.run, ExpectedPhaseIndex: ptr(int32(f))})
		cancel()
		if err == nil {
			return
		}
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			res, gerr := client(try%2).GetOperationRun(context.Background(), &flowv1.GetOperationRunRequest{Id: w.run, IncludeStats: true})
			if gerr == nil && res.GetOperationRun().GetStats().GetCurrentPhaseStats().GetPhaseIndex() == int32(f) {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "rollout phase %d opened: %v", f, err)
		time.Sleep(500 * time.Millisecond)
	}
}

// submit submits one rack's task with call, retrying through a fault for
// 3 minutes; a conflict (FailedPrecondition) means an earlier try
// committed though its answer was lost.
func submit(t *testing.T, name string, call func(ctx context.Context, try int) ([]*flowv1.UUID, error), acked *[]*flowv1.UUID, lost *int, mu *sync.Mutex) {
	deadline := time.Now().Add(3 * time.Minute)
	for try := 0; time.Now().Before(deadline); try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ids, err := call(ctx, try)
		cancel()
		if err == nil {
			mu.Lock()
			*acked = append(*acked, ids...)
			mu.Unlock()
			return
		}
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			mu.Lock()
			*lost++
			mu.Unlock()
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("rack %s: no submission acknowledged in 3 minutes", name)
}

// okCalls counts, per device (lower-case MAC), the calls to method since
// since that the simulator answered ok.
func okCalls(s *simulators, method string, since time.Time) map[string]int {
	per := map[string]int{}
	for _, c := range s.nico.Journal().Calls(method) {
		if c.Time.Before(since) || c.Code != "ok" {
			continue
		}
		for _, d := range c.Devices {
			per[strings.ToLower(d)]++
		}
	}
	return per
}

// callsTo returns the calls of per (okCalls) that named d, by its BMC MAC
// or its Core ID.
func callsTo(per map[string]int, d nicosim.Device) int {
	n := per[strings.ToLower(d.BMCMAC)]
	if d.ID != "" {
		n += per[strings.ToLower(d.ID)]
	}
	return n
}

// checkFirmware checks that every compute tray and switch of racks had
// its firmware update sent once since the run started, twice only if a
// firmware step of its rack's tasks recorded a call of unknown outcome (unknown,
// by rack: a call in flight, sent once more at most), never when every
// call of the rack's tasks had its outcome recorded, and returns the
// calls and repeats.
func (w *haWorkload) checkFirmware(t *testing.T, what string, racks []string, unknown map[string]int) (calls, repeats int) {
	t.Helper()
	per := okCalls(w.r.sims, "UpdateComponentFirmware", w.started)
	for _, name := range racks {
		for _, d := range w.devsByRack[name] {
			if d.Kind != nicosim.KindCompute && d.Kind != nicosim.KindNVSwitch {
				continue
			}
			n := callsTo(per, d)
			require.GreaterOrEqual(t, n, 1, "%s: %s (%s) upgraded", what, d.Name, name)
			require.LessOrEqual(t, n, 2, "%s: %s upgraded %d times", what, d.Name, n)
			if n == 2 {
				require.Positive(t, unknown[name], "%s: %s (%s) upgraded twice with no unknown outcome recorded in its rack's tasks (a call whose outcome was recorded was sent again)", what, d.Name, name)
			}
			calls += n
			repeats += n - 1
		}
	}
	return calls, repeats
}

// The steps that make the power calls (resets, power-ons) and the
// firmware updates the simulator's journal counts (conditions for
// unknownByRack).
const (
	powerSteps    = "s.spec->>'name' LIKE '%/PowerControl'"
	firmwareSteps = "s.spec->>'name' LIKE '%/FirmwareControl'"
)

// unknownByRack returns, by rack name, how many calls of unknown outcome
// the steps of the rack's tasks created since since recorded (where holds
// more conditions on the task or step: its trigger, the step's kind).
func unknownByRack(t *testing.T, ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, since time.Time, where string) map[string]int {
	t.Helper()
	if where == "" {
		where = "true"
	}
	rows, err := q.Query(ctx, `SELECT r.name, coalesce(sum(jsonb_array_length(s.unknown_outcomes)), 0)::int FROM engine_step s
		JOIN task t ON t.run_id = s.run_id JOIN rack r ON r.id = t.rack_id
		WHERE t.created_at >= $1 AND `+where+` GROUP BY 1`, since)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		require.NoError(t, rows.Scan(&name, &n))
		out[name] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// checkRollout waits for the rollout to reach the gate after phase f (or
// its end after the last), then checks its targets: phases up to f
// completed, each with its task, the later ones not started; and the
// firmware calls of the completed ones.
func (w *haWorkload) checkRollout(t *testing.T, client flowv1connect.FlowClient, f int) string {
	t.Helper()
	last := f >= w.phases-1
	var run *flowv1.OperationRun
	require.Eventually(t, func() bool {
		res, err := client.GetOperationRun(context.Background(), &flowv1.GetOperationRunRequest{Id: w.run, IncludeStats: true})
		if err != nil {
			return false
		}
		run = res.GetOperationRun()
		st := run.GetSummary().GetState()
		if last {
			return st.GetStatus() == flowv1.OperationRunStatus_OPERATION_RUN_STATUS_COMPLETED
		}
		return st.GetStatus() == flowv1.OperationRunStatus_OPERATION_RUN_STATUS_PAUSED &&
			st.GetReason() == flowv1.OperationRunStatusReason_OPERATION_RUN_STATUS_REASON_PHASE_GATE &&
			run.GetStats().GetCurrentPhaseStats().GetPhaseIndex() == int32(f)
	}, 4*time.Minute, 200*time.Millisecond, "round %d: the rollout reaches its gate after phase %d: %v %s", f+1, f, func() any { return run.GetSummary().GetState() }, func() any { return run.GetSummary().GetStatusMessage() })
	var done []string
	for _, tg := range allTargets(t, client, w.run) {
		name := w.rackName[tg.GetRackId().GetId()]
		if int(tg.GetPhaseIndex()) <= f {
			require.Equal(t, flowv1.OperationRunTargetStatus_OPERATION_RUN_TARGET_STATUS_COMPLETED, tg.GetStatus(), "rollout target %s (phase %d): %s", name, tg.GetPhaseIndex(), tg.GetMessage())
			require.NotEmpty(t, tg.GetTaskId().GetId(), "rollout target %s has its task", name)
			done = append(done, name)
		} else {
			require.Empty(t, tg.GetTaskId().GetId(), "rollout target %s of phase %d not started at the gate after phase %d", name, tg.GetPhaseIndex(), f)
		}
	}
	calls, repeats := w.checkFirmware(t, "rollout", done, unknownByRack(t, context.Background(), w.r.pool(t), w.started, firmwareSteps))
	w.rolloutFirmware, w.rolloutRepeats = calls, repeats
	if last {
		require.Len(t, done, haRolloutRacks)
		return fmt.Sprintf("rollout completed: %d racks", len(done))
	}
	return fmt.Sprintf("rollout at its gate after phase %d of %d: %d of %d racks upgraded", f+1, w.phases, len(done), haRolloutRacks)
}

// checkSchedules checks every firing so far, from one snapshot of the
// schedules and their tasks: no firing time has two tasks for a rack, each
// has both racks' tasks, fire_count is the number of firing times, and the
// times follow docs/schedules.md's rule with no catch-up: the next time is
// the previous plus the interval, unless the previous firing ran when
// that was already past (Flow unavailable, or late), in which case the
// next is counted from the moment it ran (rounded up to the second), so a
// missed occurrence is neither replayed nor skipped beyond the outage.
// Then it waits until each schedule has fired after after.
func (w *haWorkload) checkSchedules(t *testing.T, f int, after time.Time) string {
	t.Helper()
	ctx := context.Background()
	type firing struct {
		at    time.Time
		ran   time.Time // the earliest of its tasks' creation
		racks []string
	}
	var (
		fireCount map[string]int
		firings   map[string]map[time.Time]*firing
	)
	require.Eventually(t, func() bool {
		conn, err := pgx.Connect(ctx, w.dbURL)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT s.name, s.fire_count, coalesce(t.description, ''), coalesce(t.rack_id::text, ''), coalesce(t.created_at, now())
			FROM task_schedule s LEFT JOIN task t ON t.trigger_type = 'task_schedule' AND t.trigger_id = s.id::text ORDER BY 1`)
		if err != nil {
			return false
		}
		fireCount, firings = map[string]int{}, map[string]map[time.Time]*firing{}
		for rows.Next() {
			var name, desc, rack string
			var count int
			var created time.Time
			if rows.Scan(&name, &count, &desc, &rack, &created) != nil {
				return false
			}
			fireCount[name] = count
			if firings[name] == nil {
				firings[name] = map[time.Time]*firing{}
			}
			if desc == "" {
				continue
			}
			_, stamp, ok := strings.Cut(desc, " — ")
			require.True(t, ok, "schedule task description %q", desc)
			at, err := time.Parse(time.RFC3339, stamp)
			require.NoError(t, err, desc)
			fi := firings[name][at]
			if fi == nil {
				fi = &firing{at: at, ran: created}
				firings[name][at] = fi
			}
			if created.Before(fi.ran) {
				fi.ran = created
			}
			fi.racks = append(fi.racks, rack)
		}
		return rows.Err() == nil
	}, time.Minute, 200*time.Millisecond)
	require.Len(t, fireCount, haSchedules)
	total, late, lateInFault := 0, 0, 0
	for _, name := range w.schedules {
		byTime := firings[name]
		require.Equal(t, fireCount[name], len(byTime), "round %d: schedule %s: fire_count is its number of firing times", f+1, name)
		var times []time.Time
		for at, fi := range byTime {
			slices.Sort(fi.racks)
			require.Len(t, slices.Compact(slices.Clone(fi.racks)), len(fi.racks), "round %d: schedule %s fired %s twice for a rack", f+1, name, at)
			require.Len(t, fi.racks, 2, "round %d: schedule %s at %s submitted both racks' tasks", f+1, name, at)
			times = append(times, at)
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(times); i++ {
			prev, next := byTime[times[i-1]], times[i]
			gap := next.Sub(prev.at)
			if gap == haScheduleEvery {
				continue
			}
			// Late: prev ran when prev+interval was already past, and
			// next is counted from when it ran.
			late++
			require.GreaterOrEqual(t, gap, 2*haScheduleEvery, "round %d: schedule %s: %s follows %s: neither on time nor after a late firing", f+1, name, next, prev.at)
			from := next.Add(-haScheduleEvery).Sub(prev.ran)
			require.True(t, from > -time.Second && from < 5*time.Second,
				"round %d: schedule %s: after the firing of %s, which ran at %s, the next is %s: not counted from when it ran (no catch-up, none skipped)", f+1, name, prev.at, prev.ran, next)
			for _, win := range w.faults {
				if prev.ran.After(win[0]) && prev.ran.Before(win[1].Add(10*time.Second)) {
					lateInFault++
					break
				}
			}
		}
		total += len(times)
	}
	w.firings, w.late, w.lateInFault = total, late, lateInFault
	// Each schedule fires again after the fault.
	require.Eventually(t, func() bool {
		conn, err := pgx.Connect(ctx, w.dbURL)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		var n int
		return conn.QueryRow(ctx, `SELECT count(*) FROM task_schedule WHERE last_run_at > $1`, after).Scan(&n) == nil && n == haSchedules
	}, 2*time.Minute, 200*time.Millisecond, "round %d: every schedule fires after the fault", f+1)
	return fmt.Sprintf("%d schedule firings, each once (%d late, %d of them at a fault)", total, late, lateInFault)
}

// checkAllEnd waits until every task created before end has ended, and
// checks none failed.
func (w *haWorkload) checkAllEnd(t *testing.T, f int, end time.Time) {
	t.Helper()
	ctx := context.Background()
	var active, failed int
	var failures string
	require.Eventually(t, func() bool {
		conn, err := pgx.Connect(ctx, w.dbURL)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		return conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status IN ('waiting', 'pending', 'running') AND created_at < $1),
				count(*) FILTER (WHERE status IN ('failed', 'terminated')),
				coalesce(string_agg(description || ': ' || status || ' ' || message, '; ') FILTER (WHERE status IN ('failed', 'terminated')), '')
			FROM task`, end).Scan(&active, &failed, &failures) == nil && (active == 0 || failed > 0)
	}, 4*time.Minute, 500*time.Millisecond, "round %d: every task created before the round's end ends (%d still active)", f+1, active)
	require.Zero(t, failed, "round %d: no task failed: %s", f+1, failures)
}

// checkScheduledCalls stops the schedules, lets their last tasks end, and
// checks the scheduled racks' power calls: each compute tray was powered
// on once per completed task of its rack, more only if a scheduled step
// recorded an unknown outcome, and then at most once more per such
// outcome. It returns the calls.
func (w *haWorkload) checkScheduledCalls(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	pool := w.r.pool(t)
	_, err := pool.Exec(ctx, `UPDATE task_schedule SET enabled = false`)
	require.NoError(t, err)
	time.Sleep(2 * time.Second) // a firing in flight commits or rolls back
	w.checkAllEnd(t, -1, time.Now())
	perRack := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT r.name, count(*) FROM task t JOIN rack r ON r.id = t.rack_id
		WHERE t.trigger_type = 'task_schedule' AND t.status = 'completed' GROUP BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		var n int
		require.NoError(t, rows.Scan(&name, &n))
		perRack[name] = n
	}
	require.NoError(t, rows.Err())
	// A tray is powered on once more than its rack's tasks only for a
	// call of unknown outcome recorded in that rack's scheduled tasks, at
	// most once per such call.
	unknown := unknownByRack(t, ctx, pool, w.started, "t.trigger_type = 'task_schedule' AND "+powerSteps)
	calls := okCalls(w.r.sims, "ComponentPowerControl", w.started)
	total := 0
	for _, name := range w.scheduleRacks {
		require.Positive(t, perRack[name], "rack %s has completed scheduled tasks", name)
		for _, d := range w.devsByRack[name] {
			if d.Kind != nicosim.KindCompute {
				continue
			}
			n := callsTo(calls, d)
			require.GreaterOrEqual(t, n, perRack[name], "%s (%s) powered on by each of its rack's %d scheduled tasks", d.Name, name, perRack[name])
			require.LessOrEqual(t, n, perRack[name]+unknown[name], "%s (%s) powered on %d times by %d scheduled tasks, %d unknown outcomes recorded in them (a call whose outcome was recorded was sent again)", d.Name, name, n, perRack[name], unknown[name])
			total += n
		}
	}
	return total
}
