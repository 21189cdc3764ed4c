package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// floorRacks lists the racks a floor page draws, in order.
func floorRacks(page string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<a class="rack [^"]*" href="/ui/racks/[^"]+" data-rack="([^"]+)"`).FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

// The floor map's filters (hall, row, a part of the name; URL query
// parameters) select the racks it draws; a selection larger than it
// draws is counted by hall and row, each a link to its racks; an unknown
// hall, row or a search that matches nothing is an empty map that says
// so, not an error.
func TestFloorFilterAndSearch(t *testing.T) {
	t.Parallel()
	b := setupPages(t)
	// Demo rack i stands in hall-(i/100), row (i%100)/10.
	for _, i := range []int{0, 1, 10, 11, 12, 100} {
		b.m.AddRack(t, i)
	}
	page := func(path string) string {
		t.Helper()
		w := b.get(t, "victor", path)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		return w.Body.String()
	}

	all := page("/ui/floor")
	require.Equal(t, []string{"demo-0000", "demo-0001", "demo-0010", "demo-0011", "demo-0012", "demo-0100"}, floorRacks(all))
	require.Contains(t, all, `<span id="floor-count">6 racks</span>`)
	require.Contains(t, all, `<option value="hall-0" >hall-0</option>`)
	accessible(t, all)

	for _, tt := range []struct{ name, path, count string }{
		{"Row", "/ui/floor?hall=hall-0&row=01", "3 of 6"},
		{"Hall", "/ui/floor?hall=hall-1", "1 of 6"},
		{"RowInEveryHall", "/ui/floor?row=00", "3 of 6"},
		{"Name", "/ui/floor?q=DEMO-001", "3 of 6"},
		{"NameInRow", "/ui/floor?hall=hall-0&row=01&q=0012&by=power", "1 of 6"},
	} {
		got := page(tt.path)
		want := map[string][]string{
			"Row": {"demo-0010", "demo-0011", "demo-0012"}, "Hall": {"demo-0100"}, "RowInEveryHall": {"demo-0000", "demo-0001", "demo-0100"},
			"Name": {"demo-0010", "demo-0011", "demo-0012"}, "NameInRow": {"demo-0012"},
		}[tt.name]
		require.Equal(t, want, floorRacks(got), tt.name)
		require.Contains(t, got, `<span id="floor-count">`+tt.count+` racks · <a href="/ui/floor`, tt.name)
		accessible(t, got)
	}
	row := page("/ui/floor?hall=hall-0&row=01")
	require.Contains(t, row, `<option value="hall-0" selected>hall-0</option>`)
	require.Contains(t, row, `<option value="01" selected>01</option>`, "the hall's rows to choose from")
	require.Contains(t, row, `<option value="00" >00</option>`)
	require.Contains(t, page("/ui/floor?q=demo-0012&by=power"), `aria-label="demo-0012, row-01-pos-02: power unknown"`, "the colouring applies to the selection")

	for _, tt := range []struct{ path, msg string }{
		{"/ui/floor?hall=nowhere", `No hall named &#34;nowhere&#34; on this site.`},
		{"/ui/floor?hall=hall-0&row=99", `Hall hall-0 has no row &#34;99&#34;.`},
		{"/ui/floor?q=zzz", `No rack name contains &#34;zzz&#34; in this selection.`},
		{"/ui/floor?hall=hall-1&q=0001", `No rack name contains &#34;0001&#34; in this selection.`},
	} {
		got := page(tt.path)
		require.Empty(t, floorRacks(got), tt.path)
		require.Contains(t, got, `<p id="floor-empty" role="status">`+tt.msg+` <a href="/ui/floor">Show the whole site</a>.</p>`, tt.path)
	}
	w := b.get(t, "victor", "/ui/floor?q="+strings.Repeat("x", 257))
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Contains(t, w.Body.String(), "floor map: q is 257 bytes long; at most 256")

	// A site larger than the map draws: its rows counted by colour.
	b.console.floorCells = 4
	sum := page("/ui/floor")
	require.Empty(t, floorRacks(sum))
	require.Contains(t, sum, "6 racks are more than the map draws at once (4)")
	require.Contains(t, sum, `<h2 id="h-hall-0"><a href="/ui/floor?hall=hall-0">hall-0</a> <span class="meta">5 racks</span></h2>`)
	require.Contains(t, sum, `<th scope="row"><a href="/ui/floor?hall=hall-0&amp;row=01">row 01</a></th><td class="num">3</td>`)
	require.Contains(t, sum, `<th scope="row"><a href="/ui/floor?hall=hall-1&amp;row=00">row 00</a></th><td class="num">1</td>`)
	accessible(t, sum)
	d := b.floorData(t, "/ui/floor?by=power")
	require.Len(t, d.Summary, 2)
	require.Equal(t, "hall-0", d.Summary[0].Name)
	require.Equal(t, []string{"00", "01"}, []string{d.Summary[0].Rows[0].Name, d.Summary[0].Rows[1].Name})
	unknown := slices.IndexFunc(d.Legend, func(l legendItem) bool { return l.Class == "c-unknown" })
	require.Equal(t, 3, d.Summary[0].Rows[1].Counts[unknown], "never-synced racks: power unknown")
	require.Equal(t, 5, d.Summary[0].Counts[unknown])
	// A hall within the limit is drawn; its rows' links keep the colouring.
	require.Equal(t, []string{"demo-0100"}, floorRacks(page("/ui/floor?hall=hall-1")))
	require.Contains(t, page("/ui/floor?hall=hall-0&by=leak"), `<a href="/ui/floor?by=leak&amp;hall=hall-0&amp;row=00">row 00</a>`)
}

func (b *pagesBundle) floorData(t *testing.T, path string) floorData {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	v, err := b.console.floor(r)
	require.NoError(t, err)
	return v.data.(floorData)
}

// A filtered floor map is live: a leak raised on one of its racks reaches
// its page's stream, and the page fetched again (as the script does)
// shows it, still filtered.
func TestFloorFilteredIsLive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPages(t)
	b.m.AddRack(t, 0)
	b.m.AddRack(t, 10)
	r11 := b.m.AddRack(t, 11)
	const path = "/ui/floor?hall=hall-0&row=01&by=leak"
	partial := func() string {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("X-User", "victor")
		r.Header.Set("X-Console-Partial", "1")
		w := httptest.NewRecorder()
		b.console.ServeHTTP(w, r)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		return w.Body.String()
	}
	full := b.get(t, "victor", path).Body.String()
	require.Contains(t, full, `data-topics="racks,leaks,tasks,sync,firmware"`)
	s := b.console.Feed().Subscribe(floorTopics)
	defer b.console.Feed().Unsubscribe(s)
	require.Eventually(t, func() bool { _, live := b.console.Feed().Generation(floorTopics...); return live }, 30*time.Second, 10*time.Millisecond)
	before := partial()
	require.Equal(t, []string{"demo-0010", "demo-0011"}, floorRacks(before))
	require.NotContains(t, before, `class="rack c-leak"`)

	_, err := b.m.Pool.Exec(ctx, `INSERT INTO component_leak (component_id, status)
		SELECT id, 'detected' FROM component WHERE name = 'demo-0011-ct-00'`)
	require.NoError(t, err)
	_, err = b.m.Pool.Exec(ctx, `INSERT INTO leak_occurrence (component_kind, external_id, source_key) VALUES ('compute', 'x-0011', 'x-0011')`)
	require.NoError(t, err)
	select {
	case <-s.C:
		require.Contains(t, s.Take(), "leaks")
	case <-time.After(30 * time.Second):
		t.Fatal("the filtered page's stream heard no change")
	}
	after := partial()
	require.Equal(t, []string{"demo-0010", "demo-0011"}, floorRacks(after), "still the row")
	require.Contains(t, after, `<a class="rack c-leak" href="/ui/racks/`+r11.ID.String()+`" data-rack="demo-0011" title="demo-0011 · row-01-pos-01 · 1 leaking"`)
}
