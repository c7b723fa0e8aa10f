package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
)

// Back-pressure. A fire that its executor does not take at once is not given up: it waits for
// that executor, within the misfire threshold, in the executor's backlog, and is sent again under
// its trigger id.
//   - Full (RunAck.busy): the executor took nothing and will take the fire once it has room. Its
//     Run answers say how many slots it has free (RunResponse.load); the backlog sends that many
//     of its oldest fires at once, or one at a time, with a growing pause, while it has none.
//   - Unreachable (the call never left: connection refused or not ready, or expired in its lane):
//     the executor has not got the fire, so a routed fire goes to another executor of its group
//     at once, and routing passes this one over for a while (executorHealth).
//   - No answer (a deadline, a broken call): the executor may hold the fire. It goes to that
//     executor only (pinned), again and again, until the executor answers: its duplicate check
//     answers DUPLICATE for a fire it took, so a fire never runs twice for want of an answer.
// Past the misfire threshold a waiting fire is given up: a pinned one is recorded UNKNOWN (the
// executor's report decides its run), the others FAILED with "overloaded: no executor accepted
// within …" when an executor was full. A job whose misfire strategy is FIRE_ONCE_NOW keeps one
// such overdue fire waiting, its fire once now; the others are given up.

// shardSend is one shard of a fire on its way to one executor, from its first Run to the
// executor's word or the scheduler's giving up.
type shardSend struct {
	f        *fire
	t        route.Target
	ctx      context.Context // the fire's trace and access token; each try adds its deadline
	id       string
	trig     *executorv1.Trigger
	rec      *logsv1.TriggerRecord
	span     trace.Span
	routeMsg string
	skip     func() bool
	done     func(id, failure string, sent bool)
	sentAt   time.Time // the last try
	giveUpAt time.Time // past it, the misfire strategy applies
	// pinned: a try went unanswered (or a takeover found the executor may hold the fire): no
	// other executor gets it. reroute: its executor came from routing, and it may go to another
	// while it is not pinned.
	pinned, reroute bool
	full            bool   // an executor said it was full
	last            string // why the last try did not place it
	tries           int
	seq             uint64 // order of arrival in the backlogs; 0 until first queued
	overdue         bool   // kept waiting past its threshold: its job's fire once now
}

// try sends the shard now, or queues it behind the fires already waiting for its executor (or
// when that executor said it has no room).
func (s *Service) try(sh *shardSend) {
	switch addr := sh.t.Address; {
	case !s.execs.health.hasRoom(addr):
		sh.full = true
		if sh.last == "" {
			sh.last = "executor " + addr + " said it had no free run slot"
		}
	case s.waits.busy(sh.lane()):
		if sh.last == "" {
			sh.last = "queued behind the fires waiting for executor " + addr
		}
	default:
		s.attempt(sh)
		return
	}
	s.hold(sh)
}

// lane is the backlog key of the shard: its executor and the token it presents.
func (sh *shardSend) lane() laneKey { return laneKey{sh.t.Address, tokenOf(sh.ctx)} }

// attempt hands the shard to its executor's lane with a fresh dispatch deadline.
func (s *Service) attempt(sh *shardSend) {
	sh.tries++
	sh.sentAt = s.clk.Now()
	ctx, cancel := context.WithTimeout(sh.ctx, s.cfg.DispatchTimeout)
	s.execs.runAsync(ctx, sh.t.Address, sh.trig, sh.f.dueMs, sh.skip, func(ack *executorv1.RunAck, err error) {
		cancel()
		s.placed(sh, ack, err)
	})
}

// placed acts on one try's answer (ack, or err when there is none).
func (s *Service) placed(sh *shardSend, ack *executorv1.RunAck, err error) {
	addr := sh.t.Address
	switch {
	case errors.Is(err, errNotSent): // leadership lost as its call formed: still owed
		s.notSent(sh)
	case err == nil && ack.GetBusy():
		// Refused before it was taken: the executor does not hold the fire (it checks its
		// duplicates first), whatever an earlier unanswered try left in doubt.
		s.execs.health.full(addr)
		sh.full, sh.last = true, fmt.Sprintf("executor %s is full: %s", addr, ack.GetMessage())
		if sh.pinned {
			sh.pinned, sh.reroute = false, false
		}
		s.hold(sh)
	case err == nil || definiteRefusal(err):
		s.finish(sh, s.answered(sh, ack, err))
	case neverSent(err):
		sh.last = fmt.Sprintf("executor %s: %v", addr, err)
		if sh.reroute && !sh.pinned && s.retarget(sh) {
			s.try(sh)
			return
		}
		s.hold(sh)
	default:
		sh.pinned = true
		sh.last = fmt.Sprintf("no answer from executor %s: %v", addr, err)
		s.hold(sh)
	}
}

// retarget routes a shard whose executor could not be reached to another executor of its group,
// passing over the unreachable; false when there is none to go to.
func (s *Service) retarget(sh *shardSend) bool {
	f := sh.f
	ctx, cancel := context.WithTimeout(sh.ctx, s.cfg.DispatchTimeout) // FAILOVER and BUSYOVER probe
	defer cancel()
	addrs, _, err := s.groups.addresses(ctx, f.job.GroupID)
	if err != nil {
		return false
	}
	use, note := s.execs.health.usable(addrs, true)
	dec, err := s.router.Route(ctx, f.job.ID, f.job.Route, use)
	if err != nil || len(dec.Targets) != 1 {
		return false
	}
	t := dec.Targets[0]
	if t.Address == sh.t.Address || s.execs.health.down(t.Address) {
		return false
	}
	if f.shardTotal > 0 {
		t.ShardIndex, t.ShardTotal = int(f.shard), int(f.shardTotal)
	}
	sh.routeMsg += "\n" + sh.last + "; routed again: " + dec.Message + note
	sh.t = t
	sh.rec.ExecutorAddress = t.Address
	return true
}

// hold queues a shard in its executor's backlog for another try, or gives it up when its time
// is past, or when the backlog is full.
func (s *Service) hold(sh *shardSend) {
	if sh.leaderLost() {
		s.leave(sh)
		return
	}
	if !sh.overdue && !s.clk.Now().Before(sh.giveUpAt) {
		s.expire(sh)
		return
	}
	if why := s.waits.push(sh); why != "" {
		s.giveUp(sh, why)
	}
}

// expire applies the misfire strategy to a shard whose threshold has passed: a scheduled fire of
// a FIRE_ONCE_NOW job waits on when no other fire of its job is overdue; the rest are given up.
func (s *Service) expire(sh *shardSend) {
	f := sh.f
	if !sh.pinned && f.trigType == triggerCron &&
		f.job.Misfire == misfireFireOnceNow && s.waits.keepOverdue(sh) {
		return
	}
	s.giveUp(sh, "")
}

// leaderLost reports whether the leadership that armed the shard's fire has ended.
func (sh *shardSend) leaderLost() bool { return sh.f.lead != nil && sh.f.lead.isLost() }

// leave ends a waiting shard whose leadership has ended: a fire to one executor is not sent and
// stays owed, for the next leader; a broadcast's shard (whose other shards may have gone) is
// given up and recorded, so that its retry, or the next leader, sees it failed.
func (s *Service) leave(sh *shardSend) {
	if sh.skip != nil {
		s.notSent(sh)
		return
	}
	s.giveUp(sh, "the leadership that fired it ended before the executor took it")
}

// notSent ends a shard that was not sent because its leadership was lost: it stays owed.
func (s *Service) notSent(sh *shardSend) {
	endDispatch(sh.span, "NOT_SENT", false, "")
	s.waits.forget(sh)
	sh.done(sh.id, "", false)
}

// finish ends a shard with the executor's word (failure is empty when it got there).
func (s *Service) finish(sh *shardSend, failure string) {
	s.waits.forget(sh)
	sh.done(sh.id, failure, true)
}

// giveUp records a shard that no executor took within its time, or, when why is set, that
// could not wait longer (why says why).
func (s *Service) giveUp(sh *shardSend, why string) {
	rec := sh.rec
	within := fmt.Sprintf(" within %v", s.cfg.MisfireThreshold)
	if why != "" {
		within = ""
	}
	var failure, answer, outcome string
	switch {
	case sh.pinned:
		rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN
		failure = fmt.Sprintf("unknown: %s%s; the fire went to no other executor, so that it cannot run twice: the executor's report decides the run", sh.last, within)
		answer, outcome = "UNKNOWN", outcomeUnknown
	case sh.full:
		rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
		failure = fmt.Sprintf("overloaded: no executor accepted%s (last: %s)", within, sh.last)
		answer, outcome = "OVERLOADED", outcomeOverloaded
	default:
		rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
		failure = fmt.Sprintf("no executor accepted%s: %s", within, sh.last)
		answer, outcome = "ERROR", outcomeFailed
	}
	if why != "" {
		failure += "; " + why
	}
	rec.TriggerMessage = sh.routeMsg + "\n" + failure
	s.gaveUpLog.Log(sh.ctx, "job_id", sh.f.job.ID, "trigger_id", sh.id, "reason", failure)
	s.metrics.gaveUp(outcome)
	endDispatch(sh.span, answer, true, failure)
	s.deliver(sh.ctx, sh.f, rec)
	s.finish(sh, failure)
}

// backlogs hold the shards waiting for their executors, a queue per executor (and token), in
// order of arrival, bounded per executor and in all.
type backlogs struct {
	s        *Service
	perExec  int
	maxTotal int

	mu      sync.Mutex
	m       map[laneKey]*backlog
	total   int
	any     atomic.Bool // total > 0, read without the lock on every fire's way
	seq     uint64
	overdue map[int64]bool // jobs with a fire kept waiting past its threshold (FIRE_ONCE_NOW)
	closed  bool
	stop    chan struct{}
}

// backlog is the queue of one executor, drained by its own goroutine while it holds shards.
type backlog struct {
	key  laneKey
	q    []*shardSend // by seq
	wake chan struct{}
}

func newBacklogs(s *Service, perExec, maxTotal int) *backlogs {
	return &backlogs{s: s, perExec: perExec, maxTotal: maxTotal, m: map[laneKey]*backlog{},
		overdue: map[int64]bool{}, stop: make(chan struct{})}
}

// busy reports whether shards wait for the executor of key: a new one queues behind them.
func (bs *backlogs) busy(key laneKey) bool {
	if !bs.any.Load() {
		return false
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b := bs.m[key]
	return b != nil && len(b.q) > 0
}

// waiting counts the shards in every backlog (metrics).
func (bs *backlogs) waiting() int {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.total
}

// push queues sh in its executor's backlog, starting the backlog's goroutine when it has none;
// it returns why not when the backlog (or all of them) is full or closed.
func (bs *backlogs) push(sh *shardSend) string {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.pushLocked(sh)
}

func (bs *backlogs) pushLocked(sh *shardSend) string {
	key := sh.lane()
	b := bs.m[key]
	switch {
	case bs.closed:
		return "the scheduler is stopping"
	case b != nil && len(b.q) >= bs.perExec:
		return fmt.Sprintf("%d fires wait for executor %s already, the most the scheduler holds for one (ExecutorQueue)", len(b.q), key.addr)
	case bs.total >= bs.maxTotal:
		return fmt.Sprintf("%d fires wait for their executors already, the most the scheduler holds (ExecutorQueueTotal)", bs.total)
	}
	if b == nil {
		b = &backlog{key: key, wake: make(chan struct{}, 1)}
		bs.m[key] = b
		go bs.run(b)
	}
	if sh.seq == 0 {
		bs.seq++
		sh.seq = bs.seq
	}
	i, _ := slices.BinarySearchFunc(b.q, sh.seq, func(x *shardSend, seq uint64) int { return compareSeq(x.seq, seq) })
	b.q = slices.Insert(b.q, i, sh)
	bs.total++
	bs.any.Store(true)
	return ""
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// keepOverdue keeps a shard past its threshold as its job's fire once now, unless another fire
// of the job is kept already or the backlog is full.
func (bs *backlogs) keepOverdue(sh *shardSend) bool {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	job := sh.f.job.ID
	if bs.overdue[job] {
		return false
	}
	sh.overdue = true
	if bs.pushLocked(sh) != "" {
		sh.overdue = false
		return false
	}
	bs.overdue[job] = true
	return true
}

// forget forgets what a shard that is done held in the backlogs (its job's overdue mark).
func (bs *backlogs) forget(sh *shardSend) {
	if !sh.overdue {
		return
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	delete(bs.overdue, sh.f.job.ID)
	sh.overdue = false
}

// kick wakes the backlog of an executor that has room again.
func (bs *backlogs) kick(addr string) {
	if !bs.any.Load() { // every Run answer with room calls: nearly always nothing waits
		return
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for k, b := range bs.m {
		if k.addr == addr {
			wake(b)
		}
	}
}

// kickAll wakes every backlog: a leadership ended, and its shards leave.
func (bs *backlogs) kickAll() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, b := range bs.m {
		wake(b)
	}
}

func wake(b *backlog) {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// run drains one backlog: whenever its executor has room (at once after an answer that says
// so), or after a pause that grows while it has none, it sends as many of the oldest shards as
// the executor had slots free (one to ask, when none), and hands back those whose leadership
// ended and those whose time is past. It ends when the backlog is empty, or at close.
func (bs *backlogs) run(b *backlog) {
	h := bs.s.execs.health
	for {
		if d := h.retryIn(b.key.addr); d > 0 {
			t := bs.s.clk.NewTimer(d)
			select {
			case <-t.C():
			case <-b.wake:
				t.Stop()
			case <-bs.stop:
				t.Stop()
				return
			}
		}
		now := bs.s.clk.Now()
		var left, expired, batch []*shardSend
		bs.mu.Lock()
		if bs.closed {
			bs.mu.Unlock()
			return
		}
		keep := b.q[:0]
		for _, sh := range b.q {
			switch {
			case sh.leaderLost():
				left = append(left, sh)
			case !sh.overdue && !now.Before(sh.giveUpAt):
				expired = append(expired, sh)
			default:
				keep = append(keep, sh)
			}
		}
		clear(b.q[len(keep):])
		b.q = keep
		n := h.take(b.key.addr, len(b.q))
		batch = slices.Clone(b.q[:n])
		clear(b.q[:n])
		b.q = b.q[n:]
		bs.total -= len(left) + len(expired) + len(batch)
		bs.any.Store(bs.total > 0)
		empty := len(b.q) == 0
		if empty {
			delete(bs.m, b.key)
		}
		bs.mu.Unlock()

		for _, sh := range left {
			bs.s.leave(sh)
		}
		for _, sh := range expired {
			bs.s.expire(sh)
		}
		for _, sh := range batch {
			if sh.reroute && !sh.pinned && h.down(sh.t.Address) && bs.s.retarget(sh) {
				bs.s.try(sh)
				continue
			}
			bs.s.attempt(sh)
		}
		if empty {
			return
		}
	}
}

// close gives up every waiting shard (the scheduler stops) and ends the backlogs' goroutines.
func (bs *backlogs) close() {
	bs.mu.Lock()
	if bs.closed {
		bs.mu.Unlock()
		return
	}
	bs.closed = true
	close(bs.stop)
	var all []*shardSend
	for k, b := range bs.m {
		all = append(all, b.q...)
		delete(bs.m, k)
	}
	bs.total = 0
	bs.any.Store(false)
	bs.mu.Unlock()
	for _, sh := range all {
		if sh.leaderLost() {
			bs.s.leave(sh)
			continue
		}
		bs.s.giveUp(sh, "the scheduler stopped")
	}
}

// giveUpAt is when a fire due at dueMs (0: now) and first sent at now stops waiting for an
// executor: the misfire threshold after the later of the two.
func (s *Service) giveUpAt(f *fire, now time.Time) time.Time {
	from := now
	if f.dueMs > 0 {
		if due := time.UnixMilli(f.dueMs); due.After(now) {
			from = due
		}
	}
	return from.Add(s.cfg.MisfireThreshold)
}
