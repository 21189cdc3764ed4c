package eventrule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule/internal/dbsqlc"
)

// Leak detection (spec/orchestration.md §5.2, docs/event-rules.md): each
// cycle asks NICo Core which machines and switches carry the leak alert,
// records every component's leak_status, and answers each leak, through
// event rules or (legacy) a direct force-power-off task.

// LeakSource is NICo Core's view of leaking devices (nico.Client).
type LeakSource interface {
	LeakingMachineIDs(ctx context.Context) ([]string, error)
	LeakingSwitchIDs(ctx context.Context) ([]string, error)
}

// LeakEventSource is the event source name of leak detection.
const LeakEventSource = "nico_core_leakage"

// LeakDetectionCreator is who the legacy path's tasks are submitted by.
const LeakDetectionCreator = "flow:leak-detection"

// leakKind is one of the two Core listings leak detection polls.
type leakKind struct {
	name  string // leak_occurrence.component_kind, the source key's first part
	ctype inventory.ComponentType
	list  func(context.Context) ([]string, error)
}

// LeakDetector is the leak-detection job. Run does one cycle.
type LeakDetector struct {
	pool   *pgxpool.Pool
	q      *dbsqlc.Queries
	inv    *inventory.Service
	rules  *Service
	tasks  *operations.Tasks
	kinds  []leakKind
	events bool
	logger *slog.Logger
}

// LeakDetectorConfig holds what a LeakDetector needs.
type LeakDetectorConfig struct {
	Pool   *pgxpool.Pool
	Inv    *inventory.Service
	Rules  *Service
	Tasks  *operations.Tasks
	Source LeakSource
	// EventRules picks the event-rule path
	// (FLOW_EVENT_RULE_LEAK_DETECTION_ENABLED); otherwise the legacy path
	// submits a force-power-off task per leaking device every cycle.
	EventRules bool
	Logger     *slog.Logger
}

// NewLeakDetector returns the leak-detection job.
func NewLeakDetector(cfg LeakDetectorConfig) *LeakDetector {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &LeakDetector{
		pool: cfg.Pool, q: dbsqlc.New(), inv: cfg.Inv, rules: cfg.Rules, tasks: cfg.Tasks, events: cfg.EventRules, logger: logger,
		kinds: []leakKind{
			{name: "compute", ctype: inventory.ComponentTypeCompute, list: cfg.Source.LeakingMachineIDs},
			{name: "nvswitch", ctype: inventory.ComponentTypeNVSwitch, list: cfg.Source.LeakingSwitchIDs},
		},
	}
}

// Run does one detection cycle. The two listings are independent: one
// failing leaves the other's results (and its own last leak_status and
// occurrences) as they were. It returns the listing and response errors
// joined.
func (d *LeakDetector) Run(ctx context.Context) error {
	var errs []error
	for _, k := range d.kinds {
		ids, err := k.list(ctx)
		if err != nil {
			// A failed poll ends no occurrence and changes no status.
			errs = append(errs, fmt.Errorf("list leaking %s: %w", k.name, err))
			continue
		}
		// The status first: from then on nothing energises a leaking
		// component, before the response is even planned.
		if _, err := d.inv.SetLeakStatus(ctx, d.pool, k.ctype, ids); err != nil {
			errs = append(errs, err)
		}
		if err := d.respond(ctx, k, ids); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (d *LeakDetector) respond(ctx context.Context, k leakKind, ids []string) error {
	if !d.events {
		return d.legacy(ctx, k, ids)
	}
	keys, fresh, err := d.occurrences(ctx, k, ids)
	if err != nil {
		return err
	}
	var errs []error
	now := time.Now()
	for i, id := range ids {
		env := Envelope{
			Key: keys[i], Type: EventTypeLeakDetected, Severity: SeverityCritical, ObservedAt: now,
			Resource: Resource{Kind: ResourceComponent, ExternalID: id, ComponentType: operations.ComponentType(k.ctype)},
			Summary:  fmt.Sprintf("NICo Core reports a coolant leak on %s %s", k.name, id),
		}
		res, err := d.rules.Ingest(ctx, LeakEventSource, env)
		if errors.Is(err, ErrUnresolvable) {
			// A device Flow cannot place (not in the inventory, not linked
			// yet, no rack): said once per occurrence, not every cycle,
			// and no failure of the cycle.
			level := slog.LevelDebug
			if fresh[i] {
				level = slog.LevelWarn
			}
			d.logger.Log(ctx, level, "leak on a device flow cannot answer for", "component_kind", k.name, "external_id", id, "error", err.Error())
			continue
		}
		if err != nil {
			// The next cycle re-delivers the same key: a transient failure
			// is retried then, a terminal one is logged again.
			errs = append(errs, fmt.Errorf("leak on %s %s: %w", k.name, id, err))
			continue
		}
		if !res.Duplicate {
			d.logger.InfoContext(ctx, "leak detected", "component_kind", k.name, "external_id", id, "event_id", res.EventID, "executions", len(res.Executions))
		}
	}
	return errors.Join(errs...)
}

// occurrences returns the source key of each leaking id's occurrence and
// whether it just started, starting new ones and ending those of
// components no longer leaking, in one transaction. The keys are stored,
// so a restart or another replica keeps them: one occurrence, one event,
// one response.
func (d *LeakDetector) occurrences(ctx context.Context, k leakKind, ids []string) ([]string, []bool, error) {
	keys, fresh := make([]string, len(ids)), make([]bool, len(ids))
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := d.q.LeakOccurrenceEnd(ctx, tx, dbsqlc.LeakOccurrenceEndParams{ComponentKind: k.name, Leaking: append([]string{}, ids...)}); err != nil {
			return fmt.Errorf("end leak occurrences: %w", err)
		}
		for i, id := range ids {
			newKey := k.name + "/" + url.PathEscape(id) + "/" + uuid.NewString()
			key, err := d.q.LeakOccurrenceSee(ctx, tx, dbsqlc.LeakOccurrenceSeeParams{ComponentKind: k.name, ExternalID: id, NewKey: newKey})
			if err != nil {
				return fmt.Errorf("leak occurrence: %w", err)
			}
			keys[i], fresh[i] = key, key == newKey
		}
		return nil
	})
	return keys, fresh, err
}

// legacy submits a forced power-off of each leaking component, conflict
// QUEUE, every cycle the leak lasts (upstream's pre-event-rule behaviour:
// no deduplication, and no trigger linkage, so LeakHandlingStatus does not
// see these tasks).
func (d *LeakDetector) legacy(ctx context.Context, k leakKind, ids []string) error {
	var errs []error
	for _, id := range ids {
		req := operations.Request{
			Type: operations.OperationTypePowerControl, Code: operations.CodeForcePowerOff, Queue: true,
			Description: fmt.Sprintf("Leak detected on %s %s", k.name, id),
			Targets:     inventory.TargetSpec{Components: []inventory.ComponentRef{{ExternalType: k.ctype, ExternalID: id}}},
			Payload:     operations.Payload{Operation: operations.PayloadOperation(operations.OperationTypePowerControl, operations.CodeForcePowerOff), Forced: true},
			SubmittedBy: LeakDetectionCreator,
		}
		err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			_, err := d.tasks.Submit(ctx, tx, req)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("power off leaking %s %s: %w", k.name, id, err))
		}
	}
	return errors.Join(errs...)
}

// LeakHandling is the inventory's leak-handling source
// (inventory.LeakHandlingFunc): per component, the status of the latest
// force-power-off task a hardware.leak.detected execution submitted that
// covers it. The tasks are the task manager's (Tasks.TriggeredTasks); which
// of their executions answered a leak event is this package's.
func (s *Service) LeakHandling(ctx context.Context, dbtx db.DBTX, ids []uuid.UUID) (map[uuid.UUID]inventory.LeakHandling, error) {
	out := map[uuid.UUID]inventory.LeakHandling{}
	if len(ids) == 0 {
		return out, nil
	}
	if s.tasks == nil {
		return nil, errors.New("event rules: no task manager configured")
	}
	tasks, err := s.tasks.TriggeredTasks(ctx, dbtx, TriggerExecution, operations.CodeForcePowerOff, ids)
	if err != nil || len(tasks) == 0 {
		return out, err
	}
	// A trigger ID is an execution's ID as written at submit (its
	// canonical text); anything else names no execution.
	var execs []uuid.UUID
	seen := map[uuid.UUID]bool{}
	for _, t := range tasks {
		if id, err := uuid.Parse(t.TriggerID); err == nil && id.String() == t.TriggerID && !seen[id] {
			seen[id] = true
			execs = append(execs, id)
		}
	}
	leaks, err := s.q.ExecutionsOfEventType(ctx, dbtx, dbsqlc.ExecutionsOfEventTypeParams{IDs: execs, EventType: EventTypeLeakDetected})
	if err != nil {
		return nil, err
	}
	ofLeak := make(map[string]bool, len(leaks))
	for _, id := range leaks {
		ofLeak[id.String()] = true
	}
	// Newest first per component: the first of a leak execution is the
	// latest.
	for _, t := range tasks {
		if _, done := out[t.ComponentID]; done || !ofLeak[t.TriggerID] {
			continue
		}
		switch t.Status {
		case operations.TaskWaiting, operations.TaskPending, operations.TaskRunning:
			out[t.ComponentID] = inventory.LeakHandlingShuttingDown
		case operations.TaskCompleted:
			out[t.ComponentID] = inventory.LeakHandlingDown
		case operations.TaskFailed, operations.TaskTerminated:
			out[t.ComponentID] = inventory.LeakHandlingFailed
		default:
			out[t.ComponentID] = inventory.LeakHandlingUnknown
		}
	}
	return out, nil
}

// Occurrence is an ongoing leak occurrence.
type Occurrence struct {
	Kind, ExternalID, SourceKey string
	StartedAt, LastSeenAt       time.Time
}

// Occurrences lists the ongoing leak occurrences.
func (d *LeakDetector) Occurrences(ctx context.Context, dbtx db.DBTX) ([]Occurrence, error) {
	rows, err := d.q.LeakOccurrenceList(ctx, dbtx)
	if err != nil {
		return nil, err
	}
	out := make([]Occurrence, len(rows))
	for i, r := range rows {
		out[i] = Occurrence{Kind: r.ComponentKind, ExternalID: r.ExternalID, SourceKey: r.SourceKey, StartedAt: r.StartedAt, LastSeenAt: r.LastSeenAt}
	}
	return out, nil
}
