package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// A manual trigger is dispatched by the replica that leads its job's partition: the routing state
// (round-robin positions, LRU/LFU, BUSYOVER probes) and the executor lanes live there. A replica
// that receives a trigger of a partition another replica leads forwards the call to it, once:
//
//   - forwardedKey marks the forwarded call, and the replica that receives it dispatches it
//     whatever its view of the partition says, so views that disagree during a hand-over do not
//     bounce a call between replicas;
//   - the receiver answers forwardAckKey in its response header before it reserves the fire's
//     time (reserveManualFire), so the forwarder knows whether the leader took the call: when the
//     call fails Unavailable or DeadlineExceeded without it, the leader never reserved, and the
//     forwarder dispatches the fire itself (reserving it then) rather than fail the trigger.
const (
	forwardedKey  = "x-jobmesh-forwarded"
	forwardAckKey = "x-jobmesh-forward-taken"
)

// peers keeps one connection per peer replica address, for forwarded calls.
type peers struct {
	opts   []grpc.DialOption
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

// newPeers returns the peer connections, dialed with opts; a connection attempt is given up after
// connectTimeout, so a trigger forwarded to a leader that cannot be reached (its address
// black-holed) is dispatched here after that long rather than gRPC's default 20 s.
func newPeers(opts []grpc.DialOption, connectTimeout time.Duration) *peers {
	// The forwarded call carries the trigger's trace context, as the executors' Run calls do.
	opts = append(opts[:len(opts):len(opts)], grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: connectTimeout}))
	return &peers{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// jobs returns a JobService client of the replica at addr, over its kept-open connection.
func (p *peers) jobs(addr string) (schedulerv1.JobServiceClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("scheduler stopped")
	}
	cc, ok := p.conns[addr]
	if !ok {
		var err error
		if cc, err = grpc.NewClient(addr, p.opts...); err != nil {
			return nil, fmt.Errorf("dial scheduler replica %s: %w", addr, err)
		}
		p.conns[addr] = cc
	}
	return schedulerv1.NewJobServiceClient(cc), nil
}

// close closes every connection; jobs fails from then on.
func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for addr, cc := range p.conns {
		cc.Close()
		delete(p.conns, addr)
	}
}

// isForwarded reports whether the call was forwarded by another replica.
func isForwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

// forwardTrigger forwards a manual trigger to the replica that leads its job's partition.
// handled is false when the trigger is to be dispatched here: this replica leads the partition,
// none does (a failover is in progress), the leader's address is not known, forwarding is off
// (no Config.PeerDialOptions), the call was forwarded already, or the leader could not be reached
// before it took the call. Otherwise resp and err are the leader's answer.
func (s *Service) forwardTrigger(ctx context.Context, req *schedulerv1.TriggerJobRequest) (resp *schedulerv1.TriggerJobResponse, handled bool, err error) {
	if isForwarded(ctx) {
		// Tell the forwarder this replica took the call, before the fire's time is reserved.
		// (No header to send when the call does not come over gRPC.)
		_ = grpc.SendHeader(ctx, metadata.Pairs(forwardAckKey, "1"))
		return nil, false, nil
	}
	if s.peers == nil {
		return nil, false, nil
	}
	p := s.parts.Of(req.GetId())
	if p < 0 {
		return nil, false, nil
	}
	o := s.parts.Owner(p)
	if o.Leader == "" || o.Leader == s.cfg.ReplicaID || o.Addr == "" {
		return nil, false, nil
	}
	cli, err := s.peers.jobs(o.Addr)
	if err != nil {
		s.log.WarnContext(ctx, "manual trigger not forwarded to its partition's leader; dispatching it here",
			"job_id", req.GetId(), "partition", p, "leader", o.Leader, "error", err)
		return nil, false, nil
	}
	var header metadata.MD
	resp, err = cli.TriggerJob(metadata.AppendToOutgoingContext(ctx, forwardedKey, "1"), req, grpc.Header(&header))
	if err == nil {
		return resp, true, nil
	}
	if leaderNeverTook(err, header, ctx.Err()) {
		s.log.WarnContext(ctx, "partition leader not reached with a manual trigger; dispatching it here",
			"job_id", req.GetId(), "partition", p, "leader", o.Leader, "leader_addr", o.Addr, "error", err)
		return nil, false, nil
	}
	return nil, true, err
}

// leaderNeverTook reports whether a forwarded trigger that failed with err (the leader's response
// header, and the caller's ctx error, with it) did not reach the leader's TriggerJob as far as
// the forwarder can tell, so that it may dispatch the fire itself: the call could not be
// delivered (Unavailable, DeadlineExceeded) and the leader did not say it took it (a header lost
// with a connection cut silently after the leader sent it is the one case it misjudges). A failure after the
// leader took the call is the leader's answer (it may have dispatched the fire); so is any
// failure once the caller has gone (its deadline or cancel).
func leaderNeverTook(err error, header metadata.MD, callerErr error) bool {
	code := status.Code(err)
	return len(header.Get(forwardAckKey)) == 0 && callerErr == nil && (code == codes.Unavailable || code == codes.DeadlineExceeded)
}
