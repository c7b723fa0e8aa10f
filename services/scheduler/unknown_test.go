package scheduler

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
)

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

// TestHeldRunIsRecordedUnknown: a fire whose executor holds its Run past the dispatch deadline,
// and every re-send of it until the misfire threshold, is recorded with trigger outcome UNKNOWN
// (the executor may run it), not FAILED.
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
	s, err := New(Config{ReplicaID: "t", DispatchTimeout: time.Second, MisfireThreshold: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)}, Deps{
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
		return &fire{job: &jobRow{ID: job, GroupID: group, Handler: "h", Route: route.First},
			fireMs: time.Now().UnixMilli(), kind: kindScheduled, trigType: triggerCron}
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
	rec := recordOf("held Run")
	if rec.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN || !strings.Contains(rec.GetTriggerMessage(), "went to no other executor") {
		t.Errorf("record of the held Run: %v, want UNKNOWN, sent to no other executor", rec)
	}
}
