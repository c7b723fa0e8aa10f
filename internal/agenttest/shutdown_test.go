package agenttest

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
	"github.com/jobmesh/jobmesh/services/registry"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// TestGracefulShutdownOfTheAgentProcess sends SIGTERM to a jobmesh-agent process that runs two
// scripts and has a third queued: it leaves etcd at once (while both scripts still run), refuses
// new fires, ends the queued fire KILLED, lets the script that finishes within the stop grace
// succeed, kills the one that does not when the grace is over and reports it KILLED, delivers
// every result to logsvc and exits cleanly.
func TestGracefulShutdownOfTheAgentProcess(t *testing.T) {
	t.Parallel()
	bin, err := buildAgent()
	if err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Client(t)
	regAddr := serveRegistry(t, etcd, "graceful")
	ls := newLogsvc(t)
	ls.up()
	logDir, addr, release := t.TempDir(), freeAddr(t), filepath.Join(t.TempDir(), "release")
	const stopGrace = 8 * time.Second // long enough for the checks below, which take milliseconds
	a := startAgent(t, bin, addr, ls.addr, logDir, "--app-name", "graceful", "--instance-id", "g1",
		"--registry-addr", regAddr, "--stop-grace", stopGrace.String(), "--kill-grace", "1s")
	cli := sdktest.Client(t, addr, groupToken)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()

	key := registry.KeyPrefix + "graceful/g1"
	got, err := etcd.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("registration %s: %v %v, want the key", key, got, err)
	}
	watch := etcd.Watch(ctx, key, clientv3.WithRev(got.Header.Revision+1))

	shell := func(id string, job int64, src, params string) *executorv1.Trigger {
		return &executorv1.Trigger{TriggerId: id, JobId: job, ShardTotal: 1, Params: params,
			GlueType: schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL, GlueSource: src, GlueUpdatedUnixMs: 1}
	}
	const (
		finishes = "graceful-1-1-0-0" // ends once the test creates the release file
		overruns = "graceful-2-1-0-0" // runs past the grace
		queued   = "graceful-2-2-0-0" // waits behind it (SERIAL_EXECUTION)
		late     = "graceful-3-1-0-0" // sent after SIGTERM
	)
	resp, err := cli.Run(ctx, &executorv1.RunRequest{Triggers: []*executorv1.Trigger{
		shell(finishes, 1, "echo started\nwhile [ ! -e \"$1\" ]; do sleep 0.05; done\necho finished\n", release),
		shell(overruns, 2, "echo started\nsleep 1000\n", ""),
		shell(queued, 2, "echo never\n", ""),
	}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, ack := range resp.GetAcks() {
		if ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
			t.Fatalf("fire %s: got %v %q, want ACCEPTED", ack.GetTriggerId(), ack.GetOutcome(), ack.GetMessage())
		}
	}
	// localLog reads a fire's local log from the agent.
	localLog := func(id string) *executorv1.LogResponse {
		t.Helper()
		lr, err := cli.Log(ctx, &executorv1.LogRequest{TriggerId: id, FromLine: 1})
		if err != nil {
			t.Fatalf("Log %s: %v", id, err)
		}
		return lr
	}
	for _, id := range []string{finishes, overruns} {
		for !slices.Contains(localLog(id).GetLines(), "started") {
			select {
			case <-ctx.Done():
				t.Fatalf("fire %s did not start", id)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	a.cmd.Process.Signal(syscall.SIGTERM)
	// It deregisters first: the key is deleted while both scripts still run.
	for deleted := false; !deleted; {
		select {
		case w, ok := <-watch:
			if !ok {
				t.Fatalf("watch of %s ended: %v", key, ctx.Err())
			}
			for _, ev := range w.Events {
				deleted = deleted || ev.Type == mvccpb.DELETE
			}
		case <-a.done:
			t.Fatalf("agent exited before leaving etcd: %v", a.err)
		}
	}
	for _, id := range []string{finishes, overruns} {
		if localLog(id).GetIsEnd() {
			t.Errorf("fire %s had ended when the agent left etcd; want it still running", id)
		}
	}
	// It accepts nothing new.
	resp, err = cli.Run(ctx, &executorv1.RunRequest{Triggers: []*executorv1.Trigger{shell(late, 3, "echo late\n", "")}})
	if err != nil {
		t.Fatalf("Run after SIGTERM: %v", err)
	}
	if ack := resp.GetAcks()[0]; ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_REJECTED || !strings.Contains(ack.GetMessage(), "shutting down") {
		t.Errorf("fire sent after SIGTERM: got %v %q, want REJECTED because the executor is shutting down", ack.GetOutcome(), ack.GetMessage())
	}
	// A running handler may still finish within the grace.
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	select {
	case <-a.done:
		if a.err != nil {
			t.Errorf("agent exit after SIGTERM: %v, want a clean exit", a.err)
		}
	case <-time.After(wait):
		t.Fatalf("agent still running %v after SIGTERM (stop grace %v)", wait, stopGrace)
	}

	// Everything reached logsvc before the agent exited.
	runs, _, err := ls.runs(t.Context(), "graceful-")
	if err != nil {
		t.Fatal(err)
	}
	messages := handleMessages(t, ls)
	want := map[string]struct {
		status logsv1.RunStatus
		lines  []string
		msg    string
	}{
		finishes: {logsv1.RunStatus_RUN_STATUS_SUCCESS, []string{"started", "finished"}, ""},
		overruns: {logsv1.RunStatus_RUN_STATUS_KILLED, []string{"started"}, "executor stopping"},
		queued:   {logsv1.RunStatus_RUN_STATUS_KILLED, nil, "executor stopping"},
	}
	for id, w := range want {
		r := runs[id]
		if r == nil {
			t.Errorf("fire %s: no run in logsvc, want %v", id, w.status)
			continue
		}
		if r.status != w.status || !slices.Equal(r.lines, w.lines) || !strings.Contains(messages[id], w.msg) {
			t.Errorf("fire %s: got %v %q lines %q, want %v with %q and lines %q", id, r.status, messages[id], r.lines, w.status, w.msg, w.lines)
		}
	}
	if r := runs[late]; r != nil {
		t.Errorf("fire %s, refused, has a run in logsvc: %+v", late, r)
	}
}

// handleMessages reads each run's handle message from logsvc's table.
func handleMessages(t *testing.T, ls *logsvcProc) map[string]string {
	t.Helper()
	rows, err := ls.d.QueryContext(t.Context(), ls.d.Q(`SELECT trigger_id, handle_message FROM runs`))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, msg string
		if err := rows.Scan(&id, &msg); err != nil {
			t.Fatal(err)
		}
		out[id] = msg
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// serveRegistry runs a registry on etcd (its own client) over loopback gRPC, without a guard,
// with the group of app and groupToken: it takes a call that names an executor app as that app's
// executor (the guard's check of the group's token is tested with the guard), with a TTL far
// above the tests' waits, so an executor that leaves the view was removed, not expired. It
// returns the registry's address.
func serveRegistry(t *testing.T, etcd *clientv3.Client, app string) string {
	t.Helper()
	d := dbtest.Open(t, db.Config{DataDir: t.TempDir()}, "registry", registry.MigrationsFS())
	reg, err := registry.New(registry.Config{SealSecret: "agenttest-registry-seal-secret-0123", ExecutorTTL: 5 * time.Minute,
		Executor: func(ctx context.Context) (int64, string, bool) {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("x-jobmesh-executor-app"); len(v) == 1 {
				return 1, v[0], true
			}
			return 0, "", false
		}}, d, etcd)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	if _, err := reg.CreateExecutorGroup(t.Context(), &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: app, Title: app, AccessToken: groupToken}}); err != nil {
		t.Fatal(err)
	}
	g := grpcserver.New(slog.New(slog.DiscardHandler))
	reg.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}
