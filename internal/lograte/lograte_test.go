package lograte

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLimiterHoldsBackAndCounts: past the burst a window's lines are held back and counted in
// one line at its end; the next window writes lines again.
func TestLimiterHoldsBackAndCounts(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	l := New(log, slog.LevelWarn, "trigger given up", 3, time.Second)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	var due []func()
	var waits []time.Duration
	l.afterFunc = func(d time.Duration, f func()) *time.Timer {
		waits, due = append(waits, d), append(due, f)
		return nil
	}
	ctx := context.Background()
	for i := range 10 {
		if i == 3 {
			now = now.Add(400 * time.Millisecond)
		}
		l.Log(ctx, "n", i)
	}
	if got := strings.Count(buf.String(), "\n"); got != 3 {
		t.Fatalf("wrote %d lines of 10 in a window, want 3:\n%s", got, buf.String())
	}
	if len(due) != 1 || waits[0] != 600*time.Millisecond {
		t.Fatalf("counts scheduled %d, in %v; want one, at the window's end (600ms)", len(due), waits)
	}
	due[0]()
	want := `level=WARN msg="trigger given up (more, not written one by one)" held_back=7 limit=3 per=1s`
	if last := lastLine(buf.String()); last != want {
		t.Fatalf("count line %q, want %q", last, want)
	}
	due[0]() // nothing held back since: nothing written
	if got := strings.Count(buf.String(), "\n"); got != 4 {
		t.Fatalf("an empty count wrote a line:\n%s", buf.String())
	}

	now = now.Add(time.Second)
	l.Log(ctx, "n", 10)
	if last := lastLine(buf.String()); last != `level=WARN msg="trigger given up" n=10` {
		t.Fatalf("the next window's first line %q, want it written", last)
	}
	for i := range 4 { // a window after a count holds back and counts again
		l.Log(ctx, "n", 11+i)
	}
	if len(due) != 2 {
		t.Fatalf("counts scheduled %d; want a second one for the second window", len(due))
	}
	due[1]()
	if last := lastLine(buf.String()); !strings.Contains(last, "held_back=2 ") {
		t.Fatalf("second count line %q, want held_back=2", last)
	}
}

// TestLimiterOffWhenTheLevelIs: a level the logger does not write costs nothing and counts nothing.
func TestLimiterOffWhenTheLevelIs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))
	l := New(log, slog.LevelWarn, "trigger failed", 1, time.Second)
	l.afterFunc = func(time.Duration, func()) *time.Timer {
		t.Fatal("a count was scheduled for lines the logger does not write")
		return nil
	}
	for range 5 {
		l.Log(context.Background(), "n", 1)
	}
	if buf.Len() != 0 {
		t.Fatalf("wrote %q", buf.String())
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
