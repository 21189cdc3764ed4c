package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/nicoflow/flow/reconcile"
)

// SystemJob is one leader-run background job of Flow's own (inventory sync,
// leak detection, a dispatcher…), as opposed to user tasks and schedules.
//
// Register it on a systemJobs with Add before the River client is built.
// The job runs as a River periodic job: only the elected leader enqueues it,
// so one cycle runs per interval however many `flow serve` processes share
// the database, and a survivor takes over when the leader dies. It never
// overlaps itself: while one cycle runs, the next tick finds its advisory
// lock taken and skips (a killed process's lock frees at once), like upstream's
// Skip policy. The first cycle runs one Interval after the leader is
// elected, as upstream's interval trigger does (RunOnStart: at once); a
// failed cycle is logged and not retried (the next tick is the retry).
type SystemJob struct {
	// Name is the job's stable name ("inventory-sync"); it is the job's
	// identity in River (args of kind SystemJobKind) and in logs.
	Name string
	// Interval is the time between ticks; it must be positive.
	Interval time.Duration
	// Timeout bounds one cycle; zero means 10 minutes. A cycle still running
	// at its timeout has its context cancelled.
	Timeout time.Duration
	// Run does one cycle. Its error is logged; it does not stop later ticks.
	Run func(ctx context.Context) error
	// RunOnStart runs the first cycle as soon as a leader is elected
	// instead of one Interval later.
	RunOnStart bool
}

// SystemJobKind is the River job kind of every system job; the args carry
// the job's Name.
const SystemJobKind = "flow.system_job"

// SystemQueue is the River queue system jobs run on, apart from the engine's
// queue so a busy engine never delays them.
const SystemQueue = "system"

const defaultSystemJobTimeout = 10 * time.Minute

// systemJobs is the registry of SystemJobs of one server. The zero value is
// empty and ready.
type systemJobs struct {
	jobs   map[string]SystemJob
	order  []string
	logger *slog.Logger
	// pool holds each running cycle's advisory lock (systemJobWorker.Work);
	// nil runs cycles without the cross-process guard (unit tests).
	pool *pgxpool.Pool
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

// install adds the system-job worker, queue and one periodic job per
// registered job to rc. With no job registered it changes nothing.
func (s *systemJobs) install(rc *river.Config, logger *slog.Logger) {
	if s == nil || len(s.jobs) == 0 {
		return
	}
	s.logger = logger
	river.AddWorker(rc.Workers, &systemJobWorker{jobs: s})
	if rc.Queues == nil {
		rc.Queues = map[string]river.QueueConfig{}
	}
	rc.Queues[SystemQueue] = river.QueueConfig{MaxWorkers: max(len(s.jobs), 2)}
	for _, name := range s.order {
		j := s.jobs[name]
		rc.PeriodicJobs = append(rc.PeriodicJobs, river.NewPeriodicJob(
			river.PeriodicInterval(j.Interval),
			func() (river.JobArgs, *river.InsertOpts) { return systemJobArgs{Name: name}, nil },
			&river.PeriodicJobOpts{ID: "system:" + name, RunOnStart: j.RunOnStart},
		))
	}
}

// systemJobArgs is the River job of one cycle of a SystemJob.
type systemJobArgs struct {
	Name string `json:"name"`
}

// Kind returns SystemJobKind.
func (systemJobArgs) Kind() string { return SystemJobKind }

// InsertOpts puts the cycle on the system queue with a single attempt. It is
// not a River unique job: River's uniqueness must include the running
// state, and a cycle left "running" by a killed process would then block
// every tick until River's rescue window (FLOW_ENGINE_RESCUE_AFTER, 30 m)
// ran out. Cycles are kept from overlapping by a session advisory lock
// instead (Work): a tick that finds it taken completes at once, and
// PostgreSQL releases it the moment a dead process's connection goes.
func (systemJobArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: SystemQueue, MaxAttempts: 1}
}

type systemJobWorker struct {
	river.WorkerDefaults[systemJobArgs]
	jobs *systemJobs
}

func (w *systemJobWorker) Timeout(job *river.Job[systemJobArgs]) time.Duration {
	if j, ok := w.jobs.jobs[job.Args.Name]; ok {
		return j.Timeout
	}
	return time.Minute
}

func (w *systemJobWorker) Work(ctx context.Context, job *river.Job[systemJobArgs]) error {
	j, ok := w.jobs.jobs[job.Args.Name]
	if !ok {
		// A job of a name this process does not run (another version, or
		// disabled here): nothing to do, and nothing to retry.
		w.jobs.logger.WarnContext(ctx, "unknown system job", "job", job.Args.Name)
		return nil
	}
	if w.jobs.pool != nil {
		release, ok, err := systemJobLock(ctx, w.jobs.pool, j.Name)
		if err != nil {
			return err
		}
		if !ok {
			w.jobs.logger.DebugContext(ctx, "system job skipped: its previous cycle still runs", "job", j.Name)
			return nil
		}
		defer release()
	}
	start := time.Now()
	if err := j.Run(ctx); err != nil {
		w.jobs.logger.ErrorContext(ctx, "system job failed", "job", j.Name, "duration", time.Since(start), "error", err.Error())
		// One attempt only: the job is discarded and the next tick is the
		// retry.
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
	// ScheduleTickJob makes due schedule firings runnable every second;
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
)

// eventRuleRescueInterval is how often the leader looks for event-rule
// executions whose job was lost (eventrule.Service.RescueStale).
const eventRuleRescueInterval = 10 * time.Second

// newSystemJobs registers the system jobs cfg enables: inventory-sync when
// NICo Core is configured and disable_inventory is off; leak-detection
// (leak, one cycle of eventrule.LeakDetector) when NICo Core is configured
// and disable_leak_detection is off.
func newSystemJobs(cfg Config, b *backends, syncer *reconcile.Syncer, leak func(context.Context) error, logger *slog.Logger) (*systemJobs, error) {
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
		if err := jobs.Add(SystemJob{Name: LeakDetectionJob, Interval: sj.LeakDetectionInterval, Timeout: time.Minute, Run: leak}); err != nil {
			return nil, err
		}
	}
	return jobs, nil
}
