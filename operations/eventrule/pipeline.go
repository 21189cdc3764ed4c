package eventrule

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule/internal/dbsqlc"
)

// The processing pipeline (spec/orchestration.md §4.5): an event envelope
// from a named source becomes at most one stored event and its action
// executions, all written in one transaction together with the River jobs
// that run them.

// ErrUnresolvable is a terminal ingestion failure: the envelope is
// malformed, or its resource is unknown, ambiguous or has no rack.
// Re-delivering the same envelope cannot succeed.
var ErrUnresolvable = errors.New("event cannot be processed")

// ResourceKind is what an event is about.
type ResourceKind string

// Resource kinds.
const (
	ResourceRack      ResourceKind = "rack"
	ResourceComponent ResourceKind = "component"
)

// Resource names an event's resource: by Flow ID, or (components) by
// the external ID the source knows it by, with an optional type hint.
type Resource struct {
	Kind          ResourceKind
	ID            uuid.UUID
	ExternalID    string
	ComponentType operations.ComponentType
}

// Envelope is one event occurrence as a collector reports it. Key
// identifies the occurrence within its source: the same key is the same
// occurrence, however often it is reported.
type Envelope struct {
	Key        string
	Type       string
	Severity   Severity
	Resource   Resource
	Summary    string
	ObservedAt time.Time
}

// IngestResult says what Ingest did.
type IngestResult struct {
	EventID uuid.UUID // uuid.Nil when nothing was stored
	// Duplicate is set when the occurrence was already stored: only its
	// observation count moved.
	Duplicate bool
	// Executions are the executions planned for a new event.
	Executions []uuid.UUID
}

// maxEventSummary bounds an event's summary (characters).
const maxEventSummary = 1024

// Ingest processes env from source: a known (source, key) only counts an
// observation; otherwise the resource is resolved, the effective rule of
// its rack chosen, the applicable actions planned, and the event with all
// its executions committed in one transaction with their jobs.
// Terminal failures match ErrUnresolvable; others are worth
// re-delivering.
func (s *Service) Ingest(ctx context.Context, source string, env Envelope) (IngestResult, error) {
	if err := validateEnvelope(source, env); err != nil {
		return IngestResult{}, err
	}
	// Dedup fast path: an occurrence seen before is one more observation.
	id, err := s.q.EventObserve(ctx, s.pool, dbsqlc.EventObserveParams{SourceName: source, SourceKey: env.Key})
	if err == nil {
		return IngestResult{EventID: id, Duplicate: true}, nil
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return IngestResult{}, fmt.Errorf("observe event: %w", err)
	}
	var res IngestResult
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		res, err = s.plan(ctx, tx, source, env)
		return err
	})
	return res, err
}

// Observe counts one more observation of each occurrence of source among
// keys that is stored, in one statement, and returns the keys of those it
// did not find (to Ingest whole: their first ingest failed, or their event
// was pruned).
func (s *Service) Observe(ctx context.Context, source string, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	found, err := s.q.EventObserveMany(ctx, s.pool, dbsqlc.EventObserveManyParams{SourceName: source, SourceKeys: keys})
	if err != nil {
		return nil, fmt.Errorf("observe events: %w", err)
	}
	seen := make(map[string]bool, len(found))
	for _, k := range found {
		seen[k] = true
	}
	var missing []string
	for _, k := range keys {
		if !seen[k] {
			missing = append(missing, k)
		}
	}
	return missing, nil
}

func validateEnvelope(source string, env Envelope) error {
	switch {
	case !identifierPattern.MatchString(source):
		return fmt.Errorf("%w: source name %q must be a lower-snake identifier", ErrUnresolvable, source)
	case env.Key == "":
		return fmt.Errorf("%w: envelope key is empty", ErrUnresolvable)
	case !env.Severity.valid():
		return fmt.Errorf("%w: severity %q", ErrUnresolvable, env.Severity)
	case env.Resource.Kind != ResourceRack && env.Resource.Kind != ResourceComponent:
		return fmt.Errorf("%w: resource kind %q", ErrUnresolvable, env.Resource.Kind)
	}
	if err := ValidateEventType("type", env.Type); err != nil {
		return fmt.Errorf("%w: %v", ErrUnresolvable, err)
	}
	return nil
}

// eventSubject is an event's resolved resource.
type eventSubject struct {
	kind      ResourceKind
	id        uuid.UUID
	rack      inventory.Rack // with its components
	component *inventory.Component
}

func (s *Service) resolve(ctx context.Context, tx pgx.Tx, r Resource) (eventSubject, error) {
	if r.Kind == ResourceRack {
		rack, err := s.inv.Rack(ctx, tx, r.ID, true)
		if errors.Is(err, inventory.ErrRackNotFound) {
			return eventSubject{}, fmt.Errorf("%w: %v", ErrUnresolvable, err)
		} else if err != nil {
			return eventSubject{}, err
		}
		return eventSubject{kind: ResourceRack, id: rack.ID, rack: rack}, nil
	}
	ref := inventory.ComponentRef{ID: r.ID, ExternalID: r.ExternalID, ExternalType: inventory.ComponentType(r.ComponentType)}
	if r.ID != uuid.Nil {
		ref.ExternalID, ref.ExternalType = "", ""
	}
	c, err := s.inv.ResolveComponent(ctx, tx, ref)
	switch {
	case errors.Is(err, inventory.ErrComponentNotFound), errors.Is(err, inventory.ErrAmbiguous), errors.Is(err, inventory.ErrInvalidArgument):
		return eventSubject{}, fmt.Errorf("%w: %v", ErrUnresolvable, err)
	case err != nil:
		return eventSubject{}, err
	case c.RackID == nil:
		return eventSubject{}, fmt.Errorf("%w: component %s has no rack", ErrUnresolvable, c.ID)
	}
	rack, err := s.inv.Rack(ctx, tx, *c.RackID, true)
	if errors.Is(err, inventory.ErrRackNotFound) {
		return eventSubject{}, fmt.Errorf("%w: the rack of component %s: %v", ErrUnresolvable, c.ID, err)
	} else if err != nil {
		return eventSubject{}, err
	}
	for i := range rack.Components {
		if rack.Components[i].ID == c.ID {
			return eventSubject{kind: ResourceComponent, id: c.ID, rack: rack, component: &rack.Components[i]}, nil
		}
	}
	return eventSubject{}, fmt.Errorf("%w: component %s is not among its rack's live components", ErrUnresolvable, c.ID)
}

func (sub eventSubject) componentType() operations.ComponentType {
	if sub.component == nil {
		return ""
	}
	return operations.ComponentType(sub.component.Type)
}

// executionPlanVersion is the version of event_action_execution.plan.
const executionPlanVersion = 1

// executionPlan is an execution's frozen plan.
type executionPlan struct {
	Version int `json:"version"`
	// submit_task
	Operation        *TaskOperation   `json:"operation,omitempty"`
	ConflictStrategy ConflictStrategy `json:"conflict_strategy,omitempty"`
	Description      string           `json:"description,omitempty"`
	SubmittedBy      string           `json:"submitted_by,omitempty"`
	Racks            []rackTargets    `json:"racks,omitempty"`
	// send_alert
	Alert *SendAlertSpec `json:"alert,omitempty"`
	// noop
	Reason string `json:"reason,omitempty"`
}

// rackTargets is one rack's component set of a submit_task plan.
type rackTargets struct {
	RackID       uuid.UUID   `json:"rack_id"`
	ComponentIDs []uuid.UUID `json:"component_ids"`
}

// Execution statuses and reasons (event_action_execution).
const (
	execPending   = "pending"
	execSkipped   = "skipped"
	execDeferred  = "deferred"
	execCompleted = "completed"
	execFailed    = "failed"

	reasonNoTargets          = "no_targets"
	reasonAttemptFailed      = "attempt_failed"
	reasonAttemptInterrupted = "attempt_interrupted"
)

// plan runs pipeline steps 3–7 in tx.
func (s *Service) plan(ctx context.Context, tx pgx.Tx, source string, env Envelope) (IngestResult, error) {
	sub, err := s.resolve(ctx, tx, env.Resource)
	if err != nil {
		return IngestResult{}, err
	}
	rule, err := s.Effective(ctx, tx, env.Type, sub.rack.ID)
	if errors.Is(err, ErrRuleNotFound) {
		return IngestResult{}, nil // no rule: accepted, nothing stored
	} else if err != nil {
		return IngestResult{}, err
	}
	var applicable []Action
	for _, a := range rule.Actions {
		if a.Condition.Applies(env.Severity, sub.componentType()) {
			applicable = append(applicable, a)
		}
	}
	eventID := uuid.New()
	var componentType *string
	if sub.component != nil {
		ct := string(sub.component.Type)
		componentType = &ct
	}
	summary := env.Summary
	if r := []rune(summary); len(r) > maxEventSummary {
		summary = string(r[:maxEventSummary])
	}
	if applicable == nil {
		applicable = []Action{}
	}
	policy, _ := json.Marshal(eventPolicy{Version: eventPolicyVersion, Actions: applicable})
	_, err = s.q.EventInsert(ctx, tx, dbsqlc.EventInsertParams{
		ID: eventID, SourceName: source, SourceKey: env.Key, EventType: env.Type, Severity: string(env.Severity),
		ResourceKind: string(sub.kind), ResourceID: sub.id, RackID: sub.rack.ID, ComponentType: componentType,
		AppliedRuleID: rule.ID, EffectivePolicy: policy, Summary: summary, ObservedAt: cmp.Or(env.ObservedAt, time.Now()),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		// Another process stored the occurrence first: one more
		// observation.
		id, err := s.q.EventObserve(ctx, tx, dbsqlc.EventObserveParams{SourceName: source, SourceKey: env.Key})
		if err != nil {
			return IngestResult{}, fmt.Errorf("observe event: %w", err)
		}
		return IngestResult{EventID: id, Duplicate: true}, nil
	} else if err != nil {
		return IngestResult{}, fmt.Errorf("insert event: %w", err)
	}
	res := IngestResult{EventID: eventID}
	var jobs []uuid.UUID
	for _, a := range applicable {
		execID := uuid.New()
		p := executionPlan{Version: executionPlanVersion}
		status, reason, message := execPending, (*string)(nil), ""
		switch {
		case a.SubmitTask != nil:
			st := a.SubmitTask
			p.Operation, p.ConflictStrategy, p.SubmittedBy = &st.Operation, st.ConflictStrategy, rule.CreatedBy
			p.Description = cmp.Or(st.Description, fmt.Sprintf("event rule %q action %s", rule.Name, a.Name))
			var why string
			p.Racks, why = planTargets(env.Type, st.TargetStrategy, sub)
			if len(p.Racks) == 0 {
				r := reasonNoTargets
				status, reason, message = execSkipped, &r, why
			}
		case a.SendAlert != nil:
			p.Alert = a.SendAlert
		case a.Noop != nil:
			// A noop is done once planned: no job.
			p.Reason, status = a.Noop.Reason, execCompleted
		}
		plan, _ := json.Marshal(p)
		if err := s.q.ExecutionInsert(ctx, tx, dbsqlc.ExecutionInsertParams{
			ID: execID, EventID: eventID, ActionName: a.Name, ActionType: string(a.Type()), Plan: plan,
			Status: status, Reason: reason, StatusMessage: message,
		}); err != nil {
			return IngestResult{}, fmt.Errorf("insert execution: %w", err)
		}
		res.Executions = append(res.Executions, execID)
		if status == execPending {
			jobs = append(jobs, execID)
		}
	}
	if len(jobs) > 0 {
		if s.enqueue == nil {
			return IngestResult{}, errors.New("event rules: no execution enqueuer configured")
		}
		if err := s.enqueue(ctx, tx, jobs); err != nil {
			return IngestResult{}, fmt.Errorf("enqueue executions: %w", err)
		}
	}
	return res, nil
}

// planTargets resolves a submit_task action's targets for the event's
// subject (spec §4.3), as per-rack component sets sorted by rack ID. With
// no target it says why.
func planTargets(eventType string, strategy TargetStrategy, sub eventSubject) ([]rackTargets, string) {
	var ids []uuid.UUID
	switch strategy {
	case TargetComponent:
		if sub.component == nil {
			return nil, "target strategy COMPONENT cannot resolve a rack event"
		}
		ids = []uuid.UUID{sub.component.ID}
	case TargetRack:
		ids = componentIDs(sub.rack.Components)
	case TargetAffectedComponents:
		resolver, ok := affectedResolvers[eventType]
		if !ok {
			resolver = defaultAffected
		}
		var why string
		if ids, why = resolver(sub); len(ids) == 0 {
			return nil, why
		}
	}
	if len(ids) == 0 {
		return nil, "the rack has no components"
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	// One event has one rack; the per-rack form keeps the plan able to
	// carry events that span racks.
	return []rackTargets{{RackID: sub.rack.ID, ComponentIDs: ids}}, ""
}

func componentIDs(cs []inventory.Component) []uuid.UUID {
	out := make([]uuid.UUID, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

// affectedResolver returns an event's affected components, or why there
// are none.
type affectedResolver func(sub eventSubject) ([]uuid.UUID, string)

// affectedResolvers are the event types' own AFFECTED_COMPONENTS
// resolvers.
var affectedResolvers = map[string]affectedResolver{EventTypeLeakDetected: leakAffected}

// defaultAffected is the component for a component event, the whole rack
// for a rack event.
func defaultAffected(sub eventSubject) ([]uuid.UUID, string) {
	if sub.component != nil {
		return []uuid.UUID{sub.component.ID}, ""
	}
	return componentIDs(sub.rack.Components), ""
}

// leakAffected is the leakage resolver: coolant runs down, so a leak
// affects the leaking component and every component of its rack in a slot
// strictly below it (lower slot number, slot 0 included); a rack event
// affects the whole rack. Slot 0 is a slot like any other: only a missing
// position (a negative slot_id, which the inventory sync writes when Core
// gives none; inventory.NoSlot) means the component cannot be placed, and a
// leaking component without one resolves nothing.
func leakAffected(sub eventSubject) ([]uuid.UUID, string) {
	if sub.component == nil {
		return componentIDs(sub.rack.Components), ""
	}
	slot := sub.component.Position.SlotID
	if !sub.component.Position.HasSlot() {
		return nil, fmt.Sprintf("leaking component %s has no slot (its position is missing), so the components below it are unknown", sub.component.ID)
	}
	out := []uuid.UUID{sub.component.ID}
	for _, c := range sub.rack.Components {
		if c.ID != sub.component.ID && c.Position.HasSlot() && c.Position.SlotID < slot {
			out = append(out, c.ID)
		}
	}
	return out, ""
}
