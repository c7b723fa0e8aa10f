package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"google.golang.org/grpc/connectivity"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// Telling a killed replica from a slow one (partition.Config.PeerStopped): a replica keeps its
// connection to each peer open (the one manual triggers are forwarded over). When a peer's
// process ends, its host closes that connection and refuses connections at its address from
// then on; a peer that is slow, overloaded or cut off by the network refuses nothing, its
// connection attempts time out. So once the connection, having been up and serving the peer
// (GetStatus names it), is not, the address is tried with a plain TCP dial: refused, at every
// address its name resolves to, means stopped. The dial is repeated while the connection stays
// down (a process's sockets close one by one as it exits; the listener may still accept for a
// moment), more rarely the longer it stays down.
const (
	// stopDialTimeout bounds one TCP dial of a peer whose connection dropped, and the GetStatus
	// call that checks who serves at an address.
	stopDialTimeout = 500 * time.Millisecond
	// stopProbeFirst and stopProbeMax pace the dials while the connection stays down.
	stopProbeFirst = 50 * time.Millisecond
	stopProbeMax   = 5 * time.Second
)

// prunePeersEvery is how often the connections to addresses no replica advertises are closed.
const prunePeersEvery = time.Minute

// prunePeersLoop closes the connections to replicas that are gone (peers.prune) until ctx ends.
func (s *Service) prunePeersLoop(ctx context.Context) {
	t := time.NewTicker(prunePeersEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := s.peers.prune(s.parts.Status().Addresses); n > 0 {
				s.log.Info("closed the connections to replicas that are gone", "closed", n)
			}
		}
	}
}

// peerStopped is partition.Config.PeerStopped over the peer connections.
func (s *Service) peerStopped(ctx context.Context, id, addr string) error {
	return s.peers.stopped(ctx, id, addr, nil)
}

// stopped returns nil once replica id at addr is seen to have stopped: its connection was up
// and served id, dropped, and addr refuses connections. It returns ctx's error when ctx ends
// first, and an error when addr serves another replica. up, when not nil, is called when the
// connection is first seen up and serving id.
func (p *peers) stopped(ctx context.Context, id, addr string, up func()) error {
	cc, err := p.conn(addr)
	if err != nil {
		return err
	}
	// A watch starts when the peer joins (again): a connection kept from an earlier process at
	// the same address may be waiting out a long reconnect backoff, and would not be up before
	// the new process could die in turn.
	cc.ResetConnectBackoff()
	status := schedulerv1.NewSchedulerServiceClient(cc)
	wasUp, checked := false, false
	pause := stopProbeFirst
	for {
		st := cc.GetState()
		switch st {
		case connectivity.Shutdown:
			return errors.New("the connection to the peer was closed")
		case connectivity.Ready:
			if !checked {
				// Who serves here: an address this replica reaches as another's (two replicas
				// advertising one loopback address) must not be taken for it.
				sctx, cancel := context.WithTimeout(ctx, stopDialTimeout)
				resp, err := status.GetStatus(sctx, &schedulerv1.GetStatusRequest{})
				cancel()
				switch {
				case ctx.Err() != nil:
					return ctx.Err()
				case err == nil && resp.GetReplicaId() != id:
					return fmt.Errorf("%s serves replica %q, not %q: not watched (do two replicas advertise one address?)", addr, resp.GetReplicaId(), id)
				case err == nil:
					checked = true
				}
			}
			if checked {
				if !wasUp && up != nil {
					up()
				}
				wasUp, pause = true, stopProbeFirst
			}
		case connectivity.Idle:
			cc.Connect()
		}
		down := wasUp && st != connectivity.Ready
		if down && refuses(ctx, addr) {
			return nil
		}
		wait, cancel := ctx, context.CancelFunc(func() {})
		if down || (st == connectivity.Ready && !checked) {
			wait, cancel = context.WithTimeout(ctx, pause)
			pause = min(2*pause, stopProbeMax)
		}
		changed := cc.WaitForStateChange(wait, st)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if st == connectivity.Ready && changed {
			checked = false // it left Ready: whoever serves there after the drop is asked again
		}
	}
}

// refuses reports whether TCP connections to addr are refused, at every address its host
// resolves to (one that refuses among others that answer slowly is not a stopped replica).
func refuses(ctx context.Context, addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return false
	}
	d := net.Dialer{Timeout: stopDialTimeout}
	for _, ip := range ips {
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), port))
		if err == nil {
			c.Close()
			return false
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return false
		}
	}
	return true
}
