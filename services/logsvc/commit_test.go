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

// TestRecordsOrderByFireTime: behind a backlog a cycle takes a fire's record with its result.
// The record of a fire sent ahead of its time (dispatched 200 ms before it) orders by the
// fire's scheduled time, as its result orders by the run's time, not by its dispatch: taken by
// dispatch time, records 200 ms ahead of the results taken with them would be written alone.
func TestRecordsOrderByFireTime(t *testing.T) {
	t.Parallel()
	s := &Service{queue: newQueue()}
	records, results := s.queue.open(), s.queue.open()
	var recs []*logsv1.TriggerRecord
	for i := range 3 {
		r := record(fmt.Sprintf("7-%d-0-0", base+int64(i)), 7, base+int64(i))
		r.TriggerUnixMs = r.ScheduledUnixMs - 200
		recs = append(recs, r)
	}
	rt := recordsTicket(recs)
	if rt.eventMs != base {
		t.Fatalf("records batch event time %d, want its oldest fire's scheduled time %d", rt.eventMs, base)
	}
	rt.ctx, rt.lane, rt.left = context.Background(), records, len(rt.ops)
	// Results of earlier fires, which ended 100 ms before the first record's fire was due:
	// they go first, and the records wait for the results of their own fires.
	early := resultsTicket([]*logsv1.RunResult{result("6-1", 6, logsv1.RunStatus_RUN_STATUS_SUCCESS, base-150)})
	early.ctx, early.lane, early.left = context.Background(), results, len(early.ops)
	_, early.eventMs = resultsStats(&logsv1.IngestResultsRequest{Results: []*logsv1.RunResult{result("6-1", 6, logsv1.RunStatus_RUN_STATUS_SUCCESS, base-150)}})
	records.waiting, results.waiting = []*ticket{rt}, []*ticket{early}
	taken, _ := s.takeLocked(maxCycleItems - 2)
	if len(taken) != 1 || taken[0] != early {
		t.Errorf("with room for one batch the cycle took %d batches (first %p), want the earlier results %p", len(taken), taken[0], early)
	}
}
