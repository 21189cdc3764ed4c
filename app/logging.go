package app

import (
	"io"
	"log/slog"
	"time"

	"github.com/nicoflow/flow/telemetry"
)

// newLogger returns the process logger: JSON or text on w at level. Every
// duration attribute is written readably ("412µs", "1.5s"), never as JSON's
// integer nanoseconds. A warning or error that repeats (the same message
// and error, as in a database outage) is written once per
// telemetry.RepeatInterval, then summarised with its count; River's logger
// derives from this one and collapses alike.
func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: readableDurations}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if format == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(telemetry.LimitRepeats(h, telemetry.RepeatInterval))
}

// readableDurations writes a duration attribute as its Go string, rounded
// to the microsecond below a minute (timings carry no meaning in
// nanoseconds) and to the millisecond above.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindDuration {
		return a
	}
	d := a.Value.Duration()
	if d < time.Minute {
		d = d.Round(time.Microsecond)
	} else {
		d = d.Round(time.Millisecond)
	}
	return slog.String(a.Key, d.String())
}
