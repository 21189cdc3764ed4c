package app

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/console"
	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/notify"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule"
	"github.com/nicoflow/flow/operations/rollout"
	"github.com/nicoflow/flow/telemetry"
)

// RetentionConfig is how long finished history is kept
// (docs/operations.md#sizing-and-retention). A zero duration keeps that
// kind of row forever.
type RetentionConfig struct {
	Tasks         time.Duration // FLOW_TASK_RETENTION
	OperationRuns time.Duration // FLOW_OPERATION_RUN_RETENTION
	Events        time.Duration // FLOW_EVENT_RETENTION
	RiverJobs     time.Duration // FLOW_RIVER_JOB_RETENTION
	Interval      time.Duration // FLOW_PRUNE_INTERVAL
	// Webhook deliveries: delivered ones and dead letters, with their
	// events (pending ones are never pruned).
	NotifyDelivered time.Duration // FLOW_NOTIFY_DELIVERED_RETENTION
	NotifyDead      time.Duration // FLOW_NOTIFY_DEAD_RETENTION
}

// PruneJob is the system job that deletes finished history past its
// retention.
const PruneJob = "prune"

// pruneBatch is how many rows one pruning transaction deletes at most: short
// transactions that hold few locks and never stall the engine.
const pruneBatch = 1000

// parseRetention parses a retention setting: a Go duration, or a whole
// number of days ("90d").
func parseRetention(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 {
			return 0, fmt.Errorf("bad day count %q", v)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("bad duration %q", v)
	}
	return d, nil
}

// retentionText prints a retention for people: days when whole, "forever"
// for zero.
func retentionText(d time.Duration) string {
	switch {
	case d == 0:
		return "forever"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// loadRetention reads the retention settings through def (the variable's
// value or its default).
func loadRetention(def func(string) string) (RetentionConfig, []string) {
	var c RetentionConfig
	var errs []string
	for _, s := range []struct {
		name     string
		to       *time.Duration
		positive bool
	}{
		{"FLOW_TASK_RETENTION", &c.Tasks, false},
		{"FLOW_OPERATION_RUN_RETENTION", &c.OperationRuns, false},
		{"FLOW_EVENT_RETENTION", &c.Events, false},
		{"FLOW_RIVER_JOB_RETENTION", &c.RiverJobs, true},
		{"FLOW_PRUNE_INTERVAL", &c.Interval, true},
		{"FLOW_NOTIFY_DELIVERED_RETENTION", &c.NotifyDelivered, false},
		{"FLOW_NOTIFY_DEAD_RETENTION", &c.NotifyDead, false},
	} {
		d, err := parseRetention(def(s.name))
		switch {
		case err != nil:
			errs = append(errs, s.name+" must be a duration such as 90d or 2160h")
		case s.positive && d == 0:
			errs = append(errs, s.name+" must be positive")
		default:
			*s.to = d
		}
	}
	return c, errs
}

// pruner deletes finished history past its retention, in batches of
// pruneBatch rows, each in its own short transaction: tasks with their
// engine runs, steps and reports; operation runs with their targets;
// events with their executions; webhook deliveries delivered or dead
// letters, with their events. It never touches an active task, a run
// not finished, an event with an execution not ended, nor a task a live
// object points to (pins: a schedule's last task, an active run's target
// task, an open execution's task). River's finished jobs are River's
// cleaner's (FLOW_RIVER_JOB_RETENTION). Leak occurrences are deleted when
// their leak ends and audit lines are logs, so neither is here.
type pruner struct {
	cfg    RetentionConfig
	pool   *pgxpool.Pool
	tasks  *operations.Tasks
	runs   *rollout.Service
	events *eventrule.Service
	notify *notify.Service
	// pins return the tasks live objects point to.
	pins    []func(context.Context) ([]uuid.UUID, error)
	metrics *telemetry.Metrics
	logger  *slog.Logger
	now     func() time.Time
	batch   int
}

// Run does one pruning cycle: every rule until nothing past its retention
// is left (or ctx ends), then records what it did.
func (p *pruner) Run(ctx context.Context) error {
	now := p.now()
	batch := cmp.Or(p.batch, pruneBatch)
	deleted := map[string]int64{}
	if p.cfg.Tasks > 0 && p.tasks != nil {
		var keep []uuid.UUID
		for _, pin := range p.pins {
			ids, err := pin(ctx)
			if err != nil {
				return err
			}
			keep = append(keep, ids...)
		}
		for {
			c, err := p.tasks.PruneFinished(ctx, now.Add(-p.cfg.Tasks), batch, keep)
			if err != nil {
				return err
			}
			deleted["task"] += c.Tasks
			deleted["engine_run"] += c.Runs
			deleted["engine_step"] += c.Steps
			if c.Tasks < int64(batch) {
				break
			}
		}
	}
	if p.cfg.OperationRuns > 0 && p.runs != nil {
		for {
			runs, targets, err := p.runs.PruneFinished(ctx, now.Add(-p.cfg.OperationRuns), batch)
			if err != nil {
				return err
			}
			deleted["operation_run"] += runs
			deleted["operation_run_target"] += targets
			if runs < int64(batch) {
				break
			}
		}
	}
	if p.cfg.Events > 0 && p.events != nil {
		for {
			events, execs, err := p.events.PruneEvents(ctx, now.Add(-p.cfg.Events), batch)
			if err != nil {
				return err
			}
			deleted["event"] += events
			deleted["event_action_execution"] += execs
			if events < int64(batch) {
				break
			}
		}
	}
	// Webhook deliveries delivered or dead past their retention, and their
	// events (notify.Service.Prune: pending ones never).
	if p.notify != nil && (p.cfg.NotifyDelivered > 0 || p.cfg.NotifyDead > 0) {
		var delivered, dead time.Time
		if p.cfg.NotifyDelivered > 0 {
			delivered = now.Add(-p.cfg.NotifyDelivered)
		}
		if p.cfg.NotifyDead > 0 {
			dead = now.Add(-p.cfg.NotifyDead)
		}
		c, err := p.notify.Prune(ctx, delivered, dead, batch)
		deleted["notify_delivery"] += c.Deliveries
		deleted["notify_event"] += c.Events
		if err != nil {
			return err
		}
	}
	// The console's log of changed racks (console/read.go), whatever the
	// retention of history: its readers need the last hour at most.
	for {
		n, err := console.PruneCellChanges(ctx, p.pool, now.Add(-console.CellChangeRetention), 10*batch)
		if err != nil {
			return err
		}
		deleted["rack_cell_change"] += n
		if n < int64(10*batch) {
			break
		}
	}
	oldest := map[string]func(context.Context) (time.Time, bool, error){}
	if p.tasks != nil {
		oldest["task"] = p.tasks.OldestTask
	}
	if p.runs != nil {
		oldest["operation_run"] = p.runs.OldestRun
	}
	if p.events != nil {
		oldest["event"] = p.events.OldestEvent
	}
	var total int64
	for _, table := range pruneTables {
		var kept *time.Time
		if f, ok := oldest[table]; ok {
			at, found, err := f(ctx)
			if err != nil {
				return err
			}
			if found {
				kept = &at
				p.metrics.SetPruneOldestKept(table, at)
			} else {
				p.metrics.SetPruneOldestKept(table, time.Time{})
			}
		}
		n := deleted[table]
		total += n
		p.metrics.AddPruned(table, n)
		if err := db.RecordPrune(ctx, p.pool, table, n, kept); err != nil {
			return err
		}
	}
	p.metrics.SetPruneSuccess(p.now())
	if total > 0 {
		p.logger.InfoContext(ctx, "pruned finished history past its retention", "rows", total, "tasks", deleted["task"],
			"engine_steps", deleted["engine_step"], "operation_runs", deleted["operation_run"], "events", deleted["event"])
	}
	return nil
}

// pruneTables are the tables pruning deletes from, in the order it
// records them.
var pruneTables = []string{"task", "engine_run", "engine_step", "operation_run", "operation_run_target", "event", "event_action_execution", "rack_cell_change", "notify_delivery", "notify_event"}
