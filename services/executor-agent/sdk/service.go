package sdk

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
)

// maxTriggers caps the fires of one Run call, as the contract says.
const maxTriggers = 10_000

// service is the thin gRPC face of the executor.
type service struct {
	executorv1.UnimplementedExecutorServiceServer
	e *Executor
}

func (s *service) Beat(context.Context, *executorv1.BeatRequest) (*executorv1.BeatResponse, error) {
	e := s.e
	e.mu.Lock()
	var running, queued int32
	for w := range e.allWorkers {
		if w.running != nil {
			running++
		}
		queued += int32(len(w.queue))
	}
	e.mu.Unlock()
	return &executorv1.BeatResponse{AppName: e.cfg.AppName, InstanceId: e.cfg.InstanceID, Version: e.cfg.Version, Running: running, Queued: queued}, nil
}

func (s *service) IdleBeat(_ context.Context, req *executorv1.IdleBeatRequest) (*executorv1.IdleBeatResponse, error) {
	e := s.e
	e.mu.Lock()
	busy := false
	for w := range e.allWorkers { // a replaced worker still ending its fire counts too
		if w.jobID == req.GetJobId() && w.busy() {
			busy = true
			break
		}
	}
	e.mu.Unlock()
	if busy {
		return &executorv1.IdleBeatResponse{Reason: fmt.Sprintf("job %d is running or has queued fires", req.GetJobId())}, nil
	}
	return &executorv1.IdleBeatResponse{Idle: true}, nil
}

// Run answers at once: it places the fires and returns without waiting for their RUNNING
// results to reach the spool (the writer takes them now, with what else is staged), so a slow
// disk or a busy agent does not turn into a scheduler's deadline. A fire still in the request
// when the call's context ends (the scheduler stopped waiting) is not taken: the scheduler,
// which has no answer, sends it again under the same trigger id.
func (s *service) Run(ctx context.Context, req *executorv1.RunRequest) (*executorv1.RunResponse, error) {
	if n := len(req.GetTriggers()); n > maxTriggers {
		return nil, status.Errorf(codes.InvalidArgument, "triggers: %d fires, at most %d per call", n, maxTriggers)
	}
	received := receivedAt(ctx) // a start delay counts from here
	acks := make([]*executorv1.RunAck, len(req.GetTriggers()))
	var held []*run
	for i, t := range req.GetTriggers() {
		if err := ctx.Err(); err != nil {
			acks[i] = &executorv1.RunAck{TriggerId: t.GetTriggerId(), Outcome: executorv1.RunOutcome_RUN_OUTCOME_REJECTED,
				Message: "not taken: the scheduler's call ended first (" + err.Error() + ")"}
			continue
		}
		var r *run
		if acks[i], r = s.e.accept(t); r != nil {
			held = append(held, r)
		}
	}
	if len(held) > 0 {
		s.e.hold(held, received)
	}
	s.e.out.spoolSoon()
	return &executorv1.RunResponse{Acks: acks, Load: s.e.load()}, nil
}

// receiptStamp is a gRPC stats handler that notes in each call's context when the call arrived:
// its headers read, before its request message is received and decoded. A Run call of thousands
// of fires takes a few milliseconds to arrive and decode on a busy agent; counting its start
// delays from the end of that made its fires that much late, and the calls of one burst apart.
type receiptStamp struct{}

// receivedKey is the context key of a call's arrival time.
type receivedKey struct{}

func (receiptStamp) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, receivedKey{}, time.Now())
}
func (receiptStamp) HandleRPC(context.Context, stats.RPCStats) {}
func (receiptStamp) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (receiptStamp) HandleConn(context.Context, stats.ConnStats) {}

// receivedAt is when the call of ctx arrived (receiptStamp), or now for a call made otherwise.
func receivedAt(ctx context.Context) time.Time {
	if t, ok := ctx.Value(receivedKey{}).(time.Time); ok {
		return t
	}
	return time.Now()
}

func (s *service) Kill(_ context.Context, req *executorv1.KillRequest) (*executorv1.KillResponse, error) {
	if req.GetTriggerId() == "" && req.GetJobId() <= 0 {
		return nil, status.Error(codes.InvalidArgument, "kill: name a trigger_id or a job_id")
	}
	killed, msg := s.e.kill(req.GetJobId(), req.GetTriggerId())
	return &executorv1.KillResponse{Killed: killed, Message: msg}, nil
}

func (s *service) Log(_ context.Context, req *executorv1.LogRequest) (*executorv1.LogResponse, error) {
	id := req.GetTriggerId()
	if !validTriggerID(id) {
		return nil, status.Errorf(codes.InvalidArgument, "trigger_id %q: want 1–128 of [A-Za-z0-9_.:-]", id)
	}
	from := max(req.GetFromLine(), 1)
	active, known := s.e.findLog(id)
	if !active && known {
		// The fire has ended: its result was queued; say so only once it is in the spool.
		s.e.out.waitSpooled()
	}
	lines, eof, found, err := s.e.readRunLog(id, from)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read log of fire %s: %v", id, err)
	}
	if !known && !found {
		return nil, status.Errorf(codes.NotFound, "no log of fire %s on this executor", id)
	}
	return &executorv1.LogResponse{
		FromLine: from, ToLine: from + int64(len(lines)) - 1, Lines: lines,
		IsEnd: eof && !active,
	}, nil
}

// Seen answers from the fires this executor accepted: queued, running, or among the recent ids
// it keeps for duplicate detection (recentCap, since it started).
func (s *service) Seen(_ context.Context, req *executorv1.SeenRequest) (*executorv1.SeenResponse, error) {
	ids := req.GetTriggerIds()
	if len(ids) > maxTriggers {
		return nil, status.Errorf(codes.InvalidArgument, "trigger_ids: %d ids, at most %d per call", len(ids), maxTriggers)
	}
	for i, id := range ids {
		if !validTriggerID(id) {
			return nil, status.Errorf(codes.InvalidArgument, "trigger_ids[%d] %q: want 1–128 of [A-Za-z0-9_.:-], not starting with a dot", i, id)
		}
	}
	return &executorv1.SeenResponse{SeenTriggerIds: s.e.seen(ids)}, nil
}

// authUnary requires "authorization: Bearer <token>" on every call when token is set.
func authUnary(token string) grpc.UnaryServerInterceptor {
	want := []byte("Bearer " + token)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if token == "" {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		for _, v := range md.Get("authorization") {
			if subtle.ConstantTimeCompare([]byte(v), want) == 1 {
				return handler(ctx, req)
			}
		}
		return nil, status.Error(codes.Unauthenticated, "executor: missing or wrong access token (authorization: Bearer <token>)")
	}
}

// recoverUnary turns a panic in a call into Internal, logged with its stack.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic in executor call", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				err = status.Errorf(codes.Internal, "executor: internal error in %s", info.FullMethod)
			}
		}()
		return handler(ctx, req)
	}
}
