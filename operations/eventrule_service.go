package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/db"
	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/internal/dbsqlc"
)

// ExecutionEnqueuer inserts, through tx, the job that runs each of the
// event-rule executions ids (River's InsertManyTx in app).
type ExecutionEnqueuer func(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) error

// EventRules stores event rules and bindings, resolves the effective rule
// of a rack (spec §4.4), processes events into executions (§4.5) and runs
// the executions (§4.6).
type EventRules struct {
	pool    *pgxpool.Pool
	q       *dbsqlc.Queries
	inv     *inventory.Service
	tasks   *Tasks
	enqueue ExecutionEnqueuer
	alerts  bool
	logger  *slog.Logger
}

// EventRulesConfig holds what EventRules needs. Tasks and Enqueue may be
// nil for a store that processes no events (tests of the rule methods).
type EventRulesConfig struct {
	Pool    *pgxpool.Pool
	Inv     *inventory.Service
	Tasks   *Tasks
	Enqueue ExecutionEnqueuer
	// AlertSender says an alert sender is configured; without one,
	// send_alert actions are refused at rule creation (as upstream's
	// standard service).
	AlertSender bool
	Logger      *slog.Logger
}

// NewEventRules returns the event-rule store and processor.
func NewEventRules(cfg EventRulesConfig) *EventRules {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &EventRules{
		pool: cfg.Pool, q: dbsqlc.New(), inv: cfg.Inv, tasks: cfg.Tasks, enqueue: cfg.Enqueue,
		alerts: cfg.AlertSender, logger: logger,
	}
}

// SetEnqueue installs the execution enqueuer once the River client exists.
func (s *EventRules) SetEnqueue(e ExecutionEnqueuer) { s.enqueue = e }

func eventRuleFromRow(row dbsqlc.EventRule) (EventRule, error) {
	var p eventPolicy
	if err := json.Unmarshal(row.Policy, &p); err != nil {
		return EventRule{}, fmt.Errorf("decode event rule %s policy: %w", row.ID, err)
	}
	return EventRule{
		ID: row.ID, Name: row.Name, Description: row.Description, Enabled: row.Enabled, EventType: row.EventType,
		Actions: p.Actions, CreatedBy: row.CreatedBy, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
	}, nil
}

func encodePolicy(actions []EventAction) []byte {
	b, _ := json.Marshal(eventPolicy{Version: eventPolicyVersion, Actions: actions})
	return b
}

// Create validates in and stores it as a disabled rule.
func (s *EventRules) Create(ctx context.Context, tx pgx.Tx, in EventRuleInput) (EventRule, error) {
	in.Name = trimName(in.Name)
	if err := validateRuleName("name", in.Name); err != nil {
		return EventRule{}, err
	}
	if err := validateText("description", in.Description); err != nil {
		return EventRule{}, err
	}
	if err := ValidateEventType("event_type", in.EventType); err != nil {
		return EventRule{}, err
	}
	if err := ValidateEventActions("actions", in.Actions, s.alerts); err != nil {
		return EventRule{}, err
	}
	row, err := s.q.EventRuleInsert(ctx, tx, dbsqlc.EventRuleInsertParams{
		ID: uuid.New(), Name: in.Name, Description: in.Description, EventType: in.EventType,
		Policy: encodePolicy(in.Actions), CreatedBy: in.CreatedBy,
	})
	if err != nil {
		return EventRule{}, fmt.Errorf("insert event rule: %w", err)
	}
	return eventRuleFromRow(row)
}

// Get returns the persisted rule with id, else the built-in one, else
// ErrEventRuleNotFound.
func (s *EventRules) Get(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (EventRule, error) {
	row, err := s.q.EventRuleGetByID(ctx, dbtx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		if b := builtInByID(id); b != nil {
			return *b, nil
		}
		return EventRule{}, fmt.Errorf("%w: %s", ErrEventRuleNotFound, id)
	} else if err != nil {
		return EventRule{}, fmt.Errorf("get event rule: %w", err)
	}
	return eventRuleFromRow(row)
}

// persisted locks and returns the persisted rule id for a change: a
// built-in's ID is ErrBuiltInEventRule, an unknown one ErrEventRuleNotFound.
func (s *EventRules) persisted(ctx context.Context, tx pgx.Tx, id uuid.UUID) (EventRule, error) {
	if builtInByID(id) != nil {
		return EventRule{}, fmt.Errorf("%w: rule %s is built in", ErrBuiltInEventRule, id)
	}
	row, err := s.q.EventRuleGetByIDForUpdate(ctx, tx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return EventRule{}, fmt.Errorf("%w: %s", ErrEventRuleNotFound, id)
	} else if err != nil {
		return EventRule{}, fmt.Errorf("get event rule: %w", err)
	}
	return eventRuleFromRow(row)
}

// EventRuleFilter selects rules for List. Limit 0 means 100.
type EventRuleFilter struct {
	EventType *string
	Enabled   *bool
	Offset    int
	Limit     int
}

// List returns one page of rules, persisted ones first then built-ins,
// each by ascending ID, with the filters applied before paging, and the
// total number of matching rules.
func (s *EventRules) List(ctx context.Context, dbtx db.DBTX, f EventRuleFilter) ([]EventRule, int64, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.EventType != nil {
		if err := ValidateEventType("event_type", *f.EventType); err != nil {
			return nil, 0, err
		}
	}
	persisted, err := s.q.EventRuleCount(ctx, dbtx, dbsqlc.EventRuleCountParams{EventType: f.EventType, Enabled: f.Enabled})
	if err != nil {
		return nil, 0, fmt.Errorf("count event rules: %w", err)
	}
	var builtIns []EventRule
	for _, b := range BuiltInEventRules() {
		if (f.EventType == nil || *f.EventType == b.EventType) && (f.Enabled == nil || *f.Enabled == b.Enabled) {
			builtIns = append(builtIns, b)
		}
	}
	total := persisted + int64(len(builtIns))
	var out []EventRule
	if int64(f.Offset) < persisted {
		rows, err := s.q.EventRuleList(ctx, dbtx, dbsqlc.EventRuleListParams{
			EventType: f.EventType, Enabled: f.Enabled, RowOffset: int32(f.Offset), RowLimit: int32(f.Limit),
		})
		if err != nil {
			return nil, 0, fmt.Errorf("list event rules: %w", err)
		}
		for _, row := range rows {
			r, err := eventRuleFromRow(row)
			if err != nil {
				return nil, 0, err
			}
			out = append(out, r)
		}
	}
	for i, b := range builtIns {
		pos := persisted + int64(i)
		if pos >= int64(f.Offset) && len(out) < f.Limit {
			out = append(out, b)
		}
	}
	return out, total, nil
}

// UpdateMetadata replaces a persisted rule's name and description.
func (s *EventRules) UpdateMetadata(ctx context.Context, tx pgx.Tx, id uuid.UUID, name, description string) (EventRule, error) {
	name = trimName(name)
	if err := validateRuleName("metadata.name", name); err != nil {
		return EventRule{}, err
	}
	if err := validateText("metadata.description", description); err != nil {
		return EventRule{}, err
	}
	if _, err := s.persisted(ctx, tx, id); err != nil {
		return EventRule{}, err
	}
	row, err := s.q.EventRuleUpdateMetadata(ctx, tx, dbsqlc.EventRuleUpdateMetadataParams{ID: id, Name: name, Description: description})
	if err != nil {
		return EventRule{}, fmt.Errorf("update event rule: %w", err)
	}
	return eventRuleFromRow(row)
}

// ReplaceActions replaces a persisted rule's action list. Events planned
// before keep the actions they were planned with.
func (s *EventRules) ReplaceActions(ctx context.Context, tx pgx.Tx, id uuid.UUID, actions []EventAction) (EventRule, error) {
	if err := ValidateEventActions("actions.actions", actions, s.alerts); err != nil {
		return EventRule{}, err
	}
	if _, err := s.persisted(ctx, tx, id); err != nil {
		return EventRule{}, err
	}
	row, err := s.q.EventRuleUpdatePolicy(ctx, tx, dbsqlc.EventRuleUpdatePolicyParams{ID: id, Policy: encodePolicy(actions)})
	if err != nil {
		return EventRule{}, fmt.Errorf("update event rule: %w", err)
	}
	return eventRuleFromRow(row)
}

// SetEnabled enables or disables a persisted rule. Enabling re-validates
// the stored definition (an alert sender removed since, a type no longer
// supported): an invalid one stays disabled.
func (s *EventRules) SetEnabled(ctx context.Context, tx pgx.Tx, id uuid.UUID, enabled bool) (EventRule, error) {
	r, err := s.persisted(ctx, tx, id)
	if err != nil {
		return EventRule{}, err
	}
	if enabled {
		if err := ValidateEventType("event_type", r.EventType); err != nil {
			return EventRule{}, fmt.Errorf("stored rule cannot be enabled: %w", err)
		}
		if err := ValidateEventActions("actions", r.Actions, s.alerts); err != nil {
			return EventRule{}, fmt.Errorf("stored rule cannot be enabled: %w", err)
		}
	}
	row, err := s.q.EventRuleSetEnabled(ctx, tx, dbsqlc.EventRuleSetEnabledParams{ID: id, Enabled: enabled})
	if err != nil {
		return EventRule{}, fmt.Errorf("set event rule enabled: %w", err)
	}
	return eventRuleFromRow(row)
}

// Delete deletes a persisted rule and its bindings (one statement: the
// bindings cascade). Stored events and executions are left as they are.
func (s *EventRules) Delete(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	if _, err := s.persisted(ctx, tx, id); err != nil {
		return err
	}
	if _, err := s.q.EventRuleDelete(ctx, tx, id); err != nil {
		return fmt.Errorf("delete event rule: %w", err)
	}
	return nil
}

func bindingFromRow(row dbsqlc.EventRuleBinding) EventRuleBinding {
	b := EventRuleBinding{ID: row.ID, RuleID: row.RuleID, EventType: row.EventType, Scope: Scope{Type: ScopeType(row.ScopeType)}, CreatedAt: row.CreatedAt}
	if row.ScopeID != nil {
		b.Scope.RackID = *row.ScopeID
	}
	return b
}

func scopeID(s Scope) *uuid.UUID {
	if s.Type != ScopeRack {
		return nil
	}
	id := s.RackID
	return &id
}

// Bind places persisted rule ruleID in the slot (its event type, scope).
// The rack of a rack scope must exist (ErrEventTargetNotFound); a taken
// slot, or a rule whose bindings are of the other scope type, is
// ErrEventRuleBindingConflict.
func (s *EventRules) Bind(ctx context.Context, tx pgx.Tx, ruleID uuid.UUID, scope Scope) (EventRuleBinding, error) {
	rule, err := s.persisted(ctx, tx, ruleID)
	if err != nil {
		return EventRuleBinding{}, err
	}
	if scope.Type == ScopeRack {
		if _, err := s.inv.Rack(ctx, tx, scope.RackID, false); errors.Is(err, inventory.ErrRackNotFound) {
			return EventRuleBinding{}, fmt.Errorf("%w: scope.id: rack %s", ErrEventTargetNotFound, scope.RackID)
		} else if err != nil {
			return EventRuleBinding{}, err
		}
	}
	existing, err := s.q.EventRuleBindingsOfRule(ctx, tx, ruleID)
	if err != nil {
		return EventRuleBinding{}, fmt.Errorf("bindings of rule: %w", err)
	}
	for _, b := range existing {
		if ScopeType(b.ScopeType) != scope.Type {
			return EventRuleBinding{}, fmt.Errorf("%w: rule %s is already bound at %s scope; a rule's bindings are all site or all rack", ErrEventRuleBindingConflict, ruleID, b.ScopeType)
		}
	}
	taken, err := s.q.EventRuleBindingGetSlot(ctx, tx, dbsqlc.EventRuleBindingGetSlotParams{EventType: rule.EventType, ScopeType: string(scope.Type), ScopeID: scopeID(scope)})
	if err == nil {
		return EventRuleBinding{}, fmt.Errorf("%w: the %s slot of %s is taken by rule %s", ErrEventRuleBindingConflict, scope, rule.EventType, taken.RuleID)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return EventRuleBinding{}, fmt.Errorf("get binding: %w", err)
	}
	row, err := s.q.EventRuleBindingInsert(ctx, tx, dbsqlc.EventRuleBindingInsertParams{RuleID: ruleID, EventType: rule.EventType, ScopeType: string(scope.Type), ScopeID: scopeID(scope)})
	if db.IsUniqueViolation(err, "") {
		return EventRuleBinding{}, fmt.Errorf("%w: the %s slot of %s was taken concurrently", ErrEventRuleBindingConflict, scope, rule.EventType)
	} else if err != nil {
		return EventRuleBinding{}, fmt.Errorf("insert binding: %w", err)
	}
	return bindingFromRow(row), nil
}

// Binding returns the binding in the slot (eventType, scope), or
// ErrEventRuleBindingNotFound.
func (s *EventRules) Binding(ctx context.Context, dbtx db.DBTX, eventType string, scope Scope) (EventRuleBinding, error) {
	if err := ValidateEventType("event_type", eventType); err != nil {
		return EventRuleBinding{}, err
	}
	row, err := s.q.EventRuleBindingGetSlot(ctx, dbtx, dbsqlc.EventRuleBindingGetSlotParams{EventType: eventType, ScopeType: string(scope.Type), ScopeID: scopeID(scope)})
	if errors.Is(err, pgx.ErrNoRows) {
		return EventRuleBinding{}, fmt.Errorf("%w: %s at %s", ErrEventRuleBindingNotFound, eventType, scope)
	} else if err != nil {
		return EventRuleBinding{}, fmt.Errorf("get binding: %w", err)
	}
	return bindingFromRow(row), nil
}

// Unbind clears the slot (eventType, scope): ErrEventRuleBindingNotFound
// when it is empty.
func (s *EventRules) Unbind(ctx context.Context, tx pgx.Tx, eventType string, scope Scope) error {
	if err := ValidateEventType("event_type", eventType); err != nil {
		return err
	}
	n, err := s.q.EventRuleBindingDeleteSlot(ctx, tx, dbsqlc.EventRuleBindingDeleteSlotParams{EventType: eventType, ScopeType: string(scope.Type), ScopeID: scopeID(scope)})
	if err != nil {
		return fmt.Errorf("delete binding: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s at %s", ErrEventRuleBindingNotFound, eventType, scope)
	}
	return nil
}

// Effective returns the rule in effect for eventType at rackID (uuid.Nil:
// a component with no rack): the enabled rule bound to the rack, else the
// enabled rule bound to the site, else the built-in (§4.4).
func (s *EventRules) Effective(ctx context.Context, dbtx db.DBTX, eventType string, rackID uuid.UUID) (EventRule, error) {
	row, err := s.q.EventRuleEffective(ctx, dbtx, dbsqlc.EventRuleEffectiveParams{EventType: eventType, RackID: rackID})
	if err == nil {
		return eventRuleFromRow(row)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return EventRule{}, fmt.Errorf("effective event rule: %w", err)
	}
	if b := builtInFor(eventType); b != nil {
		return *b, nil
	}
	return EventRule{}, fmt.Errorf("%w: no rule for event type %s", ErrEventRuleNotFound, eventType)
}

// EffectiveAt is Effective for a rack or a component (exactly one of the
// IDs set): a component counts as its rack. An unknown rack or component
// is ErrEventTargetNotFound.
func (s *EventRules) EffectiveAt(ctx context.Context, dbtx db.DBTX, eventType string, rackID, componentID uuid.UUID) (EventRule, error) {
	if err := ValidateEventType("event_type", eventType); err != nil {
		return EventRule{}, err
	}
	if componentID != uuid.Nil {
		c, err := s.inv.Component(ctx, dbtx, componentID)
		if errors.Is(err, inventory.ErrComponentNotFound) {
			return EventRule{}, fmt.Errorf("%w: component_id: component %s", ErrEventTargetNotFound, componentID)
		} else if err != nil {
			return EventRule{}, err
		}
		rackID = uuid.Nil
		if c.RackID != nil {
			rackID = *c.RackID
		}
	} else if _, err := s.inv.Rack(ctx, dbtx, rackID, false); errors.Is(err, inventory.ErrRackNotFound) {
		return EventRule{}, fmt.Errorf("%w: rack_id: rack %s", ErrEventTargetNotFound, rackID)
	} else if err != nil {
		return EventRule{}, err
	}
	return s.Effective(ctx, dbtx, eventType, rackID)
}
