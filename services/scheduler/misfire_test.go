package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/ring"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
)

func TestPlanMisfires(t *testing.T) {
	t.Parallel()
	const now = int64(1_800_000_000_000)
	const threshold = 5 * time.Second
	s := func(d time.Duration) int64 { return now + d.Milliseconds() }
	mixed := []int64{s(-time.Minute), s(-30 * time.Second), s(-5 * time.Second), s(time.Second)}
	tests := []struct {
		name      string
		strategy  misfireStrategy
		owed      []int64
		threshold time.Duration
		want      misfirePlan
	}{
		{name: "nothing owed", strategy: misfireFireOnceNow, threshold: threshold},
		{
			name: "fires within the threshold are sent as they are", strategy: misfireDoNothing, threshold: threshold,
			owed: []int64{s(-4 * time.Second), s(0), s(2 * time.Second)},
			want: misfirePlan{send: []int64{s(-4 * time.Second), s(0), s(2 * time.Second)}},
		},
		{
			name: "DO_NOTHING skips every late fire", strategy: misfireDoNothing, threshold: threshold, owed: mixed,
			want: misfirePlan{send: mixed[2:], skip: mixed[:2]},
		},
		{
			name: "FIRE_ONCE_NOW runs once now as the latest late fire and skips the others", strategy: misfireFireOnceNow,
			threshold: threshold, owed: mixed,
			want: misfirePlan{send: mixed[2:], skip: mixed[:1], onceNowMs: mixed[1]},
		},
		{
			name: "FIRE_ONCE_NOW with one late fire runs it now and skips nothing", strategy: misfireFireOnceNow,
			threshold: threshold, owed: []int64{s(-58 * time.Second)},
			want: misfirePlan{onceNowMs: s(-58 * time.Second)},
		},
		{
			name: "DO_NOTHING with one late fire skips it", strategy: misfireDoNothing,
			threshold: threshold, owed: []int64{s(-58 * time.Second)},
			want: misfirePlan{skip: []int64{s(-58 * time.Second)}},
		},
		{
			name: "exactly the threshold late is on time, a millisecond more is late", strategy: misfireDoNothing,
			threshold: threshold, owed: []int64{s(-threshold - time.Millisecond), s(-threshold)},
			want: misfirePlan{send: []int64{s(-threshold)}, skip: []int64{s(-threshold - time.Millisecond)}},
		},
		{
			name: "a zero threshold makes every past fire late", strategy: misfireFireOnceNow, threshold: 0,
			owed: []int64{s(-2 * time.Millisecond), s(-time.Millisecond), s(0)},
			want: misfirePlan{send: []int64{s(0)}, skip: []int64{s(-2 * time.Millisecond)}, onceNowMs: s(-time.Millisecond)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := planMisfires(tt.strategy, tt.owed, now, tt.threshold)
			if !slices.Equal(got.send, tt.want.send) || !slices.Equal(got.skip, tt.want.skip) || got.onceNowMs != tt.want.onceNowMs {
				t.Errorf("plan = %+v, want %+v", got, tt.want)
			}
			if n := len(got.send) + len(got.skip) + min(int(got.onceNowMs), 1); n != len(tt.owed) {
				t.Errorf("plan accounts for %d fires, want every one of the %d owed", n, len(tt.owed))
			}
		})
	}
}

// TestPlanMisfiresRunsOnceOverRepeatedTakeovers: deciding again over the same owed fires at a
// later time (a second takeover after the first died) never picks a run now that the first
// decision neither ran now nor sent as itself, so the two together run each fire at most once
// and make at most one run now that is not a fire sent anyway.
func TestPlanMisfiresRunsOnceOverRepeatedTakeovers(t *testing.T) {
	t.Parallel()
	const threshold = 5 * time.Second
	owed := []int64{1_000, 11_000, 21_000, 31_000, 41_000, 51_000}
	for first := int64(0); first <= 60_000; first += 500 {
		a := planMisfires(misfireFireOnceNow, owed, first, threshold)
		for second := first; second <= 70_000; second += 1_500 {
			b := planMisfires(misfireFireOnceNow, owed, second, threshold)
			if b.onceNowMs == 0 || b.onceNowMs == a.onceNowMs || slices.Contains(a.send, b.onceNowMs) {
				continue
			}
			t.Fatalf("at %d the run now is %d; at %d it is %d, which the first decision skipped: a second run now",
				first, a.onceNowMs, second, b.onceNowMs)
		}
	}
}

func TestMisfireReason(t *testing.T) {
	t.Parallel()
	skip := misfireReason(misfireDoNothing, 7, 1_000, 0, 59_000, 5*time.Second)
	if want := "misfire: 58s late (misfire threshold 5s); the job's misfire strategy DO_NOTHING skipped it"; skip != want {
		t.Errorf("DO_NOTHING reason = %q, want %q", skip, want)
	}
	once := misfireReason(misfireFireOnceNow, 7, 1_000, 11_000, 59_000, 5*time.Second)
	if !strings.Contains(once, "FIRE_ONCE_NOW") || !strings.Contains(once, TriggerID(7, 11_000, 0, 0)) {
		t.Errorf("FIRE_ONCE_NOW reason = %q, want the strategy and the run's trigger id", once)
	}
}

// TestPreReadMisfiresFollowTheJobsStrategy: a pre-read that finds a job's next fire 58 s late
// (the misfire threshold is 5 s) records it SKIPPED under its own trigger id when the job's
// strategy is DO_NOTHING, and runs it once now, as a MISFIRE fire under that trigger id, when it
// is FIRE_ONCE_NOW; both jobs carry on from now. The run now and the skipped fire are pending
// fires until dispatched or recorded, so a leader that dies first leaves them to the next one,
// and a second pre-read decides nothing again.
func TestPreReadMisfiresFollowTheJobsStrategy(t *testing.T) {
	t.Parallel()
	runs := newRunCounter(nil)
	_, addr := agent(t, runs, nil)
	s, ingest, clk := recordingService(t, Config{MisfireThreshold: 5 * time.Second, DispatchTimeout: bpWait})
	const group = 1
	manualGroup(s, group, addr)
	ctx := t.Context()
	if err := s.jobs.raiseFence(ctx, 0, 1, "t"); err != nil {
		t.Fatal(err)
	}
	nowMs := clk.Now().UnixMilli()
	lateMs := nowMs - 58_000
	newJob := func(m misfireStrategy) int64 {
		t.Helper()
		id, err := s.jobs.insert(ctx, &jobRow{GroupID: group, Name: m.String(), ScheduleType: schedule.FixRate,
			ScheduleExpr: "1m", Misfire: m, Route: route.First, Block: blockSerial,
			RetryCount: 1, RetryBackoff: retryNoWait, GlueType: glueBean, Handler: "count",
			Status: jobRunning, NextFireMs: lateMs}, 1)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	doNothing := newJob(misfireDoNothing)
	onceNow := newJob(misfireFireOnceNow)
	// A ring that is not running: what the pre-read arms stays there to be looked at.
	l := &engine{s: s, epoch: 1, ring: ring.New(clk, func([]ringEntry) {}), owed: newOwed(), lastScanMs: nowMs}
	if _, err := l.preRead(ctx); err != nil {
		t.Fatal(err)
	}

	skippedID := TriggerID(doNothing, lateMs, 0, 0)
	var skip *fire
	for _, e := range l.ring.RemoveJob(doNothing) {
		switch {
		case e.Value.kind == kindSkipped && skip == nil:
			skip = e.Value
			if e.FireAt != nowMs || skip.fireMs != lateMs || skip.skip == "" || skip.trigType != triggerCron {
				t.Errorf("skipped fire armed at %d for the fire at %d (%v, why %q), want a CRON fire due now (%d) for the late fire at %d, with why",
					e.FireAt, skip.fireMs, skip.trigType, skip.skip, nowMs, lateMs)
			}
		case e.Value.fireMs < nowMs:
			t.Errorf("DO_NOTHING job: a fire at %d (%v) armed, want only fires from now on", e.Value.fireMs, e.Value.trigType)
		}
	}
	if skip == nil {
		t.Fatal("DO_NOTHING job: its late fire was not kept to be recorded SKIPPED")
	}

	var run *fire
	for _, e := range l.ring.RemoveJob(onceNow) {
		switch {
		case e.Value.trigType == triggerMisfire && run == nil:
			run = e.Value
			if e.FireAt != nowMs || run.fireMs != lateMs || run.kind != kindOnceNow {
				t.Errorf("run now armed at %d for the fire at %d (%v), want due now (%d), for the late fire at %d, a %v",
					e.FireAt, run.fireMs, run.kind, nowMs, lateMs, kindOnceNow)
			}
		case e.Value.fireMs < nowMs:
			t.Errorf("FIRE_ONCE_NOW job: a %v fire at %d armed, want one MISFIRE run and fires from now on", e.Value.trigType, e.Value.fireMs)
		}
	}
	if run == nil {
		t.Fatal("FIRE_ONCE_NOW job: no MISFIRE run armed")
	}
	runID := TriggerID(onceNow, lateMs, 0, 0)
	if n := pendingCount(t, s); n != 2 {
		t.Errorf("%d pending fires, want the run now's and the skipped fire's", n)
	}

	// The next pre-read decides nothing again: the jobs were advanced with the decision.
	clk.Advance(time.Second)
	if _, err := l.preRead(ctx); err != nil {
		t.Fatal(err)
	}
	for _, job := range []int64{doNothing, onceNow} {
		for _, e := range l.ring.RemoveJob(job) {
			if e.Value.fireMs < nowMs {
				t.Errorf("second pre-read armed job %d's %v fire at %d again", job, e.Value.trigType, e.Value.fireMs)
			}
		}
	}

	// The leader dies before the skipped fire's record leaves: the next leader's pre-read finds
	// the fire in pending_fires and records it.
	if err := s.jobs.raiseFence(ctx, 0, 2, "t2"); err != nil {
		t.Fatal(err)
	}
	next := &engine{s: s, epoch: 2, ring: ring.New(clk, func([]ringEntry) {}), owed: newOwed(), lastScanMs: clk.Now().UnixMilli()}
	if _, err := next.preRead(ctx); err != nil {
		t.Fatal(err)
	}
	var again *fire
	for _, e := range next.ring.RemoveJob(doNothing) {
		if e.Value.kind == kindSkipped {
			again = e.Value
			again.dueMs = e.FireAt
		}
	}
	if again == nil || again.fireMs != lateMs {
		t.Fatalf("the next leader armed %v, want the skipped fire at %d", again, lateMs)
	}
	s.submit(again)
	rec := waitRecords(t, ingest, []string{skippedID})[skippedID]
	if rec.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_SKIPPED || rec.GetScheduledUnixMs() != lateMs ||
		rec.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_CRON ||
		!strings.Contains(rec.GetTriggerMessage(), "58s late") || !strings.Contains(rec.GetTriggerMessage(), "DO_NOTHING") {
		t.Errorf("DO_NOTHING job's late fire recorded %v, want a SKIPPED CRON record of the fire at %d saying how late and the strategy", rec, lateMs)
	}
	waitFor(t, "the skipped fire's row goes once its record is acknowledged", func() bool { return pendingCount(t, s) == 1 })

	run.dueMs = nowMs
	s.dispatch(run, trace.Link{}, nil)
	runs.waitStarts(t, 1)
	rec = waitRecords(t, ingest, []string{runID})[runID]
	if rec.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK || rec.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_MISFIRE ||
		rec.GetScheduledUnixMs() != lateMs {
		t.Errorf("run now recorded %v, want an OK MISFIRE record of the fire at %d", rec, lateMs)
	}
	if got := runs.count(runID); got != 1 {
		t.Errorf("run now ran %d times, want once", got)
	}
	waitFor(t, "the run now's pending fire is settled", func() bool { return pendingCount(t, s) == 0 })
	if recs := ingest.Records(); recs[TriggerID(onceNow, lateMs, 0, 0)].GetTriggerOutcome() == logsv1.TriggerOutcome_TRIGGER_OUTCOME_SKIPPED ||
		recs[skippedID].GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_SKIPPED {
		t.Errorf("records %v: want the DO_NOTHING fire skipped and the FIRE_ONCE_NOW one run", recs)
	}
	if got := runs.count(skippedID); got != 0 {
		t.Errorf("the skipped fire ran %d times", got)
	}
}

// pendingCount counts the rows of pending_fires.
func pendingCount(t *testing.T, s *Service) int {
	t.Helper()
	var n int
	if err := storeDB(s).QueryRowContext(t.Context(), `SELECT COUNT(*) FROM pending_fires`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSkippedCompletionPlansTheNextFixDelayFire: the completion of a FIX_DELAY job's fire its
// misfire strategy skipped plans the job's next fire, and, though the job retries failures and
// has a child job, stores no retry and fires no child.
func TestSkippedCompletionPlansTheNextFixDelayFire(t *testing.T) {
	t.Parallel()
	r := newCompletionRig(t)
	child := r.job(t, schedule.None, "")
	job := r.job(t, schedule.FixDelay, "10s", child)
	fireMs := r.clk.Now().Add(-time.Minute).UnixMilli()
	r.handle(t, job, fireMs, [2]logsv1.RunStatus{logsv1.RunStatus_RUN_STATUS_SKIPPED})
	// The skipped fire's run ended a minute ago (handle: 50 ms after its time), more than the
	// job's 10 s delay: the next fire is due at once, when the completion is handled.
	if next, want := r.nextFire(t, job), r.clk.Now().Add(-time.Millisecond).UnixMilli(); next != want {
		t.Errorf("next fire = %d, want %d (at once: 10 s after the skipped fire's end has passed)", next, want)
	}
	if _, ok := r.pendingDue(t, job, fireMs, 1); ok {
		t.Error("a skipped fire got a retry")
	}
	if _, ok := r.pendingDue(t, child, fireMs, 0); ok {
		t.Error("a skipped fire fired its child job")
	}
	if got := r.armed(job); len(got) > 0 {
		t.Errorf("armed %v for the skipped fire, want nothing", got)
	}
}
