package auth

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/clock"
)

// floodClock is the fake clock the throttle tests move.
func floodClock() *clock.Fake { return clock.NewFake(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)) }

// v4 is the i-th IPv4 client address (10.0.0.0/8 and up, distinct for i < 2^24).
func v4(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) }

// checkList fails unless the throttle's list holds exactly the counts of its map, oldest first.
func checkList(t testing.TB, th *throttle) {
	t.Helper()
	n := 0
	var prev *failures
	for f := th.oldest; f != nil; f = f.next {
		if th.state[f.key] != f || f.prev != prev || prev != nil && f.last.Before(prev.last) {
			t.Fatalf("the list is out of step with the map at %q", f.key)
		}
		prev, n = f, n+1
	}
	if n != len(th.state) || th.newest != prev {
		t.Fatalf("the list holds %d counts, the map %d", n, len(th.state))
	}
}

// TestThrottleLimitsAnIPv6Slash48: a site rotating through the /64s of its /48 (each a
// distinct address to the throttle) is locked out after NetMaxFailures (500) failures over all
// of them; another /48 and IPv4 clients are not.
func TestThrottleLimitsAnIPv6Slash48(t *testing.T) {
	t.Parallel()
	th, err := newThrottle(ThrottleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	clk := floodClock()
	for i := range 500 {
		client := addrKeyOf(fmt.Sprintf("2001:db8:1:%x::1", i))
		if wait, _, err := th.reserve(fmt.Sprintf("user-%d", i), client, clk.Now()); wait > 0 || err != nil {
			t.Fatalf("failure %d from the /48 (a new /64): wait %v, %v; want counted", i+1, wait, err)
		}
		clk.Advance(time.Millisecond)
	}
	wait, _, err := th.reserve("user-new", addrKeyOf("2001:db8:1:ffff::1"), clk.Now())
	if wait <= 0 || err != nil {
		t.Errorf("a guess from a 501st /64 of the /48: wait %v, %v; want a lockout", wait, err)
	}
	if wait, _, err := th.reserve("user-new", addrKeyOf("2001:db8:2:1::1"), clk.Now()); wait > 0 || err != nil {
		t.Errorf("a guess from another /48: wait %v, %v; want counted", wait, err)
	}
	if wait, _, err := th.reserve("user-new", "192.0.2.1", clk.Now()); wait > 0 || err != nil {
		t.Errorf("a guess from an IPv4 address: wait %v, %v; want counted", wait, err)
	}
}

// TestThrottleStaysUnderItsCapInAFlood: a flood of guesses from ever new addresses keeps the
// counts at MaxEntries at most without forgetting a running lockout; once the flood is quiet
// for MaxLockout its counts are forgotten a few at each guess.
func TestThrottleStaysUnderItsCapInAFlood(t *testing.T) {
	t.Parallel()
	th, err := newThrottle(ThrottleConfig{MaxEntries: 20000, Lockout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clk := floodClock()
	const victim = "198.51.100.7" // locked out for 10 min for trying 50 names
	for i := range 50 {
		if _, _, err := th.reserve(fmt.Sprintf("name-%d", i), victim, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100000 { // 1 ms apart: 100 s, within the victim's lockout
		if _, _, err := th.reserve(fmt.Sprintf("user-%d", i%3000), v4(i), clk.Now()); err != nil {
			t.Fatalf("guess %d of the flood: %v", i, err)
		}
		if n := len(th.state); n > th.cfg.MaxEntries {
			t.Fatalf("after guess %d of the flood: %d counts, want at most %d", i, n, th.cfg.MaxEntries)
		}
		clk.Advance(time.Millisecond)
	}
	checkList(t, th)
	if wait, _, _ := th.reserve("name-y", victim, clk.Now()); wait <= 0 {
		t.Errorf("the locked-out address after the flood: no wait, want its lockout still running")
	}
	clk.Advance(th.cfg.MaxLockout + time.Second)
	before := len(th.state)
	if _, _, err := th.reserve("someone", "192.0.2.1", clk.Now()); err != nil {
		t.Fatal(err)
	}
	if got := len(th.state); got > before-expireSteps+3 {
		t.Errorf("a guess after the flood was quiet for MaxLockout: %d counts, had %d; want %d forgotten", got, before, expireSteps)
	}
	for range before / expireSteps {
		_, _, _ = th.reserve("someone", "192.0.2.1", clk.Now())
	}
	if got := len(th.state); got > 3 {
		t.Errorf("after %d more guesses: %d counts, want the 3 of the last guesser", before/expireSteps, got)
	}
	checkList(t, th)
}

// TestThrottleFullOfLockoutsRefusesNewClients: when the oldest counts all have a lockout
// running, a guess that needs new counts is refused (errThrottleFull) rather than forgetting a
// lockout; an address already counted is answered as before, and when the lockouts end there
// is room again.
func TestThrottleFullOfLockoutsRefusesNewClients(t *testing.T) {
	t.Parallel()
	th, err := newThrottle(ThrottleConfig{MaxFailures: 1, AddrMaxFailures: 1, UserMaxFailures: 1000, MaxEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	clk := floodClock()
	for i := range 7 { // the pair and address of each lock; with tom's count, 15 counts
		if wait, _, err := th.reserve("tom", v4(i), clk.Now()); wait > 0 || err != nil {
			t.Fatalf("guess from address %d: wait %v, %v", i, wait, err)
		}
	}
	if _, _, err := th.reserve("tom", v4(100), clk.Now()); err != errThrottleFull {
		t.Errorf("a new address with 15 of 16 counts locked out or its own: %v, want errThrottleFull", err)
	}
	if wait, _, err := th.reserve("tom", v4(0), clk.Now()); wait <= 0 || err != nil {
		t.Errorf("a locked-out address: wait %v, %v; want its lockout", wait, err)
	}
	clk.Advance(th.cfg.Lockout)
	if wait, _, err := th.reserve("tom", v4(100), clk.Now()); wait > 0 || err != nil {
		t.Errorf("a new address once the lockouts ended: wait %v, %v; want counted", wait, err)
	}
	if n := len(th.state); n > 16 {
		t.Errorf("%d counts, want at most 16", n)
	}
	checkList(t, th)
}

// BenchmarkReserveUnderFlood measures a guess from a new address while the throttle is at its
// cap (the default 100,000 counts): "evicting" when the oldest counts have no lockout, "full"
// when they all have one and the guess is refused.
func BenchmarkReserveUnderFlood(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  ThrottleConfig
	}{
		{"evicting", ThrottleConfig{}},
		{"full", ThrottleConfig{MaxFailures: 1, AddrMaxFailures: 1, UserMaxFailures: 1 << 30}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			th, err := newThrottle(bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			clk := floodClock()
			i := 0
			for ; len(th.state) < th.cfg.MaxEntries-4; i++ {
				if _, _, err := th.reserve(fmt.Sprintf("user-%d", i%3000), v4(i), clk.Now()); err != nil {
					b.Fatal(err)
				}
				clk.Advance(time.Microsecond)
			}
			users, clients := make([]string, 1<<16), make([]string, 1<<16)
			for j := range users {
				users[j], clients[j] = fmt.Sprintf("user-%d", (i+j)%3000), v4(i+j)
			}
			b.ReportAllocs()
			b.ResetTimer()
			j := 0
			for b.Loop() {
				_, _, _ = th.reserve(users[j&(1<<16-1)], clients[j&(1<<16-1)], clk.Now())
				j++
				clk.Advance(time.Microsecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(len(th.state)), "counts")
		})
	}
}
