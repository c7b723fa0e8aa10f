package registry_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// logRecorder is a slog.Handler that keeps every record as one text line, so tests can check
// that a component said why it did something.
type logRecorder struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced on every record
	attrs   []slog.Attr
	root    *logRecorder
}

func newLogRecorder() *logRecorder {
	r := &logRecorder{changed: make(chan struct{})}
	r.root = r
	return r
}

// Logger returns a logger that writes into the recorder.
func (r *logRecorder) Logger() *slog.Logger { return slog.New(r) }

// Enabled implements slog.Handler: everything from debug up is kept.
func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	for _, a := range r.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	root := r.root
	root.mu.Lock()
	root.lines = append(root.lines, b.String())
	close(root.changed)
	root.changed = make(chan struct{})
	root.mu.Unlock()
	return nil
}

// WithAttrs implements slog.Handler.
func (r *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{root: r.root, attrs: append(append([]slog.Attr(nil), r.attrs...), as...)}
}

// WithGroup implements slog.Handler; groups are flattened.
func (r *logRecorder) WithGroup(string) slog.Handler { return r }

// wait returns the first line containing every one of parts, waiting up to d for it.
func (r *logRecorder) wait(t *testing.T, d time.Duration, parts ...string) string {
	t.Helper()
	deadline := time.After(d)
	for {
		r.mu.Lock()
		changed := r.changed
		for _, l := range r.lines {
			if containsAll(l, parts) {
				r.mu.Unlock()
				return l
			}
		}
		all := strings.Join(r.lines, "\n")
		r.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no log line with %q within %v; logged:\n%s", parts, d, all)
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
