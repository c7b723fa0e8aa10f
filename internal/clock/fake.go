package clock

import (
	"sync"
	"time"
)

// Fake is a Clock whose time moves only when a test moves it, so tests of scheduling code are
// deterministic and never sleep. It lives here rather than in a clocktest package because it is
// tiny and every package that takes a Clock needs it in its tests. It is safe for concurrent use.
//
// A Fake timer fires when Advance or Set moves the time to or past its deadline, delivering the
// deadline on a channel with a buffer of one. Stop and Reset empty that buffer, so a Fake timer
// behaves like time.Timer since Go 1.23: no stale value is received after Stop or Reset.
type Fake struct {
	mu    sync.Mutex
	armed sync.Cond // broadcast whenever a timer is armed; L is &mu
	now   time.Time
	// timers are the armed timers, unordered; tests hold a handful.
	timers []*fakeTimer
	seq    uint64 // arming counter: timers due at the same instant fire in the order they were armed
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake clock that reads start until it is moved.
func NewFake(start time.Time) *Fake {
	f := &Fake{now: start}
	f.armed.L = &f.mu
	return f
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches Now()+d; at once if d <= 0.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), idx: -1}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arm(t, d)
	return t
}

// Advance moves the time forward by d and fires, in deadline order, every timer now due. A
// negative d moves the time back, as Set does.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.fireDue()
}

// Set jumps to t, forward or backward, as a stepped wall clock does, and fires the timers now due.
// After a jump back, timers wait until the time reaches their deadlines again.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
	f.fireDue()
}

// BlockUntilTimers waits until at least n timers are armed. It lets a test know that a goroutine
// has armed the timer it is about to wait on before the test moves the time.
func (f *Fake) BlockUntilTimers(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.timers) < n {
		f.armed.Wait()
	}
}

// Timers returns how many timers are armed now, for a test that moves the time only while a
// goroutine waits on one (BlockUntilTimers would wait forever when none will be armed).
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// arm schedules t to fire after d. f.mu must be held and t not armed.
func (f *Fake) arm(t *fakeTimer, d time.Duration) {
	f.seq++
	t.when, t.seq = f.now.Add(d), f.seq
	t.idx = len(f.timers)
	f.timers = append(f.timers, t)
	f.armed.Broadcast()
	if d <= 0 {
		f.fireDue()
	}
}

// disarm removes t from the armed timers, reporting whether it was armed. f.mu must be held.
func (f *Fake) disarm(t *fakeTimer) bool {
	i := t.idx
	if i < 0 {
		return false
	}
	last := len(f.timers) - 1
	f.timers[i] = f.timers[last]
	f.timers[i].idx = i
	f.timers[last] = nil
	f.timers = f.timers[:last]
	t.idx = -1
	return true
}

// fireDue fires every armed timer whose deadline is not after now, earliest first. f.mu must be held.
func (f *Fake) fireDue() {
	for {
		var next *fakeTimer
		for _, t := range f.timers {
			if t.when.After(f.now) {
				continue
			}
			if next == nil || t.when.Before(next.when) || t.when.Equal(next.when) && t.seq < next.seq {
				next = t
			}
		}
		if next == nil {
			return
		}
		f.disarm(next)
		select {
		case next.c <- next.when:
		default: // cannot happen: arming empties the buffer first
		}
	}
}

// fakeTimer is a Fake's Timer.
type fakeTimer struct {
	f    *Fake
	c    chan time.Time
	when time.Time // deadline, while armed
	seq  uint64
	idx  int // position in f.timers; -1 when not armed
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.stopLocked()
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	pending := t.stopLocked()
	t.f.arm(t, d)
	return pending
}

// stopLocked disarms t and drops an undelivered value; either counts as a pending fire, as for
// time.Timer. t.f.mu must be held.
func (t *fakeTimer) stopLocked() bool {
	pending := t.f.disarm(t)
	select {
	case <-t.c:
		pending = true
	default:
	}
	return pending
}
