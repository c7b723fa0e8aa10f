package scheduler

import (
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/clock"
)

// TestSlowJobsMoveToTheSlowPool: more than ten dispatches over 500 ms within a minute move a job
// to the slow pool (XXL-JOB's rule); the next minute starts afresh.
func TestSlowJobsMoveToTheSlowPool(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	st := newSlowTracker(clk)
	for range 10 {
		st.observe(1, 600*time.Millisecond)
		st.observe(2, 100*time.Millisecond) // fast dispatches never count
	}
	if st.isSlow(1) {
		t.Error("job 1 slow after 10 slow dispatches, want fast until more than 10")
	}
	st.observe(1, 501*time.Millisecond)
	if !st.isSlow(1) || st.isSlow(2) {
		t.Errorf("isSlow(1) = %v, isSlow(2) = %v; want true, false", st.isSlow(1), st.isSlow(2))
	}
	clk.Advance(time.Minute)
	if st.isSlow(1) {
		t.Error("job 1 still slow in the next minute")
	}
}

// TestFullPoolRefuses: a pool never blocks the ring; a full queue refuses the fire.
func TestFullPoolRefuses(t *testing.T) {
	t.Parallel()
	p := newPool("fast", 1, 1)
	if !p.trySubmit(&fire{}) {
		t.Fatal("first fire refused by an empty pool")
	}
	if p.trySubmit(&fire{}) {
		t.Error("second fire accepted by a full pool (no worker started)")
	}
	p.start(func(*fire) []string { return nil })
	p.stop()
	if p.trySubmit(&fire{}) {
		t.Error("fire accepted by a stopped pool")
	}
}

// TestDropReportLogsAnOverloadOnceInAWhile: the first dropped record is reported at once, later
// ones are counted and reported at most every dropReportEvery, with the count since.
func TestDropReportLogsAnOverloadOnceInAWhile(t *testing.T) {
	var d dropReport
	t0 := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	if n, ok := d.add(t0); !ok || n != 1 {
		t.Fatalf("first drop: %d, %v; want reported with 1", n, ok)
	}
	for i := range 999 {
		if _, ok := d.add(t0.Add(time.Duration(i) * time.Millisecond)); ok {
			t.Fatalf("drop %d within %v of the report was reported", i+2, dropReportEvery)
		}
	}
	if n, ok := d.add(t0.Add(dropReportEvery)); !ok || n != 1000 {
		t.Fatalf("drop after %v: %d, %v; want reported with 1000", dropReportEvery, n, ok)
	}
}
