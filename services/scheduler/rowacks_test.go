package scheduler_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/logtest"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// heldRecords passes a scheduler's trigger records on to logsvc until hold is set, and from
// then on keeps them without an answer: what logsvc sees of a replica killed before it
// acknowledged them.
type heldRecords struct {
	logsv1.UnimplementedIngestServiceServer
	to   logsv1.IngestServiceClient
	hold atomic.Bool
	held atomic.Int64 // records kept
}

func (p *heldRecords) IngestTriggerRecords(s grpc.BidiStreamingServer[logsv1.IngestTriggerRecordsRequest, logsv1.IngestTriggerRecordsResponse]) error {
	up, err := p.to.IngestTriggerRecords(s.Context())
	if err != nil {
		return err
	}
	go func() { // logsvc's acknowledgements, back to the scheduler
		for {
			resp, err := up.Recv()
			if err != nil || s.Send(resp) != nil {
				return
			}
		}
	}()
	for {
		req, err := s.Recv()
		if err != nil {
			return err
		}
		if p.hold.Load() {
			p.held.Add(int64(len(req.GetRecords())))
			continue
		}
		if err := up.Send(req); err != nil {
			return err
		}
	}
}

// TestDispatchedRetryOutlivesItsUnacknowledgedRecord: a leader dispatches a retry and dies
// before logsvc has acknowledged the retry's trigger record. The retry's pending_fires row is
// still there, so the next leader finds it, sees that it ran (logsvc has the executor's
// result, or the executor says it holds it), rebuilds its record and deletes the row: logsvc
// completes the run at once rather than after RecordWait (10 minutes) from the result alone,
// and the retry is not sent again.
func TestDispatchedRetryOutlivesItsUnacknowledgedRecord(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := t.Context()
	logs := logsv1.NewLogServiceClient(c.logsConn)

	// The completions logsvc publishes from now on.
	var (
		mu   sync.Mutex
		done = map[string]logsv1.RunStatus{}
	)
	watch, err := logs.WatchCompletions(ctx, &logsv1.WatchCompletionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Header(); err != nil { // the stream's start is fixed
		t.Fatal(err)
	}
	go func() {
		for {
			resp, err := watch.Recv()
			if err != nil {
				return
			}
			mu.Lock()
			for _, cp := range resp.GetCompletions() {
				done[cp.GetTriggerId()] = cp.GetStatus()
			}
			mu.Unlock()
		}
	}()
	completed := func(id string) (logsv1.RunStatus, bool) {
		mu.Lock()
		defer mu.Unlock()
		st, ok := done[id]
		return st, ok
	}

	// Two executors under ROUND: a retry sent again would likely land on the other one, which
	// has not seen it.
	var runs counter
	group := c.executors(t, "acked-app", 2, "flaky", func(_ context.Context, j *sdk.Job) error {
		runs.add(j)
		if j.Attempt == 0 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	proxy := &heldRecords{to: logsv1.NewIngestServiceClient(c.logsConn)}
	a := c.replicaIngesting(t, scheduler.Config{ReplicaID: "a"}, serveGRPC(t, func(g *grpc.Server) {
		logsv1.RegisterIngestServiceServer(g, proxy)
	}))
	waitLeader(t, a)
	job, err := a.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: group, Name: "flaky", Handler: "flaky", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Schedule:      &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
		RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_ROUND,
		RetryCount:    1, RetryBackoff: schedulerv1.RetryBackoff_RETRY_BACKOFF_FIXED, RetryIntervalMs: 1000,
	}})
	if err != nil {
		t.Fatal(err)
	}
	trig, err := a.TriggerJob(ctx, &schedulerv1.TriggerJobRequest{Id: job.Job.Id})
	if err != nil {
		t.Fatal(err)
	}
	// The failure's completion stores the retry (its record reached logsvc: logsvc completed
	// the run); from here on a's records are kept from logsvc.
	eventually(t, 30*time.Second, "retry stored as a pending fire", func() bool { return c.pendingRows(t) == 1 })
	proxy.hold.Store(true)
	eventually(t, 30*time.Second, "the retry run, and its record sent", func() bool {
		seen, _ := runs.snapshot()
		return len(seen) == 2 && proxy.held.Load() >= 1
	})
	seen, _ := runs.snapshot()
	retry := seen[1].TriggerID
	if want := scheduler.TriggerID(job.Job.Id, seen[0].ScheduledTime.UnixMilli(), 0, 1); retry != want || trig.GetTriggerIds()[0] != seen[0].TriggerID {
		t.Fatalf("runs %s, %s; want %s, then its retry %s", seen[0].TriggerID, retry, trig.GetTriggerIds()[0], want)
	}
	a.Stop() // its records never acknowledged, as if killed
	if n := c.pendingRows(t); n != 1 {
		t.Fatalf("pending rows after the leader died with the retry's record unacknowledged: got %d, want 1", n)
	}
	if _, ok := completed(retry); ok {
		t.Fatalf("retry %s completed without its trigger record", retry)
	}

	rec := logtest.New()
	b := c.replicaWith(t, scheduler.Config{ReplicaID: "b", Logger: rec.Logger()})
	waitLeader(t, b)
	rec.Wait(t, 30*time.Second, "took over pending retries and child fires", "pending=1 already_dispatched=1", "records_rebuilt=1")
	eventually(t, 30*time.Second, "the retry's completion", func() bool {
		st, ok := completed(retry)
		return ok && st == logsv1.RunStatus_RUN_STATUS_SUCCESS
	})
	eventually(t, 10*time.Second, "the retry's row deleted once its rebuilt record is acknowledged", func() bool { return c.pendingRows(t) == 0 })
	r, err := logs.GetRun(ctx, &logsv1.GetRunRequest{Id: retry})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetRun().GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_RETRY ||
		!strings.Contains(r.GetRun().GetTriggerMessage(), "rebuilt by the new leader at takeover") {
		t.Errorf("retry run %v: want RETRY, with the record rebuilt by the new leader", r.GetRun())
	}
	seen, byID := runs.snapshot()
	if len(seen) != 2 || byID[retry] != 1 {
		t.Errorf("runs %v: want the first attempt and its retry, once each", byID)
	}
}
