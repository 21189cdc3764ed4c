package console

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nicoflow/flow/inventory"
)

// RackCell is one rack as the overview and the floor map see it.
type RackCell struct {
	ID, Name, Room, Position string
	Row, Slot                string // parsed from Position
	Components, On, Off      int
	Leaks, Unhealthy         int
	Running, Queued          int
	Firmware                 string // the compute trays' firmware; "mixed" when they differ
	RackAlert                bool   // the rack's own health report has alerts
	LastFailed               bool   // the rack's newest finished task failed
	Phase                    string // the rack's operation status (health of its components' phases)
	// Feed and Loop are the rack's power feed and coolant loop ("" not
	// known; issue 45).
	Feed, Loop string
}

// Power is the rack's power in one word: on, off, mixed or unknown.
func (r RackCell) Power() string {
	switch {
	case r.Components == 0 || r.On+r.Off == 0:
		return "unknown"
	case r.Off == 0 && r.On == r.Components:
		return "on"
	case r.On == 0 && r.Off == r.Components:
		return "off"
	}
	return "mixed"
}

// Health is the rack's health in one word.
func (r RackCell) Health() string {
	if r.Unhealthy > 0 || r.RackAlert {
		return "alert"
	}
	return "ok"
}

// State is what matters most now, for the overview's counts: leak, then
// running task, then queued task, then last task failed, then health
// alert, then power.
func (r RackCell) State() string {
	switch {
	case r.Leaks > 0:
		return "leak"
	case r.Running > 0:
		return "busy"
	case r.Queued > 0:
		return "queued"
	case r.LastFailed:
		return "failed"
	case r.Health() == "alert":
		return "alert"
	}
	return "power-" + r.Power()
}

// racksQuery reads racks' cells; %[1]s is the selection: every live
// rack (racksAll), or the racks of $1 (racksSome).
const racksQuery = `
WITH comp AS (
  SELECT c.rack_id,
    count(*) AS n,
    count(*) FILTER (WHERE c.power_state = 'on') AS on_n,
    count(*) FILTER (WHERE c.power_state = 'off') AS off_n,
    count(*) FILTER (WHERE cl.status = 'detected') AS leaks,
    count(*) FILTER (WHERE c.health IS NOT NULL AND json_typeof(c.health->'alerts') = 'array' AND json_array_length(c.health->'alerts') > 0) AS unhealthy,
    min(c.firmware_version) FILTER (WHERE c.type = 'Compute') AS fw_min,
    max(c.firmware_version) FILTER (WHERE c.type = 'Compute') AS fw_max
  FROM component c LEFT JOIN component_leak cl ON cl.component_id = c.id
  WHERE c.deleted_at IS NULL AND c.rack_id IS NOT NULL %[1]s
  GROUP BY c.rack_id
), act AS (
  SELECT rack_id, count(*) FILTER (WHERE status = 'running') AS running,
         count(*) FILTER (WHERE status IN ('pending', 'waiting')) AS queued
  FROM task WHERE status IN ('waiting', 'pending', 'running') %[1]s GROUP BY rack_id
)
SELECT r.id::text, r.name, r.location_room, r.location_position,
  coalesce(comp.n, 0), coalesce(comp.on_n, 0), coalesce(comp.off_n, 0), coalesce(comp.leaks, 0), coalesce(comp.unhealthy, 0),
  coalesce(act.running, 0), coalesce(act.queued, 0),
  CASE WHEN comp.fw_min IS DISTINCT FROM comp.fw_max THEN 'mixed' ELSE coalesce(comp.fw_min, '') END,
  r.health IS NOT NULL AND json_typeof(r.health->'alerts') = 'array' AND json_array_length(r.health->'alerts') > 0,
  coalesce((SELECT t.status = 'failed' FROM task t WHERE t.rack_id = r.id AND t.status IN ('completed', 'failed', 'terminated')
            ORDER BY t.created_at DESC, t.id DESC LIMIT 1), false),
  coalesce(r.power_feed, ''), coalesce(r.coolant_loop, '')
FROM rack r LEFT JOIN comp ON comp.rack_id = r.id LEFT JOIN act ON act.rack_id = r.id
WHERE r.deleted_at IS NULL %[2]s`

var (
	racksAll  = fmt.Sprintf(racksQuery, "", "")
	racksSome = fmt.Sprintf(racksQuery, "AND rack_id = ANY($1::uuid[])", "AND r.id = ANY($1::uuid[])")
)

// changedRacksQuery reads the snapshot of this read and the racks whose
// cells changed since the snapshot $1 of the last one: the rows of
// rack_cell_change (db/migrations/0340) written by a transaction $1 did
// not see. Exact whatever the order of commits: a transaction still
// running now is not seen by this snapshot either, so the next read
// finds it. The nil UUID (a TRUNCATE) stands for every rack.
const changedRacksQuery = `
SELECT pg_current_snapshot()::text, coalesce(array_agg(DISTINCT rack_id::text), '{}')
FROM rack_cell_change
WHERE xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot)`

// allRacks is the nil UUID that rack_cell_change writes for a TRUNCATE.
const allRacks = "00000000-0000-0000-0000-000000000000"

// racksMaxAge bounds how long the cells are kept up to date by their
// changes alone before they are read whole again (a safety net: writes
// that bypass the triggers, a transaction open longer than the log of
// changes is kept, CellChangeRetention).
const racksMaxAge = 30 * time.Minute

// CellChangeRetention is how long rack_cell_change keeps its rows (the
// prune job deletes older ones); longer than racksMaxAge.
const CellChangeRetention = time.Hour

// racksCache holds every rack's cell and the snapshot they were read at:
// the overview and the floor map, whatever their filters and however many
// pages are open, share it. A read asks which racks changed since that
// snapshot (changedRacksQuery, one index range of a small table) and
// reads again only those: a task starting or ending, a power change, a
// leak costs a few racks' rows, not the site's 525,000 components at
// 15,000 racks. Changes by any replica count. Reads are serialized, so a
// burst of fetches after a change makes one query.
type racksCache struct {
	mu    sync.Mutex
	snap  string    // the pg_snapshot the cells were read at
	at    time.Time // the last whole read
	racks []RackCell
	// fullReads and deltaReads count the whole reads and the reads of
	// changed racks (tests).
	fullReads, deltaReads int
	// lastDelta is how many racks the last read of changed racks read.
	lastDelta int
}

// racks returns every live rack's cell, in floor order; callers must not
// change the slice (a change makes a new one).
func (c *Console) racks(ctx context.Context) ([]RackCell, error) {
	c.rc.mu.Lock()
	defer c.rc.mu.Unlock()
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("read racks: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	full := c.rc.racks == nil || time.Since(c.rc.at) > racksMaxAge
	snap := c.rc.snap
	var changed []string
	if full {
		if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
			return nil, fmt.Errorf("read racks: snapshot: %w", err)
		}
	} else {
		if err := tx.QueryRow(ctx, changedRacksQuery, snap).Scan(&snap, &changed); err != nil {
			return nil, fmt.Errorf("read racks: changes: %w", err)
		}
		// Reading a quarter of the site rack by rack costs as much as
		// reading it whole.
		full = slices.Contains(changed, allRacks) || len(changed) > max(64, len(c.rc.racks)/4)
	}
	switch {
	case full:
		out, err := readRacks(ctx, tx, racksAll)
		if err != nil {
			return nil, err
		}
		c.rc.racks, c.rc.at = sortRacks(out), time.Now()
		c.rc.fullReads++
	case len(changed) > 0:
		fresh, err := readRacks(ctx, tx, racksSome, changed)
		if err != nil {
			return nil, err
		}
		c.rc.racks = applyRacks(c.rc.racks, changed, fresh)
		c.rc.deltaReads++
		c.rc.lastDelta = len(changed)
	}
	c.rc.snap = snap
	return c.rc.racks, nil
}

// applyRacks returns cells with the racks of ids replaced by fresh (a
// rack of ids not in fresh is gone: deleted), in floor order; cells is
// not changed.
func applyRacks(cells []RackCell, ids []string, fresh []RackCell) []RackCell {
	byID := make(map[string]RackCell, len(fresh))
	for _, r := range fresh {
		byID[r.ID] = r
	}
	gone := make(map[string]bool, len(ids))
	for _, id := range ids {
		gone[id] = true
	}
	out := make([]RackCell, 0, len(cells)+len(fresh))
	resort := false
	for _, r := range cells {
		if !gone[r.ID] {
			out = append(out, r)
			continue
		}
		n, ok := byID[r.ID]
		if !ok {
			continue // deleted
		}
		delete(byID, r.ID)
		if n.Name != r.Name || n.Room != r.Room || n.Position != r.Position {
			resort = true
		}
		out = append(out, n)
	}
	for _, r := range fresh {
		if _, ok := byID[r.ID]; ok {
			out = append(out, r) // new
			resort = true
		}
	}
	if resort {
		return sortRacks(out)
	}
	return out
}

// readRacks reads the cells query selects (racksAll, racksSome).
func readRacks(ctx context.Context, tx pgx.Tx, query string, args ...any) ([]RackCell, error) {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read racks: %w", err)
	}
	defer rows.Close()
	var out []RackCell
	for rows.Next() {
		var r RackCell
		var n, on, off, leaks, unh, run, q int64
		if err := rows.Scan(&r.ID, &r.Name, &r.Room, &r.Position, &n, &on, &off, &leaks, &unh, &run, &q, &r.Firmware, &r.RackAlert, &r.LastFailed, &r.Feed, &r.Loop); err != nil {
			return nil, fmt.Errorf("read racks: %w", err)
		}
		r.Components, r.On, r.Off, r.Leaks, r.Unhealthy, r.Running, r.Queued = int(n), int(on), int(off), int(leaks), int(unh), int(run), int(q)
		r.Row, r.Slot = parsePosition(r.Position)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read racks: %w", err)
	}
	return out, nil
}

// sortRacks returns racks in floor order (hall, row, place, name, each
// with its trailing number compared as a number).
func sortRacks(out []RackCell) []RackCell {
	// The natural order's keys are split once per rack, not once per
	// comparison (15,000 racks: 200,000 comparisons).
	keys := make([][4]natKey, len(out))
	for i, r := range out {
		keys[i] = [4]natKey{splitNat(r.Room), splitNat(r.Row), splitNat(r.Slot), splitNat(r.Name)}
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool {
		a, b := &keys[idx[i]], &keys[idx[j]]
		for k := range a {
			if a[k].s != b[k].s {
				return a[k].less(b[k])
			}
		}
		return false
	})
	sorted := make([]RackCell, len(out))
	for i, k := range idx {
		sorted[i] = out[k]
	}
	return sorted
}

// natKey is a string split for natLess: the part before its trailing
// number, and the number.
type natKey struct {
	s, pre string
	num    int
	hasNum bool
}

func splitNat(s string) natKey {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	k := natKey{s: s, pre: s[:i], hasNum: i < len(s)}
	if k.hasNum {
		k.num, _ = strconv.Atoi(s[i:])
	}
	return k
}

// less is natLess(a.s, b.s).
func (a natKey) less(b natKey) bool {
	if a.pre == b.pre && a.hasNum && b.hasNum && a.num != b.num {
		return a.num < b.num
	}
	return a.s < b.s
}

// parsePosition splits a rack position into its row and place in the row
// (inventory.SplitPosition: "row-02-pos-03", "R2-3", "B/12"; a position it
// cannot split is all place, in an unnamed row).
var parsePosition = inventory.SplitPosition

// natLess orders strings with their trailing numbers compared as numbers
// (row-9 before row-10).
func natLess(a, b string) bool { return splitNat(a).less(splitNat(b)) }

// Leak is one open leak: a component whose coolant-leak alert is raised.
type Leak struct {
	Component, Type, RackID, RackName, Room, Position string
	Since                                             time.Time
	Handling                                          string
}

const leaksQuery = `
SELECT c.name, c.type, coalesce(r.id::text, ''), coalesce(r.name, ''), coalesce(r.location_room, ''), coalesce(r.location_position, ''),
  coalesce(lo.started_at, cl.updated_at)
FROM component_leak cl
JOIN component c ON c.id = cl.component_id
LEFT JOIN rack r ON r.id = c.rack_id
LEFT JOIN leak_occurrence lo ON lo.external_id = c.external_id AND lo.component_kind = lower(c.type)
WHERE cl.status = 'detected' AND c.deleted_at IS NULL
ORDER BY 7 DESC, 1`

// leaks reads the open leaks, newest first.
func (c *Console) leaks(ctx context.Context) ([]Leak, error) {
	rows, err := c.pool.Query(ctx, leaksQuery)
	if err != nil {
		return nil, fmt.Errorf("read leaks: %w", err)
	}
	defer rows.Close()
	var out []Leak
	for rows.Next() {
		var l Leak
		if err := rows.Scan(&l.Component, &l.Type, &l.RackID, &l.RackName, &l.Room, &l.Position, &l.Since); err != nil {
			return nil, fmt.Errorf("read leaks: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// Drift is one difference the last inventory sync found.
type Drift struct {
	Type, Kind, Name, Serial, Diffs string
	CheckedAt                       time.Time
}

// drift reads the drift of rack's components (rackID "" for the whole
// site, at most limit rows) and the site's drift count.
func (c *Console) drift(ctx context.Context, rackID string, limit int) ([]Drift, int, error) {
	var total int
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM component_drift`).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("read drift: %w", err)
	}
	q := `SELECT d.component_type, d.drift_type, d.name, d.serial_number, d.diffs::text, d.checked_at
	      FROM component_drift d LEFT JOIN component c ON c.id = d.component_id
	      WHERE ($1 = '' OR c.rack_id::text = $1 OR (c.id IS NULL AND d.rack_external_id IN (SELECT external_id FROM rack WHERE id::text = $1)))
	      ORDER BY d.component_type, d.name LIMIT $2`
	rows, err := c.pool.Query(ctx, q, rackID, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("read drift: %w", err)
	}
	defer rows.Close()
	var out []Drift
	for rows.Next() {
		var d Drift
		if err := rows.Scan(&d.Type, &d.Kind, &d.Name, &d.Serial, &d.Diffs, &d.CheckedAt); err != nil {
			return nil, 0, fmt.Errorf("read drift: %w", err)
		}
		out = append(out, d)
	}
	return out, total, rows.Err()
}

// taskCounts counts the site's running and queued tasks.
func (c *Console) taskCounts(ctx context.Context) (running, queued int, err error) {
	err = c.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status IN ('pending', 'waiting'))
		FROM task WHERE status IN ('waiting', 'pending', 'running')`).Scan(&running, &queued)
	if err != nil {
		err = fmt.Errorf("count tasks: %w", err)
	}
	return running, queued, err
}

// PruneCellChanges deletes up to batch rows of rack_cell_change written
// before before (the prune job, app/prune.go: before is
// CellChangeRetention ago) and returns how many it deleted.
func PruneCellChanges(ctx context.Context, pool *pgxpool.Pool, before time.Time, batch int) (int64, error) {
	tag, err := pool.Exec(ctx, `DELETE FROM rack_cell_change WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM rack_cell_change WHERE at < $1 LIMIT $2))`, before, batch)
	if err != nil {
		return 0, fmt.Errorf("prune rack cell changes: %w", err)
	}
	return tag.RowsAffected(), nil
}
