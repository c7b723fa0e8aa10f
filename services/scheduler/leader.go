package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/ring"
)

// electionPrefix is the etcd election every replica campaigns in.
const electionPrefix = "/jobmesh/v1/scheduler/leader"

// leadership is the state a replica holds only while it leads.
type leadership struct {
	epoch int64
	ring  *ring.Ring[*fire]
	owed  *owed
	// claims are the pending fires (retries, child fires) this leadership has armed.
	claims claims
	// tags numbers the pending fires it arms, so that two of one job due in the same millisecond
	// (or one due with a scheduled fire) are two ring entries, not one replacing the other.
	tags atomic.Int64
	// lastScanMs is when the previous pre-read started, lastPruneMs when it last pruned job
	// tombstones (only the pre-read loop touches them).
	lastScanMs, lastPruneMs int64

	mu       sync.Mutex
	lost     bool
	lostC    chan struct{} // closed when lost (made on first use: lostChan)
	inflight sync.WaitGroup
	// pins are the fires a takeover found an executor may hold already (it did not answer
	// Seen): each goes to that executor only, whose duplicate check answers (takeover.go).
	pins map[pendingKey]string
}

// pin sends fire k to addr only, when it is dispatched.
func (l *leadership) pin(k pendingKey, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pins == nil {
		l.pins = map[pendingKey]string{}
	}
	l.pins[k] = addr
}

// pinOf returns the executor fire k is pinned to ("" for none).
func (l *leadership) pinOf(k pendingKey) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pins[k]
}

// unpin forgets fire k's pin once it is dispatched.
func (l *leadership) unpin(k pendingKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pins, k)
}

// begin admits a dispatch of one of this leadership's fires; false once leadership is lost.
func (l *leadership) begin() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return false
	}
	l.inflight.Add(1)
	return true
}

// lostChan is closed once this leadership is lost.
func (l *leadership) lostChan() <-chan struct{} {
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
func (l *leadership) isLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// end closes a dispatch admitted by begin.
func (l *leadership) end() { l.inflight.Done() }

// stop refuses further dispatches and waits for those in flight; wake (may be nil) is called
// once they see the leadership lost, to wake those that wait for their executors.
func (l *leadership) stop(wake func()) {
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

// campaignLoop campaigns until ctx ends; after losing leadership it campaigns again.
func (s *Service) campaignLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.campaign(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.log.Warn("campaign failed; retrying", "error", err, "backoff", backoff)
			if s.wait(ctx, backoff) != nil {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

// campaign runs one etcd session: wait to be elected, lead until the session ends or ctx ends.
func (s *Service) campaign(ctx context.Context) error {
	sess, err := concurrency.NewSession(s.etcd, concurrency.WithTTL(int(s.cfg.SessionTTL/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("etcd session: %w", err)
	}
	defer sess.Close() // revokes the lease: followers take over at once after a clean stop
	el := concurrency.NewElection(sess, electionPrefix)

	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	go func() {
		for resp := range el.Observe(octx) {
			if len(resp.Kvs) > 0 {
				s.mu.Lock()
				s.leader = string(resp.Kvs[0].Value)
				s.mu.Unlock()
			}
		}
	}()

	cctx, ccancel := context.WithCancel(ctx)
	go func() { // a lost session must also end a campaign that is still waiting
		select {
		case <-sess.Done():
		case <-cctx.Done():
		}
		ccancel()
	}()
	err = el.Campaign(cctx, s.cfg.ReplicaID)
	ccancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("campaign: %w", err)
	}
	epoch := el.Rev()
	s.log.Info("elected scheduler leader", "replica_id", s.cfg.ReplicaID, "epoch", epoch)
	s.leadUntilLost(ctx, sess, epoch)
	if ctx.Err() != nil {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := el.Resign(rctx); err != nil {
			s.log.Warn("resign failed; the session's lease is revoked anyway", "error", err)
		}
	}
	return nil
}

// leadUntilLost schedules until the session ends (leadership lost) or ctx ends (shutdown): first
// it takes over what the previous leader owed, then it pre-reads and follows completions. On the
// way out it stops firing at once, lets dispatches in flight finish, and leaves what it still
// owes in armed_from_ms for the next leader (fenced, so a deposed leader writes nothing).
func (s *Service) leadUntilLost(ctx context.Context, sess *concurrency.Session, epoch int64) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := ring.New(s.clk, s.onFire)
	if lead := s.cfg.DispatchLead; lead > 0 {
		r.SetLead(lead, leadTick(lead))
	}
	if err := r.Start(lctx); err != nil {
		s.log.Error("time ring failed to start", "error", err)
		return
	}
	l := &leadership{epoch: epoch, ring: r, owed: newOwed(), lastScanMs: s.clk.Now().UnixMilli()}
	s.mu.Lock()
	s.lead, s.epoch, s.leader = l, epoch, s.cfg.ReplicaID
	s.mu.Unlock()

	deposed := make(chan struct{})
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		err := s.takeOver(lctx, l)
		if err == nil {
			err = s.preReadLoop(lctx, l)
		}
		if errors.Is(err, errDeposed) {
			close(deposed)
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		s.followCompletions(lctx, l)
	}()

	select {
	case <-sess.Done():
		s.log.Warn("leadership lost: etcd session ended; stopping the ring", "epoch", epoch)
	case <-deposed:
		s.log.Warn("leadership lost: a newer leader holds the fence; stopping the ring", "epoch", epoch)
	case <-ctx.Done():
		s.log.Info("shutting down: stopping the ring and resigning", "epoch", epoch)
	}
	r.Drain() // stops firing at once; what it held stays owed
	// Queued fires are skipped (still owed), in the pools, the lanes and the backlogs; calls in
	// flight finish.
	l.stop(s.waits.kickAll)
	cancel()
	<-done
	<-done
	r.Stop()
	s.mu.Lock()
	s.lead = nil
	s.mu.Unlock()
	s.flushOwed(l)
}

// flushOwed writes the owed fires' minimum per job to armed_from_ms, fenced, at the end of a
// leadership.
func (s *Service) flushOwed(l *leadership) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx, err := s.store.BeginTx(ctx, nil)
	if err != nil {
		s.log.Error("handing owed fires to the next leader failed", "error", err)
		return
	}
	defer tx.Rollback()
	if err := s.jobs.fence(ctx, tx, l.epoch, s.cfg.ReplicaID); err != nil {
		// A newer leader holds the fence: the armed_from_ms of the last pre-read covers them.
		s.log.Warn("owed fires not handed over: fenced off; the last pre-read's marks stand", "error", err)
		return
	}
	if err := s.jobs.indexPlans(ctx, tx); err != nil {
		s.log.Error("handing owed fires to the next leader failed", "error", err)
		return
	}
	dirty := l.owed.takeDirty()
	if err := s.jobs.markArmed(ctx, tx, dirty); err != nil {
		s.log.Error("handing owed fires to the next leader failed", "error", err)
		return
	}
	if err := tx.Commit(); err != nil {
		s.log.Error("handing owed fires to the next leader failed", "error", err)
		return
	}
	if len(dirty) > 0 {
		s.log.Info("handed owed fires to the next leader", "jobs", len(dirty))
	}
}

// takeoverLookback bounds how far back a new leader looks for owed fires; older ones count as
// misfires.
const takeoverLookback = 10 * time.Minute

// takeoverSettle gives executors' RUNNING reports for fires dispatched just before a handover
// time to reach logsvc before the new leader asks about them.
const takeoverSettle = 300 * time.Millisecond

// takeOver re-fires what the previous leader armed and did not dispatch: for every job with an
// armed_from_ms mark, the schedule's fires in [armed_from_ms, next_fire_ms) whose trigger ids
// neither logsvc knows nor an executor of the job's group has seen (seenOnExecutors). They keep
// their scheduled times and trigger ids, so an executor that got one anyway drops it as a
// duplicate. A fire that was dispatched but whose trigger record logsvc lacks (an executor has
// it, or logsvc knows it from the executor's reports alone) gets its record rebuilt
// (rebuildRecord). Until this succeeds the leader arms nothing new.
func (s *Service) takeOver(ctx context.Context, l *leadership) error {
	if err := s.wait(ctx, takeoverSettle); err != nil {
		return err
	}
	backoff := 100 * time.Millisecond
	for {
		err := s.takeOverOnce(ctx, l)
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

func (s *Service) takeOverOnce(ctx context.Context, l *leadership) error {
	// Fence first: the previous leader, if it is still running (paused, or cut off from etcd
	// but not from Postgres), may have a pre-read open; its marks must be committed before they
	// are read here, and its later transactions must fail.
	if err := s.jobs.raiseFence(ctx, l.epoch, s.cfg.ReplicaID); err != nil {
		return err
	}
	if err := s.takeOverPending(ctx, l); err != nil {
		return err
	}
	jobs, err := s.jobs.armed(ctx)
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return nil
	}
	now := s.clk.Now()
	oldest := now.Add(-takeoverLookback).UnixMilli()
	var cands []*fire
	for _, aj := range jobs {
		l.owed.touch(aj.ID) // the mark is cleared or replaced at the next pre-read
		if aj.Status != schedulerv1.JobStatus_JOB_STATUS_RUNNING {
			continue
		}
		sch, err := parseSchedule(aj.jobRow)
		if err != nil {
			continue
		}
		for t := aj.armedFrom; t != 0 && (aj.NextFireMs == 0 || t < aj.NextFireMs); t = nextAfter(sch, time.UnixMilli(t)) {
			if t >= oldest {
				cands = append(cands, &fire{job: aj.jobRow, fireMs: t, trigType: schedulerv1.TriggerType_TRIGGER_TYPE_CRON, lead: l})
			}
			if aj.NextFireMs == 0 {
				break // FIX_DELAY or ONCE: the armed fire was the only one
			}
		}
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
	refire, pinned, rebuilt := 0, 0, 0
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
	s.log.Info("took over from the previous leader", "epoch", l.epoch, "jobs_marked", len(jobs),
		"fires_checked", len(cands), "fires_on_executors", len(onExec), "executors_skipped", skipped,
		"fires_refired", refire, "fires_pinned", pinned, "fires_in_doubt", len(doubts), "records_rebuilt", rebuilt)
	s.resolveLater(ctx, l, doubts)
	return nil
}

// resolveLater resolves fires in doubt off the takeover (resolveDoubts), so that the leader
// schedules meanwhile; nothing when there are none or l is lost already.
func (s *Service) resolveLater(ctx context.Context, l *leadership, ds []*doubt) {
	if len(ds) == 0 || !l.begin() {
		return
	}
	go s.resolveDoubts(ctx, l, ds)
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
