package sdk

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry/instrument"
)

const (
	// recentCap bounds the trigger ids remembered for duplicate detection and Log lookups.
	recentCap = 100_000
	// maxJobQueue bounds the fires queued behind one job's running fire.
	maxJobQueue = 10_000
	// maxText caps a log line and a result message, as logsvc does.
	maxText = 64 << 10
	// maxStartDelay bounds how long a fire sent ahead of its time is held (the scheduler's lead
	// is a fraction of a second).
	maxStartDelay = time.Minute
)

var tracer = otel.Tracer("github.com/jobmesh/jobmesh/services/executor-agent/sdk")

// noSpan is the span of a run that starts none: it records nothing and ending it does nothing.
var noSpan = trace.SpanFromContext(context.Background())

// stopCause is why a fire's context was cancelled, and so how the fire ends.
type stopCause struct {
	status logsv1.RunStatus
	msg    string
}

func (c *stopCause) Error() string { return c.msg }

// killedByRequest is the cause of a Kill call.
var killedByRequest = &stopCause{status: logsv1.RunStatus_RUN_STATUS_KILLED, msg: "killed by request"}

// worker runs the fires of one job, one at a time, from a FIFO queue. Its fields other than
// the channels are guarded by Executor.mu, except inited (the worker goroutine's own).
type worker struct {
	jobID int64
	key   string // handler identity; a fire with another key replaces the worker
	bean  *bean  // BEAN handler, for init/destroy; nil for scripts
	queue []*run
	// running is the fire it runs, from the moment the fire took its run slot and was handed
	// to the worker goroutine (handed) until the goroutine is done with it.
	running *run
	retired bool // replaced, reclaimed or stopping: takes no more fires
	// slotWait: its next fire waits in Executor.slotQueue for a run slot.
	slotWait bool
	// idleSince is when its last fire ended (or it was made): reclaimLoop ends it IdleTimeout
	// later if it has had nothing to run since.
	idleSince time.Time
	// handed carries a fire that took its run slot (now running) to the worker goroutine, with
	// a wake: the goroutine so starts it without taking Executor.mu, and waits on one channel
	// (a select with an idle timer cost more than a no-op fire): in a burst, thousands of
	// workers start at once.
	handed atomic.Pointer[run]
	wake   chan struct{}
	done   chan struct{}
	prev   <-chan struct{} // the replaced worker's done: wait for it before the first fire
	inited bool
	script string // its GLUE script file, written at its first fire (the worker goroutine's own)
}

func (w *worker) busy() bool { return w.running != nil || len(w.queue) > 0 }

// signal wakes the worker goroutine without blocking.
func (w *worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run is one accepted fire.
type run struct {
	e      *Executor
	t      *executorv1.Trigger
	job    *Job
	w      *worker
	fn     HandlerFunc
	key    string // a held fire's worker key and BEAN, to place it when due
	bean   *bean
	day    string // the UTC day it was accepted
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	started  time.Time
	lineNo   int64
	outBytes int64   // output kept so far, newlines counted
	cut      bool    // output passed MaxRunOutputBytes: the rest is dropped
	msg      string  // the handler's success message (Job.SetMessage)
	outs     outputs // what it published (Job.SetOutput, a script's marker lines and file)
	returned bool    // the handler returned: its message is taken
	finished bool
}

// retirement is what a retired worker leaves to end: its running fire and its queue.
type retirement struct {
	running *run
	queued  []*run
	cause   *stopCause
}

// accept answers one fire of a Run call. A fire with a start delay is held (see hold): accept
// returns its run, to be released when due; otherwise the run is nil.
func (e *Executor) accept(t *executorv1.Trigger) (*executorv1.RunAck, *run) {
	id := t.GetTriggerId()
	reject := func(msg string) *executorv1.RunAck {
		e.log.Debug("fire rejected", "trigger_id", id, "job_id", t.GetJobId(), "reason", msg)
		return &executorv1.RunAck{TriggerId: id, Outcome: executorv1.RunOutcome_RUN_OUTCOME_REJECTED, Message: msg}
	}
	if err := checkTrigger(t); err != nil {
		return reject(err.Error()), nil
	}
	fn, b, key, err := e.resolve(t)
	if err != nil {
		return reject(err.Error()), nil
	}

	e.mu.Lock()
	if e.stopping || !e.started {
		e.mu.Unlock()
		return reject("executor is shutting down"), nil
	}
	if _, seen := e.recent.get(id); seen {
		e.mu.Unlock()
		return &executorv1.RunAck{TriggerId: id, Outcome: executorv1.RunOutcome_RUN_OUTCOME_DUPLICATE, Message: "fire " + id + " was already accepted here"}, nil
	}
	if e.freeSlotsLocked() == 0 && e.needsSlotLocked(t, key) {
		// Full: refused, and not remembered, so the scheduler sends it again when there is room.
		msg := fmt.Sprintf("executor at capacity: %d fires running or waiting to run (capacity %d)", e.slots+len(e.slotQueue), e.cfg.Capacity)
		e.mu.Unlock()
		return &executorv1.RunAck{TriggerId: id, Outcome: executorv1.RunOutcome_RUN_OUTCOME_REJECTED, Message: msg, Busy: true}, nil
	}
	now := time.Now()
	if d := t.GetStartDelayUs(); d > 0 {
		// Sent ahead of its time: accepted (and seen) now, placed behind the job's worker when due.
		r := e.newRunLocked(t, nil, fn, now)
		r.key, r.bean = key, b
		e.active[id] = r
		e.held[id] = r
		e.recent.add(id, r.day)
		e.addStartLocked(r, now.Add(time.Duration(d)*time.Microsecond))
		e.mu.Unlock()
		return &executorv1.RunAck{TriggerId: id, Outcome: executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED}, r
	}
	w, retired, msg := e.workerForLocked(t, key, b)
	if msg != "" {
		e.mu.Unlock()
		return reject(msg), nil
	}
	r := e.newRunLocked(t, w, fn, now)
	e.active[id] = r
	e.recent.add(id, r.day)
	e.addStartLocked(r, now)
	e.queueLocked(w, r)
	e.unlockWake()

	for _, rt := range retired {
		e.endRetirement(rt)
	}
	return &executorv1.RunAck{TriggerId: id, Outcome: executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED}, nil
}

// workerForLocked applies the job's block strategy to a fire that arrives (or, held, comes due)
// now: it returns the worker to queue it on, creating one when needed, with the workers it
// retired (a changed handler, COVER_EARLY) for the caller to end after unlocking; or, when the
// fire is refused (DISCARD_LATER, a full queue), why.
func (e *Executor) workerForLocked(t *executorv1.Trigger, key string, b *bean) (*worker, []retirement, string) {
	var retired []retirement
	w := e.workers[t.GetJobId()]
	var prev <-chan struct{}
	if w != nil && w.key != key {
		retired = append(retired, e.retireLocked(w, changeCause(w.key, key)))
		prev, w = w.done, nil
	}
	if w != nil && w.busy() {
		switch t.GetBlockStrategy() {
		case schedulerv1.BlockStrategy_BLOCK_STRATEGY_DISCARD_LATER:
			return nil, nil, fmt.Sprintf("block strategy DISCARD_LATER: job %d is running or has queued fires", t.GetJobId())
		case schedulerv1.BlockStrategy_BLOCK_STRATEGY_COVER_EARLY:
			retired = append(retired, e.retireLocked(w, &stopCause{status: logsv1.RunStatus_RUN_STATUS_KILLED, msg: "killed: covered by a newer fire (COVER_EARLY)"}))
			prev, w = w.done, nil
		default:
			if len(w.queue) >= maxJobQueue {
				return nil, nil, fmt.Sprintf("job %d has %d fires queued here already", t.GetJobId(), len(w.queue))
			}
		}
	}
	if w == nil {
		w = &worker{jobID: t.GetJobId(), key: key, bean: b, wake: make(chan struct{}, 1), done: make(chan struct{}), prev: prev, idleSince: time.Now()}
		e.workers[w.jobID] = w
		e.allWorkers[w] = struct{}{}
		go e.work(w)
	}
	return w, retired, ""
}

// addStartLocked queues the RUNNING result of a fire that reached this executor, starting at
// start (a held fire's due time): spooled at once, sent to logsvc once the fire has run for
// runningAfter (a quicker fire's final result goes in its place). Queued under e.mu, before any
// worker, kill or stop can see the run, so its final result is always queued after this.
func (e *Executor) addStartLocked(r *run, start time.Time) {
	t := r.t
	tp := t.GetTraceContext()["traceparent"]
	e.out.addStart(&logsv1.RunResult{
		TriggerId: t.GetTriggerId(), JobId: t.GetJobId(), Status: logsv1.RunStatus_RUN_STATUS_RUNNING,
		StartUnixMs: start.UnixMilli(), ExecutorAddress: e.advertise, TraceId: traceIDOf(tp), Traceparent: tp,
		DeliveryToken: t.GetDeliveryToken(),
	})
}

// hold releases the held fires of one Run call, received at received, when each is due. All
// held fires of the executor wait on one timer (holdLoop), in groups by due time: the scheduler
// sends a call's fires with the delay of their scheduled millisecond, so a call is a group or a
// few, and a burst of calls due at the same instant is released by one wake-up.
func (e *Executor) hold(held []*run, received time.Time) {
	slices.SortStableFunc(held, func(a, b *run) int { return cmp.Compare(a.t.GetStartDelayUs(), b.t.GetStartDelayUs()) })
	e.holdMu.Lock()
	wake := len(e.holdQ) == 0
	var first time.Time
	if !wake {
		first = e.holdQ[0].at
	}
	for i := 0; i < len(held); {
		j := i + 1
		for j < len(held) && held[j].t.GetStartDelayUs() == held[i].t.GetStartDelayUs() {
			j++
		}
		at := received.Add(time.Duration(held[i].t.GetStartDelayUs()) * time.Microsecond)
		heap.Push(&e.holdQ, holdGroup{at: at, runs: held[i:j:j]})
		i = j
	}
	if wake || e.holdQ[0].at.Before(first) { // a new earliest: holdLoop's timer is too late
		select {
		case e.holdWake <- struct{}{}:
		default:
		}
	}
	e.holdMu.Unlock()
}

// holdGroup is held fires due at the same instant.
type holdGroup struct {
	at   time.Time
	runs []*run
}

// holdHeap orders held groups by due time (container/heap).
type holdHeap []holdGroup

func (h holdHeap) Len() int           { return len(h) }
func (h holdHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h holdHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *holdHeap) Push(x any)        { *h = append(*h, x.(holdGroup)) }
func (h *holdHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	old[len(old)-1] = holdGroup{}
	*h = old[:len(old)-1]
	return g
}

// holdLoop releases held fires when due, every group due by then at one wake-up, until stop
// closes.
func (e *Executor) holdLoop(stop <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var due []holdGroup
	for {
		e.holdMu.Lock()
		now := time.Now()
		due = due[:0]
		for len(e.holdQ) > 0 && !e.holdQ[0].at.After(now) {
			due = append(due, heap.Pop(&e.holdQ).(holdGroup))
		}
		next, large := time.Hour, false
		if len(e.holdQ) > 0 {
			next, large = e.holdQ[0].at.Sub(now), len(e.holdQ[0].runs) >= yieldGroup
		}
		e.holdMu.Unlock()
		if len(due) > 0 {
			// A group at a time: the first group's workers start while the next is placed. The
			// release counts as a fire handed on, so the finisher waits for the last group too.
			e.handing.Add(1)
			for _, g := range due {
				e.release(g.runs)
			}
			e.startTaken()
			clear(due)
			continue // look again: more may have come due meanwhile
		}
		if large {
			if next <= yieldAhead {
				// A large group is due within the timer's resolution: yield until it is due.
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched()
				continue
			}
			next -= yieldAhead
		}
		t.Reset(next)
		select {
		case <-stop:
			return
		case <-e.holdWake:
		case <-t.C:
		}
	}
}

// A Go timer fires up to a millisecond late on an idle Linux process (the poller waits in whole
// milliseconds), and a fire held for its due time would start that much late. For a group of at
// least yieldGroup fires (a burst's Run call), holdLoop wakes yieldAhead early and yields the
// processor until the group is due: at most a millisecond of one core per burst.
const (
	yieldGroup = 64
	yieldAhead = time.Millisecond
)

// release places held fires that came due behind their jobs' workers, as if they arrived now:
// the block strategy applies now. A fire killed or ended meanwhile is skipped; one its job's
// worker refuses (a full queue) ends FAIL with the reason, since its Run was answered already.
func (e *Executor) release(due []*run) {
	var retired []retirement
	type refusal struct {
		r   *run
		msg string
	}
	var refused []refusal
	e.mu.Lock()
	for _, r := range due {
		id := r.t.GetTriggerId()
		if e.held[id] != r {
			continue // killed, or ended by Stop
		}
		delete(e.held, id)
		w, rt, msg := e.workerForLocked(r.t, r.key, r.bean)
		retired = append(retired, rt...)
		if msg != "" {
			refused = append(refused, refusal{r, msg})
			continue
		}
		r.w = w
		e.queueLocked(w, r)
	}
	e.unlockWake() // the workers in the order of their fires, none waiting for Executor.mu
	for _, rt := range retired {
		e.endRetirement(rt)
	}
	for _, f := range refused {
		e.finishUnstarted(f.r, &stopCause{status: logsv1.RunStatus_RUN_STATUS_FAIL, msg: "refused when due: " + f.msg})
	}
}

// seen returns the ids among ids that this executor accepted (queued, running or recent), each
// once, in the order given.
func (e *Executor) seen(ids []string) []string {
	var out []string
	done := make(map[string]struct{}, len(ids))
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if _, dup := done[id]; dup {
			continue
		}
		done[id] = struct{}{}
		_, active := e.active[id]
		if _, recent := e.recent.get(id); active || recent {
			out = append(out, id)
		}
	}
	return out
}

// checkTrigger refuses fires that cannot be run as sent.
func checkTrigger(t *executorv1.Trigger) error {
	switch {
	case !validTriggerID(t.GetTriggerId()):
		return fmt.Errorf("trigger_id %q: want 1–128 of [A-Za-z0-9_.:-], not starting with a dot", t.GetTriggerId())
	case t.GetJobId() <= 0:
		return fmt.Errorf("job_id %d: must be positive", t.GetJobId())
	case t.GetTimeoutSeconds() < 0:
		return fmt.Errorf("timeout_seconds %d: must not be negative", t.GetTimeoutSeconds())
	case t.GetStartDelayUs() > maxStartDelay.Microseconds():
		return fmt.Errorf("start_delay_us %d: at most %d (%v)", t.GetStartDelayUs(), maxStartDelay.Microseconds(), maxStartDelay)
	case t.GetShardTotal() < 0 || t.GetShardIndex() < 0 || t.GetShardIndex() >= max(t.GetShardTotal(), 1):
		return fmt.Errorf("shard_index %d out of range for shard_total %d", t.GetShardIndex(), t.GetShardTotal())
	}
	if _, ok := schedulerv1.BlockStrategy_name[int32(t.GetBlockStrategy())]; !ok {
		return fmt.Errorf("unknown block strategy %d", t.GetBlockStrategy())
	}
	return nil
}

// resolve finds what runs a fire: its function, its BEAN (nil for scripts) and the worker key.
func (e *Executor) resolve(t *executorv1.Trigger) (HandlerFunc, *bean, string, error) {
	switch gt := t.GetGlueType(); gt {
	case schedulerv1.GlueType_GLUE_TYPE_BEAN, schedulerv1.GlueType_GLUE_TYPE_UNSPECIFIED:
		if t.GetHandler() == "" {
			return nil, nil, "", errors.New("BEAN fire names no handler")
		}
		b, ok := e.handler(t.GetHandler())
		if !ok {
			return nil, nil, "", fmt.Errorf("no handler %s on executor %s", t.GetHandler(), e.cfg.AppName)
		}
		return b.fn, b, "bean:" + t.GetHandler(), nil
	case schedulerv1.GlueType_GLUE_TYPE_GLUE_GROOVY:
		return nil, nil, "", errors.New("GLUE_GROOVY is not supported by jobmesh executors")
	default:
		g, ok := glues[gt]
		if !ok {
			return nil, nil, "", fmt.Errorf("unknown glue type %d", gt)
		}
		if _, err := e.lookInterpreter(g.interpreter); err != nil {
			return nil, nil, "", err
		}
		// The name from the generated table: an enum's String looks it up through its
		// descriptor, a few µs per fire.
		key := schedulerv1.GlueType_name[int32(gt)] + ":" + glueVersion(t)
		return e.scriptHandler(g, t), nil, key, nil
	}
}

// changeCause says why a worker is replaced by one with another key.
func changeCause(oldKey, newKey string) *stopCause {
	msg := "killed: the job's GLUE source changed"
	if strings.HasPrefix(oldKey, "bean:") || strings.HasPrefix(newKey, "bean:") {
		msg = "killed: the job's handler changed"
	}
	return &stopCause{status: logsv1.RunStatus_RUN_STATUS_KILLED, msg: msg}
}

// newRunLocked builds a fire accepted at now.
func (e *Executor) newRunLocked(t *executorv1.Trigger, w *worker, fn HandlerFunc, now time.Time) *run {
	ctx, cancel := context.WithCancelCause(e.baseCtx)
	r := &run{e: e, t: t, w: w, fn: fn, ctx: ctx, cancel: cancel, day: e.dayLocked(now)}
	total := int(t.GetShardTotal())
	if total < 1 {
		total = 1
	}
	var sched time.Time
	if ms := t.GetScheduledUnixMs(); ms > 0 {
		sched = time.UnixMilli(ms)
	}
	r.job = &Job{
		ID: t.GetJobId(), GroupID: t.GetGroupId(), TriggerID: t.GetTriggerId(), Handler: t.GetHandler(),
		Params: t.GetParams(), ShardIndex: int(t.GetShardIndex()), ShardTotal: total, ScheduledTime: sched,
		Attempt: int(t.GetAttempt()), TriggerType: triggerTypeName(t.GetTriggerType()),
		TraceContext: maps.Clone(t.GetTraceContext()), Context: maps.Clone(t.GetContext()),
		WorkflowInstanceID: t.GetWorkflowInstanceId(), WorkflowNodeID: t.GetWorkflowNodeId(), run: r,
	}
	return r
}

// triggerTypeNames are the trigger types' names without their prefix (an enum's String
// looks the name up through its descriptor: a few µs per fire).
var triggerTypeNames = func() map[schedulerv1.TriggerType]string {
	m := make(map[schedulerv1.TriggerType]string, len(schedulerv1.TriggerType_name))
	for v, n := range schedulerv1.TriggerType_name {
		m[schedulerv1.TriggerType(v)] = strings.TrimPrefix(n, "TRIGGER_TYPE_")
	}
	return m
}()

// triggerTypeName is a trigger type's name without its prefix ("CRON").
func triggerTypeName(tt schedulerv1.TriggerType) string {
	if n, ok := triggerTypeNames[tt]; ok {
		return n
	}
	return strings.TrimPrefix(tt.String(), "TRIGGER_TYPE_")
}

// dayLocked is now's UTC date, the name of the day directory of run log files; the string is
// made once a day.
func (e *Executor) dayLocked(now time.Time) string {
	if now.Before(e.dayStart) || !now.Before(e.dayEnd) {
		y, m, d := now.UTC().Date()
		e.dayStart = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		e.dayEnd = e.dayStart.AddDate(0, 0, 1)
		e.day = e.dayStart.Format(time.DateOnly)
	}
	return e.day
}

// retireLocked takes w out of service; the caller ends what it held with endRetirement after
// unlocking.
func (e *Executor) retireLocked(w *worker, cause *stopCause) retirement {
	w.retired = true
	if e.workers[w.jobID] == w {
		delete(e.workers, w.jobID)
	}
	rt := retirement{running: w.running, queued: w.queue, cause: cause}
	w.queue = nil
	e.leaveSlotQueueLocked(w)
	w.signal()
	return rt
}

// endRetirement kills a retired worker's running fire and ends its queued ones.
func (e *Executor) endRetirement(rt retirement) {
	if rt.running != nil {
		rt.running.cancel(rt.cause)
	}
	for _, r := range rt.queued {
		e.finishUnstarted(r, rt.cause)
	}
}

// work is a worker's goroutine: it runs queued fires in order, and ends when retired or after
// IdleTimeout without fires.
func (e *Executor) work(w *worker) {
	defer func() {
		if w.inited && w.bean != nil && w.bean.destroy != nil {
			if err := safeCall(func() error { w.bean.destroy(); return nil }); err != nil {
				e.log.Error("handler destroy failed", "handler", w.bean.name, "job_id", w.jobID, "error", err)
			}
		}
		if w.script != "" {
			if err := os.Remove(w.script); err != nil {
				e.log.Warn("deleting a GLUE script file", "path", w.script, "error", err)
			}
		}
		e.mu.Lock()
		delete(e.allWorkers, w)
		e.mu.Unlock()
		close(w.done)
	}()
	if w.prev != nil {
		// The replaced worker's fire was killed; let it end so two fires of a job never overlap,
		// unless its handler ignores cancellation.
		t := time.NewTimer(e.cfg.KillGrace + time.Second)
		select {
		case <-w.prev:
		case <-t.C:
			e.log.Warn("previous fire of the job has not ended after its kill; starting the next anyway", "job_id", w.jobID)
		}
		t.Stop()
	}
	for {
		<-w.wake
		r := w.handed.Swap(nil)
		if r != nil {
			e.startTaken()
		}
		if r == nil {
			e.mu.Lock()
			end := w.retired && w.running == nil && len(w.queue) == 0
			if end {
				e.leaveSlotQueueLocked(w)
			}
			e.mu.Unlock()
			if end {
				return
			}
			continue
		}
		// The fire, with its run slot. What follows its end (the slot freed, the job's next fire
		// handed on) is the finisher's, in batches under one lock: in a burst, the workers of
		// fires that ended do not take Executor.mu from those still releasing and starting fires.
		e.execute(w, r)
	}
}

// reclaimLoop ends the workers that have been idle for IdleTimeout, until stop closes.
func (e *Executor) reclaimLoop(stop <-chan struct{}) {
	t := time.NewTicker(max(e.cfg.IdleTimeout/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			var n int
			e.mu.Lock()
			for id, w := range e.workers {
				if !w.busy() && now.Sub(w.idleSince) >= e.cfg.IdleTimeout {
					w.retired = true
					delete(e.workers, id)
					w.signal()
					n++
				}
			}
			e.mu.Unlock()
			if n > 0 {
				e.log.Debug("idle job workers reclaimed", "count", n)
			}
		}
	}
}

// A fire runs only in a run slot: at most Config.Capacity fires run at once. A worker asks for a
// slot as soon as its next fire is due to start (takeSlotLocked: when the fire is queued on an
// idle worker, or its previous fire ends), so that a Run call's later fires already see the
// slots its earlier ones took. A worker that finds none waits in slotQueue, in order; a freed
// slot goes straight to the first waiting worker, whose next fire takes it and is handed to the
// worker goroutine at once, so a fire arriving later cannot take it.

// queueLocked queues an accepted (or held and now due) fire on its job's worker, and hands it on
// when the worker is idle and a run slot is free.
func (e *Executor) queueLocked(w *worker, r *run) {
	if w.running == nil && len(w.queue) == 0 && e.takeSlotLocked(w) {
		e.handLocked(w, r) // the usual case, without a queue
		return
	}
	w.queue = append(w.queue, r)
	if w.running == nil && e.takeSlotLocked(w) {
		e.handOnLocked(w)
	}
}

// takeSlotLocked takes a run slot for the next fire of w, idle, and reports true; or queues w
// for the next free slot (nothing when it waits already) and reports false.
func (e *Executor) takeSlotLocked(w *worker) bool {
	if w.slotWait {
		return false
	}
	if e.slots < e.cfg.Capacity && len(e.slotQueue) == 0 {
		e.slots++
		return true
	}
	w.slotWait = true
	e.slotQueue = append(e.slotQueue, w)
	return false
}

// popLocked makes the next fire of w, whose run slot is counted already, its running one.
func popLocked(w *worker) *run {
	r := w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	if len(w.queue) == 0 {
		w.queue = nil
	}
	w.running = r
	return r
}

// handOnLocked hands the next fire of w, idle, whose run slot is counted already, to the worker
// goroutine.
func (e *Executor) handOnLocked(w *worker) {
	e.handLocked(w, popLocked(w))
}

// handLocked makes r, whose run slot is counted already, the running fire of w, idle, and hands
// it to the worker goroutine, to be woken by unlockWake.
func (e *Executor) handLocked(w *worker, r *run) {
	w.running = r
	e.handing.Add(1)
	w.handed.Store(r)
	e.wakes = append(e.wakes, w)
}

// unlockWake unlocks Executor.mu and then wakes the workers handed a fire under it, in order:
// a woken worker never finds the lock held by the one that woke it.
func (e *Executor) unlockWake() {
	var buf [16]*worker
	ws := e.wakes
	if len(ws) <= len(buf) {
		ws = buf[:copy(buf[:], ws)]
		clear(e.wakes)
		e.wakes = e.wakes[:0]
	} else {
		e.wakes = nil // a burst's: the next one is as large only in the next burst
	}
	e.mu.Unlock()
	for _, w := range ws {
		w.signal()
	}
}

// doneLocked is for the finisher when the worker goroutine of w is done with its running fire:
// it frees the fire's run slot and hands on the job's next queued fire when it gets a slot for
// it (else w waits in slotQueue, and the fire is handed on when a slot frees); with nothing
// queued, w leaves the wait for a slot and is idle from now.
func (e *Executor) doneLocked(w *worker, now time.Time) {
	w.running = nil
	e.freeSlotLocked()
	if len(w.queue) == 0 {
		e.leaveSlotQueueLocked(w)
		w.idleSince = now
		if w.retired {
			w.signal() // to end
		}
		return
	}
	if e.takeSlotLocked(w) {
		e.handOnLocked(w)
	}
}

// freeSlotLocked hands a slot that a fire left to the first worker waiting for one that still
// has a fire to run, or frees it.
func (e *Executor) freeSlotLocked() {
	for len(e.slotQueue) > 0 {
		w := e.slotQueue[0]
		e.slotQueue[0] = nil
		e.slotQueue = e.slotQueue[1:]
		w.slotWait = false
		if len(w.queue) == 0 {
			continue // its fire was killed meanwhile
		}
		e.handOnLocked(w)
		return
	}
	e.slotQueue = nil
	e.slots--
}

// leaveSlotQueueLocked takes w, with nothing left to run, out of the wait for a slot.
func (e *Executor) leaveSlotQueueLocked(w *worker) {
	if w.slotWait {
		w.slotWait = false
		if i := slices.Index(e.slotQueue, w); i >= 0 {
			e.slotQueue = slices.Delete(e.slotQueue, i, i+1)
		}
	}
}

// freeSlotsLocked is how many fires could start now: Capacity less the fires running and those
// waiting for a slot.
func (e *Executor) freeSlotsLocked() int {
	return max(e.cfg.Capacity-e.slots-len(e.slotQueue), 0)
}

// needsSlotLocked says whether a fire of a job, with handler key, adds to the fires that want a
// run slot: not when the job is busy here and the fire is refused for it (DISCARD_LATER) or
// takes the running fire's place (COVER_EARLY).
func (e *Executor) needsSlotLocked(t *executorv1.Trigger, key string) bool {
	w := e.workers[t.GetJobId()]
	if w == nil || w.key != key || !w.busy() {
		return true
	}
	switch t.GetBlockStrategy() {
	case schedulerv1.BlockStrategy_BLOCK_STRATEGY_DISCARD_LATER, schedulerv1.BlockStrategy_BLOCK_STRATEGY_COVER_EARLY:
		return false
	}
	return true
}

// load reports how busy the executor is, for the scheduler (RunResponse.load).
func (e *Executor) load() *executorv1.ExecutorLoad {
	e.mu.Lock()
	defer e.mu.Unlock()
	return &executorv1.ExecutorLoad{Capacity: int32(e.cfg.Capacity), Running: int32(e.slots),
		Waiting: int32(len(e.slotQueue)), Free: int32(e.freeSlotsLocked())}
}

// execute runs one fire, the running fire of w, to its end and leaves the rest (its result
// recorded, the run slot freed) to the finisher.
func (e *Executor) execute(w *worker, r *run) {
	if r.ctx.Err() != nil { // killed between dequeue and start
		cause := causeOf(r.ctx)
		now := time.Now()
		e.finishSoon(w, r, cause.status, cause.msg, now, now, "")
		return
	}
	start := time.Now()
	r.begin(start)
	e.metrics.started(r.t.GetTriggerType(), r.t.GetScheduledUnixMs(), start)

	ctx := r.ctx
	if secs := r.t.GetTimeoutSeconds(); secs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Duration(secs)*time.Second,
			&stopCause{status: logsv1.RunStatus_RUN_STATUS_TIMEOUT, msg: fmt.Sprintf("timed out after %ds", secs)})
		defer cancel()
	}
	if tc := r.t.GetTraceContext(); len(tc) > 0 {
		ctx = w3c.Extract(ctx, propagation.MapCarrier(tc))
	}
	// Without a tracer provider the run has no span (it would record nothing); sampled out, its
	// span records nothing: either way skip building what it would record.
	span, traceparent := noSpan, "" // the fire's own traceparent, unless the run span is a new one
	if instrument.TracerInstalled() {
		parent := trace.SpanContextFromContext(ctx)
		ctx, span = tracer.Start(ctx, "jobmesh.run", trace.WithTimestamp(start))
		if sc := span.SpanContext(); !sc.Equal(parent) {
			traceparent = traceparentOf(ctx)
		}
	}
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(
			attribute.Int64("jobmesh.job_id", r.t.GetJobId()),
			attribute.String("jobmesh.trigger_id", r.t.GetTriggerId()),
			attribute.String("jobmesh.handler", r.t.GetHandler()),
			attribute.String("jobmesh.glue_type", strings.TrimPrefix(r.t.GetGlueType().String(), "GLUE_TYPE_")),
			attribute.Int("jobmesh.attempt", int(r.t.GetAttempt())),
			attribute.Int("jobmesh.shard_index", int(r.t.GetShardIndex())),
		)
	}

	var err error
	if w.bean != nil && w.bean.init != nil && !w.inited {
		if err = safeCall(w.bean.init); err != nil {
			err = fmt.Errorf("handler %s init: %w", w.bean.name, err)
		} else {
			w.inited = true
		}
	} else if w.bean != nil {
		w.inited = true
	}
	if err == nil {
		err = safeCall(func() error { return r.fn(ctx, r.job) })
		if err != nil { // (a success allocates nothing here)
			var pe *panicError
			if errors.As(err, &pe) {
				e.log.ErrorContext(ctx, "handler panicked", "trigger_id", r.t.GetTriggerId(), "job_id", r.t.GetJobId(), "panic", pe.value, "stack", pe.stack)
				r.logText("panic: " + fmt.Sprint(pe.value) + "\n" + pe.stack)
			}
		}
	}
	status, msg := outcome(ctx, err)
	if set := r.takeMessage(); status == logsv1.RunStatus_RUN_STATUS_SUCCESS {
		msg = set
	}
	if recording {
		span.SetAttributes(attribute.String("jobmesh.run_status", strings.TrimPrefix(status.String(), "RUN_STATUS_")))
		if status != logsv1.RunStatus_RUN_STATUS_SUCCESS {
			span.SetStatus(codes.Error, msg)
		}
	}
	end := time.Now()
	if recording {
		span.End(trace.WithTimestamp(end))
	} else {
		span.End()
	}
	e.finishSoon(w, r, status, msg, start, end, traceparent)
}

// setMessage sets the fire's success message, until the handler has returned.
func (r *run) setMessage(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.returned {
		r.msg = msg
	}
}

// takeMessage returns the handler's success message once it has returned; later setMessage
// calls are ignored.
func (r *run) takeMessage() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.returned = true
	return r.msg
}

// outcome turns a handler's return into a status: success, the cause of a cancellation
// (timeout, kill) the handler gave in to, or failure.
func outcome(ctx context.Context, err error) (logsv1.RunStatus, string) {
	if err == nil {
		return logsv1.RunStatus_RUN_STATUS_SUCCESS, ""
	}
	if d, ok := ctx.Deadline(); ok && ctx.Err() == nil && !time.Now().Before(d) {
		// The deadline passed and the handler (a gRPC call, say) saw it first: the context's own
		// timer fires at once and sets the cause, so a timeout is reported as one.
		<-ctx.Done()
	}
	var sc *stopCause
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &sc) {
		return sc.status, sc.msg
	}
	if errors.As(err, &sc) {
		return sc.status, sc.msg
	}
	return logsv1.RunStatus_RUN_STATUS_FAIL, err.Error()
}

// causeOf is the stop cause of a cancelled fire context.
func causeOf(ctx context.Context) *stopCause {
	var sc *stopCause
	if errors.As(context.Cause(ctx), &sc) {
		return sc
	}
	return &stopCause{status: logsv1.RunStatus_RUN_STATUS_KILLED, msg: "killed"}
}

// panicError carries a handler panic.
type panicError struct {
	value any
	stack string
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// safeCall runs f, turning a panic into a *panicError.
func safeCall(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: string(debug.Stack())}
		}
	}()
	return f()
}

// finishUnstarted ends a fire that never ran.
func (e *Executor) finishUnstarted(r *run, cause *stopCause) {
	r.cancel(cause)
	now := time.Now()
	e.finish(r, cause.status, cause.msg, now, now, "")
}

// ending is a fire's end on its way to finishRest, or (w set) the end of the running fire of a
// worker, whose slot the finisher frees.
type ending struct {
	r           *run
	status      logsv1.RunStatus
	msg         string
	start, end  time.Time
	traceparent string
	wrote       bool
	w           *worker // the worker goroutine is done with r, its running fire
	ended       bool    // r ended here: its result is to be recorded (else it was already)
}

// finish records a fire's result once: later calls are ignored. traceparent is the run span's;
// empty means the fire's own (from the scheduler).
func (e *Executor) finish(r *run, status logsv1.RunStatus, msg string, start, end time.Time, traceparent string) {
	if en, ok := r.end(status, msg, start, end, traceparent); ok {
		en.ended = true
		e.finishRest([]ending{en})
	}
}

// finishSoon is finish for the worker goroutine of w, done with its running fire r: the fire is
// ended now (a kill or a second end finds it so), and the rest (its result queued, OnResult, its
// run slot freed, the job's next fire handed on) is left to the finisher goroutine, so that in a
// burst of fires due together, the later ones start without waiting for the results of the
// earlier, and workers never take Executor.mu after their fire.
func (e *Executor) finishSoon(w *worker, r *run, status logsv1.RunStatus, msg string, start, end time.Time, traceparent string) {
	en, ok := r.end(status, msg, start, end, traceparent)
	en.r, en.w, en.ended = r, w, ok
	e.finMu.Lock()
	if e.finStopped {
		e.finMu.Unlock()
		e.freeSlots([]ending{en})
		e.finishRest([]ending{en})
		return
	}
	e.finQ = append(e.finQ, en)
	if len(e.finQ) == 1 {
		e.finCond.Signal()
	}
	e.finMu.Unlock()
}

// finishLoop runs finishRest for the fires workers ended, in order, until stopFinishing.
func (e *Executor) finishLoop() {
	defer close(e.finDone)
	var batch []ending
	for {
		e.finMu.Lock()
		for len(e.finQ) == 0 && !e.finStopped {
			e.finCond.Wait()
		}
		if len(e.finQ) == 0 {
			e.finMu.Unlock()
			return
		}
		stopped := e.finStopped
		batch, e.finQ = e.finQ, batch[:0]
		e.finMu.Unlock()
		// The run slots are freed at once: a slot held while results wait would turn a steady
		// load away as busy. Only the results wait for the fires being handed on to start.
		e.freeSlots(batch)
		if !stopped && e.handing.Load() > 0 {
			e.awaitStarts()
		}
		e.finishRest(batch)
		clear(batch)
	}
}

// startTaken counts a fire handed on as taken up by its worker; the last one lets the finisher
// go on.
func (e *Executor) startTaken() {
	if e.handing.Add(-1) == 0 {
		select {
		case e.startsDone <- struct{}{}:
		default:
		}
	}
}

// finishDefer bounds how long the finisher lets fires handed to their workers start first while
// none is taken up; finishDeferMax bounds it in all.
const (
	finishDefer    = 5 * time.Millisecond
	finishDeferMax = 100 * time.Millisecond
)

// awaitStarts waits until every fire handed to its worker has been taken up by it, and no
// release of held fires is in progress; or until finishDefer passes without progress, or
// finishDeferMax in all: in a burst due at the same instant, the fires that ended first would
// otherwise have their results recorded (spool, logsvc) on the CPU the burst's later fires wait
// for.
func (e *Executor) awaitStarts() {
	select { // a stale signal, from before this wait
	case <-e.startsDone:
	default:
	}
	last := e.handing.Load()
	if last == 0 {
		return
	}
	t := time.NewTimer(finishDefer)
	defer t.Stop()
	giveUp := time.Now().Add(finishDeferMax)
	for {
		select {
		case <-e.startsDone:
		case <-t.C:
			n := e.handing.Load()
			if n == last || !time.Now().Before(giveUp) {
				return // stalled (a worker waits for its job's previous fire), or long enough
			}
			last = n
			t.Reset(finishDefer)
		}
		if e.handing.Load() == 0 {
			return
		}
	}
}

// stopFinishing has the finisher finish what is queued and end; later ends are finished by the
// caller. It is idempotent.
func (e *Executor) stopFinishing() {
	e.finMu.Lock()
	e.finStopped = true
	e.finCond.Signal()
	done := e.finDone
	e.finMu.Unlock()
	if done != nil {
		<-done
	}
}

// end marks the fire ended, once: ok is false when it had ended already.
func (r *run) end(status logsv1.RunStatus, msg string, start, end time.Time, traceparent string) (ending, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return ending{}, false
	}
	r.finished = true
	if start.IsZero() {
		start = r.started
	}
	if start.IsZero() {
		start = end
	}
	return ending{r: r, status: status, msg: msg, start: start, end: end, traceparent: traceparent, wrote: r.lineNo > 0}, true
}

// freeSlots frees the run slots of the workers done with their fires, under one lock, and hands
// the jobs' next fires on.
func (e *Executor) freeSlots(batch []ending) {
	now := time.Now()
	e.mu.Lock()
	for _, en := range batch {
		if en.w != nil {
			e.doneLocked(en.w, now)
		}
	}
	e.unlockWake()
}

// finishRest queues the results of the fires that ended (their slots freed by freeSlots) and
// forgets the fires.
func (e *Executor) finishRest(batch []ending) {
	outs := make([]map[string]string, len(batch))
	for i := range batch {
		en := &batch[i]
		if !en.ended {
			continue
		}
		r := en.r
		if en.wrote {
			e.runs.ended(r.t.GetTriggerId())
		}
		r.cancel(context.Canceled)
		e.metrics.ended(en.status)
		en.msg = cleanText(en.msg)
		outs[i] = r.takeOutputs()
		if en.traceparent == "" {
			en.traceparent = r.t.GetTraceContext()["traceparent"]
		}
		e.out.addResult(&logsv1.RunResult{
			TriggerId: r.t.GetTriggerId(), JobId: r.t.GetJobId(), Status: en.status, Message: en.msg,
			StartUnixMs: en.start.UnixMilli(), EndUnixMs: en.end.UnixMilli(), ExecutorAddress: e.advertise,
			TraceId: traceIDOf(en.traceparent), Traceparent: en.traceparent, DeliveryToken: r.t.GetDeliveryToken(),
			Outputs: outs[i],
		})
	}
	// Only now are the fires no longer active: a Log call that says a fire's end, which waits for
	// what is queued to be written, implies its result is in the spool.
	e.mu.Lock()
	for _, en := range batch {
		if id := en.r.t.GetTriggerId(); en.ended && e.active[id] == en.r {
			delete(e.active, id)
		}
	}
	e.mu.Unlock()
	for i, en := range batch {
		if !en.ended {
			continue
		}
		r, status, msg := en.r, en.status, en.msg
		if lctx := context.Background(); e.log.Enabled(lctx, slog.LevelDebug) {
			if en.traceparent != "" { // the run's trace ids on the line
				lctx = w3c.Extract(lctx, propagation.MapCarrier{"traceparent": en.traceparent})
			}
			e.log.DebugContext(lctx, "fire ended", "trigger_id", r.t.GetTriggerId(), "job_id", r.t.GetJobId(), "status", status.String(), "message", msg)
		}
		if e.cfg.OnResult != nil {
			e.cfg.OnResult(Result{
				TriggerID: r.t.GetTriggerId(), JobID: r.t.GetJobId(), Status: Status(strings.TrimPrefix(status.String(), "RUN_STATUS_")),
				Message: msg, StartTime: en.start, EndTime: en.end, Outputs: maps.Clone(outs[i]),
			})
		}
	}
}

// kill ends fires: one by trigger id, or every fire of a job.
func (e *Executor) kill(jobID int64, triggerID string) (bool, string) {
	e.mu.Lock()
	var rt retirement
	rt.cause = killedByRequest
	if triggerID != "" {
		r, ok := e.active[triggerID]
		if !ok {
			e.mu.Unlock()
			return false, "fire " + triggerID + " is not running or queued here"
		}
		switch {
		case e.held[triggerID] == r:
			delete(e.held, triggerID)
			rt.queued = []*run{r}
		case r.w == nil || r.w.running != r && !slices.Contains(r.w.queue, r): // ending now
			e.mu.Unlock()
			return false, "fire " + triggerID + " is ending"
		case r.w.running == r:
			rt.running = r
		default:
			for i, q := range r.w.queue {
				if q == r {
					r.w.queue = append(r.w.queue[:i], r.w.queue[i+1:]...)
					break
				}
			}
			if len(r.w.queue) == 0 {
				e.leaveSlotQueueLocked(r.w) // the slot it asked for goes to the next fire
			}
			rt.queued = []*run{r}
		}
	} else {
		w := e.workers[jobID]
		if w != nil {
			rt.running, rt.queued = w.running, w.queue
			w.queue = nil
			e.leaveSlotQueueLocked(w)
		}
		for id, r := range e.held { // fires sent ahead of their time are the job's too
			if r.t.GetJobId() == jobID {
				delete(e.held, id)
				rt.queued = append(rt.queued, r)
			}
		}
		if rt.running == nil && len(rt.queued) == 0 {
			e.mu.Unlock()
			return false, fmt.Sprintf("job %d has nothing running, queued or held here", jobID)
		}
	}
	e.mu.Unlock()
	e.endRetirement(rt)
	return true, ""
}

// cleanText makes s a valid proto string of at most maxText bytes.
func cleanText(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) > maxText {
		cut := maxText
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
