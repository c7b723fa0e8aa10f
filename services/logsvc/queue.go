package logsvc

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
)

// Ingest batches of every stream (trigger records, results, log lines) go through one queue. A
// writer takes what is queued (up to maxCycleItems) and writes it in one transaction, a write
// cycle (commit.go): a fire's record and results that came on different streams meet there and
// are written as one row, and a busy store takes fewer, larger transactions instead of falling
// further behind one small batch at a time. A batch is acknowledged once everything in it has
// been written and committed.
//
// Each stream has its own lane in the queue, and holds at most its share of MaxQueuedItems
// (a stream that holds nothing may always add a batch). A cycle takes batches oldest event
// first across the lanes, each lane in its order. So when logsvc falls behind, the stream that
// fell furthest (the scheduler's records, one stream against every agent's results) is written
// first and may not be crowded out, and a cycle holds both sides of the same fires.
//
// A record or result for a run that is not stored yet, whose counterpart (the results, or the
// record) is not in the cycle, is held back (parked) for the next cycle, and for parkFor at
// most: the two sides of a fire reach logsvc a few milliseconds apart, often on either side of
// a cycle's start, and a run written from one side is written again when the other comes. A
// run's record and RUNNING result wait for its final result likewise, for parkForFinal at most.
// A cycle takes parked items back only when an item of theirs arrives or their time is up
// (parkedOps). Only
// a cycle that took every batch waiting parks: behind a backlog the other side is rarely just
// one cycle away, and parked items would take the room of the batches that wait. All items of
// a trigger id in a cycle are parked or written together, in order.
//
// The writer is a goroutine that starts when a batch is queued and none runs, and ends when
// nothing is queued or parked. A cycle's work stops once every stream waiting on it has ended.

const (
	// maxCycleItems caps the items one write cycle takes (it takes at least one batch, which
	// may hold up to maxBatchItems).
	maxCycleItems = 10000
	// parkFor is how long results may wait for their record.
	parkFor = 50 * time.Millisecond
	// parkForFinal is how long a run's record (and RUNNING result) may wait for its final result,
	// so that a quick fire is written once, ended, rather than inserted and then updated. With
	// the scheduler's dispatch lead (200 ms by default) both come that long before the fire
	// starts.
	parkForFinal = 500 * time.Millisecond
)

// ticket is one ingest batch on its way to the store.
type ticket struct {
	// ops are the batch's records or results, in the order they apply; lines its log lines.
	ops   []op
	lines []*logsv1.LogLine
	// lane is the queue lane of the batch's stream; ctx is the stream's: a ticket whose stream
	// has ended is dropped unwritten.
	lane *lane
	ctx  context.Context
	// eventMs is the time of the batch's oldest item (fire scheduled, run start or end, line
	// written; Unix ms, 0 when none says): cycles take the oldest batches first.
	eventMs int64
	// queued is when the batch was queued.
	queued time.Time

	// Owned by the writer; set before it closes done.
	left      int      // ops not yet written
	refused   []string // results refused: their runs had ended
	committed time.Time
	err       error
	finished  bool
	done      chan struct{}
}

func (t *ticket) items() int { return len(t.ops) + len(t.lines) }

// finish ends the ticket's wait, once.
func (t *ticket) finish(committed time.Time, err error) {
	if t.finished {
		return
	}
	t.finished = true
	t.committed, t.err = committed, err
	slices.Sort(t.refused)
	t.refused = slices.Compact(t.refused)
	close(t.done)
}

// recordsTicket holds a batch of trigger records: the last record of a trigger id in the batch
// counts. Its event time is its oldest fire's scheduled time, not the time it was dispatched:
// a fire sent ahead of its time (the scheduler's dispatch lead) reaches logsvc that long before
// its result, whose time is the run's, and a cycle behind a backlog, which takes the oldest
// batches first, would otherwise take records a lead ahead of the results it takes, and write
// those fires twice (a record alone, then its result).
func recordsTicket(recs []*logsv1.TriggerRecord) *ticket {
	t := &ticket{done: make(chan struct{}), eventMs: oldest(recs, (*logsv1.TriggerRecord).GetScheduledUnixMs)}
	last := make(map[string]int, len(recs))
	for i, r := range recs {
		last[r.GetTriggerId()] = i
	}
	for i, r := range recs {
		if last[r.GetTriggerId()] == i {
			t.ops = append(t.ops, op{t: t, id: r.GetTriggerId(), rec: r})
		}
	}
	return t
}

// resultsTicket holds a batch of results. The first RUNNING and the first final result of a
// trigger id in the batch count; a later RUNNING is dropped, a later final result is refused
// like any result for a run that ended. RUNNING results go first, so a batch holding a fire's
// RUNNING and its final result ends with the final one whatever their order.
func resultsTicket(results []*logsv1.RunResult) *ticket {
	t := &ticket{done: make(chan struct{})}
	started := map[string]bool{}
	for _, r := range results {
		if id := r.GetTriggerId(); int32(r.GetStatus()) == statusRunning && !started[id] {
			started[id] = true
			t.ops = append(t.ops, op{t: t, id: id, res: r})
		}
	}
	ended := make(map[string]bool, len(results))
	for _, r := range results {
		id := r.GetTriggerId()
		switch {
		case int32(r.GetStatus()) == statusRunning:
		case ended[id]:
			t.refused = append(t.refused, id)
		default:
			ended[id] = true
			t.ops = append(t.ops, op{t: t, id: id, res: r})
		}
	}
	return t
}

// linesTicket holds a batch of log lines.
func linesTicket(lines []*logsv1.LogLine) *ticket {
	return &ticket{lines: lines, done: make(chan struct{})}
}

// queue holds the batches waiting for the writer, and the items it parked.
type queue struct {
	mu      sync.Mutex
	lanes   []*lane       // the lanes of the streams open now
	held    int           // items queued, parked or being written, all lanes
	writing bool          // a writer goroutine runs
	arrived chan struct{} // closed and replaced when a batch is queued
	parked  parkedOps     // owned by the writer
}

// parkedOps holds the ops the writer parked, by trigger id, until an op of their id arrives or
// their time is up: a cycle takes only those, not every parked op (at 5,000 fires/s a run's
// record and RUNNING result wait ~200 ms for its final result, and thousands are parked).
type parkedOps struct {
	byID map[string][]op // in arrival order; the ops of an id share their until
	exp  expiries
	n    int
}

// expiry is when the ops of id parked until then may wait no more.
type expiry struct {
	id    string
	until time.Time
}

// expiries is a min-heap of expiry by until (container/heap).
type expiries []expiry

func (h expiries) Len() int           { return len(h) }
func (h expiries) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h expiries) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiries) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiries) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// add parks ops (a cycle's, all parked until the same time per id).
func (p *parkedOps) add(ops []op) {
	if p.byID == nil {
		p.byID = map[string][]op{}
	}
	for _, o := range ops {
		prev := p.byID[o.id]
		if len(prev) == 0 || !prev[0].until.Equal(o.until) {
			heap.Push(&p.exp, expiry{o.id, o.until})
		}
		p.byID[o.id] = append(prev, o)
		p.n++
	}
}

// take removes and returns the parked ops of id.
func (p *parkedOps) take(id string) []op {
	ops := p.byID[id]
	if len(ops) > 0 {
		delete(p.byID, id)
		p.n -= len(ops)
	}
	return ops
}

// due removes and returns the parked ops whose time is up at now (an expiry whose ops were
// taken or parked again since is skipped).
func (p *parkedOps) due(now time.Time) []op {
	var out []op
	for len(p.exp) > 0 && !now.Before(p.exp[0].until) {
		e := heap.Pop(&p.exp).(expiry)
		if ops := p.byID[e.id]; len(ops) > 0 && ops[0].until.Equal(e.until) {
			out = append(out, p.take(e.id)...)
		}
	}
	return out
}

// next returns the earliest time parked ops may wait until; ok is false when none are parked.
func (p *parkedOps) next() (time.Time, bool) {
	for len(p.exp) > 0 {
		e := p.exp[0]
		if ops := p.byID[e.id]; len(ops) > 0 && ops[0].until.Equal(e.until) {
			return e.until, true
		}
		heap.Pop(&p.exp) // stale
	}
	return time.Time{}, false
}

// lane is one stream's part of the queue.
type lane struct {
	waiting []*ticket
	held    int           // its items queued, parked or being written
	room    chan struct{} // closed and replaced when held drops
}

func newQueue() *queue { return &queue{arrived: make(chan struct{})} }

// queued reports the items queued, parked or being written.
func (q *queue) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held
}

// open gives a stream its lane, until close.
func (q *queue) open() *lane {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := &lane{room: make(chan struct{})}
	q.lanes = append(q.lanes, l)
	return l
}

// close ends a stream's lane once its stream has ended: the batches still waiting in it are
// dropped (those a cycle took or parked are the writer's to finish).
func (q *queue) close(l *lane) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := slices.Index(q.lanes, l); i >= 0 {
		q.lanes = slices.Delete(q.lanes, i, i+1)
	}
	for _, t := range l.waiting {
		q.releaseLocked(t, t.items())
		t.finish(time.Now(), context.Canceled)
	}
	l.waiting = nil
}

// fitsLocked reports whether t may join its lane now: a lane holds at most its share of max
// items, and one that holds nothing may always add a batch.
func (q *queue) fitsLocked(t *ticket, max int) bool {
	l := t.lane
	return l.held == 0 || l.held+t.items() <= max/len(q.lanes)
}

// releaseLocked counts n items of t as written or dropped.
func (q *queue) releaseLocked(t *ticket, n int) {
	if n == 0 {
		return
	}
	q.held -= n
	t.lane.held -= n
	close(t.lane.room)
	t.lane.room = make(chan struct{})
}

// submit queues t on its stream's lane, waiting while the lane holds its share of
// MaxQueuedItems already. It fails only when t's stream ends first.
func (s *Service) submit(t *ticket) error {
	q := s.queue
	n := t.items()
	for {
		q.mu.Lock()
		if q.fitsLocked(t, s.cfg.MaxQueuedItems) {
			l := t.lane
			t.queued = time.Now()
			t.left = len(t.ops)
			l.waiting = append(l.waiting, t)
			l.held += n
			q.held += n
			close(q.arrived)
			q.arrived = make(chan struct{})
			if !q.writing {
				q.writing = true
				go s.drain()
			}
			q.mu.Unlock()
			return nil
		}
		room := t.lane.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-t.ctx.Done():
			return t.ctx.Err()
		}
	}
}

// takeLocked takes the batches of the next cycle, oldest event first across the lanes, each
// lane in its order, up to maxCycleItems (n already taken: parked items), dropping those
// whose stream has ended. backlog reports whether batches are left waiting.
func (s *Service) takeLocked(n int) (taken []*ticket, backlog bool) {
	q := s.queue
	for {
		var next *lane
		for _, l := range q.lanes {
			for len(l.waiting) > 0 && l.waiting[0].ctx.Err() != nil { // nobody waits for it
				t := l.waiting[0]
				l.waiting = l.waiting[1:]
				q.releaseLocked(t, t.items())
				t.finish(time.Now(), t.ctx.Err())
			}
			if len(l.waiting) > 0 && (next == nil || l.waiting[0].eventMs < next.waiting[0].eventMs) {
				next = l
			}
		}
		if next == nil {
			return taken, false
		}
		t := next.waiting[0]
		if n > 0 && n+t.items() > maxCycleItems {
			return taken, true
		}
		next.waiting = next.waiting[1:]
		taken = append(taken, t)
		n += t.items()
	}
}

// drain writes what is queued and parked, a cycle at a time, until nothing is left.
func (s *Service) drain() {
	q := s.queue
	for {
		q.mu.Lock()
		taken, backlog := s.takeLocked(0)
		if len(taken) == 0 && q.parked.n == 0 {
			q.writing = false
			q.mu.Unlock()
			return
		}
		now := time.Now()
		if len(taken) == 0 && !backlog {
			// Only parked items: wait for their counterparts, or until one may wait no more.
			if next, ok := q.parked.next(); ok && next.After(now) {
				arrived := q.arrived
				q.mu.Unlock()
				timer := time.NewTimer(next.Sub(now))
				select {
				case <-arrived:
				case <-timer.C:
				}
				timer.Stop()
				continue
			}
		}
		// The cycle's ops: the parked ops of the ids its batches name (they came first), the
		// parked ops whose time is up, then the batches' ops. A parked op whose stream has ended
		// is written now: it was received, and its sender may not send it again.
		var ops []op
		named := map[string]bool{}
		for _, t := range taken {
			for _, o := range t.ops {
				if !named[o.id] {
					named[o.id] = true
					ops = append(ops, q.parked.take(o.id)...)
				}
			}
		}
		ops = append(ops, q.parked.due(now)...)
		for i := range ops {
			ops[i].orphan = ops[i].t.ctx.Err() != nil
		}
		q.mu.Unlock()
		for _, t := range taken {
			ops = append(ops, t.ops...)
		}
		if len(ops) == 0 && len(taken) == 0 {
			continue
		}
		still, released := s.writeCycle(ops, taken, !backlog)
		q.mu.Lock()
		q.parked.add(still)
		for t, n := range released {
			q.releaseLocked(t, n)
		}
		q.mu.Unlock()
	}
}
