package console

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/operations/opstest"
)

// wholeRacks reads every rack's cell afresh, as a whole read does.
func wholeRacks(t *testing.T, b *pagesBundle) []RackCell {
	t.Helper()
	ctx := context.Background()
	tx, err := b.m.Pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	out, err := readRacks(ctx, tx, racksAll)
	require.NoError(t, err)
	return sortRacks(out)
}

// The overview's and floor map's cells follow every change by reading
// again only the racks that changed (rack_cell_change): a power change,
// a leak, a task queued, started and ending, a rack added, renamed, soft-
// and hard-deleted; after each, the kept cells equal a whole read, and
// the read was of the changed racks only.
func TestRackCellsFollowChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPages(t)
	r0, r1, r2 := b.m.AddRack(t, 0), b.m.AddRack(t, 1), b.m.AddRack(t, 2)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := b.m.Pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	cell := func(cells []RackCell, name string) RackCell {
		t.Helper()
		for _, c := range cells {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no rack %s in %v", name, cells)
		return RackCell{}
	}
	// read reads through the cache and checks it against a whole read;
	// delta is how many racks it must have read again (-1: none, the
	// cells kept as they were; 0: a whole read).
	read := func(what string, delta int) []RackCell {
		t.Helper()
		full, deltas := b.console.rc.fullReads, b.console.rc.deltaReads
		got, err := b.console.racks(ctx)
		require.NoError(t, err, what)
		require.Equal(t, wholeRacks(t, b), got, what)
		switch delta {
		case -1:
			require.Equal(t, [2]int{full, deltas}, [2]int{b.console.rc.fullReads, b.console.rc.deltaReads}, "%s: nothing read again", what)
		case 0:
			require.Equal(t, full+1, b.console.rc.fullReads, "%s: a whole read", what)
		default:
			require.Equal(t, [2]int{full, deltas + 1}, [2]int{b.console.rc.fullReads, b.console.rc.deltaReads}, "%s: a read of the changed racks", what)
			require.Equal(t, delta, b.console.rc.lastDelta, "%s: racks read again", what)
		}
		return got
	}

	got := read("first", 0)
	require.Len(t, got, 3)
	read("nothing changed", -1)

	exec(`UPDATE component SET power_state = 'on' WHERE name = 'demo-0001-ct-03'`)
	got = read("a component powered on", 1)
	require.Equal(t, 1, cell(got, "demo-0001").On)
	exec(`UPDATE component SET description = 'moved' WHERE name = 'demo-0001-ct-03'`)
	read("a change the cells do not show", -1)

	exec(`INSERT INTO component_leak (component_id, status) SELECT id, 'detected' FROM component WHERE name = 'demo-0002-ct-01'`)
	got = read("a leak", 1)
	require.Equal(t, 1, cell(got, "demo-0002").Leaks)
	require.Equal(t, "leak", cell(got, "demo-0002").State())

	// A task queued, started, ending failed.
	ids, err := b.m.Submit(t, opstest.PowerOn(r0))
	require.NoError(t, err)
	got = read("a task queued", 1)
	require.Equal(t, "queued", cell(got, "demo-0000").State())
	exec(`UPDATE task SET report = report WHERE id = $1`, ids[0])
	read("a task's update that is not its status", -1)
	exec(`UPDATE task SET status = 'running', started_at = now() WHERE id = $1`, ids[0])
	got = read("a task started", 1)
	require.Equal(t, "busy", cell(got, "demo-0000").State())
	exec(`UPDATE task SET status = 'failed', finished_at = now(), queue_expires_at = NULL WHERE id = $1`, ids[0])
	got = read("a task failed", 1)
	require.Equal(t, "failed", cell(got, "demo-0000").State())
	require.True(t, cell(got, "demo-0000").LastFailed)

	// Changes committed out of order: the one that began first and
	// commits last still shows.
	first, err := b.m.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()
	_, err = first.Exec(ctx, `UPDATE component SET power_state = 'off' WHERE name = 'demo-0000-ct-01'`)
	require.NoError(t, err)
	exec(`UPDATE component SET power_state = 'off' WHERE name = 'demo-0002-ct-02'`)
	got = read("the later change, committed first", 1)
	require.Equal(t, 1, cell(got, "demo-0002").Off)
	require.Equal(t, 0, cell(got, "demo-0000").Off, "not committed yet")
	require.NoError(t, first.Commit(ctx))
	got = read("the earlier change, committed last", 1)
	require.Equal(t, 1, cell(got, "demo-0000").Off)

	// Racks added, renamed and moved (the floor order changes), deleted.
	b.m.AddRack(t, 3)
	got = read("a rack added", 1)
	require.Equal(t, []string{"demo-0000", "demo-0001", "demo-0002", "demo-0003"}, names(got))
	exec(`UPDATE rack SET power_feed = 'feed-a', coolant_loop = 'loop-1' WHERE name = 'demo-0003'`)
	got = read("a rack's feed and loop", 1)
	require.Equal(t, [2]string{"feed-a", "loop-1"}, [2]string{cell(got, "demo-0003").Feed, cell(got, "demo-0003").Loop})
	exec(`UPDATE rack SET name = 'demo-0009', location_position = 'row-09-pos-01' WHERE id = $1`, r1.ID)
	got = read("a rack renamed and moved", 1)
	require.Equal(t, []string{"demo-0000", "demo-0002", "demo-0003", "demo-0009"}, names(got))
	exec(`UPDATE rack SET deleted_at = now() WHERE id = $1`, r2.ID)
	got = read("a rack deleted", 1)
	require.Equal(t, []string{"demo-0000", "demo-0003", "demo-0009"}, names(got))
	exec(`DELETE FROM rack WHERE id = $1`, r0.ID)
	got = read("a rack purged, its components and tasks with it", 1)
	require.Equal(t, []string{"demo-0003", "demo-0009"}, names(got))

	exec(`TRUNCATE component_leak`)
	read("a TRUNCATE: read whole", 0)

	// The floor map shows a change on its next fetch.
	page := func() string {
		w := b.get(t, "victor", "/ui/floor?by=power")
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		return w.Body.String()
	}
	require.Contains(t, page(), `aria-label="demo-0003, row-00-pos-03: power unknown"`)
	exec(`UPDATE component SET power_state = 'on' WHERE rack_id = (SELECT id FROM rack WHERE name = 'demo-0003')`)
	require.Contains(t, page(), `aria-label="demo-0003, row-00-pos-03: power on"`)
}

func names(cells []RackCell) []string {
	var out []string
	for _, c := range cells {
		out = append(out, c.Name)
	}
	return out
}
