package app

import (
	"io"
	"log/slog"
	"time"
)

// newLogger returns the process logger: JSON or text on w at level. Every
// duration attribute is written readably ("412µs", "1.5s"), never as JSON's
// integer nanoseconds.
func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: readableDurations}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
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
