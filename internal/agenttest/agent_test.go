package agenttest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/internal/hostport"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
	"github.com/jobmesh/jobmesh/services/logsvc"
)

// groupToken is the access token the tests' executors are given: the test clients present it on
// Run, and the logsvc here, which runs without a guard, takes whatever they deliver.
const groupToken = "agenttest-group-token"

// wait bounds every wait on a condition.
const wait = 60 * time.Second

// noKills: these tests never ask logsvc to kill a run.
type noKills struct{}

func (noKills) KillTrigger(context.Context, string, int64, string) (bool, string, error) {
	return false, "not in this test", nil
}

// logsvcProc is a logsvc that can be stopped and started again on the same address, each time
// as a new Service on the same database, as a restarted logsvc process would be.
type logsvcProc struct {
	t    testing.TB
	d    *db.DB
	addr string

	mu  sync.Mutex
	svc *logsvc.Service
	srv *grpc.Server
}

func newLogsvc(t testing.TB) *logsvcProc {
	t.Helper()
	d := dbtest.Open(t, db.Config{URL: dbtest.NewPostgres(t)}, "logs", logsvc.MigrationsFS())
	p := &logsvcProc{t: t, d: d, addr: freeAddr(t)}
	t.Cleanup(p.down)
	return p
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := hostport.ListenLoopback() // not an ephemeral port: it is listened on again later
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (p *logsvcProc) up() {
	p.t.Helper()
	svc, err := logsvc.New(logsvc.Config{Retention: -1}, p.d, noKills{})
	if err != nil {
		p.t.Fatalf("logsvc.New: %v", err)
	}
	if err := svc.Start(context.Background()); err != nil {
		p.t.Fatalf("logsvc Start: %v", err)
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		svc.Stop()
		p.t.Fatalf("logsvc listen on %s again: %v", p.addr, err)
	}
	srv := grpcserver.New(slog.New(slog.DiscardHandler))
	svc.Register(srv)
	go srv.Serve(ln)
	p.mu.Lock()
	p.svc, p.srv = svc, srv
	p.mu.Unlock()
}

func (p *logsvcProc) down() {
	p.mu.Lock()
	svc, srv := p.svc, p.srv
	p.svc, p.srv = nil, nil
	p.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	if svc != nil {
		svc.Stop()
	}
}

// stored is what logsvc holds for one run.
type stored struct {
	status  logsv1.RunStatus
	address string
	lines   []string
}

// runs reads the runs whose trigger id starts with prefix straight from logsvc's tables, with
// their lines in line order, and the total number of line rows.
func (p *logsvcProc) runs(ctx context.Context, prefix string) (map[string]*stored, int, error) {
	out := map[string]*stored{}
	rows, err := p.d.QueryContext(ctx, p.d.Q(`SELECT trigger_id, status, executor_address FROM runs WHERE trigger_id LIKE $1`), prefix+"%")
	if err != nil {
		return nil, 0, err
	}
	for rows.Next() {
		var id string
		var st int32
		var addr string
		if err := rows.Scan(&id, &st, &addr); err != nil {
			rows.Close()
			return nil, 0, err
		}
		out[id] = &stored{status: logsv1.RunStatus(st), address: addr}
	}
	if err := rows.Close(); err != nil {
		return nil, 0, err
	}
	rows, err = p.d.QueryContext(ctx, p.d.Q(`SELECT trigger_id, text FROM run_lines WHERE trigger_id LIKE $1 ORDER BY trigger_id, line_no`), prefix+"%")
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, text string
		if err := rows.Scan(&id, &text); err != nil {
			return nil, 0, err
		}
		n++
		if out[id] == nil {
			out[id] = &stored{}
		}
		out[id].lines = append(out[id].lines, text)
	}
	return out, n, rows.Err()
}

// waitDelivered polls logsvc's tables until every id has a SUCCESS run with want(id) as its
// lines, or fails after wait; it returns the number of line rows.
func (p *logsvcProc) waitDelivered(t *testing.T, prefix string, ids []string, want func(id string) []string) int {
	t.Helper()
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		got, lines, err := p.runs(t.Context(), prefix)
		if err != nil {
			t.Fatalf("read logsvc tables: %v", err)
		}
		var missing []string
		for _, id := range ids {
			r := got[id]
			if r == nil || r.status != logsv1.RunStatus_RUN_STATUS_SUCCESS || !slices.Equal(r.lines, want(id)) {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			if len(got) != len(ids) {
				t.Fatalf("logsvc holds %d runs, want %d", len(got), len(ids))
			}
			return lines
		}
		if time.Now().After(deadline) {
			r := got[missing[0]]
			t.Fatalf("after %v, %d of %d runs are not delivered whole; first %s: %+v", wait, len(missing), len(ids), missing[0], r)
		}
		<-tick.C
	}
}

// spoolBytes sums the spool's segment files.
func spoolBytes(t *testing.T, dir string) int64 {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range segs {
		if fi, err := os.Stat(s); err == nil {
			n += fi.Size()
		}
	}
	return n
}

func fireLines(id string) []string {
	return []string{id + " line 1", id + " line 2", id + " line 3"}
}

// TestLogsvcDown30sWhile200RunsFinish: logsvc goes away for 30 s while 200 fires run and end on
// an agent; when it is back, every result and all of its output are stored, exactly once.
func TestLogsvcDown30sWhile200RunsFinish(t *testing.T) {
	t.Parallel()
	const fires, outage = 200, 30 * time.Second
	ls := newLogsvc(t)
	ls.up()

	logDir := t.TempDir()
	ended := make(chan sdk.Result, fires)
	e, err := sdk.New(sdk.Config{
		AppName: "outage", InstanceID: "a1", ListenAddr: "127.0.0.1:0", LogsvcAddr: ls.addr, LogDir: logDir, AccessToken: groupToken,
		Logger: slog.New(slog.DiscardHandler), OnResult: func(r sdk.Result) { ended <- r },
		Insecure: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Handle("three-lines", func(ctx context.Context, job *sdk.Job) error {
		for _, l := range fireLines(job.TriggerID) {
			job.Logf("%s", l)
		}
		return nil
	})
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdktest.Stop(e) })
	cli := sdktest.Client(t, e.Addr(), groupToken)

	ls.down()
	downAt := time.Now()
	var ids []string
	var trs []*executorv1.Trigger
	for i := range fires {
		// 20 jobs with 10 fires each: fires of a job queue behind each other (SERIAL_EXECUTION).
		id := fmt.Sprintf("out-%d-%d-0-0", 1+i%20, i)
		ids = append(ids, id)
		trs = append(trs, &executorv1.Trigger{TriggerId: id, JobId: int64(1 + i%20), Handler: "three-lines", ShardTotal: 1,
			GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, ScheduledUnixMs: time.Now().UnixMilli()})
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	resp, err := cli.Run(ctx, &executorv1.RunRequest{Triggers: trs})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, a := range resp.GetAcks() {
		if a.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
			t.Fatalf("fire %s: got %v %q, want ACCEPTED", a.GetTriggerId(), a.GetOutcome(), a.GetMessage())
		}
	}
	for range fires {
		select {
		case r := <-ended:
			if r.Status != sdk.StatusSuccess {
				t.Fatalf("fire %s: got %s %q", r.TriggerID, r.Status, r.Message)
			}
		case <-ctx.Done():
			t.Fatal("fires did not end while logsvc was down")
		}
	}
	// The outage lasts its 30 s whatever the speed of the runs: this is a test of duration.
	<-time.After(time.Until(downAt.Add(outage)))
	if got, _, err := ls.runs(t.Context(), "out-"); err != nil || len(got) != 0 {
		t.Fatalf("while logsvc was down: got %d runs stored (%v), want none", len(got), err)
	}
	if spoolBytes(t, filepath.Join(logDir, "spool")) == 0 {
		t.Fatal("the spool is empty while logsvc is down and 200 results wait")
	}

	ls.up()
	if lines := ls.waitDelivered(t, "out-", ids, fireLines); lines != 3*fires {
		t.Fatalf("line rows: got %d, want %d", lines, 3*fires)
	}
	// Stop flushes: everything is acknowledged, so the spool ends empty.
	if err := sdktest.Stop(e); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if n := spoolBytes(t, filepath.Join(logDir, "spool")); n != 0 {
		t.Fatalf("spool after delivery and stop: got %d bytes, want 0", n)
	}
}

// buildAgent builds the jobmesh-agent binary once per test binary.
var buildAgent = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "jobmesh-agent-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "jobmesh-agent")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/jobmesh/jobmesh/services/executor-agent/cmd/jobmesh-agent").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build jobmesh-agent: %v\n%s", err, out)
	}
	return bin, nil
})

// agentProc is a jobmesh-agent process.
type agentProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit, once done
	out  string
}

// startAgent runs jobmesh-agent as app "killed", instance "k1", with flags appended after the
// defaults (a repeated flag takes its last value), and returns once it answers Beat.
func startAgent(t *testing.T, bin, addr, logsvcAddr, logDir string, flags ...string) *agentProc {
	t.Helper()
	out := filepath.Join(t.TempDir(), "agent.log")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	args := append([]string{"--app-name", "killed", "--instance-id", "k1", "--listen-addr", addr,
		"--logsvc-addr", logsvcAddr, "--log-dir", logDir, "--log-level", "debug", "--insecure"}, flags...)
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "JOBMESH_ACCESS_TOKEN=" + groupToken}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jobmesh-agent: %v", err)
	}
	a := &agentProc{cmd: cmd, done: make(chan struct{}), out: out}
	go func() {
		a.err = cmd.Wait()
		close(a.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // this test's own process, by pid
		<-a.done
		if t.Failed() {
			b, _ := os.ReadFile(out)
			t.Logf("agent output (pid %d):\n%s", cmd.Process.Pid, b)
		}
	})
	// Ready when it answers Beat.
	cli := sdktest.Client(t, addr, groupToken)
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := cli.Beat(ctx, &executorv1.BeatRequest{})
		cancel()
		if err == nil {
			return a
		}
		select {
		case <-a.done:
			b, _ := os.ReadFile(out)
			t.Fatalf("jobmesh-agent exited: %v\n%s", a.err, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobmesh-agent did not answer Beat within %v: %v", wait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAgentSIGKILLedWithFullSpoolLosesNothing: an agent whose results and output wait in its
// spool (logsvc down) is killed with SIGKILL; started again with logsvc up, it delivers all of
// them.
func TestAgentSIGKILLedWithFullSpoolLosesNothing(t *testing.T) {
	t.Parallel()
	bin, err := buildAgent()
	if err != nil {
		t.Fatal(err)
	}
	const fires = 50
	ls := newLogsvc(t) // not up yet
	logDir, addr := t.TempDir(), freeAddr(t)
	a := startAgent(t, bin, addr, ls.addr, logDir)
	cli := sdktest.Client(t, addr, groupToken)

	src := "echo \"$JOBMESH_TRIGGER_ID line 1\"\necho \"$JOBMESH_TRIGGER_ID line 2\" >&2\necho \"$JOBMESH_TRIGGER_ID line 3\"\n"
	var ids []string
	var trs []*executorv1.Trigger
	for i := range fires {
		id := fmt.Sprintf("kill-%d-1-0-0", 100+i)
		ids = append(ids, id)
		trs = append(trs, &executorv1.Trigger{TriggerId: id, JobId: int64(100 + i), ShardTotal: 1,
			GlueType: schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL, GlueSource: src, GlueUpdatedUnixMs: 1})
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	resp, err := cli.Run(ctx, &executorv1.RunRequest{Triggers: trs})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, ack := range resp.GetAcks() {
		if ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
			t.Fatalf("fire %s: got %v %q", ack.GetTriggerId(), ack.GetOutcome(), ack.GetMessage())
		}
	}
	// Every fire has ended when its local log is complete.
	for _, id := range ids {
		for {
			lr, err := cli.Log(ctx, &executorv1.LogRequest{TriggerId: id, FromLine: 1})
			if err != nil {
				t.Fatalf("Log %s: %v", id, err)
			}
			if lr.GetIsEnd() {
				if !slices.Equal(lr.GetLines(), fireLines(id)) {
					t.Fatalf("local log of %s: got %q", id, lr.GetLines())
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A fire's local log says its end only once its result is in the spool: kill now.
	spoolDir := filepath.Join(logDir, "spool")
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	if spoolBytes(t, spoolDir) == 0 {
		t.Fatal("spool is empty after the kill: nothing to replay")
	}
	if got, _, err := ls.runs(t.Context(), "kill-"); err != nil || len(got) != 0 {
		t.Fatalf("before logsvc is up: got %d runs (%v), want none", len(got), err)
	}

	ls.up()
	startAgent(t, bin, addr, ls.addr, logDir)
	if lines := ls.waitDelivered(t, "kill-", ids, fireLines); lines != 3*fires {
		t.Fatalf("line rows: got %d, want %d", lines, 3*fires)
	}
}
