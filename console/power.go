package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// Power feeds, coolant loops, power budgets and the leak tiers in the
// console (issue 45; docs/operations.md "Feeds, loops and power budgets",
// docs/event-rules.md "Leak tiers"): a rack's feed and loop, its isolation
// and its cooling hold on the rack page, and the power-budget page.

// powerTopics refresh the power-budget page: budgets, holds and waits
// ("power"), the tasks that take and leave them.
var powerTopics = []string{"power", "tasks", "racks"}

// rackPlacement is what the rack page says of the rack's feed, loop and
// leak tiers.
type rackPlacement struct {
	// Feed and Loop are the rack's ("" not known); Budget is its feed's
	// budget and use (nil: the feed has none).
	Feed, Loop string
	Budget     *adminv1.PowerBudget
	// Isolation is the rack's open isolation, else its last cleared one
	// (nil: never isolated).
	Isolation *rackIsolation
	// Hold names the rack of the rack's coolant loop whose open leak holds
	// its disruptive work (the cooling hold; "" none, or the hold is off).
	Hold string
	// Refused says why the API refuses to power the rack on because of an
	// isolation, its own or its loop's ("" it does not).
	Refused string
}

// rackIsolation is one isolation of a rack, as the rack page shows it.
type rackIsolation struct {
	ID, Tier, Reason                     string
	RequestedAt                          time.Time
	Sends                                int
	LastSentAt, NextSendAt               *time.Time
	AcknowledgedAt                       *time.Time
	AcknowledgedBy, AckNote              string
	ClearedAt                            *time.Time
	ClearedBy, ClearReason, OverriddenBy string
}

// State is the isolation's state in words: pending acknowledgement,
// acknowledged or cleared.
func (i *rackIsolation) State() string {
	switch {
	case i.ClearedAt != nil:
		return "cleared"
	case i.AcknowledgedAt != nil:
		return "acknowledged"
	}
	return "pending acknowledgement"
}

// rackIsolationQuery reads a rack's open isolation, else its newest
// cleared one, with the admin who overrode it for the rack, if any.
const rackIsolationQuery = `
SELECT i.id::text, i.tier, i.reason, i.requested_at, i.sends, i.last_sent_at, i.next_send_at,
  i.acknowledged_at, coalesce(i.acknowledged_by, ''), coalesce(i.ack_note, ''),
  i.cleared_at, coalesce(i.cleared_by, ''), coalesce(i.clear_reason, ''),
  coalesce((SELECT o.override_by FROM rack_isolation_override o WHERE o.rack_id = i.rack_id AND o.isolation_id = i.id), '')
FROM rack_isolation i WHERE i.rack_id = $1
ORDER BY i.cleared_at IS NULL DESC, i.requested_at DESC LIMIT 1`

// loopRefusalQuery names a rack of loop $2, other than rack $1, whose open
// isolation no admin overrode for rack $1: powering rack $1 on is refused
// while there is one.
const loopRefusalQuery = `
SELECT r.name, i.tier FROM rack_isolation i JOIN rack r ON r.id = i.rack_id
WHERE i.cleared_at IS NULL AND r.coolant_loop = $2 AND r.deleted_at IS NULL AND r.id <> $1
  AND NOT EXISTS (SELECT 1 FROM rack_isolation_override o WHERE o.rack_id = $1 AND o.isolation_id = i.id)
ORDER BY i.requested_at, i.id LIMIT 1`

// coolingHoldQuery names the rack of loop $1 whose open leak holds the
// loop's disruptive work (operations/isolation's cooling hold): a rack
// with an open leak no admin overrode first, else one with an open
// isolation.
const coolingHoldQuery = `
SELECT r.name FROM rack r
WHERE r.coolant_loop = $1 AND r.deleted_at IS NULL AND (
  EXISTS (SELECT 1 FROM component c JOIN component_leak l ON l.component_id = c.id
          WHERE c.rack_id = r.id AND c.deleted_at IS NULL AND l.status = 'detected' AND l.override_at IS NULL)
  OR EXISTS (SELECT 1 FROM rack_isolation i WHERE i.rack_id = r.id AND i.cleared_at IS NULL))
ORDER BY EXISTS (SELECT 1 FROM component c JOIN component_leak l ON l.component_id = c.id
          WHERE c.rack_id = r.id AND c.deleted_at IS NULL AND l.status = 'detected' AND l.override_at IS NULL) DESC, r.name
LIMIT 1`

// rackPlacement reads rack id's feed, loop, feed budget, isolation and
// cooling hold.
func (c *Console) rackPlacement(r *http.Request, id string) (rackPlacement, error) {
	ctx := r.Context()
	var p rackPlacement
	if err := c.pool.QueryRow(ctx, `SELECT coalesce(power_feed, ''), coalesce(coolant_loop, '') FROM rack WHERE id = $1`, id).Scan(&p.Feed, &p.Loop); err != nil {
		return p, fmt.Errorf("rack %s: placement: %w", id, err)
	}
	if p.Feed != "" {
		res, err := c.admin.ListPowerBudgets(apiCtx(r), &adminv1.ListPowerBudgetsRequest{})
		if err != nil {
			return p, err
		}
		for _, b := range res.GetBudgets() {
			if b.GetFeed() == p.Feed && b.GetHasBudget() {
				p.Budget = b
			}
		}
	}
	iso, err := c.readRackIsolation(ctx, id)
	if err != nil {
		return p, err
	}
	p.Isolation = iso
	if iso != nil && iso.ClearedAt == nil && iso.OverriddenBy == "" {
		p.Refused = fmt.Sprintf("the rack is isolated (%s leak tier): an operator clears it, or an admin overrides it", iso.Tier)
	}
	if p.Loop == "" {
		return p, nil
	}
	if p.Refused == "" {
		var rack, tier string
		err := c.pool.QueryRow(ctx, loopRefusalQuery, id, p.Loop).Scan(&rack, &tier)
		switch {
		case err == nil:
			p.Refused = fmt.Sprintf("rack %s on coolant loop %s is isolated (%s leak tier) until it is cleared", rack, p.Loop, tier)
		case !errors.Is(err, pgx.ErrNoRows):
			return p, fmt.Errorf("rack %s: loop isolations: %w", id, err)
		}
	}
	if c.opts.NoCoolingHold {
		return p, nil
	}
	err = c.pool.QueryRow(ctx, coolingHoldQuery, p.Loop).Scan(&p.Hold)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("rack %s: cooling hold: %w", id, err)
	}
	return p, nil
}

func (c *Console) readRackIsolation(ctx context.Context, id string) (*rackIsolation, error) {
	var i rackIsolation
	err := c.pool.QueryRow(ctx, rackIsolationQuery, id).Scan(&i.ID, &i.Tier, &i.Reason, &i.RequestedAt, &i.Sends, &i.LastSentAt, &i.NextSendAt,
		&i.AcknowledgedAt, &i.AcknowledgedBy, &i.AckNote, &i.ClearedAt, &i.ClearedBy, &i.ClearReason, &i.OverriddenBy)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("rack %s: isolation: %w", id, err)
	}
	return &i, nil
}

// powerData is the power-budget page: every feed with its budget and use,
// and the steps waiting for it.
type powerData struct {
	Feeds []powerFeed
	// Unplaced counts the racks on no feed.
	Unplaced int
}

// powerFeed is one feed of the power-budget page.
type powerFeed struct {
	*adminv1.PowerBudget
	// Steps are the steps waiting for the feed's budget, first come
	// first: at most powerWaitersShown; More counts the rest.
	Steps []powerWaiter
	More  int
}

// powerWaiter is one step waiting for a feed's budget, and its task.
type powerWaiter struct {
	TaskID, Rack, RackID, Operation, Stage, Step string
	Since                                        time.Time
}

// powerWaitersShown bounds the steps listed per feed (a site-wide power-on
// under a small budget has thousands waiting: the page counts the rest).
const powerWaitersShown = 50

// powerWaitersQuery lists the running steps waiting for a feed's budget
// (engine_wait on its engine resources, power-feed/FEED/transitions and
// /kw; a step waiting for both is listed once), each with its task and
// rack, in the order they wait (first come, first admitted), at most $1
// per feed; the last column counts the feed's waiting steps.
const powerWaitersQuery = `
WITH w AS (
  SELECT substring(w.resource FROM '^power-feed/(.*)/(?:transitions|kw)$') AS feed, w.step_id, min(w.since) AS since
  FROM engine_wait w JOIN engine_step s ON s.id = w.step_id AND s.state = 'running'
  WHERE w.resource LIKE 'power-feed/%'
  GROUP BY 1, 2
), n AS (
  SELECT w.*, row_number() OVER (PARTITION BY w.feed ORDER BY w.since, w.step_id) AS k, count(*) OVER (PARTITION BY w.feed) AS total FROM w
)
SELECT n.feed, t.id::text, coalesce(r.name, ''), t.rack_id::text, t.operation_code, coalesce(s.spec->>'stage_name', ''), coalesce(s.spec->>'name', ''), n.since, n.total
FROM n JOIN engine_step s ON s.id = n.step_id JOIN task t ON t.run_id = s.run_id LEFT JOIN rack r ON r.id = t.rack_id
WHERE n.k <= $1 AND n.feed IS NOT NULL
ORDER BY n.feed, n.k`

// power serves the power-budget page: each feed's budget (max transitions,
// kW if set), the transitions and kW in use now (ListPowerBudgets, as the
// user), and the steps waiting for it, each linked to its task.
func (c *Console) power(r *http.Request) (view, error) {
	res, err := c.admin.ListPowerBudgets(apiCtx(r), &adminv1.ListPowerBudgetsRequest{})
	if err != nil {
		return view{}, err
	}
	d := powerData{}
	idx := map[string]int{}
	for _, b := range res.GetBudgets() {
		idx[b.GetFeed()] = len(d.Feeds)
		d.Feeds = append(d.Feeds, powerFeed{PowerBudget: b})
	}
	rows, err := c.pool.Query(r.Context(), powerWaitersQuery, powerWaitersShown)
	if err != nil {
		return view{}, fmt.Errorf("read power waits: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var feed string
		var w powerWaiter
		var total int64
		if err := rows.Scan(&feed, &w.TaskID, &w.Rack, &w.RackID, &w.Operation, &w.Stage, &w.Step, &w.Since, &total); err != nil {
			return view{}, fmt.Errorf("read power waits: %w", err)
		}
		i, ok := idx[feed]
		if !ok { // a budget deleted since: its waiters go on at once
			continue
		}
		f := &d.Feeds[i]
		f.Steps = append(f.Steps, w)
		f.More = int(total) - len(f.Steps)
	}
	if err := rows.Err(); err != nil {
		return view{}, fmt.Errorf("read power waits: %w", err)
	}
	if err := c.pool.QueryRow(r.Context(), `SELECT count(*) FROM rack WHERE deleted_at IS NULL AND power_feed IS NULL`).Scan(&d.Unplaced); err != nil {
		return view{}, fmt.Errorf("count racks on no feed: %w", err)
	}
	return view{"power", "Power budgets", "power", powerTopics, d}, nil
}

// feedAnchor is the power page's anchor of a feed's section: the feed's
// name with '.', ':', '/' and '_' spelt as _2e, _3a, _2f and _5f (one
// anchor per name, and one that needs no escaping in a URL).
func feedAnchor(feed string) string { return "feed-" + anchorEscaper.Replace(feed) }

var anchorEscaper = strings.NewReplacer("_", "_5f", ".", "_2e", ":", "_3a", "/", "_2f")
