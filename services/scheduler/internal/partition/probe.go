package partition

import (
	"context"
	"errors"
	"sync"

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
// A revocation is safe when it is wrong: the replica's leads end on the lost session, and its
// writes under the old epochs fail (fencing). It is not wrong for a graceful stop: a replica
// stopping on purpose withdraws its address (StopAdvertising) before its server stops
// listening, and the revocation happens only while the member key still advertises the address
// that refused and is under the lease that was watched. A host that vanishes refuses nothing;
// its replicas are left to their leases' expiry.

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

// probePeers starts watching every other live replica that advertises an address, and stops
// watching those that left or whose address or lease changed.
func (s *membership) probePeers() {
	m := s.m
	if m.cfg.PeerStopped == nil {
		return
	}
	want := map[string]probe{}
	m.mu.Lock()
	for id, addr := range m.live {
		if lease := m.leases[id]; id != m.cfg.ReplicaID && addr != "" && lease != 0 {
			want[id] = probe{addr: addr, lease: lease}
		}
	}
	m.mu.Unlock()
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

// watchPeer waits for replica id, watched as p, to stop, and then revokes its session unless
// its member key has changed: it withdrew its address (a graceful stop), left, or joined again.
func (s *membership) watchPeer(ctx context.Context, id string, p *probe) {
	m := s.m
	if err := m.cfg.PeerStopped(ctx, p.addr); err != nil {
		if ctx.Err() == nil {
			m.log.Warn("watching a peer replica failed; a crash of it is noticed when its session expires",
				"peer", id, "addr", p.addr, "error", err)
		}
		return
	}
	key := m.members + id
	resp, err := m.cfg.Etcd.Get(ctx, key)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("reading a stopped peer's member key failed; its session expires on its own", "peer", id, "error", err)
		}
		return
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease != p.lease || addrOf(id, resp.Kvs[0].Value) != p.addr {
		return // it left, withdrew its address to stop, or joined again: nothing to do
	}
	if _, err := m.cfg.Etcd.Revoke(ctx, clientv3.LeaseID(p.lease)); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			m.log.Debug("a stopped peer's session is gone already (another replica revoked it)", "peer", id)
			return
		}
		if ctx.Err() == nil {
			m.log.Warn("revoking a stopped peer's session failed; it expires on its own", "peer", id, "error", err)
		}
		return
	}
	m.log.Warn("a peer replica stopped (its address refuses connections): revoked its session, its partitions are taken over now",
		"peer", id, "addr", p.addr, "lease", p.lease)
	m.mu.Lock()
	m.revoked++
	m.mu.Unlock()
}

// StopAdvertising withdraws this replica's address from its member key, for the rest of its
// life: the other replicas stop forwarding calls to it and stop watching it (Config.PeerStopped).
// A replica calls it before its server stops listening at shutdown, so that its stop is not
// taken for a crash. Between sessions it only keeps the next session from advertising.
func (m *Manager) StopAdvertising(ctx context.Context) error {
	m.advMu.Lock()
	defer m.advMu.Unlock()
	m.advertise = ""
	if m.lease == 0 {
		return nil
	}
	key := m.members + m.cfg.ReplicaID
	// Only while the key is this session's: after a leave it is gone and stays so.
	_, err := m.cfg.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", m.lease)).
		Then(clientv3.OpPut(key, memberValue(m.cfg.ReplicaID, ""), clientv3.WithLease(m.lease))).
		Commit()
	return err
}
