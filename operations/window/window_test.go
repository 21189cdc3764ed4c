package window

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nicoflow/flow/inventory"
)

func mustCron(t *testing.T, name, expr, tz string, d time.Duration) Window {
	t.Helper()
	s, err := parseCron(expr, tz)
	require.NoError(t, err)
	return Window{Name: name, Cron: expr, TimeZone: tz, Duration: d, sched: s}
}

func oneOff(name string, from, until time.Time) Window {
	return Window{Name: name, StartsAt: &from, EndsAt: &until}
}

// TestDecide: when a rack may next start disruptive work, from windows
// (cron in a time zone, one-off) and freezes.
func TestDecide(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	// Saturdays 02:00 Paris time for 4h.
	sat := mustCron(t, "sat", "0 2 * * SAT", "Europe/Paris", 4*time.Hour)
	fri := time.Date(2026, 12, 4, 12, 0, 0, 0, paris)   // a Friday
	open := time.Date(2026, 12, 5, 2, 0, 0, 0, paris)   // Saturday 02:00
	inside := time.Date(2026, 12, 5, 3, 0, 0, 0, paris) // Saturday 03:00
	xmas := oneOff("xmas", time.Date(2026, 12, 5, 0, 0, 0, 0, paris), time.Date(2026, 12, 6, 0, 0, 0, 0, paris))
	past := oneOff("past", fri.Add(-48*time.Hour), fri.Add(-24*time.Hour))
	for _, tt := range []struct {
		name             string
		windows, freezes []Window
		at, want         time.Time
		reason           string
	}{
		{name: "NothingCovers", at: fri, want: fri},
		{name: "OutsideWaitsForTheNextOpening", windows: []Window{sat}, at: fri, want: open, reason: `outside maintenance window "sat"`},
		{name: "Inside", windows: []Window{sat}, at: inside, want: inside},
		{name: "AtTheOpening", windows: []Window{sat}, at: open, want: open},
		{name: "AtTheCloseIsOutside", windows: []Window{sat}, at: open.Add(4 * time.Hour), want: open.AddDate(0, 0, 7)},
		{name: "FreezeWinsOverTheWindow", windows: []Window{sat}, freezes: []Window{xmas}, at: inside, want: open.AddDate(0, 0, 7), reason: `in freeze "xmas" until 2026-12-05T23:00:00Z`},
		{name: "FreezeAloneEndsAtItsEnd", freezes: []Window{xmas}, at: inside, want: *xmas.EndsAt, reason: `in freeze "xmas"`},
		{name: "RecurringFreeze", freezes: []Window{mustCron(t, "nightly", "0 22 * * *", "UTC", 10*time.Hour)}, at: time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC),
			want: time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC), reason: `in freeze "nightly" until 2026-12-05T08:00:00Z`},
		{name: "PastOneOffRestrictsNothing", windows: []Window{past}, at: fri, want: fri},
		{name: "OneOffAhead", windows: []Window{oneOff("later", open, open.Add(time.Hour))}, at: fri, want: open, reason: `outside maintenance window "later"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := decide(tt.windows, tt.freezes, tt.at)
			require.True(t, d.at.Equal(tt.want), "next %s, want %s", d.at, tt.want)
			if tt.reason != "" {
				require.Contains(t, d.reason(), tt.reason)
			}
		})
	}
}

// TestOpenWindow: the window work starting now runs in (what a firmware
// task tells Core): the open occurrence closing last, cut at the next
// freeze's start.
func TestOpenWindow(t *testing.T) {
	t.Parallel()
	sat := mustCron(t, "sat", "0 2 * * SAT", "UTC", 4*time.Hour)
	open := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	inside := open.Add(time.Hour)
	long := oneOff("long", open.Add(-time.Hour), open.Add(6*time.Hour))
	freeze := oneOff("freeze", open.Add(3*time.Hour), open.Add(10*time.Hour))
	for _, tt := range []struct {
		name             string
		windows, freezes []Window
		from, until      time.Time
	}{
		{name: "None"},
		{name: "Cron", windows: []Window{sat}, from: open, until: open.Add(4 * time.Hour)},
		{name: "ClosesLastWins", windows: []Window{sat, long}, from: *long.StartsAt, until: *long.EndsAt},
		{name: "CutAtTheNextFreeze", windows: []Window{sat}, freezes: []Window{freeze}, from: open, until: *freeze.StartsAt},
		{name: "ClosedWindowsGiveNone", windows: []Window{oneOff("later", open.Add(48*time.Hour), open.Add(50*time.Hour))}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			from, until := openWindow(tt.windows, tt.freezes, inside)
			require.True(t, from.Equal(tt.from), "from %s, want %s", from, tt.from)
			require.True(t, until.Equal(tt.until), "until %s, want %s", until, tt.until)
		})
	}
}

// TestParseCron: bad input names the field.
func TestParseCron(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ expr, tz, field string }{
		{"0 2 * * XYZ", "UTC", "cron"},
		{"0 2 * *", "UTC", "cron"},
		{"CRON_TZ=UTC 0 2 * * *", "UTC", "cron"},
		{"0 2 * * *", "Mars/Olympus", "time_zone"},
		{"0 2 * * *", "", "time_zone"},
		{"0 2 * * *", "Local", "time_zone"},
	} {
		_, err := parseCron(tt.expr, tt.tz)
		var fe *FieldError
		require.ErrorAs(t, err, &fe, tt.expr)
		require.Equal(t, tt.field, fe.Field, "%s %s", tt.expr, tt.tz)
	}
}

// TestParseOperations: FLOW_WINDOW_OPERATIONS.
func TestParseOperations(t *testing.T) {
	t.Parallel()
	ops, err := ParseOperations("")
	require.NoError(t, err)
	require.Equal(t, DefaultOperations, ops)
	require.NotContains(t, ops, "power_on")
	ops, err = ParseOperations(" cold_reset, firmware_control ,cold_reset")
	require.NoError(t, err)
	require.Equal(t, []string{"cold_reset", "firmware_control"}, ops)
	ops, err = ParseOperations("none")
	require.NoError(t, err)
	require.Empty(t, ops)
	_, err = ParseOperations("power_cycle")
	require.ErrorContains(t, err, `unknown operation "power_cycle"`)
}

// TestScopeCoversRows: a row is named as compliance names it ("03" for
// position "row-03-pos-07"), with or without its "row" prefix.
func TestScopeCoversRows(t *testing.T) {
	t.Parallel()
	r := inventory.Rack{Location: inventory.Location{Room: "hall-0", Position: "row-03-pos-07"}}
	for _, row := range []string{"03", "row-03", "ROW 03", "Row_03"} {
		require.True(t, Scope{Rows: []string{row}}.Covers(r), row)
	}
	for _, row := range []string{"04", "row-30", "hall-0"} {
		require.False(t, Scope{Rows: []string{row}}.Covers(r), row)
	}
	require.True(t, Scope{Halls: []string{"hall-0"}}.Covers(r))
}
