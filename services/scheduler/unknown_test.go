package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

// TestUnansweredRunIsUnknown: which Run errors leave a fire's fate unknown. A call that went out
// and got no answer (its deadline passed, it was cancelled) may have reached the executor; a
// fire that never left its executor's queue, a refused connection or a refusal did not.
func TestUnansweredRunIsUnknown(t *testing.T) {
	t.Parallel()
	deadline := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{deadline, true},
		{status.Error(codes.Canceled, "context canceled"), true},
		{fmt.Errorf("%w: %w", errQueuedOut, deadline), false},
		{status.Error(codes.Unavailable, "connection refused"), false},
		{status.Error(codes.Unauthenticated, "bad token"), false},
		{errors.New("executor answered 0 acks for 1 fires"), false},
	} {
		if got := unanswered(c.err); got != c.want {
			t.Errorf("unanswered(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// recordingIngest is an IngestService that hands over the trigger records it gets.
type recordingIngest struct {
	logsv1.UnimplementedIngestServiceServer
	got chan *logsv1.TriggerRecord
}

func (r *recordingIngest) IngestTriggerRecords(st grpc.BidiStreamingServer[logsv1.IngestTriggerRecordsRequest, logsv1.IngestTriggerRecordsResponse]) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		for _, rec := range req.GetRecords() {
			r.got <- rec
		}
		if err := st.Send(&logsv1.IngestTriggerRecordsResponse{BatchId: req.GetBatchId()}); err != nil {
			return err
		}
	}
}

// TestHeldRunIsRecordedUnknown: a fire whose executor holds its Run past the dispatch deadline
// is recorded with trigger outcome UNKNOWN (the executor may run it), not FAILED; one that
// waited in its executor's queue past its deadline, never sent, is FAILED.
func TestHeldRunIsRecordedUnknown(t *testing.T) {
	t.Parallel()
	held := &gatedExecutor{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	t.Cleanup(func() { close(held.gate) })
	addr := serveExecutor(t, held)
	ing := &recordingIngest{got: make(chan *logsv1.TriggerRecord, 10)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	logsv1.RegisterIngestServiceServer(g, ing)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	d := dbtest.Open(t, db.Config{DataDir: t.TempDir()}, "scheduler", MigrationsFS())
	s, err := New(Config{ReplicaID: "t", DispatchTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)}, Deps{
		Store: d, Etcd: &clientv3.Client{}, Registry: registryv1.NewRegistryServiceClient(nil),
		Ingest: logsv1.NewIngestServiceClient(conn), Logs: logsv1.NewLogServiceClient(nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.execs.close)
	s.records.Start(t.Context())
	t.Cleanup(s.records.Stop)
	const group = 1
	s.groups.groups[group] = groupEntry{fetched: time.Now(), g: &registryv1.ExecutorGroup{Id: group,
		AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, Addresses: []string{addr}}}
	fireOf := func(job int64) *fire {
		return &fire{job: &jobRow{ID: job, GroupID: group, Handler: "h", Route: schedulerv1.RouteStrategy_ROUTE_STRATEGY_FIRST},
			fireMs: time.Now().UnixMilli(), trigType: schedulerv1.TriggerType_TRIGGER_TYPE_CRON}
	}
	recordOf := func(what string) *logsv1.TriggerRecord {
		t.Helper()
		select {
		case rec := <-ing.got:
			return rec
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no trigger record", what)
			return nil
		}
	}
	s.dispatch(fireOf(1), trace.Link{}, nil)
	<-held.arrived
	// Queued behind the held call with a deadline that passes first: never sent.
	queued := fireOf(2)
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	queuedErr := make(chan error, 1)
	s.execs.runAsync(ctx, addr, &executorv1.Trigger{TriggerId: TriggerID(2, queued.fireMs, 0, 0), JobId: 2}, 0, nil,
		func(_ *executorv1.RunAck, err error) { queuedErr <- err })

	rec := recordOf("held Run")
	if rec.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN || !strings.Contains(rec.GetTriggerMessage(), "sent, no answer") {
		t.Errorf("record of the held Run: %v, want UNKNOWN, sent without an answer", rec)
	}
	select {
	case err := <-queuedErr:
		if !errors.Is(err, errQueuedOut) || unanswered(err) {
			t.Errorf("fire queued past its deadline: %v, want errQueuedOut, not unanswered", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("fire queued past its deadline: no answer")
	}
}
