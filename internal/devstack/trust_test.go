package devstack_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
	"github.com/jobmesh/jobmesh/services/registry"
)

// TestExecutorsWriteOnlyTheirOwnRuns attacks logsvc as an executor host would: with a valid
// credential of its own group, and with the credential of the group whose run it targets, it
// delivers a result and a line for a finished run that was not dispatched to it, and a result and
// a line for a run that does not exist. Every such delivery is refused (results listed in the
// ack, lines dropped), and the stored runs are exactly as before. A credential that is not its
// group's is refused outright.
func TestExecutorsWriteOnlyTheirOwnRuns(t *testing.T) {
	t.Parallel()
	st := startStackWith(t, "", map[string]sdk.HandlerFunc{
		"speak": func(_ context.Context, j *sdk.Job) error { j.Logf("the real line"); return nil },
	})
	base := "http://" + st.HTTPAddr + "/api/v1"
	id := createJob(t, base, map[string]any{"name": "victim", "group_id": st.GroupID, "handler": "speak",
		"schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}})
	if code := call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("trigger = %d", code)
	}
	runs := waitRuns(t, base, id, func(rs []fullRun) bool { return finished(rs, "RUN_STATUS_SUCCESS") == 1 })
	victim := runs[0].ID
	const intruderToken = "intruder-group-token-0123"
	if code := call(t, "POST", base+"/executor-groups", map[string]any{"app_name": "intruder", "title": "Intruder",
		"access_token": intruderToken}, nil); code != http.StatusOK {
		t.Fatalf("create the intruder's group = %d", code)
	}

	conn, err := grpc.NewClient(st.LogsAddr, st.TLS.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ingest := logsv1.NewIngestServiceClient(conn)
	jobID, _ := strconv.ParseInt(id, 10, 64)
	unknown := fmt.Sprintf("%d-1700000000000-0-0", jobID+1000)

	for _, cred := range []struct{ name, app, token string }{
		{"another group's executor", "intruder", intruderToken},
		{"an executor of the run's group the fire was not sent to", devstack.DevApp, st.GroupToken},
	} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+cred.token, auth.ExecutorAppHeader, cred.app)
		// A forged delivery token is no better than none.
		forged := "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		rs, err := ingest.IngestResults(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.Send(&logsv1.IngestResultsRequest{BatchId: 1, Results: []*logsv1.RunResult{
			{TriggerId: victim, JobId: jobID, Status: logsv1.RunStatus_RUN_STATUS_FAIL, Message: "forged", DeliveryToken: forged},
			{TriggerId: unknown, JobId: jobID + 1000, Status: logsv1.RunStatus_RUN_STATUS_SUCCESS},
		}}); err != nil {
			t.Fatal(err)
		}
		ack, err := rs.Recv()
		if err != nil {
			t.Fatalf("%s: results ack: %v", cred.name, err)
		}
		if got := ack.GetRefusedTriggerIds(); !slices.Contains(got, victim) || !slices.Contains(got, unknown) {
			t.Errorf("%s: refused %v, want both %s and %s", cred.name, got, victim, unknown)
		}
		ls, err := ingest.IngestLogLines(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Send(&logsv1.IngestLogLinesRequest{BatchId: 1, Lines: []*logsv1.LogLine{
			{TriggerId: victim, LineNo: 99, UnixMs: 1, Text: "forged line", DeliveryToken: forged},
			{TriggerId: unknown, LineNo: 1, UnixMs: 1, Text: "forged line"},
		}}); err != nil {
			t.Fatal(err)
		}
		if _, err := ls.Recv(); err != nil { // acknowledged once its (empty) write committed
			t.Fatalf("%s: lines ack: %v", cred.name, err)
		}
	}

	// A group's app with another group's token is no executor at all.
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+intruderToken, auth.ExecutorAppHeader, devstack.DevApp)
	rs, err := ingest.IngestResults(ctx)
	if err == nil {
		_ = rs.Send(&logsv1.IngestResultsRequest{BatchId: 1})
		_, err = rs.Recv()
	}
	wantCode(t, "IngestResults with another group's token", err, codes.Unauthenticated)

	var got struct{ Run fullRun }
	if code := call(t, "GET", base+"/logs/"+victim, nil, &got); code != http.StatusOK || got.Run.Status != "RUN_STATUS_SUCCESS" {
		t.Errorf("the victim run after the attack = %d %+v, want it still SUCCESS", code, got.Run)
	}
	var lines struct {
		Lines []struct {
			Text string `json:"text"`
		} `json:"lines"`
	}
	if code := call(t, "GET", base+"/logs/"+victim+"/lines", nil, &lines); code != http.StatusOK {
		t.Fatalf("GET lines = %d", code)
	}
	var texts []string
	for _, l := range lines.Lines {
		texts = append(texts, l.Text)
	}
	if !slices.Contains(texts, "the real line") || slices.ContainsFunc(texts, func(s string) bool { return strings.Contains(s, "forged") }) {
		t.Errorf("the victim run's lines after the attack = %q, want the real line and nothing forged", texts)
	}
	if code := call(t, "GET", base+"/logs/"+unknown, nil, nil); code != http.StatusNotFound {
		t.Errorf("GET the run an intruder tried to create = %d, want 404", code)
	}
}

// TestDevAgentRunsOnlyForItsGroup: `jobmesh dev`'s own agent has its group's generated token, so
// a direct Run without it (or with the services' internal token) runs nothing.
func TestDevAgentRunsOnlyForItsGroup(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	if len(st.GroupToken) < auth.MinSecretLen {
		t.Fatalf("the dev group's token %q: want a generated secret", st.GroupToken)
	}
	for _, tok := range []string{"", st.InternalToken} {
		cli := sdktest.ClientTLS(t, st.AgentAddr, tok, st.TLS)
		_, err := cli.Run(t.Context(), &executorv1.RunRequest{Triggers: []*executorv1.Trigger{{TriggerId: "1-1-0-0", JobId: 1,
			GlueType: schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL, GlueSource: "id", ShardTotal: 1}}})
		wantCode(t, "Run on the dev agent with token "+strconv.Quote(tok), err, codes.Unauthenticated)
	}
}

// spyExecutor is a fake executor that records every call it gets and the token it was shown.
type spyExecutor struct {
	executorv1.UnimplementedExecutorServiceServer
	mu     sync.Mutex
	calls  []string
	tokens []string
}

func (s *spyExecutor) record(ctx context.Context, method string) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, method)
	s.tokens = append(s.tokens, md.Get("authorization")...)
}

func (s *spyExecutor) Run(ctx context.Context, _ *executorv1.RunRequest) (*executorv1.RunResponse, error) {
	s.record(ctx, "Run")
	return &executorv1.RunResponse{}, nil
}

func (s *spyExecutor) Beat(ctx context.Context, _ *executorv1.BeatRequest) (*executorv1.BeatResponse, error) {
	s.record(ctx, "Beat")
	return &executorv1.BeatResponse{}, nil
}

func (s *spyExecutor) seen() ([]string, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls), slices.Clone(s.tokens)
}

// TestForgedRegistrationGetsNoFireAndNoToken: a host that can write to etcd (here with the
// stack's own etcd client certificate) puts a registration for a fake executor under the dev
// group's app, one with a mesh certificate that serves ExecutorService. Broadcast fires of the
// group reach the real agent only: the fake gets no call, so neither a fire nor the group's token.
func TestForgedRegistrationGetsNoFireAndNoToken(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	st := startStackWith(t, "", map[string]sdk.HandlerFunc{
		"count": func(context.Context, *sdk.Job) error { ran.Add(1); return nil },
	})
	spy := &spyExecutor{}
	srv := grpc.NewServer(st.TLS.ServerOptions()...)
	executorv1.RegisterExecutorServiceServer(srv, spy)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{st.EtcdEndpoint}, TLS: st.EtcdTLS, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	val, _ := protojson.Marshal(&registryv1.Executor{AppName: devstack.DevApp, InstanceId: "forged", Address: ln.Addr().String(),
		HoldsFires: true, Seal: strings.Repeat("A", 43)})
	if _, err := cli.Put(t.Context(), registry.KeyPrefix+devstack.DevApp+"/forged", string(val)); err != nil {
		t.Fatal(err)
	}

	base := "http://" + st.HTTPAddr + "/api/v1"
	id := createJob(t, base, map[string]any{"name": "broadcast", "group_id": st.GroupID, "handler": "count",
		"route_strategy": "ROUTE_STRATEGY_SHARDING_BROADCAST", "schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}})
	for range 3 {
		if code := call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{}, nil); code != http.StatusOK {
			t.Fatalf("trigger = %d", code)
		}
	}
	// Every run stored with its record: the broadcast's shard count is the executors routed over.
	runs := waitRouted(t, base, id, func(rs []routedRun) bool {
		n := 0
		for _, r := range rs {
			if r.Status == "RUN_STATUS_SUCCESS" && r.TriggerOutcome == "TRIGGER_OUTCOME_OK" {
				n++
			}
		}
		return n >= 3
	})
	for _, r := range runs {
		if r.ShardTotal != 1 {
			t.Errorf("run %s was one of %d shards, want the real agent alone", r.ID, r.ShardTotal)
		}
	}
	if calls, toks := spy.seen(); len(calls) != 0 {
		t.Fatalf("the forged executor got %v (tokens %q), want nothing", calls, toks)
	}
	if ran.Load() != 3 {
		t.Errorf("the real agent ran %d fires, want 3", ran.Load())
	}
}
