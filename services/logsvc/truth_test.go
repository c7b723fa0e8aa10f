package logsvc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

// The executor's word decides a run: these tests feed a fire's trigger record (OK, FAILED or
// UNKNOWN), its RUNNING report and its final result in every order, and check that the stored
// run comes out the same and that the completions published for it form one chain (each
// correcting the one before) that ends on the truth: what the scheduler acts on.

// sid is a scheduler-format trigger id: job, scheduled ms, shard, attempt.
func sid(job, schedMs int64, shard, attempt int32) string {
	return fmt.Sprintf("%d-%d-%d-%d", job, schedMs, shard, attempt)
}

// fireItems are a fire's three items: the scheduler's record (with an address other than the
// executor's: the executor's report says where the fire is), the executor's RUNNING report and
// its final result.
func fireItems(id string, job int64, outcome logsv1.TriggerOutcome, final logsv1.RunStatus) []op {
	rec := record(id, job, base)
	rec.TriggerOutcome, rec.ExecutorAddress = outcome, "10.0.0.9:1"
	rec.TriggerMessage = "route FIRST: 10.0.0.9:1\nexecutor 10.0.0.9:1: " + outcome.String()
	return []op{
		{id: id, rec: rec},
		{id: id, res: running(id, job, base+3, "10.0.0.1:9999")},
		{id: id, res: result(id, job, final, base+3)},
	}
}

// orders are the six orders of three items, by index.
var orders = [][3]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}

// splits are the ways three items in order go into write cycles: each a cycle's size.
var splits = [][]int{{1, 1, 1}, {2, 1}, {1, 2}, {3}}

// pub is one completion as the scheduler sees it.
type pub struct{ status, replaces int32 }

// chainEnd checks that completions form one chain, the first correcting nothing and each later
// one the one before, at most three long (a run is reopened once), and returns the status the
// chain ends on: what the scheduler acts on in the end.
func chainEnd(t *testing.T, what string, pubs []pub) int32 {
	t.Helper()
	var last int32
	for i, p := range pubs {
		if p.replaces != last {
			t.Errorf("%s: completion %d (%v) replaces %d, want %d: completions %v", what, i, p, p.replaces, last, pubs)
		}
		last = p.status
	}
	if len(pubs) == 0 || len(pubs) > 3 {
		t.Errorf("%s: %d completions %v, want 1 to 3", what, len(pubs), pubs)
	}
	return last
}

// TestEveryOrderOneTruth feeds a fire's record, RUNNING report and final result to the merge in
// all six orders, each split into write cycles in every way, and checks that the stored row is
// the same (but for judged, which records whether a published end was overruled) and that the
// completions end on the executor's result, with exactly one completion for an OK or UNKNOWN
// record.
func TestEveryOrderOneTruth(t *testing.T) {
	t.Parallel()
	for _, outcome := range []logsv1.TriggerOutcome{logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK,
		logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED, logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN} {
		for _, final := range []logsv1.RunStatus{logsv1.RunStatus_RUN_STATUS_SUCCESS, logsv1.RunStatus_RUN_STATUS_FAIL,
			logsv1.RunStatus_RUN_STATUS_TIMEOUT} {
			id := sid(160, base, 0, 0)
			items := fireItems(id, 160, outcome, final)
			var want *run
			for _, order := range orders {
				for _, split := range splits {
					what := fmt.Sprintf("%s record, %s result, order %v in cycles %v", outcome, final, order, split)
					stored := map[string]run{}
					var pubs []pub
					next := 0
					for _, n := range split {
						rs := newRunSet(maps.Clone(stored), base+1000)
						for _, i := range order[next : next+n] {
							if !rs.apply(items[i]) {
								t.Errorf("%s: item %d refused", what, i)
							}
						}
						next += n
						inserts, updates, done := rs.changes()
						for _, r := range append(inserts, updates...) {
							stored[r.id] = *r
						}
						for _, c := range done {
							pubs = append(pubs, pub{c.r.status, c.replaces})
						}
					}
					if end := chainEnd(t, what, pubs); end != int32(final) {
						t.Errorf("%s: completions %v end on %d, want %s", what, pubs, end, final)
					}
					if outcome != logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED && len(pubs) != 1 {
						t.Errorf("%s: completions %v, want exactly one", what, pubs)
					}
					got := stored[id]
					got.judged = 0
					if want == nil {
						want = &got
						if got.status != int32(final) || got.outcome != outcomeOK || got.address != "10.0.0.1:9999" ||
							got.startMs != base+3 || got.endMs != base+53 || got.handleMsg != "done: "+final.String() ||
							got.schedMs != base || got.handler != "demo" {
							t.Errorf("%s: run %+v, want the executor's %s at 10.0.0.1:9999 with the record's fields", what, got, final)
						}
						continue
					}
					if got != *want {
						t.Errorf("%s: run\ngot  %+v\nwant %+v", what, got, *want)
					}
				}
			}
		}
	}
}

// chain ends a watch with a sentinel run of job that completes after everything sent before
// it, and returns the completions of job and of the more jobs received until then, the
// sentinel's excluded.
func chain(t *testing.T, e *env, w interface {
	Recv() (*logsv1.WatchCompletionsResponse, error)
}, job int64, more ...int64) []*logsv1.Completion {
	t.Helper()
	sentinel := fmt.Sprintf("%d-sentinel", job)
	e.mustRecords(t, record(sentinel, job, base))
	e.mustResults(t, result(sentinel, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
	var got []*logsv1.Completion
	for {
		resp, err := within(t, "completions", w.Recv)
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		for _, c := range resp.GetCompletions() {
			if c.GetJobId() != job && !slices.Contains(more, c.GetJobId()) {
				continue
			}
			if c.GetTriggerId() == sentinel {
				return got
			}
			got = append(got, c)
		}
	}
}

func pubsOf(cs []*logsv1.Completion) []pub {
	var out []pub
	for _, c := range cs {
		out = append(out, pub{int32(c.GetStatus()), int32(c.GetReplacesStatus())})
	}
	return out
}

// TestEveryOrderOneTruthStored is TestEveryOrderOneTruth through the ingest streams into
// Postgres, each item its own batch, and the completions as WatchCompletions streams them: the
// same stored run in all six orders, and completions that end on the executor's SUCCESS, exactly
// one for an OK or UNKNOWN record.
func TestEveryOrderOneTruthStored(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, dbtest.Store{Name: "postgres", Config: db.Config{URL: dbtest.NewPostgres(t)}}, Config{Retention: -1}, false)
	for k, outcome := range []logsv1.TriggerOutcome{logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK,
		logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED, logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN} {
		t.Run(outcome.String(), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			runs := map[[3]int]*logsv1.Run{}
			t.Run("orders", func(t *testing.T) {
				for n, order := range orders {
					t.Run(fmt.Sprint(order), func(t *testing.T) {
						t.Parallel()
						job := int64(170 + 10*k + n)
						id := sid(job, base, 0, 0)
						w, cancel := watch(t, e, 0)
						defer cancel()
						items := fireItems(id, job, outcome, logsv1.RunStatus_RUN_STATUS_SUCCESS)
						for _, i := range order {
							if o := items[i]; o.rec != nil {
								e.mustRecords(t, o.rec)
							} else if refused := e.mustResults(t, o.res); len(refused) != 0 {
								t.Errorf("item %d refused", i)
							}
						}
						pubs := pubsOf(chain(t, e, w, job))
						if end := chainEnd(t, "completions", pubs); end != statusSuccess {
							t.Errorf("completions %v end on %d, want SUCCESS", pubs, end)
						}
						if outcome != logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED && len(pubs) != 1 {
							t.Errorf("completions %v, want exactly one", pubs)
						}
						r := e.run(t, id)
						r.Id, r.JobId = "", 0
						mu.Lock()
						runs[order] = r
						mu.Unlock()
					})
				}
			})
			if t.Failed() {
				return
			}
			first := runs[orders[0]]
			if first.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || first.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK ||
				first.GetExecutorAddress() != "10.0.0.1:9999" || first.GetScheduledTime().AsTime().UnixMilli() != base {
				t.Errorf("run: got %v, want SUCCESS at 10.0.0.1:9999 scheduled at base", first)
			}
			for _, order := range orders[1:] {
				if !sameRun(runs[order], first) {
					t.Errorf("order %v: run\ngot  %v\nwant %v", order, runs[order], first)
				}
			}
		})
	}
}

// countingChannel is an alarm channel that counts what it sends, by trigger id.
type countingChannel struct {
	mu   sync.Mutex
	sent map[string]int
}

func (c *countingChannel) Name() string { return "counting" }

func (c *countingChannel) Send(_ context.Context, a Alarm) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sent == nil {
		c.sent = map[string]int{}
	}
	c.sent[a.Run.GetId()]++
	return true, nil
}

func (c *countingChannel) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent[id]
}

// TestLateReportsCorrectAFailedTrigger: a run completed by a failed trigger record is reopened
// by the executor's late RUNNING report and ended by its result, its completions corrected each
// time; the alarm pass, run between them, alarms only a failure the executor confirms, once;
// the reports count each run once, as its truth; a second result is refused.
func TestLateReportsCorrectAFailedTrigger(t *testing.T) {
	t.Parallel()
	ch := &countingChannel{}
	e := newEnvWith(t, dbtest.Store{Name: "postgres", Config: db.Config{URL: dbtest.NewPostgres(t)}},
		Config{Retention: -1, AlarmChannels: []AlarmChannel{ch}}, false)
	const job = 180
	w, cancel := watch(t, e, 0)
	defer cancel()
	ok, failed := sid(job, base, 0, 0), sid(job, base+1000, 0, 0)
	for _, id := range []string{ok, failed} {
		rec := record(id, job, base)
		rec.TriggerOutcome, rec.TriggerMessage = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED, "executor 10.0.0.1:9999: connection reset"
		e.mustRecords(t, rec)
	}
	alarmPass := func() {
		t.Helper()
		if _, err := e.svc.alarmPass(ctxFor(t)); err != nil {
			t.Fatalf("alarm pass: %v", err)
		}
	}
	// The executor reports both running: they run after all, and nobody is alarmed of a
	// failure that was not.
	e.mustResults(t, running(ok, job, base+3, "10.0.0.1:9999"), running(failed, job, base+3, "10.0.0.1:9999"))
	alarmPass()
	for _, id := range []string{ok, failed} {
		r := e.run(t, id)
		if r.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING || r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK ||
			r.GetAlarmStatus() != logsv1.AlarmStatus_ALARM_STATUS_PENDING || r.GetEndTime() != nil {
			t.Errorf("%s after its RUNNING report: got %v, want RUNNING, outcome OK, alarm PENDING", id, r)
		}
		if n := ch.count(id); n != 0 {
			t.Errorf("%s running: %d alarms sent, want none", id, n)
		}
	}
	if refused := e.mustResults(t, result(ok, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+3),
		result(failed, job, logsv1.RunStatus_RUN_STATUS_FAIL, base+3)); len(refused) != 0 {
		t.Errorf("results of the reopened runs: refused %v, want none", refused)
	}
	alarmPass()
	alarmPass()
	if n := ch.count(ok); n != 0 {
		t.Errorf("%s succeeded: %d alarms sent, want none", ok, n)
	}
	if n := ch.count(failed); n != 1 {
		t.Errorf("%s failed on its executor: %d alarms sent, want 1", failed, n)
	}
	if r := e.run(t, ok); r.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || r.GetAlarmStatus() != logsv1.AlarmStatus_ALARM_STATUS_NOT_NEEDED {
		t.Errorf("%s: got %v, want SUCCESS, no alarm needed", ok, r)
	}
	if refused := e.mustResults(t, result(ok, job, logsv1.RunStatus_RUN_STATUS_FAIL, base+3)); len(refused) != 1 {
		t.Errorf("second result: refused %v, want it refused", refused)
	}
	got := map[string][]pub{}
	for _, c := range chain(t, e, w, job) {
		got[c.GetTriggerId()] = append(got[c.GetTriggerId()], pub{int32(c.GetStatus()), int32(c.GetReplacesStatus())})
	}
	want := map[string][]pub{
		ok:     {{statusFail, 0}, {statusRunning, statusFail}, {statusSuccess, statusRunning}},
		failed: {{statusFail, 0}, {statusRunning, statusFail}, {statusFail, statusRunning}},
	}
	for id, w := range want {
		if fmt.Sprint(got[id]) != fmt.Sprint(w) {
			t.Errorf("completions of %s: got %v, want %v", id, got[id], w)
		}
	}
	day := time.UnixMilli(base).UTC().Format(time.DateOnly)
	rep, err := e.logs.GetReport(ctxFor(t), &logsv1.GetReportRequest{StartDate: day, EndDate: day})
	if err != nil {
		t.Fatalf("GetReport: %v", err)
	}
	for _, j := range rep.GetJobs() {
		if j.GetJobId() == job && (j.GetSuccess() != 2 || j.GetFail() != 1) { // the sentinel succeeded too
			t.Errorf("job report: got %v, want 2 successes (one the sentinel's) and 1 failure", j)
		}
	}
}

// fakeView is an ExecutorView the test sets.
type fakeView struct {
	mu     sync.Mutex
	online map[string]bool
}

func (v *fakeView) Online(addr string) (bool, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.online[addr], true
}

func (v *fakeView) ExecutorCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.online)
}

func (v *fakeView) set(addr string, online bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.online[addr] = online
}

// failingJobs fails every job lookup.
type failingJobs struct{}

func (failingJobs) Job(context.Context, int64) (JobInfo, error) {
	return JobInfo{}, errors.New("scheduler away")
}
func (failingJobs) CountJobs(context.Context, []int64) (int64, error) {
	return 0, errors.New("scheduler away")
}

// TestUnknownStaysUnknownUntilDecided: a dispatch whose answer never came leaves its run
// RUNNING with trigger outcome UNKNOWN and publishes nothing, through a resent record and
// through sweeps, until something decides it: the executor's report, a record that knows, or
// the lost-run sweep once LostAfter plus the job's timeout has passed (on a fake clock), whether
// the executor left or, still online, reported nothing; and the executor's report still
// overrules the sweep.
func TestUnknownStaysUnknownUntilDecided(t *testing.T) {
	t.Parallel()
	const job, noTimeout = 190, 191
	const alive, gone = "10.8.0.1:1", "10.8.0.2:1"
	view := &fakeView{online: map[string]bool{alive: true, gone: true}}
	e := newEnvWith(t, dbtest.Store{Name: "postgres", Config: db.Config{URL: dbtest.NewPostgres(t)}}, Config{Retention: -1,
		Executors: view, Jobs: fakeJobs{job: {Name: "slow", Timeout: time.Hour}, noTimeout: {Name: "untimed"}}}, false)
	trig := time.UnixMilli(base + 2) // record() triggers at base+2
	now := trig
	var clockMu sync.Mutex
	e.svc.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	setNow := func(d time.Duration) { clockMu.Lock(); defer clockMu.Unlock(); now = trig.Add(d) }
	w, cancel := watch(t, e, 0)
	defer cancel()
	unknown := func(id string, job int64, addr string) *logsv1.TriggerRecord {
		r := record(id, job, base)
		r.TriggerOutcome, r.ExecutorAddress = logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN, addr
		r.TriggerMessage = "executor " + addr + ": sent, no answer: context deadline exceeded"
		return r
	}
	var (
		reported = sid(job, base, 0, 0)       // the executor reports it
		recOK    = sid(job, base+1000, 0, 0)  // a later record says the executor took it
		recFail  = sid(job, base+2000, 0, 0)  // a later record says it never got there
		silent   = sid(job, base+3000, 0, 0)  // on a live executor that never says anything
		left     = sid(job, base+4000, 0, 0)  // on an executor that leaves
		untimed  = sid(noTimeout, base, 0, 0) // a job without a timeout: LostAfter alone
	)
	e.mustRecords(t, unknown(reported, job, alive), unknown(recOK, job, alive), unknown(recFail, job, alive),
		unknown(silent, job, alive), unknown(left, job, gone), unknown(untimed, noTimeout, alive))
	e.mustRecords(t, unknown(silent, job, alive)) // resent: still unknown
	sweep := func(want int) {
		t.Helper()
		if n, err := e.svc.sweepLost(ctxFor(t)); err != nil || n != want {
			t.Fatalf("lost-run sweep at +%v: got %d, %v, want %d", now.Sub(trig), n, err, want)
		}
	}
	status := func(id string) (logsv1.RunStatus, logsv1.TriggerOutcome) {
		r := e.run(t, id)
		return r.GetStatus(), r.GetTriggerOutcome()
	}
	for _, id := range []string{reported, recOK, recFail, silent, left, untimed} {
		if st, o := status(id); st != logsv1.RunStatus_RUN_STATUS_RUNNING || o != logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN {
			t.Errorf("%s: got %s %s, want RUNNING UNKNOWN", id, st, o)
		}
	}
	sweep(0)

	// Decided by the executor and by records.
	e.mustResults(t, running(reported, job, base+5, alive))
	okRec := record(recOK, job, base)
	okRec.ExecutorAddress = alive
	failRec := record(recFail, job, base)
	failRec.TriggerOutcome, failRec.ExecutorAddress = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED, alive
	e.mustRecords(t, okRec, failRec)
	for id, want := range map[string][2]int32{reported: {statusRunning, outcomeOK}, recOK: {statusRunning, outcomeOK},
		recFail: {statusFail, outcomeFailed}} {
		if st, o := status(id); int32(st) != want[0] || int32(o) != want[1] {
			t.Errorf("%s decided: got %s %s, want %v", id, st, o, want)
		}
	}

	// Past LostAfter, but within LostAfter and the job's timeout: only the untimed job's run is
	// decided, as not delivered although its executor is online.
	setNow(e.svc.cfg.LostAfter)
	sweep(1)
	if r := e.run(t, untimed); r.GetStatus() != logsv1.RunStatus_RUN_STATUS_FAIL || r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED ||
		!strings.Contains(r.GetHandleMessage(), "reported nothing") {
		t.Errorf("untimed run past LostAfter: got %v, want FAIL, not delivered", r)
	}
	view.set(gone, false)
	setNow(e.svc.cfg.LostAfter + time.Hour - time.Millisecond)
	sweep(0)
	setNow(e.svc.cfg.LostAfter + time.Hour)
	sweep(2) // silent and left; reported and recOK run on a live executor
	if msg := e.run(t, left).GetHandleMessage(); !strings.Contains(msg, "left the registry") || !strings.Contains(msg, gone) {
		t.Errorf("run on the executor that left: message %q, want why", msg)
	}
	if msg := e.run(t, silent).GetHandleMessage(); !strings.Contains(msg, "reported nothing") || !strings.Contains(msg, alive) {
		t.Errorf("run on the silent executor: message %q, want why", msg)
	}
	sweep(0)
	// The executor that left comes back with the fire's result: its word wins.
	if refused := e.mustResults(t, result(left, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+5)); len(refused) != 0 {
		t.Errorf("late result after the sweep: refused %v, want it taken", refused)
	}
	if st, o := status(left); st != logsv1.RunStatus_RUN_STATUS_SUCCESS || o != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK {
		t.Errorf("%s after its late result: got %s %s, want SUCCESS OK", left, st, o)
	}
	got := map[string][]pub{}
	for _, c := range chain(t, e, w, job, noTimeout) {
		got[c.GetTriggerId()] = append(got[c.GetTriggerId()], pub{int32(c.GetStatus()), int32(c.GetReplacesStatus())})
	}
	want := map[string][]pub{
		recFail: {{statusFail, 0}},
		untimed: {{statusFail, 0}},
		silent:  {{statusFail, 0}},
		left:    {{statusFail, 0}, {statusSuccess, statusFail}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("completions: got %v, want %v", got, want)
	}
}

// TestLostAfterWithoutTheJob: a job that cannot be read leaves LostAfter alone as the
// threshold, and a reported run on an executor that left is lost then.
func TestLostAfterWithoutTheJob(t *testing.T) {
	t.Parallel()
	const job, addr = 195, "10.9.0.1:1"
	view := &fakeView{online: map[string]bool{addr: false}}
	e := newEnvWith(t, dbtest.Store{Name: "postgres", Config: db.Config{URL: dbtest.NewPostgres(t)}},
		Config{Retention: -1, Executors: view, Jobs: failingJobs{}, LostAfter: time.Minute}, false)
	now := time.UnixMilli(base + 2).Add(time.Minute - time.Millisecond)
	e.svc.now = func() time.Time { return now }
	id := sid(job, base, 0, 0)
	rec := record(id, job, base)
	rec.ExecutorAddress = addr
	e.mustRecords(t, rec)
	e.mustResults(t, running(id, job, base+3, addr))
	if n, err := e.svc.sweepLost(ctxFor(t)); err != nil || n != 0 {
		t.Fatalf("sweep before LostAfter: got %d, %v, want 0", n, err)
	}
	now = now.Add(time.Millisecond)
	if n, err := e.svc.sweepLost(ctxFor(t)); err != nil || n != 1 {
		t.Fatalf("sweep at LostAfter: got %d, %v, want 1", n, err)
	}
	if r := e.run(t, id); r.GetStatus() != logsv1.RunStatus_RUN_STATUS_FAIL || !strings.Contains(r.GetHandleMessage(), "lost: still running 1m0s") {
		t.Errorf("run: got %v, want lost after 1m", r)
	}
}

// TestMissingRecordFilledFromTriggerID: a fire whose trigger record never comes is stored with
// the job, scheduled time, shard and attempt its trigger id names (RETRY for an attempt after
// the first; the first attempt's trigger type is not in the id), and completed by the
// missing-record sweep with its job's executor group, which its completion and the reports
// carry.
func TestMissingRecordFilledFromTriggerID(t *testing.T) {
	t.Parallel()
	const job, group = 200, 42
	e := newEnvWith(t, dbtest.Store{Name: "postgres", Config: db.Config{URL: dbtest.NewPostgres(t)}},
		Config{Retention: -1, Jobs: fakeJobs{job: {Name: "j", GroupID: group}}}, false)
	sched := base + 7000
	retry, first := sid(job, sched, 2, 1), sid(job, sched, 0, 0)
	now := time.UnixMilli(sched).Add(time.Hour)
	e.svc.now = func() time.Time { return now }
	w, cancel := watch(t, e, 0)
	defer cancel()
	e.mustResults(t, running(retry, job, sched+900, "10.0.0.1:9999"), result(retry, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, sched+900),
		result(first, job, logsv1.RunStatus_RUN_STATUS_FAIL, sched+500))
	for _, c := range []struct {
		id             string
		shard, attempt int32
		tt             schedulerv1.TriggerType
	}{{retry, 2, 1, schedulerv1.TriggerType_TRIGGER_TYPE_RETRY}, {first, 0, 0, schedulerv1.TriggerType_TRIGGER_TYPE_UNSPECIFIED}} {
		r := e.run(t, c.id)
		if r.GetJobId() != job || r.GetScheduledTime().AsTime().UnixMilli() != sched || r.GetShardIndex() != c.shard ||
			r.GetAttempt() != c.attempt || r.GetTriggerType() != c.tt || r.GetGroupId() != 0 {
			t.Errorf("%s before the sweep: got %v, want job %d scheduled at %d, shard %d, attempt %d, %s, group unknown yet",
				c.id, r, job, sched, c.shard, c.attempt, c.tt)
		}
	}
	if n, err := e.svc.sweepUnrecorded(ctxFor(t)); err != nil || n != 2 {
		t.Fatalf("missing-record sweep: got %d, %v, want 2", n, err)
	}
	for _, id := range []string{retry, first} {
		if r := e.run(t, id); r.GetGroupId() != group || r.GetTriggerMessage() != unrecordedMessage ||
			r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK {
			t.Errorf("%s after the sweep: got %v, want group %d, outcome OK", id, r, group)
		}
	}
	got := map[string]string{}
	for _, c := range chain(t, e, w, job) {
		got[c.GetTriggerId()] = fmt.Sprintf("%s sched=%d shard=%d attempt=%d %s", c.GetStatus(), c.GetScheduledUnixMs(), c.GetShardIndex(),
			c.GetAttempt(), c.GetTriggerType())
	}
	want := map[string]string{
		retry: fmt.Sprintf("RUN_STATUS_SUCCESS sched=%d shard=2 attempt=1 TRIGGER_TYPE_RETRY", sched),
		first: fmt.Sprintf("RUN_STATUS_FAIL sched=%d shard=0 attempt=0 TRIGGER_TYPE_UNSPECIFIED", sched),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("completions: got %v, want %v", got, want)
	}
	day := time.UnixMilli(sched).UTC().Format(time.DateOnly)
	rep, err := e.logs.GetReport(ctxFor(t), &logsv1.GetReportRequest{StartDate: day, EndDate: day, GroupIds: []int64{group}})
	if err != nil {
		t.Fatalf("GetReport: %v", err)
	}
	if d := rep.GetDays()[0]; d.GetSuccess() != 1 || d.GetFail() != 1 {
		t.Errorf("group %d's day: got %v, want 1 success and 1 failure", group, d)
	}
}

// TestMissingRecordSweepGroupsEndedRunsAtOnce: a run that ended without its trigger record takes
// its job's executor group at the first sweep, long before the record wait is over; it is
// completed only then. A running one, and one whose job cannot be read, keep group 0.
func TestMissingRecordSweepGroupsEndedRunsAtOnce(t *testing.T) {
	t.Parallel()
	const job, group, unknownJob = 201, 43, 202
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, st, Config{Retention: -1, Jobs: fakeJobs{job: {Name: "j", GroupID: group}}}, false)
			sched := base + 9000
			ended, running1, orphan := sid(job, sched, 0, 0), sid(job, sched+1000, 0, 0), sid(unknownJob, sched, 0, 0)
			now := time.UnixMilli(sched).Add(time.Second)
			e.svc.now = func() time.Time { return now }
			e.mustResults(t, result(ended, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, sched+100),
				running(running1, job, sched+1100, "10.0.0.1:9999"), result(orphan, unknownJob, logsv1.RunStatus_RUN_STATUS_FAIL, sched+100))
			if n, err := e.svc.sweepUnrecorded(ctxFor(t)); err != nil || n != 0 {
				t.Fatalf("sweep within the record wait: got %d, %v, want none completed", n, err)
			}
			if r := e.run(t, ended); r.GetGroupId() != group || r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNSPECIFIED {
				t.Errorf("ended run after the first sweep: got %v, want group %d, no trigger outcome yet", r, group)
			}
			for _, id := range []string{running1, orphan} {
				if r := e.run(t, id); r.GetGroupId() != 0 {
					t.Errorf("%s after the first sweep: group %d, want 0", id, r.GetGroupId())
				}
			}
			now = now.Add(e.svc.cfg.RecordWait)
			if n, err := e.svc.sweepUnrecorded(ctxFor(t)); err != nil || n != 2 {
				t.Fatalf("sweep after the record wait: got %d, %v, want the two ended runs completed", n, err)
			}
			if r := e.run(t, ended); r.GetGroupId() != group || r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK {
				t.Errorf("ended run completed: got %v, want group %d, outcome OK", r, group)
			}
		})
	}
}

// TestRunFromID: a run made by a result before its record takes the job, scheduled time, shard
// and attempt from a scheduler's trigger id, and the trigger type the id tells (RETRY after the
// first attempt, PARENT for a child fire's first); another client's id, or another job's, tells
// nothing.
func TestRunFromID(t *testing.T) {
	t.Parallel()
	var (
		retry  = int32(schedulerv1.TriggerType_TRIGGER_TYPE_RETRY)
		parent = int32(schedulerv1.TriggerType_TRIGGER_TYPE_PARENT)
	)
	for _, c := range []struct {
		id             string
		jobID          int64
		ok             bool
		job, sched     int64
		shard, attempt int32
		trigType       int32
	}{
		{"7-1700000000000-0-0", 7, true, 7, 1700000000000, 0, 0, 0},
		{"7-1700000000000-0-0", 0, true, 7, 1700000000000, 0, 0, 0},
		{"123-5-3-2", 123, true, 123, 5, 3, 2, retry},
		{"7-1700000000000-1-0-p42", 7, true, 7, 1700000000000, 1, 0, parent},
		{"7-1700000000000-0-2-p42", 7, true, 7, 1700000000000, 0, 2, retry},
		{"7-1700000000000-0-0", 8, false, 0, 0, 0, 0, 0},
		{"7-1700000000000-0-0-x", 7, false, 0, 0, 0, 0, 0},
		{"my-own-id", 7, false, 0, 0, 0, 0, 0},
	} {
		r := &run{id: c.id}
		ok := r.fromID(c.jobID)
		if ok != c.ok || r.job != c.job || r.schedMs != c.sched || r.shardIndex != c.shard || r.attempt != c.attempt || r.triggerType != c.trigType {
			t.Errorf("fromID(%q, job %d) = %v: job %d sched %d shard %d attempt %d type %d; want %v: %d %d %d %d %d", c.id, c.jobID, ok,
				r.job, r.schedMs, r.shardIndex, r.attempt, r.triggerType, c.ok, c.job, c.sched, c.shard, c.attempt, c.trigType)
		}
	}
}
