package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// gatedLogs is logsvc for a replica whose completion stream cannot connect until open is
// closed; called is closed at its first try.
type gatedLogs struct {
	logsv1.LogServiceClient
	once         sync.Once
	called, open chan struct{}
}

func (g *gatedLogs) WatchCompletions(ctx context.Context, in *logsv1.WatchCompletionsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[logsv1.WatchCompletionsResponse], error) {
	g.once.Do(func() { close(g.called) })
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.LogServiceClient.WatchCompletions(ctx, in, opts...)
}

// TestFirstTakeoverWaitsForTheCompletionStream: in a new cluster (no partition has acted on a
// completion, logsvc has none), a replica's completion stream connects only after the first run
// of a FIX_DELAY job could have ended. The partition's engine does not fire before the stream is
// live, so the run's completion is not passed over and the job fires again. (An engine that
// fired at once lost that completion: the stream then started at logsvc's newest, after it,
// and the job never fired again.)
func TestFirstTakeoverWaitsForTheCompletionStream(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var runs counter
	group := c.executor(t, "gap-app", "work", func(_ context.Context, j *sdk.Job) error {
		runs.add(j)
		return nil
	})
	// A watch of the test's own, fixed before any run can end, signals the first completion.
	watch, err := logsv1.NewLogServiceClient(c.logsConn).WatchCompletions(t.Context(), &logsv1.WatchCompletionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Header(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() {
		if _, err := watch.Recv(); err == nil {
			close(ended)
		}
	}()
	gate := &gatedLogs{LogServiceClient: logsv1.NewLogServiceClient(c.logsConn), called: make(chan struct{}), open: make(chan struct{})}
	s := c.replicaOf(t, scheduler.Config{ReplicaID: "gap", DispatchTimeout: 30 * time.Second}, c.logsConn, gate)
	if _, err := s.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: group, Name: "gap", Handler: "work", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_DELAY, Expression: "1s"},
		Status:   schedulerv1.JobStatus_JOB_STATUS_RUNNING,
	}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.called:
	case <-time.After(30 * time.Second):
		t.Fatal("the replica's completion stream never tried to connect")
	}
	// Had the engine fired without the stream, its first fire (due 1 s after the job was
	// created) would end within a few seconds: the stream connects after that, or after 3 s.
	select {
	case <-ended:
	case <-time.After(3 * time.Second):
	}
	close(gate.open)
	eventually(t, 30*time.Second, "the FIX_DELAY job's second fire (its first run's completion acted on)", func() bool {
		seen, _ := runs.snapshot()
		return len(seen) >= 2
	})
}
