package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/nicoflow/flow/engine/internal/dbsqlc"
)

// Process leases and fencing (docs/engine.md, "Leases and fencing").
//
// Every engine process holds a lease: a row of engine_process, named after
// its River client, that it renews every LeaseHeartbeat and that expires
// LeaseExpiry after the last renewal. River hands a step's job to a client
// (river_job.attempted_by); the step's execution records the lease it runs
// under (process_id) and a token (exec_token) that every write of the
// execution must match. Every process sweeps, every heartbeat, the running
// step jobs whose client holds no live lease (a cheap probe first, the scan
// only when it finds one; sweepTick): in one transaction per sweep
// their steps get a new token (fencing the dead execution), their deadlines
// the time they were stranded, a fresh River job each, and the orphaned
// jobs are ended. A process that cannot renew its lease cancels its own
// calls before it expires, so a partitioned process stops calling the
// backends before anyone else starts.

// Defaults of the lease settings (Config).
const (
	DefaultLeaseHeartbeat = 2 * time.Second
	DefaultLeaseExpiry    = 10 * time.Second
)

// Errors of fenced executions: the cause of a call context cancelled
// because this process lost its lease, handed its steps back while
// stopping, or learnt its execution was superseded.
var (
	ErrLeaseLost = errors.New("engine process lease lost (database unreachable): call stopped; the step is rescheduled elsewhere")
	ErrHandedOff = errors.New("engine process stopping: step handed back to another process")
	// ErrSuperseded is returned by Call.SaveCheckpoint and Call.ReportProgress
	// (and is the cause of the call's context) when the step's execution was
	// superseded: its process was declared dead and the step rescheduled.
	ErrSuperseded = errors.New("step execution superseded: the step was rescheduled elsewhere")
)

// lease is this process's lease.
type lease struct {
	name     string       // the River client ID, engine_process.name
	id       atomic.Int64 // engine_process.id of the current lease; 0: none
	ok       atomic.Bool  // renewed recently enough to call backends
	stopping atomic.Bool  // Stop was called: no new calls
	started  atomic.Bool
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	fence    *time.Timer // cancels the calls when the lease is about to expire
}

// processName is a River client ID unique to this process: host, pid and a
// random suffix (River allows 100 characters).
func processName() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	host = strings.NewReplacer(".", "_", " ", "_").Replace(host)
	if len(host) > 50 {
		host = host[:50]
	}
	return fmt.Sprintf("%s_%d_%x", host, os.Getpid(), time.Now().UnixNano()&0xffffffffff)
}

// ProcessName is the name of this engine process: its River client's ID
// and its lease's name in engine_process.
func (e *Engine) ProcessName() string { return e.lease.name }

// StartLease takes this process's lease and starts renewing it and
// sweeping the steps of dead processes, until Stop. Call it before the
// River client starts: a process without a lease works steps nobody else
// can rescue before the rescue window.
func (e *Engine) StartLease(ctx context.Context) error {
	if !e.lease.started.CompareAndSwap(false, true) {
		return nil
	}
	if err := e.register(ctx); err != nil {
		e.lease.started.Store(false)
		return err
	}
	e.lease.stop = make(chan struct{})
	e.lease.done = make(chan struct{})
	go e.leaseLoop()
	return nil
}

// register inserts a new lease for this process and arms the fence.
func (e *Engine) register(ctx context.Context) error {
	start := time.Now()
	id, err := e.q.ProcessInsert(ctx, e.pool, dbsqlc.ProcessInsertParams{ProcessName: e.lease.name, ExpiryMs: e.cfg.LeaseExpiry.Milliseconds()})
	if err != nil {
		return fmt.Errorf("engine: take process lease: %w", err)
	}
	e.lease.id.Store(id)
	e.renewed(start)
	e.logger.InfoContext(ctx, "engine process lease taken", "process", e.lease.name, "lease_id", id)
	return nil
}

// renewed records a renewal that began at start: the calls may go on
// until start + expiry − heartbeat, a heartbeat before any other process
// may see the lease expired (the database stamps the expiry after start).
func (e *Engine) renewed(start time.Time) {
	left := e.cfg.LeaseExpiry - e.cfg.LeaseHeartbeat - time.Since(start)
	e.lease.mu.Lock()
	defer e.lease.mu.Unlock()
	if e.lease.fence == nil {
		e.lease.fence = time.AfterFunc(left, e.fenced)
	} else {
		e.lease.fence.Reset(left)
	}
	e.lease.ok.Store(true)
}

// fenced runs when the lease could not be renewed in time: every call of
// this process is cancelled, and no new one starts until a renewal.
func (e *Engine) fenced() {
	if !e.lease.ok.Swap(false) {
		return
	}
	e.logger.Warn("engine process lease not renewed in time: cancelling this process's calls", "process", e.lease.name, "lease_id", e.lease.id.Load())
	e.watches.cancelAll(ErrLeaseLost)
}

func (e *Engine) leaseLoop() {
	defer close(e.lease.done)
	t := time.NewTicker(e.cfg.LeaseHeartbeat)
	defer t.Stop()
	var lastFull time.Time // zero: the first heartbeat makes a full pass
	for {
		select {
		case <-e.lease.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.LeaseHeartbeat)
		e.heartbeat(ctx)
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), groupTimeout)
		start := time.Now()
		full := start.Sub(lastFull) >= e.hungPassInterval()
		res, err := e.sweepTick(ctx, full)
		switch {
		case err != nil && ctx.Err() == nil:
			e.logger.Warn("engine lease sweep failed", "error", err.Error())
		case err != nil:
		case res.more:
			lastFull = time.Time{} // the scan's LIMIT cut it short: go on at the next heartbeat
		case full:
			lastFull = start
		}
		cancel()
	}
}

// maxHungPassInterval is the longest time between two full passes of the
// heartbeat's sweep, the only ones that look for hung calls (a call in a
// live process still going RescueStuckJobsAfter past its own timeout). That check has to read every running step job and its
// step (50-325 ms each at 3,000 racks, docs/bench.md), while it only matters
// after RescueStuckJobsAfter (30 min by default): a pass every 30 s finds a
// hung call at most 30 s later than one every heartbeat would, 1/60 of the
// window. Shorter windows get passes at 1/60 of theirs (hungPassInterval),
// every heartbeat at most. Dead processes' steps are looked for every
// heartbeat all the same, by a cheap probe (sweepTick).
const maxHungPassInterval = 30 * time.Second

// hungPassInterval is how often the heartbeat's sweep makes a full pass.
func (e *Engine) hungPassInterval() time.Duration {
	return min(maxHungPassInterval, e.cfg.RescueStuckJobsAfter/60)
}

// heartbeat renews the lease, or takes a new one when it was lost.
func (e *Engine) heartbeat(ctx context.Context) {
	start := time.Now()
	n, err := e.q.ProcessRenew(ctx, e.pool, dbsqlc.ProcessRenewParams{ID: e.lease.id.Load(), ExpiryMs: e.cfg.LeaseExpiry.Milliseconds()})
	switch {
	case err != nil:
		e.logger.Warn("engine process lease not renewed", "process", e.lease.name, "error", err.Error())
	case n == 1:
		e.renewed(start)
	default:
		// Expired (and maybe swept): its executions are superseded. Stop
		// them and start afresh under a new lease.
		e.fenced()
		if err := e.register(ctx); err != nil {
			e.logger.Warn("engine process lease lost and not retaken", "process", e.lease.name, "error", err.Error())
		}
	}
}

// sweep modes.
const (
	sweepDead    = "dead"    // steps of clients without a live lease, and hung calls
	sweepHandOff = "handoff" // this process's own running steps
)

// sweepCandidatesSQL finds the running step jobs to reschedule: for
// sweepDead, those whose client holds no live lease, other than this
// process ($3: it is alive, whatever its lease row says; after an outage
// longer than its lease it keeps its outcomes and retakes its lease, and
// sweeping itself would only make it call again), or whose call began
// longer ago than its timeout plus the rescue window ($4 ms) in any
// process (a hung call, the last resort), or this process's own orphans:
// attempted by it longer ago than $5 ms, not among the jobs it works or
// worked within that time ($6), their steps unclaimed or claimed longer
// ago than that (orphan.go); for
// sweepHandOff, those of client $3. Each with the time it was stranded:
// since its process's last heartbeat, or since the fetch for an orphan (0
// when handed off or hung), and whether it is an orphan (its release then
// requires the step still unclaimed). It reaches the steps through
// River's running jobs (few, indexed by state and queue).
const sweepCandidatesSQL = `
SELECT s.id, s.run_id, j.id AS job_id, j.attempt,
    CASE WHEN o.orphan
        THEN (extract(epoch FROM greatest(now() - j.attempted_at, interval '0')) * 1000)::bigint
        WHEN $2::text = 'dead' AND NOT coalesce(l.live, false)
        THEN (extract(epoch FROM greatest(now() - coalesce(l.heartbeat_at, s.claimed_at, j.attempted_at, now()), interval '0')) * 1000)::bigint
        ELSE 0 END AS stranded_ms,
    o.orphan
FROM river_job j
JOIN engine_step s ON s.id = (j.args->>'step_id')::bigint AND s.job_id = j.id AND s.state = 'running'
LEFT JOIN LATERAL (
    SELECT max(p.heartbeat_at) AS heartbeat_at, bool_or(p.expires_at > now()) AS live
    FROM engine_process p WHERE p.name = j.attempted_by[array_upper(j.attempted_by, 1)]
) l ON true
CROSS JOIN LATERAL (
    SELECT coalesce($2::text = 'dead' AND j.attempted_by[array_upper(j.attempted_by, 1)] = $3
        AND j.attempted_at < now() - $5::bigint * interval '1 millisecond'
        AND (s.claimed_at IS NULL OR s.claimed_at < now() - $5::bigint * interval '1 millisecond')
        AND NOT coalesce(j.id = ANY($6::bigint[]), false), false) AS orphan
) o
WHERE j.state = 'running' AND j.queue = ANY($1::text[]) AND j.kind = 'engine.run_step'
    AND CASE WHEN $2::text = 'handoff' THEN j.attempted_by[array_upper(j.attempted_by, 1)] = $3
        ELSE (NOT coalesce(l.live, false) AND j.attempted_by[array_upper(j.attempted_by, 1)] IS DISTINCT FROM $3)
            OR greatest(s.claimed_at, j.attempted_at) + ((s.spec->>'timeout_ms')::bigint + $4::bigint) * interval '1 millisecond' < now()
            OR o.orphan
        END
ORDER BY s.run_id, s.id
LIMIT 500` // sweepLimit

// stepReleaseSQL fences the executions of steps ($1, with their jobs $2,
// 0 for none, and stranded times $3): a new token, no process, the
// deadline pushed back by the stranded time. Steps that moved on meanwhile
// are left alone, and an orphan's or a lost job's step ($5) claimed within
// the orphan window ($6 ms) too (a late answer to its fetch began working
// it: its call may be in flight).
const stepReleaseSQL = `
UPDATE engine_step s
SET exec_token = s.exec_token + 1, process_id = NULL, claimed_at = NULL,
    deadline_at = s.deadline_at + i.stranded_ms * interval '1 millisecond',
    -- A claim still open: the call was in flight (or its outcome not yet
    -- recorded) when its process died or handed it back.
    unknown_outcomes = CASE WHEN s.claimed_at IS NOT NULL
        THEN s.unknown_outcomes || jsonb_build_array(jsonb_build_object(
            'batch', s.batch_index, 'attempt', s.attempt + 1, 'began_at', s.claimed_at,
            'process_id', s.process_id, 'found_at', now(),
            'why', CASE WHEN i.orphan THEN 'the execution that made the call ended without recording its outcome' ELSE $4::text END))
        ELSE s.unknown_outcomes END
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $5::bool[]) AS i(id, job_id, stranded_ms, orphan)
WHERE s.id = i.id AND coalesce(s.job_id, 0) = i.job_id AND s.state = 'running'
    AND (NOT i.orphan OR s.claimed_at IS NULL OR s.claimed_at < now() - $6::bigint * interval '1 millisecond')
RETURNING s.id, s.run_id, s.job_id`

// sweepLimit is how many steps one sweep reschedules at most
// (sweepCandidatesSQL's LIMIT).
const sweepLimit = 500

// lostJobsSQL finds, for a full pass, the running steps of running runs
// whose River job is gone from under them: finalized (completed, cancelled,
// discarded) or missing (deleted, or none recorded), with the time each
// was stranded (since its job ended; 0 when missing). No sweep of running
// jobs sees them and nothing else would ever run them: River discarding a
// job whose attempts an outage spent, a job ended for a step a thawed old
// primary did not show, a job cancelled or deleted by hand in River UI.
// A step with a claim that may still be in flight (claimed within its
// call timeout plus the orphan window, $1 ms) is left to a later pass.
// It reads the running steps through engine_step_running (migration
// 0345), so its cost follows the running steps, not the table.
const lostJobsSQL = `
SELECT s.id, s.run_id, coalesce(s.job_id, 0) AS job_id, coalesce(j.attempt, 0) AS attempt,
    CASE WHEN j.finalized_at IS NULL THEN 0
        ELSE (extract(epoch FROM greatest(now() - j.finalized_at, interval '0')) * 1000)::bigint END AS stranded_ms,
    true AS orphan
FROM engine_step s
JOIN engine_run r ON r.id = s.run_id AND r.state = 'running'
LEFT JOIN river_job j ON j.id = s.job_id
WHERE s.state = 'running'
    AND (j.id IS NULL OR j.state IN ('completed', 'cancelled', 'discarded'))
    AND (s.claimed_at IS NULL
        OR s.claimed_at < now() - (coalesce((s.spec->>'timeout_ms')::bigint, 0) + $1::bigint) * interval '1 millisecond')
ORDER BY s.run_id, s.id
LIMIT 500` // sweepLimit

// orphanProbeSQL reports whether this process ($2) has an orphaned step
// job (orphan.go): the heartbeat's probe, which reads this process's
// running step jobs only. Its conditions are sweepCandidatesSQL's orphan.
const orphanProbeSQL = `
SELECT EXISTS (
    SELECT 1 FROM river_job j
    JOIN engine_step s ON s.id = (j.args->>'step_id')::bigint AND s.job_id = j.id AND s.state = 'running'
    WHERE j.state = 'running' AND j.queue = ANY($1::text[]) AND j.kind = 'engine.run_step'
        AND j.attempted_by[array_upper(j.attempted_by, 1)] = $2
        AND j.attempted_at < now() - $3::bigint * interval '1 millisecond'
        AND (s.claimed_at IS NULL OR s.claimed_at < now() - $3::bigint * interval '1 millisecond')
        AND NOT coalesce(j.id = ANY($4::bigint[]), false))`

// SweepResult counts what a sweep did.
type SweepResult struct {
	Steps   int // steps rescheduled
	Leases  int // expired leases removed
	Orphans int // of Steps, this process's own orphaned jobs (orphan.go)
	Lost    int // of Steps, those whose job was finalized or missing (full passes)

	more bool // the candidate scan hit sweepLimit: more may be left
}

// sweepStats counts the heartbeat sweeps' probes and the candidate scans
// of dead-process sweeps (full passes and those a probe called for).
type sweepStats struct {
	probes, scans atomic.Int64
}

// sweepTick is the heartbeat's sweep. A full pass (full) is Sweep. Otherwise
// it probes for an expired lease (ProcessExpiredExists: one row per
// process, no step, no job, no lock) and sweeps only when it finds one. A
// process's steps lose their live lease when the lease expires, and a
// sweep removes an expired lease only with the last of its steps (a pass
// cut short by its LIMIT keeps it) and Stop its own only with the last of
// its own, so the probe finds every dead process the scan would, at the
// same heartbeat. What it cannot see waits for the next full pass
// (hungPassInterval): hung calls, and jobs of a River client that never
// took a lease or fetched one after its lease was swept and died before
// renewing (it takes a new lease under the same name at its next
// heartbeat otherwise).
func (e *Engine) sweepTick(ctx context.Context, full bool) (SweepResult, error) {
	if e.client == nil {
		return SweepResult{}, ErrNoClient
	}
	if !full {
		e.sweepStats.probes.Add(1)
		expired, err := e.q.ProcessExpiredExists(ctx, e.pool)
		if err != nil {
			return SweepResult{}, fmt.Errorf("probe for expired leases: %w", err)
		}
		if !expired {
			// This process's own orphans (orphan.go), as cheaply.
			working := e.working.recent(e.orphanAfter())
			if err := e.pool.QueryRow(ctx, orphanProbeSQL, []string{QueueName, UrgentQueue}, e.lease.name,
				e.orphanAfter().Milliseconds(), working).Scan(&expired); err != nil {
				return SweepResult{}, fmt.Errorf("probe for orphaned jobs: %w", err)
			}
		}
		if !expired {
			return SweepResult{}, nil
		}
	}
	return e.sweep(ctx, sweepDead, full)
}

// Sweep reschedules the running steps of processes without a live lease
// (and calls hung past their timeout plus the rescue window), and removes
// expired leases: a full pass, which reads every running step. Every
// process sweeps every heartbeat, but makes a full pass only every
// hungPassInterval (30 s by default) and otherwise only when a cheap probe
// finds a dead process; concurrent sweeps skip each other's leases and
// never reschedule a step twice.
func (e *Engine) Sweep(ctx context.Context) (SweepResult, error) {
	return e.sweep(ctx, sweepDead, true)
}

// sweep reschedules the steps mode names; a full pass (full) also takes
// the running steps whose job was finalized or is missing (lostJobsSQL).
func (e *Engine) sweep(ctx context.Context, mode string, full bool) (SweepResult, error) {
	var res SweepResult
	if e.client == nil {
		return res, ErrNoClient
	}
	err := pgx.BeginTxFunc(ctx, e.pool, checkpointTxOptions, func(tx pgx.Tx) error {
		res = SweepResult{}
		var expired []int64
		if mode == sweepDead {
			rows, err := e.q.ProcessLockExpired(ctx, tx)
			if err != nil {
				return fmt.Errorf("lock expired leases: %w", err)
			}
			for _, r := range rows {
				expired = append(expired, r.ID)
			}
		}
		type cand struct {
			step, run, job int64
			attempt        int
			stranded       int64
			orphan         bool
		}
		// Both queries below answer a candidate's columns in this order.
		scanCand := func(r pgx.CollectableRow) (c cand, err error) {
			err = r.Scan(&c.step, &c.run, &c.job, &c.attempt, &c.stranded, &c.orphan)
			return c, err
		}
		if mode == sweepDead {
			e.sweepStats.scans.Add(1)
		}
		// Taken before the scan: a job this process begins working after
		// it is left alone by its claim (stepReleaseSQL).
		working := e.working.recent(e.orphanAfter())
		rows, err := tx.Query(ctx, sweepCandidatesSQL, []string{QueueName, UrgentQueue}, mode, e.lease.name,
			e.cfg.RescueStuckJobsAfter.Milliseconds(), e.orphanAfter().Milliseconds(), working)
		if err != nil {
			return fmt.Errorf("find steps to reschedule: %w", err)
		}
		cands, err := pgx.CollectRows(rows, scanCand)
		if err != nil {
			return fmt.Errorf("find steps to reschedule: %w", err)
		}
		res.more = len(cands) == sweepLimit
		lost := map[int64]bool{} // by step
		if full && mode == sweepDead && !res.more {
			rows, err := tx.Query(ctx, lostJobsSQL, e.orphanAfter().Milliseconds())
			if err != nil {
				return fmt.Errorf("find steps whose job ended: %w", err)
			}
			more, err := pgx.CollectRows(rows, scanCand)
			if err != nil {
				return fmt.Errorf("find steps whose job ended: %w", err)
			}
			for _, c := range more {
				lost[c.step] = true
			}
			res.more = len(more) == sweepLimit
			cands = append(cands, more...)
		}
		if len(cands) > 0 {
			runIDs := make([]int64, 0, len(cands))
			var steps, jobs, stranded []int64
			var orphans []bool
			attempts := map[int64]int{}
			orphaned := map[int64]bool{}
			for _, c := range cands {
				runIDs = append(runIDs, c.run)
				steps, jobs, stranded = append(steps, c.step), append(jobs, c.job), append(stranded, c.stranded)
				orphans = append(orphans, c.orphan)
				attempts[c.job] = c.attempt
				orphaned[c.job] = c.orphan
			}
			// Run rows first, as checkpoints and Cancel lock them.
			slices.Sort(runIDs)
			runIDs = slices.Compact(runIDs)
			if err := e.q.RunLockMany(ctx, tx, runIDs); err != nil {
				return fmt.Errorf("lock runs: %w", err)
			}
			why := "its process's lease expired during the call"
			if mode == sweepHandOff {
				why = "its process stopped during the call"
			}
			released, err := tx.Query(ctx, stepReleaseSQL, steps, jobs, stranded, why, orphans, e.orphanAfter().Milliseconds())
			if err != nil {
				return fmt.Errorf("release steps: %w", err)
			}
			type rel struct{ step, run, job int64 }
			rels, err := pgx.CollectRows(released, func(r pgx.CollectableRow) (x rel, err error) {
				err = r.Scan(&x.step, &x.run, &x.job)
				return x, err
			})
			if err != nil {
				return fmt.Errorf("release steps: %w", err)
			}
			if len(rels) > 0 {
				params := make([]river.InsertManyParams, len(rels))
				var set dbsqlc.StepSetJobsParams
				old := make([]int64, len(rels))
				for i, r := range rels {
					old[i] = r.job
				}
				meta, err := jobMetadata(ctx, tx, old)
				if err != nil {
					return err
				}
				for i, r := range rels {
					params[i] = river.InsertManyParams{Args: RunStepArgs{StepID: StepID(r.step)}, InsertOpts: carriedOpts(meta[r.job], r.run, r.step)}
					set.IDs = append(set.IDs, r.step)
				}
				inserted, err := e.client.InsertManyTx(ctx, tx, params)
				if err != nil {
					return fmt.Errorf("enqueue rescheduled steps: %w", err)
				}
				for _, r := range inserted {
					set.JobIDs = append(set.JobIDs, r.Job.ID)
				}
				if err := e.q.StepSetJobs(ctx, tx, set); err != nil {
					return fmt.Errorf("record rescheduled jobs: %w", err)
				}
				why := "engine process lease expired: step rescheduled"
				if mode == sweepHandOff {
					why = "engine process stopping: step handed back"
				}
				// A lost job has ended already (or is gone): only the
				// running ones are ended here.
				running := make([]int64, 0, len(rels))
				for _, r := range rels {
					if !lost[r.step] {
						running = append(running, r.job)
					}
				}
				if len(running) > 0 {
					err = finalizeJobs(ctx, tx, running, func(i int) (rivertype.JobState, string, int) {
						if orphaned[running[i]] {
							return rivertype.JobStateCancelled, orphanWhy, attempts[running[i]]
						}
						return rivertype.JobStateCancelled, why, attempts[running[i]]
					})
					if err != nil {
						return err
					}
				}
				// A run's timeout moves with its most stranded step (of
				// those released).
				relStep := map[int64]bool{}
				for _, r := range rels {
					relStep[r.step] = true
					switch {
					case lost[r.step]:
						res.Lost++
					case orphaned[r.job]:
						res.Orphans++
					}
				}
				byRun := map[int64]int64{}
				for i, c := range cands {
					if relStep[c.step] {
						byRun[c.run] = max(byRun[c.run], stranded[i])
					}
				}
				var ext dbsqlc.RunExtendTimeoutParams
				for run, ms := range byRun {
					if ms > 0 {
						ext.IDs, ext.Ms = append(ext.IDs, run), append(ext.Ms, ms)
					}
				}
				if len(ext.IDs) > 0 {
					if err := e.q.RunExtendTimeout(ctx, tx, ext); err != nil {
						return fmt.Errorf("extend run timeouts: %w", err)
					}
				}
				res.Steps = len(rels)
			}
		}
		switch {
		case mode == sweepHandOff:
			expired = append(expired, e.lease.id.Load())
		case res.more:
			// Steps of these leases may be left: keep them expired, so the
			// next heartbeat's probe sweeps again.
			expired = nil
		}
		if len(expired) > 0 {
			if err := e.q.ProcessDelete(ctx, tx, expired); err != nil {
				return fmt.Errorf("remove expired leases: %w", err)
			}
			res.Leases = len(expired)
		}
		return nil
	})
	if err == nil && res.Steps > 0 {
		e.logger.InfoContext(ctx, "engine steps rescheduled", "reason", mode, "steps", res.Steps, "orphaned_jobs", res.Orphans, "lost_jobs", res.Lost, "expired_leases", res.Leases)
	}
	return res, err
}

// orphanWhy is the error an orphaned job of this process ends with
// (orphan.go; River UI shows it).
const orphanWhy = "engine step job fetched but never worked by its process (the fetch's answer was lost): step rescheduled"

// Stop hands this process's work back and releases its lease: no new call
// starts (a step between batches goes back to the queue), calls still
// running are cancelled and their steps rescheduled for another process in
// one transaction, and the lease is removed so no one waits for it to
// expire. Call it once River has stopped fetching and the calls that could
// finish have finished (client.Stop with the shutdown budget), then stop
// River with StopAndCancel.
func (e *Engine) Stop(ctx context.Context) error {
	e.lease.stopping.Store(true)
	if !e.lease.started.Load() {
		return nil
	}
	close(e.lease.stop)
	<-e.lease.done
	e.lease.mu.Lock()
	if e.lease.fence != nil {
		e.lease.fence.Stop()
	}
	e.lease.mu.Unlock()
	res, err := e.sweep(ctx, sweepHandOff, false)
	// Past sweepLimit steps, again (each round hands back up to that many;
	// a worker runs at most MaxWorkers): the lease went with the first
	// round, and no other process's probe would find the rest before its
	// next full pass.
	for round := 0; err == nil && res.more && round < e.cfg.MaxWorkers/sweepLimit+1; round++ {
		var r SweepResult
		r, err = e.sweep(ctx, sweepHandOff, false)
		res.Steps, res.more = res.Steps+r.Steps, r.more
	}
	e.lease.ok.Store(false)
	e.watches.cancelAll(ErrHandedOff)
	if err != nil {
		return fmt.Errorf("engine: hand steps back: %w", err)
	}
	e.logger.InfoContext(ctx, "engine process stopped", "process", e.lease.name, "steps_handed_back", res.Steps)
	return nil
}

// BeginStop makes this process start no new call: a step between batches
// goes back to the queue for another process. Stop implies it.
func (e *Engine) BeginStop() { e.lease.stopping.Store(true) }

// jobMetadata returns the metadata of River jobs by ID.
func jobMetadata(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64][]byte, error) {
	rows, err := tx.Query(ctx, `SELECT id, metadata FROM river_job WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read orphaned jobs: %w", err)
	}
	meta := make(map[int64][]byte, len(ids))
	var id int64
	var md []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &md}, func() error {
		meta[id] = slices.Clone(md)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read orphaned jobs: %w", err)
	}
	return meta, nil
}

// carriedOpts are the insert options of a rescheduled step's fresh job: the
// run's labels, stage, step and action carried over from the orphaned job's
// metadata, so River UI shows the new job as it showed the old one.
func carriedOpts(metadata []byte, run, step int64) *river.InsertOpts {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(metadata, &m)
	str := func(k string) string {
		var v string
		_ = json.Unmarshal(m[k], &v)
		return v
	}
	return jobOpts(jobLabels(metadata), RunID(run), StepID(step), str(metaStage), str(metaStep), str(metaAction))
}
