package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"riverqueue.com/riverui"

	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/notify"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule"
	"github.com/nicoflow/flow/operations/rollout"
	"github.com/nicoflow/flow/operations/schedule"
)

// newEngine builds the engine, registers its actions and builds the River
// client that works its jobs. The engine needs the client to insert and
// cancel jobs and the client needs the engine's workers, so the client is
// handed to the engine after both exist. Domains register their actions here
// as they arrive (explicitly, never in init).
func newEngine(pool *pgxpool.Pool, logger *slog.Logger, w engineWiring) (*engine.Engine, *river.Client[pgx.Tx], error) {
	var clientRef *river.Client[pgx.Tx] // for jobs that need the client, set below
	ecfg := w.engine
	ecfg.Logger, ecfg.OnRunEnd, ecfg.Observer = logger, w.onRunEnd, w.observer
	e := engine.New(pool, ecfg)
	engine.RegisterSleep(e)
	if w.register != nil {
		w.register(e)
	}
	rc := e.RiverConfig()
	if w.riverLogger != nil {
		rc.Logger = w.riverLogger
	}
	rc.Middleware = append(rc.Middleware, w.middleware...)
	if w.riverRetention > 0 {
		// River's cleaner deletes finished jobs past this; discarded ones
		// (a failed step's job) keep River's week unless this is longer.
		rc.CompletedJobRetentionPeriod = w.riverRetention
		rc.CancelledJobRetentionPeriod = w.riverRetention
		rc.DiscardedJobRetentionPeriod = max(w.riverRetention, 7*24*time.Hour)
	}
	if w.system == nil {
		w.system = &systemJobs{}
	}
	if w.system.pool == nil {
		w.system.pool = pool
	}
	if w.schedules != nil {
		// Schedule firings have their own queue, so a backlog of engine
		// steps does not delay them. The leader's schedule dispatcher makes
		// due firings runnable at their time (it sleeps until the next one
		// and is woken when a schedule arms a sooner one) and its rescue
		// re-arms firings whose job is stuck in a dead process
		// (docs/schedules.md); both are system jobs.
		rc.Queues[schedule.Queue] = river.QueueConfig{MaxWorkers: scheduleWorkers}
		river.AddWorker(rc.Workers, w.schedules)
		if err := w.system.Add(SystemJob{Name: ScheduleTickJob, Interval: scheduleTickInterval, Timeout: time.Minute, WakeOn: schedule.WakeChannel, RunOnStart: true,
			Next: func(ctx context.Context) (time.Time, bool, error) { return schedule.NextFiring(ctx, clientRef) },
			Run: func(ctx context.Context) error {
				_, err := schedule.PromoteDueFirings(ctx, clientRef, 500)
				return err
			}}); err != nil {
			return nil, nil, err
		}
		schedules := w.schedules
		if err := w.system.Add(SystemJob{Name: ScheduleRescueJob, Interval: scheduleRescueInterval, Timeout: time.Minute, RunOnStart: true, Run: func(ctx context.Context) error {
			_, err := schedules.Service.RescueOverdue(ctx, 1000)
			return err
		}}); err != nil {
			return nil, nil, err
		}
	}
	// The task-queue and operation-run sweeps are safety nets the leader
	// runs every 30 s and at election, as system jobs.
	if w.sweep != nil {
		if err := w.system.Add(SystemJob{Name: TaskQueueSweepJob, Interval: sweepInterval, RunOnStart: true, Run: w.sweep}); err != nil {
			return nil, nil, err
		}
	}
	if w.runSweep != nil {
		if err := w.system.Add(SystemJob{Name: OperationRunSweepJob, Interval: runSweepInterval, RunOnStart: true, Run: w.runSweep}); err != nil {
			return nil, nil, err
		}
	}
	if w.promoteRack != nil {
		river.AddWorker(rc.Workers, &queueExpiryWorker{promote: w.promoteRack})
	}
	if w.runWakes != nil {
		river.AddWorker(rc.Workers, w.runWakes)
	}
	if w.eventExecutions != nil {
		// Event-rule executions have their own queue: a leak's power-off
		// submission never waits behind engine steps (docs/event-rules.md).
		rc.Queues[eventrule.Queue] = river.QueueConfig{MaxWorkers: eventRuleWorkers}
		river.AddWorker(rc.Workers, w.eventExecutions)
	}
	if w.notify != nil {
		// Webhook deliveries have their own queue: a slow or dead receiver
		// never delays engine steps (docs/notifications.md).
		rc.Queues[notify.Queue] = river.QueueConfig{MaxWorkers: max(w.notifyWorkers, 1)}
		river.AddWorker(rc.Workers, w.notify)
		river.AddWorker(rc.Workers, notify.LegacyWorker{})
		if w.alerts != nil {
			river.AddWorker(rc.Workers, w.alerts)
		}
	}
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return nil, nil, fmt.Errorf("river client: %w", err)
	}
	clientRef = client
	e.SetClient(client)
	return e, client, nil
}

// engineWiring is what the domains plug into the engine: the end-of-run
// hook, their actions, and the task queue's safety-net sweep.
type engineWiring struct {
	onRunEnd engine.RunEndFunc
	register func(*engine.Engine)
	sweep    func(context.Context) error
	// promoteRack promotes and expires a rack's waiting tasks; it works the
	// jobs scheduleQueueExpiry inserts.
	promoteRack func(context.Context, uuid.UUID) error
	// runWakes works the wake-up jobs of operation runs (the jobs
	// rollout.RiverWaker inserts); its Service is set once the rollout
	// service exists, before the client starts. runSweep advances every
	// active run (periodic safety net).
	runWakes *rollout.WakeWorker
	runSweep func(context.Context) error
	// system holds the leader-run system jobs (inventory sync…); newEngine
	// adds the schedule tick and rescue when schedules is set. nil: none
	// but those.
	system *systemJobs

	// schedules works schedule firings; its Service is set once the
	// task manager exists, before the client starts.
	schedules *schedule.Worker
	// eventExecutions works event-rule executions; its Rules is set once
	// the event-rule processor exists, before the client starts.
	eventExecutions *eventrule.ExecutionWorker
	// notify works webhook deliveries (notifyWorkers at once); its
	// Service is set once the client exists, before it starts.
	notify        *notify.Worker
	notifyWorkers int
	// alerts works the Alertmanager alert jobs (same queue).
	alerts *notify.AlertWorker

	// riverRetention is how long River keeps finished jobs
	// (FLOW_RIVER_JOB_RETENTION; 0: River's defaults).
	riverRetention time.Duration

	// engine holds the engine's settings (the logger and hook are set
	// by newEngine).
	engine engine.Config

	// observer hears of the engine's calls, steps and runs (metrics and
	// logs); riverLogger is River's own logger (WARN and above unless
	// FLOW_LOG_LEVEL=debug); middleware wraps River's inserts and work
	// (tracing).
	observer    engine.Observer
	riverLogger *slog.Logger
	middleware  []rivertype.Middleware
}

// scheduleWorkers is how many schedule firings a process runs at once.
const scheduleWorkers = 20

// eventRuleWorkers is how many event-rule executions a process runs at
// once.
const eventRuleWorkers = 10

// scheduleRescueInterval is how often the leader re-arms overdue firings
// (schedule.Service.RescueOverdue): system job ScheduleRescueJob.
const scheduleRescueInterval = 30 * time.Second

// scheduleTickInterval is the longest the leader's firing dispatcher
// (schedule.PromoteDueFirings, system job ScheduleTickJob) sleeps: it wakes
// at the next due firing, or when a schedule arms one, or after this.
const scheduleTickInterval = time.Minute

// sweepInterval is how often the leader promotes and expires waiting tasks
// that no task end has handled (a safety net: promotion normally happens in
// the transaction that ends the blocking task).
const sweepInterval = 30 * time.Second

// queueExpiryArgs is the job, scheduled at a waiting task's queue deadline,
// that promotes and expires the waiting tasks of its rack. It holds the
// rack's ID only.
type queueExpiryArgs struct {
	RackID uuid.UUID `json:"rack_id"`
}

// Kind returns the job kind.
func (queueExpiryArgs) Kind() string { return "operations.queue_expiry" }

// InsertOpts puts the job on the engine queue.
func (queueExpiryArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: engine.QueueName}
}

type queueExpiryWorker struct {
	river.WorkerDefaults[queueExpiryArgs]
	promote func(context.Context, uuid.UUID) error
}

func (w *queueExpiryWorker) Work(ctx context.Context, job *river.Job[queueExpiryArgs]) error {
	return w.promote(ctx, job.Args.RackID)
}

// scheduleQueueExpiry returns the operations.ExpiryScheduler that inserts a
// queueExpiryArgs job through the submit's transaction.
func scheduleQueueExpiry(client *river.Client[pgx.Tx]) operations.ExpiryScheduler {
	return func(ctx context.Context, tx pgx.Tx, rackID uuid.UUID, at time.Time) error {
		_, err := client.InsertTx(ctx, tx, queueExpiryArgs{RackID: rackID}, &river.InsertOpts{ScheduledAt: at})
		return err
	}
}

// runSweepInterval is how often the leader advances every active
// operation run. Runs advance on events (child-task ends, controls,
// scheduled wake-ups); the sweep only catches what an event missed.
const runSweepInterval = 30 * time.Second

// newRiverUI returns River UI mounted at prefix, started with ctx. River
// UI has no authentication of its own: the console serves it behind its
// own at console.JobsPrefix (FLOW_RIVERUI_ENABLED; console/jobs.go
// enforces the roles and audits the changes), and dev mode also mounts it
// at /riverui/ on the admin listener (loopback).
func newRiverUI(ctx context.Context, client *river.Client[pgx.Tx], logger *slog.Logger, prefix string) (http.Handler, error) {
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    logger,
		Prefix:    prefix,
	})
	if err != nil {
		return nil, fmt.Errorf("river ui: %w", err)
	}
	if err := h.Start(ctx); err != nil {
		return nil, fmt.Errorf("start river ui: %w", err)
	}
	return h, nil
}

// stopRiver stops the engine and its River client: fetching stops at once,
// running jobs get up to timeout to finish, then the engine hands the steps
// still running back (rescheduled for another process in one transaction,
// its lease released: a rolling restart waits for no lease to expire) and
// the remaining jobs' contexts are cancelled.
func stopRiver(ctx context.Context, e *engine.Engine, client *river.Client[pgx.Tx], timeout time.Duration, logger *slog.Logger) {
	ctx = context.WithoutCancel(ctx)
	e.BeginStop()
	stopCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := client.Stop(stopCtx)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		logger.WarnContext(ctx, "river stop", "error", err.Error())
	}
	handCtx, cancelHand := context.WithTimeout(ctx, 10*time.Second)
	defer cancelHand()
	if err := e.Stop(handCtx); err != nil {
		logger.WarnContext(ctx, "engine stop: steps left to the lease sweep of the other servers", "error", err.Error())
	}
	if err == nil {
		return
	}
	logger.WarnContext(ctx, "river jobs still running at shutdown timeout: steps handed back, cancelling their calls")
	hardCtx, cancelHard := context.WithTimeout(ctx, 10*time.Second)
	defer cancelHard()
	if err := client.StopAndCancel(hardCtx); err != nil {
		logger.WarnContext(ctx, "river stop and cancel", "error", err.Error())
	}
}
