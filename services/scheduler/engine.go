package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/ring"
)

// engine is one partition this replica leads: its term (partition and epoch, which fences every
// scheduling write of the partition), its time ring, the fires it owes and the pending fires it
// has claimed, its pre-read loop, its completion cursor and its takeover. It is built when the
// partition's election is won (Service.lead) and runs until the lead ends; then it stops firing,
// lets the dispatches in flight finish and hands what it still owes to the partition's next
// leader. The trigger pools, executor connections and trigger-record stream are the replica's,
// shared by its engines: each fire carries its engine (fire.lead), which admits its dispatch.
type engine struct {
	s     *Service
	part  int
	epoch int64
	ring  *ring.Ring[*fire]
	owed  *owed
	// claims are the pending fires (retries, child fires) this engine has armed.
	claims claims
	// handoff are the jobs whose pending fires another replica has just stored (handoffLoop).
	handoff *handoffs
	// tags numbers the pending fires it arms, so that two of one job due in the same millisecond
	// (or one due with a scheduled fire) are two ring entries, not one replacing the other.
	tags atomic.Int64
	// lastScanMs is when the previous pre-read started, lastPruneMs when it last pruned job
	// tombstones (only the pre-read loop touches them).
	lastScanMs, lastPruneMs int64
	// cursor is the last completion acted on for this partition; negative until the takeover
	// has read it (the completion follower leaves the partition alone until then).
	cursor atomic.Int64
	// cursorSavedMs is when the completion follower last saved the cursor (clock ms).
	cursorSavedMs atomic.Int64
	// carriedTo is the completion stream's position through which the follower holds this
	// partition's completions for a later batch, not acted on yet because its fence was busy
	// (0: it holds none). Only the completion follower sets it.
	carriedTo atomic.Int64
	// carriedSince is when the follower first held this partition's completions back (Unix
	// ns; 0: it holds none).
	carriedSince atomic.Int64
	// all (guarded by s.mu): cursor 0 means every completion logsvc keeps, not its newest (the
	// partition began following when logsvc had none).
	all bool
	// following: the takeover has made a partition that never followed completions follow the
	// replica's stream (startFollowing), once, whatever the takeover's retries.
	following bool
	// deposed is closed when a fenced write found a newer leader of the partition.
	deposed     chan struct{}
	deposedOnce sync.Once

	mu       sync.Mutex
	lost     bool
	lostC    chan struct{} // closed when lost (made on first use: lostChan)
	inflight sync.WaitGroup
	// pins are the fires a takeover found an executor may hold already (it did not answer
	// Seen): each goes to that executor only, whose duplicate check answers (takeOverOnce).
	pins map[pendingKey]string
}

// streamPos is how far the completion stream has gone for the partition: its cursor (negative
// while the takeover has not read it), or the position through which the follower holds its
// completions for a later batch.
func (l *engine) streamPos() int64 {
	c := l.cursor.Load()
	if c < 0 {
		return c
	}
	return max(c, l.carriedTo.Load())
}

// term returns the engine's partition and epoch.
func (l *engine) term() term { return term{part: l.part, epoch: l.epoch} }

// depose ends the engine: a fenced write found a newer leader of its partition.
func (l *engine) depose() { l.deposedOnce.Do(func() { close(l.deposed) }) }

// ending reports whether the engine has lost its partition or is being deposed: it writes
// nothing more.
func (l *engine) ending() bool {
	select {
	case <-l.deposed:
		return true
	default:
		return l.isLost()
	}
}

// pin sends fire k to addr only, when it is dispatched.
func (l *engine) pin(k pendingKey, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pins == nil {
		l.pins = map[pendingKey]string{}
	}
	l.pins[k] = addr
}

// pinOf returns the executor fire k is pinned to ("" for none).
func (l *engine) pinOf(k pendingKey) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pins[k]
}

// unpin forgets fire k's pin once it is dispatched.
func (l *engine) unpin(k pendingKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pins, k)
}

// begin admits a dispatch of one of this leadership's fires; false once leadership is lost.
func (l *engine) begin() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return false
	}
	l.inflight.Add(1)
	return true
}

// lostChan is closed once this leadership is lost.
func (l *engine) lostChan() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostC == nil {
		l.lostC = make(chan struct{})
		if l.lost {
			close(l.lostC)
		}
	}
	return l.lostC
}

// isLost reports whether this leadership has ended.
func (l *engine) isLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// end closes a dispatch admitted by begin.
func (l *engine) end() { l.inflight.Done() }

// stop refuses further dispatches and waits for those in flight; wake (may be nil) is called
// once they see the leadership lost, to wake those that wait for their executors.
func (l *engine) stop(wake func()) {
	l.mu.Lock()
	if !l.lost && l.lostC != nil {
		close(l.lostC)
	}
	l.lost = true
	l.mu.Unlock()
	if wake != nil {
		wake()
	}
	l.inflight.Wait()
}

// lead runs partition p's engine under epoch until ctx ends (the partition is handed over, the
// etcd session is lost, or the replica shuts down) or a newer leader fences it off. It is the
// partition manager's Lead callback.
func (s *Service) lead(ctx context.Context, p int, epoch int64) {
	n, err := s.parts.Count(ctx)
	if err != nil {
		return // ended before the count was known
	}
	s.count.Store(int32(n))
	if err := s.assignPartitions(ctx); err != nil {
		if ctx.Err() == nil {
			s.log.Error("partition not led: jobs not assigned to partitions", "partition", p, "error", err)
		}
		return
	}
	l := &engine{s: s, part: p, epoch: epoch, owed: newOwed(), handoff: newHandoffs(), lastScanMs: s.clk.Now().UnixMilli(),
		deposed: make(chan struct{})}
	l.cursor.Store(-1)
	l.run(ctx)
}

// assignPartitions gives the jobs written before the cluster had partitions theirs, once per
// replica, before its first engine reads them.
func (s *Service) assignPartitions(ctx context.Context) error {
	s.assignMu.Lock()
	defer s.assignMu.Unlock()
	if s.assigned {
		return nil
	}
	n, err := s.jobs.assignPartitions(ctx, s.partCount())
	if err != nil {
		return err
	}
	if n > 0 {
		s.log.Info("assigned jobs to partitions", "jobs", n, "partitions", s.partCount())
	}
	s.assigned = true
	return nil
}

// run schedules until ctx ends or the engine is deposed: first it takes over what the
// partition's previous leader owed, then it pre-reads; the replica's completion follower acts on
// the partition's completions meanwhile. On the way out it stops firing at once, lets
// dispatches in flight finish, and leaves what it still owes in armed_from_ms for the next
// leader (fenced, so a deposed engine writes nothing).
func (l *engine) run(ctx context.Context) {
	s := l.s
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := ring.New(s.clk, s.onFire)
	if lead := s.cfg.DispatchLead; lead > 0 {
		r.SetLead(lead, leadTick(lead))
	}
	if err := r.Start(lctx); err != nil {
		s.log.Error("time ring failed to start", "partition", l.part, "error", err)
		return
	}
	l.ring = r
	s.mu.Lock()
	s.engines[l.part] = l
	s.mu.Unlock()
	s.log.Debug("leading partition", "partition", l.part, "epoch", l.epoch)

	done := make(chan struct{})
	go func() {
		defer close(done)
		err := l.takeOver(lctx)
		if err == nil {
			hctx, hcancel := context.WithCancel(lctx)
			hdone := make(chan struct{})
			go func() { defer close(hdone); l.handoffLoop(hctx) }()
			err = l.preReadLoop(lctx)
			hcancel()
			<-hdone
		}
		if errors.Is(err, errDeposed) {
			l.depose()
		}
	}()

	select {
	case <-l.deposed:
		s.log.Warn("partition lost: a newer leader holds its fence; stopping its ring", "partition", l.part, "epoch", l.epoch)
	case <-ctx.Done():
		s.log.Debug("partition handed over: stopping its ring", "partition", l.part, "epoch", l.epoch)
	}
	r.Drain() // stops firing at once; what it held stays owed
	// Queued fires are skipped (still owed), in the pools, the lanes and the backlogs; calls in
	// flight finish.
	l.stop(s.waits.kickAll)
	cancel()
	<-done
	r.Stop()
	s.mu.Lock()
	if s.engines[l.part] == l {
		delete(s.engines, l.part)
	}
	s.mu.Unlock()
	l.flushOwed()
}

// flushOwed writes the owed fires' minimum per job to armed_from_ms, and the completion cursor,
// fenced, at the end of a leadership.
func (l *engine) flushOwed() {
	s := l.s
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx, err := s.jobs.begin(ctx)
	if err != nil {
		s.log.Error("handing owed fires to the next leader failed", "error", err)
		return
	}
	defer tx.Rollback()
	if err := s.jobs.fence(ctx, tx.Tx, l.part, l.epoch, s.cfg.ReplicaID); err != nil {
		// A newer leader holds the fence: the armed_from_ms of the last pre-read covers them.
		s.log.Warn("owed fires not handed over: fenced off; the last pre-read's marks stand", "error", err)
		return
	}
	if err := s.jobs.indexPlans(ctx, tx.Tx); err != nil {
		s.log.Error("handing owed fires to the next leader failed", "error", err)
		return
	}
	dirty := l.owed.takeDirty()
	if err := s.jobs.markArmed(ctx, tx.Tx, dirty); err != nil {
		s.log.Error("handing owed fires to the next leader failed", "error", err)
		return
	}
	// The completions read since the cursor was last saved asked nothing of this partition
	// (those that did were saved with it): the next leader need not read them again.
	if c := l.cursor.Load(); c > 0 {
		var b db.Batch
		s.jobs.saveCursors(&b, []term{l.term()}, c)
		if err := tx.Send(ctx, &b); err != nil {
			s.log.Error("handing owed fires to the next leader failed", "error", err)
			return
		}
	}
	if err := s.jobs.commit(tx); err != nil {
		s.log.Error("handing owed fires to the next leader failed", "error", err)
		return
	}
	if len(dirty) > 0 {
		s.log.Info("handed owed fires to the next leader", "partition", l.part, "jobs", len(dirty))
	}
}

// takeoverLookback bounds how far back a new leader looks for owed fires; older ones count as
// misfires.
const takeoverLookback = 10 * time.Minute

// takeOver re-fires what the partition's previous leader armed and did not dispatch: for every job with an
// armed_from_ms mark, the schedule's fires in [armed_from_ms, next_fire_ms) whose trigger ids
// neither logsvc knows nor an executor of the job's group has seen (seenOnExecutors). They keep
// their scheduled times and trigger ids, so an executor that got one anyway drops it as a
// duplicate. A fire that was dispatched but whose trigger record logsvc lacks (an executor has
// it, or logsvc knows it from the executor's reports alone) gets its record rebuilt
// (rebuildRecord). Until this succeeds the leader arms nothing new.
func (l *engine) takeOver(ctx context.Context) error {
	s := l.s
	backoff := 100 * time.Millisecond
	for {
		err := l.takeOverOnce(ctx)
		if err == nil || errors.Is(err, errDeposed) || ctx.Err() != nil {
			return err
		}
		s.log.Warn("takeover failed; retrying (nothing new is armed until it succeeds)", "error", err)
		if err := s.wait(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// startFollowing makes a partition that has never followed completions follow this replica's
// stream before its engine fires anything. When the stream has not said where it is, a stream
// that starts at logsvc's newest completion once it connects would pass over the completions of
// the fires sent before that: the engine waits for it to be live, and the takeover is tried
// again (and nothing fired) while it is not; streamFrom moves the engine's cursor to where the
// stream starts. That start is saved as the partition's cursor, so that a next leader resumes
// there even if this one dies before acting on a completion.
func (l *engine) startFollowing(ctx context.Context) error {
	s := l.s
	pos := func() (int64, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return l.cursor.Load(), l.all
	}
	c, all := pos()
	if c == 0 && !all { // the stream has not said where it is
		if !s.completions.waitLive(ctx, s.cfg.DispatchTimeout) {
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("partition %d never followed completions, and logsvc's completion stream is not live yet", l.part)
		}
		if c, all = pos(); c == 0 && !all {
			return nil // a logsvc that does not say where its stream starts: nothing known to save
		}
	}
	tx, err := s.jobs.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := s.jobs.fence(ctx, tx.Tx, l.part, l.epoch, s.cfg.ReplicaID); err != nil {
		return err
	}
	var b db.Batch
	s.jobs.saveCursors(&b, []term{l.term()}, c)
	if err := tx.Send(ctx, &b); err != nil {
		return err
	}
	return s.jobs.commit(tx)
}

func (l *engine) takeOverOnce(ctx context.Context) error {
	s := l.s
	start := time.Now() // a measurement for the log, not scheduling: the wall clock
	// Fence first: the previous leader, if it is still running (paused, or cut off from etcd
	// but not from Postgres), may have a pre-read open; its marks must be committed before they
	// are read here, and its later transactions must fail.
	if err := s.jobs.raiseFence(ctx, l.part, l.epoch, s.cfg.ReplicaID); err != nil {
		return err
	}
	// The previous leader can write the cursor no more: the follower may act on the partition's
	// completions from here.
	cursor, started, err := s.jobs.cursor(ctx, l.part)
	if err != nil {
		return err
	}
	// A started cursor 0: its first leader's stream started when logsvc had no completion, so
	// every completion logsvc keeps is one of its own to act on.
	all := started && cursor == 0
	s.mu.Lock() // streamFrom moves the engines at 0 to where the stream starts, under s.mu too
	if at := s.completions.at.Load(); !started && at >= 0 {
		// The partition has never followed completions: it starts where this replica's stream
		// is (its completions from before were sent by a leader that died before it acted on
		// any), not at logsvc's newest completion, which would restart the stream past what the
		// replica's other partitions have not acted on yet.
		cursor, all = at, at == 0
	}
	if l.cursor.Load() < 0 {
		l.cursor.Store(cursor)
		l.all = all
		s.completions.wake()
	}
	s.mu.Unlock()
	if !started && !l.following {
		if err := l.startFollowing(ctx); err != nil {
			return err
		}
		l.following = true
	}
	if err := l.takeOverPending(ctx); err != nil {
		return err
	}
	jobs, err := s.jobs.armed(ctx, l.part)
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return nil
	}
	now := s.clk.Now()
	nowMs := now.UnixMilli()
	oldest := now.Add(-takeoverLookback).UnixMilli()
	var cands []*fire
	// skip holds the owed fires later than the misfire threshold that their jobs' misfire
	// strategy skips, with why; FIRE_ONCE_NOW's one run now is the latest late fire, made a
	// MISFIRE fire (planMisfires).
	skip := map[*fire]string{}
	for _, aj := range jobs {
		if aj.Status != jobRunning {
			continue
		}
		sch, err := parseSchedule(aj.jobRow)
		if err != nil {
			continue
		}
		var mine []*fire
		for t := aj.armedFrom; t != 0 && (aj.NextFireMs == 0 || t < aj.NextFireMs); t = nextAfter(sch, time.UnixMilli(t)) {
			if t >= oldest {
				mine = append(mine, &fire{job: aj.jobRow, fireMs: t, kind: kindRefire, trigType: triggerCron, lead: l})
			}
			if aj.NextFireMs == 0 {
				break // FIX_DELAY or ONCE: the armed fire was the only one
			}
		}
		times := make([]int64, len(mine))
		for i, f := range mine {
			times[i] = f.fireMs
		}
		plan := planMisfires(aj.Misfire, times, nowMs, s.cfg.MisfireThreshold)
		onceNow, skipped := misfireFires(aj.jobRow, plan, nowMs, s.cfg.MisfireThreshold)
		whyByMs := make(map[int64]string, len(skipped))
		for _, sk := range skipped {
			whyByMs[sk.f.fireMs] = sk.why
		}
		for _, f := range mine {
			if why, ok := whyByMs[f.fireMs]; ok {
				skip[f] = why
			} else if onceNow != nil && f.fireMs == onceNow.fireMs {
				f.trigType = onceNow.trigType
			}
		}
		cands = append(cands, mine...)
	}
	known, unrecorded := map[string]bool{}, map[string]bool{}
	for start := 0; start < len(cands); start += 10000 {
		chunk := cands[start:min(start+10000, len(cands))]
		ids := make([]string, len(chunk))
		for i, f := range chunk {
			ids[i] = TriggerID(f.job.ID, f.fireMs, 0, 0)
		}
		resp, err := s.logs.LookupTriggers(ctx, &logsv1.LookupTriggersRequest{TriggerIds: ids})
		if err != nil {
			return fmt.Errorf("look up armed fires in logsvc: %w", err)
		}
		for _, id := range resp.GetKnownTriggerIds() {
			known[id] = true
		}
		for _, id := range resp.GetUnrecordedTriggerIds() {
			unrecorded[id] = true
		}
	}
	// logsvc lags the fires under load; ask the executors about the ones it does not know.
	unknown := map[int64][]string{}
	for _, f := range cands {
		if id := TriggerID(f.job.ID, f.fireMs, 0, 0); !known[id] {
			unknown[f.job.GroupID] = append(unknown[f.job.GroupID], id)
		}
	}
	onExec, silent, skipped := s.seenOnExecutors(ctx, unknown)
	// Every mark read is cleared or replaced at the next pre-read, or by the hand-over, from
	// what is owed now: only now that the owed fires are known. A takeover that fails or is cut
	// short before this point leaves the marks as they are for the partition's next leader.
	for _, aj := range jobs {
		l.owed.touch(aj.ID)
	}
	refire, pinned, rebuilt, misfires := 0, 0, 0, 0
	var doubts []*doubt
	for _, f := range cands {
		id := TriggerID(f.job.ID, f.fireMs, 0, 0)
		if addr, ok := onExec[id]; ok || unrecorded[id] {
			// Dispatched, and logsvc has no record of it: the old leader died with it queued.
			s.rebuildRecord(ctx, f, addr)
			rebuilt++
			continue
		}
		if known[id] {
			continue
		}
		if why, ok := skip[f]; ok {
			// A misfire its job skips: recorded SKIPPED (an executor's report of it, should
			// one hold it after all, takes precedence in logsvc), and no longer owed.
			s.recordSkipped(ctx, skippedFire{f: f, why: why})
			misfires++
			continue
		}
		l.owed.add(f.job.ID, f.fireMs)
		switch ex := silent[f.job.GroupID]; len(ex) {
		case 0:
		case 1: // it alone may hold the fire: it gets it again, and its duplicate check answers
			l.pin(f.key(), ex[0].addr)
			pinned++
		default: // more than one may: wait until all but one have said
			doubts = append(doubts, &doubt{f: f, id: id, cands: slices.Clone(ex)})
			continue
		}
		refire++
		l.ring.Add(ringEntry{JobID: f.job.ID, FireAt: f.fireMs, Value: f})
	}
	s.log.Info("took over from the previous leader", "partition", l.part, "epoch", l.epoch, "jobs_marked", len(jobs),
		"fires_checked", len(cands), "fires_on_executors", len(onExec), "executors_skipped", skipped,
		"fires_refired", refire, "fires_pinned", pinned, "fires_in_doubt", len(doubts), "records_rebuilt", rebuilt,
		"misfires_skipped", misfires, "took", time.Since(start).Round(time.Millisecond))
	l.resolveLater(ctx, doubts)
	return nil
}

// resolveLater resolves fires in doubt off the takeover (resolveDoubts), so that the leader
// schedules meanwhile; nothing when there are none or l is lost already.
func (l *engine) resolveLater(ctx context.Context, ds []*doubt) {
	if len(ds) == 0 || !l.begin() {
		return
	}
	go l.resolveDoubts(ctx, ds)
}

// wait pauses on the injected clock.
func (s *Service) wait(ctx context.Context, d time.Duration) error {
	t := s.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
