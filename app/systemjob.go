package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/reconcile"
)

// SystemJob is one leader-run background job of Flow's own (inventory sync,
// leak detection, the schedule dispatcher…), as opposed to user tasks and
// schedules.
//
// Register it on a systemJobs with Add before the server starts. Every
// `flow serve` process runs the same set, but only the elected leader runs
// their cycles: the process holding the session advisory lock
// systemLeaderLock (systemJobs.run), so one cycle runs per interval however
// many processes share the database, and a survivor takes over within
// systemElectRetry when the leader dies (its connection, and with it the
// lock, goes at once). Cycles run in the leader's process, not as River
// jobs: an idle server writes no job row for its own housekeeping, and River
// UI shows tasks only. A cycle never overlaps itself: besides the leader
// lock, each cycle holds the job's own advisory lock, so a leader that lost
// its connection and a new one never run the same job at once. The first
// cycle runs one Interval after the leader is elected, as upstream's
// interval trigger does (RunOnStart: at once); a failed cycle is logged and
// not retried early (the next cycle is the retry).
type SystemJob struct {
	// Name is the job's stable name ("inventory-sync"), in logs and metrics.
	Name string
	// Interval is the time between the end of one cycle and the start of
	// the next (FromStart: between their starts); it must be positive.
	Interval time.Duration
	// FromStart counts Interval from a cycle's start, not its end: the
	// cycles keep their cadence however long each takes, and one that
	// outlasts Interval is followed at once (after systemNextFloor). Leak
	// detection's: a loaded site's cycle took 1–8 s, which an interval
	// counted from its end added to every leak's wait (docs/bench.md
	// "Where a leak's response time goes").
	FromStart bool
	// Timeout bounds one cycle; zero means 10 minutes. A cycle still running
	// at its timeout has its context cancelled.
	Timeout time.Duration
	// Run does one cycle. Its error is logged; it does not stop later cycles.
	Run func(ctx context.Context) error
	// RunOnStart runs the first cycle as soon as a leader is elected
	// instead of one Interval later.
	RunOnStart bool
	// Next, when set, says when the job next has work (ok false: none
	// known): the next cycle runs then if that is sooner than Interval
	// (the schedule dispatcher sleeps until the next due firing).
	Next func(ctx context.Context) (at time.Time, ok bool, err error)
	// WakeOn, when set, is a PostgreSQL NOTIFY channel: a notification on
	// it makes the job look at Next again at once (a schedule armed a
	// firing sooner than the one it sleeps until).
	WakeOn string
	// Pool, when set, holds the job's advisory lock instead of the
	// systemJobs' pool: a job on a pool of its own (leak detection, on the
	// safety path's) never waits for a connection of the main one.
	Pool *pgxpool.Pool
}

const defaultSystemJobTimeout = 10 * time.Minute

// systemLeaderLock is the key of the session advisory lock the system-job
// leader holds.
const systemLeaderLock = "flow.system_jobs.leader"

// systemElectRetry is how often a process that is not the leader tries to
// become it; systemHeartbeat is how often the leader checks that its lock
// connection still answers (a leader that lost it stops its jobs).
const (
	systemElectRetry = 5 * time.Second
	systemHeartbeat  = 5 * time.Second
)

// systemNextFloor is the least wait between two cycles of a job whose Next
// says work is due now (a cycle that promoted nothing must not spin);
// after a failed cycle the wait is at least systemErrorFloor.
const (
	systemNextFloor  = 100 * time.Millisecond
	systemErrorFloor = 5 * time.Second
)

// systemJobs is the registry of SystemJobs of one server. The zero value is
// empty and ready.
type systemJobs struct {
	jobs   map[string]SystemJob
	order  []string
	logger *slog.Logger
	// pool holds the leader lock, each running cycle's advisory lock and
	// the Next queries.
	pool *pgxpool.Pool
	// electRetry and heartbeat override systemElectRetry and
	// systemHeartbeat (tests).
	electRetry, heartbeat time.Duration
	// observe, when set, hears of each cycle's end (metrics); started of
	// each cycle's start after the first on this leader, with the time
	// since the previous one started.
	observe func(name string, d time.Duration, err error)
	started func(name string, sincePrevious time.Duration)
	// onLead, when set, hears when this process starts and stops leading.
	onLead func(leading bool)
	// leading reports whether this process is the leader now.
	leading atomic.Bool
}

// Add registers j. It fails on an empty or repeated name, a non-positive
// interval or a nil Run.
func (s *systemJobs) Add(j SystemJob) error {
	switch {
	case j.Name == "":
		return fmt.Errorf("system job: empty name")
	case j.Interval <= 0:
		return fmt.Errorf("system job %s: interval must be positive, got %s", j.Name, j.Interval)
	case j.Run == nil:
		return fmt.Errorf("system job %s: no Run func", j.Name)
	}
	if _, dup := s.jobs[j.Name]; dup {
		return fmt.Errorf("system job %s: registered twice", j.Name)
	}
	if s.jobs == nil {
		s.jobs = map[string]SystemJob{}
	}
	if j.Timeout <= 0 {
		j.Timeout = defaultSystemJobTimeout
	}
	s.jobs[j.Name] = j
	s.order = append(s.order, j.Name)
	return nil
}

// Names returns the registered job names in registration order.
func (s *systemJobs) Names() []string { return append([]string(nil), s.order...) }

// Leading reports whether this process is the system-job leader now.
func (s *systemJobs) Leading() bool { return s != nil && s.leading.Load() }

// start runs the election and, while this process leads, the jobs, until
// the returned stop is called (it waits for running cycles to end). With no
// job registered it starts nothing.
func (s *systemJobs) start(ctx context.Context, logger *slog.Logger) (stop func()) {
	if s == nil || len(s.jobs) == 0 {
		return func() {}
	}
	s.logger = logger
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// run tries to become the leader every electRetry and leads while it can,
// until ctx ends.
func (s *systemJobs) run(ctx context.Context) {
	retry := cmp.Or(s.electRetry, systemElectRetry)
	for {
		conn, err := s.elect(ctx)
		if err != nil && ctx.Err() == nil {
			s.logger.WarnContext(ctx, "system jobs: leader election", "error", err.Error())
		}
		if conn != nil {
			s.lead(ctx, conn)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}

// elect returns the connection holding the leader lock (listening on the
// jobs' wake channels), or nil when another process leads.
func (s *systemJobs) elect(ctx context.Context) (*pgxpool.Conn, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, systemLeaderLock).Scan(&ok); err != nil {
		conn.Release()
		return nil, err
	}
	if !ok {
		conn.Release()
		return nil, nil
	}
	for _, name := range s.order {
		if ch := s.jobs[name].WakeOn; ch != "" {
			if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
				// Closing the connection frees the lock.
				_ = conn.Conn().Close(context.WithoutCancel(ctx))
				conn.Release()
				return nil, fmt.Errorf("listen %s: %w", ch, err)
			}
		}
	}
	return conn, nil
}

// lead runs every job on this process until ctx ends or the lock
// connection fails, then stops them and gives the lock up (by closing its
// connection, which also ends the LISTENs).
func (s *systemJobs) lead(ctx context.Context, conn *pgxpool.Conn) {
	s.leading.Store(true)
	if s.onLead != nil {
		s.onLead(true)
	}
	s.logger.InfoContext(ctx, "system jobs: this process leads", "jobs", s.order)
	jobCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wakes := map[string][]chan struct{}{}
	for _, name := range s.order {
		j := s.jobs[name]
		wake := make(chan struct{}, 1)
		if j.WakeOn != "" {
			wakes[j.WakeOn] = append(wakes[j.WakeOn], wake)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.loop(jobCtx, j, wake)
		}()
	}
	heartbeat := cmp.Or(s.heartbeat, systemHeartbeat)
	for ctx.Err() == nil {
		wctx, wcancel := context.WithTimeout(ctx, heartbeat)
		n, err := conn.Conn().WaitForNotification(wctx)
		wcancel()
		if err == nil {
			for _, w := range wakes[n.Channel] {
				select {
				case w <- struct{}{}:
				default:
				}
			}
			continue
		}
		if ctx.Err() != nil {
			break
		}
		if !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) {
			s.logger.WarnContext(ctx, "system jobs: lost the leader connection; stepping down", "error", err.Error())
			break
		}
		pctx, pcancel := context.WithTimeout(ctx, heartbeat)
		_, err = conn.Exec(pctx, `SELECT 1`)
		pcancel()
		if err != nil {
			if ctx.Err() == nil {
				s.logger.WarnContext(ctx, "system jobs: the leader connection stopped answering; stepping down", "error", err.Error())
			}
			break
		}
	}
	cancel()
	wg.Wait()
	s.leading.Store(false)
	if s.onLead != nil {
		s.onLead(false)
	}
	_ = conn.Conn().Close(context.WithoutCancel(ctx))
	conn.Release()
}

// loop runs j's cycles while ctx lasts: the first at once (RunOnStart) or
// one Interval on, each next one Interval after the last ended, or sooner
// when Next says work is due earlier.
func (s *systemJobs) loop(ctx context.Context, j SystemJob, wake <-chan struct{}) {
	next := time.Now().Add(j.Interval)
	if j.RunOnStart {
		next = time.Now()
	}
	floor := time.Time{}
	var last time.Time // the previous cycle's start
	for {
		at := next
		if j.Next != nil {
			if due, ok, err := j.Next(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.logger.WarnContext(ctx, "system job: next due time", "job", j.Name, "error", err.Error())
				// Not known (the database is failing over): look again
				// soon, not one Interval on (the schedule dispatcher's is
				// a minute).
				if soon := time.Now().Add(min(j.Interval, systemErrorFloor)); soon.Before(at) {
					at = soon
				}
			} else if ok && due.Before(at) {
				at = due
			}
		}
		if at.Before(floor) {
			at = floor
		}
		timer := time.NewTimer(time.Until(at))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-wake:
			timer.Stop()
			if time.Now().Before(at) {
				continue // look at Next again
			}
		case <-timer.C:
		}
		start := time.Now()
		if s.started != nil && !last.IsZero() {
			s.started(j.Name, start.Sub(last))
		}
		last = start
		err := s.cycle(ctx, j)
		if ctx.Err() != nil {
			return
		}
		next, floor = nextCycle(j, start, time.Now(), err)
	}
}

// nextCycle returns when j's next cycle is due after one that started at
// start and ended at end with err, and the earliest it may start (next and
// floor of loop).
func nextCycle(j SystemJob, start, end time.Time, err error) (next, floor time.Time) {
	next = end.Add(j.Interval)
	if j.FromStart {
		next = start.Add(j.Interval)
	}
	floor = end.Add(systemNextFloor)
	if err != nil {
		floor = end.Add(min(j.Interval, systemErrorFloor))
	}
	return next, floor
}

// cycle runs one cycle of j under its advisory lock and timeout; a cycle
// whose lock another process holds is skipped.
func (s *systemJobs) cycle(ctx context.Context, j SystemJob) error {
	ctx, cancel := context.WithTimeout(ctx, j.Timeout)
	defer cancel()
	if pool := cmp.Or(j.Pool, s.pool); pool != nil {
		release, ok, err := systemJobLock(ctx, pool, j.Name)
		if err != nil {
			s.logger.WarnContext(ctx, "system job lock", "job", j.Name, "error", err.Error())
			return err
		}
		if !ok {
			s.logger.DebugContext(ctx, "system job skipped: its previous cycle still runs", "job", j.Name)
			return nil
		}
		defer release()
	}
	start := time.Now()
	err := j.Run(ctx)
	if s.observe != nil {
		s.observe(j.Name, time.Since(start), err)
	}
	if err != nil {
		s.logger.ErrorContext(ctx, "system job failed", "job", j.Name, "duration", time.Since(start), "error", err.Error())
		return err
	}
	// Success is the job's own to log: an idle server stays quiet.
	return nil
}

// systemJobLock takes the session advisory lock of system job name on a
// connection of its own, held until release. ok is false when another cycle
// holds it. The lock dies with its connection, so a killed process frees it
// at once.
func systemJobLock(ctx context.Context, pool *pgxpool.Pool, name string) (release func(), ok bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("system job %s: acquire lock connection: %w", name, err)
	}
	key := "flow.system_job:" + name
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, key).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, fmt.Errorf("system job %s: lock: %w", name, err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	return func() {
		ctx := context.WithoutCancel(ctx)
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key); err != nil {
			// A connection that cannot unlock must not go back to the
			// pool holding the lock.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}, true, nil
}

// The system jobs' names.
const (
	InventorySyncJob = "inventory-sync"
	LeakDetectionJob = "leak-detection"
	// ScheduleTickJob makes due schedule firings runnable at their time
	// (it sleeps until the next one, woken when a schedule arms a firing);
	// ScheduleRescueJob re-arms overdue ones every 30 s (app/river.go adds
	// both when the server runs schedules).
	ScheduleTickJob   = "schedule-tick"
	ScheduleRescueJob = "schedule-rescue"
	// EventRuleRescueJob re-enqueues event-rule executions whose job was
	// lost (app/serve.go adds it).
	EventRuleRescueJob = "event-rule-rescue"
	// TaskQueueSweepJob promotes and expires waiting tasks no task end
	// handled; OperationRunSweepJob passes every active operation run
	// (both every 30 s and at election; app/river.go adds them).
	TaskQueueSweepJob    = "task-queue-sweep"
	OperationRunSweepJob = "operation-run-sweep"
	// AnalyzeJob analyzes tables a burst grew (or a bulk delete emptied)
	// (db.AnalyzeResized; app/serve.go adds it).
	AnalyzeJob = "analyze"
)

// analyzeInterval is how often the leader looks for tables whose size
// moved far from their statistics: a read of pg_stat_user_tables, and
// ANALYZE of those tables only.
const analyzeInterval = 2 * time.Second

// eventRuleRescueInterval is how often the leader looks for event-rule
// executions whose job was lost (eventrule.Service.RescueStale).
const eventRuleRescueInterval = 10 * time.Second

// newSystemJobs registers the system jobs cfg enables: inventory-sync when
// NICo Core is configured and disable_inventory is off; leak-detection
// (leak, one cycle of eventrule.LeakDetector, its lock taken on leakPool when
// set) when NICo Core is configured and disable_leak_detection is off.
func newSystemJobs(cfg Config, b *backends, syncer *reconcile.Syncer, leak func(context.Context) error, leakPool *pgxpool.Pool, logger *slog.Logger) (*systemJobs, error) {
	jobs := &systemJobs{}
	sj := cfg.SystemJobs
	switch {
	case sj.InventoryDisabled:
		logger.Info("inventory sync disabled", "setting", "disable_inventory")
	case !b.nico.Configured():
		logger.Warn("inventory sync off: NICo Core is not configured", "setting", "NICO_CORE_API_URL")
	default:
		if err := jobs.Add(SystemJob{Name: InventorySyncJob, Interval: sj.InventoryInterval, Run: func(ctx context.Context) error {
			_, err := syncer.Run(ctx, reconcile.TriggerSchedule)
			return err
		}}); err != nil {
			return nil, err
		}
	}
	switch {
	case sj.LeakDetectionDisabled:
		logger.Info("leak detection disabled", "setting", "disable_leak_detection")
	case !b.nico.Configured():
		logger.Warn("leak detection off: NICo Core is not configured", "setting", "NICO_CORE_API_URL")
	default:
		path := "legacy direct force-power-off"
		if sj.LeakEventRules {
			path = "event rules"
		}
		logger.Info("leak detection on", "interval", sj.LeakDetectionInterval, "path", path, "setting", "FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED")
		// A cycle is a few Core calls and short transactions; bounding it
		// by a minute keeps a hung call from skipping many ticks.
		// Its lock and its work use the safety path's own pool (leakPool).
		// Its interval runs from one cycle's start to the next's, so a
		// slow cycle does not stretch the time to the next leak's poll.
		if err := jobs.Add(SystemJob{Name: LeakDetectionJob, Interval: sj.LeakDetectionInterval, FromStart: true, Timeout: time.Minute, Run: leak, Pool: leakPool}); err != nil {
			return nil, err
		}
	}
	return jobs, nil
}
