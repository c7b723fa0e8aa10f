// Package clock is the time source of scheduling code. Code that decides when jobs fire takes a
// Clock instead of calling time.Now or time.Sleep, so production runs on the wall clock and tests
// drive time by hand with a Fake, without sleeping and without flaking.
package clock

import "time"

// Clock tells the time and arms timers; it is the only way scheduling code learns what time it is.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of time.Timer that scheduling code needs, as an interface so that a Fake's
// timers can stand in for real ones.
type Timer interface {
	// C delivers the time the timer fired.
	C() <-chan time.Time
	// Stop prevents the timer from firing and reports whether it stopped a pending fire. After
	// Stop returns, no stale value is received from C (time.Timer's rule since Go 1.23).
	Stop() bool
	// Reset re-arms the timer to fire once after d, reporting whether a fire was pending. As with
	// Stop, no value from before the Reset is received afterwards.
	Reset(d time.Duration) bool
}

// Real returns the wall clock, the Clock every service uses outside tests.
func Real() Clock { return realClock{} }

// realClock delegates to package time.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// realTimer adapts *time.Timer, whose channel is a field, to Timer.
type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
