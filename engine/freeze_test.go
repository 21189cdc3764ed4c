package engine_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/db/dbtest"
	"github.com/nicoflow/flow/engine"
)

// fetchTrap is a TCP proxy in front of PostgreSQL that loses the answer to
// one River fetch, as a primary frozen (SIGSTOP) just after the fetch
// committed and replicated does: the fetch's UPDATE commits (its jobs are
// running, attempted by the client), and its answer is held, the
// connection left open and silent. lose then closes the connection (the
// frozen primary demoted: the client's fetch fails), or deliver hands the
// answer over late (the primary thawed).
type fetchTrap struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	armed   bool
	client  string
	trapped chan *trappedConn
}

// trappedConn is the connection whose fetch answer the trap holds.
type trappedConn struct {
	client, up net.Conn
	held       []byte
	release    chan bool // true: deliver the answer; false: close
}

// What an answer of River's fetch (riverpgxv5 JobGetAvailable: the rows
// it locked) carries when it hands a step job over, beside the client's ID
// (attempted_by).
var stepJobValue = []byte("engine.run_step")

func newFetchTrap(t *testing.T, target string) *fetchTrap {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &fetchTrap{ln: ln, target: target, trapped: make(chan *trappedConn, 1)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); up.Close() })
			go p.serve(c, up)
		}
	}()
	return p
}

// arm makes the trap hold the next answer that hands a step job to client
// (a River client ID).
func (p *fetchTrap) arm(client string) {
	p.mu.Lock()
	p.armed, p.client = true, client
	p.mu.Unlock()
}

func (p *fetchTrap) serve(c, up net.Conn) {
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	buf := make([]byte, 64<<10)
	var tail []byte // the end of the last chunk: a match may straddle two
	for {
		n, err := up.Read(buf)
		if n > 0 && p.catches(append(tail, buf[:n]...)) {
			tc := &trappedConn{client: c, up: up, held: bytes.Clone(buf[:n]), release: make(chan bool)}
			p.trapped <- tc
			if !<-tc.release {
				c.Close()
				up.Close()
				return
			}
		}
		if n > 0 {
			tail = append(tail[:0], buf[max(0, n-256):n]...)
			if _, werr := c.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	c.Close()
}

// catches reports whether the trap is armed and b answers River's fetch of
// a step job by the trap's client (a row of river_job naming both), and
// disarms it if so.
func (p *fetchTrap) catches(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed || !bytes.Contains(b, stepJobValue) || !bytes.Contains(b, []byte(p.client)) {
		return false
	}
	p.armed = false
	return true
}

// TestFetchAnswerLostAtAFreeze reproduces issue 46's stuck steps: River's
// fetch of a step job commits on the primary, which freezes before its
// answer reaches the process (make ha-test's freeze of the primary). The
// job is running, attempted by a live process that never heard of it; its
// step is never claimed. The process's own sweep reschedules it within
// its orphan window (here the rescue window, 3 s; a minute by default),
// not after the step's timeout plus the rescue window (here 1 min + 3 s;
// 30 min by default), and the step is called once. When the lost answer
// arrives after all (the primary thawed), the late worker finds the step
// moved on and calls nothing. A step whose claim an ended execution left
// open long ago (its job's end unrecorded: River's completer gives up
// after three tries) is rescheduled too, the open claim's call recorded as
// of unknown outcome.
func TestFetchAnswerLostAtAFreeze(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		late bool // the answer arrives after the step was rescheduled
		// The step's claim is left open, an hour old: as by an execution
		// of this process that returned without recording its call
		// (River's completer then gave up recording the job's end).
		claimOpen bool
	}{{name: "answer lost"}, {name: "answer late", late: true}, {name: "claim left open", claimOpen: true}} {
		name, late := tc.name, tc.late
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dbURL := dbtest.NewDB(t)
			direct := openPool(t, dbURL, 10)
			_, err := direct.Exec(ctx, callTableSQL)
			require.NoError(t, err)
			inserter := newEngine(direct, engine.Config{}) // starts runs only
			newClient(t, direct, inserter)

			pc, err := pgx.ParseConfig(dbURL)
			require.NoError(t, err)
			trap := newFetchTrap(t, net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))))
			cfg, err := pgxpool.ParseConfig(dbURL)
			require.NoError(t, err)
			cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(trap.ln.Addr().(*net.TCPAddr).Port)
			cfg.MaxConns = 10
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			e := newEngineRec(pool, direct, engine.Config{RescueStuckJobsAfter: 3 * time.Second, LeaseHeartbeat: 200 * time.Millisecond})
			startWithLease(t, pool, e)

			trap.arm(e.ProcessName())
			st := step("power-on", testParams{}, "t1")
			st.Timeout = time.Minute // the hung-call rule would take 1 min + 3 s
			var id engine.RunID
			require.NoError(t, pgx.BeginFunc(ctx, direct, func(tx pgx.Tx) (err error) {
				id, err = inserter.Start(ctx, tx, engine.Plan{Stages: []engine.Stage{{Steps: []engine.Step{st}}}})
				return err
			}))
			var held *trappedConn
			select {
			case held = <-trap.trapped:
			case <-time.After(30 * time.Second):
				t.Fatal("the engine's fetch of the step job was not trapped")
			}
			frozeAt := time.Now()
			defer func() {
				select {
				case held.release <- false:
				default:
				}
			}()
			// The fetch committed: the job is running, attempted by the
			// engine, its step unclaimed.
			var orphan int64
			var state string
			var by []string
			var claimed *time.Time
			require.NoError(t, direct.QueryRow(ctx, `SELECT j.id, j.state, j.attempted_by, s.claimed_at FROM engine_step s JOIN river_job j ON j.id = s.job_id WHERE s.run_id = $1`, id).
				Scan(&orphan, &state, &by, &claimed))
			require.Equal(t, "running", state)
			require.Equal(t, e.ProcessName(), by[len(by)-1])
			require.Nil(t, claimed)

			if tc.claimOpen {
				_, err := direct.Exec(ctx, `UPDATE engine_step SET claimed_at = now() - interval '1 hour' WHERE run_id = $1`, id)
				require.NoError(t, err)
			}
			if !late {
				time.Sleep(time.Second)
				held.release <- false // demoted: the fetch fails
			}
			// Rescheduled by the engine's own sweep: a fresh job.
			require.Eventually(t, func() bool {
				var job int64
				require.NoError(t, direct.QueryRow(ctx, `SELECT job_id FROM engine_step WHERE run_id = $1`, id).Scan(&job))
				return job != orphan
			}, 20*time.Second, 20*time.Millisecond, "the orphaned step is rescheduled")
			rescued := time.Since(frozeAt)
			var jobState, jobErr string
			require.NoError(t, direct.QueryRow(ctx, `SELECT state, errors[array_upper(errors, 1)]->>'error' FROM river_job WHERE id = $1`, orphan).Scan(&jobState, &jobErr))
			require.Equal(t, "cancelled", jobState)
			require.Contains(t, jobErr, "never worked by its process")
			if late {
				held.release <- true // thawed: the late answer reaches River
			}
			rep := waitRun(t, direct, inserter, id, 30*time.Second)
			require.Equal(t, engine.StateCompleted, rep.State, rep.Error)
			calls := listCalls(t, direct, id)
			require.Len(t, calls, 1, "the step is called once: %+v", calls)
			if tc.claimOpen {
				uo := rep.Stages[0].Steps[0].UnknownOutcomes
				require.Len(t, uo, 1, "the open claim's call is recorded as of unknown outcome")
				require.Contains(t, uo[0].Why, "ended without recording its outcome")
			} else {
				require.Empty(t, rep.Stages[0].Steps[0].UnknownOutcomes, "no call was in flight when it was rescheduled")
			}
			require.Less(t, rescued, 15*time.Second, "rescheduled within the orphan window and a sweep")
			t.Logf("%s: rescheduled %s after the freeze", name, rescued.Round(time.Millisecond))
		})
	}
}

// TestStepMissingIsRetried: a step job whose step is not there at all (as
// read from an old primary thawed after a failover, which has not seen the
// step the new primary committed with its job) is retried, not ended as
// if its step had ended elsewhere; after missingStepAttempts it ends (a
// step deleted with its rack).
func TestStepMissingIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := openPool(t, dbtest.NewDB(t), 10)
	_, client := startEngine(t, pool, engine.Config{})
	res, err := client.Insert(ctx, engine.RunStepArgs{StepID: 987654321}, &river.InsertOpts{Queue: engine.QueueName})
	require.NoError(t, err)
	job := res.Job.ID
	read := func() (state string, attempt int, errs string) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT state::text, attempt, coalesce(errors::text, '') FROM river_job WHERE id = $1`, job).Scan(&state, &attempt, &errs))
		return state, attempt, errs
	}
	require.Eventually(t, func() bool { _, _, errs := read(); return errs != "" }, 30*time.Second, 20*time.Millisecond,
		"the first attempt fails, to be retried")
	state, _, errs := read()
	require.NotEqual(t, "completed", state, "retried (River makes a retry this soon available at once)")
	require.Contains(t, errs, "step 987654321 not found: read from a server that has not seen it")
	// The last attempt ends the job.
	_, err = pool.Exec(ctx, `UPDATE river_job SET attempt = 4, state = 'available', scheduled_at = now() WHERE id = $1`, job)
	require.NoError(t, err)
	require.Eventually(t, func() bool { state, attempt, _ := read(); return state == "completed" && attempt == 5 }, 30*time.Second, 20*time.Millisecond,
		"the fifth attempt ends the job")
}
