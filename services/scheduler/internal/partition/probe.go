package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A replica that is killed keeps its partitions until its etcd lease expires: SessionTTL after
// its last keep-alive, and up to 500 ms more (etcd expires leases on a tick). The other replicas
// can often tell sooner: when a process ends, its host closes its connections and refuses new
// ones at its address at once. So, given Config.PeerStopped, each replica watches every other
// replica that advertises an address, and when one is seen to have stopped it revokes that
// replica's session (the lease of its member key): its member and partition keys vanish, and the
// replicas plan and take its partitions over as they do when a lease expires, under new epochs.
//
// A wrong revocation costs the replica its session: its leads end and its writes under the old
// epochs fail (fencing), and its partitions go through a takeover. So the watch is kept from
// mistakes: a replica stopping on purpose withdraws its address (StopAdvertising) before its
// server stops listening, and stops its own watches; the revocation happens only while the
// member key still advertises the address that refused and is under the lease that was
// watched; a peer that advertises this replica's own address is not watched, and PeerStopped
// checks who serves at an address. A host that vanishes refuses nothing; its replicas are left
// to their leases' expiry.

// probe is one peer replica watched with Config.PeerStopped.
type probe struct {
	addr   string
	lease  int64
	cancel context.CancelFunc
}

// probes are the peer replicas one session watches, by replica id. Only the session's loop
// calls its methods.
type probes struct {
	byID map[string]*probe
	wg   sync.WaitGroup
}

// probePeers starts watching every other live replica that advertises an address (not this
// replica's own), and stops watching those that left or whose address or lease changed, and
// every one once this replica is stopping.
func (s *membership) probePeers() {
	m := s.m
	if m.cfg.PeerStopped == nil {
		return
	}
	want := map[string]probe{}
	if !m.stopping.Load() {
		m.mu.Lock()
		for id, addr := range m.live {
			if lease := m.leases[id]; id != m.cfg.ReplicaID && addr != "" && addr != m.cfg.Address && lease != 0 {
				want[id] = probe{addr: addr, lease: lease}
			}
		}
		m.mu.Unlock()
	}
	if s.probes.byID == nil {
		s.probes.byID = map[string]*probe{}
	}
	for id, p := range s.probes.byID {
		if w, ok := want[id]; !ok || w.addr != p.addr || w.lease != p.lease {
			p.cancel()
			delete(s.probes.byID, id)
		}
	}
	for id, w := range want {
		if s.probes.byID[id] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(s.lctx)
		p := &probe{addr: w.addr, lease: w.lease, cancel: cancel}
		s.probes.byID[id] = p
		s.probes.wg.Go(func() { s.watchPeer(ctx, id, p) })
	}
}

// stopProbes stops every probe and waits for them.
func (s *membership) stopProbes() {
	for id, p := range s.probes.byID {
		p.cancel()
		delete(s.probes.byID, id)
	}
	s.probes.wg.Wait()
}

// probeRetry paces the watches of a peer after one failed (probeRetryMax at most).
const (
	probeRetry    = time.Second
	probeRetryMax = 30 * time.Second
)

// watchPeer waits for replica id, watched as p, to stop, and then revokes its session unless
// its member key has changed (revokeStopped). A watch that fails is tried again after a pause,
// and so is a revocation (not the watch: a dead peer is never up again), until ctx ends.
func (s *membership) watchPeer(ctx context.Context, id string, p *probe) {
	m := s.m
	pause := probeRetry
	stopped := false
	for failures := 0; ; failures++ {
		var err error
		if !stopped {
			err = m.cfg.PeerStopped(ctx, id, p.addr)
			stopped = err == nil
		}
		if stopped {
			if err = m.revokeStopped(ctx, id, p); err == nil {
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		lvl := slog.LevelDebug
		if failures == 0 {
			lvl = slog.LevelWarn
		}
		m.log.Log(ctx, lvl, "watching a peer replica failed; trying again (until then a crash of it is noticed when its session expires)",
			"peer", id, "addr", p.addr, "error", err, "retry_in", pause)
		t := m.cfg.Clock.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		pause = min(2*pause, probeRetryMax)
	}
}

// revokeStopped revokes the session of replica id, seen stopped while watched as p, unless this
// replica is stopping or id's member key has changed since: it is gone (id left), no longer
// advertises p's address (a graceful stop), or is under another lease (id joined again).
func (m *Manager) revokeStopped(ctx context.Context, id string, p *probe) error {
	if m.stopping.Load() {
		return nil
	}
	resp, err := m.cfg.Etcd.Get(ctx, m.members+id)
	if err != nil {
		return fmt.Errorf("read the stopped peer's member key: %w", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease != p.lease || addrOf(id, resp.Kvs[0].Value) != p.addr {
		return nil
	}
	// The revocation's own watch events may end ctx before its answer comes: it has its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if _, err := m.cfg.Etcd.Revoke(rctx, clientv3.LeaseID(p.lease)); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			m.log.Debug("a stopped peer's session is gone already (another replica revoked it)", "peer", id)
			return nil
		}
		return fmt.Errorf("revoke the stopped peer's session: %w", err)
	}
	m.log.Warn("a peer replica stopped (its address refuses connections): revoked its session, its partitions are taken over now",
		"peer", id, "addr", p.addr, "lease", p.lease)
	m.mu.Lock()
	m.revoked++
	m.mu.Unlock()
	return nil
}

// StopAdvertising withdraws this replica's address from its member key, for the rest of its
// life, and stops its watches of the others: they stop forwarding calls to it and stop watching
// it (Config.PeerStopped). A replica calls it before its server stops listening at shutdown, so
// that its stop is not taken for a crash (nor the others' for one, through its own server's
// stop). Between sessions it only keeps the next session from advertising.
func (m *Manager) StopAdvertising(ctx context.Context) error {
	m.stopping.Store(true)
	m.advMu.Lock()
	defer m.advMu.Unlock()
	m.advertise = ""
	if m.lease == 0 {
		return nil
	}
	key := m.members + m.cfg.ReplicaID
	// Written only while the key is under this session's lease: a key deleted at leave stays
	// deleted.
	_, err := m.cfg.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", m.lease)).
		Then(clientv3.OpPut(key, memberValue(m.cfg.ReplicaID, ""), clientv3.WithLease(m.lease))).
		Commit()
	return err
}
