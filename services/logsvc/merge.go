package logsvc

import (
	"slices"
	"strings"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
)

// A write cycle (see commit.go) reads the stored rows of the runs its batches name, applies the
// batches' records and results to them here, in memory and in the order they arrived, and then writes every run that
// changed once. A fire's trigger record, its RUNNING result and its final result, which reach
// logsvc on different streams within milliseconds, then cost one row write instead of the four
// upserts and updates a batch at a time took: on the runs table, with its nine indexes, a row
// version is most of what a fire costs Postgres.
//
// The rules are those of the upserts they replace: a run is keyed by its trigger id and filled
// by its record and its results in either order; a record never touches the result's status
// (except a FAILED record for a run nobody reported running); a RUNNING result only fills what
// a running run lacks; a final result applies only to a running run and is refused otherwise.

// run is a runs row as ingestion reads and writes it: every column but seq (the store assigns
// it).
type run struct {
	id, address, handler, params, triggerMsg, handleMsg, traceID string

	job, group, schedMs, trigMs, startMs, endMs int64

	triggerType, shardIndex, shardTotal, attempt, retriesLeft, route, outcome, status, alarm int32
}

// runSet holds the runs of one write cycle by trigger id: nil for a run not stored yet, and for
// each run its stored version (to write only what changed) and its current one.
type runSet struct {
	stored map[string]run  // as read from the store
	cur    map[string]*run // as the cycle's batches left it
	now    int64           // the cycle's time, Unix ms: for results that carry none
	// done lists the runs the cycle's batches ended or completed with their record, in the
	// order they did: their completions are published after the rows are written.
	done []string
}

func newRunSet(stored map[string]run, now int64) *runSet {
	rs := &runSet{stored: stored, cur: make(map[string]*run, len(stored)), now: now}
	for id, r := range stored {
		rs.cur[id] = &r
	}
	return rs
}

// record applies a trigger record (the last of its trigger id in its batch). A new run takes
// the record's outcome and stays RUNNING; a stored one gets the trigger fields, and its outcome
// is set from the record as writeRecords always did: a FAILED record fails a run no executor
// reported running, and gives way to the executor's word on one it did.
func (rs *runSet) record(rec *logsv1.TriggerRecord) {
	id := rec.GetTriggerId()
	want := int32(rec.GetTriggerOutcome())
	r := rs.cur[id]
	if r == nil {
		r = &run{id: id, outcome: want, status: statusRunning, alarm: alarmPending}
		rs.cur[id] = r
	}
	st, outcome, startMs := r.status, r.outcome, r.startMs // before the record
	total := rec.GetShardTotal()
	if total < 1 {
		total = 1
	}
	r.job, r.group, r.triggerType = rec.GetJobId(), rec.GetGroupId(), int32(rec.GetTriggerType())
	r.schedMs, r.trigMs = rec.GetScheduledUnixMs(), rec.GetTriggerUnixMs()
	if a := clean(rec.GetExecutorAddress()); a != "" {
		r.address = a
	}
	r.handler, r.params = clean(rec.GetHandler()), clean(rec.GetParams())
	r.shardIndex, r.shardTotal, r.attempt, r.retriesLeft = rec.GetShardIndex(), total, rec.GetAttempt(), rec.GetRetriesLeft()
	r.route, r.triggerMsg = int32(rec.GetRouteStrategy()), clip(rec.GetTriggerMessage())
	if t := traceIDOf(rec.GetTraceId(), rec.GetTraceparent()); t != "" {
		r.traceID = t
	}
	switch {
	case want == outcomeFailed && st == statusRunning && startMs > 0:
		// The executor reported the fire RUNNING: it got there although the scheduler saw an
		// error (a timed-out Run). Its own result decides the run.
		r.outcome = outcomeOK
	case want == outcomeFailed && st == statusRunning:
		r.outcome, r.status = outcomeFailed, statusFail
		r.handleMsg = "trigger failed: the fire reached no executor (see the trigger message)"
		r.endMs = r.trigMs
		if r.endMs <= 0 {
			r.endMs = rs.now
		}
		rs.complete(r)
		return
	default:
		r.outcome = want
	}
	if final(st) && outcome == outcomeNone {
		rs.complete(r) // the result came first
	}
}

// complete notes that run r has ended and has its record: its completion is to be published.
// A successful run needs no alarm, and says so now rather than in another row version when
// the alarm pass reads its completion.
func (rs *runSet) complete(r *run) {
	rs.done = append(rs.done, r.id)
	if r.status == statusSuccess && r.alarm == alarmPending {
		r.alarm = alarmNotNeeded
	}
}

// start applies a RUNNING result: the executor accepted the fire. A new run is created RUNNING,
// scheduled at the start time until its record says otherwise; a running one gets the job,
// start time, address and trace id it lacks; an ended one is left as it is.
func (rs *runSet) start(res *logsv1.RunResult) {
	id := res.GetTriggerId()
	r := rs.cur[id]
	if r == nil {
		sched := res.GetStartUnixMs()
		if sched == 0 {
			sched = rs.now
		}
		rs.cur[id] = &run{id: id, job: res.GetJobId(), startMs: res.GetStartUnixMs(), address: clean(res.GetExecutorAddress()),
			traceID: traceIDOf(res.GetTraceId(), res.GetTraceparent()), schedMs: sched, status: statusRunning, shardTotal: 1, alarm: alarmPending}
		return
	}
	if r.status != statusRunning {
		return
	}
	if r.job == 0 {
		r.job = res.GetJobId()
	}
	if r.startMs == 0 {
		r.startMs = res.GetStartUnixMs()
	}
	r.fill(res)
}

// end applies a final result and reports whether it was applied: only a run still running (or
// not stored yet) takes one, so a fire's second final result changes nothing and is refused.
func (rs *runSet) end(res *logsv1.RunResult) bool {
	id := res.GetTriggerId()
	endMs := res.GetEndUnixMs()
	if endMs == 0 {
		endMs = rs.now
	}
	r := rs.cur[id]
	if r == nil {
		sched := res.GetStartUnixMs() // provisional until the record says when it was scheduled
		if sched == 0 {
			sched = endMs
		}
		r = &run{id: id, schedMs: sched, shardTotal: 1, alarm: alarmPending}
		rs.cur[id] = r
	} else if r.status != statusRunning {
		return false
	}
	r.status, r.handleMsg, r.startMs, r.endMs = int32(res.GetStatus()), clip(res.GetMessage()), res.GetStartUnixMs(), endMs
	if r.job == 0 {
		r.job = res.GetJobId()
	}
	r.fill(res)
	if r.outcome != outcomeNone {
		rs.complete(r)
	}
	return true
}

// fill sets the executor address and trace id a run lacks from a result.
func (r *run) fill(res *logsv1.RunResult) {
	if r.address == "" {
		r.address = clean(res.GetExecutorAddress())
	}
	if r.traceID == "" {
		r.traceID = traceIDOf(res.GetTraceId(), res.GetTraceparent())
	}
}

// op is one thing a write cycle applies to a run: a trigger record, or a RUNNING or final
// result, and the batch it came in.
type op struct {
	t   *ticket
	id  string
	rec *logsv1.TriggerRecord // a record; else res
	res *logsv1.RunResult
	// parked is when a cycle first held it back (commit.go); zero until then. until is how long
	// it may stay parked, set with parked.
	parked, until time.Time
	// orphan: its stream ended while it was parked, so its sender will not send it again (a
	// killed scheduler leader's trigger records): it is written at once, not dropped.
	orphan bool
}

// apply applies o and reports whether it was taken: false only for a final result refused.
func (rs *runSet) apply(o op) bool {
	switch {
	case o.rec != nil:
		rs.record(o.rec)
	case int32(o.res.GetStatus()) == statusRunning:
		rs.start(o.res)
	default:
		return rs.end(o.res)
	}
	return true
}

// changes returns the runs to insert (not stored before) and to update (stored, and changed),
// each sorted by trigger id.
func (rs *runSet) changes() (inserts, updates []*run) {
	for id, r := range rs.cur {
		old, ok := rs.stored[id]
		switch {
		case !ok:
			inserts = append(inserts, r)
		case old != *r:
			updates = append(updates, r)
		}
	}
	byID := func(a, b *run) int { return strings.Compare(a.id, b.id) }
	slices.SortFunc(inserts, byID)
	slices.SortFunc(updates, byID)
	return inserts, updates
}
