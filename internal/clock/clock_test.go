package clock_test

import (
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/clock"
)

var start = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)

// receive returns the next value from c, failing the test after a bounded wait.
func receive(t *testing.T, c <-chan time.Time) time.Time {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("timer did not fire within 5s")
		return time.Time{}
	}
}

// assertNotFired fails if c holds a value. Fake timers deliver inside Advance and Set, so an
// empty channel right after them means the timer did not fire.
func assertNotFired(t *testing.T, c <-chan time.Time) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("timer fired with %v, want no fire", v)
	default:
	}
}

func TestRealTimerFires(t *testing.T) {
	t.Parallel()
	clk := clock.Real()
	before := time.Now()
	if got := clk.Now(); got.Before(before) {
		t.Errorf("Now() = %v, want not before %v", got, before)
	}
	tm := clk.NewTimer(time.Millisecond)
	receive(t, tm.C())
	if got := tm.Stop(); got {
		t.Errorf("Stop() after fire = %t, want false", got)
	}
	if got := tm.Reset(time.Hour); got {
		t.Errorf("Reset() of a stopped timer = %t, want false", got)
	}
	if got := tm.Stop(); !got {
		t.Errorf("Stop() of a pending timer = %t, want true", got)
	}
}

func TestFakeAdvanceFiresAtDeadline(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(start)
	tm := f.NewTimer(10 * time.Millisecond)
	f.Advance(9 * time.Millisecond)
	assertNotFired(t, tm.C())
	f.Advance(time.Millisecond)
	if got, want := receive(t, tm.C()), start.Add(10*time.Millisecond); !got.Equal(want) {
		t.Errorf("fired with %v, want %v", got, want)
	}
	if got, want := f.Now(), start.Add(10*time.Millisecond); !got.Equal(want) {
		t.Errorf("Now() = %v, want %v", got, want)
	}
	f.Advance(time.Hour)
	assertNotFired(t, tm.C()) // fires once
}

// A timer passed over by one long Advance reports its own deadline, not where Advance stopped.
func TestFakeAdvanceDeliversDeadlines(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(start)
	delays := []time.Duration{30 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 10 * time.Millisecond}
	timers := make([]clock.Timer, len(delays))
	for i, d := range delays {
		timers[i] = f.NewTimer(d)
	}
	f.Advance(time.Second)
	for i, tm := range timers {
		if got, want := receive(t, tm.C()), start.Add(delays[i]); !got.Equal(want) {
			t.Errorf("timer %d fired with %v, want %v", i, got, want)
		}
	}
}

func TestFakeStopAndReset(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(start)
	tm := f.NewTimer(time.Second)
	if got := tm.Stop(); !got {
		t.Errorf("Stop() of a pending timer = %t, want true", got)
	}
	if got := tm.Stop(); got {
		t.Errorf("second Stop() = %t, want false", got)
	}
	f.Advance(time.Hour)
	assertNotFired(t, tm.C())

	if got := tm.Reset(time.Second); got {
		t.Errorf("Reset() of a stopped timer = %t, want false", got)
	}
	f.Advance(time.Second)
	// The value sits undelivered: Reset drops it and counts it as pending, like time.Timer.
	if got := tm.Reset(time.Second); !got {
		t.Errorf("Reset() with an undelivered fire = %t, want true", got)
	}
	assertNotFired(t, tm.C())
	f.Advance(time.Second)
	if got, want := receive(t, tm.C()), start.Add(time.Hour+2*time.Second); !got.Equal(want) {
		t.Errorf("fired with %v, want %v", got, want)
	}
}

func TestFakeNonPositiveDelayFiresAtOnce(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(start)
	if got, want := receive(t, f.NewTimer(0).C()), start; !got.Equal(want) {
		t.Errorf("NewTimer(0) fired with %v, want %v", got, want)
	}
	tm := f.NewTimer(time.Hour)
	tm.Reset(-time.Second)
	if got, want := receive(t, tm.C()), start.Add(-time.Second); !got.Equal(want) {
		t.Errorf("Reset(-1s) fired with %v, want %v", got, want)
	}
}

func TestFakeSetJumps(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(start)
	tm := f.NewTimer(time.Minute)
	f.Set(start.Add(-time.Hour)) // back: the deadline is further away than before
	assertNotFired(t, tm.C())
	if got, want := f.Now(), start.Add(-time.Hour); !got.Equal(want) {
		t.Errorf("Now() = %v, want %v", got, want)
	}
	f.Advance(time.Hour)
	assertNotFired(t, tm.C())
	f.Set(start.Add(time.Hour)) // forward past the deadline: fires, late
	if got, want := receive(t, tm.C()), start.Add(time.Minute); !got.Equal(want) {
		t.Errorf("fired with %v, want %v", got, want)
	}
}

func TestFakeBlockUntilTimers(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(start)
	woke := make(chan time.Time)
	for range 2 {
		go func() {
			tm := f.NewTimer(time.Second)
			woke <- <-tm.C()
		}()
	}
	done := make(chan struct{})
	go func() {
		f.BlockUntilTimers(2)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("BlockUntilTimers(2) did not return within 5s")
	}
	f.Advance(time.Second)
	for range 2 {
		select {
		case got := <-woke:
			if want := start.Add(time.Second); !got.Equal(want) {
				t.Errorf("woke with %v, want %v", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("waiter did not wake within 5s")
		}
	}
	f.BlockUntilTimers(0) // nothing armed now; must not block
}
