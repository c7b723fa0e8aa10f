package scheduler_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// lateExecutor stands in front of an executor like a saturated one: it hands every Run to the
// executor at once, which takes the fires, but answers the scheduler only once the call's
// deadline has passed. passed has a channel per trigger id, closed then.
type lateExecutor struct {
	executorv1.UnimplementedExecutorServiceServer
	next executorv1.ExecutorServiceClient

	mu     sync.Mutex
	passed map[string]chan struct{}
}

func (e *lateExecutor) deadlinePassed(id string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.passed[id] == nil {
		e.passed[id] = make(chan struct{})
	}
	return e.passed[id]
}

func (e *lateExecutor) Run(ctx context.Context, req *executorv1.RunRequest) (*executorv1.RunResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if _, err := e.next.Run(metadata.NewOutgoingContext(context.WithoutCancel(ctx), md), req); err != nil {
		return nil, err
	}
	<-ctx.Done()
	for _, t := range req.GetTriggers() {
		e.pass(t.GetTriggerId())
	}
	// The executor's answer is dropped: sent at this call's own deadline, it could still reach a
	// caller whose deadline timer had not yet run, which would then count it as in time.
	return nil, status.Error(codes.DeadlineExceeded, "answered after the deadline")
}

// pass closes id's channel, once: the scheduler sends an unanswered fire again under its id.
func (e *lateExecutor) pass(id string) {
	ch := e.deadlinePassed(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// TestRunAnsweredTooLateKeepsTheExecutorsResult: an executor takes every fire, but its Run
// answers come after the dispatch deadline, every time, and each fire ends only after that. The
// scheduler sends each unanswered fire again to the same executor only, under its id, until the
// misfire threshold, then records it UNKNOWN; every fire is stored with the executor's result
// (trigger outcome OK), not as a trigger failure, and no retry runs on top of it.
func TestRunAnsweredTooLateKeepsTheExecutorsResult(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	late := &lateExecutor{passed: map[string]chan struct{}{}}
	var runs counter
	home := c.executor(t, "busy-app", "work", func(ctx context.Context, j *sdk.Job) error {
		runs.add(j)
		select {
		case <-late.deadlinePassed(j.TriggerID):
		case <-ctx.Done():
		}
		return nil
	})
	reg := registryv1.NewRegistryServiceClient(c.regConn)
	g, err := reg.GetExecutorGroup(t.Context(), &registryv1.GetExecutorGroupRequest{Id: home})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(g.GetGroup().GetAddresses()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	late.next = executorv1.NewExecutorServiceClient(conn)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	executorv1.RegisterExecutorServiceServer(srv, late)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	busy, err := reg.CreateExecutorGroup(t.Context(), &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: "busy-front", Title: "busy", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL,
		ManualAddresses: []string{ln.Addr().String()}, AccessToken: "busy-app-token",
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := c.replicaWith(t, scheduler.Config{ReplicaID: "a", DispatchTimeout: time.Second, MisfireThreshold: 2 * time.Second})
	waitLeader(t, s)
	job, err := s.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: busy.GetGroup().GetId(), Name: "busy", Handler: "work", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Schedule:   &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
		RetryCount: 2, RetryBackoff: schedulerv1.RetryBackoff_RETRY_BACKOFF_NONE,
	}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		resp, err := s.TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{Id: job.GetJob().GetId()})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.GetTriggerIds()...)
	}
	logs := logsv1.NewLogServiceClient(c.logsConn)
	for _, id := range ids {
		var r *logsv1.Run
		eventually(t, 20*time.Second, "run "+id+" ends", func() bool {
			resp, err := logs.GetRun(t.Context(), &logsv1.GetRunRequest{Id: id})
			r = resp.GetRun()
			return err == nil && r.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING &&
				r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNSPECIFIED
		})
		if r.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK ||
			!strings.Contains(r.GetTriggerMessage(), "no answer from executor") {
			t.Errorf("run %s: got %v, want the executor's SUCCESS, with the scheduler's account that its Run went unanswered", id, r)
		}
	}
	// No FAIL was published, so no retry was stored or run.
	var n int
	if err := c.store.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM pending_fires`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	seen, counts := runs.snapshot()
	if n != 0 || len(seen) != len(ids) {
		t.Errorf("after the late answers: %d pending fires and runs %v, want none pending and each fire run once", n, counts)
	}
	for _, j := range seen {
		if j.Attempt != 0 {
			t.Errorf("retry %s ran on top of a fire that succeeded", j.TriggerID)
		}
	}
}
