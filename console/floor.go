package console

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	adminv1 "github.com/nicoflow/flow/proto/gen/flow/admin/v1"
)

// floorCells is how many racks the floor map draws at most: a selection
// (the site, a hall, a row, a name search) larger than that shows its
// rows' counts by colour instead, each row a link to its racks, so that a
// site of 15,000 racks is one small table and never 15,000 cells.
const floorCells = 1000

// noHall is the hall filter's value for the racks whose room is not set.
const noHall = "(none)"

// floorFilterBytes bounds each of the floor map's filters.
const floorFilterBytes = 256

type floorData struct {
	By     string
	Modes  []string
	Rooms  []room
	Legend []legendItem
	// Total counts the site's racks; Shown those the filters select.
	Total, Shown int
	// Note says what the colouring is measured against, or why it is
	// missing (compliance: the active baseline).
	Note string
	// Hall, Row and Q are the filters (URL query parameters hall, row
	// and q: a rack's room, its row, a part of its name).
	Hall, Row, Q string
	// Halls are the site's halls, Rows the chosen hall's rows (the
	// filter's choices).
	Halls, Rows []string
	// Summary is the selection by hall and row, counted by colour, when
	// it is too large to draw (more than Limit racks); Rooms is empty
	// then.
	Summary []hallSummary
	Limit   int
	// Empty says why the selection is empty (an unknown hall, a search
	// that matches nothing).
	Empty string
	// All links to the whole site in the same colouring.
	All string
}

type room struct {
	Name string
	Rows []floorRow
}

type floorRow struct {
	Name  string
	Cells []floorCell
}

type floorCell struct {
	RackCell
	Class, Label string
}

type legendItem struct{ Class, Label string }

// hallSummary is one hall of a selection too large to draw: its rows,
// each with its racks counted by the colouring's legend.
type hallSummary struct {
	Name, Href string
	Racks      int
	Counts     []int // by Legend item
	Rows       []rowSummary
}

type rowSummary struct {
	Name, Href string
	Racks      int
	Counts     []int
}

var floorModes = []string{"status", "power", "leak", "task", "firmware", "compliance", "health", "feed", "loop"}

// floorURL is the floor map's URL for a selection in colouring by.
func floorURL(by, hall, row, q string) string {
	v := url.Values{}
	if hall != "" {
		v.Set("hall", hall)
	}
	if row != "" {
		v.Set("row", row)
	}
	if q != "" {
		v.Set("q", q)
	}
	if by != "status" {
		v.Set("by", by)
	}
	if len(v) == 0 {
		return "/ui/floor"
	}
	return "/ui/floor?" + v.Encode()
}

func hallParam(room string) string {
	if room == "" {
		return noHall
	}
	return room
}

// floor serves the floor map: the racks the filters select (hall, row, a
// part of the name), drawn in their rows when there are at most
// floorCells of them, else counted by hall and row; an unknown hall or a
// search that matches nothing is an empty map that says so.
func (c *Console) floor(r *http.Request) (view, error) {
	qv := r.URL.Query()
	by := qv.Get("by")
	if !slices.Contains(floorModes, by) {
		by = "status"
	}
	hall, row, q := strings.TrimSpace(qv.Get("hall")), strings.TrimSpace(qv.Get("row")), strings.TrimSpace(qv.Get("q"))
	for _, f := range []struct{ name, v string }{{"hall", hall}, {"row", row}, {"q", q}} {
		if len(f.v) > floorFilterBytes {
			return view{}, badRef("floor map: %s is %d bytes long; at most %d", f.name, len(f.v), floorFilterBytes)
		}
	}
	racks, err := c.racks(r.Context())
	if err != nil {
		return view{}, err
	}
	limit := c.floorCells
	if limit <= 0 {
		limit = floorCells
	}
	d := floorData{By: by, Modes: floorModes, Total: len(racks), Hall: hall, Row: row, Q: q, Limit: limit, All: floorURL(by, "", "", "")}

	// The selection, and the filter's choices.
	hallRoom := hall
	if hall == noHall {
		hallRoom = ""
	}
	lq := strings.ToLower(q)
	var sel []RackCell
	for i, rc := range racks {
		if i == 0 || racks[i-1].Room != rc.Room {
			d.Halls = append(d.Halls, hallParam(rc.Room))
		}
		if hall != "" && rc.Room != hallRoom {
			continue
		}
		if hall != "" && (len(d.Rows) == 0 || d.Rows[len(d.Rows)-1] != rc.Row) && rc.Row != "" {
			d.Rows = append(d.Rows, rc.Row)
		}
		if row != "" && rc.Row != row {
			continue
		}
		if q != "" && !strings.Contains(strings.ToLower(rc.Name), lq) {
			continue
		}
		sel = append(sel, rc)
	}
	d.Shown = len(sel)
	switch {
	case hall != "" && !slices.Contains(d.Halls, hall):
		d.Empty = fmt.Sprintf("No hall named %q on this site.", hall)
	case row != "" && hall != "" && !slices.Contains(d.Rows, row):
		d.Empty = fmt.Sprintf("Hall %s has no row %q.", hall, row)
	case len(sel) == 0 && len(racks) > 0:
		d.Empty = "No rack matches this selection."
		if q != "" {
			d.Empty = fmt.Sprintf("No rack name contains %q in this selection.", q)
		}
	}

	// The colouring.
	fw := map[string]int{}
	var keys []string // by feed or loop: each legend item's name
	var comp map[string]*adminv1.ComplianceGroup
	if by == "compliance" {
		var res *adminv1.GetComplianceResponse
		if comp, res, d.Note, err = c.rackCompliance(r); err != nil {
			return view{}, err
		}
		if res != nil {
			d.Note = fmt.Sprintf("Each rack's most urgent device state against baseline %s revision %d.", res.GetBaseline(), res.GetRevision())
		}
		d.Legend = complianceLegend
	} else if by == "firmware" {
		var vs []string
		for _, rc := range racks {
			if _, ok := fw[rc.Firmware]; !ok && rc.Firmware != "mixed" && rc.Firmware != "" {
				fw[rc.Firmware] = 0
				vs = append(vs, rc.Firmware)
			}
		}
		sort.Strings(vs)
		for i, v := range vs {
			fw[v] = i % 8
			d.Legend = append(d.Legend, legendItem{Class: fmt.Sprintf("fw-%d", i%8), Label: v})
		}
		d.Legend = append(d.Legend, legendItem{Class: "fw-mixed", Label: "mixed"}, legendItem{Class: "c-unknown", Label: "unknown"})
	} else if by == "feed" || by == "loop" {
		d.Legend, keys = placementLegend(by, sel)
	} else {
		d.Legend = legends[by]
	}
	colour := func(rc RackCell) (string, string) {
		if by == "compliance" {
			return complianceCell(comp[rc.ID], comp != nil)
		}
		return cellClass(by, rc, fw)
	}

	if len(sel) > limit {
		d.Summary = summarize(sel, d.Legend, keys, by, q, colour)
		return view{"floor", "Floor map", "floor", floorTopics, d}, nil
	}
	for _, rc := range sel {
		cell := floorCell{RackCell: rc}
		cell.Class, cell.Label = colour(rc)
		if len(d.Rooms) == 0 || d.Rooms[len(d.Rooms)-1].Name != rc.Room {
			d.Rooms = append(d.Rooms, room{Name: rc.Room})
		}
		rm := &d.Rooms[len(d.Rooms)-1]
		if len(rm.Rows) == 0 || rm.Rows[len(rm.Rows)-1].Name != rc.Row {
			rm.Rows = append(rm.Rows, floorRow{Name: rc.Row})
		}
		row := &rm.Rows[len(rm.Rows)-1]
		row.Cells = append(row.Cells, cell)
	}
	return view{"floor", "Floor map", "floor", floorTopics, d}, nil
}

// summarize counts racks (in floor order) by hall and row and by the
// legend's items (by feed or loop, keys are the items' names: two names
// may share a colour); each hall and row links to its racks (the search
// kept).
func summarize(racks []RackCell, legend []legendItem, keys []string, by, q string, colour func(RackCell) (string, string)) []hallSummary {
	// A cell's legend item: by its class, or for firmware (eight classes
	// for any number of versions) by its version.
	idx := map[string]int{}
	for i, l := range legend {
		if by == "firmware" {
			idx[l.Label] = i
		} else if by == "feed" || by == "loop" {
			idx[keys[i]] = i
		} else if _, ok := idx[l.Class]; !ok {
			idx[l.Class] = i
		}
	}
	var out []hallSummary
	for _, rc := range racks {
		if len(out) == 0 || out[len(out)-1].Name != rc.Room {
			out = append(out, hallSummary{Name: rc.Room, Href: floorURL(by, hallParam(rc.Room), "", q), Counts: make([]int, len(legend))})
		}
		h := &out[len(out)-1]
		if len(h.Rows) == 0 || h.Rows[len(h.Rows)-1].Name != rc.Row {
			h.Rows = append(h.Rows, rowSummary{Name: rc.Row, Href: floorURL(by, hallParam(rc.Room), rc.Row, q), Counts: make([]int, len(legend))})
		}
		rw := &h.Rows[len(h.Rows)-1]
		h.Racks++
		rw.Racks++
		class, _ := colour(rc)
		key := class
		switch by {
		case "feed":
			key = rc.Feed
		case "loop":
			key = rc.Loop
		}
		if by == "firmware" {
			switch rc.Firmware {
			case "":
				key = "unknown"
			default:
				key = rc.Firmware
			}
		}
		if i, ok := idx[key]; ok {
			h.Counts[i]++
			rw.Counts[i]++
		}
	}
	return out
}

// placementColours is how many colours the feed and loop colourings have
// (pl-0 … pl-11 in console.css).
const placementColours = 12

// placementClass is the colour class and words of a rack on feed or loop
// name (kind "feed" or "loop"): one colour per name, the same wherever and
// whenever it is drawn (a hash of the name, not its place in a list), so
// that a feed keeps its colour as others come and go; "" is "no feed".
func placementClass(kind, name string) (string, string) {
	if name == "" {
		return "c-unknown", "no " + kind
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return fmt.Sprintf("pl-%d", h.Sum32()%placementColours), kind + " " + name
}

// placementLegend names each feed (by "feed") or coolant loop (by "loop")
// of the racks with its colour and its count, in natural order, then the
// racks with none; keys are the items' names ("" none).
func placementLegend(by string, racks []RackCell) ([]legendItem, []string) {
	counts := map[string]int{}
	for _, rc := range racks {
		if by == "feed" {
			counts[rc.Feed]++
		} else {
			counts[rc.Loop]++
		}
	}
	names := make([]string, 0, len(counts))
	for n := range counts {
		if n != "" {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return natLess(names[i], names[j]) })
	out := make([]legendItem, 0, len(names)+1)
	for _, n := range names {
		class, _ := placementClass(by, n)
		out = append(out, legendItem{Class: class, Label: fmt.Sprintf("%s (%s)", n, plural(counts[n], "rack"))})
	}
	if n := counts[""]; n > 0 || len(names) == 0 {
		out = append(out, legendItem{Class: "c-unknown", Label: fmt.Sprintf("no %s (%s)", by, plural(n, "rack"))})
		names = append(names, "")
	}
	return out, names
}
