package scheduler

import (
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/ring"
)

// TestHeldBackRetryIsNotArmedFromAnEarlierRead: a retry that a correction held back (its row's
// due time set to never) is not armed from a read of pending_fires that began before the hold,
// which may still return it due; the release, which arms it itself, does.
func TestHeldBackRetryIsNotArmedFromAnEarlierRead(t *testing.T) {
	clk := clock.NewFake(time.Now())
	l := &engine{ring: ring.New(clk, func([]ringEntry) {}), owed: newOwed()}
	retry := func() *fire { return &fire{job: &jobRow{ID: 7}, fireMs: 1000, attempt: 1, kind: kindRetry} }
	k := retry().key()
	armed := func() int {
		es := l.ring.RemoveJob(7)
		for _, e := range es {
			l.ring.Add(e)
		}
		return len(es)
	}

	readAt := time.Now()
	l.armPendingRead(retry(), 5000, readAt)
	if armed() != 1 {
		t.Fatal("a read's due retry was not armed")
	}
	l.disarmPending(k, false) // the correction holds it back
	if armed() != 0 || l.claims.held(k) {
		t.Fatal("the held-back retry is still armed or claimed")
	}
	l.armPendingRead(retry(), 5000, readAt) // a read that began before the hold returns it
	if armed() != 0 {
		t.Fatal("a read older than the hold armed the held-back retry")
	}
	l.armPending(retry(), 6000) // the release arms it
	if armed() != 1 {
		t.Fatal("the released retry was not armed")
	}
	l.armPendingRead(retry(), 6000, time.Now()) // a later read finds it claimed
	if armed() != 1 {
		t.Fatal("a later read armed the retry a second time")
	}
}

// TestArmRacingADeleteOrAHold: an arm whose claim a delete ended, or whose key a hold marked,
// between its claim and its add (disarmPending looked before the add) takes its own entry out
// and leaves the job's others; one the ring fired meanwhile keeps its claim.
func TestArmRacingADeleteOrAHold(t *testing.T) {
	clk := clock.NewFake(time.Now())
	for _, tc := range []struct {
		name      string
		deleted   bool
		fired     bool // the ring fired the entry before the check
		wantEntry bool
		wantClaim bool
	}{
		{"delete", true, false, false, false},
		{"hold", false, false, false, false},
		{"hold of a fire on its way", false, true, false, true},
		{"nothing", false, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &engine{ring: ring.New(clk, func([]ringEntry) {}), owed: newOwed()}
			other := &fire{job: &jobRow{ID: 7}, fireMs: 2000, kind: kindChild, parent: 3}
			l.armPending(other, 2000)
			f := &fire{job: &jobRow{ID: 7}, fireMs: 1000, attempt: 1, kind: kindRetry}
			k := f.key()
			// armPendingRead's steps, with the race between them.
			n, ok := l.claims.claimRead(k, time.Now())
			if !ok {
				t.Fatal("not claimed")
			}
			if tc.name != "nothing" {
				l.disarmPending(k, tc.deleted) // finds nothing armed yet
			}
			tag := l.tags.Add(1)
			l.ring.Add(ringEntry{JobID: 7, FireAt: 1000, Tag: tag, Value: f})
			if tc.fired {
				l.ring.RemoveIf(7, func(e ringEntry) bool { return e.Tag == tag })
			}
			l.keepArmed(k, n, 7, tag)
			es := l.ring.RemoveJob(7)
			armed := len(es) == 2
			if len(es) < 1 || es[len(es)-1].Value != other {
				t.Fatalf("the job's other fire is gone: %d entries", len(es))
			}
			if armed != tc.wantEntry || l.claims.held(k) != tc.wantClaim {
				t.Fatalf("entry armed %v, claim held %v; want %v, %v", armed, l.claims.held(k), tc.wantEntry, tc.wantClaim)
			}
		})
	}
}

// TestHeldBackRetryOnItsWayIsNotArmedAgain: a retry already taken from the ring (on its way to
// its executor) when a correction holds it back keeps its claim, so the release, which arms the
// retry, does not send it a second time.
func TestHeldBackRetryOnItsWayIsNotArmedAgain(t *testing.T) {
	clk := clock.NewFake(time.Now())
	l := &engine{ring: ring.New(clk, func([]ringEntry) {}), owed: newOwed()}
	f := &fire{job: &jobRow{ID: 7}, fireMs: 1000, attempt: 1, kind: kindRetry}
	k := f.key()
	l.armPending(f, 5000)
	if len(l.ring.RemoveJob(7)) != 1 { // dispatched: out of the ring, still claimed
		t.Fatal("the retry was not armed")
	}
	l.disarmPending(k, false)
	if !l.claims.held(k) {
		t.Fatal("the hold ended the claim of a fire on its way")
	}
	l.armPending(&fire{job: f.job, fireMs: 1000, attempt: 1, kind: kindRetry}, 6000) // the release
	if n := len(l.ring.RemoveJob(7)); n != 0 {
		t.Fatalf("the release armed the retry on its way again (%d entries)", n)
	}
}
