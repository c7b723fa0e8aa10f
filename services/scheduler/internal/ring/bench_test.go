package ring_test

import (
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/ring"
)

// armed is the working size the benchmarks hold: 100k fires in a 5s pre-read window.
const armed = 100_000

// fill arms n entries of n/perJob jobs spread over the 5s after t0.
func fill(r *ring.Ring[int], first, n, perJob int) {
	for i := range n {
		r.Add(entry{JobID: int64(first + i/perJob), FireAt: at(time.Millisecond) + int64(i*7919%5000), Value: i})
	}
}

// BenchmarkAdd arms new fires into a ring holding 100k to 200k (it is refilled every 100k adds).
func BenchmarkAdd(b *testing.B) {
	fk := clock.NewFake(t0)
	r := ring.New(fk, func([]entry) {})
	if err := r.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer r.Stop()
	fill(r, 0, armed, 1)
	// One round of adds and removals first, so that the slab, heap and maps have grown.
	fill(r, armed, armed, 1)
	unfill := func() {
		for j := range armed {
			r.RemoveJob(int64(armed + j))
		}
	}
	unfill()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == armed {
			b.StopTimer()
			unfill()
			b.StartTimer()
			i = 0
		}
		r.Add(entry{JobID: int64(armed + i), FireAt: at(time.Millisecond) + int64(i*104729%5000), Value: i})
		i++
	}
}

// BenchmarkAddFire is the trigger path at 100k fires a second: each op arms one fire 1s ahead
// while the fake clock steps 1ms at a time and the ring fires each millisecond's batch of 100,
// with ~100k armed. An op is one Add plus one fire.
func BenchmarkAddFire(b *testing.B) {
	const perMs, leadMs = 100, 1000
	fk := clock.NewFake(t0)
	batches := make(chan int, 1)
	r := ring.New(fk, func(due []entry) { batches <- len(due) })
	if err := r.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer r.Stop()
	timeout := time.NewTimer(time.Hour)
	defer timeout.Stop()
	ms, j := 0, 0
	// add arms the next fire, and after every perMs of them moves the clock 1ms and waits for the
	// batch it makes due.
	add := func() {
		r.Add(entry{JobID: int64(j), FireAt: at(time.Duration(ms+leadMs+1) * time.Millisecond)})
		if j++; j < perMs {
			return
		}
		j = 0
		ms++
		fk.Advance(time.Millisecond)
		if ms <= leadMs {
			return // the first fires are due only once the lead has passed
		}
		timeout.Reset(5 * time.Second)
		select {
		case n := <-batches:
			if n != perMs {
				b.Fatalf("batch of %d, want %d", n, perMs)
			}
		case <-timeout.C:
			b.Fatal("no batch within 5s")
		}
	}
	// Fill the lead window, then run a while so that the slab, heap and maps reach their size.
	for range perMs * leadMs * 2 {
		add()
	}
	b.ReportAllocs()
	for b.Loop() {
		add()
	}
}

// BenchmarkRemoveJob disarms jobs of 5 fires each (a 1s FIX_RATE job in a 5s window) from a ring
// of 100k, refilled when empty.
func BenchmarkRemoveJob(b *testing.B) {
	const perJob = 5
	fk := clock.NewFake(t0)
	r := ring.New(fk, func([]entry) {})
	if err := r.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer r.Stop()
	fill(r, 0, armed, perJob)
	b.ReportAllocs()
	job := 0
	for b.Loop() {
		if job == armed/perJob {
			b.StopTimer()
			fill(r, 0, armed, perJob)
			b.StartTimer()
			job = 0
		}
		if got := r.RemoveJob(int64(job)); len(got) != perJob {
			b.Fatalf("RemoveJob(%d) returned %d entries, want %d", job, len(got), perJob)
		}
		job++
	}
}
