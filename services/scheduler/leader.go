package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/ring"
)

// electionPrefix is the etcd election every replica campaigns in.
const electionPrefix = "/jobmesh/v1/scheduler/leader"

// leadership is the state a replica holds only while it leads.
type leadership struct {
	epoch int64
	ring  *ring.Ring[*fire]
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

// leadUntilLost schedules until the session ends (leadership lost) or ctx ends (shutdown).
func (s *Service) leadUntilLost(ctx context.Context, sess *concurrency.Session, epoch int64) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := ring.New(s.clk, s.onFire)
	if err := r.Start(lctx); err != nil {
		s.log.Error("time ring failed to start", "error", err)
		return
	}
	l := &leadership{epoch: epoch, ring: r}
	s.mu.Lock()
	s.lead, s.epoch, s.leader = l, epoch, s.cfg.ReplicaID
	s.mu.Unlock()

	deposed := make(chan struct{})
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		if err := s.preReadLoop(lctx, l); errors.Is(err, errDeposed) {
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
	rest := r.Drain() // stops firing at once
	cancel()
	<-done
	<-done
	r.Stop()
	s.mu.Lock()
	s.lead = nil
	s.mu.Unlock()
	if len(rest) > 0 {
		s.rewind(epoch, rest)
	}
}

// rewind hands armed-but-unfired entries back to the store, so the next leader fires them: each
// job's next fire moves back to its earliest unfired entry. It is fenced: once a newer leader
// holds the epoch it fails, and that leader's takeover must cover them.
func (s *Service) rewind(epoch int64, rest []ringEntry) {
	earliest := map[int64]int64{}
	for _, e := range rest {
		if e.Value.trigType == schedulerv1.TriggerType_TRIGGER_TYPE_RETRY {
			continue // retries are not schedule state; see followCompletions
		}
		if t, ok := earliest[e.JobID]; !ok || e.FireAt < t {
			earliest[e.JobID] = e.FireAt
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx, err := s.store.BeginTx(ctx, nil)
	if err != nil {
		s.log.Error("rewind failed", "error", err, "fires", len(rest))
		return
	}
	defer tx.Rollback()
	if err := s.jobs.fence(ctx, tx, epoch, s.cfg.ReplicaID); err != nil {
		s.log.Warn("rewind fenced off", "error", err, "fires", len(rest))
		return
	}
	ids := make([]int64, 0, len(earliest))
	for id := range earliest {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, s.store.Q(`UPDATE jobs SET next_fire_ms = $2
			WHERE id = $1 AND status = 2 AND (next_fire_ms IS NULL OR next_fire_ms > $2)`), id, earliest[id]); err != nil {
			s.log.Error("rewind failed", "error", err, "job_id", id)
			return
		}
	}
	if err := tx.Commit(); err != nil {
		s.log.Error("rewind failed", "error", err)
		return
	}
	s.log.Info("rewound armed fires for the next leader", "fires", len(rest), "jobs", len(ids))
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
