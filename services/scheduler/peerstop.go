package scheduler

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"google.golang.org/grpc/connectivity"
)

// Telling a killed replica from a slow one (partition.Config.PeerStopped): a replica keeps its
// connection to each peer open (the one manual triggers are forwarded over). When a peer's
// process ends, its host closes that connection and refuses connections at its address from
// then on; a peer that is slow, overloaded or cut off by the network refuses nothing, its
// connection attempts time out. So once the connection, having been up, is not, the address is
// tried with a plain TCP dial: refused means stopped. The dial is repeated while the connection
// stays down (a process's sockets close one by one as it exits; the listener may still accept
// for a moment), more rarely the longer it stays down.
const (
	// stopDialTimeout bounds one TCP dial of a peer whose connection dropped.
	stopDialTimeout = 500 * time.Millisecond
	// stopProbeFirst and stopProbeMax pace the dials while the connection stays down.
	stopProbeFirst = 50 * time.Millisecond
	stopProbeMax   = 5 * time.Second
)

// peerStopped is partition.Config.PeerStopped over the peer connections.
func (s *Service) peerStopped(ctx context.Context, addr string) error {
	return s.peers.stopped(ctx, addr, nil)
}

// stopped returns nil once the replica at addr is seen to have stopped: its connection was up,
// dropped, and addr refuses connections. It returns ctx's error when ctx ends first. up, when
// not nil, is called when the connection is first seen up.
func (p *peers) stopped(ctx context.Context, addr string, up func()) error {
	cc, err := p.conn(addr)
	if err != nil {
		return err
	}
	// A watch starts when the peer joins (again): a connection kept from an earlier process at
	// the same address may be waiting out a long reconnect backoff, and would not be up before
	// the new process could die in turn.
	cc.ResetConnectBackoff()
	wasUp := false
	pause := stopProbeFirst
	for {
		st := cc.GetState()
		switch st {
		case connectivity.Shutdown:
			return errors.New("the connection to the peer was closed")
		case connectivity.Ready:
			if !wasUp && up != nil {
				up()
			}
			wasUp, pause = true, stopProbeFirst
		case connectivity.Idle:
			cc.Connect()
		}
		down := wasUp && st != connectivity.Ready
		if down && refuses(ctx, addr) {
			return nil
		}
		wait, cancel := ctx, context.CancelFunc(func() {})
		if down {
			wait, cancel = context.WithTimeout(ctx, pause)
			pause = min(2*pause, stopProbeMax)
		}
		cc.WaitForStateChange(wait, st)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// refuses reports whether a TCP connection to addr is refused.
func refuses(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: stopDialTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
