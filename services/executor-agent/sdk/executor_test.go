package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// wait bounds every wait in these tests; nothing sleeps.
const wait = 20 * time.Second

// harness is one executor on loopback delivering to a fake logsvc.
type harness struct {
	exec   *sdk.Executor
	ingest *sdktest.Ingest
	cli    executorv1.ExecutorServiceClient
	gates  *gates
}

// start runs an executor for the test with a "gate" BEAN handler (see gates); configure may
// change the config. Tests register more handlers on h.exec: Handle works after Start.
func start(t *testing.T, configure func(*sdk.Config)) *harness {
	t.Helper()
	h := &harness{ingest: sdktest.NewIngest(), gates: &gates{m: map[string]*gate{}}}
	cfg := sdk.Config{
		AppName: "test-app", InstanceID: "t1", ListenAddr: "127.0.0.1:0", LogsvcAddr: h.ingest.Serve(t), AccessToken: "test-app-token",
		LogDir: t.TempDir(), KillGrace: 500 * time.Millisecond, Logger: testLogger(t),
		Insecure: true,
	}
	if configure != nil {
		configure(&cfg)
	}
	e, err := sdk.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.Handle("gate", h.gates.handler)
	// Start's ctx bounds the start only: it ends here, and the executor runs on until Stop.
	sctx, cancelStart := context.WithCancel(t.Context())
	err = e.Start(sctx)
	cancelStart()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		// A test may end with gates closed: their handlers get 2 s, then are killed.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	})
	h.exec = e
	h.cli = sdktest.Client(t, e.Addr(), cfg.AccessToken)
	return h
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("JOBMESH_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	t.Cleanup(cancel)
	return ctx
}

// run sends fires in one Run call and returns the outcomes.
func (h *harness) run(t *testing.T, ts ...*executorv1.Trigger) []*executorv1.RunAck {
	t.Helper()
	resp, err := h.cli.Run(ctxFor(t), &executorv1.RunRequest{Triggers: ts})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(resp.GetAcks()) != len(ts) {
		t.Fatalf("Run: got %d acks for %d fires", len(resp.GetAcks()), len(ts))
	}
	return resp.GetAcks()
}

// accept sends one fire and fails the test unless it is accepted.
func (h *harness) accept(t *testing.T, tr *executorv1.Trigger) {
	t.Helper()
	if ack := h.run(t, tr)[0]; ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
		t.Fatalf("fire %s: got %v %q, want ACCEPTED", tr.GetTriggerId(), ack.GetOutcome(), ack.GetMessage())
	}
}

// result waits for a fire's result at the fake logsvc.
func (h *harness) result(t *testing.T, id string) *logsv1.RunResult {
	t.Helper()
	r, err := h.ingest.WaitResult(ctxFor(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (h *harness) wantResult(t *testing.T, id string, status logsv1.RunStatus, msgPart string) *logsv1.RunResult {
	t.Helper()
	r := h.result(t, id)
	if r.GetStatus() != status || !strings.Contains(r.GetMessage(), msgPart) {
		t.Fatalf("fire %s: got %v %q, want %v containing %q", id, r.GetStatus(), r.GetMessage(), status, msgPart)
	}
	return r
}

// waitLines waits until the fake logsvc holds at least n lines of a fire.
func (h *harness) waitLines(t *testing.T, id string, n int) []string {
	t.Helper()
	if err := h.ingest.Wait(ctxFor(t), func() bool { return len(h.ingest.Lines(id)) >= n }); err != nil {
		t.Fatalf("fire %s: got lines %q, want at least %d: %v", id, h.ingest.Texts(id), n, err)
	}
	return h.ingest.Texts(id)
}

func script(id string, job int64, src string) *executorv1.Trigger {
	return &executorv1.Trigger{
		TriggerId: id, JobId: job, GlueType: schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL, GlueSource: src,
		GlueUpdatedUnixMs: 1, ShardTotal: 1,
	}
}

func bean(id string, job int64, handler, params string) *executorv1.Trigger {
	return &executorv1.Trigger{TriggerId: id, JobId: job, GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, Handler: handler, Params: params, ShardTotal: 1}
}

// gates drive the "gate" handler: each fire signals when it starts and runs until released
// (then succeeds) or cancelled (then returns the context's error).
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	started, release chan struct{}
}

func (g *gates) get(id string) *gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m[id] == nil {
		g.m[id] = &gate{started: make(chan struct{}), release: make(chan struct{})}
	}
	return g.m[id]
}

func (g *gates) handler(ctx context.Context, job *sdk.Job) error {
	gt := g.get(job.TriggerID)
	close(gt.started)
	job.Logf("gate %s open", job.TriggerID)
	select {
	case <-gt.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gates) waitStarted(t *testing.T, id string) {
	t.Helper()
	select {
	case <-g.get(id).started:
	case <-time.After(wait):
		t.Fatalf("fire %s did not start", id)
	}
}

func (g *gates) release(id string) { close(g.get(id).release) }

func TestScriptRunsWithArgsEnvAndNumberedLines(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tr := script("11-1763884800123-1-2", 11, strings.Join([]string{
		`echo "args:$1|$2|$3"`,
		`echo "env:$JOBMESH_JOB_ID|$JOBMESH_TRIGGER_ID|$JOBMESH_SCHEDULED_UNIX_MS|$JOBMESH_ATTEMPT|$JOBMESH_SHARD_INDEX|$JOBMESH_SHARD_TOTAL|$JOBMESH_PARAMS"`,
		`echo "trace:$TRACEPARENT"`,
		`echo "to stderr" >&2`,
	}, "\n"))
	tr.Params, tr.ShardIndex, tr.ShardTotal, tr.Attempt, tr.ScheduledUnixMs = "a b; echo injected", 1, 3, 2, 1763884800123
	tr.TraceContext = map[string]string{"traceparent": traceparent}
	h.accept(t, tr)

	r := h.wantResult(t, tr.TriggerId, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	lines := h.ingest.Lines(tr.TriggerId)
	want := []string{
		"args:a b; echo injected|1|3",
		"env:11|11-1763884800123-1-2|1763884800123|2|1|3|a b; echo injected",
		"trace:" + traceparent,
		"to stderr",
	}
	var got []string
	for i, l := range lines {
		if l.GetLineNo() != int64(i+1) {
			t.Errorf("line %d: got line_no %d, want %d", i, l.GetLineNo(), i+1)
		}
		got = append(got, l.GetText())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("lines: got %q, want %q", got, want)
	}
	if r.GetExecutorAddress() != h.exec.AdvertiseAddr() || r.GetJobId() != 11 || r.GetTraceId() != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("result: got address %q job %d trace %q, want %q 11 0af7651916cd43dd8448eb211c80319c", r.GetExecutorAddress(), r.GetJobId(), r.GetTraceId(), h.exec.AdvertiseAddr())
	}
	if r.GetStartUnixMs() == 0 || r.GetEndUnixMs() < r.GetStartUnixMs() {
		t.Errorf("result times: got start %d end %d", r.GetStartUnixMs(), r.GetEndUnixMs())
	}

	// The local log serves the same lines, from a line on.
	lr, err := h.cli.Log(ctxFor(t), &executorv1.LogRequest{TriggerId: tr.TriggerId, FromLine: 2})
	if err != nil {
		t.Fatalf("Log: %v", err)
	}
	if !slices.Equal(lr.GetLines(), want[1:]) || lr.GetFromLine() != 2 || lr.GetToLine() != 4 || !lr.GetIsEnd() {
		t.Fatalf("Log: got %d–%d %q end %v, want 2–4 %q end true", lr.GetFromLine(), lr.GetToLine(), lr.GetLines(), lr.GetIsEnd(), want[1:])
	}
	if _, err := h.cli.Log(ctxFor(t), &executorv1.LogRequest{TriggerId: "no-such-fire", FromLine: 1}); status.Code(err) != codes.NotFound {
		t.Fatalf("Log of an unknown fire: got %v, want NotFound", err)
	}
}

func TestScriptExitCodeFails(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	h.accept(t, script("12-1-0-0", 12, "echo before\nexit 3"))
	h.wantResult(t, "12-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "exit code 3")
	if got := h.ingest.Texts("12-1-0-0"); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("lines: got %q, want [before]", got)
	}
}

func TestScriptTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	tr := script("13-1-0-0", 13, "sleep 1000 &\necho \"child $!\"\nwait")
	tr.TimeoutSeconds = 1
	h.accept(t, tr)
	h.wantResult(t, tr.TriggerId, logsv1.RunStatus_RUN_STATUS_TIMEOUT, "timed out after 1s")
	lines := h.ingest.Texts(tr.TriggerId)
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "child ") {
		t.Fatalf("lines: got %q, want [child <pid>]", lines)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(lines[0], "child "))
	if err != nil {
		t.Fatal(err)
	}
	if !diesWithin(pid, 5*time.Second) {
		t.Fatalf("child sleep %d survived the timeout", pid)
	}
}

// diesWithin reports whether pid exits within d, waiting on its pidfd (readable once it has
// exited, reaped or not). A process killed as its fire ends closes its output, which the fire's
// end waits for, a moment before the kernel marks it exited: on a busy machine a check right
// after the result can still find it.
func diesWithin(pid int, d time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true // gone and reaped
	}
	if err != nil {
		return !alive(pid)
	}
	defer unix.Close(fd)
	for deadline := time.Now().Add(d); ; {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds())+1)
		if err == nil && n > 0 {
			return true
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return !alive(pid)
		}
	}
}

// alive reports whether pid runs: it exists and is not a zombie waiting for its reaper.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

func TestKillByTriggerID(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	h.accept(t, script("14-1-0-0", 14, "echo started\nsleep 1000"))
	h.waitLines(t, "14-1-0-0", 1)
	lr, err := h.cli.Log(ctxFor(t), &executorv1.LogRequest{TriggerId: "14-1-0-0"})
	if err != nil || !slices.Equal(lr.GetLines(), []string{"started"}) || lr.GetIsEnd() {
		t.Fatalf("Log while running: got %v %v, want [started] and not the end", lr, err)
	}

	resp, err := h.cli.Kill(ctxFor(t), &executorv1.KillRequest{TriggerId: "14-1-0-0"})
	if err != nil || !resp.GetKilled() {
		t.Fatalf("Kill: got %v %v, want killed", resp, err)
	}
	h.wantResult(t, "14-1-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "killed by request")

	resp, err = h.cli.Kill(ctxFor(t), &executorv1.KillRequest{TriggerId: "14-1-0-0"})
	if err != nil || resp.GetKilled() {
		t.Fatalf("second Kill: got %v %v, want not killed", resp, err)
	}
}

func TestKillByJobIDEndsRunningAndQueued(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	h.accept(t, bean("15-1-0-0", 15, "gate", ""))
	h.gates.waitStarted(t, "15-1-0-0")
	h.accept(t, bean("15-2-0-0", 15, "gate", ""))

	resp, err := h.cli.Kill(ctxFor(t), &executorv1.KillRequest{JobId: 15})
	if err != nil || !resp.GetKilled() {
		t.Fatalf("Kill: got %v %v, want killed", resp, err)
	}
	h.wantResult(t, "15-1-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "killed by request")
	h.wantResult(t, "15-2-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "killed by request")
}

func TestBlockStrategies(t *testing.T) {
	t.Parallel()
	t.Run("serial execution queues", func(t *testing.T) {
		t.Parallel()
		h := start(t, nil)
		h.accept(t, bean("21-1-0-0", 21, "gate", ""))
		h.gates.waitStarted(t, "21-1-0-0")
		second := bean("21-2-0-0", 21, "gate", "")
		second.BlockStrategy = schedulerv1.BlockStrategy_BLOCK_STRATEGY_SERIAL_EXECUTION
		h.accept(t, second)

		idle, err := h.cli.IdleBeat(ctxFor(t), &executorv1.IdleBeatRequest{JobId: 21})
		if err != nil || idle.GetIdle() {
			t.Fatalf("IdleBeat: got %v %v, want busy", idle, err)
		}
		beat, err := h.cli.Beat(ctxFor(t), &executorv1.BeatRequest{})
		if err != nil || beat.GetRunning() != 1 || beat.GetQueued() != 1 || beat.GetAppName() != "test-app" {
			t.Fatalf("Beat: got %v %v, want test-app running 1 queued 1", beat, err)
		}
		h.gates.release("21-1-0-0")
		first := h.wantResult(t, "21-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
		h.gates.waitStarted(t, "21-2-0-0")
		h.gates.release("21-2-0-0")
		r2 := h.wantResult(t, "21-2-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
		if r2.GetStartUnixMs() < first.GetEndUnixMs() {
			t.Fatalf("second fire started at %d, before the first ended at %d", r2.GetStartUnixMs(), first.GetEndUnixMs())
		}
		idle, err = h.cli.IdleBeat(ctxFor(t), &executorv1.IdleBeatRequest{JobId: 99})
		if err != nil || !idle.GetIdle() {
			t.Fatalf("IdleBeat of an unknown job: got %v %v, want idle", idle, err)
		}
	})
	t.Run("discard later rejects", func(t *testing.T) {
		t.Parallel()
		h := start(t, nil)
		h.accept(t, bean("22-1-0-0", 22, "gate", ""))
		h.gates.waitStarted(t, "22-1-0-0")
		second := bean("22-2-0-0", 22, "gate", "")
		second.BlockStrategy = schedulerv1.BlockStrategy_BLOCK_STRATEGY_DISCARD_LATER
		ack := h.run(t, second)[0]
		if ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_REJECTED || !strings.Contains(ack.GetMessage(), "DISCARD_LATER") {
			t.Fatalf("got %v %q, want REJECTED naming DISCARD_LATER", ack.GetOutcome(), ack.GetMessage())
		}
		h.gates.release("22-1-0-0")
		h.wantResult(t, "22-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	})
	t.Run("cover early kills the running fire", func(t *testing.T) {
		t.Parallel()
		h := start(t, nil)
		h.accept(t, bean("23-1-0-0", 23, "gate", ""))
		h.gates.waitStarted(t, "23-1-0-0")
		second := bean("23-2-0-0", 23, "gate", "")
		second.BlockStrategy = schedulerv1.BlockStrategy_BLOCK_STRATEGY_COVER_EARLY
		h.accept(t, second)
		h.wantResult(t, "23-1-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "COVER_EARLY")
		h.gates.waitStarted(t, "23-2-0-0")
		h.gates.release("23-2-0-0")
		h.wantResult(t, "23-2-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	})
}

func TestGlueUpdateReplacesWorker(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	h.accept(t, script("24-1-0-0", 24, "echo v1\nsleep 1000"))
	h.waitLines(t, "24-1-0-0", 1)
	v2 := script("24-2-0-0", 24, "echo v2")
	v2.GlueUpdatedUnixMs = 2
	h.accept(t, v2)
	h.wantResult(t, "24-1-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "GLUE source changed")
	h.wantResult(t, "24-2-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if got := h.ingest.Texts("24-2-0-0"); !slices.Equal(got, []string{"v2"}) {
		t.Fatalf("lines: got %q, want [v2]", got)
	}
}

func TestDuplicateTriggerID(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	tr := bean("25-1-0-0", 25, "gate", "")
	acks := h.run(t, tr, tr)
	if acks[0].GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED || acks[1].GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_DUPLICATE {
		t.Fatalf("same batch: got %v %v, want ACCEPTED DUPLICATE", acks[0].GetOutcome(), acks[1].GetOutcome())
	}
	h.gates.release("25-1-0-0")
	h.wantResult(t, "25-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if ack := h.run(t, tr)[0]; ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_DUPLICATE {
		t.Fatalf("after the run: got %v, want DUPLICATE", ack.GetOutcome())
	}
	// Results leave in order: a RUNNING queued by the duplicates would arrive before the result
	// of a fire accepted after them.
	h.accept(t, bean("25-2-0-0", 25, "gate", ""))
	h.gates.release("25-2-0-0")
	h.wantResult(t, "25-2-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if results, _ := h.ingest.Receipts("25-1-0-0"); results != 1 {
		t.Fatalf("results received: got %d, want 1", results)
	}
	wantStatuses(t, h.ingest, "25-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS)
}

// wantStatuses checks the results logsvc received for a fire, in order: its RUNNING result and
// then its final one, or the final one alone when the RUNNING result had not left yet as the
// fire ended (it gives way to the final result).
func wantStatuses(t *testing.T, ingest *sdktest.Ingest, id string, final logsv1.RunStatus) {
	t.Helper()
	got := ingest.Statuses(id)
	if !slices.Equal(got, []logsv1.RunStatus{logsv1.RunStatus_RUN_STATUS_RUNNING, final}) && !slices.Equal(got, []logsv1.RunStatus{final}) {
		t.Errorf("results of %s: got %v, want [RUNNING %v] or [%v]", id, got, final, final)
	}
}

// TestSeen: Seen names the asked ids this executor accepted — running, queued behind a running
// fire, or finished (remembered) — each once, in request order; a rejected or unknown id is not
// seen. It takes the access token like Run, and names the bad field of a bad request.
func TestSeen(t *testing.T) {
	t.Parallel()
	h := start(t, func(cfg *sdk.Config) { cfg.AccessToken = "s3cret" })
	h.accept(t, bean("26-1-0-0", 26, "gate", ""))
	h.gates.waitStarted(t, "26-1-0-0")
	h.accept(t, bean("26-2-0-0", 26, "gate", "")) // queued behind 26-1
	h.accept(t, bean("27-1-0-0", 27, "gate", ""))
	h.gates.release("27-1-0-0")
	h.wantResult(t, "27-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if ack := h.run(t, bean("28-1-0-0", 28, "no-such-handler", ""))[0]; ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_REJECTED {
		t.Fatalf("fire of an unknown handler: got %v, want REJECTED", ack.GetOutcome())
	}

	ask := []string{"29-1-0-0", "27-1-0-0", "28-1-0-0", "26-2-0-0", "26-1-0-0", "27-1-0-0"}
	resp, err := h.cli.Seen(ctxFor(t), &executorv1.SeenRequest{TriggerIds: ask})
	if err != nil {
		t.Fatalf("Seen: %v", err)
	}
	if got, want := resp.GetSeenTriggerIds(), []string{"27-1-0-0", "26-2-0-0", "26-1-0-0"}; !slices.Equal(got, want) {
		t.Errorf("Seen(%v): got %v, want %v", ask, got, want)
	}
	if resp, err := h.cli.Seen(ctxFor(t), &executorv1.SeenRequest{}); err != nil || len(resp.GetSeenTriggerIds()) != 0 {
		t.Errorf("Seen of nothing: got %v, %v; want nothing, no error", resp.GetSeenTriggerIds(), err)
	}
	h.gates.release("26-1-0-0")
	h.gates.release("26-2-0-0")

	for _, token := range []string{"", "wrong"} {
		cli := sdktest.Client(t, h.exec.Addr(), token)
		if _, err := cli.Seen(ctxFor(t), &executorv1.SeenRequest{TriggerIds: []string{"26-1-0-0"}}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("Seen with token %q: got %v, want Unauthenticated", token, err)
		}
	}

	tooMany := make([]string, 10_001)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("30-%d-0-0", i)
	}
	for _, tc := range []struct {
		name  string
		ids   []string
		field string
	}{
		{"too many", tooMany, "trigger_ids:"},
		{"a path", []string{"30-1-0-0", "../30-1-0-0"}, "trigger_ids[1]"},
		{"empty", []string{""}, "trigger_ids[0]"},
		{"too long", []string{strings.Repeat("3", 129)}, "trigger_ids[0]"},
	} {
		_, err := h.cli.Seen(ctxFor(t), &executorv1.SeenRequest{TriggerIds: tc.ids})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("Seen with %s: got %v, want InvalidArgument naming %s", tc.name, err, tc.field)
		}
	}
	if _, err := h.cli.Seen(ctxFor(t), &executorv1.SeenRequest{TriggerIds: tooMany[:10_000]}); err != nil {
		t.Errorf("Seen of 10,000 ids: %v", err)
	}
}

func TestAcceptedFireReportsRunningThenFinal(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	running, final := logsv1.RunStatus_RUN_STATUS_RUNNING, logsv1.RunStatus_RUN_STATUS_SUCCESS

	// RUNNING arrives while the handler still runs.
	before := time.Now().UnixMilli()
	h.accept(t, bean("81-1-0-0", 81, "gate", ""))
	after := time.Now().UnixMilli()
	var r *logsv1.RunResult
	if err := h.ingest.Wait(ctxFor(t), func() bool {
		var ok bool
		r, ok = h.ingest.Running("81-1-0-0")
		return ok
	}); err != nil {
		t.Fatalf("no RUNNING result while the fire runs: %v", err)
	}
	if r.GetJobId() != 81 || r.GetExecutorAddress() != h.exec.AdvertiseAddr() || r.GetStartUnixMs() < before || r.GetStartUnixMs() > after || r.GetEndUnixMs() != 0 {
		t.Errorf("RUNNING result: got %v, want job 81, address %s, start in [%d, %d], no end", r, h.exec.AdvertiseAddr(), before, after)
	}
	if _, ok := h.ingest.Result("81-1-0-0"); ok {
		t.Fatalf("final result before the handler returned")
	}
	h.gates.release("81-1-0-0")
	h.wantResult(t, "81-1-0-0", final, "")
	if got, want := h.ingest.Statuses("81-1-0-0"), []logsv1.RunStatus{running, final}; !slices.Equal(got, want) {
		t.Errorf("results of 81-1-0-0: got %v, want %v", got, want)
	}

	// Fires that end at once, and one killed while queued, never report RUNNING after the end.
	h.exec.Handle("quick", func(ctx context.Context, job *sdk.Job) error {
		job.Logf("quick %s", job.TriggerID)
		return nil
	})
	var fires []*executorv1.Trigger
	for i := range 20 {
		fires = append(fires, bean(fmt.Sprintf("82-%d-0-0", i), int64(820+i), "quick", ""))
	}
	for _, ack := range h.run(t, fires...) {
		if ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
			t.Fatalf("fire %s: got %v %q, want ACCEPTED", ack.GetTriggerId(), ack.GetOutcome(), ack.GetMessage())
		}
	}
	h.accept(t, bean("83-1-0-0", 83, "gate", ""))
	h.gates.waitStarted(t, "83-1-0-0")
	h.accept(t, bean("83-2-0-0", 83, "gate", ""))
	if resp, err := h.cli.Kill(ctxFor(t), &executorv1.KillRequest{TriggerId: "83-2-0-0"}); err != nil || !resp.GetKilled() {
		t.Fatalf("Kill: got %v %v, want killed", resp, err)
	}
	h.wantResult(t, "83-2-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "killed by request")
	h.gates.release("83-1-0-0")
	h.wantResult(t, "83-1-0-0", final, "")
	for _, f := range fires {
		h.wantResult(t, f.GetTriggerId(), final, "")
		wantStatuses(t, h.ingest, f.GetTriggerId(), final)
	}
	wantStatuses(t, h.ingest, "83-2-0-0", logsv1.RunStatus_RUN_STATUS_KILLED)
}

// TestFinalResultTakesThePlaceOfAnUnsentRunning: while logsvc is unreachable nothing leaves, so
// a fire's RUNNING result is still queued when the fire ends; only its final result is then
// sent, carrying what the RUNNING one said (start, executor, job, trace), and both spool records
// are released.
func TestFinalResultTakesThePlaceOfAnUnsentRunning(t *testing.T) {
	t.Parallel()
	spoolDir := filepath.Join(t.TempDir(), "spool")
	ended := make(chan sdk.Result, 10)
	addr := deadAddr(t)
	h := start(t, func(c *sdk.Config) {
		c.LogsvcAddr, c.SpoolDir = addr, spoolDir
		c.OnResult = func(r sdk.Result) { ended <- r }
	})
	h.exec.Handle("noop", func(context.Context, *sdk.Job) error { return nil })
	h.exec.Handle("logs", func(_ context.Context, job *sdk.Job) error {
		job.Logf("one line")
		return nil
	})
	release := make(chan struct{})
	h.exec.Handle("hold", func(ctx context.Context, _ *sdk.Job) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	noop := bean("84-1-0-0", 84, "noop", "")
	noop.TraceContext = map[string]string{"traceparent": tp}
	before := time.Now().UnixMilli()
	h.accept(t, noop)
	h.accept(t, bean("85-1-0-0", 85, "hold", ""))
	h.accept(t, bean("85-2-0-0", 85, "hold", "")) // queued behind 85-1
	h.accept(t, bean("86-1-0-0", 86, "logs", ""))
	if resp, err := h.cli.Kill(ctxFor(t), &executorv1.KillRequest{TriggerId: "85-2-0-0"}); err != nil || !resp.GetKilled() {
		t.Fatalf("Kill: got %v %v, want killed", resp, err)
	}
	close(release)
	for range 4 {
		select {
		case <-ended:
		case <-ctxFor(t).Done():
			t.Fatal("fires did not end")
		}
	}
	after := time.Now().UnixMilli()
	// logsvc comes up.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	logsv1.RegisterIngestServiceServer(srv, h.ingest)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)

	r := h.wantResult(t, "84-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if r.GetJobId() != 84 || r.GetExecutorAddress() != h.exec.AdvertiseAddr() || r.GetStartUnixMs() < before || r.GetStartUnixMs() > r.GetEndUnixMs() ||
		r.GetEndUnixMs() > after || r.GetTraceId() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("final result: got %v, want job 84, address %s, start and end in [%d, %d], trace 4bf92f35…", r, h.exec.AdvertiseAddr(), before, after)
	}
	h.wantResult(t, "85-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	h.wantResult(t, "85-2-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "killed by request")
	h.wantResult(t, "86-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	for id, want := range map[string][]logsv1.RunStatus{
		"84-1-0-0": {logsv1.RunStatus_RUN_STATUS_SUCCESS},
		"85-1-0-0": {logsv1.RunStatus_RUN_STATUS_SUCCESS},
		"85-2-0-0": {logsv1.RunStatus_RUN_STATUS_KILLED},
	} {
		if got := h.ingest.Statuses(id); !slices.Equal(got, want) {
			t.Errorf("results of %s: got %v, want %v", id, got, want)
		}
	}
	// The fire that logged: its result waited for the line to be acknowledged, while the RUNNING
	// result could leave as soon as logsvc was back.
	wantStatuses(t, h.ingest, "86-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS)
	// Every spool record was acknowledged, the RUNNING ones that gave way included.
	if err := sdktest.Stop(h.exec); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	segs, err := filepath.Glob(filepath.Join(spoolDir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if fi, err := os.Stat(s); err != nil || fi.Size() != 0 {
			t.Errorf("spool segment %s after everything was acknowledged: %v %v, want empty", filepath.Base(s), fi.Size(), err)
		}
	}
}

func TestBeanHandlers(t *testing.T) {
	t.Parallel()
	var inits, destroys int
	destroyed := make(chan struct{})
	h := start(t, func(cfg *sdk.Config) { cfg.IdleTimeout = 100 * time.Millisecond })
	e := h.exec
	e.Handle("hello", func(ctx context.Context, job *sdk.Job) error {
		job.Logf("hello %s", job.Params)
		job.Logf("shard %d of %d, attempt %d, %s\nsecond line", job.ShardIndex, job.ShardTotal, job.Attempt, job.TriggerType)
		return nil
	}, sdk.WithInit(func() error { inits++; return nil }), sdk.WithDestroy(func() { destroys++; close(destroyed) }))
	e.Handle("fails", func(ctx context.Context, job *sdk.Job) error { return errors.New("no invoices today") })
	e.Handle("panics", func(ctx context.Context, job *sdk.Job) error { panic("boom") })
	hello := bean("31-1-0-0", 31, "hello", "world")
	hello.TriggerType = schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL
	h.accept(t, hello)
	h.wantResult(t, "31-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	want := []string{"hello world", "shard 0 of 1, attempt 0, MANUAL", "second line"}
	if got := h.ingest.Texts("31-1-0-0"); !slices.Equal(got, want) {
		t.Fatalf("lines: got %q, want %q", got, want)
	}
	for i, l := range h.ingest.Lines("31-1-0-0") {
		if l.GetLineNo() != int64(i+1) {
			t.Fatalf("line %q: got line_no %d, want %d", l.GetText(), l.GetLineNo(), i+1)
		}
	}

	h.accept(t, bean("32-1-0-0", 32, "fails", ""))
	h.wantResult(t, "32-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "no invoices today")
	h.accept(t, bean("33-1-0-0", 33, "panics", ""))
	h.wantResult(t, "33-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "panic: boom")

	// The idle worker is reclaimed, which runs the destroy hook once after one init.
	select {
	case <-destroyed:
	case <-time.After(wait):
		t.Fatal("idle worker not reclaimed")
	}
	if inits != 1 || destroys != 1 {
		t.Fatalf("init/destroy: got %d/%d, want 1/1", inits, destroys)
	}
}

func TestCommandHandler(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	h.accept(t, bean("34-1-0-0", 34, sdk.CommandHandler, `["printf", "%s|%s\n", "a b", "c;$(echo no)"]`))
	h.wantResult(t, "34-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if got := h.ingest.Texts("34-1-0-0"); !slices.Equal(got, []string{"a b|c;$(echo no)"}) {
		t.Fatalf("lines: got %q", got)
	}
	h.accept(t, bean("35-1-0-0", 35, sdk.CommandHandler, "echo  hello   world"))
	h.wantResult(t, "35-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if got := h.ingest.Texts("35-1-0-0"); !slices.Equal(got, []string{"hello world"}) {
		t.Fatalf("lines: got %q", got)
	}
	h.accept(t, bean("36-1-0-0", 36, sdk.CommandHandler, "no-such-program-jobmesh"))
	h.wantResult(t, "36-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "command no-such-program-jobmesh not found on this executor")
}

func TestRejections(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	missing := ""
	for _, c := range []struct {
		interp string
		glue   schedulerv1.GlueType
	}{{"php", schedulerv1.GlueType_GLUE_TYPE_GLUE_PHP}, {"pwsh", schedulerv1.GlueType_GLUE_TYPE_GLUE_POWERSHELL}} {
		if _, err := exec.LookPath(c.interp); err != nil {
			missing = c.interp
			tr := script("41-1-0-0", 41, "echo hi")
			tr.GlueType = c.glue
			ack := h.run(t, tr)[0]
			if ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_REJECTED || ack.GetMessage() != "interpreter "+c.interp+" not found on this executor" {
				t.Errorf("missing %s: got %v %q", c.interp, ack.GetOutcome(), ack.GetMessage())
			}
			break
		}
	}
	if missing == "" {
		t.Log("php and pwsh are both installed: the missing-interpreter case is not exercised")
	}

	groovy := script("42-1-0-0", 42, "println 1")
	groovy.GlueType = schedulerv1.GlueType_GLUE_TYPE_GLUE_GROOVY
	badShard := bean("44-1-0-0", 44, "gate", "")
	badShard.ShardIndex = 3
	acks := h.run(t,
		bean("43-1-0-0", 43, "nope", ""),
		groovy,
		badShard,
		bean("../etc/passwd", 45, "gate", ""),
		bean("46-1-0-0", 46, "gate", ""), // a good fire in a bad batch still runs
	)
	want := []struct {
		outcome executorv1.RunOutcome
		msg     string
	}{
		{executorv1.RunOutcome_RUN_OUTCOME_REJECTED, "no handler nope on executor test-app"},
		{executorv1.RunOutcome_RUN_OUTCOME_REJECTED, "GLUE_GROOVY is not supported"},
		{executorv1.RunOutcome_RUN_OUTCOME_REJECTED, "shard_index 3 out of range"},
		{executorv1.RunOutcome_RUN_OUTCOME_REJECTED, "trigger_id"},
		{executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED, ""},
	}
	for i, w := range want {
		if acks[i].GetOutcome() != w.outcome || !strings.Contains(acks[i].GetMessage(), w.msg) {
			t.Errorf("fire %d: got %v %q, want %v containing %q", i, acks[i].GetOutcome(), acks[i].GetMessage(), w.outcome, w.msg)
		}
	}
	h.gates.release("46-1-0-0")
	h.wantResult(t, "46-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	// Results leave in order, so anything sent for the rejected fires has arrived by now.
	for _, id := range []string{"43-1-0-0", "42-1-0-0", "44-1-0-0"} {
		if got := h.ingest.Statuses(id); len(got) != 0 {
			t.Errorf("results of rejected fire %s: got %v, want none", id, got)
		}
	}
}

func TestAccessToken(t *testing.T) {
	t.Parallel()
	h := start(t, func(cfg *sdk.Config) { cfg.AccessToken = "s3cret" })
	if _, err := h.cli.Beat(ctxFor(t), &executorv1.BeatRequest{}); err != nil {
		t.Fatalf("Beat with the token: %v", err)
	}
	for _, token := range []string{"", "wrong"} {
		cli := sdktest.Client(t, h.exec.Addr(), token)
		if _, err := cli.Beat(ctxFor(t), &executorv1.BeatRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("Beat with token %q: got %v, want Unauthenticated", token, err)
		}
		if _, err := cli.Run(ctxFor(t), &executorv1.RunRequest{Triggers: []*executorv1.Trigger{bean("51-1-0-0", 51, "gate", "")}}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("Run with token %q: got %v, want Unauthenticated", token, err)
		}
	}
}

func TestDeliverySurvivesRefusedAndDroppedConnections(t *testing.T) {
	t.Parallel()
	ingest := sdktest.NewIngest()
	ingest.RefuseConns(2)
	ingest.DropStreams(2)
	e, err := sdk.New(sdk.Config{
		AppName: "test-app", InstanceID: "t1", ListenAddr: "127.0.0.1:0", LogsvcAddr: ingest.Serve(t), AccessToken: "test-app-token",
		LogDir: t.TempDir(), Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Handle("three", func(ctx context.Context, job *sdk.Job) error {
		for i := 1; i <= 3; i++ {
			job.Logf("%s line %d", job.TriggerID, i)
		}
		return nil
	})
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdktest.Stop(e) })
	h := &harness{exec: e, ingest: ingest, cli: sdktest.Client(t, e.Addr(), "test-app-token")}

	const fires = 20
	var ids []string
	for i := range fires {
		id := fmt.Sprintf("%d-1-0-0", 60+i)
		ids = append(ids, id)
		h.accept(t, bean(id, int64(60+i), "three", ""))
	}
	for _, id := range ids {
		h.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
		// A result is delivered only after its lines: they are all there already.
		lines := ingest.Lines(id)
		if len(lines) != 3 {
			t.Fatalf("fire %s: got %d lines with its result, want 3", id, len(lines))
		}
		for i, l := range lines {
			if l.GetLineNo() != int64(i+1) || l.GetText() != fmt.Sprintf("%s line %d", id, i+1) {
				t.Fatalf("fire %s line %d: got %d %q", id, i+1, l.GetLineNo(), l.GetText())
			}
		}
	}
	if got := len(ingest.Results()); got != fires {
		t.Fatalf("results stored: got %d, want %d", got, fires)
	}
	refused, dropped := ingest.Misbehaved()
	if refused != 2 || dropped != 2 {
		t.Fatalf("misbehaviour exercised: got %d refused connections and %d dropped batches, want 2 and 2", refused, dropped)
	}
}

// TestStopKillsRunningAndFlushesResults: when Stop's context ends, the running script is killed;
// the fire queued behind it never starts; Stop says what it cut short, and returns after logsvc
// acknowledged both results.
func TestStopKillsRunningAndFlushesResults(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	h.accept(t, script("71-1-0-0", 71, "echo started\nsleep 1000"))
	h.waitLines(t, "71-1-0-0", 1)
	h.accept(t, script("71-2-0-0", 71, "echo never"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // no time for running handlers
	err := h.exec.Stop(ctx)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "1 running handler(s) killed") {
		t.Fatalf("Stop: got %v, want 1 running handler killed because the context ended", err)
	}
	if again := h.exec.Stop(t.Context()); again != err { // idempotent
		t.Fatalf("second Stop: got %v, want the first's %v", again, err)
	}
	for _, id := range []string{"71-1-0-0", "71-2-0-0"} {
		r, ok := h.ingest.Result(id)
		if !ok || r.GetStatus() != logsv1.RunStatus_RUN_STATUS_KILLED {
			t.Fatalf("fire %s after Stop: got %v %v, want KILLED", id, r, ok)
		}
	}
}

// TestStopWaitsForRunningHandlers: Stop refuses new fires and ends queued ones at once, lets the
// running handler finish while its context lasts, and returns nil after a clean drain, with the
// handler's result delivered.
func TestStopWaitsForRunningHandlers(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	started, release := make(chan struct{}), make(chan struct{})
	h.exec.Handle("slow", func(ctx context.Context, job *sdk.Job) error {
		close(started)
		select {
		case <-release:
			job.SetMessage("drained")
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	h.accept(t, bean("72-1-0-0", 72, "slow", ""))
	<-started
	h.accept(t, bean("72-2-0-0", 72, "slow", "")) // queued behind the running fire
	stopped := make(chan error, 1)
	go func() { stopped <- h.exec.Stop(context.Background()) }()
	// The queued fire ends KILLED while the running one still runs.
	h.wantResult(t, "72-2-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "killed: executor stopping")
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v while a handler was running", err)
	default:
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Stop after a clean drain: %v", err)
	}
	r, ok := h.ingest.Result("72-1-0-0")
	if !ok || r.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || r.GetMessage() != "drained" {
		t.Fatalf("running fire after Stop: got %v %v, want SUCCESS with its message", r, ok)
	}
}

func TestNewNamesBadFields(t *testing.T) {
	t.Parallel()
	_, err := sdk.New(sdk.Config{AppName: "bad app!", RegistryAddr: "no-port"})
	if err == nil {
		t.Fatal("New: got nil error")
	}
	for _, field := range []string{"AppName", "LogDir", "RegistryAddr", "AccessToken"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("New error %q does not name %s", err, field)
		}
	}
}

func TestRunLogRetention(t *testing.T) {
	t.Parallel()
	logDir := t.TempDir()
	now := time.Now().UTC()
	old := now.AddDate(0, 0, -4).Format(time.DateOnly)
	kept := now.AddDate(0, 0, -2).Format(time.DateOnly)
	for _, day := range []string{old, kept, "not-a-day"} {
		if err := os.MkdirAll(filepath.Join(logDir, "runs", day), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(logDir, "runs", day, "1-1-0-0.log"), []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := start(t, func(cfg *sdk.Config) { cfg.LogDir, cfg.LogRetentionDays = logDir, 3 })
	// Start pruned the old day; the recent one and foreign directories stay, and Log reads them.
	if _, err := os.Stat(filepath.Join(logDir, "runs", old)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("day %s older than 3 days: got %v, want it deleted", old, err)
	}
	for _, day := range []string{kept, "not-a-day"} {
		if _, err := os.Stat(filepath.Join(logDir, "runs", day, "1-1-0-0.log")); err != nil {
			t.Fatalf("day %s: %v, want it kept", day, err)
		}
	}
	lr, err := h.cli.Log(ctxFor(t), &executorv1.LogRequest{TriggerId: "1-1-0-0", FromLine: 1})
	if err != nil || !slices.Equal(lr.GetLines(), []string{"x"}) || !lr.GetIsEnd() {
		t.Fatalf("Log of a fire from before the start: got %v %v", lr, err)
	}
}

// TestSuccessMessage: a handler's SetMessage reaches logsvc as its successful result's message
// (the last call wins); a failing handler's message is its error, whatever it set; a call after
// the handler returned changes nothing.
func TestSuccessMessage(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	late := make(chan *sdk.Job, 1)
	h.exec.Handle("report", func(ctx context.Context, job *sdk.Job) error {
		job.SetMessage("draft")
		job.SetMessage("exported " + job.Params)
		switch job.Params {
		case "broken":
			return errors.New("export failed")
		case "late":
			late <- job
		}
		return nil
	})
	h.accept(t, bean("91-1-0-0", 91, "report", "sales"))
	h.wantResult(t, "91-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if got := h.result(t, "91-1-0-0").GetMessage(); got != "exported sales" {
		t.Errorf("success message: got %q, want %q", got, "exported sales")
	}
	h.accept(t, bean("92-1-0-0", 92, "report", "broken"))
	if got := h.wantResult(t, "92-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "").GetMessage(); got != "export failed" {
		t.Errorf("failure message: got %q, want the error's %q", got, "export failed")
	}
	h.accept(t, bean("93-1-0-0", 93, "report", "late"))
	h.wantResult(t, "93-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	(<-late).SetMessage("after the return")
	if got := h.result(t, "93-1-0-0").GetMessage(); got != "exported late" {
		t.Errorf("message set after the return: got %q, want %q", got, "exported late")
	}
}
