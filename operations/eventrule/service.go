package eventrule

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
	"github.com/nicoflow/flow/operations"
	"github.com/nicoflow/flow/operations/eventrule/internal/dbsqlc"
)

// ExecutionEnqueuer inserts, through tx, the job that runs each of the
// event-rule executions ids (River's InsertManyTx in app).
type ExecutionEnqueuer func(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) error

// Service stores event rules and bindings, resolves the effective rule
// of a rack (spec §4.4), processes events into executions (§4.5) and runs
// the executions (§4.6).
type Service struct {
	pool    *pgxpool.Pool
	q       *dbsqlc.Queries
	inv     *inventory.Service
	tasks   *operations.Tasks
	enqueue ExecutionEnqueuer
	alerts  bool
	alert   AlertFunc
	logger  *slog.Logger
}

// Config holds what Service needs. Tasks and Enqueue may be nil for a
// store that processes no events and answers no leak handling (tests of
// the rule methods).
type Config struct {
	Pool    *pgxpool.Pool
	Inv     *inventory.Service
	Tasks   *operations.Tasks
	Enqueue ExecutionEnqueuer
	// AlertSender says an alert sender is configured; without one,
	// send_alert actions are refused at rule creation (as upstream's
	// standard service).
	AlertSender bool
	// Alert, when set, sends send_alert actions' alerts (and implies
	// AlertSender).
	Alert  AlertFunc
	Logger *slog.Logger
}

// Alert is what a send_alert execution raises: its event (type, source
// key, summary, what and where) and the action (rule, name, severity,
// message).
type Alert struct {
	ExecutionID uuid.UUID
	EventID     uuid.UUID
	EventType   string
	// SourceKey is the event's source key (a leak occurrence's key): the
	// alert resolves when what it names ends.
	SourceKey     string
	Summary       string
	RackID        uuid.UUID
	ResourceKind  string
	ResourceID    uuid.UUID
	ComponentType string
	RuleID        uuid.UUID
	ActionName    string
	Severity      Severity
	Message       string
}

// AlertFunc raises an alert inside the execution's transaction; it must
// not do network I/O (a notifier's outbox sends it).
type AlertFunc func(ctx context.Context, tx pgx.Tx, a Alert) error

// NewService returns the event-rule store and processor.
func NewService(cfg Config) *Service {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Service{
		pool: cfg.Pool, q: dbsqlc.New(), inv: cfg.Inv, tasks: cfg.Tasks, enqueue: cfg.Enqueue,
		alerts: cfg.AlertSender || cfg.Alert != nil, alert: cfg.Alert, logger: logger,
	}
}

// SetEnqueue installs the execution enqueuer once the River client exists.
func (s *Service) SetEnqueue(e ExecutionEnqueuer) { s.enqueue = e }

func eventRuleFromRow(row dbsqlc.EventRule) (Rule, error) {
	var p eventPolicy
	if err := json.Unmarshal(row.Policy, &p); err != nil {
		return Rule{}, fmt.Errorf("decode event rule %s policy: %w", row.ID, err)
	}
	return Rule{
		ID: row.ID, Name: row.Name, Description: row.Description, Enabled: row.Enabled, EventType: row.EventType,
		Actions: p.Actions, CreatedBy: row.CreatedBy, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
	}, nil
}

func encodePolicy(actions []Action) []byte {
	b, _ := json.Marshal(eventPolicy{Version: eventPolicyVersion, Actions: actions})
	return b
}

// Create validates in and stores it as a disabled rule.
func (s *Service) Create(ctx context.Context, tx pgx.Tx, in RuleInput) (Rule, error) {
	in.Name = trimName(in.Name)
	if err := validateRuleName("name", in.Name); err != nil {
		return Rule{}, err
	}
	if err := validateText("description", in.Description); err != nil {
		return Rule{}, err
	}
	if err := ValidateEventType("event_type", in.EventType); err != nil {
		return Rule{}, err
	}
	if err := ValidateActions("actions", in.Actions, s.alerts); err != nil {
		return Rule{}, err
	}
	row, err := s.q.EventRuleInsert(ctx, tx, dbsqlc.EventRuleInsertParams{
		ID: uuid.New(), Name: in.Name, Description: in.Description, EventType: in.EventType,
		Policy: encodePolicy(in.Actions), CreatedBy: in.CreatedBy,
	})
	if err != nil {
		return Rule{}, fmt.Errorf("insert event rule: %w", err)
	}
	return eventRuleFromRow(row)
}

// Get returns the persisted rule with id, else the built-in one, else
// ErrRuleNotFound.
func (s *Service) Get(ctx context.Context, dbtx db.DBTX, id uuid.UUID) (Rule, error) {
	row, err := s.q.EventRuleGetByID(ctx, dbtx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		if b := s.builtInByID(id); b != nil {
			return *b, nil
		}
		return Rule{}, fmt.Errorf("%w: %s", ErrRuleNotFound, id)
	} else if err != nil {
		return Rule{}, fmt.Errorf("get event rule: %w", err)
	}
	return eventRuleFromRow(row)
}

// persisted locks and returns the persisted rule id for a change: a
// built-in's ID is ErrBuiltInRule, an unknown one ErrRuleNotFound.
func (s *Service) persisted(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Rule, error) {
	if s.builtInByID(id) != nil {
		return Rule{}, fmt.Errorf("%w: rule %s is built in", ErrBuiltInRule, id)
	}
	row, err := s.q.EventRuleGetByIDForUpdate(ctx, tx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Rule{}, fmt.Errorf("%w: %s", ErrRuleNotFound, id)
	} else if err != nil {
		return Rule{}, fmt.Errorf("get event rule: %w", err)
	}
	return eventRuleFromRow(row)
}

// RuleFilter selects rules for List. Limit 0 means 100.
type RuleFilter struct {
	EventType *string
	Enabled   *bool
	Offset    int
	Limit     int
}

// List returns one page of rules, persisted ones first then built-ins,
// each by ascending ID, with the filters applied before paging, and the
// total number of matching rules.
func (s *Service) List(ctx context.Context, dbtx db.DBTX, f RuleFilter) ([]Rule, int64, error) {
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
	var builtIns []Rule
	for _, b := range s.builtIns() {
		if (f.EventType == nil || *f.EventType == b.EventType) && (f.Enabled == nil || *f.Enabled == b.Enabled) {
			builtIns = append(builtIns, b)
		}
	}
	total := persisted + int64(len(builtIns))
	var out []Rule
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
func (s *Service) UpdateMetadata(ctx context.Context, tx pgx.Tx, id uuid.UUID, name, description string) (Rule, error) {
	name = trimName(name)
	if err := validateRuleName("metadata.name", name); err != nil {
		return Rule{}, err
	}
	if err := validateText("metadata.description", description); err != nil {
		return Rule{}, err
	}
	if _, err := s.persisted(ctx, tx, id); err != nil {
		return Rule{}, err
	}
	row, err := s.q.EventRuleUpdateMetadata(ctx, tx, dbsqlc.EventRuleUpdateMetadataParams{ID: id, Name: name, Description: description})
	if err != nil {
		return Rule{}, fmt.Errorf("update event rule: %w", err)
	}
	return eventRuleFromRow(row)
}

// ReplaceActions replaces a persisted rule's action list. Events planned
// before keep the actions they were planned with.
func (s *Service) ReplaceActions(ctx context.Context, tx pgx.Tx, id uuid.UUID, actions []Action) (Rule, error) {
	if err := ValidateActions("actions.actions", actions, s.alerts); err != nil {
		return Rule{}, err
	}
	if _, err := s.persisted(ctx, tx, id); err != nil {
		return Rule{}, err
	}
	row, err := s.q.EventRuleUpdatePolicy(ctx, tx, dbsqlc.EventRuleUpdatePolicyParams{ID: id, Policy: encodePolicy(actions)})
	if err != nil {
		return Rule{}, fmt.Errorf("update event rule: %w", err)
	}
	return eventRuleFromRow(row)
}

// SetEnabled enables or disables a persisted rule. Enabling re-validates
// the stored definition (an alert sender removed since, a type no longer
// supported): an invalid one stays disabled.
func (s *Service) SetEnabled(ctx context.Context, tx pgx.Tx, id uuid.UUID, enabled bool) (Rule, error) {
	r, err := s.persisted(ctx, tx, id)
	if err != nil {
		return Rule{}, err
	}
	if enabled {
		if err := ValidateEventType("event_type", r.EventType); err != nil {
			return Rule{}, fmt.Errorf("stored rule cannot be enabled: %w", err)
		}
		if err := ValidateActions("actions", r.Actions, s.alerts); err != nil {
			return Rule{}, fmt.Errorf("stored rule cannot be enabled: %w", err)
		}
	}
	row, err := s.q.EventRuleSetEnabled(ctx, tx, dbsqlc.EventRuleSetEnabledParams{ID: id, Enabled: enabled})
	if err != nil {
		return Rule{}, fmt.Errorf("set event rule enabled: %w", err)
	}
	return eventRuleFromRow(row)
}

// Delete deletes a persisted rule and its bindings (one statement: the
// bindings cascade). Stored events and executions are left as they are.
func (s *Service) Delete(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	if _, err := s.persisted(ctx, tx, id); err != nil {
		return err
	}
	if _, err := s.q.EventRuleDelete(ctx, tx, id); err != nil {
		return fmt.Errorf("delete event rule: %w", err)
	}
	return nil
}

func bindingFromRow(row dbsqlc.EventRuleBinding) Binding {
	b := Binding{ID: row.ID, RuleID: row.RuleID, EventType: row.EventType, Scope: Scope{Type: ScopeType(row.ScopeType)}, CreatedAt: row.CreatedAt}
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
// The rack of a rack scope must exist (ErrTargetNotFound); a taken
// slot, or a rule whose bindings are of the other scope type, is
// ErrBindingConflict.
func (s *Service) Bind(ctx context.Context, tx pgx.Tx, ruleID uuid.UUID, scope Scope) (Binding, error) {
	rule, err := s.persisted(ctx, tx, ruleID)
	if err != nil {
		return Binding{}, err
	}
	if scope.Type == ScopeRack {
		if _, err := s.inv.Rack(ctx, tx, scope.RackID, false); errors.Is(err, inventory.ErrRackNotFound) {
			return Binding{}, fmt.Errorf("%w: scope.id: rack %s", ErrTargetNotFound, scope.RackID)
		} else if err != nil {
			return Binding{}, err
		}
	}
	existing, err := s.q.EventRuleBindingsOfRule(ctx, tx, ruleID)
	if err != nil {
		return Binding{}, fmt.Errorf("bindings of rule: %w", err)
	}
	for _, b := range existing {
		if ScopeType(b.ScopeType) != scope.Type {
			return Binding{}, fmt.Errorf("%w: rule %s is already bound at %s scope; a rule's bindings are all site or all rack", ErrBindingConflict, ruleID, b.ScopeType)
		}
	}
	taken, err := s.q.EventRuleBindingGetSlot(ctx, tx, dbsqlc.EventRuleBindingGetSlotParams{EventType: rule.EventType, ScopeType: string(scope.Type), ScopeID: scopeID(scope)})
	if err == nil {
		return Binding{}, fmt.Errorf("%w: the %s slot of %s is taken by rule %s", ErrBindingConflict, scope, rule.EventType, taken.RuleID)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return Binding{}, fmt.Errorf("get binding: %w", err)
	}
	row, err := s.q.EventRuleBindingInsert(ctx, tx, dbsqlc.EventRuleBindingInsertParams{RuleID: ruleID, EventType: rule.EventType, ScopeType: string(scope.Type), ScopeID: scopeID(scope)})
	if db.IsUniqueViolation(err, "") {
		return Binding{}, fmt.Errorf("%w: the %s slot of %s was taken concurrently", ErrBindingConflict, scope, rule.EventType)
	} else if err != nil {
		return Binding{}, fmt.Errorf("insert binding: %w", err)
	}
	return bindingFromRow(row), nil
}

// Binding returns the binding in the slot (eventType, scope), or
// ErrBindingNotFound.
func (s *Service) Binding(ctx context.Context, dbtx db.DBTX, eventType string, scope Scope) (Binding, error) {
	if err := ValidateEventType("event_type", eventType); err != nil {
		return Binding{}, err
	}
	row, err := s.q.EventRuleBindingGetSlot(ctx, dbtx, dbsqlc.EventRuleBindingGetSlotParams{EventType: eventType, ScopeType: string(scope.Type), ScopeID: scopeID(scope)})
	if errors.Is(err, pgx.ErrNoRows) {
		return Binding{}, fmt.Errorf("%w: %s at %s", ErrBindingNotFound, eventType, scope)
	} else if err != nil {
		return Binding{}, fmt.Errorf("get binding: %w", err)
	}
	return bindingFromRow(row), nil
}

// Unbind clears the slot (eventType, scope): ErrBindingNotFound
// when it is empty.
func (s *Service) Unbind(ctx context.Context, tx pgx.Tx, eventType string, scope Scope) error {
	if err := ValidateEventType("event_type", eventType); err != nil {
		return err
	}
	n, err := s.q.EventRuleBindingDeleteSlot(ctx, tx, dbsqlc.EventRuleBindingDeleteSlotParams{EventType: eventType, ScopeType: string(scope.Type), ScopeID: scopeID(scope)})
	if err != nil {
		return fmt.Errorf("delete binding: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s at %s", ErrBindingNotFound, eventType, scope)
	}
	return nil
}

// Effective returns the rule in effect for eventType at rackID (uuid.Nil:
// a component with no rack): the enabled rule bound to the rack, else the
// enabled rule bound to the site, else the built-in (§4.4).
func (s *Service) Effective(ctx context.Context, dbtx db.DBTX, eventType string, rackID uuid.UUID) (Rule, error) {
	row, err := s.q.EventRuleEffective(ctx, dbtx, dbsqlc.EventRuleEffectiveParams{EventType: eventType, RackID: rackID})
	if err == nil {
		return eventRuleFromRow(row)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return Rule{}, fmt.Errorf("effective event rule: %w", err)
	}
	if b := builtInFor(eventType); b != nil {
		return *s.builtInByID(b.ID), nil
	}
	return Rule{}, fmt.Errorf("%w: no rule for event type %s", ErrRuleNotFound, eventType)
}

// EffectiveAt is Effective for a rack or a component (exactly one of the
// IDs set): a component counts as its rack. An unknown rack or component
// is ErrTargetNotFound.
func (s *Service) EffectiveAt(ctx context.Context, dbtx db.DBTX, eventType string, rackID, componentID uuid.UUID) (Rule, error) {
	if err := ValidateEventType("event_type", eventType); err != nil {
		return Rule{}, err
	}
	if componentID != uuid.Nil {
		c, err := s.inv.Component(ctx, dbtx, componentID)
		if errors.Is(err, inventory.ErrComponentNotFound) {
			return Rule{}, fmt.Errorf("%w: component_id: component %s", ErrTargetNotFound, componentID)
		} else if err != nil {
			return Rule{}, err
		}
		rackID = uuid.Nil
		if c.RackID != nil {
			rackID = *c.RackID
		}
	} else if _, err := s.inv.Rack(ctx, dbtx, rackID, false); errors.Is(err, inventory.ErrRackNotFound) {
		return Rule{}, fmt.Errorf("%w: rack_id: rack %s", ErrTargetNotFound, rackID)
	} else if err != nil {
		return Rule{}, err
	}
	return s.Effective(ctx, dbtx, eventType, rackID)
}

// BuiltInAlertAction is the action the built-in leakage rule gains when
// an alert sender is configured: a critical alert, resolved when the leak
// clears.
const BuiltInAlertAction = "alert"

// builtIns returns the built-in rules as this service runs them: with an
// alert sender (Config.Alert), the leakage rule also sends a critical
// alert after its power-off.
func (s *Service) builtIns() []Rule {
	out := BuiltInRules()
	if s.alert == nil {
		return out
	}
	for i := range out {
		if out[i].ID == BuiltInLeakRuleID {
			out[i].Actions = append(out[i].Actions, Action{Name: BuiltInAlertAction,
				SendAlert: &SendAlertSpec{Severity: SeverityCritical, Message: "coolant leak: the affected components are being powered off"}})
		}
	}
	return out
}

func (s *Service) builtInByID(id uuid.UUID) *Rule {
	for _, r := range s.builtIns() {
		if r.ID == id {
			return &r
		}
	}
	return nil
}
