// Package ring is the scheduler leader's in-memory time ring: the pre-read loop arms every fire due
// in the next few seconds, and the ring hands each one to dispatch at its own millisecond, where
// XXL-JOB's 60-slot ring fires everything at the top of its second. Time comes from an injected
// clock.Clock, so the ring is tested without sleeping.
//
// # Design
//
// Armed entries sit in a 4-ary min-heap ordered by (FireAt, JobID), with two indexes beside it:
// (JobID, FireAt) → entry, for dedup, and JobID → a linked list of the job's entries, for
// RemoveJob. Entries live in a slab with a free list and the heap holds their sort keys inline, so
// arming, replacing, firing and removing allocate nothing once the slab, heap and maps have grown
// to the working size, and sifting compares keys without chasing pointers. Four children per node
// halve the depth of a binary heap and sit side by side in memory, so taking the earliest of 100k
// entries touches fewer cache lines.
//
// A hashed wheel of 1 ms slots would make Add O(1) instead of O(log n), but n is ~1e5 (about nine
// levels here), and a wheel brings costs the heap does not have: an overflow heap anyway for
// retries armed minutes ahead, a scan over empty slots (or a bitmap) to find the next wake-up, and
// a cursor to rewind when the wall clock steps back. The heap orders every entry exactly by
// millisecond, whatever its distance, and its top is the next wake-up. Profiles of the benchmarks
// show the dedup map, not the heap, as the largest cost.
//
// One goroutine fires. It sleeps on a clock timer until the earliest FireAt (at most a second, so
// that a step of the wall clock, which monotonic timers do not see, is noticed within one), and
// an Add that arms a new earliest entry wakes it through a channel. Each wake-up fires every entry
// whose FireAt <= now, in order, in one call. A clock that jumps forward makes everything then due
// fire at once, late; a clock that jumps back leaves entries armed until their time comes again.
package ring

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jobmesh/jobmesh/internal/clock"
)

// maxWait bounds one sleep of the firing goroutine. Timers run on the monotonic clock while FireAt
// is wall time, so without a bound a wall-clock step forward would go unnoticed until the timer
// ended; with it, entries that the step made due fire at most a second late.
const maxWait = time.Second

// ErrStarted is returned by Start on a ring that was started before.
var ErrStarted = errors.New("ring: already started")

// ErrStopped is returned by Start on a ring that was stopped or drained first.
var ErrStopped = errors.New("ring: stopped")

// Entry is one armed fire.
type Entry[T any] struct {
	JobID  int64
	FireAt int64 // scheduled fire time, Unix milliseconds
	// Tag tells apart entries of one job at one millisecond that are different fires: 0 for the
	// job's scheduled fire, other values for fires that may fall on the same millisecond (retries
	// of different shards, a child fire due when a scheduled one is).
	Tag   int64
	Value T
}

// Ring holds armed fires and fires each at its millisecond. Its methods are safe for concurrent
// use; fire is called from the ring's own goroutine only.
type Ring[T any] struct {
	clk  clock.Clock
	fire func(due []Entry[T])

	wake     chan struct{} // buffer of one: an Add armed a new earliest entry
	quit     chan struct{} // closed by Stop or Drain
	quitOnce sync.Once
	done     chan struct{} // closed when the goroutine has exited

	// fireMu is held while a batch is taken and fired, so that once Drain holds it nothing is
	// being fired and nothing will be.
	fireMu sync.Mutex

	// leadMs and tick (SetLead): entries fire leadMs before their FireAt, gathered tick at a time.
	leadMs int64
	tick   time.Duration

	mu      sync.Mutex
	started bool
	closed  bool // Stop, Drain or the end of Start's ctx: Add is refused
	heap    []item
	nodes   []node[T] // slab; heap items and job lists point into it
	free    []int32   // unused slab slots
	byKey   map[key]int32
	byJob   map[int64]int32 // first node of the job's list
}

// key identifies a fire for dedup.
type key struct{ job, at, tag int64 }

// item is a heap slot. It carries its sort key so that sifting stays within the heap's array.
type item struct {
	at, job int64
	n       int32 // slab index
}

// node is a slab slot: one armed entry, its heap position and its neighbours in its job's list.
type node[T any] struct {
	e          Entry[T]
	pos        int32 // index in heap
	prev, next int32 // job list; -1 ends it
}

// New returns a ring that calls fire, from its own goroutine, with every entry whose FireAt <= now
// (ms), in FireAt order (then JobID), batched: one call per wake-up with all due entries. fire must
// not block for long and must not call Stop or Drain; it owns the slice only during the call (the
// ring reuses it). Entries may be added before Start; they fire once it runs.
func New[T any](clk clock.Clock, fire func(due []Entry[T])) *Ring[T] {
	return &Ring[T]{
		clk:   clk,
		fire:  fire,
		wake:  make(chan struct{}, 1),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
		byKey: make(map[key]int32),
		byJob: make(map[int64]int32),
	}
}

// SetLead makes the ring fire each entry lead before its FireAt, for fires that are sent ahead of
// their time and held by their executor until it. Once it has fired, the ring sleeps at least tick
// (unless an Add wakes it), so that each wake-up takes the entries due over tick at once and they
// leave lead-tick to lead early: fewer, larger batches. Call it before Start; zero lead (the
// default) fires each entry at its millisecond.
func (r *Ring[T]) SetLead(lead, tick time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leadMs, r.tick = lead.Milliseconds(), tick
}

// Start starts the firing goroutine, which runs until Stop, Drain or the end of ctx. It returns
// ErrStarted or ErrStopped when the ring cannot run.
func (r *Ring[T]) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return ErrStopped
	case r.started:
		return ErrStarted
	}
	r.started = true
	go r.run(ctx)
	return nil
}

// Stop stops firing and waits for the goroutine to exit. Armed entries stay for Drain; Add is
// refused from now on. It is idempotent.
func (r *Ring[T]) Stop() {
	r.mu.Lock()
	r.closed = true
	started := r.started
	r.mu.Unlock()
	r.quitOnce.Do(func() { close(r.quit) })
	if started {
		<-r.done
	}
}

// Add arms e and reports whether it did: false once the ring is stopped. An armed entry with the
// same (JobID, FireAt, Tag) is replaced, so re-arming a fire after a retried pre-read is harmless; a
// fire that already fired is not remembered. An entry already due fires at once.
func (r *Ring[T]) Add(e Entry[T]) bool {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	k := key{e.JobID, e.FireAt, e.Tag}
	if n, ok := r.byKey[k]; ok {
		r.nodes[n].e.Value = e.Value
		r.mu.Unlock()
		return true
	}
	n := r.alloc()
	nd := &r.nodes[n]
	nd.e, nd.prev, nd.next = e, -1, -1
	if head, ok := r.byJob[e.JobID]; ok {
		nd.next = head
		r.nodes[head].prev = n
	}
	r.byJob[e.JobID] = n
	r.byKey[k] = n
	r.push(n)
	earliest := r.nodes[n].pos == 0
	r.mu.Unlock()
	if earliest {
		select {
		case r.wake <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
	return true
}

// RemoveJob disarms and returns every armed entry of a job, in FireAt order, for when the job is
// stopped or edited. It returns nil when the job has none.
func (r *Ring[T]) RemoveJob(jobID int64) []Entry[T] {
	r.mu.Lock()
	n, ok := r.byJob[jobID]
	if !ok {
		r.mu.Unlock()
		return nil
	}
	k := 0
	for m := n; m >= 0; m = r.nodes[m].next {
		k++
	}
	out := make([]Entry[T], 0, k)
	for n >= 0 {
		nd := &r.nodes[n]
		next := nd.next
		out = append(out, nd.e)
		delete(r.byKey, key{jobID, nd.e.FireAt, nd.e.Tag})
		r.removeAt(int(nd.pos))
		r.release(n)
		n = next
	}
	delete(r.byJob, jobID)
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Entry[T]) int { return cmp.Compare(a.FireAt, b.FireAt) })
	return out
}

// Drain stops firing and returns everything still armed, in FireAt order (then JobID): leadership
// is lost and the scheduler rewinds these for the next leader. When it returns, fire is not
// running and will not be called again, so every fire was either fired or returned, never both.
// Add is refused from then on.
func (r *Ring[T]) Drain() []Entry[T] {
	r.fireMu.Lock()
	r.mu.Lock()
	r.closed = true
	items := r.heap
	slices.SortFunc(items, compareItems)
	out := make([]Entry[T], len(items))
	for i, it := range items {
		out[i] = r.nodes[it.n].e
	}
	r.heap, r.nodes, r.free = nil, nil, nil
	clear(r.byKey)
	clear(r.byJob)
	r.mu.Unlock()
	r.fireMu.Unlock()
	r.quitOnce.Do(func() { close(r.quit) })
	return out
}

// HasJob reports whether a job has an armed entry.
func (r *Ring[T]) HasJob(jobID int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.byJob[jobID]
	return ok
}

// Len returns the number of armed entries, for status pages and metrics.
func (r *Ring[T]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.heap)
}

// run is the firing goroutine.
func (r *Ring[T]) run(ctx context.Context) {
	defer close(r.done)
	var (
		t         clock.Timer
		tc        <-chan time.Time
		batch     []Entry[T]
		justFired bool
	)
	defer func() {
		if t != nil {
			t.Stop()
		}
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
	}()
	for {
		// Any wake-up sent so far is answered by the look at the heap below.
		select {
		case <-r.wake:
		default:
		}
		now, wait, fired, ok := r.fireDue(&batch)
		if !ok {
			return
		}
		if fired {
			justFired = true
			continue // firing took time; look again before sleeping
		}
		if justFired && wait >= 0 && wait < r.tick { // r.tick is set before Start
			wait = r.tick
		}
		justFired = false
		switch {
		case wait < 0:
			if t != nil {
				t.Stop()
			}
			tc = nil
		case t == nil:
			t = r.clk.NewTimer(wait)
			tc = t.C()
		default:
			t.Reset(wait)
			tc = t.C()
		}
		// Reading the clock and arming the timer are two steps. If the clock moved in between (a
		// test stepping a fake clock), the timer may be set late: look again. A real clock only
		// crosses a millisecond here now and then, so this settles at once.
		if r.clk.Now().UnixMilli() != now.UnixMilli() {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-r.quit:
			return
		case <-r.wake:
		case <-tc:
		}
	}
}

// fireDue fires every due entry. It returns the time it read, how long to sleep (negative when
// nothing is armed), whether it fired, and false once the ring is closed.
func (r *Ring[T]) fireDue(batch *[]Entry[T]) (now time.Time, wait time.Duration, fired, ok bool) {
	r.fireMu.Lock()
	defer r.fireMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return now, 0, false, false
	}
	now = r.clk.Now()
	nowMs := now.UnixMilli()
	due := (*batch)[:0]
	for len(r.heap) > 0 && r.heap[0].at <= nowMs+r.leadMs {
		n := r.heap[0].n
		e := r.nodes[n].e
		due = append(due, e)
		delete(r.byKey, key{e.JobID, e.FireAt, e.Tag})
		r.unlink(n)
		r.removeAt(0)
		r.release(n)
	}
	wait = -1
	if len(r.heap) > 0 {
		wait = min(time.UnixMilli(r.heap[0].at-r.leadMs).Sub(now), maxWait)
	}
	r.mu.Unlock()
	if len(due) == 0 {
		return now, wait, false, true
	}
	r.fire(due)
	clear(due) // let fired values be collected
	*batch = due[:0]
	return now, wait, true, true
}

// alloc takes a slab slot. r.mu must be held.
func (r *Ring[T]) alloc() int32 {
	if k := len(r.free); k > 0 {
		n := r.free[k-1]
		r.free = r.free[:k-1]
		return n
	}
	r.nodes = append(r.nodes, node[T]{})
	return int32(len(r.nodes) - 1)
}

// release returns a slab slot, dropping its value. r.mu must be held.
func (r *Ring[T]) release(n int32) {
	r.nodes[n] = node[T]{}
	r.free = append(r.free, n)
}

// unlink takes node n out of its job's list. r.mu must be held.
func (r *Ring[T]) unlink(n int32) {
	nd := &r.nodes[n]
	if nd.next >= 0 {
		r.nodes[nd.next].prev = nd.prev
	}
	switch {
	case nd.prev >= 0:
		r.nodes[nd.prev].next = nd.next
	case nd.next >= 0:
		r.byJob[nd.e.JobID] = nd.next
	default:
		delete(r.byJob, nd.e.JobID)
	}
}

// compareItems orders the heap: by fire time, then job, a total order since (job, time) is unique.
func compareItems(a, b item) int {
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c
	}
	return cmp.Compare(a.job, b.job)
}

// arity is the heap's fan-out. A 4-ary heap is half as deep as a binary one and keeps a node's
// children in adjacent memory, so taking the earliest entry out of 100k touches fewer cache lines.
const arity = 4

func less(a, b *item) bool { return a.at < b.at || a.at == b.at && a.job < b.job }

// place puts it in heap slot i and records the slot in its node.
func (r *Ring[T]) place(i int, it item) {
	r.heap[i] = it
	r.nodes[it.n].pos = int32(i)
}

// push adds node n to the heap. r.mu must be held.
func (r *Ring[T]) push(n int32) {
	e := &r.nodes[n].e
	r.heap = append(r.heap, item{})
	r.up(len(r.heap)-1, item{at: e.FireAt, job: e.JobID, n: n})
}

// removeAt removes heap slot i. r.mu must be held.
func (r *Ring[T]) removeAt(i int) {
	last := len(r.heap) - 1
	it := r.heap[last]
	r.heap = r.heap[:last]
	if i == last {
		return
	}
	if i > 0 && less(&it, &r.heap[(i-1)/arity]) {
		r.up(i, it)
	} else {
		r.down(i, it)
	}
}

// up moves the hole at slot i towards the root until it fits, then places it there.
func (r *Ring[T]) up(i int, it item) {
	for i > 0 {
		p := (i - 1) / arity
		if !less(&it, &r.heap[p]) {
			break
		}
		r.place(i, r.heap[p])
		i = p
	}
	r.place(i, it)
}

// down moves the hole at slot i towards the leaves until it fits, then places it there.
func (r *Ring[T]) down(i int, it item) {
	n := len(r.heap)
	for {
		c := arity*i + 1
		if c >= n {
			break
		}
		end := min(c+arity, n)
		for j := c + 1; j < end; j++ {
			if less(&r.heap[j], &r.heap[c]) {
				c = j
			}
		}
		if !less(&r.heap[c], &it) {
			break
		}
		r.place(i, r.heap[c])
		i = c
	}
	r.place(i, it)
}
