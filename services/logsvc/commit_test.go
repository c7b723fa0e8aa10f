package logsvc

import (
	"context"
	"fmt"
	"slices"
	"testing"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
)

// queuedTicket is a batch of n records on lane l, its oldest event at eventMs.
func queuedTicket(l *lane, eventMs int64, n int) *ticket {
	var recs []*logsv1.TriggerRecord
	for i := range n {
		recs = append(recs, record(fmt.Sprintf("%d-%d", eventMs, i), 160, base))
	}
	t := recordsTicket(recs)
	t.ctx, t.lane, t.eventMs = context.Background(), l, eventMs
	t.left = len(t.ops)
	return t
}

// TestTakeOldestFirst checks that a cycle takes batches oldest event first across the streams'
// lanes, each lane in its order, so a stream that fell behind is written first.
func TestTakeOldestFirst(t *testing.T) {
	t.Parallel()
	s := &Service{queue: newQueue()}
	records, results := s.queue.open(), s.queue.open()
	records.waiting = []*ticket{queuedTicket(records, 10, 5), queuedTicket(records, 40, 5), queuedTicket(records, 20, 5)}
	results.waiting = []*ticket{queuedTicket(results, 30, 5), queuedTicket(results, 50, 5)}
	taken, backlog := s.takeLocked(0)
	var got []int64
	for _, tk := range taken {
		got = append(got, tk.eventMs)
	}
	// The records lane's third batch is older than its second, and waits for it.
	if want := []int64{10, 30, 40, 20, 50}; !slices.Equal(got, want) || backlog {
		t.Errorf("took %v (backlog %v), want %v and no backlog", got, backlog, want)
	}
	records.waiting = []*ticket{queuedTicket(records, 60, 5)}
	if taken, backlog := s.takeLocked(maxCycleItems - 4); len(taken) != 0 || !backlog {
		t.Errorf("with the cycle nearly full: took %d batches (backlog %v), want none and a backlog", len(taken), backlog)
	}
}

// TestLaneShare checks that a stream's lane holds at most its share of the queue, so one
// stream cannot crowd out the others, and that a lane holding nothing takes any batch.
func TestLaneShare(t *testing.T) {
	t.Parallel()
	q := newQueue()
	a, b := q.open(), q.open()
	a.held = 10
	for _, c := range []struct {
		name string
		t    *ticket
		want bool
	}{
		{"full lane", queuedTicket(a, 1, 5), false},
		{"other lane", queuedTicket(b, 1, 5), true},
		{"empty lane, a batch over its share", queuedTicket(b, 1, 50), true},
	} {
		if got := q.fitsLocked(c.t, 20); got != c.want {
			t.Errorf("%s: fits %v, want %v", c.name, got, c.want)
		}
	}
	b.held = 5
	if q.fitsLocked(queuedTicket(b, 1, 6), 20) {
		t.Errorf("a batch past the lane's share of 10: fits, want not")
	}
}
