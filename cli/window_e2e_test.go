package cli_test

import (
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCLIWindows: windows and freezes from the CLI on a real server:
// create (a recurrence, a one-off), list, get, bad input named, a power
// reset held by the freeze and released by an admin with a reason, delete.
func TestCLIWindows(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	b := s.bundle()
	s.addRack(t, 0, rackOptions{})
	s.addRack(t, 1, rackOptions{})

	out := b.mustFlow(t, "window", "create", "saturdays", "--cron", "0 2 * * SAT", "--tz", "Europe/Paris", "--duration", "4h", "--site", "--description", "weekly")
	require.Contains(t, out, "0 2 * * SAT Europe/Paris for 4h0m0s")
	require.Contains(t, out, "site")
	now := time.Now().UTC()
	b.mustFlow(t, "freeze", "create", "incident", "--from", now.Add(-time.Hour).Format(time.RFC3339), "--until", now.Add(time.Hour).Format(time.RFC3339),
		"--rack", "demo-0000", "--hall", "hall-0")

	out = b.mustFlow(t, "window", "list")
	require.Contains(t, out, "saturdays")
	require.NotContains(t, out, "incident")
	out = b.mustFlow(t, "freeze", "list")
	require.Contains(t, out, "incident")
	require.Contains(t, out, "hall=hall-0 rack=demo-0000", "racks by name")
	require.Contains(t, out, "yes", "open now")
	out = b.mustFlow(t, "freeze", "get", "incident")
	require.Contains(t, out, "incident")

	// The console lists both.
	res, err := http.Get(s.url + "/ui/windows")
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(page))
	require.Contains(t, string(page), `<tr data-name="saturdays">`)
	require.Contains(t, string(page), `<tr data-name="incident">`)
	require.Contains(t, string(page), "0 2 * * SAT")
	require.Contains(t, string(page), ">demo-0000</a>", "racks by name")

	requireFlowError(t, b, `invalid_argument: cron: invalid cron expression "0 2 * * XYZ"`, "window", "create", "bad", "--cron", "0 2 * * XYZ", "--tz", "UTC", "--duration", "1h", "--site")
	requireFlowError(t, b, `invalid_argument: time_zone: unknown time zone "Mars/Olympus"`, "window", "create", "bad", "--cron", "0 2 * * SAT", "--tz", "Mars/Olympus", "--duration", "1h", "--site")
	requireFlowError(t, b, "invalid_argument: duration: must be positive", "window", "create", "bad", "--cron", "0 2 * * SAT", "--tz", "UTC", "--duration", "0s", "--site")
	requireFlowError(t, b, "invalid_argument: scope: names nothing", "window", "create", "bad", "--cron", "0 2 * * SAT", "--tz", "UTC", "--duration", "1h")
	requireFlowError(t, b, `invalid_argument: scope.racks[0]: rack not found`, "freeze", "create", "bad", "--from", "2026-12-24T00:00:00Z", "--until", "2026-12-26T00:00:00Z", "--rack", "nope")
	requireFlowError(t, b, "invalid_argument: ends_at:", "freeze", "create", "bad", "--from", "2026-12-26T00:00:00Z", "--until", "2026-12-24T00:00:00Z", "--site")
	requireFlowError(t, b, "not_found", "window", "get", "bad")

	// The freeze holds a power reset of demo-0000; an admin releases it.
	out = b.mustFlow(t, "power", "reset", "demo-0000")
	id := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}`).FindString(out)
	require.NotEmpty(t, id, out)
	require.Contains(t, out, `waiting (1 of 1): Held: in freeze "incident" until`, "the submission says why it waits")
	out = b.mustFlow(t, "task", "get", id)
	require.Contains(t, out, `Held: in freeze "incident" until`)
	require.Contains(t, out, "next window opens at")
	requireFlowError(t, b, "--reason is required", "task", "release", id)
	out = b.mustFlow(t, "task", "release", id, "--reason", "vendor on site")
	require.Contains(t, out, "released from maintenance windows (vendor on site); now ")
	// The task's own message names who released it, until its run moves it on.
	require.NotContains(t, b.mustFlow(t, "task", "get", id), "Held:")

	out = b.mustFlow(t, "freeze", "delete", "incident")
	require.Contains(t, out, "deleted freeze incident")
	require.Equal(t, "no freezes", b.mustFlow(t, "freeze", "list"))
	b.mustFlow(t, "window", "delete", "saturdays")
}
