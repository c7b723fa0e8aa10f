package logsvc

import (
	"slices"
	"strings"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/triggerid"
)

// A write cycle (see commit.go) reads the stored rows of the runs its batches name, applies the
// batches' records and results to them here, in memory and in the order they arrived, and then writes every run that
// changed once. A fire's trigger record, its RUNNING result and its final result, which reach
// logsvc on different streams within milliseconds, then cost one row write instead of the four
// upserts and updates a batch at a time took: on the runs table, with its nine indexes, a row
// version is most of what a fire costs Postgres.
//
// The rules: a run is keyed by its trigger id and filled by its record and its results in
// either order, and the executor's word decides it. A record never touches the result's status,
// except to end a run nobody reported (a FAILED record, or one that decides an UNKNOWN
// dispatch). A RUNNING result only fills what a running run lacks; a final result applies only
// to a running run. A run ended without the executor's word (judged: a failed trigger record, an
// unknown dispatch decided as not delivered, a lost run) is reopened by the executor's report,
// once: a RUNNING report or a final result for a run that never reached an executor as far as
// anyone knew, a final result for a lost one. What was published as the run's completion follows
// from the row (published), so whatever order a fire's record and reports take, the runs row
// comes out the same and the completions published for it end on its true outcome.

// Values of runs.judged.
const (
	// judgedNo: the run's status is the executor's, or it is running.
	judgedNo int32 = iota
	// judgedByLogsvc: the run was ended without the executor's word; its report may reopen it.
	judgedByLogsvc
	// judgedReopened: the executor's report reopened it; it is never reopened again.
	judgedReopened
)

// run is a runs row as ingestion reads and writes it: every column but seq (the store assigns
// it).
type run struct {
	id, address, handler, params, triggerMsg, handleMsg, traceID string
	// outputs is what a final result published (RunResult.outputs), JSON; "" for none.
	outputs string

	job, group, schedMs, trigMs, startMs, endMs int64

	triggerType, shardIndex, shardTotal, attempt, retriesLeft, route, outcome, status, alarm, judged int32
}

// published is the status of the last completion published for a run in this state; 0 for
// none. A run's completion is published once it has ended and has its record (outcome set), and
// a reopened run that runs again has had its FAIL retracted by a completion with status RUNNING.
func (r *run) published() int32 {
	switch {
	case final(r.status) && r.outcome != outcomeNone:
		return r.status
	case r.status == statusRunning && r.judged == judgedReopened:
		return statusRunning
	}
	return 0
}

// completion is a run to publish, and the status of the completion it corrects (0 for none).
type completion struct {
	r        *run
	replaces int32
}

// publish returns the completion a run's change from before (nil: not stored) to after calls
// for, if any.
func publish(before, after *run) (completion, bool) {
	var was int32
	if before != nil {
		was = before.published()
	}
	if now := after.published(); now == 0 || now == was {
		return completion{}, false
	}
	return completion{r: after, replaces: was}, true
}

// runSet holds the runs of one write cycle by trigger id: nil for a run not stored yet, and for
// each run its stored version (to write only what changed) and its current one.
type runSet struct {
	stored map[string]run  // as read from the store
	cur    map[string]*run // as the cycle's batches left it
	now    int64           // the cycle's time, Unix ms: for results that carry none
}

func newRunSet(stored map[string]run, now int64) *runSet {
	rs := &runSet{stored: stored, cur: make(map[string]*run, len(stored)), now: now}
	for id, r := range stored {
		rs.cur[id] = &r
	}
	return rs
}

// record applies a trigger record (the last of its trigger id in its batch): the trigger fields,
// and the outcome. An outcome only ever moves towards the truth: a run an executor reported (one
// a result made) or one with an OK record keeps OK whatever a later record says; a FAILED record
// ends a run no executor reported; an UNKNOWN one leaves it running, for the executor's report
// or logsvc's lost-run sweep to decide; an OK or FAILED record decides an UNKNOWN run. A
// rebuilt record (a new leader's, for a fire whose record the previous leader lost) applies only
// to a run without a record, as one that came late would: the executor's reports keep the
// run's status, and a record made at dispatch, whichever came first, keeps or takes the
// trigger fields.
func (rs *runSet) record(rec *logsv1.TriggerRecord) {
	id := rec.GetTriggerId()
	want := int32(rec.GetTriggerOutcome())
	r := rs.cur[id]
	isNew := r == nil
	if rec.GetRebuilt() && !isNew && r.recorded() {
		return
	}
	if isNew {
		r = &run{id: id, outcome: outcomeNone, status: statusRunning, alarm: alarmPending}
		rs.cur[id] = r
	}
	total := rec.GetShardTotal()
	if total < 1 {
		total = 1
	}
	r.job, r.group, r.triggerType = rec.GetJobId(), rec.GetGroupId(), int32(rec.GetTriggerType())
	r.schedMs, r.trigMs = rec.GetScheduledUnixMs(), rec.GetTriggerUnixMs()
	if a := clean(rec.GetExecutorAddress()); a != "" && r.address == "" {
		r.address = a // an executor's result names the address it has the fire at
	}
	r.handler, r.params = clean(rec.GetHandler()), clean(rec.GetParams())
	r.shardIndex, r.shardTotal, r.attempt, r.retriesLeft = rec.GetShardIndex(), total, rec.GetAttempt(), rec.GetRetriesLeft()
	r.route, r.triggerMsg = int32(rec.GetRouteStrategy()), clip(rec.GetTriggerMessage())
	if t := traceIDOf(rec.GetTraceId(), rec.GetTraceparent()); t != "" {
		r.traceID = t
	}
	switch r.outcome {
	case outcomeNone:
		if !isNew {
			// A result made the run: the fire reached an executor, whatever the scheduler saw
			// (a Run that timed out after the executor accepted). Its own result decides.
			r.outcome = outcomeOK
			return
		}
		r.outcome = want
		switch want {
		case outcomeFailed:
			rs.failTrigger(r)
		case outcomeSkipped:
			rs.skip(r)
		}
	case outcomeUnknown:
		switch want {
		case outcomeOK:
			r.outcome = outcomeOK
		case outcomeFailed:
			rs.failTrigger(r)
		}
	case outcomeFailed, outcomeSkipped:
		if want == outcomeOK && r.reopenable(statusRunning) { // a dispatch of the same fire that an executor accepted
			rs.reopen(r, statusRunning)
		}
	}
	// A SKIPPED record for a run that has another outcome changes nothing: the fire was sent
	// (its record came first), and what was sent decides.
}

// recorded says whether a trigger record made at dispatch has reached r: its outcome is set, and
// not by the missing-record sweep.
func (r *run) recorded() bool {
	return r.outcome != outcomeNone && r.triggerMsg != unrecordedMessage
}

// failTrigger ends a running run that reached no executor as the trigger record says.
func (rs *runSet) failTrigger(r *run) {
	r.outcome, r.status, r.judged = outcomeFailed, statusFail, judgedByLogsvc
	r.handleMsg = "trigger failed: the fire reached no executor (see the trigger message)"
	r.startMs, r.endMs = 0, r.trigMs
	if r.endMs <= 0 {
		r.endMs = rs.now
	}
}

// skip ends a new run as its SKIPPED record says: a misfire the scheduler did not send, ended
// at its trigger time, with no alarm to send. It is ended without the executor's word, like a
// failed trigger: an executor's report of it, should one ever come, reopens it.
func (rs *runSet) skip(r *run) {
	r.status, r.judged, r.alarm = statusSkipped, judgedByLogsvc, alarmNotNeeded
	r.handleMsg = "skipped: a misfire the job's misfire strategy did not run (see the trigger message)"
	r.startMs, r.endMs = 0, r.trigMs
	if r.endMs <= 0 {
		r.endMs = rs.now
	}
}

// reopenable says whether an executor's report with status st overrules r, which ended without
// the executor's word: any report of a run that reached no executor as far as anyone knew
// (outcome FAILED or SKIPPED), a final one of a lost run.
func (r *run) reopenable(st int32) bool {
	return r.judged == judgedByLogsvc && final(r.status) && (r.outcome == outcomeFailed || r.outcome == outcomeSkipped || final(st))
}

// reopen takes the executor's word over the end logsvc gave run r: it reached an executor, and
// runs again (st RUNNING) or ended as its result is about to say. A run whose end was published
// is marked reopened, and is never reopened again; one whose end was not (it came in this cycle,
// or the run waits for its record) is as if that end had never been.
func (rs *runSet) reopen(r *run, st int32) {
	if r.status == statusSkipped {
		r.alarm = alarmPending // a skipped run needed none; the run it turns out to be may
	}
	r.judged, r.status = judgedNo, st
	if old, ok := rs.stored[r.id]; ok && old.published() != 0 {
		r.judged = judgedReopened
	}
	if r.outcome != outcomeNone {
		r.outcome = outcomeOK
	}
	r.handleMsg, r.startMs, r.endMs = "", 0, 0
}

// fromID fills, from the trigger id, what a run made by a result before its record knows: the
// job, scheduled time, shard and attempt of a scheduler's id (triggerid), and RETRY for an
// attempt after the first, PARENT for the first attempt of a child fire (the id names its
// parent; a job's own first attempt's trigger type is not in the id). It reports whether it
// could.
func (r *run) fromID(jobID int64) bool {
	id, ok := triggerid.Parse(r.id)
	if !ok || jobID != 0 && jobID != id.Job {
		return false
	}
	r.job, r.schedMs, r.shardIndex, r.attempt = id.Job, id.ScheduledMs, id.Shard, id.Attempt
	switch {
	case id.Attempt > 0:
		r.triggerType = int32(schedulerv1.TriggerType_TRIGGER_TYPE_RETRY)
	case id.Parent != 0:
		r.triggerType = int32(schedulerv1.TriggerType_TRIGGER_TYPE_PARENT)
	}
	return true
}

// newFromResult is a run a result makes before its record: scheduled as its trigger id says
// (at the result's start time, else at, until the record says otherwise).
func newFromResult(res *logsv1.RunResult, at int64) *run {
	r := &run{id: res.GetTriggerId(), job: res.GetJobId(), shardTotal: 1, alarm: alarmPending}
	if !r.fromID(res.GetJobId()) {
		r.schedMs = res.GetStartUnixMs()
		if r.schedMs == 0 {
			r.schedMs = at
		}
	}
	return r
}

// start applies a RUNNING result: the executor accepted the fire. A new run is created RUNNING;
// a running one gets the job, start time, address and trace id it lacks, and an UNKNOWN
// dispatch is decided (it got there); a run ended without the executor's word (a failed
// trigger) is reopened, running; any other ended one is left as it is.
func (rs *runSet) start(res *logsv1.RunResult) {
	id := res.GetTriggerId()
	r := rs.cur[id]
	if r == nil {
		r = newFromResult(res, rs.now)
		r.startMs, r.address = res.GetStartUnixMs(), clean(res.GetExecutorAddress())
		r.traceID, r.status = traceIDOf(res.GetTraceId(), res.GetTraceparent()), statusRunning
		rs.cur[id] = r
		return
	}
	switch {
	case r.status == statusRunning:
	case r.reopenable(statusRunning):
		rs.reopen(r, statusRunning)
	default:
		return
	}
	if r.outcome == outcomeUnknown {
		r.outcome = outcomeOK
	}
	if r.job == 0 {
		r.job = res.GetJobId()
	}
	first := r.startMs == 0 // its first report: the executor says where it has the fire
	if first {
		r.startMs = res.GetStartUnixMs()
	}
	r.fill(res, first)
}

// end applies a final result and reports whether it was applied: only a run still running (or
// not stored yet), or one ended without the executor's word, takes one, so a fire's second final
// result changes nothing and is refused.
func (rs *runSet) end(res *logsv1.RunResult) bool {
	id := res.GetTriggerId()
	endMs := res.GetEndUnixMs()
	if endMs == 0 {
		endMs = rs.now
	}
	r := rs.cur[id]
	switch {
	case r == nil:
		r = newFromResult(res, endMs)
		rs.cur[id] = r
	case r.status == statusRunning:
	case r.reopenable(int32(res.GetStatus())):
		rs.reopen(r, int32(res.GetStatus()))
	default:
		return false
	}
	r.status, r.handleMsg, r.startMs, r.endMs = int32(res.GetStatus()), clip(res.GetMessage()), res.GetStartUnixMs(), endMs
	r.outputs = encodeOutputs(res.GetOutputs())
	if r.outcome == outcomeUnknown {
		r.outcome = outcomeOK
	}
	if r.job == 0 {
		r.job = res.GetJobId()
	}
	r.fill(res, true)
	return true
}

// fill sets the trace id a run lacks from a result, and its executor address: the one a result
// names, when it is the executor's first report or its final one (the executor that has the
// fire says where it is, over the address the scheduler's record names), else only when the
// run has none.
func (r *run) fill(res *logsv1.RunResult, address bool) {
	if a := clean(res.GetExecutorAddress()); a != "" && (address || r.address == "") {
		r.address = a
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
// each sorted by trigger id, and the completions to publish, in the same order: one per run
// whose published state changed (publish). A successful run needs no alarm, and says so in
// the row it is written with rather than in another row version when the alarm pass reads its
// completion.
func (rs *runSet) changes() (inserts, updates []*run, done []completion) {
	for id, r := range rs.cur {
		var before *run
		if old, ok := rs.stored[id]; ok {
			before = &old
		}
		if c, ok := publish(before, r); ok {
			if r.status == statusSuccess && r.alarm == alarmPending {
				r.alarm = alarmNotNeeded
			}
			done = append(done, c)
		}
		switch {
		case before == nil:
			inserts = append(inserts, r)
		case *before != *r:
			updates = append(updates, r)
		}
	}
	byID := func(a, b *run) int { return strings.Compare(a.id, b.id) }
	slices.SortFunc(inserts, byID)
	slices.SortFunc(updates, byID)
	slices.SortFunc(done, func(a, b completion) int { return byID(a.r, b.r) })
	return inserts, updates, done
}
