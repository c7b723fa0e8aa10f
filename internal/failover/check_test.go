package failover_test

import (
	"fmt"
	"testing"
	"time"
)

// TestCheck proves the counting of TestLeaderKill on made-up executions: two jobs, the first
// firing at 10.000 s, 11.000 s, …, the second at 10.500 s, …, both stopped at 15 s, so the
// window (stop − stopMargin = 13 s) holds 4 + 3 fires.
func TestCheck(t *testing.T) {
	t.Parallel()
	first := map[int64]int64{1: 10_000, 2: 10_500}
	stopped := map[int64]int64{1: 15_000, 2: 15_000}
	ex := func(job, sched, arrived int64, id string) execution {
		if id == "" {
			id = fmt.Sprintf("%d-%d-0-0", job, sched)
		}
		return execution{jobID: job, triggerID: id, scheduled: sched, arrived: time.UnixMilli(arrived), trigType: "CRON"}
	}
	onTime := func(job, sched int64) execution { return ex(job, sched, sched+2, "") }
	all := []execution{
		onTime(1, 10_000), onTime(1, 11_000), onTime(1, 12_000), onTime(1, 13_000),
		onTime(2, 10_500), onTime(2, 11_500), onTime(2, 12_500),
	}
	without := func(drop int) []execution {
		var out []execution
		for i, e := range all {
			if i != drop {
				out = append(out, e)
			}
		}
		return out
	}
	plus := func(extra ...execution) []execution { return append(append([]execution(nil), all...), extra...) }

	for _, tc := range []struct {
		name                                  string
		execs                                 []execution
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := check(tc.execs, first, stopped, nil)
			if r.checked != 7 {
				t.Errorf("checked = %d, want 7", r.checked)
			}
			if r.lost != tc.lost || r.doubled != tc.doubled || r.doubledSameID != tc.doubledSameID || r.offGrid != tc.offGrid {
				t.Errorf("lost, doubled, doubled same id, off grid = %d, %d, %d, %d; want %d, %d, %d, %d",
					r.lost, r.doubled, r.doubledSameID, r.offGrid, tc.lost, tc.doubled, tc.doubledSameID, tc.offGrid)
			}
		})
	}

	t.Run("kills", func(t *testing.T) {
		t.Parallel()
		// Killed at 11.200 s: 11.500 and 12.000 are lost, 12.500 (of job 2) runs 1.5 s late and is
		// the new leader's first fire, 1.8 s after the kill. A straggler of the old leader (11.000,
		// arriving after the kill) does not count as the new leader's.
		kills := []kill{{n: 1, replica: "r1", at: time.UnixMilli(11_200)}}
		execs := []execution{
			onTime(1, 10_000), ex(1, 11_000, 11_210, ""), ex(1, 13_000, 13_001, ""),
			onTime(2, 10_500), ex(2, 12_500, 13_000, ""),
		}
		r := check(execs, first, stopped, kills)
		if r.lost != 2 || r.lostBeforeKills != 0 || r.kills[0].lost != 2 {
			t.Errorf("lost = %d (before kills %d, after kill 1 %d), want 2 (0, 2)", r.lost, r.lostBeforeKills, r.kills[0].lost)
		}
		if got, want := r.kills[0].gap, 1800*time.Millisecond; got != want {
			t.Errorf("gap = %v, want %v", got, want)
		}
	})
}
