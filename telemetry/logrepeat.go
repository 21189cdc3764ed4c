package telemetry

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// RepeatInterval is how often Flow's logger writes one warning or error
// that keeps repeating (LimitRepeats): during a database outage every
// replica's River client and pool would otherwise write ~70 ERROR lines a
// second.
const RepeatInterval = 10 * time.Second

// LimitRepeats returns a handler that writes to next, but collapses
// repeated errors: a WARN or ERROR record with an error attribute ("error"
// or "err") whose message and string attributes (the error's text among
// them), through the same logger, were already written less than interval
// ago is counted instead of written, and when that interval ends one summary
// line follows, the first record's message and attributes with
// repeated=<count> and repeat_interval. Other records (no error attribute,
// or below WARN) pass unchanged. Handlers derived with WithAttrs and
// WithGroup share the count, so River's logger and Flow's collapse alike.
func LimitRepeats(next slog.Handler, interval time.Duration) slog.Handler {
	return &repeatLimiter{next: next, state: &repeatState{interval: interval, seen: map[repeatKey]*repeatEntry{}}}
}

type repeatLimiter struct {
	next  slog.Handler
	state *repeatState
}

type repeatKey struct {
	handler    *repeatLimiter // a logger.With has its own attributes
	level      slog.Level
	msg, attrs string
}

type repeatState struct {
	interval time.Duration
	mu       sync.Mutex
	seen     map[repeatKey]*repeatEntry
}

// repeatEntry is one key's interval: its first record (and the handler
// that wrote it, for the summary) and how many repeats were dropped.
type repeatEntry struct {
	first      slog.Record
	handler    slog.Handler
	suppressed int
}

func (h *repeatLimiter) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *repeatLimiter) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &repeatLimiter{next: h.next.WithAttrs(attrs), state: h.state}
}

func (h *repeatLimiter) WithGroup(name string) slog.Handler {
	return &repeatLimiter{next: h.next.WithGroup(name), state: h.state}
}

func (h *repeatLimiter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	// The key: the message, the error and every string attribute (the IDs
	// a line is about: task_id, rack, method), so only the same error
	// about the same things collapses, never one task's story into
	// another's. Numbers and durations (attempt counts, backoffs) vary
	// between repeats and are left out.
	var key strings.Builder
	hasError := false
	r.Attrs(func(a slog.Attr) bool {
		switch {
		case a.Key == "error" || a.Key == "err":
			hasError = true
		case a.Value.Kind() != slog.KindString:
			return true
		}
		v := a.Value.String()
		if len(v) > 512 {
			v = v[:512]
		}
		key.WriteString(a.Key)
		key.WriteByte('=')
		key.WriteString(v)
		key.WriteByte(0)
		return true
	})
	if !hasError {
		return h.next.Handle(ctx, r)
	}
	k := repeatKey{handler: h, level: r.Level, msg: r.Message, attrs: key.String()}
	s := h.state
	s.mu.Lock()
	if e := s.seen[k]; e != nil {
		e.suppressed++
		s.mu.Unlock()
		return nil
	}
	s.seen[k] = &repeatEntry{first: r.Clone(), handler: h.next}
	s.mu.Unlock()
	// The summary goes out under the first record's context (its trace),
	// whether or not that call has ended.
	sumCtx := context.WithoutCancel(ctx)
	time.AfterFunc(s.interval, func() { s.flush(sumCtx, k) })
	return h.next.Handle(ctx, r)
}

// flush ends key's interval: the summary line when repeats were dropped.
// The next record of key is written in full and opens a new interval.
func (s *repeatState) flush(ctx context.Context, key repeatKey) {
	s.mu.Lock()
	e := s.seen[key]
	delete(s.seen, key)
	s.mu.Unlock()
	if e == nil || e.suppressed == 0 {
		return
	}
	sum := slog.NewRecord(time.Now(), e.first.Level, e.first.Message, 0)
	e.first.Attrs(func(a slog.Attr) bool {
		sum.AddAttrs(a)
		return true
	})
	sum.AddAttrs(slog.Int("repeated", e.suppressed), slog.Duration("repeat_interval", s.interval))
	_ = e.handler.Handle(ctx, sum)
}
