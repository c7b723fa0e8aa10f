package firecheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// TestCheck proves the counting on made-up executions: two jobs, the first firing at 10.000 s,
// 11.000 s, …, the second at 10.500 s, …, both checked until 13 s, so the grids expect 4 + 3 fires.
func TestCheck(t *testing.T) {
	t.Parallel()
	grids := map[int64]Grid{
		1: {First: 10_000, Period: 1000, From: 10_000, Until: 13_000},
		2: {First: 10_500, Period: 1000, From: 10_500, Until: 13_000},
	}
	ex := func(job, sched, arrived int64, id string) Execution {
		if id == "" {
			id = fmt.Sprintf("%d-%d-0-0", job, sched)
		}
		return Execution{JobID: job, TriggerID: id, ScheduledMs: sched, ArrivedNs: arrived * int64(time.Millisecond), TriggerType: "CRON"}
	}
	onTime := func(job, sched int64) Execution { return ex(job, sched, sched+2, "") }
	all := []Execution{
		onTime(1, 10_000), onTime(1, 11_000), onTime(1, 12_000), onTime(1, 13_000),
		onTime(2, 10_500), onTime(2, 11_500), onTime(2, 12_500),
	}
	without := func(drop int) []Execution {
		var out []Execution
		for i, e := range all {
			if i != drop {
				out = append(out, e)
			}
		}
		return out
	}
	plus := func(extra ...Execution) []Execution { return append(append([]Execution(nil), all...), extra...) }

	for _, tc := range []struct {
		name                                  string
		execs                                 []Execution
		lost, doubled, doubledSameID, offGrid int
	}{
		{name: "exactly once", execs: all},
		{name: "a fire lost", execs: without(2), lost: 1},
		{name: "the first fire lost", execs: without(4), lost: 1},
		{name: "everything lost", execs: nil, lost: 7},
		{name: "a fire run twice under one trigger id", execs: plus(onTime(1, 12_000)), doubled: 1, doubledSameID: 1},
		{name: "a fire run twice under two trigger ids", execs: plus(ex(2, 11_500, 13_000, "2-11500-0-1")), doubled: 1},
		{name: "a fire doubled after the window", execs: plus(onTime(1, 14_000), onTime(1, 14_000)), doubled: 1, doubledSameID: 1},
		{name: "a fire after the window is not counted", execs: plus(onTime(1, 14_000), onTime(2, 13_500))},
		{name: "a fire off the grid", execs: plus(ex(1, 11_700, 11_700, "")), offGrid: 1},
		{name: "a fire before the first", execs: plus(onTime(1, 9_000)), offGrid: 1},
		{name: "an unknown job", execs: plus(onTime(3, 10_000)), offGrid: 1},
		{name: "a child fire at a scheduled time is a fire of its own", execs: plus(ex(1, 12_000, 12_050, "1-12000-0-0-p2"))},
		{name: "a child fire alone does not run the scheduled fire", execs: append(without(2), ex(1, 12_000, 12_050, "1-12000-0-0-p2")), lost: 1},
		{name: "a child fire run twice", execs: plus(ex(1, 12_000, 12_050, "1-12000-0-0-p2"), ex(1, 12_000, 12_060, "1-12000-0-0-p2")),
			doubled: 1, doubledSameID: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := Check(tc.execs, grids, nil)
			if n := Expected(grids); n != r.Checked {
				t.Errorf("Expected = %d, Check counted %d", n, r.Checked)
			}
			if r.Checked != 7 {
				t.Errorf("checked = %d, want 7", r.Checked)
			}
			if r.Executed != 7-tc.lost {
				t.Errorf("executed = %d, want %d", r.Executed, 7-tc.lost)
			}
			if r.Lost != tc.lost || r.Doubled != tc.doubled || r.DoubledSameID != tc.doubledSameID || r.OffGrid != tc.offGrid {
				t.Errorf("lost, doubled, doubled same id, off grid = %d, %d, %d, %d; want %d, %d, %d, %d",
					r.Lost, r.Doubled, r.DoubledSameID, r.OffGrid, tc.lost, tc.doubled, tc.doubledSameID, tc.offGrid)
			}
		})
	}

	t.Run("a window that starts after the first fire", func(t *testing.T) {
		t.Parallel()
		// From 11.2 s to 12.6 s: job 1's 12.000 and job 2's 11.500 and 12.500.
		g := map[int64]Grid{
			1: {First: 10_000, Period: 1000, From: 11_200, Until: 12_600},
			2: {First: 10_500, Period: 1000, From: 11_200, Until: 12_600},
		}
		r := Check(without(5), g, nil) // 11.500 of job 2 is missing
		if n := Expected(g); n != 3 {
			t.Errorf("Expected = %d, want 3", n)
		}
		if r.Checked != 3 || r.Lost != 1 || r.Executed != 2 {
			t.Errorf("checked, lost, executed = %d, %d, %d; want 3, 1, 2", r.Checked, r.Lost, r.Executed)
		}
		if r.Lateness.N != 2 || r.Lateness.Max != 2*time.Millisecond {
			t.Errorf("lateness over %d runs, max %v; want 2 runs, max 2ms", r.Lateness.N, r.Lateness.Max)
		}
	})

	t.Run("kills", func(t *testing.T) {
		t.Parallel()
		// Killed at 11.200 s: 11.500 and 12.000 are lost, 12.500 (of job 2) runs 1.5 s late and is
		// the new leader's first fire, 1.8 s after the kill. A straggler of the old leader (11.000,
		// arriving after the kill) does not count as the new leader's.
		kills := []Kill{{N: 1, Replica: "r1", At: time.UnixMilli(11_200)}}
		execs := []Execution{
			onTime(1, 10_000), ex(1, 11_000, 11_210, ""), ex(1, 13_000, 13_001, ""),
			onTime(2, 10_500), ex(2, 12_500, 13_000, ""),
		}
		r := Check(execs, grids, kills)
		if r.Lost != 2 || r.LostBeforeKills != 0 || r.Kills[0].Lost != 2 {
			t.Errorf("lost = %d (before kills %d, after kill 1 %d), want 2 (0, 2)", r.Lost, r.LostBeforeKills, r.Kills[0].Lost)
		}
		if got, want := r.Kills[0].Gap, 1800*time.Millisecond; got != want {
			t.Errorf("gap = %v, want %v", got, want)
		}
		if got := r.Gaps(); len(got) != 1 || got[0] != 1800*time.Millisecond {
			t.Errorf("gaps = %v, want [1.8s]", got)
		}
	})

	t.Run("kill of a replica that led some partitions", func(t *testing.T) {
		t.Parallel()
		// Jobs hash to partitions by id mod 4: job 1 to partition 1, job 2 to partition 2. The
		// replica killed at 11.200 s led partitions 2 and 3: job 2's 11.500 is lost and its 12.500
		// runs at 13.000, 1.8 s after the kill; partition 3 has no job, so no gap. Job 1 (partition
		// 1, led by another replica) fires on time throughout and does not shorten the gap.
		mod4 := func(job int64) int { return int(job % 4) }
		kill := Kill{N: 1, Replica: "r2", At: time.UnixMilli(11_200), Partitions: []int{2, 3}, PartitionOf: mod4}
		graceful := Kill{N: 2, Replica: "r3", At: time.UnixMilli(12_700), Graceful: true, Partitions: []int{1}, PartitionOf: mod4}
		execs := []Execution{
			onTime(1, 10_000), onTime(1, 11_000), onTime(1, 12_000), ex(1, 13_000, 13_100, ""),
			onTime(2, 10_500), ex(2, 12_500, 13_000, ""),
		}
		r := Check(execs, grids, []Kill{kill, graceful})
		k := r.Kills[0]
		if want := []time.Duration{1800 * time.Millisecond, 0}; !slices.Equal(k.PartitionGaps, want) {
			t.Errorf("partition gaps = %v, want %v", k.PartitionGaps, want)
		}
		if k.Gap != 1800*time.Millisecond || k.Unmeasured() != 1 {
			t.Errorf("gap = %v with %d partitions unmeasured, want 1.8s with 1", k.Gap, k.Unmeasured())
		}
		if g := r.Kills[1]; !slices.Equal(g.PartitionGaps, []time.Duration{400 * time.Millisecond}) || g.Gap != 400*time.Millisecond {
			t.Errorf("graceful stop: partition gaps %v, gap %v; want [400ms], 400ms", g.PartitionGaps, g.Gap)
		}
		if got := r.Gaps(); !slices.Equal(got, []time.Duration{1800 * time.Millisecond}) {
			t.Errorf("gaps = %v, want [1.8s] (a graceful stop is not a SIGKILL)", got)
		}
		if r.Lost != 1 || k.Lost != 1 || r.LostPerJob[2] != 1 || len(r.LostPerJob) != 1 || len(r.LostSamples) != 1 || !strings.Contains(r.LostSamples[0], "kill 1 of r2, partition 2, which it led") {
			t.Errorf("lost = %d (after kill 1: %d), samples %q; want 1 in partition 2, which r2 led", r.Lost, k.Lost, r.LostSamples)
		}
		// The same kill without partitions: the first fire of any job after it, job 1's 12.000.
		whole := Check(execs, grids, []Kill{{N: 1, Replica: "r2", At: time.UnixMilli(11_200)}})
		if g := whole.Kills[0]; g.Gap != 802*time.Millisecond || g.PartitionGaps != nil {
			t.Errorf("without partitions: gap %v, partition gaps %v; want 802ms, none", g.Gap, g.PartitionGaps)
		}
	})

	t.Run("kill with a dispatch lead", func(t *testing.T) {
		t.Parallel()
		// Killed at 11.200 s with a 400 ms lead: the killed leader had sent 11.500 ahead, and it
		// runs on time; the new leader's first fire is 12.000, 2 s after the kill.
		kills := []Kill{{N: 1, Replica: "r1", At: time.UnixMilli(11_200), Lead: 400 * time.Millisecond}}
		execs := []Execution{onTime(1, 10_000), onTime(1, 11_000), onTime(2, 11_500), ex(1, 12_000, 13_200, "")}
		r := Check(execs, grids, kills)
		if got, want := r.Kills[0].Gap, 2*time.Second; got != want {
			t.Errorf("gap = %v, want %v (a fire sent ahead by the killed leader does not count)", got, want)
		}
	})
}

func TestFirstFire(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                         string
		next, created, period, first int64
	}{
		{"FIX_RATE read back before the pre-read", 11_000, 10_000, 1000, 11_000},
		{"FIX_RATE read back after two fires were armed", 13_000, 10_000, 1000, 11_000},
		{"cron on whole seconds", 11_000, 10_400, 1000, 11_000},
		{"cron read back late", 15_000, 10_400, 1000, 11_000},
		{"cron every 5 s", 15_000, 10_000, 5000, 15_000},
		{"no period", 15_000, 10_000, 0, 15_000},
	} {
		if got := FirstFire(tc.next, tc.created, tc.period); got != tc.first {
			t.Errorf("%s: FirstFire(%d, %d, %d) = %d, want %d", tc.name, tc.next, tc.created, tc.period, got, tc.first)
		}
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	ten := ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	for _, tc := range []struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{ten, 50, 5 * time.Millisecond},
		{ten, 90, 9 * time.Millisecond},
		{ten, 99, 10 * time.Millisecond},
		{ten, 100, 10 * time.Millisecond},
		{ten, 1, 1 * time.Millisecond},
		{ms(7), 99.9, 7 * time.Millisecond},
		{nil, 50, 0},
	} {
		if got := Percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.sorted, tc.p, got, tc.want)
		}
	}
	d := NewDist(ms(5, 1, 3, 2, 4))
	if d.N != 5 || d.P50 != 3*time.Millisecond || d.Max != 5*time.Millisecond || d.Min != time.Millisecond {
		t.Errorf("NewDist = %+v", d)
	}
}

func TestTally(t *testing.T) {
	t.Parallel()
	tl := NewTally()
	if !tl.WaitQuiet(time.Hour, time.Second) {
		t.Error("an empty tally is not quiet")
	}
	sched := time.UnixMilli(time.Now().UnixMilli())
	done := make(chan bool)
	go func() { done <- tl.WaitScheduledAfter(sched.Add(-time.Millisecond), 10*time.Second) }()
	for i := range 3 {
		job := &sdk.Job{ID: int64(i + 1), TriggerID: fmt.Sprintf("%d-%s", i, strings.Repeat("x", i+1)), ScheduledTime: sched.Add(time.Duration(i) * time.Second),
			TriggerType: []string{"CRON", "RETRY"}[i%2]}
		if err := tl.Handle(context.Background(), job); err != nil {
			t.Fatal(err)
		}
	}
	if !<-done {
		t.Error("WaitScheduledAfter missed a recorded fire")
	}
	if tl.WaitScheduledAfter(sched.Add(2*time.Second), 10*time.Millisecond) {
		t.Error("WaitScheduledAfter saw a fire that was not recorded")
	}
	st := tl.Stats()
	if st.Executions != 3 || st.MaxScheduledMs != sched.Add(2*time.Second).UnixMilli() || st.LastArrivedNs == 0 {
		t.Errorf("Stats = %+v", st)
	}
	if n := tl.Count(sched.UnixMilli(), sched.Add(time.Second).UnixMilli()); n != 2 {
		t.Errorf("Count of the first two seconds = %d, want 2", n)
	}
	got := tl.Snapshot(sched.UnixMilli(), sched.Add(time.Second).UnixMilli())
	if len(got) != 2 || got[0].JobID != 1 || got[1].JobID != 2 || got[0].TriggerID != "0-x" || got[1].TriggerID != "1-xx" {
		t.Errorf("Snapshot of the first two seconds = %+v", got)
	}
	got = tl.Snapshot(sched.Add(time.Second).UnixMilli(), sched.Add(2*time.Second).UnixMilli())
	want := []Execution{{JobID: 2, TriggerID: "1-xx", TriggerType: "RETRY"}, {JobID: 3, TriggerID: "2-xxx", TriggerType: "CRON"}}
	for i := range got {
		got[i].ScheduledMs, got[i].ArrivedNs = 0, 0
	}
	if !slices.Equal(got, want) {
		t.Errorf("Snapshot of the last two seconds = %+v, want %+v", got, want)
	}
}
