package ring_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/ring"
)

// t0 sits on a whole second, so offsets in milliseconds are exact fire times.
var t0 = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)

type entry = ring.Entry[int]

// newRand returns a deterministic source, so a failing seed can be replayed.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0)) }

// at returns the Unix millisecond d after t0.
func at(d time.Duration) int64 { return t0.Add(d).UnixMilli() }

// recorder is a ring's fire callback that keeps a copy of every batch, since the ring reuses them.
type recorder struct {
	mu      sync.Mutex
	batches [][]entry
	fired   int
	signal  chan struct{} // buffer of one: a batch arrived
}

func newRecorder() *recorder { return &recorder{signal: make(chan struct{}, 1)} }

func (rec *recorder) fire(due []entry) {
	rec.mu.Lock()
	rec.batches = append(rec.batches, slices.Clone(due))
	rec.fired += len(due)
	rec.mu.Unlock()
	select {
	case rec.signal <- struct{}{}:
	default:
	}
}

func (rec *recorder) snapshot() [][]entry {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.batches)
}

// waitFired waits, for at most 5s, until n entries have fired in all.
func (rec *recorder) waitFired(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		rec.mu.Lock()
		got := rec.fired
		rec.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-rec.signal:
		case <-timeout:
			t.Fatalf("%d entries fired within 5s, want %d", got, n)
		}
	}
}

// newRing returns a started ring on a fake clock at t0, stopped when the test ends.
func newRing(t testing.TB) (*ring.Ring[int], *clock.Fake, *recorder) {
	fk := clock.NewFake(t0)
	rec := newRecorder()
	r := ring.New(fk, rec.fire)
	if err := r.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(r.Stop)
	return r, fk, rec
}

// blockUntilTimers waits, for at most 5s, until the fake clock has n timers armed.
func blockUntilTimers(t testing.TB, fk *clock.Fake, n int) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		fk.BlockUntilTimers(n)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%d timers not armed within 5s", n)
	}
}

func mustAdd(t testing.TB, r *ring.Ring[int], e entry) {
	t.Helper()
	if !r.Add(e) {
		t.Fatalf("Add(%+v) = false, want true", e)
	}
}

func TestFiresAtItsMillisecond(t *testing.T) {
	t.Parallel()
	r, fk, rec := newRing(t)
	entries := []entry{
		{JobID: 4, FireAt: at(1500 * time.Millisecond), Value: 4},
		{JobID: 3, FireAt: at(999 * time.Millisecond), Value: 3},
		{JobID: 1, FireAt: at(1 * time.Millisecond), Value: 1},
		{JobID: 2, FireAt: at(2 * time.Millisecond), Value: 2},
		{JobID: 5, FireAt: at(999 * time.Millisecond), Value: 5}, // same millisecond: same batch
	}
	for _, e := range entries {
		mustAdd(t, r, e)
	}
	var want [][]entry
	fired := 0
	for ms := 1; ms <= 1500; ms++ {
		// The ring has armed its timer from the current time, and any batch that the previous
		// step fired is recorded: the ring fires before it re-arms.
		blockUntilTimers(t, fk, 1)
		if got := rec.snapshot(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("at +%dms fired %v, want %v", ms-1, got, want)
		}
		fk.Advance(time.Millisecond)
		var batch []entry
		for _, e := range entries {
			if e.FireAt == at(time.Duration(ms)*time.Millisecond) {
				batch = append(batch, e)
			}
		}
		if batch != nil {
			slices.SortFunc(batch, func(a, b entry) int { return int(a.JobID - b.JobID) })
			want = append(want, batch)
			fired += len(batch)
			rec.waitFired(t, fired)
		}
	}
	if got := rec.snapshot(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	if got := r.Len(); got != 0 {
		t.Errorf("Len() = %d, want 0", got)
	}
}

func TestDueEntryFiresAtOnce(t *testing.T) {
	t.Parallel()
	r, _, rec := newRing(t)
	late := entry{JobID: 1, FireAt: at(-3 * time.Second), Value: 1}
	now := entry{JobID: 2, FireAt: at(0), Value: 2}
	mustAdd(t, r, late)
	rec.waitFired(t, 1)
	mustAdd(t, r, now)
	rec.waitFired(t, 2)
	if got, want := rec.snapshot(), [][]entry{{late}, {now}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("fired %v, want %v", got, want)
	}
}

func TestAddEarlierWakesTheRing(t *testing.T) {
	t.Parallel()
	r, fk, rec := newRing(t)
	mustAdd(t, r, entry{JobID: 1, FireAt: at(time.Second)})
	blockUntilTimers(t, fk, 1) // asleep until +1s (its longest wait)
	early := entry{JobID: 2, FireAt: at(10 * time.Millisecond), Value: 2}
	mustAdd(t, r, early)
	// Step until the early entry fires: the ring must have re-armed for +10ms, not slept to +1s.
	for ms := 1; ms <= 10; ms++ {
		blockUntilTimers(t, fk, 1)
		fk.Advance(time.Millisecond)
	}
	rec.waitFired(t, 1)
	if got, want := rec.snapshot(), [][]entry{{early}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("fired %v, want %v", got, want)
	}
}

func TestDedupByJobAndFireTime(t *testing.T) {
	t.Parallel()
	r, fk, rec := newRing(t)
	mustAdd(t, r, entry{JobID: 1, FireAt: at(5 * time.Millisecond), Value: 1})
	mustAdd(t, r, entry{JobID: 1, FireAt: at(5 * time.Millisecond), Value: 2}) // replaces
	mustAdd(t, r, entry{JobID: 2, FireAt: at(5 * time.Millisecond), Value: 3}) // another job
	mustAdd(t, r, entry{JobID: 1, FireAt: at(6 * time.Millisecond), Value: 4}) // another time
	if got := r.Len(); got != 3 {
		t.Errorf("Len() = %d, want 3", got)
	}
	fk.Advance(time.Second)
	rec.waitFired(t, 3)
	want := [][]entry{{
		{JobID: 1, FireAt: at(5 * time.Millisecond), Value: 2},
		{JobID: 2, FireAt: at(5 * time.Millisecond), Value: 3},
		{JobID: 1, FireAt: at(6 * time.Millisecond), Value: 4},
	}}
	if got := rec.snapshot(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("fired %v, want %v", got, want)
	}
}

// TestTagKeepsFiresOfOneMillisecondApart: entries of one job at one millisecond with different
// tags (two shards' retries, a retry due with a scheduled fire) are different fires: both are
// armed and both fire; the same tag still replaces.
func TestTagKeepsFiresOfOneMillisecondApart(t *testing.T) {
	t.Parallel()
	r, fk, rec := newRing(t)
	ms := at(5 * time.Millisecond)
	mustAdd(t, r, entry{JobID: 1, FireAt: ms, Value: 1})
	mustAdd(t, r, entry{JobID: 1, FireAt: ms, Tag: 7, Value: 2})
	mustAdd(t, r, entry{JobID: 1, FireAt: ms, Tag: 8, Value: 3})
	mustAdd(t, r, entry{JobID: 1, FireAt: ms, Tag: 8, Value: 4}) // replaces tag 8
	if got := r.Len(); got != 3 {
		t.Errorf("Len() = %d, want 3", got)
	}
	if got := len(r.RemoveJob(1)); got != 3 {
		t.Fatalf("RemoveJob returned %d entries, want 3", got)
	}
	mustAdd(t, r, entry{JobID: 1, FireAt: ms, Value: 1})
	mustAdd(t, r, entry{JobID: 1, FireAt: ms, Tag: 8, Value: 4})
	fk.Advance(time.Second)
	rec.waitFired(t, 2)
	var values []int
	for _, b := range rec.snapshot() {
		for _, e := range b {
			values = append(values, e.Value)
		}
	}
	slices.Sort(values)
	if !slices.Equal(values, []int{1, 4}) {
		t.Errorf("fired values %v, want [1 4]", values)
	}
}

func TestRemoveJob(t *testing.T) {
	t.Parallel()
	r, fk, rec := newRing(t)
	for _, ms := range []int{30, 10, 20} {
		mustAdd(t, r, entry{JobID: 1, FireAt: at(time.Duration(ms) * time.Millisecond), Value: ms})
	}
	other := entry{JobID: 2, FireAt: at(20 * time.Millisecond), Value: 2}
	mustAdd(t, r, other)

	if !r.HasJob(1) || !r.HasJob(2) || r.HasJob(99) {
		t.Errorf("HasJob(1, 2, 99) = %v, %v, %v; want true, true, false", r.HasJob(1), r.HasJob(2), r.HasJob(99))
	}
	got := r.RemoveJob(1)
	if r.HasJob(1) {
		t.Error("HasJob(1) after RemoveJob(1) = true, want false")
	}
	want := []entry{
		{JobID: 1, FireAt: at(10 * time.Millisecond), Value: 10},
		{JobID: 1, FireAt: at(20 * time.Millisecond), Value: 20},
		{JobID: 1, FireAt: at(30 * time.Millisecond), Value: 30},
	}
	if !slices.Equal(got, want) {
		t.Errorf("RemoveJob(1) = %v, want %v", got, want)
	}
	if got := r.RemoveJob(1); got != nil {
		t.Errorf("second RemoveJob(1) = %v, want nil", got)
	}
	if got := r.RemoveJob(99); got != nil {
		t.Errorf("RemoveJob(99) = %v, want nil", got)
	}
	if got := r.Len(); got != 1 {
		t.Errorf("Len() = %d, want 1", got)
	}
	fk.Advance(time.Second)
	rec.waitFired(t, 1)
	if got := r.Drain(); len(got) != 0 {
		t.Errorf("Drain() = %v, want nothing", got)
	}
	if got, want := rec.snapshot(), [][]entry{{other}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("fired %v, want %v", got, want)
	}
}

func TestDrainReturnsTheRestAndStopsFiring(t *testing.T) {
	t.Parallel()
	r, fk, rec := newRing(t)
	var all []entry
	for i := range 6 {
		e := entry{JobID: int64(i % 2), FireAt: at(time.Duration(10*(6-i)) * time.Millisecond), Value: i}
		all = append(all, e)
		mustAdd(t, r, e)
	}
	slices.SortFunc(all, func(a, b entry) int { return int(a.FireAt - b.FireAt) })
	fk.Advance(25 * time.Millisecond) // +10ms and +20ms are due
	rec.waitFired(t, 2)

	got := r.Drain()
	if want := all[2:]; !slices.Equal(got, want) {
		t.Errorf("Drain() = %v, want %v", got, want)
	}
	if got := r.Len(); got != 0 {
		t.Errorf("Len() after Drain = %d, want 0", got)
	}
	if r.Add(entry{JobID: 9, FireAt: at(0)}) {
		t.Error("Add after Drain = true, want false")
	}
	fk.Advance(time.Hour)
	r.Stop() // the goroutine has exited: whatever it fired is recorded
	if got, want := rec.snapshot(), [][]entry{all[:2]}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("fired %v, want %v", got, want)
	}
	if got := r.Drain(); len(got) != 0 {
		t.Errorf("second Drain() = %v, want nothing", got)
	}
}

// Once Drain returns, no batch is being fired: the scheduler rewinds what Drain returned while
// dispatch owns what was fired, and the two never overlap in time.
func TestDrainWaitsForFireInFlight(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var fireReturned atomic.Bool
	r := ring.New(clock.NewFake(t0), func([]entry) {
		close(entered)
		<-release
		fireReturned.Store(true)
	})
	if err := r.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(r.Stop)
	mustAdd(t, r, entry{JobID: 1, FireAt: at(0)})
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("entry did not fire within 5s")
	}
	drained := make(chan bool)
	go func() {
		r.Drain()
		drained <- fireReturned.Load()
	}()
	for range 100 {
		runtime.Gosched() // let Drain run as far as it will while the batch is still firing
	}
	close(release)
	select {
	case got := <-drained:
		if !got {
			t.Error("Drain returned while fire was running, want it to wait")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Drain did not return within 5s")
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	fk := clock.NewFake(t0)
	rec := newRecorder()
	r := ring.New(fk, rec.fire)
	armed := entry{JobID: 1, FireAt: at(time.Second), Value: 1}
	mustAdd(t, r, armed) // before Start: armed, fires once running
	if err := r.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := r.Start(t.Context()); !errors.Is(err, ring.ErrStarted) {
		t.Errorf("second Start = %v, want %v", err, ring.ErrStarted)
	}
	r.Stop()
	r.Stop() // idempotent
	if r.Add(entry{JobID: 2, FireAt: at(0)}) {
		t.Error("Add after Stop = true, want false")
	}
	if err := r.Start(t.Context()); !errors.Is(err, ring.ErrStopped) {
		t.Errorf("Start after Stop = %v, want %v", err, ring.ErrStopped)
	}
	fk.Advance(time.Hour)
	if got, want := r.Drain(), []entry{armed}; !slices.Equal(got, want) {
		t.Errorf("Drain() after Stop = %v, want %v", got, want)
	}
	if got := rec.snapshot(); len(got) != 0 {
		t.Errorf("fired %v after Stop, want nothing", got)
	}

	never := ring.New(fk, rec.fire)
	never.Stop() // a ring that never started stops at once
	never.Stop()
	if err := never.Start(t.Context()); !errors.Is(err, ring.ErrStopped) {
		t.Errorf("Start after Stop = %v, want %v", err, ring.ErrStopped)
	}
}

func TestContextEndStopsTheRing(t *testing.T) {
	t.Parallel()
	fk := clock.NewFake(t0)
	rec := newRecorder()
	r := ring.New(fk, rec.fire)
	ctx, cancel := context.WithCancel(t.Context())
	if err := r.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	cancel()
	r.Stop() // waits for the goroutine, which exits on ctx
	if r.Add(entry{JobID: 1, FireAt: at(0)}) {
		t.Error("Add after the context ended = true, want false")
	}
}

func TestClockJumps(t *testing.T) {
	t.Parallel()
	r, fk, rec := newRing(t)
	entries := []entry{
		{JobID: 1, FireAt: at(1 * time.Second), Value: 1},
		{JobID: 2, FireAt: at(2 * time.Second), Value: 2},
		{JobID: 3, FireAt: at(10 * time.Second), Value: 3},
	}
	for _, e := range entries {
		mustAdd(t, r, e)
	}
	// Forward past two entries: both fire at once, late, in one batch.
	fk.Set(t0.Add(5 * time.Second))
	rec.waitFired(t, 2)
	// Back an hour: the last entry waits for its own time again.
	fk.Set(t0.Add(-time.Hour))
	blockUntilTimers(t, fk, 1)
	fk.Set(t0.Add(9999 * time.Millisecond))
	blockUntilTimers(t, fk, 1)
	if got, want := rec.snapshot(), [][]entry{entries[:2]}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	fk.Advance(time.Millisecond)
	rec.waitFired(t, 3)
	if got, want := rec.snapshot(), [][]entry{entries[:2], entries[2:]}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("fired %v, want %v", got, want)
	}
}

// model is the reference the ring must match: a sorted slice, fired synchronously.
type model struct {
	now     int64   // Unix ms
	armed   []entry // by (FireAt, JobID)
	batches [][]entry
	fired   int
}

func compareEntries(a, b entry) int {
	if a.FireAt != b.FireAt {
		return int(a.FireAt - b.FireAt)
	}
	return int(a.JobID - b.JobID)
}

func (m *model) add(e entry) {
	if e.FireAt <= m.now {
		m.batches = append(m.batches, []entry{e})
		m.fired++
		return
	}
	i, found := slices.BinarySearchFunc(m.armed, e, compareEntries)
	if found {
		m.armed[i] = e
		return
	}
	m.armed = slices.Insert(m.armed, i, e)
}

func (m *model) removeJob(job int64) []entry {
	var out []entry
	m.armed = slices.DeleteFunc(m.armed, func(e entry) bool {
		if e.JobID == job {
			out = append(out, e)
			return true
		}
		return false
	})
	return out
}

func (m *model) set(now int64) {
	m.now = now
	n := 0
	for n < len(m.armed) && m.armed[n].FireAt <= now {
		n++
	}
	if n > 0 {
		m.batches = append(m.batches, slices.Clone(m.armed[:n]))
		m.fired += n
		m.armed = slices.Delete(m.armed, 0, n)
	}
}

// TestMatchesModel runs random sequences of Add, RemoveJob, Advance and Set (both ways) against
// the ring and the model, and checks after every step that the same entries fired, in the same
// order and the same batches, and that the same remain armed.
func TestMatchesModel(t *testing.T) {
	t.Parallel()
	const (
		seeds = 300
		steps = 60
		jobs  = 6
	)
	for seed := range seeds {
		rng := newRand(uint64(seed))
		fk := clock.NewFake(t0)
		rec := newRecorder()
		r := ring.New(fk, rec.fire)
		if err := r.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		m := &model{now: t0.UnixMilli()}
		value := 0
		for step := range steps {
			var op string
			switch p := rng.IntN(100); {
			case p < 50:
				value++
				e := entry{JobID: int64(rng.IntN(jobs)), FireAt: m.now + int64(rng.IntN(80)) - 10, Value: value}
				op = fmt.Sprintf("Add(%+v)", e)
				if !r.Add(e) {
					t.Fatalf("seed %d step %d: %s = false, want true", seed, step, op)
				}
				m.add(e)
			case p < 60:
				job := int64(rng.IntN(jobs))
				op = fmt.Sprintf("RemoveJob(%d)", job)
				got, want := r.RemoveJob(job), m.removeJob(job)
				if !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: %s = %v, want %v", seed, step, op, got, want)
				}
			case p < 85:
				d := int64(rng.IntN(25))
				op = fmt.Sprintf("Advance(%dms)", d)
				fk.Advance(time.Duration(d) * time.Millisecond)
				m.set(m.now + d)
			default:
				d := int64(rng.IntN(120)) - 60
				op = fmt.Sprintf("Set(%+dms)", d)
				fk.Set(time.UnixMilli(m.now + d))
				m.set(m.now + d)
			}
			rec.waitFired(t, m.fired)
			if got := rec.snapshot(); !slices.EqualFunc(got, m.batches, slices.Equal) {
				t.Fatalf("seed %d step %d: after %s fired %v, want %v", seed, step, op, got, m.batches)
			}
			if got, want := r.Len(), len(m.armed); got != want {
				t.Fatalf("seed %d step %d: after %s Len() = %d, want %d", seed, step, op, got, want)
			}
		}
		if got := r.Drain(); !slices.Equal(got, m.armed) {
			t.Fatalf("seed %d: Drain() = %v, want %v", seed, got, m.armed)
		}
		// Drain waited for any batch in flight, so the record is final.
		if got := rec.snapshot(); !slices.EqualFunc(got, m.batches, slices.Equal) {
			t.Fatalf("seed %d: fired %v, want %v", seed, got, m.batches)
		}
		r.Stop()
	}
}

// TestConcurrentAddRemove arms and disarms from several goroutines while the clock moves, then
// checks that every fire ended exactly once: fired or removed, and the last one armed for each
// (job, time) among them. Run it with -race.
func TestConcurrentAddRemove(t *testing.T) {
	t.Parallel()
	const (
		workers = 4
		jobs    = 50 // per worker: a job is only ever touched by its worker
		ops     = 2000
	)
	r, fk, rec := newRing(t)
	removed := make([][]entry, workers)
	last := make([]map[[2]int64]int, workers) // (job, FireAt) → last value armed
	var wg sync.WaitGroup
	for w := range workers {
		last[w] = map[[2]int64]int{}
		wg.Go(func() {
			rng := newRand(uint64(w))
			for i := range ops {
				job := int64(w*jobs + rng.IntN(jobs))
				if rng.IntN(10) == 0 {
					removed[w] = append(removed[w], r.RemoveJob(job)...)
					continue
				}
				e := entry{JobID: job, FireAt: fk.Now().UnixMilli() + int64(rng.IntN(40)) - 5, Value: w*ops + i}
				if !r.Add(e) {
					t.Errorf("Add(%+v) = false, want true", e)
					return
				}
				last[w][[2]int64{e.JobID, e.FireAt}] = e.Value
			}
		})
	}
	for range 500 {
		fk.Advance(time.Millisecond)
	}
	wg.Wait()
	fk.Advance(time.Hour)
	timeout := time.After(5 * time.Second)
	for r.Len() > 0 {
		select {
		case <-rec.signal:
		case <-timeout:
			t.Fatalf("Len() = %d after 5s, want 0", r.Len())
		}
	}
	if got := r.Drain(); len(got) != 0 { // also waits for the last batch in flight
		t.Fatalf("Drain() = %v, want nothing", got)
	}

	seen := map[int]string{}
	for _, batch := range rec.snapshot() {
		if !slices.IsSortedFunc(batch, compareEntries) {
			t.Errorf("batch %v is not in FireAt order", batch)
		}
		for _, e := range batch {
			if prev, ok := seen[e.Value]; ok {
				t.Errorf("value %d fired after being %s", e.Value, prev)
			}
			seen[e.Value] = "fired"
		}
	}
	for _, rm := range removed {
		for _, e := range rm {
			if prev, ok := seen[e.Value]; ok {
				t.Errorf("value %d removed after being %s", e.Value, prev)
			}
			seen[e.Value] = "removed"
		}
	}
	for _, lw := range last {
		for k, v := range lw {
			if _, ok := seen[v]; !ok {
				t.Errorf("last value %d armed for job %d at %d neither fired nor removed", v, k[0], k[1])
			}
		}
	}
}

// TestLeadFiresAheadInTicks: with a lead, an entry fires lead before its time, and after a firing
// the ring sleeps a whole tick, taking the entries that came due meanwhile in one batch.
func TestLeadFiresAheadInTicks(t *testing.T) {
	t.Parallel()
	fk := clock.NewFake(t0)
	rec := newRecorder()
	r := ring.New(fk, rec.fire)
	r.SetLead(100*time.Millisecond, 10*time.Millisecond)
	e := func(job int64, ms int) entry {
		return entry{JobID: job, FireAt: at(time.Duration(ms) * time.Millisecond), Value: int(job)}
	}
	for _, x := range []entry{e(1, 200), e(2, 201), e(3, 205), e(4, 215), e(5, 260)} {
		mustAdd(t, r, x)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(r.Stop)
	// +100: the first entry, 100 ms ahead; +110, a tick later: those due by +210; +120: the one
	// due at +215 (5 ms after the previous wake-up's horizon, but not before a tick); +160: the
	// last, once its lead is reached.
	batches := map[int][]entry{100: {e(1, 200)}, 110: {e(2, 201), e(3, 205)}, 120: {e(4, 215)}, 160: {e(5, 260)}}
	var want [][]entry
	fired := 0
	for ms := 1; ms <= 160; ms++ {
		blockUntilTimers(t, fk, 1)
		if got := rec.snapshot(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("at +%dms fired %v, want %v", ms-1, got, want)
		}
		fk.Advance(time.Millisecond)
		if b, ok := batches[ms]; ok {
			want = append(want, b)
			fired += len(b)
			rec.waitFired(t, fired)
		}
	}
	if got := rec.snapshot(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("fired %v, want %v", got, want)
	}
}
