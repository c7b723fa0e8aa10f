package scheduler

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

func TestFiresInWindow(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	ms := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
	const threshold = 5 * time.Second
	horizon := ms(5 * time.Second)
	tests := []struct {
		name      string
		job       jobRow
		wantFires []int64
		wantTypes []triggerType
		wantNext  int64
		// wantOnceNow is the misfire's FIRE_ONCE_NOW run (0: none), wantSkipped its skipped fires.
		wantOnceNow int64
		wantSkipped []int64
	}{
		{
			name:      "1 s FIX_RATE arms every fire in the window",
			job:       jobRow{ScheduleType: schedule.FixRate, ScheduleExpr: "1s", NextFireMs: ms(500 * time.Millisecond)},
			wantFires: []int64{ms(500 * time.Millisecond), ms(1500 * time.Millisecond), ms(2500 * time.Millisecond), ms(3500 * time.Millisecond), ms(4500 * time.Millisecond)},
			wantNext:  ms(5500 * time.Millisecond),
		},
		{
			name:      "slightly late fires still fire at their own time",
			job:       jobRow{ScheduleType: schedule.FixRate, ScheduleExpr: "10s", NextFireMs: ms(-3 * time.Second)},
			wantFires: []int64{ms(-3 * time.Second)},
			wantNext:  ms(7 * time.Second),
		},
		{
			name:        "misfire DO_NOTHING skips and carries on from now",
			job:         jobRow{ScheduleType: schedule.FixRate, ScheduleExpr: "10s", NextFireMs: ms(-time.Minute), Misfire: misfireDoNothing},
			wantSkipped: []int64{ms(-time.Minute)},
			wantNext:    ms(10 * time.Second),
		},
		{
			name:        "misfire FIRE_ONCE_NOW runs once now as the late fire",
			job:         jobRow{ScheduleType: schedule.FixRate, ScheduleExpr: "10s", NextFireMs: ms(-time.Minute), Misfire: misfireFireOnceNow},
			wantOnceNow: ms(-time.Minute),
			wantNext:    ms(10 * time.Second),
		},
		{
			name:        "misfire of a FIX_DELAY job skips and waits for the skip's completion",
			job:         jobRow{ScheduleType: schedule.FixDelay, ScheduleExpr: "10s", NextFireMs: ms(-6 * time.Second)},
			wantSkipped: []int64{ms(-6 * time.Second)},
			wantNext:    0,
		},
		{
			name:      "a fire exactly the threshold late is on time",
			job:       jobRow{ScheduleType: schedule.FixRate, ScheduleExpr: "10s", NextFireMs: ms(-5 * time.Second)},
			wantFires: []int64{ms(-5 * time.Second), ms(5 * time.Second)},
			wantNext:  ms(15 * time.Second),
		},
		{
			name:      "FIX_DELAY arms one fire and waits for its completion",
			job:       jobRow{ScheduleType: schedule.FixDelay, ScheduleExpr: "1s", NextFireMs: ms(time.Second)},
			wantFires: []int64{ms(time.Second)},
			wantNext:  0,
		},
		{
			name:      "ONCE fires and has no next",
			job:       jobRow{ScheduleType: schedule.Once, ScheduleExpr: now.Add(2 * time.Second).Format(time.RFC3339), NextFireMs: ms(2 * time.Second)},
			wantFires: []int64{ms(2 * time.Second)},
			wantNext:  0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sch, err := parseSchedule(&tt.job)
			if err != nil {
				t.Fatalf("parseSchedule: %v", err)
			}
			fires, onceNow, skipped, _, next := firesInWindow(&tt.job, sch, now, horizon, threshold)
			switch {
			case tt.wantOnceNow == 0 && onceNow != nil:
				t.Errorf("run now at %d, want none", onceNow.fireMs)
			case tt.wantOnceNow != 0 && (onceNow == nil || onceNow.fireMs != tt.wantOnceNow ||
				onceNow.trigType != triggerMisfire):
				t.Errorf("run now = %+v, want a MISFIRE fire at %d", onceNow, tt.wantOnceNow)
			}
			var gotSkipped []int64
			for _, sk := range skipped {
				gotSkipped = append(gotSkipped, sk.f.fireMs)
				if !strings.Contains(sk.why, "misfire") || !strings.Contains(sk.why, "DO_NOTHING") {
					t.Errorf("skipped fire %d: reason %q, want it to say misfire and DO_NOTHING", sk.f.fireMs, sk.why)
				}
			}
			if !slices.Equal(gotSkipped, tt.wantSkipped) {
				t.Errorf("skipped = %v, want %v", gotSkipped, tt.wantSkipped)
			}
			var got []int64
			for i, f := range fires {
				got = append(got, f.fireMs)
				want := triggerCron
				if tt.wantTypes != nil {
					want = tt.wantTypes[i]
				}
				if f.trigType != want {
					t.Errorf("fire %d type = %v, want %v", i, f.trigType, want)
				}
			}
			if len(got) != len(tt.wantFires) {
				t.Fatalf("fires = %v, want %v", got, tt.wantFires)
			}
			for i := range got {
				if got[i] != tt.wantFires[i] {
					t.Errorf("fire %d = %d, want %d", i, got[i], tt.wantFires[i])
				}
			}
			if next != tt.wantNext {
				t.Errorf("next = %d, want %d", next, tt.wantNext)
			}
		})
	}
}

func TestTriggerIDIsDeterministic(t *testing.T) {
	t.Parallel()
	a, b := TriggerID(42, 1763884800123, 1, 2), TriggerID(42, 1763884800123, 1, 2)
	if a != b || a != "42-1763884800123-1-2" {
		t.Errorf("TriggerID = %q and %q, want both 42-1763884800123-1-2", a, b)
	}
	if TriggerID(42, 1763884800123, 1, 3) == a {
		t.Error("another attempt got the same trigger id")
	}
}

// TestFailedPreReadReadsItsChangesAgain: the jobs changed since the last scan are read from that
// scan's time (less a second), and a scan that fails (here fenced off) does not move it, so
// the next scan reads again what the failed one did not apply: an API change to an armed job
// committed meanwhile is never skipped. A scan that succeeds moves it.
func TestFailedPreReadReadsItsChangesAgain(t *testing.T) {
	r := newCompletionRig(t)
	ctx := t.Context()
	id := r.job(t, schedule.FixRate, "1s")
	j, err := r.s.jobs.get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// An armed fire, so the scan reads the changed jobs.
	r.l.ring.Add(ringEntry{JobID: id, FireAt: r.clk.Now().Add(time.Minute).UnixMilli(),
		Value: &fire{job: j, fireMs: r.clk.Now().Add(time.Minute).UnixMilli(), kind: kindScheduled, trigType: triggerCron}})
	if _, err := r.l.preRead(ctx); err != nil {
		t.Fatal(err)
	}
	scanned := r.clk.Now().UnixMilli()
	if r.l.lastScanMs != scanned {
		t.Fatalf("a scan that succeeded left the last scan at %d; want %d", r.l.lastScanMs, scanned)
	}
	r.clk.Advance(5 * time.Second)
	if err := r.s.jobs.raiseFence(ctx, 0, 2, "r2"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.l.preRead(ctx); !errors.Is(err, errDeposed) {
		t.Fatalf("pre-read of a partition a newer leader fenced: %v; want errDeposed", err)
	}
	if r.l.lastScanMs != scanned {
		t.Errorf("a scan that failed moved the last scan to %d; want it left at %d, so that the next scan reads the changes since", r.l.lastScanMs, scanned)
	}
}
