package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/engine"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/notify"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/approval"
	"github.com/nicoflow/flow/operations/eventrule"
	"github.com/nicoflow/flow/operations/powerbudget"
	"github.com/nicoflow/flow/operations/rollout"
	"github.com/nicoflow/flow/operations/schedule"
	"github.com/nicoflow/flow/reconcile"
	"github.com/nicoflow/flow/telemetry"
)

// NotifyConfig is the webhook delivery's settings (docs/notifications.md).
type NotifyConfig struct {
	Site     string                // FLOW_SITE_NAME
	Delivery notify.DeliveryConfig // FLOW_NOTIFY_TIMEOUT, _MAX_ATTEMPTS, _BACKOFF_MIN, _BACKOFF_MAX
	Workers  int                   // FLOW_NOTIFY_WORKERS
	Allow    []string              // FLOW_NOTIFY_ALLOW_TARGETS
	// Alertmanager: FLOW_ALERTMANAGER_URLS, FLOW_ALERTMANAGER_RESEND.
	Alertmanager notify.Alertmanager
}

func loadNotify(def func(string) string) (NotifyConfig, []string) {
	var errs []string
	n := NotifyConfig{Site: def("FLOW_SITE_NAME")}
	dur := func(name string, dst *time.Duration) {
		if d, err := time.ParseDuration(def(name)); err != nil || d <= 0 {
			errs = append(errs, name+" must be a positive duration, such as 10s")
		} else {
			*dst = d
		}
	}
	dur("FLOW_NOTIFY_TIMEOUT", &n.Delivery.Timeout)
	dur("FLOW_NOTIFY_BACKOFF_MIN", &n.Delivery.BackoffMin)
	dur("FLOW_NOTIFY_BACKOFF_MAX", &n.Delivery.BackoffMax)
	if n.Delivery.BackoffMax > 0 && n.Delivery.BackoffMax < n.Delivery.BackoffMin {
		errs = append(errs, "FLOW_NOTIFY_BACKOFF_MAX must not be below FLOW_NOTIFY_BACKOFF_MIN")
	}
	if v, err := strconv.Atoi(def("FLOW_NOTIFY_MAX_ATTEMPTS")); err != nil || v < 1 {
		errs = append(errs, "FLOW_NOTIFY_MAX_ATTEMPTS must be a positive integer")
	} else {
		n.Delivery.MaxAttempts = v
	}
	if v, err := strconv.Atoi(def("FLOW_NOTIFY_WORKERS")); err != nil || v < 1 {
		errs = append(errs, "FLOW_NOTIFY_WORKERS must be a positive integer")
	} else {
		n.Workers, n.Delivery.Workers = v, v
	}
	if u, err := notify.ParseURLs(def("FLOW_ALERTMANAGER_URLS")); err != nil {
		errs = append(errs, "FLOW_ALERTMANAGER_URLS: "+err.Error())
	} else {
		n.Alertmanager.URLs = u
	}
	dur("FLOW_ALERTMANAGER_RESEND", &n.Alertmanager.Resend)
	if a, err := notify.ParseAllow(def("FLOW_NOTIFY_ALLOW_TARGETS")); err != nil {
		errs = append(errs, "FLOW_NOTIFY_ALLOW_TARGETS: "+err.Error())
	} else {
		n.Allow = a
	}
	return n, errs
}

// notifyObserver feeds the notification metrics.
type notifyObserver struct{ m *telemetry.NotifyMetrics }

func (o notifyObserver) Emitted(typ notify.Type, _ int) {
	o.m.Events.WithLabelValues(string(typ)).Inc()
}
func (o notifyObserver) Delivered(outcome string) { o.m.Deliveries.WithLabelValues(outcome).Inc() }

// notifyObserverFor returns the observer feeding m (nil: none).
func notifyObserverFor(m *telemetry.Metrics) notify.Observer {
	if m == nil || m.Notify == nil {
		return nil
	}
	return notifyObserver{m.Notify}
}

// rackResolver resolves a webhook scope's rack by name or ID.
func rackResolver(inv *inventory.Service) notify.RackResolver {
	return func(ctx context.Context, dbtx db.DBTX, ref string) (uuid.UUID, error) {
		r := inventory.RackRef{Name: ref}
		if id, err := uuid.Parse(ref); err == nil {
			r = inventory.RackRef{ID: id}
		}
		rack, err := inv.ResolveRack(ctx, dbtx, r)
		if err != nil {
			return uuid.Nil, err
		}
		return rack.ID, nil
	}
}

// initNotifyMetrics starts the notification families at zero and points
// the backlog gauges at svc.
func initNotifyMetrics(m *telemetry.Metrics, svc *notify.Service) {
	if m == nil || m.Notify == nil {
		return
	}
	types := []string{string(notify.WebhookTest)}
	for _, t := range notify.Types() {
		types = append(types, string(t))
	}
	m.Notify.Init(types, notify.Outcomes())
	m.Notify.SetBacklog(func() (int, float64) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, oldest, err := svc.Backlog(ctx)
		if err != nil {
			return 0, 0
		}
		return n, oldest.Seconds()
	})
}

// initPowerMetrics points flow_power_budget_transitions at budgets: every
// feed with a budget, its transitions in use and its limit.
func initPowerMetrics(m *telemetry.Metrics, budgets *powerbudget.Service) {
	if m == nil || m.Power == nil {
		return
	}
	m.Power.SetReader(func() ([]telemetry.PowerBudgetUse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		all, err := budgets.List(ctx)
		if err != nil {
			return nil, err
		}
		var out []telemetry.PowerBudgetUse
		for _, b := range all {
			if b.Set {
				out = append(out, telemetry.PowerBudgetUse{Feed: b.Feed, InUse: float64(b.Transitions), Limit: float64(b.MaxTransitions)})
			}
		}
		return out, nil
	})
}

// taskEventTypes are the task events, by the engine state of their run.
var taskEventTypes = map[engine.State]notify.Type{
	engine.StateCompleted:  notify.TaskCompleted,
	engine.StateFailed:     notify.TaskFailed,
	engine.StateTerminated: notify.TaskTerminated,
}

// taskEnds emits the task events of runs that ended, inside the
// transaction that ended them (the engine's end-of-run hook, after the task
// manager recorded them): a rolled-back checkpoint emits nothing. Each
// task's end is one event (its dedupe key), however often it is told.
func taskEnds(svc *notify.Service, inv *inventory.Service) engine.RunEndFunc {
	return func(ctx context.Context, tx pgx.Tx, runs []engine.RunSummary) error {
		wanted, err := svc.Wanted(ctx, tx, notify.TaskCompleted, notify.TaskFailed, notify.TaskTerminated, notify.LeakHandled)
		if err != nil || !wanted {
			return err
		}
		for _, run := range runs {
			taskID, err := uuid.Parse(run.Owner)
			if err != nil {
				continue // not a task's run
			}
			typ, ok := taskEventTypes[run.State]
			if !ok {
				continue
			}
			rack, err := rackOf(ctx, tx, inv, run.Labels["rack"])
			if err != nil {
				return err
			}
			ev := notify.Event{Type: typ, DedupeKey: "task-end/" + taskID.String(), Time: run.EndedAt, Data: notify.Data{
				Task: &notify.TaskData{ID: taskID.String(), Operation: run.Labels["operation"], Status: string(run.State), Message: firstLine(run.Error)},
			}}
			if rack != nil {
				ev.RackID = &rack.ID
				ev.Data.Rack = &notify.Ref{ID: rack.ID.String(), Name: rack.Name}
			}
			submitted := run.CreatedAt
			ev.Data.Task.SubmittedAt = &submitted
			if err := svc.Emit(ctx, tx, ev); err != nil {
				return fmt.Errorf("emit %s: %w", typ, err)
			}
			// A leak response (its run urgent) that completed has powered
			// the leaking components off: the leak is handled.
			if run.Labels[engine.LabelPriority] == engine.PriorityUrgent && run.State == engine.StateCompleted {
				handled := ev
				handled.Type, handled.DedupeKey = notify.LeakHandled, "leak-handled/"+taskID.String()
				handled.Data.Leak = &notify.LeakData{By: "leak response task " + taskID.String()}
				handled.Data.Message = "the leak response completed: the leaking components are powered off"
				if err := svc.Emit(ctx, tx, handled); err != nil {
					return fmt.Errorf("emit %s: %w", notify.LeakHandled, err)
				}
			}
		}
		return nil
	}
}

// rackOf finds the rack a run's "rack" label names (its name, else its
// ID); nil when it is gone.
func rackOf(ctx context.Context, dbtx db.DBTX, inv *inventory.Service, label string) (*inventory.Rack, error) {
	if label == "" {
		return nil, nil
	}
	ref := inventory.RackRef{Name: label}
	if id, err := uuid.Parse(label); err == nil {
		ref = inventory.RackRef{ID: id}
	}
	r, err := inv.ResolveRack(ctx, dbtx, ref)
	if errors.Is(err, inventory.ErrRackNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("resolve rack %q: %w", label, err)
	}
	return &r, nil
}

// firstLine keeps a message to its first line, at most 512 bytes.
func firstLine(s string) string {
	for i := range len(s) {
		if s[i] == '\n' {
			s = s[:i]
			break
		}
	}
	if len(s) > 512 {
		s = s[:512]
	}
	return s
}

// runChanges emits an operation run's events inside the transaction that
// saves its change: a phase started, a gate tripped (paused by a safety
// gate), paused otherwise, completed (with or without failures), failed.
func runChanges(svc *notify.Service) rollout.RunChangeFunc {
	return func(ctx context.Context, tx pgx.Tx, c rollout.RunChange) error {
		var typ notify.Type
		switch c.Status {
		case rollout.RunRunning:
			if c.FromStatus != rollout.RunPending && c.Phase == c.FromPhase {
				return nil // resumed within its phase
			}
			typ = notify.RunPhaseStarted
		case rollout.RunPaused:
			typ = notify.RunPaused
			if c.Reason == rollout.ReasonSafetyGate {
				typ = notify.RunGateTripped
			}
		case rollout.RunCompleted, rollout.RunCompletedWithFailures:
			typ = notify.RunCompleted
		case rollout.RunFailed:
			typ = notify.RunFailed
		default:
			return nil
		}
		phase := c.Phase
		return svc.Emit(ctx, tx, notify.Event{Type: typ, Data: notify.Data{
			Message: c.Message,
			Run:     &notify.RunData{ID: c.RunID.String(), Name: c.Name, Status: string(c.Status), Phase: &phase, Reason: string(c.Reason)},
		}})
	}
}

// leakChanges emits flow.leak.detected when a leak occurrence starts and
// flow.leak.cleared when it ends, in the transaction that records it, with
// the component and its rack by ID and name (a device Flow does not hold
// is named by its Core ID alone).
func leakChanges(svc *notify.Service, inv *inventory.Service) eventrule.LeakChangeFunc {
	return func(ctx context.Context, tx pgx.Tx, c eventrule.LeakChange) error {
		typ := notify.LeakDetected
		if c.Cleared {
			typ = notify.LeakCleared
			// The leak's alerts (send_alert) resolve with it.
			if _, err := svc.ResolveAlerts(ctx, tx, c.Key); err != nil {
				return err
			}
		}
		if ok, err := svc.Wanted(ctx, tx, typ); err != nil || !ok {
			return err
		}
		now := time.Now()
		ev := notify.Event{Type: typ, DedupeKey: string(typ) + "/" + c.Key, Data: notify.Data{
			Component: &notify.Ref{ID: c.ExternalID},
			Leak:      &notify.LeakData{OccurrenceID: c.Key, ObservedAt: &now},
		}}
		comp, err := inv.ResolveComponent(ctx, tx, inventory.ComponentRef{ExternalType: c.Type, ExternalID: c.ExternalID})
		if err == nil {
			ev.Data.Component = &notify.Ref{ID: comp.ID.String(), Name: comp.Name}
			if comp.RackID != nil {
				ev.RackID = comp.RackID
				ev.Data.Rack = &notify.Ref{ID: comp.RackID.String()}
				if r, err := inv.Rack(ctx, tx, *comp.RackID, false); err == nil {
					ev.Data.Rack.Name = r.Name
				}
			}
		}
		ev.Data.Message = fmt.Sprintf("coolant leak on %s %s", c.Type, cmpOr(ev.Data.Component.Name, c.ExternalID))
		if c.Cleared {
			ev.Data.Message = fmt.Sprintf("coolant leak on %s %s cleared", c.Type, cmpOr(ev.Data.Component.Name, c.ExternalID))
		}
		return svc.Emit(ctx, tx, ev)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// alertSender raises event rules' send_alert alerts through the notifier
// (nil when no Alertmanager is configured: send_alert is refused), labelled
// alertname, severity, site, rack, component, rule and action, and
// resolved when the event's source ends (a leak occurrence, leakChanges).
func alertSender(svc *notify.Service, inv *inventory.Service) eventrule.AlertFunc {
	if !svc.Alerting() {
		return nil
	}
	return func(ctx context.Context, tx pgx.Tx, a eventrule.Alert) error {
		name := "FlowEvent"
		if a.EventType == eventrule.EventTypeLeakDetected {
			name = "FlowLeakDetected"
		}
		labels := map[string]string{
			"alertname": name, "severity": string(a.Severity), "site": svc.Site(), "event_type": a.EventType,
			"rule": a.RuleID.String(), "action": a.ActionName, "rack_id": a.RackID.String(),
		}
		if r, err := inv.Rack(ctx, tx, a.RackID, false); err == nil {
			labels["rack"] = r.Name
		}
		if a.ResourceKind == "component" {
			labels["component_id"] = a.ResourceID.String()
			if c, err := inv.Component(ctx, tx, a.ResourceID); err == nil {
				labels["component"] = c.Name
			}
		}
		ann := map[string]string{"summary": a.Summary, "flow_event_id": a.EventID.String()}
		if a.Message != "" {
			ann["description"] = a.Message
		}
		return svc.RaiseAlert(ctx, tx, notify.Alert{Key: a.SourceKey + "#" + a.RuleID.String() + "/" + a.ActionName, SourceKey: a.SourceKey,
			Labels: labels, Annotations: ann})
	}
}

// scheduleRefusals emits flow.schedule.firing_refused for each scope entry
// a schedule's firing could not submit, in the firing's transaction.
func scheduleRefusals(svc *notify.Service, inv *inventory.Service) schedule.RefusedFunc {
	return func(ctx context.Context, tx pgx.Tx, r schedule.Refusal) error {
		if ok, err := svc.Wanted(ctx, tx, notify.ScheduleFiringRefused); err != nil || !ok {
			return err
		}
		ev := notify.Event{Type: notify.ScheduleFiringRefused, Data: notify.Data{
			Message:  fmt.Sprintf("schedule %q firing at %s not submitted: %s", r.Name, r.At.UTC().Format(time.RFC3339), r.Reason),
			Schedule: &notify.ScheduleData{ID: r.ScheduleID.String(), Name: r.Name, FireTime: &r.At, Reason: r.Reason},
		}}
		if r.RackID != nil {
			ev.RackID = r.RackID
			ev.Data.Rack = &notify.Ref{ID: r.RackID.String()}
			if rack, err := inv.Rack(ctx, tx, *r.RackID, false); err == nil {
				ev.Data.Rack.Name = rack.Name
			}
		}
		return svc.Emit(ctx, tx, ev)
	}
}

// leakOverrides emits flow.leak.overridden when an admin overrides a
// leaking component's energise guard, in the transaction that records it.
func leakOverrides(svc *notify.Service, inv *inventory.Service) eventrule.OverrideFunc {
	return func(ctx context.Context, tx pgx.Tx, c inventory.Component, leak inventory.OpenLeak) error {
		ev := notify.Event{Type: notify.LeakOverridden, Data: notify.Data{
			Component: &notify.Ref{ID: c.ID.String(), Name: c.Name},
			Leak:      &notify.LeakData{Location: c.ExternalID, ObservedAt: &leak.DetectedAt, By: leak.OverrideBy},
			Message:   fmt.Sprintf("leak guard of %s overridden by %s: %s", c.Name, leak.OverrideBy, leak.OverrideReason),
		}}
		if c.RackID != nil {
			ev.RackID = c.RackID
			ev.Data.Rack = &notify.Ref{ID: c.RackID.String()}
			if r, err := inv.Rack(ctx, tx, *c.RackID, false); err == nil {
				ev.Data.Rack.Name = r.Name
			}
		}
		return svc.Emit(ctx, tx, ev)
	}
}

// approvalChanges emits flow.approval.requested when a request is made and
// flow.approval.decided when it is approved, rejected or expires, in the
// transaction that records it (a site-wide event: subject "site").
func approvalChanges(svc *notify.Service) approval.ChangeFunc {
	return func(ctx context.Context, tx pgx.Tx, r approval.Request) error {
		typ := notify.ApprovalDecided
		msg := fmt.Sprintf("approval request %s %s by %s", r.ID, r.Status, r.DecidedBy)
		if r.Status == approval.StatusPending {
			typ = notify.ApprovalRequested
			msg = fmt.Sprintf("%s requests approval: %s (plan hash %s)", r.RequestedBy, r.Summary, r.PlanHash)
		}
		if ok, err := svc.Wanted(ctx, tx, typ); err != nil || !ok {
			return err
		}
		d := &notify.ApprovalData{ID: r.ID.String(), Kind: r.Kind, Status: r.Status, Summary: r.Summary, Racks: r.Racks, PlanHash: r.PlanHash,
			RequestedBy: r.RequestedBy, DecidedBy: r.DecidedBy, Reason: r.Reason}
		if !r.ExpiresAt.IsZero() {
			d.ExpiresAt = &r.ExpiresAt
		}
		for _, id := range r.SubjectIDs {
			d.SubjectIDs = append(d.SubjectIDs, id.String())
		}
		return svc.Emit(ctx, tx, notify.Event{Type: typ, DedupeKey: "approval/" + r.ID.String() + "/" + r.Status, Data: notify.Data{Message: msg, Approval: d}})
	}
}

// waitingTaskEnds emits flow.task.terminated (or .failed) for a task that
// ended before it started (cancelled while waiting, expired, refused by a
// leak, pre-empted, its approval rejected or expired), in the transaction
// that ends it: no engine run ends such a task, so taskEnds does not.
func waitingTaskEnds(svc *notify.Service, inv *inventory.Service) operations.WaitingEndFunc {
	return func(ctx context.Context, tx pgx.Tx, e operations.WaitingEnd) error {
		typ := notify.TaskTerminated
		if e.Status == operations.TaskFailed {
			typ = notify.TaskFailed
		}
		if ok, err := svc.Wanted(ctx, tx, typ); err != nil || !ok {
			return err
		}
		submitted := e.SubmittedAt
		ev := notify.Event{Type: typ, RackID: &e.RackID, DedupeKey: "task-end/" + e.TaskID.String(), Data: notify.Data{
			Rack: &notify.Ref{ID: e.RackID.String()},
			Task: &notify.TaskData{ID: e.TaskID.String(), OperationType: string(e.Type), Operation: string(e.Code), Status: string(e.Status),
				Message: firstLine(e.Message), SubmittedBy: e.SubmittedBy, SubmittedAt: &submitted},
		}}
		if rack, err := inv.Rack(ctx, tx, e.RackID, false); err == nil {
			ev.Data.Rack.Name = rack.Name
		}
		return svc.Emit(ctx, tx, ev)
	}
}

// driftEvents emits flow.sync.drift_found and flow.sync.drift_cleared for
// each drift an inventory-sync cycle found or no longer finds, in the
// transaction that records it: subject the component's rack when Flow
// knows the component, else the site.
func driftEvents(svc *notify.Service, inv *inventory.Service) reconcile.DriftFunc {
	return func(ctx context.Context, tx pgx.Tx, changes []reconcile.DriftChange) error {
		if svc == nil || len(changes) == 0 {
			return nil
		}
		if ok, err := svc.Wanted(ctx, tx, notify.SyncDriftFound, notify.SyncDriftCleared); err != nil || !ok {
			return err
		}
		for _, c := range changes {
			typ, verb := notify.SyncDriftFound, "found"
			if !c.Found {
				typ, verb = notify.SyncDriftCleared, "cleared"
			}
			name := cmp.Or(c.Name, c.ExternalID, c.MAC)
			ev := notify.Event{Type: typ, Time: c.CheckedAt,
				DedupeKey: fmt.Sprintf("drift/%s/%s/%s/%s/%s/%d", verb, c.Type, c.Kind, c.ExternalID, c.MAC, c.CheckedAt.UnixNano()),
				Data: notify.Data{
					Message: fmt.Sprintf("drift %s: %s %s %s", verb, c.Type, name, c.Kind),
					Drift: &notify.DriftData{Kind: c.Kind, ComponentType: string(c.Type), ExternalID: c.ExternalID, MAC: c.MAC,
						Fields: c.Fields, CheckedAt: c.CheckedAt},
				}}
			if c.Component != nil {
				ev.Data.Component = &notify.Ref{ID: c.Component.String(), Name: c.Name}
				if comp, err := inv.Component(ctx, tx, *c.Component); err == nil && comp.RackID != nil {
					ev.RackID = comp.RackID
					ev.Data.Rack = &notify.Ref{ID: comp.RackID.String()}
					if rack, err := inv.Rack(ctx, tx, *comp.RackID, false); err == nil {
						ev.Data.Rack.Name = rack.Name
					}
				}
			}
			if err := svc.Emit(ctx, tx, ev); err != nil {
				return fmt.Errorf("emit %s: %w", typ, err)
			}
		}
		return nil
	}
}

// firmwareCodes are the operations whose end makes installed firmware
// versions due for reading (an ingest may upgrade firmware).
var firmwareCodes = map[string]bool{
	string(operations.CodeUpgrade): true, string(operations.CodeDowngrade): true, string(operations.CodeRollback): true,
	string(operations.CodeIngest): true,
}

// firmwareReadsDue marks the firmware types' installed versions due at the
// next sync cycle when a firmware task's run ended among runs, through tx.
func firmwareReadsDue(ctx context.Context, tx pgx.Tx, inv *inventory.Service, runs []engine.RunSummary) error {
	for _, run := range runs {
		if firmwareCodes[run.Labels["operation"]] {
			return inv.MarkFirmwareReadDue(ctx, tx, []inventory.ComponentType{inventory.ComponentTypeCompute, inventory.ComponentTypeNVSwitch, inventory.ComponentTypePowerShelf})
		}
	}
	return nil
}
