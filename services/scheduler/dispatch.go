package scheduler

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/triggerid"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
)

// fire is one firing of a job on its way to executors.
type fire struct {
	job    *jobRow
	fireMs int64 // scheduled time, Unix ms: part of the trigger id
	// kind is what the fire is to the scheduler: where it is kept until it settles (settle).
	kind     fireKind
	trigType triggerType // what its records say it is
	attempt  int32
	// parent is the job whose run fired this one as its child (a PARENT fire, and its retries),
	// 0 otherwise: part of the trigger id, as the child's own schedule may have fireMs too.
	parent int64
	// params overrides the job's params when set (manual triggers, retries).
	params *string
	// addresses overrides routing (manual triggers with an address list).
	addresses []string
	// shard, when shardTotal > 0, sends only that shard (a retry of one failed shard).
	shard, shardTotal int32
	// lead is the leadership that armed the fire (nil for manual triggers): it is not dispatched
	// once that leadership is lost, and is settled (owed or pending) when it leaves the ring.
	lead *engine
	// dueMs is when the fire is due to start, Unix ms: its ring time (0 for manual triggers).
	// The ring hands fires over up to DispatchLead before it (dispatchScheduled).
	dueMs int64
	// wf is the workflow node a workflow's fire runs, nil for other fires.
	wf *wfFire
	// skip is why a kindSkipped fire does not run (its job's misfire strategy skipped it late):
	// its SKIPPED record, carrying skip, is delivered when it comes due, in place of a Run
	// (skipFire).
	skip string
}

// fireKind is what a fire is to the scheduler, which says where it is kept from the decision
// that makes it until it settles (settle), and so how the next leader finds it if this one dies.
// Its trigger type is what its records say: a kindRefire fire says CRON, or MISFIRE for a
// takeover's run now; a kindNode fire says the workflow's trigger type, or RETRY.
type fireKind uint8

const (
	// kindScheduled is a fire of the job's own schedule, armed by the pre-read: owed by its
	// engine (engine.owed) until it settles. A next leader walks the schedule again from the
	// partition's saved cursor.
	kindScheduled fireKind = iota + 1
	// kindRefire is a scheduled fire an earlier leader armed and that a takeover arms again
	// (takeOverOnce): owed like kindScheduled, and possibly pinned to the executor that may hold it.
	kindRefire
	// kindManual is a manual or API trigger, dispatched by the replica that took the call: nothing
	// keeps it; the caller hears how it went.
	kindManual
	// kindRetry is a failed fire's next attempt.
	kindRetry
	// kindChild is a child job's fire after its parent's success.
	kindChild
	// kindNode is a workflow node's fire (and its retries).
	kindNode
	// kindOnceNow is the one run now of a job whose fires came later than the misfire threshold
	// (FIRE_ONCE_NOW), decided by the pre-read.
	kindOnceNow
	// kindSkipped is a late fire its job's misfire strategy skips: only its SKIPPED record is
	// delivered.
	kindSkipped
)

// owed reports whether fires of kind k are kept in their engine's owed set until they settle.
func (k fireKind) owed() bool { return k == kindScheduled || k == kindRefire }

// stored reports whether fires of kind k are kept in pending_fires until logsvc has their
// records: their row was written with the decision that made them.
func (k fireKind) stored() bool { return k >= kindRetry }

// String names the kind in logs and test failures.
func (k fireKind) String() string {
	switch k {
	case kindScheduled:
		return "scheduled"
	case kindRefire:
		return "re-fire"
	case kindManual:
		return "manual"
	case kindRetry:
		return "retry"
	case kindChild:
		return "child"
	case kindNode:
		return "workflow node"
	case kindOnceNow:
		return "misfire run now"
	case kindSkipped:
		return "skipped"
	}
	return fmt.Sprintf("fireKind(%d)", uint8(k))
}

// noKind is the panic of a fire an engine keeps, built without its kind: a programming error
// that would otherwise leave it owed, or its row claimed, for the engine's life.
func noKind(f *fire) string {
	return fmt.Sprintf("scheduler: fire %s of job %d has no kind (%v)", f.key().triggerID(), f.job.ID, f.kind)
}

// skipReason is what a kindSkipped fire's row stores as its skip reason: never empty, as a row
// without one is read back as a fire to run (storedKind).
func (f *fire) skipReason() string {
	if f.skip == "" {
		return "skipped by its job's misfire strategy"
	}
	return f.skip
}

// storedKind is the kind of a fire read back from pending_fires: a row with a skip reason
// (skipReason) is a skipped fire's, one with a workflow node a node's; the others by their
// trigger type.
func storedKind(tt triggerType, node, skipped bool) fireKind {
	switch {
	case skipped:
		return kindSkipped
	case node:
		return kindNode
	case tt == triggerRetry:
		return kindRetry
	case tt == triggerMisfire:
		return kindOnceNow
	}
	return kindChild // PARENT: the only other decision that stores a fire
}

// TriggerID is the deterministic id of a job's own fire (not a child fire: see triggerid): the
// same fire always gets the same id, so executors and logsvc drop duplicates after a failover.
func TriggerID(jobID, fireMs int64, shard, attempt int32) string {
	return triggerid.ID{Job: jobID, ScheduledMs: fireMs, Shard: shard, Attempt: attempt}.String()
}

// triggerID is the trigger id of the fire's given shard.
func (f *fire) triggerID(shard int32) string {
	id := triggerid.ID{Job: f.job.ID, ScheduledMs: f.fireMs, Shard: shard, Attempt: f.attempt, Parent: f.parent}
	if f.wf != nil {
		id.Workflow, id.Node = f.wf.ID, f.wf.Node
	}
	return id.String()
}

// onFire is the ring's callback: hand every due fire to a trigger pool without blocking the ring,
// and the skipped fires among them to a goroutine that records them (after an outage a pre-read
// may arm thousands, which must not hold the ring's on-time fires).
func (s *Service) onFire(due []ringEntry) {
	var skips []*fire
	for _, e := range due {
		e.Value.dueMs = e.FireAt
		if e.Value.kind == kindSkipped {
			skips = append(skips, e.Value)
			continue
		}
		s.submit(e.Value)
	}
	if len(skips) > 0 {
		go func() {
			for _, f := range skips {
				s.skipFire(f)
			}
		}()
	}
}

// leadTick is how long the ring gathers fires that go out ahead of their time into one wake-up
// (ring.SetLead): a tenth of the lead, at most 20 ms, so a fire still leaves at least 90 % of
// the lead before its time.
func leadTick(lead time.Duration) time.Duration { return min(lead/10, 20*time.Millisecond) }

// dispatchScheduled is the trigger pools' work. A fire the ring handed over ahead of its time
// goes out at once when its executors hold fires until their time (Trigger.start_delay_us);
// otherwise it waits for its time off the pool. Fires whose executor must answer for its state
// at the fire's time wait too: DISCARD_LATER (the executor refuses the fire while the job runs)
// and BUSYOVER (routing asks executors whether the job is idle).
func (s *Service) dispatchScheduled(f *fire) {
	early := time.UnixMilli(f.dueMs).Sub(s.clk.Now())
	if early <= 0 || s.sendsEarly(f) {
		s.dispatch(f, trace.Link{}, nil)
		return
	}
	t := s.clk.NewTimer(early)
	go func() {
		<-t.C()
		if f.lead != nil && f.lead.isLost() {
			return // still owed: the next leader sends it
		}
		s.submit(f)
	}()
}

// sendsEarly says whether a fire may be sent before its time: its group routes over executors
// that all hold fires until their time, and neither its block strategy nor its routing depends
// on the executor's state at that time.
func (s *Service) sendsEarly(f *fire) bool {
	j := f.job
	if len(f.addresses) > 0 || j.Block == blockDiscardLater || j.Route == route.Busyover {
		return false
	}
	return s.groups.holdsFires(j.GroupID)
}

// submit queues a fire on the fast pool, or the slow one for jobs whose dispatch has been slow.
// A full pool is recorded as a trigger failure, never dropped silently.
func (s *Service) submit(f *fire) {
	if f.kind == kindSkipped {
		s.skipFire(f)
		return
	}
	p := s.fast
	if s.slowness.isSlow(f.job.ID) {
		p = s.slow
	}
	if !p.trySubmit(f) {
		s.metrics.rejected(p)
		ctx, span := s.startFire(f, trace.Link{})
		msg := fmt.Sprintf("trigger pool %q full (%d queued): fire rejected", p.name, cap(p.queue))
		endFire(span, []string{s.recordFailure(ctx, f, 0, 1, "", msg)}, nil, 1, msg)
		if f.lead != nil {
			s.settle(f)
		}
	}
}

// dispatch routes a fire and sends Run to each chosen executor. It does not wait for the
// executors' answers: once each shard is answered or given up (an executor that does not take
// it at once is waited for: backlog.go), the outcome is recorded, the fire settled, and then
// (if not nil) gets the fire's trigger ids (nil when the fire was not dispatched: its
// leadership was lost). A fire to one executor whose leadership is lost while it waits for its
// executor is not sent either: it stays owed, for the next leader; the shards of a broadcast
// that has begun are sent, or given up and recorded. The fire's root span links to cause (a
// traced operation that caused the fire), if valid.
func (s *Service) dispatch(f *fire, cause trace.Link, then func(ids []string)) {
	if f.lead != nil && !f.lead.begin() {
		if then != nil {
			then(nil)
		}
		return // leadership lost: the fire stays owed and the next leader sends it
	}
	// The slow pool takes the jobs whose dispatch holds a worker: routing (probes for FAILOVER
	// and BUSYOVER) and handing the fire over, not the wait for the answer.
	start := time.Now()
	defer func() { s.slowness.observe(f.job.ID, time.Since(start)) }()
	ctx, span := s.startFire(f, cause)
	// Routing (reading the group, FAILOVER and BUSYOVER probes) is bounded by the dispatch
	// timeout; the shards then wait for their executors as long as back-pressure lets them.
	rctx, cancel := context.WithTimeout(ctx, s.cfg.DispatchTimeout)
	defer cancel()
	end := func(ids, addrs []string, failed int, msg string) {
		endFire(span, ids, addrs, failed, msg)
		s.settled(f, ids, then)
	}
	fail := func(msg string) {
		end([]string{s.recordFailure(ctx, f, 0, 1, "", msg)}, nil, 1, msg)
	}

	var targets []route.Target
	var routeMsg string
	pinned := false
	if addr, why := f.pinnedTo(); addr != "" {
		// A takeover found that this executor may hold the fire: it goes there only, and the
		// executor's duplicate check answers if it does.
		_, token, err := s.groups.addresses(rctx, f.job.GroupID)
		if err != nil {
			s.metrics.gaveUp(outcomeNoRoute)
			fail("route: " + err.Error())
			return
		}
		ctx = withAccessToken(ctx, token)
		targets, routeMsg, pinned = []route.Target{{Address: addr, ShardIndex: 0, ShardTotal: 1}}, why, true
	} else if len(f.addresses) > 0 {
		for _, a := range f.addresses {
			targets = append(targets, route.Target{Address: a, ShardIndex: 0, ShardTotal: 1})
		}
		routeMsg = "addresses given by the trigger request: " + strings.Join(f.addresses, ", ")
	} else {
		addrs, token, err := s.groups.addresses(rctx, f.job.GroupID)
		if err != nil {
			s.metrics.gaveUp(outcomeNoRoute)
			fail("route: " + err.Error())
			return
		}
		// Route probes and Run alike, all to the group's executors.
		ctx, rctx = withAccessToken(ctx, token), withAccessToken(rctx, token)
		// Pass over the executors that could not be reached lately, and those that said they are
		// full while another has room (a broadcast's shards go to every executor that is up).
		addrs, note := s.execs.health.usable(addrs, f.job.Route != route.ShardingBroadcast)
		dec, err := s.router.Route(rctx, f.job.ID, f.job.Route, addrs)
		dec.Message += note
		if err != nil {
			msg := fmt.Sprintf("route %s over group %d: %v", f.job.Route, f.job.GroupID, err)
			if dec.Message != "" { // FAILOVER and BUSYOVER say which executors failed their check, and why
				msg += "\n" + dec.Message
			}
			s.metrics.gaveUp(outcomeNoRoute)
			fail(msg)
			return
		}
		targets, routeMsg = dec.Targets, dec.Message
	}
	if f.shardTotal > 0 { // a retry of one shard keeps its index
		for i := range targets {
			targets[i].ShardIndex, targets[i].ShardTotal = int(f.shard), int(f.shardTotal)
		}
		targets = targets[:1]
	}
	if len(targets) == 0 { // routing answers an error rather than no executor; never send nothing
		fail("route: no executor chosen")
		return
	}
	if len(targets) == 1 { // nearly every fire: no slices or counters to build
		t := targets[0]
		var skip func() bool
		if f.lead != nil {
			skip = f.lead.isLost
		}
		s.send(ctx, f, t, routeMsg, pinned, skip, func(id, failure string, sent bool) {
			if !sent { // still owed: the next leader sends it
				span.End()
				f.lead.unpin(f.key())
				f.lead.end()
				if then != nil {
					then(nil)
				}
				return
			}
			failed := 0
			if failure != "" {
				failed = 1
			}
			end([]string{id}, []string{t.Address}, failed, failure)
		})
		return
	}
	// The shards of a broadcast go out together, each in its executor's lane: one slow or hung
	// executor does not hold the others' Run. The last answer ends the fire.
	ids, addrs, fails := make([]string, len(targets)), make([]string, len(targets)), make([]string, len(targets))
	var left atomic.Int32
	left.Store(int32(len(targets)))
	for i, t := range targets {
		addrs[i] = t.Address
		s.send(ctx, f, t, routeMsg, false, nil, func(id, failure string, _ bool) {
			ids[i], fails[i] = id, failure
			if left.Add(-1) > 0 {
				return
			}
			var failed int
			var failMsg string
			for _, msg := range fails {
				if msg != "" {
					if failed++; failed == 1 {
						failMsg = msg
					}
				}
			}
			end(ids, addrs, failed, failMsg)
		})
	}
}

// pinnedTo returns the executor a takeover pinned the fire to, and why; "" for none.
func (f *fire) pinnedTo() (addr, why string) {
	if f.lead == nil || len(f.addresses) > 0 {
		return "", ""
	}
	if addr = f.lead.pinOf(f.key()); addr == "" {
		return "", ""
	}
	return addr, "takeover: sent to executor " + addr + " only: it did not say whether it holds the fire, and its duplicate check answers if it does"
}

// settled closes a dispatch: a scheduled fire is no longer owed (a retry or child fire leaves
// pending_fires once logsvc has its records), its leadership's dispatch ends, and then gets the
// fire's trigger ids.
func (s *Service) settled(f *fire, ids []string, then func(ids []string)) {
	if f.lead != nil {
		s.settle(f)
		f.lead.end()
	}
	if then != nil {
		then(ids)
	}
}

// send delivers one shard of a fire to one executor, records what happened once the executor
// answers or the fire is given up (backlog.go: an executor that does not take it at once is
// waited for, within the misfire threshold), and then calls done with the shard's trigger id and
// why the fire did not get there (empty when it did). If skip (may be nil) says so when a call
// of the executor's is formed, the fire is not sent, nor recorded: done gets sent false. A fire
// to addresses the trigger named presents the token of the group each address belongs to
// (tokenFor). pinned sends it to that executor only, whatever happens (takeover: the executor may
// hold it already); otherwise a routed fire whose executor cannot be reached goes to another.
func (s *Service) send(ctx context.Context, f *fire, t route.Target, routeMsg string, pinned bool, skip func() bool, done func(id, failure string, sent bool)) {
	if len(f.addresses) > 0 {
		tctx, cancel := context.WithTimeout(ctx, s.cfg.DispatchTimeout) // the group, when not cached
		ctx = withAccessToken(ctx, s.groups.tokenFor(tctx, f.job.GroupID, t.Address))
		cancel()
	}
	shard, total := int32(t.ShardIndex), int32(t.ShardTotal)
	if total == 0 {
		total = 1
	}
	j := f.job
	params := j.Params
	if f.params != nil {
		params = *f.params
	}
	id := f.triggerID(shard)
	ctx, span := startDispatch(ctx, id, t)
	traceID, tc := traceOf(ctx)
	sentAt := s.clk.Now()
	now := sentAt.UnixMilli()
	trig := &executorv1.Trigger{
		TriggerId: id, JobId: j.ID, GroupId: j.GroupID, Handler: j.Handler, Params: params,
		BlockStrategy: j.Block.proto(), TimeoutSeconds: j.TimeoutSeconds, GlueType: j.GlueType.proto(), GlueSource: j.GlueSource,
		GlueUpdatedUnixMs: j.GlueUpdatedMs, ShardIndex: shard, ShardTotal: total, ScheduledUnixMs: f.fireMs,
		DispatchUnixMs: now, Attempt: f.attempt, TriggerType: f.trigType.proto(), TraceContext: tc,
	}
	if w := f.wf; w != nil {
		trig.Context, trig.WorkflowInstanceId, trig.WorkflowNodeId = w.Context, instanceID(w.ID, f.fireMs), w.NodeID
		if w.TimeoutSeconds > 0 {
			trig.TimeoutSeconds = w.TimeoutSeconds
		}
	}
	if s.delivery != nil {
		trig.DeliveryToken = s.delivery.Sum(id)
	}
	rec := s.record(f, id, shard, total, t.Address, params)
	rec.TriggerUnixMs = now
	rec.TraceId, rec.Traceparent = traceID, tc["traceparent"]
	s.try(&shardSend{
		f: f, t: t, ctx: ctx, id: id, trig: trig, rec: rec, span: span, routeMsg: routeMsg, skip: skip, done: done,
		sentAt: sentAt, giveUpAt: s.giveUpAt(f, sentAt), pinned: pinned,
		reroute: !pinned && len(f.addresses) == 0 && total == 1 && j.Route != route.ShardingBroadcast,
	})
}

// answered records a shard's Run answer (ack, or err when the executor refused the call) and
// ends its span; it returns why the fire did not get there (empty when it did).
func (s *Service) answered(sh *shardSend, ack *executorv1.RunAck, err error) (failure string) {
	ctx, f, t, routeMsg, rec, span := sh.ctx, sh.f, sh.t, sh.routeMsg, sh.rec, sh.span
	j := f.job
	outcome := outcomeAccepted
	answer := strings.TrimPrefix(ack.GetOutcome().String(), "RUN_OUTCOME_")
	if sh.tries > 1 { // what the tries before met, then this answer
		routeMsg += fmt.Sprintf("\n%s; try %d:", sh.last, sh.tries)
	}
	switch {
	case status.Code(err) == codes.Unauthenticated:
		outcome = outcomeFailed
		rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
		rec.TriggerMessage = fmt.Sprintf("%s\nexecutor %s %s (Unauthenticated): %s", routeMsg, t.Address, refusal(ctx, j.GroupID), status.Convert(err).Message())
		failure, answer = fmt.Sprintf("executor %s %s", t.Address, refusal(ctx, j.GroupID)), "UNAUTHENTICATED"
	case err != nil:
		outcome = outcomeFailed
		rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
		rec.TriggerMessage = fmt.Sprintf("%s\nexecutor %s: %v", routeMsg, t.Address, err)
		failure, answer = fmt.Sprintf("executor %s: %v", t.Address, err), "ERROR"
	case ack.GetOutcome() == executorv1.RunOutcome_RUN_OUTCOME_REJECTED:
		outcome = outcomeRejected
		rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
		rec.TriggerMessage = fmt.Sprintf("%s\nexecutor %s rejected the fire: %s", routeMsg, t.Address, ack.GetMessage())
		failure = fmt.Sprintf("executor %s rejected the fire: %s", t.Address, ack.GetMessage())
	default:
		if ack.GetOutcome() == executorv1.RunOutcome_RUN_OUTCOME_DUPLICATE {
			outcome = outcomeDuplicate
		}
		rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK
		rec.TriggerMessage = routeMsg + "\nexecutor " + t.Address + ": " + answer // every fire: no fmt
	}
	s.metrics.sent(f.trigType, f.fireMs, sh.sentAt, outcome)
	endDispatch(span, answer, failure != "", failure)
	s.deliver(ctx, f, rec)
	return failure
}

// refusal says what an executor that answered Unauthenticated refused.
func refusal(ctx context.Context, groupID int64) string {
	if presentsToken(ctx) {
		return fmt.Sprintf("refused the access token of executor group %d; the group's token must be the one the executor expects", groupID)
	}
	return fmt.Sprintf("refused a call without an access token: executor group %d has none, or the address is not one of its executors", groupID)
}

// record starts the trigger record of one shard of a fire.
func (s *Service) record(f *fire, id string, shard, total int32, addr, params string) *logsv1.TriggerRecord {
	j := f.job
	left := j.RetryCount - f.attempt
	if left < 0 {
		left = 0
	}
	return &logsv1.TriggerRecord{
		TriggerId: id, JobId: j.ID, GroupId: j.GroupID, TriggerType: f.trigType.proto(), ScheduledUnixMs: f.fireMs,
		TriggerUnixMs: s.clk.Now().UnixMilli(), ExecutorAddress: addr, Handler: j.Handler, Params: params,
		ShardIndex: shard, ShardTotal: total, Attempt: f.attempt, RetriesLeft: left, RouteStrategy: routeProto(j.Route),
	}
}

// recordFailure records a fire that reached no executor; it counts toward retry.
func (s *Service) recordFailure(ctx context.Context, f *fire, shard, total int32, addr, msg string) string {
	params := f.job.Params
	if f.params != nil {
		params = *f.params
	}
	if f.shardTotal > 0 {
		shard, total = f.shard, f.shardTotal
	}
	id := f.triggerID(shard)
	rec := s.record(f, id, shard, total, addr, params)
	rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
	rec.TriggerMessage = msg
	traceID, tc := traceOf(ctx)
	rec.TraceId, rec.Traceparent = traceID, tc["traceparent"]
	s.failedLog.Log(ctx, "job_id", f.job.ID, "trigger_id", id, "reason", msg)
	s.deliver(ctx, f, rec)
	return id
}

// deliver queues fire f's trigger record for logsvc; a pending fire's row waits for its
// acknowledgement (rowAcks).
func (s *Service) deliver(ctx context.Context, f *fire, rec *logsv1.TriggerRecord) {
	s.rowAcks.expect(f, rec.TriggerId)
	if err := s.records.Send(rec); err != nil {
		s.rowAcks.dropped(rec.TriggerId) // never acknowledged: logsvc completes the run without it
		if n, ok := s.dropped.add(s.clk.Now()); ok {
			s.log.ErrorContext(ctx, "trigger records not queued for logsvc", "dropped", n, "last_trigger_id", rec.TriggerId, "error", err)
		}
	}
}

// dropReport counts trigger records dropped because logsvc fell behind, so that an overload is
// logged once at its start and then at most every dropReportEvery with the count since, not once
// per fire (which cost the leader a tenth of its CPU at 5,000 fires/s).
type dropReport struct {
	mu     sync.Mutex
	n      int
	logged time.Time
}

// dropReportEvery is the least time between two reports of dropped trigger records.
const dropReportEvery = 10 * time.Second

// add counts one drop at now; ok says whether to log now, with n drops since the last report.
func (d *dropReport) add(now time.Time) (n int, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	if !d.logged.IsZero() && now.Sub(d.logged) < dropReportEvery {
		return 0, false
	}
	n, d.n, d.logged = d.n, 0, now
	return n, true
}

// pool is a trigger pool: a bounded queue and a fixed set of workers.
type pool struct {
	name  string
	n     int
	queue chan *fire
	wg    sync.WaitGroup
	once  sync.Once
}

func newPool(name string, workers, queue int) *pool {
	return &pool{name: name, n: workers, queue: make(chan *fire, queue)}
}

func (p *pool) start(work func(*fire)) {
	p.wg.Add(p.n)
	for range p.n {
		go func() {
			defer p.wg.Done()
			for f := range p.queue {
				work(f)
			}
		}()
	}
}

func (p *pool) trySubmit(f *fire) (ok bool) {
	defer func() {
		if recover() != nil { // closed during shutdown
			ok = false
		}
	}()
	select {
	case p.queue <- f:
		return true
	default:
		return false
	}
}

// stop lets the workers finish what is queued, then returns.
func (p *pool) stop() {
	p.once.Do(func() { close(p.queue) })
	p.wg.Wait()
}

// slowTracker moves a job to the slow pool once more than 10 of its dispatches took over 500 ms
// in the current minute, as XXL-JOB does; the counts reset every minute. A dispatch's time is
// what it held its worker: routing and handing the fire to its executor's lane.
type slowTracker struct {
	clk    clock.Clock
	mu     sync.Mutex
	minute int64
	counts map[int64]int
}

func newSlowTracker(clk clock.Clock) *slowTracker {
	return &slowTracker{clk: clk, counts: map[int64]int{}}
}

func (t *slowTracker) roll() {
	if m := t.clk.Now().Unix() / 60; m != t.minute {
		t.minute, t.counts = m, map[int64]int{}
	}
}

func (t *slowTracker) observe(jobID int64, took time.Duration) {
	if took <= 500*time.Millisecond {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.roll()
	t.counts[jobID]++
}

func (t *slowTracker) isSlow(jobID int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.roll()
	return t.counts[jobID] > 10
}
