// Package engine runs plans durably on PostgreSQL with River: stages in
// order, the steps of a stage in parallel, each step calling a registered
// action over its targets in batches. Every step outcome is checkpointed in
// the transaction that schedules what comes next and completes the River
// job, so a crash re-runs at most the call that was in flight.
//
// The engine knows nothing about racks: targets are opaque strings, params
// are the action's own typed struct, and the caller's task is found through
// the run's Owner in the end-of-run hook.
//
// Wiring, in app:
//
//	e := engine.New(pool, engine.Config{Logger: logger, OnRunEnd: ops.RunsEnded})
//	engine.Register(e, "power.control", powerControl)
//	client, err := river.NewClient(riverpgxv5.New(pool), e.RiverConfig())
//	e.SetClient(client)
//	err = client.Start(ctx)
package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine/internal/dbsqlc"
)

// QueueName is the River queue the engine's jobs go to.
const QueueName = "engine"

// UrgentQueue is the River queue of urgent runs' jobs (Plan.Urgent: leak
// responses). It has workers of its own (Config.UrgentWorkers), so a
// site-wide wave that fills the engine queue's workers, or a backlog of its
// jobs, never delays them (issue 49).
const UrgentQueue = "engine_urgent"

// DefaultUrgentWorkers is Config.UrgentWorkers' default.
const DefaultUrgentWorkers = 8

// Defaults of Config.
const (
	DefaultRescueStuckJobsAfter = 30 * time.Minute
	DefaultMaxWorkers           = 1000
	DefaultFetchCooldown        = 20 * time.Millisecond
	DefaultFetchPollInterval    = 50 * time.Millisecond
	DefaultCancelPollInterval   = time.Second
)

// maxJobAttempts is River's attempt limit for engine jobs. The engine counts
// action attempts itself; River's attempts only grow on unexpected errors
// (database down) and rescues, which must never discard a step's job.
const maxJobAttempts = 1000

// RunID identifies a run.
type RunID int64

// StepID identifies a step of a run.
type StepID int64

// State is the state of a run, stage, step or target.
type State string

// States. A run is running, completed, failed or terminated; a step is
// pending, running, completed, failed or cancelled.
const (
	StatePending    State = "pending"
	StateRunning    State = "running"
	StateCompleted  State = "completed"
	StateFailed     State = "failed"
	StateCancelled  State = "cancelled"
	StateTerminated State = "terminated"
	// StateSkipped is a target's outcome in a step that did not call it: an
	// earlier step of its chain failed it.
	StateSkipped State = "skipped"
)

// Errors of the engine's API.
var (
	ErrRunNotFound = errors.New("run not found")
	ErrNoClient    = errors.New("no River client (call SetClient)")
	// ErrStepEnded is returned by Call.SaveCheckpoint and Call.ReportProgress
	// when the step has ended (cancelled, say) or moved on meanwhile.
	ErrStepEnded = errors.New("step has ended")
	// ErrRunEnded is the cause of a call context cancelled because its run
	// ended (cancelled or failed elsewhere).
	ErrRunEnded = errors.New("run has ended")
)

// RunSummary is what the end-of-run hook receives.
type RunSummary struct {
	ID        RunID
	Owner     string
	Metadata  json.RawMessage
	Labels    map[string]string // Plan.Labels
	State     State             // completed, failed or terminated
	Error     string
	CreatedAt time.Time
	EndedAt   time.Time
}

// RunEndFunc is called inside the transaction that ends runs (the last
// checkpoint, a failure, a timeout or Cancel), so the caller's own rows
// change atomically with them. It is called once per transaction with every
// run the transaction ends, in run ID order for a checkpoint, so the caller
// can record them all in a few statements. It must only write through tx
// and must not do network I/O. An error rolls the whole checkpoint back and
// the jobs retry.
type RunEndFunc func(ctx context.Context, tx pgx.Tx, runs []RunSummary) error

// Config tunes an Engine. Zero fields take the defaults above.
type Config struct {
	Logger *slog.Logger
	// OnRunEnd, if set, is called when runs end (see RunEndFunc).
	OnRunEnd RunEndFunc
	// Observer, if set, is told of calls, step ends, stage starts, run ends
	// and checkpoints (see Observer).
	Observer Observer
	// RescueStuckJobsAfter is the last resort for a process that renews its
	// lease but hangs: a step call still going this long after its own
	// timeout is presumed hung and its step rescheduled. It is also River's
	// rescue window for the other jobs of the client (engine step jobs are
	// never rescued by River: leases cover them). It does not bound step
	// timeouts.
	RescueStuckJobsAfter time.Duration
	// LeaseHeartbeat is how often the process renews its lease and sweeps
	// the steps of dead processes; LeaseExpiry is how long a lease lasts
	// after its last renewal. A process that cannot renew cancels its calls
	// LeaseExpiry − LeaseHeartbeat after its last renewal began. LeaseExpiry
	// must be at least twice LeaseHeartbeat (Check).
	LeaseHeartbeat time.Duration
	LeaseExpiry    time.Duration
	// MaxWorkers is how many engine jobs a process works at once.
	MaxWorkers int
	// UrgentWorkers is how many urgent runs' jobs (UrgentQueue) a process
	// works at once, on top of MaxWorkers; 0 means DefaultUrgentWorkers.
	UrgentWorkers int
	// FetchCooldown and FetchPollInterval tune River's fetch loop.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	// CancelPollInterval is how often a running call checks whether its run
	// has ended, on top of River's cancel notifications.
	CancelPollInterval time.Duration
}

// Engine starts, cancels, reads and works runs. Create it with New, register
// actions, give it its River client with SetClient, then start the client.
type Engine struct {
	pool    *pgxpool.Pool
	cfg     Config
	logger  *slog.Logger
	q       *dbsqlc.Queries
	actions map[string]*action
	client  *river.Client[pgx.Tx]
	// checkpoints and loads group the steps' transactions and reads.
	checkpoints *grouper[*checkpointReq]
	// alone bounds the checkpoints committed alone at once (commitAlone):
	// each holds a connection while it waits for its run.
	alone      chan struct{}
	loads      *grouper[*loadReq]
	stats      checkpointStats
	watches    runWatcher
	lease      lease
	sweepStats sweepStats
	working    workingSet // the step jobs this process works (orphan.go)
	obs        Observer
	// loseAnswers, in tests, is how many committed checkpoints are yet to
	// answer as if the connection had dropped before their commit's reply.
	loseAnswers atomic.Int64
}

// New returns an Engine working on pool. pool is used by workers for
// checkpoints and by calls for SaveCheckpoint and ReportProgress.
func New(pool *pgxpool.Pool, cfg Config) *Engine {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.RescueStuckJobsAfter <= 0 {
		cfg.RescueStuckJobsAfter = DefaultRescueStuckJobsAfter
	}
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = DefaultMaxWorkers
	}
	if cfg.FetchCooldown <= 0 {
		cfg.FetchCooldown = DefaultFetchCooldown
	}
	if cfg.FetchPollInterval <= 0 {
		cfg.FetchPollInterval = DefaultFetchPollInterval
	}
	if cfg.CancelPollInterval <= 0 {
		cfg.CancelPollInterval = DefaultCancelPollInterval
	}
	if cfg.LeaseHeartbeat <= 0 {
		cfg.LeaseHeartbeat = DefaultLeaseHeartbeat
	}
	if cfg.LeaseExpiry <= 0 {
		cfg.LeaseExpiry = max(DefaultLeaseExpiry, 2*cfg.LeaseHeartbeat)
	}
	e := &Engine{
		pool:    pool,
		cfg:     cfg,
		obs:     cfg.Observer,
		logger:  cfg.Logger,
		q:       dbsqlc.New(),
		actions: map[string]*action{},
	}
	e.checkpoints = newGrouper(committerShards, maxCheckpointBatch, e.commitBatch)
	e.alone = make(chan struct{}, maxAloneCheckpoints)
	e.loads = newGrouper(loaderShards, maxLoadBatch, e.loadSteps)
	e.watches.e = e
	e.lease.name = processName()
	return e
}

// Check reports a configuration the engine cannot work with, naming the
// setting: zero fields are defaults and always valid.
func (c Config) Check() error {
	hb, exp := cmp.Or(c.LeaseHeartbeat, DefaultLeaseHeartbeat), c.LeaseExpiry
	if exp == 0 {
		exp = max(DefaultLeaseExpiry, 2*hb)
	}
	switch {
	case c.LeaseHeartbeat < 0 || c.LeaseExpiry < 0 || c.RescueStuckJobsAfter < 0:
		return errors.New("engine: lease heartbeat, lease expiry and rescue window must be positive")
	case hb < 10*time.Millisecond:
		return fmt.Errorf("engine: lease heartbeat %s is under 10ms", hb)
	case exp < 2*hb:
		return fmt.Errorf("engine: lease expiry %s must be at least twice the lease heartbeat %s (a process must miss two renewals before it is declared dead)", exp, hb)
	}
	return nil
}

// AddWorkers registers the engine's River workers (kinds engine.run_step and
// engine.run_timeout) in workers.
func (e *Engine) AddWorkers(workers *river.Workers) {
	river.AddWorker(workers, &stepWorker{e: e})
	river.AddWorker(workers, &timeoutWorker{e: e})
}

// RiverConfig returns a River client configuration for the engine: its
// workers, the engine queue with MaxWorkers, the urgent queue with
// UrgentWorkers, the fetch settings, the rescue
// window and a short retry policy for unexpected errors. The caller may add
// queues and workers before calling river.NewClient.
func (e *Engine) RiverConfig() *river.Config {
	workers := river.NewWorkers()
	e.AddWorkers(workers)
	return &river.Config{
		// The lease names the River client: a step job's attempted_by says
		// which process's lease covers it.
		ID:     e.lease.name,
		Logger: e.logger,
		Queues: map[string]river.QueueConfig{
			QueueName:   {MaxWorkers: e.cfg.MaxWorkers},
			UrgentQueue: {MaxWorkers: cmp.Or(e.cfg.UrgentWorkers, DefaultUrgentWorkers)},
		},
		FetchCooldown:        e.cfg.FetchCooldown,
		FetchPollInterval:    e.cfg.FetchPollInterval,
		RescueStuckJobsAfter: e.cfg.RescueStuckJobsAfter,
		// Other jobs of the client may run as long as the rescue window;
		// step jobs have no River timeout (stepWorker.Timeout): the engine
		// bounds each call itself and leases rescue them.
		JobTimeout:          e.cfg.RescueStuckJobsAfter,
		ReindexerIndexNames: db.RiverReindexerIndexes(),
		RetryPolicy:         retryPolicy{},
		Workers:             workers,
	}
}

// SetClient gives the engine the River client it inserts and cancels jobs
// with. Call it once, before Start, Cancel or the client's Start.
func (e *Engine) SetClient(client *river.Client[pgx.Tx]) { e.client = client }

// retryPolicy retries River-level failures (database unreachable, a rescued
// job) quickly: 1s, 2s, 4s… capped at 30s. Action retries do not go through
// it; the engine schedules those itself.
type retryPolicy struct{}

func (retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	d := time.Second << min(max(job.Attempt-1, 0), 5)
	return time.Now().Add(min(d, 30*time.Second))
}
