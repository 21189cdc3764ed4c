package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/engine"
)

// soak reports whether the long forms run (make soak).
func soak() bool { return os.Getenv("FLOW_SOAK") != "" }

// failoverPlan is a power-on as the engine sees it: 3 stages of one step
// over 4 targets, each call 1 s (the backend's latency).
func failoverPlan() engine.Plan {
	var stages []engine.Stage
	for s := range 3 {
		st := step(string(rune('a'+s)), testParams{Block: time.Second}, "t1", "t2", "t3", "t4")
		st.Timeout = time.Minute
		stages = append(stages, engine.Stage{Steps: []engine.Step{st}})
	}
	return engine.Plan{Stages: stages}
}

// TestKillOneOfTwoEngines: two engine processes work 50 runs whose calls
// take 1 s; one is killed (-9) mid-run, with default settings. Every run
// completes; each step the kill interrupted runs again on the survivor
// within 15 s of the kill (lease expiry 10 s + one sweep); no step is
// called twice except those the kill caught in flight. Rounds: 2, or 10
// under make soak, each killing at another moment.
func TestKillOneOfTwoEngines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewDB(t)
	pool := openPool(t, url, 10)
	_, err := pool.Exec(ctx, callTableSQL)
	require.NoError(t, err)
	e := newEngine(pool, engine.Config{}) // inserts only
	newClient(t, pool, e)
	rounds := 2
	if soak() {
		rounds = 10
	}
	startChild := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		// 30 workers each: the 50 runs need both processes.
		cmd.Env = append(os.Environ(), crashChildEnv+"="+url, crashChildWorkersEnv+"=30")
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	clock := func() time.Time {
		var now time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now))
		return now
	}
	startChild() // the survivor
	var worst time.Duration
	var interrupted, resent int
	for round := range rounds {
		victim := startChild()
		// The victim holds its lease (named after its pid) before the
		// runs start.
		var victimName string
		require.Eventually(t, func() bool {
			err := pool.QueryRow(ctx, `SELECT name FROM engine_process WHERE expires_at > now() AND name LIKE '%\_' || $1::text || '\_%'`,
				strconv.Itoa(victim.Process.Pid)).Scan(&victimName)
			return err == nil
		}, 30*time.Second, 20*time.Millisecond)
		var runs []engine.RunID
		for range 50 {
			require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				id, err := e.Start(ctx, tx, failoverPlan())
				runs = append(runs, id)
				return err
			}))
		}
		// Kill at another moment each round: during stage 1, 2 or 3.
		time.Sleep(time.Duration(200+rand.IntN(2600)) * time.Millisecond)
		before := clock()
		require.NoError(t, victim.Process.Kill())
		_ = victim.Wait()
		after := clock()

		for _, id := range runs {
			rep := waitRun(t, pool, e, id, 2*time.Minute)
			require.Equal(t, engine.StateCompleted, rep.State, "round %d: %s", round, rep.Error)
			calls := listCalls(t, pool, id)
			for _, st := range rep.Stages {
				for _, s := range st.Steps {
					var mine []call
					for _, c := range calls {
						if c.StepID == int64(s.ID) {
							mine = append(mine, c)
						}
					}
					require.NotEmpty(t, mine, "step %d was called", s.ID)
					// In flight in the victim at the kill: it had started the
					// call (a dead process starts none; its record's time is
					// when PostgreSQL ran the insert, which can come a moment
					// after the kill, so it is not compared with it) and the
					// step's checkpoint had not committed (the step ended
					// after the kill).
					caught := slices.IndexFunc(mine, func(c call) bool {
						return c.Process == victimName && s.EndedAt.After(before)
					})
					if caught < 0 {
						require.Len(t, mine, 1, "step %d called twice though no kill caught it (victim %s killed %s–%s, step ended %s): %+v", s.ID, victimName, before, after, s.EndedAt, mine)
						continue
					}
					require.LessOrEqual(t, len(mine), 2, "step %d: %+v", s.ID, mine)
					if len(mine) == 2 {
						resent++
						// The sweep that rescheduled it recorded the
						// call's outcome as unknown.
						require.Len(t, s.UnknownOutcomes, 1, "step %d was called again: its first call's outcome is recorded as unknown", s.ID)
						require.Contains(t, s.UnknownOutcomes[0].Why, "lease expired")
						require.Equal(t, []string{"t1", "t2", "t3", "t4"}, s.UnknownOutcomes[0].Targets)
					} else {
						require.Empty(t, s.UnknownOutcomes, "step %d ran once", s.ID)
					}
					if mine[caught].EndedAt != nil {
						continue // it finished before the kill; its checkpoint may or may not have committed
					}
					interrupted++
					require.Len(t, mine, 2, "step %d was interrupted and ran again", s.ID)
					rerun := mine[1].StartedAt.Sub(before)
					require.LessOrEqual(t, rerun, 15*time.Second, "step %d re-ran %s after the kill", s.ID, rerun)
					worst = max(worst, rerun)
				}
			}
		}
	}
	var rescued int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE errors::text LIKE '%Stuck job rescued%'`).Scan(&rescued))
	require.Zero(t, rescued, "River's rescuer never stepped in")
	require.NotZero(t, interrupted, "the kills caught calls in flight")
	t.Logf("%d rounds: %d steps interrupted by the kill, %d calls sent again; kill → first re-run call at most %s", rounds, interrupted, resent, worst.Round(time.Millisecond))
}

// proxy forwards TCP connections to target until cut: then it closes them
// all and refuses new ones until healed (a network partition between an
// engine process and its database).
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// through returns dbURL with its host replaced by the proxy's.
func (p *proxy) through(t *testing.T, dbURL string) string {
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.Host = p.ln.Addr().String()
	return u.String()
}

// partitionParams drive test.partition.
type partitionParams struct{}

// TestPartitionedEngineStopsItsCalls: an engine process whose database
// connections are cut stops its calls within the lease expiry, its late
// SaveCheckpoint is refused once it can reach the database again, and the
// step completes once, on the other process.
func TestPartitionedEngineStopsItsCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := dbtest.NewDB(t)
	direct := openPool(t, dbURL, 10)
	_, err := direct.Exec(ctx, callTableSQL)
	require.NoError(t, err)
	pc, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	px := newProxy(t, net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))))
	cutPool := openPool(t, px.through(t, dbURL), 10)

	type event struct {
		process string
		what    string
		at      time.Time
		err     error
	}
	events := make(chan event, 10)
	register := func(e *engine.Engine) {
		engine.Register(e, "test.partition", func(ctx context.Context, call engine.Call[partitionParams]) (engine.Result, error) {
			var st struct{ Started bool }
			if ok, err := call.Checkpoint(&st); err != nil {
				return engine.Result{}, err
			} else if ok {
				events <- event{process: e.ProcessName(), what: "resumed", at: time.Now()}
				return engine.Result{}, nil // the handle was saved: done at once
			}
			st.Started = true
			if err := call.SaveCheckpoint(ctx, st); err != nil {
				return engine.Result{}, err
			}
			events <- event{process: e.ProcessName(), what: "started", at: time.Now()}
			<-ctx.Done()
			events <- event{process: e.ProcessName(), what: "stopped", at: time.Now(), err: context.Cause(ctx)}
			// The late checkpoint, once the database answers again.
			for {
				err := call.SaveCheckpoint(context.Background(), st)
				if err == nil || errors.Is(err, engine.ErrSuperseded) || errors.Is(err, engine.ErrStepEnded) {
					events <- event{process: e.ProcessName(), what: "late checkpoint", at: time.Now(), err: err}
					return engine.Result{}, ctx.Err()
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	// B, behind the proxy, starts first and takes the step.
	eb := newEngineRec(cutPool, direct, engine.Config{})
	register(eb)
	cb := newClient(t, cutPool, eb)
	require.NoError(t, eb.StartLease(ctx))
	require.NoError(t, cb.Start(ctx))
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = cb.StopAndCancel(c)
	})
	var id engine.RunID
	require.NoError(t, pgx.BeginFunc(ctx, direct, func(tx pgx.Tx) (err error) {
		id, err = eb.Start(ctx, tx, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{{Name: "fw", Action: "test.partition", Timeout: time.Hour}}}}})
		return err
	}))
	ev := <-events
	require.Equal(t, "started", ev.what)
	require.Equal(t, eb.ProcessName(), ev.process)

	// A, connected directly, is the survivor.
	ea := newEngineRec(direct, direct, engine.Config{})
	register(ea)
	ca := newClient(t, direct, ea)
	require.NoError(t, ea.StartLease(ctx))
	require.NoError(t, ca.Start(ctx))
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ca.StopAndCancel(c)
		_ = ea.Stop(c)
	})

	cut := time.Now()
	px.setCut(true)
	var stopped, resumed time.Time
	for stopped.IsZero() || resumed.IsZero() {
		select {
		case ev := <-events:
			switch ev.what {
			case "stopped":
				require.Equal(t, eb.ProcessName(), ev.process)
				require.ErrorIs(t, ev.err, engine.ErrLeaseLost)
				stopped = ev.at
			case "resumed":
				require.Equal(t, ea.ProcessName(), ev.process)
				resumed = ev.at
			default:
				t.Fatalf("unexpected %+v", ev)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no failover within 30 s")
		}
	}
	require.LessOrEqual(t, stopped.Sub(cut), engine.DefaultLeaseExpiry, "the partitioned process stops its call within the lease expiry")
	require.True(t, stopped.Before(resumed), "the call stopped before the other process resumed the step")
	rep := waitRun(t, direct, ea, id, 30*time.Second)
	require.Equal(t, engine.StateCompleted, rep.State, rep.Error)

	px.setCut(false)
	select {
	case ev := <-events:
		require.Equal(t, "late checkpoint", ev.what)
		require.Error(t, ev.err, "the late checkpoint is refused")
	case <-time.After(30 * time.Second):
		t.Fatal("no late checkpoint")
	}
	var reschedules int
	require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE errors::text LIKE '%lease expired%'`).Scan(&reschedules))
	require.Equal(t, 1, reschedules)
	t.Logf("cut → call stopped %s, cut → resumed elsewhere %s", stopped.Sub(cut).Round(time.Millisecond), resumed.Sub(cut).Round(time.Millisecond))
}

// TestRollingRestartHandsStepsBack: one of two engines is stopped
// gracefully (SIGTERM in flow serve) while 50 runs' steps take longer than
// its shutdown budget: it stops fetching, hands the running steps back in
// one transaction and releases its lease; the other engine runs them at
// once. No step fails, none waits for a lease to expire or the rescue
// window. Steps take 8 s (margin for a loaded machine), or 20 s under
// make soak.
func TestRollingRestartHandsStepsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stepTime := 8 * time.Second
	if soak() {
		stepTime = 20 * time.Second
	}
	b := setup(t, engine.Config{})
	// The second replica, the one restarted.
	pool2 := openPool(t, b.url, 20)
	e2 := newEngine(pool2, engine.Config{})
	c2 := newClient(t, pool2, e2)
	require.NoError(t, e2.StartLease(ctx))
	require.NoError(t, c2.Start(ctx))
	var runs []engine.RunID
	for range 50 {
		st := step("long", testParams{Block: stepTime}, "t")
		st.Timeout = time.Minute
		runs = append(runs, b.start(t, engine.Plan{Labels: map[string]string{"task_id": fmt.Sprintf("task-%d", len(runs))}, Stages: []engine.Stage{{Steps: []engine.Step{st}}}}))
	}
	require.Eventually(t, func() bool {
		var n int
		_ = b.pool.QueryRow(ctx, `SELECT count(DISTINCT step_id) FROM test_call`).Scan(&n)
		return n == 50
	}, 30*time.Second, 10*time.Millisecond)
	var held int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM test_call WHERE process = $1`, e2.ProcessName()).Scan(&held))
	require.NotZero(t, held, "the restarted replica holds steps")

	// SIGTERM: stop fetching, a 1 s budget, hand back, cancel.
	stopAt := time.Now()
	e2.BeginStop()
	budget, cancel := context.WithTimeout(ctx, time.Second)
	require.ErrorIs(t, c2.Stop(budget), context.DeadlineExceeded)
	cancel()
	require.NoError(t, e2.Stop(ctx))
	hard, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, c2.StopAndCancel(hard))
	var leases int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM engine_process WHERE name = $1`, e2.ProcessName()).Scan(&leases))
	require.Zero(t, leases, "the lease is released")

	var worst time.Duration
	for _, id := range runs {
		rep := waitRun(t, b.pool, b.engine, id, time.Minute)
		require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
		calls := b.calls(t, id)
		if calls[0].Process != e2.ProcessName() {
			require.Len(t, calls, 1)
			continue
		}
		require.Len(t, calls, 2, "handed back and run once more")
		require.Equal(t, b.engine.ProcessName(), calls[1].Process)
		worst = max(worst, calls[1].StartedAt.Sub(stopAt))
	}
	// Within the budget plus a fetch, well before a lease would expire.
	require.Less(t, worst, engine.DefaultLeaseExpiry)
	// The fresh jobs of handed-back steps carry the run's labels, stage,
	// step and action as the first jobs did (what River UI shows).
	var jobs, labelled int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE metadata->>'task_id' LIKE 'task-%' AND metadata->>'action' <> '' AND metadata ? 'step')
		FROM river_job WHERE kind = $1`, engine.RunStepArgs{}.Kind()).Scan(&jobs, &labelled))
	require.Equal(t, 50+held, jobs, "one job per step and one more per handed-back step")
	require.Equal(t, jobs, labelled, "every step job names its task, step and action")
	t.Logf("%d steps handed back; SIGTERM → re-run on the other replica at most %s", held, worst.Round(time.Millisecond))
}
