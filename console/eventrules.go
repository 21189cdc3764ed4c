package console

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
	flowv1 "github.com/nicoflow/flow/proto/gen/v1"
)

// ---- Event rules, their bindings, the open leaks and their handling ----

// openLeak is one open leak as the event-rules page says it: where, since
// when, which rule answers it and how far its handling has got, and an
// admin's override if any.
type openLeak struct {
	ComponentID, Component, Type string
	RackID, RackName, Where      string
	Since                        time.Time
	// Rule is the effective rule's name for the leak's rack; Handling the
	// component's leak handling status in words.
	Rule, Handling string
	// Override: who let power-on through for this leak, when and why.
	OverrideBy, OverrideReason string
	OverrideAt                 time.Time
}

// binding is one event-rule binding: a rule bound to the site or a rack.
type binding struct {
	EventType, Scope, RackID, RackName, RuleID, RuleName string
}

type eventRulesData struct {
	Rules    []*flowv1.EventRule
	Bindings []binding
	Leaks    []openLeak
	// Default is the rule that answers where no binding applies.
	Default string
	// Admin: the user may override leaks (the API's admin role).
	Admin bool
}

func (c *Console) eventRules(r *http.Request) (view, error) {
	ctx := apiCtx(r)
	res, err := c.flow.ListEventRules(ctx, (&flowv1.ListEventRulesRequest{Pagination: &flowv1.Pagination{Limit: 200}}))
	if err != nil {
		return view{}, err
	}
	d := eventRulesData{Rules: res.GetRules(), Admin: userFrom(r.Context()).Role == "admin"}
	for _, rl := range d.Rules {
		if rl.GetReadOnly() {
			d.Default = rl.GetName()
		}
	}
	rows, err := c.pool.Query(r.Context(), `SELECT b.event_type, b.scope_type, coalesce(b.scope_id::text, ''), coalesce(r.name, ''), e.id::text, e.name
		FROM event_rule_binding b JOIN event_rule e ON e.id = b.rule_id LEFT JOIN rack r ON r.id = b.scope_id
		ORDER BY b.event_type, b.scope_type DESC, r.name`)
	if err != nil {
		return view{}, fmt.Errorf("read event-rule bindings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var b binding
		if err := rows.Scan(&b.EventType, &b.Scope, &b.RackID, &b.RackName, &b.RuleID, &b.RuleName); err != nil {
			return view{}, fmt.Errorf("read event-rule bindings: %w", err)
		}
		d.Bindings = append(d.Bindings, b)
	}
	if err := rows.Err(); err != nil {
		return view{}, fmt.Errorf("read event-rule bindings: %w", err)
	}
	if d.Leaks, err = c.openLeaks(r); err != nil {
		return view{}, err
	}
	// Tasks too: a leak's handling is its forced power-off's progress.
	return view{"eventrules", "Event rules and leaks", "events", []string{"rules", "leaks", "tasks"}, d}, nil
}

// openLeaks reads the open leaks (newest first) with their overrides,
// then asks the API for each one's handling status and effective rule.
func (c *Console) openLeaks(r *http.Request) ([]openLeak, error) {
	rows, err := c.pool.Query(r.Context(), `SELECT c.id::text, c.name, c.type, coalesce(r.id::text, ''), coalesce(r.name, ''),
		btrim(coalesce(r.location_room, '') || ' ' || coalesce(r.location_position, '')),
		coalesce(lo.started_at, cl.detected_at, cl.updated_at), coalesce(cl.override_by, ''), coalesce(cl.override_reason, ''), cl.override_at
		FROM component_leak cl
		JOIN component c ON c.id = cl.component_id
		LEFT JOIN rack r ON r.id = c.rack_id
		LEFT JOIN leak_occurrence lo ON lo.external_id = c.external_id AND lo.component_kind = lower(c.type)
		WHERE cl.status = 'detected' AND c.deleted_at IS NULL
		ORDER BY 7 DESC, 2 LIMIT 500`)
	if err != nil {
		return nil, fmt.Errorf("read leaks: %w", err)
	}
	defer rows.Close()
	var out []openLeak
	for rows.Next() {
		var l openLeak
		var at *time.Time
		if err := rows.Scan(&l.ComponentID, &l.Component, &l.Type, &l.RackID, &l.RackName, &l.Where, &l.Since, &l.OverrideBy, &l.OverrideReason, &at); err != nil {
			return nil, fmt.Errorf("read leaks: %w", err)
		}
		if at != nil {
			l.OverrideAt = *at
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read leaks: %w", err)
	}
	if len(out) == 0 {
		return out, nil
	}
	ctx := apiCtx(r)
	var ids []*flowv1.ComponentTarget
	for _, l := range out {
		ids = append(ids, &flowv1.ComponentTarget{Identifier: &flowv1.ComponentTarget_Id{Id: &flowv1.UUID{Id: l.ComponentID}}})
	}
	comps, err := c.flow.GetComponents(ctx, &flowv1.GetComponentsRequest{
		TargetSpec: &flowv1.OperationTargetSpec{Targets: &flowv1.OperationTargetSpec_Components{Components: &flowv1.ComponentTargets{Targets: ids}}},
		Pagination: &flowv1.Pagination{Limit: int32(len(ids))},
	})
	if err != nil {
		return nil, err
	}
	handling := map[string]flowv1.LeakHandlingStatus{}
	for _, cm := range comps.GetComponents() {
		handling[cm.GetInfo().GetId().GetId()] = cm.GetLeakHandlingStatus()
	}
	rules := map[string]string{} // by rack
	for i := range out {
		l := &out[i]
		l.Handling = handlingWords(handling[l.ComponentID])
		if l.RackID == "" {
			continue
		}
		if name, ok := rules[l.RackID]; ok {
			l.Rule = name
			continue
		}
		rl, err := c.flow.GetEffectiveEventRule(ctx, &flowv1.GetEffectiveEventRuleRequest{EventType: "hardware.leak.detected",
			Target: &flowv1.GetEffectiveEventRuleRequest_RackId{RackId: &flowv1.UUID{Id: l.RackID}}})
		if err != nil {
			return nil, err
		}
		rules[l.RackID], l.Rule = rl.GetName(), rl.GetName()
	}
	return out, nil
}

// handlingWords says a leak's handling status.
func handlingWords(s flowv1.LeakHandlingStatus) string {
	switch s {
	case flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_NONE:
		return "not handled: no leak-response task covers it"
	case flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_SHUTTING_DOWN:
		return "shutting down: the forced power-off is queued or running"
	case flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_DOWN:
		return "down: the forced power-off completed"
	case flowv1.LeakHandlingStatus_LEAK_HANDLING_STATUS_FAILED:
		return "failed: the leak-response task failed or was cancelled"
	}
	return "unknown"
}

// overrideLeak is an admin's override of one open leak, with a reason:
// the API's OverrideLeak (admin only, audited).
func (c *Console) overrideLeak(r *http.Request) (string, string, error) {
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" {
		return "", "", connect.NewError(connect.CodeInvalidArgument, errors.New("reason: say why powering the component on is safe (required)"))
	}
	res, err := c.admin.OverrideLeak(apiCtx(r), &adminv1.OverrideLeakRequest{ComponentId: r.PathValue("id"), Reason: reason})
	if err != nil {
		return "", "", err
	}
	var name string
	if err := c.pool.QueryRow(r.Context(), `SELECT name FROM component WHERE id::text = $1`, res.GetComponentId()).Scan(&name); err != nil {
		name = res.GetComponentId()
	}
	return Prefix + "events-rules", fmt.Sprintf("leak on %s overridden by %s: power-on is let through for this leak", name, res.GetOverriddenBy()), nil
}
