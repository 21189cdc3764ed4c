package eventrule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
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
	pool      *pgxpool.Pool
	q         *dbsqlc.Queries
	inv       *inventory.Service
	rules     *Service
	tasks     *operations.Tasks
	kinds     []leakKind
	events    bool
	logger    *slog.Logger
	off       UnknownPowerOff
	onUnknown func(kind, outcome string)
	onChange  LeakChangeFunc

	mu    sync.Mutex
	since map[string]int // cycles of each kind since its last full status pass; absent: none yet
}

// leakFullEvery is how often (in cycles) leak detection records the status
// of every component of a kind (inventory.Service.SetLeakStatus, which
// reads them all); the cycles between record only the changes, through
// indexes (UpdateLeakStatus): at 3,000 racks the full pass read 81,000
// components every 3 s. Only a component that was never looked at waits
// for the next full pass (it shows no leak status until then), unless it
// leaks.
const leakFullEvery = 20

// UnknownPowerOff forces a device Flow does not hold off through NICo
// Core, by its Core ID; kind is "compute" or "nvswitch" (app wires it to
// nico.Client.PowerControl).
type UnknownPowerOff func(ctx context.Context, kind, coreID string) error

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
	// PowerOff, if set, answers a leak on a device Flow does not hold:
	// once per occurrence, a forced power-off through Core by its ID.
	PowerOff UnknownPowerOff
	// OnUnknown, if set, hears of each such occurrence once, with what was
	// done (power_off_sent, power_off_failed, recorded): the metric.
	OnUnknown func(kind, outcome string)
	// OnChange, if set, hears of each occurrence that starts or ends
	// (notifications), in the transaction that records it.
	OnChange LeakChangeFunc
}

// LeakChange is a leak occurrence that started (a leak detected) or ended
// (Cleared: a successful poll no longer lists the component).
type LeakChange struct {
	Type       inventory.ComponentType
	ExternalID string // the component's Core ID
	Key        string // the occurrence's source key
	Cleared    bool
}

// LeakChangeFunc hears of a LeakChange inside the transaction that records
// it; an error rolls it back (the next cycle tries again). It must only
// write through tx and must not do network I/O.
type LeakChangeFunc func(ctx context.Context, tx pgx.Tx, c LeakChange) error

// NewLeakDetector returns the leak-detection job.
func NewLeakDetector(cfg LeakDetectorConfig) *LeakDetector {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &LeakDetector{
		pool: cfg.Pool, q: dbsqlc.New(), inv: cfg.Inv, rules: cfg.Rules, tasks: cfg.Tasks, events: cfg.EventRules, logger: logger,
		off: cfg.PowerOff, onUnknown: cfg.OnUnknown, onChange: cfg.OnChange,
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
//
// Per kind: the listing, the status of the components whose status
// changes, the response; the full status pass a kind is due (every
// leakFullEvery cycles) comes after both kinds' responses, as it reads
// every component of the kind: on a loaded 500-rack site it made a
// cycle's responses wait up to 5 s (docs/bench.md "Where a leak's
// response time goes").
func (d *LeakDetector) Run(ctx context.Context) error {
	var errs []error
	type pass struct {
		k   leakKind
		ids []string
	}
	var full []pass
	for _, k := range d.kinds {
		ids, err := k.list(ctx)
		if err != nil {
			// A failed poll ends no occurrence and changes no status.
			errs = append(errs, fmt.Errorf("list leaking %s: %w", k.name, err))
			continue
		}
		// The status first: from then on nothing energises a leaking
		// component, before the response is even planned.
		due := d.fullDue(k)
		_, err = d.inv.UpdateLeakStatus(ctx, d.pool, k.ctype, ids)
		if err != nil {
			errs = append(errs, err)
		}
		if !due {
			d.counted(k, false, err == nil)
		}
		if due {
			full = append(full, pass{k, ids})
		}
		if err := d.respond(ctx, k, ids); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range full {
		_, err := d.inv.SetLeakStatus(ctx, d.pool, p.k.ctype, p.ids)
		d.counted(p.k, true, err == nil)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// fullDue reports whether kind k's cycle records every component's status:
// its first cycle and every leakFullEvery-th after its last full pass
// succeeded.
func (d *LeakDetector) fullDue(k leakKind) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, ok := d.since[k.name]
	return !ok || n+1 >= leakFullEvery
}

// counted records a cycle of kind k: a full pass (full) or not, and
// whether its status write succeeded (ok).
func (d *LeakDetector) counted(k leakKind, full, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.since == nil {
		d.since = map[string]int{}
	}
	n, seen := d.since[k.name]
	switch {
	case full && ok:
		d.since[k.name] = 0
	case seen:
		d.since[k.name] = n + 1
	}
}

func (d *LeakDetector) respond(ctx context.Context, k leakKind, ids []string) error {
	if !d.events {
		return d.legacy(ctx, k, ids)
	}
	keys, fresh, err := d.occurrences(ctx, k, ids)
	if err != nil {
		return err
	}
	// New occurrences are ingested, leakIngestParallel at a time: each
	// ingest is its own transaction, and one after the other they made a
	// cycle with a dozen new leaks on a loaded site last 15 s, every leak
	// behind the ones before it (docs/bench.md "Leak response under
	// load"). The ongoing ones are one more observation each, all in one
	// statement after them (an ingest each made every cycle two queries
	// per open leak); one whose event is not stored (its first ingest
	// failed) is ingested whole.
	var started, ongoing []int
	byKey := map[string]int{}
	for i := range ids {
		if fresh[i] {
			started = append(started, i)
		} else {
			ongoing = append(ongoing, i)
			byKey[keys[i]] = i
		}
	}
	now := time.Now()
	errs := []error{d.ingestAll(ctx, k, ids, keys, started, now)}
	if len(ongoing) > 0 {
		okeys := make([]string, len(ongoing))
		for n, i := range ongoing {
			okeys[n] = keys[i]
		}
		missing, err := d.rules.Observe(ctx, LeakEventSource, okeys)
		if err != nil {
			errs = append(errs, fmt.Errorf("leaks on %s: %w", k.name, err))
		}
		var again []int
		for _, key := range missing {
			again = append(again, byKey[key])
		}
		errs = append(errs, d.ingestAll(ctx, k, ids, keys, again, now))
	}
	return errors.Join(errs...)
}

// ingestAll ingests the leaks of kind k at positions which of ids (their
// occurrence keys beside them), leakIngestParallel at a time.
func (d *LeakDetector) ingestAll(ctx context.Context, k leakKind, ids, keys []string, which []int, now time.Time) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, leakIngestParallel)
	)
	for _, i := range which {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if err := d.ingest(ctx, k, ids[i], keys[i], now); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// leakIngestParallel bounds the leaks one cycle ingests at once.
const leakIngestParallel = 8

// ingest hands the leak on device id (occurrence key) to the event rules.
func (d *LeakDetector) ingest(ctx context.Context, k leakKind, id, key string, now time.Time) error {
	env := Envelope{
		Key: key, Type: EventTypeLeakDetected, Severity: SeverityCritical, ObservedAt: now,
		Resource: Resource{Kind: ResourceComponent, ExternalID: id, ComponentType: operations.ComponentType(k.ctype)},
		Summary:  fmt.Sprintf("NICo Core reports a coolant leak on %s %s", k.name, d.named(ctx, k, id)),
	}
	res, err := d.rules.Ingest(ctx, LeakEventSource, env)
	if errors.Is(err, ErrUnresolvable) {
		// A device Flow cannot place (not in the inventory, not linked
		// yet, no rack): answered, logged and counted once per
		// occurrence, not every cycle, and no failure of the cycle.
		return d.unknown(ctx, k, id, key, err)
	}
	if err != nil {
		// The next cycle re-delivers the same key: a transient failure
		// is retried then, a terminal one is logged again.
		return fmt.Errorf("leak on %s %s: %w", k.name, id, err)
	}
	if !res.Duplicate {
		d.logger.InfoContext(ctx, "leak detected", "component_kind", k.name, "external_id", id, "event_id", res.EventID, "executions", len(res.Executions))
	}
	return nil
}

// occurrences returns the source key of each leaking id's occurrence and
// whether it just started, starting new ones and ending those of
// components no longer leaking, in one transaction. The keys are stored,
// so a restart or another replica keeps them: one occurrence, one event,
// one response.
func (d *LeakDetector) occurrences(ctx context.Context, k leakKind, ids []string) ([]string, []bool, error) {
	keys, fresh := make([]string, len(ids)), make([]bool, len(ids))
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		ended, err := d.q.LeakOccurrenceEnd(ctx, tx, dbsqlc.LeakOccurrenceEndParams{ComponentKind: k.name, Leaking: append([]string{}, ids...)})
		if err != nil {
			return fmt.Errorf("end leak occurrences: %w", err)
		}
		// One statement for them all: one after the other they were a
		// round trip each, on a loaded database tens of milliseconds.
		distinct := make([]string, 0, len(ids))
		newKeys := map[string]string{}
		for _, id := range ids {
			if _, dup := newKeys[id]; dup {
				continue
			}
			newKeys[id] = k.name + "/" + url.PathEscape(id) + "/" + uuid.NewString()
			distinct = append(distinct, id)
		}
		nk := make([]string, len(distinct))
		for i, id := range distinct {
			nk[i] = newKeys[id]
		}
		rows, err := d.q.LeakOccurrenceSeeMany(ctx, tx, dbsqlc.LeakOccurrenceSeeManyParams{ComponentKind: k.name, ExternalIds: distinct, NewKeys: nk})
		if err != nil {
			return fmt.Errorf("leak occurrence: %w", err)
		}
		got := make(map[string]string, len(rows))
		for _, r := range rows {
			got[r.ExternalID] = r.SourceKey
		}
		seen := map[string]bool{}
		for i, id := range ids {
			key, ok := got[id]
			if !ok {
				return fmt.Errorf("leak occurrence of %s %s: not returned", k.name, id)
			}
			// A repeated ID is one occurrence, fresh once.
			keys[i], fresh[i] = key, key == newKeys[id] && !seen[id]
			seen[id] = true
		}
		if d.onChange == nil {
			return nil
		}
		for _, e := range ended {
			if err := d.onChange(ctx, tx, LeakChange{Type: k.ctype, ExternalID: e.ExternalID, Key: e.SourceKey, Cleared: true}); err != nil {
				return err
			}
		}
		for i, id := range ids {
			if fresh[i] {
				if err := d.onChange(ctx, tx, LeakChange{Type: k.ctype, ExternalID: id, Key: keys[i]}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return keys, fresh, err
}

// named is how messages name the leaking component with Core ID id: its
// inventory name with the ID beside it ("demo-0007-ct-03 (5f0de58b-…)"),
// or the ID alone when Flow does not hold it.
func (d *LeakDetector) named(ctx context.Context, k leakKind, id string) string {
	c, err := d.inv.ResolveComponent(ctx, d.pool, inventory.ComponentRef{ExternalType: k.ctype, ExternalID: id})
	if err != nil || c.Name == "" {
		return id
	}
	return c.Name + " (" + id + ")"
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
			Description: fmt.Sprintf("Leak detected on %s %s", k.name, d.named(ctx, k, id)),
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
	// UnknownOutcome is, for a device Flow does not hold, what was done
	// ("" for a device Flow holds, or not looked at yet).
	UnknownOutcome string
}

// Occurrences lists the ongoing leak occurrences.
func (d *LeakDetector) Occurrences(ctx context.Context, dbtx db.DBTX) ([]Occurrence, error) {
	rows, err := d.q.LeakOccurrenceList(ctx, dbtx)
	if err != nil {
		return nil, err
	}
	out := make([]Occurrence, len(rows))
	for i, r := range rows {
		out[i] = Occurrence{Kind: r.ComponentKind, ExternalID: r.ExternalID, SourceKey: r.SourceKey, StartedAt: r.StartedAt, LastSeenAt: r.LastSeenAt,
			UnknownOutcome: r.UnknownOutcome}
	}
	return out, nil
}

// Outcomes of a leak on a device Flow does not hold
// (leak_occurrence.unknown_outcome).
const (
	unknownPending  = "pending"
	unknownSent     = "power_off_sent"
	unknownFailed   = "power_off_failed"
	unknownRecorded = "recorded"
)

// unknown answers the occurrence key of a leak on device id, which Flow
// does not hold (why), once: the first cycle that sees it marks the
// occurrence, logs it, forces the device off through Core by its ID (when
// a PowerOff is configured) and records the outcome; later cycles do
// nothing. A process killed between the mark and the call leaves the
// occurrence "pending": the leak is still listed, not answered again.
func (d *LeakDetector) unknown(ctx context.Context, k leakKind, id, key string, why error) error {
	_, err := d.q.LeakOccurrenceUnknown(ctx, d.pool, dbsqlc.LeakOccurrenceUnknownParams{SourceKey: key, Outcome: unknownPending})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // answered before
	} else if err != nil {
		return fmt.Errorf("leak on unknown %s %s: %w", k.name, id, err)
	}
	outcome, detail := unknownRecorded, ""
	if d.off != nil {
		if perr := d.off(ctx, k.name, id); perr != nil {
			outcome, detail = unknownFailed, operations.FirstLine(perr.Error())
		} else {
			outcome = unknownSent
		}
	}
	d.logger.WarnContext(ctx, "leak on a device flow does not hold", "component_kind", k.name, "external_id", id,
		"source_key", key, "outcome", outcome, "detail", detail, "why", why.Error())
	if d.onUnknown != nil {
		d.onUnknown(k.name, outcome)
	}
	stored := outcome
	if detail != "" {
		stored += ": " + detail
	}
	if err := d.q.LeakOccurrenceUnknownOutcome(ctx, d.pool, dbsqlc.LeakOccurrenceUnknownOutcomeParams{SourceKey: key, Outcome: stored}); err != nil {
		return fmt.Errorf("record the answer to the leak on %s %s: %w", k.name, id, err)
	}
	return nil
}
