package logsvc

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
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

// TestFreshFireStoredBefore: a cycle holding a fire's record and final result takes its run for
// new and inserts it without reading it (freshIDs). When the run was stored after all (here its
// record came before, alone, and is sent again with the result), the cycle runs again reading
// every run: the run ends with the result, once, and the cycle's other fire is written too.
func TestFreshFireStoredBefore(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			var logs lockedBuffer
			e := newEnvWith(t, st, Config{Retention: -1, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, false)
			e.mustRecords(t, record("151-again", 151, base))
			if r := e.run(t, "151-again"); r.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING {
				t.Fatalf("the record alone: run %s, want RUNNING", r.GetStatus())
			}
			q := e.svc.queue
			recs := recordsTicket([]*logsv1.TriggerRecord{record("151-again", 151, base), record("151-new", 151, base+1000)})
			res := resultsTicket([]*logsv1.RunResult{
				result("151-again", 151, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+3),
				result("151-new", 151, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+1003),
			})
			var ops []op
			for _, tk := range []*ticket{recs, res} {
				tk.ctx, tk.lane, tk.left = context.Background(), q.open(), len(tk.ops)
				ops = append(ops, tk.ops...)
			}
			parked, released := e.svc.writeCycle(ops, []*ticket{recs, res}, false)
			if len(parked) != 0 || released[recs] != 2 || released[res] != 2 {
				t.Fatalf("cycle: %d parked, released %d records and %d results; want none parked, 2 and 2", len(parked), released[recs], released[res])
			}
			for _, tk := range []*ticket{recs, res} {
				if tk.err != nil || len(tk.refused) != 0 {
					t.Errorf("batch: error %v, refused %v; want neither", tk.err, tk.refused)
				}
			}
			// Taken for new on Postgres, then run again once; never split into its batches.
			again := strings.Count(logs.String(), "write cycle run again reading every run")
			if want := map[string]int{"postgres": 1, "sqlite": 0}[st.Name]; again != want || strings.Contains(logs.String(), "one at a time") {
				t.Errorf("cycle run again %d times (want %d), logs:\n%s", again, want, logs.String())
			}
			for _, id := range []string{"151-again", "151-new"} {
				r := e.run(t, id)
				if r.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK {
					t.Errorf("run %s: %s, outcome %s; want SUCCESS, OK", id, r.GetStatus(), r.GetTriggerOutcome())
				}
				var n int
				if err := e.db.QueryRowContext(ctxFor(t), e.db.Q(`SELECT COUNT(*) FROM completions WHERE trigger_id = $1`), id).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 1 {
					t.Errorf("run %s: %d completions, want 1", id, n)
				}
			}
		})
	}
}

// TestFreshIDs: only ids with both a record and a final result in the cycle are taken for new.
func TestFreshIDs(t *testing.T) {
	t.Parallel()
	recs := recordsTicket([]*logsv1.TriggerRecord{record("1-a", 1, base), record("1-b", 1, base), record("1-c", 1, base)})
	res := resultsTicket([]*logsv1.RunResult{
		result("1-a", 1, logsv1.RunStatus_RUN_STATUS_RUNNING, base), result("1-a", 1, logsv1.RunStatus_RUN_STATUS_FAIL, base),
		result("1-b", 1, logsv1.RunStatus_RUN_STATUS_RUNNING, base), result("1-d", 1, logsv1.RunStatus_RUN_STATUS_SUCCESS, base),
	})
	got := freshIDs(append(recs.ops, res.ops...))
	if len(got) != 1 || !got["1-a"] {
		t.Errorf("fresh %v, want only 1-a (1-b has no final result, 1-c no result, 1-d no record)", got)
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
