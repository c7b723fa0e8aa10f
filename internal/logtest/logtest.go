// Package logtest records what a component logs, so a test can check that it said why it did
// something (and with which counts) without reading its output by eye.
package logtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// Recorder is a slog.Handler that keeps every record, from debug up, as one text line:
// "LEVEL message key=value key=value…", attributes of With first, groups flattened.
type Recorder struct {
	root  *Recorder
	attrs []slog.Attr

	// Only the root's fields below are used.
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced on every record
}

// New returns an empty recorder.
func New() *Recorder {
	r := &Recorder{changed: make(chan struct{})}
	r.root = r
	return r
}

// Logger returns a logger that writes into the recorder.
func (r *Recorder) Logger() *slog.Logger { return slog.New(r) }

// Enabled implements slog.Handler: everything from debug up is kept.
func (r *Recorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
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
func (r *Recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &Recorder{root: r.root, attrs: append(append([]slog.Attr(nil), r.attrs...), as...)}
}

// WithGroup implements slog.Handler; groups are flattened.
func (r *Recorder) WithGroup(string) slog.Handler { return r }

// Lines returns the lines recorded so far.
func (r *Recorder) Lines() []string {
	root := r.root
	root.mu.Lock()
	defer root.mu.Unlock()
	return append([]string(nil), root.lines...)
}

// Wait returns the first line containing every one of parts, waiting up to d for it; it fails
// the test, with everything logged, when none comes.
func (r *Recorder) Wait(t testing.TB, d time.Duration, parts ...string) string {
	t.Helper()
	root := r.root
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		root.mu.Lock()
		changed := root.changed
		for _, l := range root.lines {
			if containsAll(l, parts) {
				root.mu.Unlock()
				return l
			}
		}
		all := strings.Join(root.lines, "\n")
		root.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
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
