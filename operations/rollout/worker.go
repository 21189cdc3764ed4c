package rollout

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/nicoflow/flow/engine"
)

// WakeArgs is the job, scheduled at the end of a conflict backoff or a
// retry timeout, that advances one operation run. It holds the run's ID
// only.
type WakeArgs struct {
	RunID uuid.UUID `json:"run_id"`
}

// Kind returns the job kind.
func (WakeArgs) Kind() string { return "operations.operation_run_wake" }

// InsertOpts puts the job on the engine queue.
func (WakeArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: engine.QueueName} }

// WakeWorker works WakeArgs jobs: Service.Wake of the job's run. Set
// Service before the River client starts.
type WakeWorker struct {
	river.WorkerDefaults[WakeArgs]
	Service *Service
}

// Work advances the job's run in its own transaction.
func (w *WakeWorker) Work(ctx context.Context, job *river.Job[WakeArgs]) error {
	return w.Service.Wake(ctx, job.Args.RunID)
}

// RiverWaker returns the RunWaker that inserts a WakeArgs job through the
// run's transaction, scheduled at the wake-up time.
func RiverWaker(client *river.Client[pgx.Tx]) RunWaker {
	return func(ctx context.Context, tx pgx.Tx, runID uuid.UUID, at time.Time) error {
		_, err := client.InsertTx(ctx, tx, WakeArgs{RunID: runID}, &river.InsertOpts{ScheduledAt: at})
		return err
	}
}
