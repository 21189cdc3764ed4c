package console

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
	"github.com/nicoflow/flow/operations/opstest"
	"github.com/nicoflow/flow/operations/powerbudget"
)

// place sets rack's feed and loop through the inventory's own
// SetRackPlacement (what the admin API and flow rack set call).
func (b *pagesBundle) place(t *testing.T, rack inventory.Rack, feed, loop string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.m.Pool, func(tx pgx.Tx) error {
		_, err := b.m.Inv.SetRackPlacement(ctx, tx, inventory.RackRef{ID: rack.ID}, inventory.Placement{PowerFeed: &feed, CoolantLoop: &loop})
		return err
	}))
}

func (b *pagesBundle) page(t *testing.T, user, path string) string {
	t.Helper()
	w := b.get(t, user, path)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	return w.Body.String()
}

// The floor map colours by feed and by loop: one colour per name, the
// same on every view (a hash of the name), a legend naming each with its
// count, the racks with none last; a placement changed through
// SetRackPlacement shows at the next fetch (the cached cells' key follows
// the inventory generation, which a rack's write moves); a selection too
// large to draw counts each feed per row.
func TestFloorByFeedAndLoop(t *testing.T) {
	t.Parallel()
	b := setupPages(t)
	r0, r1, r2, r10 := b.m.AddRack(t, 0), b.m.AddRack(t, 1), b.m.AddRack(t, 2), b.m.AddRack(t, 10)

	before := b.page(t, "victor", "/ui/floor?by=feed")
	has(t, before, `<option value="feed" selected>feed</option>`)
	has(t, before, `<option value="loop" >loop</option>`)
	has(t, before, `aria-label="demo-0000, row-00-pos-00: no feed"`)
	has(t, before, `<span class="swatch c-unknown" aria-hidden="true"></span>no feed (4 racks)`)

	b.place(t, r0, "hall-0/bw-a", "cdu-1")
	b.place(t, r1, "hall-0/bw-a", "cdu-2")
	b.place(t, r2, "hall-0/bw-b", "cdu-1")
	_ = r10 // on no feed, no loop
	bwA, _ := placementClass("feed", "hall-0/bw-a")
	bwB, _ := placementClass("feed", "hall-0/bw-b")
	cdu1, _ := placementClass("loop", "cdu-1")
	require.Regexp(t, `^pl-\d+$`, bwA)

	feed := b.page(t, "victor", "/ui/floor?by=feed")
	accessible(t, feed)
	has(t, feed, `<a class="rack `+bwA+`" href="/ui/racks/`+r0.ID.String()+`" data-rack="demo-0000" title="demo-0000 · row-00-pos-00 · feed hall-0/bw-a" aria-label="demo-0000, row-00-pos-00: feed hall-0/bw-a">`,
		"the placement set after the first read shows: the cells were read again")
	has(t, feed, `aria-label="demo-0002, row-00-pos-02: feed hall-0/bw-b"`)
	has(t, feed, `aria-label="demo-0010, row-01-pos-00: no feed"`)
	d := b.floorData(t, "/ui/floor?by=feed")
	require.Equal(t, []legendItem{
		{bwA, "hall-0/bw-a (2 racks)"}, {bwB, "hall-0/bw-b (1 rack)"}, {"c-unknown", "no feed (1 rack)"},
	}, d.Legend)

	loop := b.floorData(t, "/ui/floor?by=loop")
	require.Equal(t, legendItem{cdu1, "cdu-1 (2 racks)"}, loop.Legend[0])
	require.Equal(t, "loop cdu-1", loop.Rooms[0].Rows[0].Cells[2].Label)
	require.Equal(t, cdu1, loop.Rooms[0].Rows[0].Cells[2].Class)
	// The same name, the same colour, whatever else is on the map.
	narrow := b.floorData(t, "/ui/floor?by=feed&q=demo-0002")
	require.Equal(t, []legendItem{{bwB, "hall-0/bw-b (1 rack)"}}, narrow.Legend, "the legend counts the selection")
	require.Equal(t, bwB, narrow.Rooms[0].Rows[0].Cells[0].Class)

	// Too many to draw: each row counts its racks by feed.
	b.console.floorCells = 2
	sum := b.floorData(t, "/ui/floor?by=feed")
	require.Len(t, sum.Summary, 1)
	rows := sum.Summary[0].Rows
	require.Equal(t, []int{2, 1, 0}, rows[0].Counts, "row 00: two on bw-a, one on bw-b")
	require.Equal(t, []int{0, 0, 1}, rows[1].Counts, "row 01: one on no feed")
	accessible(t, b.page(t, "victor", "/ui/floor?by=loop"))
}

// The rack page says the rack's feed (with its budget and use, linked to
// the budget page) and loop; its isolation, pending acknowledgement, then
// acknowledged, then cleared; the cooling hold while a rack of its loop
// has an open leak or an open isolation (not with FLOW_LEAK_COOLING_HOLD
// off); and disables Power on while an isolation of the rack or its loop
// refuses it.
func TestRackPagePlacementIsolationAndHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPages(t)
	r0, r1, r2 := b.m.AddRack(t, 0), b.m.AddRack(t, 1), b.m.AddRack(t, 2)
	plain := b.page(t, "olivia", "/ui/racks/demo-0000")
	has(t, plain, `Power feed: <span id="rack-feed">not set</span> · Coolant loop: <span id="rack-loop">not set</span>`)
	hasNot(t, plain, "rack-isolation")
	hasNot(t, plain, "rack-cooling-hold")

	b.place(t, r0, "hall-0/bw-a", "cdu-1")
	b.place(t, r1, "hall-0/bw-a", "cdu-1")
	b.place(t, r2, "hall-0/bw-b", "cdu-2")
	kw := 150.0
	_, err := powerbudget.New(b.m.Pool, b.m.Engine, 0, 0).Set(ctx, "hall-0/bw-a", 4, &kw, "admin")
	require.NoError(t, err)
	page := b.page(t, "olivia", "/ui/racks/demo-0000")
	accessible(t, page)
	has(t, page, `Power feed: <a href="/ui/power#feed-hall-0_2fbw-a" id="rack-feed">hall-0/bw-a</a> (budget: 0 of 4 transitions in progress, 0 of 150 kW)`)
	has(t, page, `Coolant loop: <a href="/ui/floor?by=loop" id="rack-loop">cdu-1</a>`)
	has(t, b.page(t, "olivia", "/ui/racks/demo-0002"), `id="rack-feed">hall-0/bw-b</a> (no budget)`)

	// Rack 1 isolated (severe): its page says so, pending; rack 0, on its
	// loop, is held and refused power-on; rack 2, on another loop, is not.
	var iso string
	require.NoError(t, b.m.Pool.QueryRow(ctx, `INSERT INTO rack_isolation (id, rack_id, tier, reason, observed_at, sends, last_sent_at, next_send_at)
		VALUES (gen_random_uuid(), $1, 'severe', '2 trays leaking', now(), 1, now(), now() + interval '5 minutes') RETURNING id::text`, r1.ID).Scan(&iso))
	one := b.page(t, "olivia", "/ui/racks/demo-0001")
	accessible(t, one)
	has(t, one, `<strong>Isolated</strong> (severe leak tier) since 0s ago: 2 trays leaking. Facility request: <strong>pending acknowledgement</strong>, sent 1 time, again in 4m.`)
	has(t, one, "Not while the rack is isolated (severe leak tier): an operator clears it, or an admin overrides it (the API refuses it).")
	zero := b.page(t, "olivia", "/ui/racks/demo-0000")
	has(t, zero, `<p class="rack-task bad" id="rack-cooling-hold" role="status">Cooling hold: coolant loop cdu-1 has an open leak on rack demo-0001.`)
	has(t, zero, `<button type="submit" id="power-on" disabled aria-describedby="power-on-why">Power on</button> <span class="meta" id="power-on-why">Not while rack demo-0001 on coolant loop cdu-1 is isolated (severe leak tier) until it is cleared (the API refuses it).</span>`)
	two := b.page(t, "olivia", "/ui/racks/demo-0002")
	hasNot(t, two, "rack-cooling-hold")
	has(t, two, `<button type="submit" id="power-on">Power on</button>`)

	// An open leak on rack 0 itself comes first in the hold; with the
	// hold off (FLOW_LEAK_COOLING_HOLD=false) the page says none.
	_, err = b.m.Pool.Exec(ctx, `INSERT INTO component_leak (component_id, status) SELECT id, 'detected' FROM component WHERE name = 'demo-0000-ct-00'`)
	require.NoError(t, err)
	has(t, b.page(t, "olivia", "/ui/racks/demo-0001"), "Cooling hold: coolant loop cdu-1 has an open leak on rack demo-0000.")
	b.console.opts.NoCoolingHold = true
	hasNot(t, b.page(t, "olivia", "/ui/racks/demo-0001"), "rack-cooling-hold")
	b.console.opts.NoCoolingHold = false
	_, err = b.m.Pool.Exec(ctx, `DELETE FROM component_leak`)
	require.NoError(t, err)

	// Acknowledged, then an admin's override for rack 0, then cleared.
	_, err = b.m.Pool.Exec(ctx, `UPDATE rack_isolation SET acknowledged_at = now(), acknowledged_by = 'bms', ack_note = 'breaker 4 open' WHERE id = $1`, iso)
	require.NoError(t, err)
	has(t, b.page(t, "victor", "/ui/racks/demo-0001"), `Facility request: <strong>acknowledged</strong> by bms 0s ago (breaker 4 open).`)
	_, err = b.m.Pool.Exec(ctx, `INSERT INTO rack_isolation_override (rack_id, isolation_id, override_by, reason) VALUES ($1, $2, 'alice', 'own CDU')`, r0.ID, iso)
	require.NoError(t, err)
	has(t, b.page(t, "olivia", "/ui/racks/demo-0000"), `<button type="submit" id="power-on">Power on</button>`, "overridden for rack 0")
	_, err = b.m.Pool.Exec(ctx, `UPDATE rack_isolation SET cleared_at = now(), cleared_by = 'olivia', clear_reason = 'trays replaced' WHERE id = $1`, iso)
	require.NoError(t, err)
	cleared := b.page(t, "olivia", "/ui/racks/demo-0001")
	has(t, cleared, `Last isolation (severe leak tier) <strong>cleared</strong> 0s ago by olivia: trays replaced`)
	has(t, cleared, `<button type="submit" id="power-on">Power on</button>`)
	hasNot(t, b.page(t, "olivia", "/ui/racks/demo-0000"), "rack-cooling-hold", "the loop's leak is handled")
}

// The power-budget page lists each feed with its budget (transitions, kW)
// and use, and the steps waiting for it in their order, each linked to
// its task and rack; it has no controls for anyone (budgets are set with
// the CLI or the API), and answers a viewer too.
func TestPowerPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPages(t)
	empty := b.page(t, "victor", "/ui/power")
	has(t, empty, "No rack is on a power feed yet.")

	r0, r1, r2 := b.m.AddRack(t, 0), b.m.AddRack(t, 1), b.m.AddRack(t, 2)
	b.place(t, r0, "hall-0/bw-a", "cdu-1")
	b.place(t, r1, "hall-0/bw-a", "cdu-1")
	b.place(t, r2, "hall-0/bw-b", "")
	kw := 150.0
	_, err := powerbudget.New(b.m.Pool, b.m.Engine, 0, 0).Set(ctx, "hall-0/bw-a", 1, &kw, "admin")
	require.NoError(t, err)
	// Two power-ons on bw-a whose first steps wait for its budget (the
	// engine's wait rows, as the engine writes them while a step waits).
	var tasks []string
	for _, r := range []inventory.Rack{r0, r1} {
		ids, err := b.m.Submit(t, opstest.PowerOn(r))
		require.NoError(t, err)
		tasks = append(tasks, ids[0].String())
		_, err = b.m.Pool.Exec(ctx, `
			WITH s AS (UPDATE engine_step SET state = 'running' WHERE id = (
				SELECT s.id FROM engine_step s JOIN task t ON t.run_id = s.run_id WHERE t.id = $1 ORDER BY s.stage_index, s.step_index LIMIT 1) RETURNING id, run_id)
			INSERT INTO engine_wait (step_id, resource, run_id, amount, since)
			SELECT s.id, r.name, s.run_id, 1, now() - $2 * interval '1 minute' FROM s, (VALUES ('power-feed/hall-0/bw-a/transitions'), ('power-feed/hall-0/bw-a/kw')) r(name)`,
			ids[0], 3-len(tasks))
		require.NoError(t, err)
	}

	for _, user := range []string{"victor", "olivia"} {
		page := b.page(t, user, "/ui/power")
		accessible(t, page)
		hasNot(t, page, `method="post"`, "read-only for %s", user)
		has(t, page, `<tr data-feed="hall-0/bw-a" id="feed-hall-0_2fbw-a">`)
		has(t, page, `<td class="budget">1 transition at once, 150 kW</td>`)
		has(t, page, `<td class="in-use">0 transitions <span class="meta">of 1 and 150 kW</span></td>`)
		has(t, page, `<td class="num waiting">2</td>`)
		has(t, page, `<td class="budget"><span class="meta">no budget</span></td>`, "bw-b has racks and no budget")
		has(t, page, `<h2 id="h-feed-hall-0_2fbw-a">Waiting for feed <a href="#feed-hall-0_2fbw-a">hall-0/bw-a</a> <span class="meta">2 steps, first come first admitted</span></h2>`)
		first, second := strings.Index(page, `<a href="/ui/tasks/`+tasks[0]+`">`), strings.Index(page, `<a href="/ui/tasks/`+tasks[1]+`">`)
		require.Positive(t, first, "the first waiting task is linked")
		require.Greater(t, second, first, "in the order they wait")
		has(t, page, `<a href="/ui/racks/`+r0.ID.String()+`">demo-0000</a>`)
	}
	d := b.floorData(t, "/ui/floor?by=feed") // the racks' cells and the page agree on the feeds
	require.Len(t, d.Legend, 2)
}

// has fails t unless page contains want, showing the page's text around
// its main part without the components' table (not the whole page).
func has(t *testing.T, page, want string, msg ...any) {
	t.Helper()
	if !strings.Contains(page, want) {
		t.Fatalf("%v: %q not in the page:\n%s", msg, want, brief(page))
	}
}

func hasNot(t *testing.T, page, want string, msg ...any) {
	t.Helper()
	if strings.Contains(page, want) {
		t.Fatalf("%v: %q in the page:\n%s", msg, want, brief(page))
	}
}

func brief(page string) string {
	if i := strings.Index(page, "<main"); i >= 0 {
		page = page[i:]
	}
	if i, j := strings.Index(page, `<table id="components">`), strings.Index(page, "</table>"); i >= 0 && j > i {
		page = page[:i] + "[components]" + page[j:]
	}
	if len(page) > 4000 {
		page = page[:4000] + "…"
	}
	return page
}
