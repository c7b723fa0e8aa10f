package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
// that receives a trigger of a partition another replica leads reserves the fire's time and a
// claim on it (reserveForwardedFire) and forwards the call to the leader, once, with that time in
// forwardedKey:
//
//   - the replica that receives a forwarded call dispatches it whatever its view of the partition
//     says, so views that disagree during a hand-over do not bounce a call between replicas;
//   - it dispatches only the fire it claims (claimManualFire), and so does the forwarder when the
//     call failed without an answer (Unavailable, DeadlineExceeded): the leader may never have
//     had it (unreachable, or gone), or may have taken it and had its answer lost with a
//     connection cut. One claim per fire, so at most one of them dispatches it (none when the
//     one that claimed it dies first, as a replica that dies before a fire it took leaves it);
//   - only a call from another replica (Config.FromReplica) may carry forwardedKey.
const forwardedKey = "x-jobmesh-forwarded-fire-ms"

// claimTimeout bounds a claim of a forwarded trigger, which runs on after its caller has gone:
// a claim that the store took is acted on.
const claimTimeout = 10 * time.Second

// peers keeps one connection per peer replica address, for forwarded calls.
type peers struct {
	opts   []grpc.DialOption
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	unused map[string]bool // addresses no live replica advertised at the last prune
	closed bool
}

// prune closes the connections to addresses that no live replica (live) has advertised at two
// prunes in a row (a call forwarded just before a replica left may still be on its way), and
// returns how many it closed: replicas that come and go at new addresses leave none behind.
func (p *peers) prune(live map[string]string) int {
	advertised := make(map[string]bool, len(live))
	for _, addr := range live {
		advertised[addr] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	closed := 0
	for addr, cc := range p.conns {
		switch {
		case advertised[addr]:
			delete(p.unused, addr)
		case p.unused[addr]:
			cc.Close()
			delete(p.conns, addr)
			delete(p.unused, addr)
			closed++
		default:
			if p.unused == nil {
				p.unused = map[string]bool{}
			}
			p.unused[addr] = true
		}
	}
	return closed
}

// newPeers returns the peer connections, dialed with opts; a connection attempt is given up after
// connectTimeout, so a trigger forwarded to a leader that cannot be reached (its address
// black-holed) is dispatched here after that long rather than gRPC's default 20 s.
func newPeers(opts []grpc.DialOption, connectTimeout time.Duration) *peers {
	// The forwarded call carries the trigger's trace context, as the executors' Run calls do.
	// The connections stay up while idle: their drop is how a peer's death is noticed
	// (peerstop.go).
	opts = append(opts[:len(opts):len(opts)], grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: connectTimeout}),
		grpc.WithIdleTimeout(0))
	return &peers{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// jobs returns a JobService client of the replica at addr, over its kept-open connection.
func (p *peers) jobs(addr string) (schedulerv1.JobServiceClient, error) {
	cc, err := p.conn(addr)
	if err != nil {
		return nil, err
	}
	return schedulerv1.NewJobServiceClient(cc), nil
}

// conn returns the kept-open connection to the replica at addr.
func (p *peers) conn(addr string) (*grpc.ClientConn, error) {
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
	return cc, nil
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

// forwardedFire returns the reserved time of a trigger another replica forwarded; ok is false
// when the call was not forwarded.
func (s *Service) forwardedFire(ctx context.Context) (fireMs int64, ok bool, err error) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(forwardedKey)
	if len(v) == 0 {
		return 0, false, nil
	}
	if s.cfg.FromReplica == nil || !s.cfg.FromReplica(ctx) {
		return 0, false, status.Errorf(codes.PermissionDenied, "metadata %s: only another scheduler replica forwards triggers", forwardedKey)
	}
	if fireMs, err = strconv.ParseInt(v[0], 10, 64); err != nil || len(v) != 1 || fireMs <= 0 {
		return 0, false, status.Errorf(codes.InvalidArgument, "metadata %s: want one reserved fire time in Unix ms, got %q", forwardedKey, v)
	}
	return fireMs, true, nil
}

// claim claims the forwarded trigger of job jobID at fireMs for this replica
// (claimManualFire), whether or not the caller of ctx is still there.
func (s *Service) claim(ctx context.Context, jobID, fireMs int64) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	return s.jobs.claimManualFire(ctx, jobID, fireMs, s.cfg.ReplicaID)
}

// claimForwarded claims, as the leader a trigger of job jobID was forwarded to, the fire
// reserved at fireMs. A claim that failed (a store timeout, a connection lost with the commit)
// is settled by reading who holds the fire: this replica (claimed), none (Unavailable, so that
// the forwarder claims it), or another (FailedPrecondition). A failure to tell is Internal, never
// an answer the forwarder takes for no answer: the fire may be this replica's.
func (s *Service) claimForwarded(ctx context.Context, jobID, fireMs int64) error {
	claimed, err := s.claim(ctx, jobID, fireMs)
	if err != nil && !errors.Is(err, errNotForwarded) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
		by, rerr := s.jobs.claimHolder(rctx, jobID, fireMs)
		cancel()
		switch {
		case rerr != nil:
			return status.Errorf(codes.Internal, "manual trigger %d of job %d: claim failed (%v), and who holds it is unknown: %v", fireMs, jobID, err, rerr)
		case by == "":
			return status.Errorf(codes.Unavailable, "manual trigger %d of job %d: claim failed: %v", fireMs, jobID, err)
		}
		claimed, err = by == s.cfg.ReplicaID, nil
	}
	switch {
	case errors.Is(err, errNotForwarded):
		return status.Errorf(codes.FailedPrecondition, "metadata %s: %v", forwardedKey, err)
	case !claimed:
		return status.Errorf(codes.FailedPrecondition, "manual trigger %d of job %d: claimed by another replica", fireMs, jobID)
	}
	return nil
}

// forwardTrigger forwards a manual trigger of job j to the replica that leads the job's
// partition, its time reserved here. handled is false when the trigger is to be dispatched here:
// this replica leads the partition, none does (a failover is in progress), the leader's address
// is not known, forwarding is off (no Config.PeerDialOptions), or the call failed without an
// answer and this replica claimed the fire before the leader did; fireMs is then the claimed
// fire's time, or 0 when none was reserved. Otherwise resp and err are the leader's answer, or,
// when the leader claimed the fire but its answer was lost, the fire's trigger id.
func (s *Service) forwardTrigger(ctx context.Context, req *schedulerv1.TriggerJobRequest, j *jobRow) (resp *schedulerv1.TriggerJobResponse, fireMs int64, handled bool, err error) {
	if s.peers == nil {
		return nil, 0, false, nil
	}
	p := s.parts.Of(j.ID)
	if p < 0 {
		return nil, 0, false, nil
	}
	o := s.parts.Owner(p)
	if o.Leader == "" || o.Leader == s.cfg.ReplicaID || o.Addr == "" {
		return nil, 0, false, nil
	}
	cli, err := s.peers.jobs(o.Addr)
	if err != nil {
		s.log.WarnContext(ctx, "manual trigger not forwarded to its partition's leader; dispatching it here",
			"job_id", j.ID, "partition", p, "leader", o.Leader, "error", err)
		return nil, 0, false, nil
	}
	if fireMs, err = s.jobs.reserveForwardedFire(ctx, j.ID, s.clk.Now().UnixMilli()); err != nil {
		return nil, 0, true, err
	}
	resp, err = cli.TriggerJob(metadata.AppendToOutgoingContext(ctx, forwardedKey, strconv.FormatInt(fireMs, 10)), req)
	if err == nil {
		return resp, 0, true, nil
	}
	if !unanswered(err, ctx.Err()) {
		return nil, 0, true, err
	}
	// The leader may have the call or not: whoever claims the fire dispatches it.
	claimed, cerr := s.claim(ctx, j.ID, fireMs)
	switch {
	case cerr != nil:
		return nil, 0, true, fmt.Errorf("forwarded manual trigger failed (%w) and could not be claimed here: %w", err, cerr)
	case claimed:
		s.log.WarnContext(ctx, "partition leader not reached with a manual trigger; dispatching it here",
			"job_id", j.ID, "partition", p, "leader", o.Leader, "leader_addr", o.Addr, "error", err)
		return nil, fireMs, false, nil
	}
	// The leader claimed it: it dispatches the fire. Its answer, with the ids of every shard,
	// is lost; the first shard's id is known here.
	s.log.InfoContext(ctx, "partition leader took a manual trigger but its answer was lost", "job_id", j.ID, "leader", o.Leader, "error", err)
	f := &fire{job: j, fireMs: fireMs, kind: kindManual}
	return &schedulerv1.TriggerJobResponse{TriggerIds: []string{f.triggerID(0)}}, 0, true, nil
}

// unanswered reports whether a forwarded trigger that failed with err (the caller's ctx error
// with it) may have failed without the leader's answer: the call could not be delivered or its
// answer did not come back (Unavailable, DeadlineExceeded), and the caller is still there. Any
// other failure is the leader's answer; so is any failure once the caller has gone (its deadline
// or cancel).
func unanswered(err, callerErr error) bool {
	code := status.Code(err)
	return callerErr == nil && (code == codes.Unavailable || code == codes.DeadlineExceeded)
}
