// Package lograte bounds how many lines one repeated log message writes. Under overload a
// scheduler gives up fires by the thousand a second; a warning for each cost the CPU and the
// disk the process needed to recover (over a gigabyte of log in five minutes), and said nothing
// that the first lines, a count, and each fire's own stored record do not.
package lograte

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Limiter writes one message at most Burst times per Window; the lines held back in a window
// are counted and written as one line when the window ends.
type Limiter struct {
	log    *slog.Logger
	level  slog.Level
	msg    string
	burst  int
	window time.Duration

	// now and afterFunc are the wall clock (the measure of a log's rate, not scheduling), set
	// apart for tests.
	now       func() time.Time
	afterFunc func(time.Duration, func()) *time.Timer

	mu       sync.Mutex
	start    time.Time // the window's start
	written  int       // lines written in the window
	held     int       // lines held back since the last count was written
	counting bool      // a count is due at the window's end
}

// New returns a Limiter that writes msg at level to log at most burst times per window.
func New(log *slog.Logger, level slog.Level, msg string, burst int, window time.Duration) *Limiter {
	return &Limiter{log: log, level: level, msg: msg, burst: max(burst, 1), window: window,
		now: time.Now, afterFunc: time.AfterFunc}
}

// Log writes the message with args, unless the window's lines are written already: then the
// line is counted, and the count written at the window's end ("held_back").
func (l *Limiter) Log(ctx context.Context, args ...any) {
	if !l.log.Enabled(ctx, l.level) {
		return
	}
	now := l.now()
	l.mu.Lock()
	if now.Sub(l.start) >= l.window {
		l.start, l.written = now, 0
	}
	if l.written < l.burst {
		l.written++
		l.mu.Unlock()
		l.log.Log(ctx, l.level, l.msg, args...)
		return
	}
	l.held++
	due := !l.counting
	l.counting = true
	wait := l.start.Add(l.window).Sub(now)
	l.mu.Unlock()
	if due {
		l.afterFunc(wait, l.writeCount)
	}
}

// writeCount writes how many lines were held back since the last count.
func (l *Limiter) writeCount() {
	l.mu.Lock()
	n := l.held
	l.held, l.counting = 0, false
	l.mu.Unlock()
	if n > 0 {
		l.log.Log(context.Background(), l.level, l.msg+" (more, not written one by one)", "held_back", n,
			"limit", l.burst, "per", l.window)
	}
}
