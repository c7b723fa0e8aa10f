package logsvc

import (
	"context"
	"testing"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

// TestRunSetWritesAFireOnce checks that a fire's record, RUNNING and final result applied in one
// cycle, in any order, make one new row holding all of them, completed, with no alarm needed.
func TestRunSetWritesAFireOnce(t *testing.T) {
	t.Parallel()
	rec := record("150-a", 150, base)
	start := result("150-a", 150, logsv1.RunStatus_RUN_STATUS_RUNNING, base+3)
	end := result("150-a", 150, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+3)
	for _, order := range [][]op{
		{{id: "150-a", rec: rec}, {id: "150-a", res: start}, {id: "150-a", res: end}},
		{{id: "150-a", res: start}, {id: "150-a", res: end}, {id: "150-a", rec: rec}},
		{{id: "150-a", res: start}, {id: "150-a", rec: rec}, {id: "150-a", res: end}},
	} {
		rs := newRunSet(map[string]run{}, base+100)
		for _, o := range order {
			if !rs.apply(o) {
				t.Fatalf("order %v: %v refused", order, o)
			}
		}
		inserts, updates, done := rs.changes()
		if len(inserts) != 1 || len(updates) != 0 {
			t.Fatalf("order %v: got %d inserts and %d updates, want one insert", order, len(inserts), len(updates))
		}
		got := *inserts[0]
		want := run{id: "150-a", job: 150, group: 1, triggerType: int32(rec.GetTriggerType()), schedMs: base, trigMs: base + 2,
			address: "10.0.0.1:9999", handler: "demo", params: "p", shardTotal: 1, retriesLeft: 2, route: int32(rec.GetRouteStrategy()),
			outcome: outcomeOK, triggerMsg: rec.GetTriggerMessage(), status: statusSuccess, handleMsg: end.GetMessage(),
			startMs: base + 3, endMs: base + 53, traceID: rec.GetTraceId(), alarm: alarmNotNeeded}
		if got != want {
			t.Errorf("order %v: row\ngot  %+v\nwant %+v", order, got, want)
		}
		if len(done) != 1 || done[0].r.id != "150-a" || done[0].replaces != 0 {
			t.Errorf("order %v: completed %+v, want 150-a once", order, done)
		}
	}
}

// TestRunSetStoredRun checks the rules on a run already stored: a second final result is
// refused and changes nothing, and a record for a run that ended without one completes it.
func TestRunSetStoredRun(t *testing.T) {
	t.Parallel()
	stored := run{id: "151-a", job: 151, schedMs: base, status: statusSuccess, startMs: base, endMs: base + 50,
		address: "10.0.0.1:9999", shardTotal: 1, alarm: alarmPending}
	rs := newRunSet(map[string]run{"151-a": stored}, base+100)
	if rs.apply(op{id: "151-a", res: result("151-a", 151, logsv1.RunStatus_RUN_STATUS_FAIL, base)}) {
		t.Errorf("second final result: taken, want refused")
	}
	if inserts, updates, done := rs.changes(); len(inserts)+len(updates)+len(done) != 0 {
		t.Errorf("after a refused result: got %d inserts, %d updates and %d completions, want none", len(inserts), len(updates), len(done))
	}
	rs.apply(op{id: "151-a", rec: record("151-a", 151, base)})
	_, updates, done := rs.changes()
	if len(updates) != 1 || updates[0].outcome != outcomeOK || updates[0].status != statusSuccess || updates[0].alarm != alarmNotNeeded {
		t.Fatalf("record after the result: got %+v, want one update, outcome OK, SUCCESS, no alarm needed", updates)
	}
	if len(done) != 1 || done[0].r.id != "151-a" || done[0].replaces != 0 {
		t.Errorf("completed %+v, want 151-a once", done)
	}
}

func TestMayWait(t *testing.T) {
	t.Parallel()
	failed := record("152-a", 152, base)
	failed.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
	rec := op{id: "152-a", rec: record("152-a", 152, base)}
	res := op{id: "152-a", res: result("152-a", 152, logsv1.RunStatus_RUN_STATUS_SUCCESS, base)}
	old := res
	old.parked = time.Now().Add(-parkFor)
	recent := res
	recent.parked = time.Now()
	running := op{id: "152-a", res: result("152-a", 152, logsv1.RunStatus_RUN_STATUS_RUNNING, base)}
	oldRec := rec
	oldRec.parked = time.Now().Add(-parkForFinal)
	for _, c := range []struct {
		name   string
		ops    []op
		stored bool
		want   time.Duration // 0: may not wait; else until, from the first parking (or now)
	}{
		{"record alone: the final result is to come", []op{rec}, false, parkForFinal},
		{"record alone parked long enough", []op{oldRec}, false, 0},
		{"results alone", []op{res, res}, false, parkFor},
		{"record and result", []op{res, rec}, false, 0},
		{"record and RUNNING: the final result is to come", []op{rec, running}, false, parkForFinal},
		{"record, RUNNING and final result", []op{rec, running, res}, false, 0},
		{"record and RUNNING parked long enough", []op{oldRec, running}, false, 0},
		{"RUNNING alone", []op{running}, false, parkFor},
		{"stored run", []op{res}, true, 0},
		{"failed record", []op{{id: "152-a", rec: failed}}, false, 0},
		{"orphaned record and RUNNING (their stream ended)", []op{{id: "152-a", rec: rec.rec, orphan: true}, running}, false, 0},
		{"parked a moment ago", []op{recent}, false, parkFor},
		{"parked long enough", []op{old}, false, 0},
	} {
		stored := map[string]run{}
		if c.stored {
			stored["152-a"] = run{id: "152-a"}
		}
		now := time.Now()
		first := now
		for _, o := range c.ops {
			if !o.parked.IsZero() && o.parked.Before(first) {
				first = o.parked
			}
		}
		until, ok := mayWait(c.ops, stored, now)["152-a"]
		if ok != (c.want != 0) || ok && !until.Equal(first.Add(c.want)) {
			t.Errorf("%s: got %v %v, want %v after %v", c.name, until, ok, c.want, first)
		}
	}
}

// TestParkedOps: parked ops come back by id, or once their time is up; an id taken back and
// parked again keeps only its new time.
func TestParkedOps(t *testing.T) {
	t.Parallel()
	now := time.Now()
	at := func(id string, d time.Duration) op {
		return op{id: id, rec: record(id, 154, base), parked: now, until: now.Add(d)}
	}
	var p parkedOps
	p.add([]op{at("154-a", 50*time.Millisecond), at("154-b", 500*time.Millisecond), at("154-b", 500*time.Millisecond), at("154-c", 50*time.Millisecond)})
	if p.n != 4 {
		t.Fatalf("n = %d, want 4", p.n)
	}
	if next, ok := p.next(); !ok || !next.Equal(now.Add(50*time.Millisecond)) {
		t.Errorf("next = %v %v, want +50ms", next, ok)
	}
	if got := p.take("154-b"); len(got) != 2 || p.n != 2 {
		t.Errorf("take(154-b) = %d ops, n %d; want 2, 2", len(got), p.n)
	}
	if got := p.take("154-a"); len(got) != 1 {
		t.Errorf("take(154-a) = %d ops, want 1", len(got))
	}
	p.add([]op{at("154-a", 2*time.Second), at("154-a", 2*time.Second)}) // parked again, later
	if got := p.due(now.Add(60 * time.Millisecond)); len(got) != 1 || got[0].id != "154-c" {
		t.Errorf("due at +60ms = %v, want 154-c only (154-a's first time is stale)", got)
	}
	if got := p.due(now.Add(1500 * time.Millisecond)); len(got) != 0 {
		t.Errorf("due at +1.5s = %v, want none (154-a was parked again until +2s)", got)
	}
	if next, ok := p.next(); !ok || !next.Equal(now.Add(2*time.Second)) {
		t.Errorf("next = %v %v, want +2s", next, ok)
	}
	if got := p.due(now.Add(2 * time.Second)); len(got) != 2 || p.n != 0 {
		t.Errorf("due at +2s = %v (n %d), want 154-a and nothing left", got, p.n)
	}
	if _, ok := p.next(); ok {
		t.Error("next with nothing parked: ok, want none")
	}
}

// TestParkedRecordOfAnEndedStreamIsWritten: a run's record and RUNNING result park for its final
// result; when the records stream ends meanwhile (a scheduler leader killed before logsvc acked),
// the record is written, not dropped: its sender will not send it again.
func TestParkedRecordOfAnEndedStreamIsWritten(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, dbtest.Store{Name: "postgres", Config: db.Config{URL: dbtest.NewPostgres(t)}}, Config{Retention: -1}, true)
	const id = "155-a"
	release := e.svc.hub.watchRun(id)
	defer release()
	res, err := e.ingest.IngestResults(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Send(&logsv1.IngestResultsRequest{BatchId: 1, Results: []*logsv1.RunResult{result(id, 155, logsv1.RunStatus_RUN_STATUS_RUNNING, base)}}); err != nil {
		t.Fatal(err)
	}
	recCtx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	recs, err := e.ingest.IngestTriggerRecords(recCtx)
	if err != nil {
		t.Fatal(err)
	}
	if err := recs.Send(&logsv1.IngestTriggerRecordsRequest{BatchId: 1, Records: []*logsv1.TriggerRecord{record(id, 155, base)}}); err != nil {
		t.Fatal(err)
	}
	// Both parked (waiting for the final result), then the records stream ends unacknowledged.
	// Parking signals nothing: poll the writer's count.
	parked := func() int {
		e.svc.queue.mu.Lock()
		defer e.svc.queue.mu.Unlock()
		return e.svc.queue.parked.n
	}
	deadline := time.Now().Add(20 * time.Second)
	for parked() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("record and RUNNING result not parked within 20s (parked %d)", parked())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	ctx := ctxFor(t)
	for {
		changed := e.svc.hub.runSignal(id)
		resp, err := e.logs.GetRun(ctx, &logsv1.GetRunRequest{Id: id})
		if err == nil && resp.GetRun().GetTriggerOutcome() == logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("run %s after its records stream ended: %v %v, want its trigger record stored", id, resp.GetRun(), err)
		}
	}
}

// TestRebuiltRecord: a record a new leader rebuilt for a fire whose record the old leader lost
// fills a run made from the executor's reports alone (and one the missing-record sweep
// completed) without changing its status or publishing it again, and changes nothing in a run
// a record made at dispatch has reached; a record made at dispatch that comes after it takes
// the trigger fields, and the outcome stays OK.
func TestRebuiltRecord(t *testing.T) {
	t.Parallel()
	rebuilt := func(id string) *logsv1.TriggerRecord {
		r := record(id, 160, base)
		r.GroupId, r.TriggerUnixMs, r.ExecutorAddress, r.Params = 7, 0, "10.0.0.2:9999", "job params"
		r.TriggerMessage, r.TraceId, r.Rebuilt = "rebuilt by the new leader", "", true
		return r
	}
	// Made from the executor's final result: FAIL, no record.
	fromResult := run{id: "160-a", job: 160, schedMs: base, status: statusFail, handleMsg: "exit 1", startMs: base, endMs: base + 50,
		address: "10.0.0.1:9999", shardTotal: 1, alarm: alarmPending}
	// Completed by the missing-record sweep.
	swept := fromResult
	swept.id, swept.outcome, swept.triggerMsg = "160-b", outcomeOK, unrecordedMessage
	// Reached by the record made at dispatch.
	dispatched := fromResult
	dispatched.id, dispatched.outcome, dispatched.group, dispatched.triggerMsg, dispatched.trigMs = "160-c", outcomeOK, 1, "route FIRST", base+2
	rs := newRunSet(map[string]run{"160-a": fromResult, "160-b": swept, "160-c": dispatched}, base+100)
	for _, id := range []string{"160-a", "160-b", "160-c"} {
		rs.apply(op{id: id, rec: rebuilt(id)})
	}
	inserts, updates, done := rs.changes()
	if len(inserts) != 0 || len(updates) != 2 {
		t.Fatalf("got %d inserts and %d updates, want the two runs without a record updated", len(inserts), len(updates))
	}
	for _, u := range updates {
		want := fromResult
		want.id, want.group, want.triggerType, want.handler, want.params = u.id, 7, int32(schedulerv1.TriggerType_TRIGGER_TYPE_CRON), "demo", "job params"
		want.retriesLeft, want.route, want.outcome, want.triggerMsg = 2, int32(schedulerv1.RouteStrategy_ROUTE_STRATEGY_FIRST), outcomeOK, "rebuilt by the new leader"
		if *u != want {
			t.Errorf("run %s:\ngot  %+v\nwant %+v", u.id, *u, want)
		}
	}
	// 160-a is published now that it has a record, as FAIL: what its executor said. 160-b was
	// published by the sweep already.
	if len(done) != 1 || done[0].r.id != "160-a" || done[0].r.status != statusFail || done[0].replaces != 0 {
		t.Errorf("completed %+v, want 160-a once, FAIL", done)
	}

	// Rebuilt first, then the record made at dispatch (which saw the Run time out): the
	// dispatch record's fields, and OK, since the fire reached the executor.
	rs = newRunSet(map[string]run{}, base+100)
	rs.apply(op{id: "160-d", rec: rebuilt("160-d")})
	late := record("160-d", 160, base)
	late.TriggerOutcome, late.TriggerMessage = logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN, "Run not answered"
	rs.apply(op{id: "160-d", rec: late})
	if r := rs.cur["160-d"]; r.group != 1 || r.trigMs != base+2 || r.triggerMsg != "Run not answered" || r.outcome != outcomeOK ||
		r.status != statusRunning || r.address != "10.0.0.2:9999" {
		t.Errorf("rebuilt, then the dispatch record: %+v, want group 1, its trigger time and message, OK, running, at the rebuilt record's executor", *r)
	}
}
