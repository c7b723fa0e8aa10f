package scheduler_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/scheduler"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/partition"
)

// runCalls counts the Run calls a replica's executor connections make.
type runCalls struct{ n atomic.Int64 }

// dialOptions are a replica's ExecutorDialOptions that count its Run calls.
func (r *runCalls) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == executorv1.ExecutorService_Run_FullMethodName {
				r.n.Add(1)
			}
			return invoke(ctx, method, req, reply, cc, opts...)
		}),
	}
}

// servedReplica is a scheduler replica whose gRPC server the others reach at addr.
type servedReplica struct {
	*scheduler.Service
	addr string
	g    *grpc.Server
	runs *runCalls
	// loseAnswers makes its server handle each call and answer Unavailable instead: a connection
	// cut after the call was taken.
	loseAnswers atomic.Bool
	// unreachable makes its server answer every call but GetStatus Unavailable without handling
	// it: a replica that cannot be reached while it is alive (a stopped server would be taken
	// for a dead replica by the others, which would revoke its session).
	unreachable atomic.Bool
}

// servedReplica starts a replica of a 2-partition cluster that advertises its gRPC server and
// forwards manual triggers over plaintext.
func (c *cluster) servedReplica(t *testing.T, id string) *servedReplica {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &servedReplica{addr: ln.Addr().String(), runs: &runCalls{}}
	r.Service = c.replicaWith(t, scheduler.Config{ReplicaID: id, Partitions: 2, AdvertiseAddr: r.addr,
		PeerDialOptions:     []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(asReplica)},
		FromReplica:         fromReplica,
		ExecutorDialOptions: r.runs.dialOptions()})
	r.g = grpcserver.New(nil, grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if r.unreachable.Load() && info.FullMethod != schedulerv1.SchedulerService_GetStatus_FullMethodName {
			return nil, status.Error(codes.Unavailable, "connection refused")
		}
		resp, err := handler(ctx, req)
		if r.loseAnswers.Load() {
			return nil, status.Error(codes.Unavailable, "the connection was cut before the answer went out")
		}
		return resp, err
	}))
	r.Register(r.g)
	go r.g.Serve(ln)
	t.Cleanup(r.g.Stop)
	return r
}

// replicaToken stands in for the mesh's internal token between the test's replicas.
const replicaToken = "Bearer replica"

// asReplica presents replicaToken on a call, as a replica's peer connections present the
// internal token.
func asReplica(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoke(metadata.AppendToOutgoingContext(ctx, "authorization", replicaToken), method, req, reply, cc, opts...)
}

// fromReplica stands in for the auth guard's internal caller: a call that presents replicaToken.
func fromReplica(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("authorization")
	return len(v) == 1 && v[0] == replicaToken
}

// leaders waits until the two replicas lead a partition each, see each other live and agree on
// who leads which, and returns the leader of each partition.
func leaders(t *testing.T, a, b *servedReplica) map[int]*servedReplica {
	t.Helper()
	byID := map[string]*servedReplica{"a": a, "b": b}
	var got map[int]*servedReplica
	eventually(t, 15*time.Second, "a and b lead a partition each", func() bool {
		got = map[int]*servedReplica{}
		var views []string
		for _, r := range []*servedReplica{a, b} {
			st, err := r.GetStatus(t.Context(), &schedulerv1.GetStatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			// Both replicas live in each one's view: it knows the other's address (a view may
			// learn a partition's leader from its own etcd writes before its watch tells it of
			// the leader's member key).
			if !st.GetLeader() || len(st.GetPartitions()) != 2 || len(st.GetReplicas()) != 2 {
				return false
			}
			views = append(views, fmt.Sprint(st.GetPartitions()[0].GetLeaderId(), st.GetPartitions()[1].GetLeaderId()))
			for _, p := range st.GetPartitions() {
				got[int(p.GetPartition())] = byID[p.GetLeaderId()]
			}
		}
		return views[0] == views[1] && got[0] != nil && got[1] != nil && got[0] != got[1]
	})
	return got
}

// TestManualTriggerGoesToThePartitionLeader: two replicas lead a partition each. A manual
// trigger sent to the replica that does not lead its job's partition is dispatched once, by the
// leader (its executor connection makes the Run call), also when the leader's answer is lost
// after it took the call. A forwarded call from anyone but a replica, or without a time reserved
// for it and not claimed yet, is refused. While
// the leader cannot be reached, and once it is gone, the replica that received the trigger
// dispatches it.
func TestManualTriggerGoesToThePartitionLeader(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var runs counter
	group := c.executor(t, "fwd-app", "work", func(_ context.Context, j *sdk.Job) error {
		runs.add(j)
		return nil
	})
	a, b := c.servedReplica(t, "a"), c.servedReplica(t, "b")
	lead := leaders(t, a, b)
	// A job of the partition b leads, to trigger through a.
	var jobID int64
	for range 8 {
		j, err := a.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
			GroupId: group, Name: "fwd", Handler: "work", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
			Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if id := j.GetJob().GetId(); lead[partition.PartitionOf(id, 2)] == b {
			jobID = id
			break
		}
	}
	if jobID == 0 {
		t.Fatal("no job of b's partition in 8 jobs")
	}
	var ids []string
	// trigger fires the job through call and checks which replicas made Run calls by its answer
	// (TriggerJob answers once the executor has): a fire dispatched by another replica too would
	// show there.
	trigger := func(what string, call func() (*schedulerv1.TriggerJobResponse, error), wantA, wantB int64) {
		t.Helper()
		resp, err := call()
		if err != nil || len(resp.GetTriggerIds()) != 1 {
			t.Fatalf("%s: TriggerJob = %v, %v; want one trigger id", what, resp, err)
		}
		ids = append(ids, resp.GetTriggerIds()[0])
		if gotA, gotB := a.runs.n.Load(), b.runs.n.Load(); gotA != wantA || gotB != wantB {
			t.Errorf("%s: Run calls by a, b = %d, %d; want %d, %d", what, gotA, gotB, wantA, wantB)
		}
	}

	trigger("sent to a, b leads", func() (*schedulerv1.TriggerJobResponse, error) {
		return a.TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{Id: jobID, Params: "forwarded"})
	}, 0, 1)

	// b takes the forwarded call and dispatches the fire, but a never hears its answer: a does
	// not dispatch it too (b claimed it), and answers with its trigger id.
	b.loseAnswers.Store(true)
	trigger("b's answer lost", func() (*schedulerv1.TriggerJobResponse, error) {
		return a.TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{Id: jobID, Params: "answer lost"})
	}, 0, 2)
	b.loseAnswers.Store(false)

	// A forwarded call comes from another replica, with a time it reserved for it, and gets at
	// most one dispatch.
	conn, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	forward := func(token, value string) error {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-jobmesh-forwarded-fire-ms", value, "authorization", token)
		_, err := schedulerv1.NewJobServiceClient(conn).TriggerJob(ctx, &schedulerv1.TriggerJobRequest{Id: jobID})
		return err
	}
	lost := strings.Split(ids[len(ids)-1], "-")[1] // the fire b claimed
	for _, tc := range []struct {
		what, token, value string
		want               codes.Code
	}{
		{"not from a replica", "Bearer someone", lost, codes.PermissionDenied},
		{"not a time", replicaToken, "soon", codes.InvalidArgument},
		{"not reserved", replicaToken, fmt.Sprint(time.Now().UnixMilli()), codes.FailedPrecondition},
		{"claimed by b", replicaToken, lost, codes.FailedPrecondition},
	} {
		if err := forward(tc.token, tc.value); status.Code(err) != tc.want {
			t.Errorf("forwarded call %s: %v; want %v", tc.what, err, tc.want)
		}
	}
	if gotA, gotB := a.runs.n.Load(), b.runs.n.Load(); gotA != 0 || gotB != 2 {
		t.Errorf("after refused forwarded calls: Run calls by a, b = %d, %d; want 0, 2", gotA, gotB)
	}

	// b still leads, but cannot be reached: a dispatches the trigger itself.
	b.unreachable.Store(true)
	trigger("b unreachable", func() (*schedulerv1.TriggerJobResponse, error) {
		return a.TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{Id: jobID, Params: "unreachable"})
	}, 1, 2)

	// b is gone: a dispatches it.
	b.Stop()
	trigger("b stopped", func() (*schedulerv1.TriggerJobResponse, error) {
		return a.TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{Id: jobID, Params: "gone"})
	}, 2, 2)

	eventually(t, 15*time.Second, "every trigger runs", func() bool {
		seen, _ := runs.snapshot()
		return len(seen) >= len(ids)
	})
	seen, perID := runs.snapshot()
	if len(seen) != len(ids) {
		t.Errorf("%d runs, want %d", len(seen), len(ids))
	}
	for _, id := range ids {
		if perID[id] != 1 {
			t.Errorf("trigger %s ran %d times, want once", id, perID[id])
		}
	}
}
