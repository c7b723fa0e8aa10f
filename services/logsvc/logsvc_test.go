package logsvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
)

// waitFor bounds every wait on a signal.
const waitFor = 30 * time.Second

// base is the scheduled time of most test runs: far from today, so the dashboard's "today" only
// sees the runs of its own test.
var base = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// fakeKiller records the kills it is asked for.
type fakeKiller struct {
	mu    sync.Mutex
	calls []string
}

func (k *fakeKiller) KillTrigger(_ context.Context, triggerID string, jobID int64, address string) (bool, string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, fmt.Sprintf("%s/%d/%s", triggerID, jobID, address))
	return true, "", nil
}

// env is one logsvc on a real store behind a real gRPC server.
type env struct {
	store  dbtest.Store
	db     *db.DB
	svc    *Service
	killer *fakeKiller
	ingest logsv1.IngestServiceClient
	logs   logsv1.LogServiceClient
}

func newEnv(t *testing.T, st dbtest.Store) *env {
	t.Helper()
	// Retention off: the suite's runs are scheduled years ago.
	return newEnvWith(t, st, Config{Retention: -1}, true)
}

// newEnvWith is newEnv with a config; start false leaves the background work off, so a test
// can drive it (sweeps, alarm passes) itself with an injected clock.
func newEnvWith(t testing.TB, st dbtest.Store, cfg Config, start bool) *env {
	t.Helper()
	d := dbtest.Open(t, st.Config, "logs", MigrationsFS())
	k := &fakeKiller{}
	svc, err := New(cfg, d, k)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if start {
		if err := svc.Start(context.Background()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if err := svc.Start(context.Background()); err == nil {
			t.Errorf("second Start: got nil error, want one")
		}
		t.Cleanup(svc.Stop)
		t.Cleanup(svc.Stop) // idempotent
	}
	g := grpcserver.New(slog.New(slog.DiscardHandler))
	svc.Register(g)
	ln := bufconn.Listen(1 << 20)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///logsvc",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return &env{store: st, db: d, svc: svc, killer: k, ingest: logsv1.NewIngestServiceClient(conn), logs: logsv1.NewLogServiceClient(conn)}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

// within runs f (a blocking receive) and fails the test when it takes longer than waitFor.
func within[T any](t *testing.T, what string, f func() (T, error)) (T, error) {
	t.Helper()
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() { v, err := f(); ch <- res{v, err} }()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-time.After(waitFor):
		t.Fatalf("%s: nothing within %v", what, waitFor)
		var zero T
		return zero, nil
	}
}

// bidi is the client side of an ingest stream.
type bidi[Req, Resp any] interface {
	Send(*Req) error
	Recv() (*Resp, error)
	CloseSend() error
}

// sendBatch sends one batch on a new stream and returns its ack, or the stream's error.
func sendBatch[Req, Resp any](t *testing.T, open func(context.Context, ...grpc.CallOption) (bidi[Req, Resp], error), req *Req) (*Resp, error) {
	t.Helper()
	st, err := open(ctxFor(t))
	if err != nil {
		t.Fatalf("open ingest stream: %v", err)
	}
	if err := st.Send(req); err != nil {
		t.Fatalf("send batch: %v", err)
	}
	resp, err := within(t, "ack", st.Recv)
	st.CloseSend()
	return resp, err
}

func (e *env) records(t *testing.T, recs ...*logsv1.TriggerRecord) error {
	t.Helper()
	open := func(ctx context.Context, o ...grpc.CallOption) (bidi[logsv1.IngestTriggerRecordsRequest, logsv1.IngestTriggerRecordsResponse], error) {
		return e.ingest.IngestTriggerRecords(ctx, o...)
	}
	ack, err := sendBatch(t, open, &logsv1.IngestTriggerRecordsRequest{BatchId: 7, Records: recs})
	if err == nil && ack.GetBatchId() != 7 {
		t.Errorf("ack batch id: got %d, want 7", ack.GetBatchId())
	}
	return err
}

func (e *env) results(t *testing.T, res ...*logsv1.RunResult) ([]string, error) {
	t.Helper()
	open := func(ctx context.Context, o ...grpc.CallOption) (bidi[logsv1.IngestResultsRequest, logsv1.IngestResultsResponse], error) {
		return e.ingest.IngestResults(ctx, o...)
	}
	ack, err := sendBatch(t, open, &logsv1.IngestResultsRequest{BatchId: 8, Results: res})
	if err != nil {
		return nil, err
	}
	if ack.GetBatchId() != 8 {
		t.Errorf("ack batch id: got %d, want 8", ack.GetBatchId())
	}
	return ack.GetRefusedTriggerIds(), nil
}

func (e *env) lines(t *testing.T, lines ...*logsv1.LogLine) error {
	t.Helper()
	open := func(ctx context.Context, o ...grpc.CallOption) (bidi[logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse], error) {
		return e.ingest.IngestLogLines(ctx, o...)
	}
	_, err := sendBatch(t, open, &logsv1.IngestLogLinesRequest{BatchId: 9, Lines: lines})
	return err
}

// mustRecords, mustResults and mustLines ingest and fail the test on error.
func (e *env) mustRecords(t *testing.T, recs ...*logsv1.TriggerRecord) {
	t.Helper()
	if err := e.records(t, recs...); err != nil {
		t.Fatalf("ingest records: %v", err)
	}
}

func (e *env) mustResults(t *testing.T, res ...*logsv1.RunResult) []string {
	t.Helper()
	refused, err := e.results(t, res...)
	if err != nil {
		t.Fatalf("ingest results: %v", err)
	}
	return refused
}

func (e *env) mustLines(t *testing.T, lines ...*logsv1.LogLine) {
	t.Helper()
	if err := e.lines(t, lines...); err != nil {
		t.Fatalf("ingest lines: %v", err)
	}
}

func (e *env) run(t *testing.T, id string) *logsv1.Run {
	t.Helper()
	resp, err := e.logs.GetRun(ctxFor(t), &logsv1.GetRunRequest{Id: id})
	if err != nil {
		t.Fatalf("GetRun(%s): %v", id, err)
	}
	return resp.GetRun()
}

// sameRun compares runs but not their alarm status, which the alarm loop sets on its own time.
func sameRun(a, b *logsv1.Run) bool {
	a, b = proto.CloneOf(a), proto.CloneOf(b)
	a.AlarmStatus, b.AlarmStatus = 0, 0
	return proto.Equal(a, b)
}

func record(id string, job, schedMs int64) *logsv1.TriggerRecord {
	return &logsv1.TriggerRecord{
		TriggerId: id, JobId: job, GroupId: 1, TriggerType: schedulerv1.TriggerType_TRIGGER_TYPE_CRON,
		ScheduledUnixMs: schedMs, TriggerUnixMs: schedMs + 2, ExecutorAddress: "10.0.0.1:9999", Handler: "demo",
		Params: "p", ShardIndex: 0, ShardTotal: 1, Attempt: 0, RetriesLeft: 2,
		RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_FIRST, TriggerOutcome: logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK,
		TriggerMessage: "route FIRST: 10.0.0.1:9999", TraceId: "0123456789abcdef0123456789abcdef",
	}
}

func result(id string, job int64, st logsv1.RunStatus, startMs int64) *logsv1.RunResult {
	return &logsv1.RunResult{
		TriggerId: id, JobId: job, Status: st, Message: "done: " + st.String(), StartUnixMs: startMs, EndUnixMs: startMs + 50,
		ExecutorAddress: "10.0.0.1:9999",
	}
}

func line(id string, no int64, text string) *logsv1.LogLine {
	return &logsv1.LogLine{TriggerId: id, LineNo: no, UnixMs: base + no, Text: text}
}

// fieldOf returns the code of err and the first field its BadRequest details name.
func fieldOf(err error) (codes.Code, string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return st.Code(), br.GetFieldViolations()[0].GetField()
		}
	}
	return st.Code(), ""
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, st)
			for _, c := range []struct {
				name string
				fn   func(*testing.T, *env)
			}{
				{"ResultAndRecordInEitherOrder", testEitherOrder},
				{"DuplicateBatchesStoredOnce", testDuplicates},
				{"SecondResultRefused", testSecondResultRefused},
				{"FailedTriggerCompletesRun", testFailedTrigger},
				{"LinesDedupeAndOrder", testLines},
				{"ListRunsFiltersAndPages", testListRuns},
				{"WatchCompletionsOnceAndResume", testWatch},
				{"WatchHeaderSaysWhereItStarts", testWatchStart},
				{"TailFollowsRunToItsEnd", testTail},
				{"ClearRuns", testClear},
				{"InvalidInputNamesField", testInvalid},
				{"AckAfterCommit", testAckAfterCommit},
				{"KillRun", testKill},
				{"ReportAndDashboard", testReport},
				{"Retention", testRetention},
				{"ConcurrentWritersCompleteOnce", testConcurrent},
				{"LookupTriggers", testLookup},
				{"RunningThenFinalCompletesOnce", testRunningThenFinal},
				{"FinalThenRunningChangesNothing", testFinalThenRunning},
				{"RunningAloneNeverCompletes", testRunningAlone},
			} {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.fn(t, e)
				})
			}
		})
	}
}

func testEitherOrder(t *testing.T, e *env) {
	const job = 101
	a, b := "101-a", "101-b"
	e.mustRecords(t, record(a, job, base))
	if got := e.mustResults(t, result(a, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+5)); len(got) != 0 {
		t.Errorf("refused: got %v, want none", got)
	}
	if got := e.mustResults(t, result(b, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+5)); len(got) != 0 {
		t.Errorf("refused: got %v, want none", got)
	}
	early := e.run(t, b)
	if early.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || early.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNSPECIFIED {
		t.Errorf("run from a result alone: got status %s outcome %s, want SUCCESS UNSPECIFIED", early.GetStatus(), early.GetTriggerOutcome())
	}
	e.mustRecords(t, record(b, job, base))
	ra, rb := e.run(t, a), e.run(t, b)
	rb.Id = a
	if !sameRun(ra, rb) {
		t.Errorf("record then result:\n%v\nresult then record:\n%v", ra, rb)
	}
	if ra.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || ra.GetHandleMessage() != "done: RUN_STATUS_SUCCESS" ||
		ra.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK || ra.GetScheduledTime().AsTime().UnixMilli() != base ||
		ra.GetEndTime().AsTime().UnixMilli() != base+55 || ra.GetHandler() != "demo" || ra.GetRetriesLeft() != 2 {
		t.Errorf("run: got %v", ra)
	}
}

func testDuplicates(t *testing.T, e *env) {
	const job = 102
	recs := []*logsv1.TriggerRecord{record("102-a", job, base), record("102-b", job, base+1), record("102-a", job, base)}
	e.mustRecords(t, recs...)
	e.mustRecords(t, recs...)
	res := result("102-a", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+3)
	e.mustResults(t, res)
	if got := e.mustResults(t, res, res); !slices.Equal(got, []string{"102-a"}) {
		t.Errorf("resent result: got refused %v, want [102-a]", got)
	}
	ls := []*logsv1.LogLine{line("102-a", 1, "one"), line("102-a", 2, "two")}
	e.mustLines(t, ls...)
	e.mustLines(t, ls...)
	runs, err := e.logs.ListRuns(ctxFor(t), &logsv1.ListRunsRequest{JobId: job})
	if err != nil {
		t.Fatalf("ListRuns: %v", err)
	}
	if got := len(runs.GetRuns()); got != 2 {
		t.Errorf("runs: got %d, want 2", got)
	}
	lr, err := e.logs.ListRunLines(ctxFor(t), &logsv1.ListRunLinesRequest{Id: "102-a"})
	if err != nil {
		t.Fatalf("ListRunLines: %v", err)
	}
	if got := len(lr.GetLines()); got != 2 {
		t.Errorf("lines: got %d, want 2", got)
	}
}

func testSecondResultRefused(t *testing.T, e *env) {
	const job = 103
	id := "103-a"
	e.mustRecords(t, record(id, job, base))
	e.mustResults(t, result(id, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+1))
	before := e.run(t, id)
	second := result(id, job, logsv1.RunStatus_RUN_STATUS_FAIL, base+9)
	second.Message = "late failure"
	if got := e.mustResults(t, second, result("103-b", job, logsv1.RunStatus_RUN_STATUS_FAIL, base)); !slices.Equal(got, []string{id}) {
		t.Errorf("refused: got %v, want [%s]", got, id)
	}
	if after := e.run(t, id); !sameRun(after, before) {
		t.Errorf("refused result changed the run:\ngot  %v\nwant %v", after, before)
	}
	if got := e.run(t, "103-b").GetStatus(); got != logsv1.RunStatus_RUN_STATUS_FAIL {
		t.Errorf("other result of the batch: got %s, want FAIL", got)
	}
}

// watch starts a completion stream and waits until its starting cursor is fixed.
func watch(t *testing.T, e *env, after int64) (grpc.ServerStreamingClient[logsv1.WatchCompletionsResponse], context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxFor(t))
	w, err := e.logs.WatchCompletions(ctx, &logsv1.WatchCompletionsRequest{AfterCursor: after})
	if err != nil {
		t.Fatalf("WatchCompletions: %v", err)
	}
	if _, err := within(t, "watch headers", w.Header); err != nil {
		t.Fatalf("watch headers: %v", err)
	}
	return w, cancel
}

// collect receives completions of job until one for trigger id last arrives.
func collect(t *testing.T, w grpc.ServerStreamingClient[logsv1.WatchCompletionsResponse], job int64, last string) []*logsv1.Completion {
	t.Helper()
	var got []*logsv1.Completion
	for {
		resp, err := within(t, "completions", w.Recv)
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		for _, c := range resp.GetCompletions() {
			if c.GetJobId() != job {
				continue
			}
			got = append(got, c)
			if c.GetTriggerId() == last {
				return got
			}
		}
	}
}

func ids(cs []*logsv1.Completion) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.GetTriggerId()+"="+strings.TrimPrefix(c.GetStatus().String(), "RUN_STATUS_"))
	}
	return out
}

// testWatchStart: a completion stream's header says the cursor it starts after: logsvc's newest
// for after_cursor 0 (no later than a completion already sent, no earlier than one the
// stream then sends), the given cursor otherwise, and 0 with from_oldest, which sends every
// completion kept.
func testWatchStart(t *testing.T, e *env) {
	const job = 130
	first, cancel := watch(t, e, 0)
	defer cancel()
	fromNewest := startOf(t, first)
	rec := record("130-a", job, base)
	rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
	rec.TriggerMessage = "no executor"
	e.mustRecords(t, rec)
	c := collect(t, first, job, "130-a")[0]
	if c.GetCursor() <= fromNewest {
		t.Errorf("stream from the newest started after %d, then sent cursor %d", fromNewest, c.GetCursor())
	}
	again, cancel2 := watch(t, e, 0)
	defer cancel2()
	if got := startOf(t, again); got < c.GetCursor() {
		t.Errorf("stream from the newest started after %d, before completion %d already made", got, c.GetCursor())
	}
	// A stream after a given cursor starts there. The cursor given is this completion's own
	// (never 0, which asks for the newest): subtests run in parallel, so it may be the first.
	given, cancel3 := watch(t, e, c.GetCursor())
	defer cancel3()
	if got := startOf(t, given); got != c.GetCursor() {
		t.Errorf("stream after cursor %d: header says %d", c.GetCursor(), got)
	}
	// from_oldest: every completion kept, this one included.
	ctx, cancel4 := context.WithCancel(ctxFor(t))
	defer cancel4()
	oldest, err := e.logs.WatchCompletions(ctx, &logsv1.WatchCompletionsRequest{FromOldest: true})
	if err != nil {
		t.Fatalf("WatchCompletions from the oldest: %v", err)
	}
	if got := startOf(t, oldest); got != 0 {
		t.Errorf("stream from the oldest: header says %d, want 0", got)
	}
	if got := collect(t, oldest, job, "130-a"); got[0].GetCursor() != c.GetCursor() {
		t.Errorf("stream from the oldest sent %v, want completion %d", got, c.GetCursor())
	}
}

// startOf reads the starting cursor a completion stream's header carries.
func startOf(t *testing.T, w grpc.ServerStreamingClient[logsv1.WatchCompletionsResponse]) int64 {
	t.Helper()
	md, err := w.Header()
	if err != nil {
		t.Fatalf("watch header: %v", err)
	}
	v := md.Get(completionCursorHeader)
	if len(v) != 1 {
		t.Fatalf("watch header %v: want one %s", md, completionCursorHeader)
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil {
		t.Fatalf("watch header %s=%q: %v", completionCursorHeader, v[0], err)
	}
	return n
}

func testFailedTrigger(t *testing.T, e *env) {
	const job = 104
	id := "104-a"
	w, cancel := watch(t, e, 0)
	defer cancel()
	rec := record(id, job, base)
	rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
	rec.TriggerMessage = "no executor in group 1"
	e.mustRecords(t, rec)
	r := e.run(t, id)
	if r.GetStatus() != logsv1.RunStatus_RUN_STATUS_FAIL || !strings.Contains(r.GetHandleMessage(), "trigger failed") || r.GetEndTime() == nil {
		t.Errorf("run after a failed trigger: got %v", r)
	}
	cs := collect(t, w, job, id)
	if got, want := ids(cs), []string{id + "=FAIL"}; !slices.Equal(got, want) {
		t.Errorf("completions: got %v, want %v", got, want)
	}
	if c := cs[0]; c.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED ||
		c.GetScheduledUnixMs() != base || c.GetParams() != "p" || c.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_CRON {
		t.Errorf("completion: got %v", c)
	}
	// The executor's result overrules the scheduler's account (a Run that failed after the
	// executor had the fire): the run is the executor's, and its completion is corrected.
	if got := e.mustResults(t, result(id, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base)); len(got) != 0 {
		t.Errorf("result after a failed trigger: got refused %v, want it taken", got)
	}
	if r := e.run(t, id); r.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK ||
		r.GetHandleMessage() != "done: RUN_STATUS_SUCCESS" || r.GetTriggerMessage() != "no executor in group 1" {
		t.Errorf("run after a failed trigger and the executor's result: got %v", r)
	}
	cs = collect(t, w, job, id)
	if len(cs) != 1 || cs[0].GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || cs[0].GetReplacesStatus() != logsv1.RunStatus_RUN_STATUS_FAIL {
		t.Errorf("correction: got %v, want SUCCESS replacing FAIL", cs)
	}
	if got := e.mustResults(t, result(id, job, logsv1.RunStatus_RUN_STATUS_FAIL, base)); !slices.Equal(got, []string{id}) {
		t.Errorf("second result: got refused %v, want [%s]", got, id)
	}
}

func testLines(t *testing.T, e *env) {
	const job = 105
	id := "105-a"
	e.mustRecords(t, record(id, job, base))
	e.mustLines(t, line(id, 3, "three"), line(id, 1, "one"), line(id, 2, "two"), line(id, 2, "two again"))
	e.mustLines(t, line(id, 2, "two later"), line(id, 4, "four\x00nul"))
	ctx := ctxFor(t)
	all, err := e.logs.ListRunLines(ctx, &logsv1.ListRunLinesRequest{Id: id})
	if err != nil {
		t.Fatalf("ListRunLines: %v", err)
	}
	var got []string
	for _, l := range all.GetLines() {
		got = append(got, fmt.Sprintf("%d:%s", l.GetLineNo(), l.GetText()))
	}
	if want := []string{"1:one", "2:two", "3:three", "4:four\uFFFDnul"}; !slices.Equal(got, want) {
		t.Errorf("lines: got %q, want %q", got, want)
	}
	if all.GetNextLine() != 5 || all.GetIsEnd() {
		t.Errorf("running run: got next %d end %v, want 5 false", all.GetNextLine(), all.GetIsEnd())
	}
	e.mustResults(t, result(id, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
	page, err := e.logs.ListRunLines(ctx, &logsv1.ListRunLinesRequest{Id: id, FromLine: 2, Limit: 2})
	if err != nil {
		t.Fatalf("ListRunLines: %v", err)
	}
	if len(page.GetLines()) != 2 || page.GetLines()[0].GetLineNo() != 2 || page.GetNextLine() != 4 || page.GetIsEnd() {
		t.Errorf("page from 2: got %v", page)
	}
	last, err := e.logs.ListRunLines(ctx, &logsv1.ListRunLinesRequest{Id: id, FromLine: 4, Limit: 2})
	if err != nil {
		t.Fatalf("ListRunLines: %v", err)
	}
	if len(last.GetLines()) != 1 || last.GetNextLine() != 5 || !last.GetIsEnd() {
		t.Errorf("last page: got %v", last)
	}
	if _, err := e.logs.ListRunLines(ctx, &logsv1.ListRunLinesRequest{Id: "105-missing"}); status.Code(err) != codes.NotFound {
		t.Errorf("missing run: got %v, want NotFound", err)
	}
}

func testListRuns(t *testing.T, e *env) {
	const job = 106
	// Seven runs, oldest first; the newest two in another group, one via MANUAL on another address.
	for i := range 7 {
		r := record(fmt.Sprintf("106-%d", i), job, base+int64(i)*1000)
		if i >= 5 {
			r.GroupId = 2
		}
		if i == 3 {
			r.TriggerType = schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL
			r.ExecutorAddress = "10.0.0.2:9999"
		}
		e.mustRecords(t, r) // one batch each: seq follows i
	}
	e.mustResults(t, result("106-1", job, logsv1.RunStatus_RUN_STATUS_FAIL, base), result("106-2", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
	ctx := ctxFor(t)
	list := func(req *logsv1.ListRunsRequest) []string {
		t.Helper()
		req.JobId = job
		resp, err := e.logs.ListRuns(ctx, req)
		if err != nil {
			t.Fatalf("ListRuns(%v): %v", req, err)
		}
		var out []string
		for _, r := range resp.GetRuns() {
			out = append(out, strings.TrimPrefix(r.GetId(), "106-"))
		}
		if resp.GetNextPageToken() != "" {
			out = append(out, "more")
		}
		return out
	}
	for _, c := range []struct {
		name string
		req  *logsv1.ListRunsRequest
		want []string
	}{
		{"all", &logsv1.ListRunsRequest{}, []string{"6", "5", "4", "3", "2", "1", "0"}},
		{"group", &logsv1.ListRunsRequest{GroupId: 2}, []string{"6", "5"}},
		{"status", &logsv1.ListRunsRequest{Status: logsv1.RunStatus_RUN_STATUS_RUNNING}, []string{"6", "5", "4", "3", "0"}},
		{"failed", &logsv1.ListRunsRequest{Status: logsv1.RunStatus_RUN_STATUS_FAIL}, []string{"1"}},
		{"trigger type", &logsv1.ListRunsRequest{TriggerType: schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL}, []string{"3"}},
		{"address", &logsv1.ListRunsRequest{ExecutorAddress: "10.0.0.2:9999"}, []string{"3"}},
		{"time range", &logsv1.ListRunsRequest{StartTime: timestamppb.New(time.UnixMilli(base + 2000)), EndTime: timestamppb.New(time.UnixMilli(base + 4000))}, []string{"3", "2"}},
	} {
		if got := list(c.req); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	var pages [][]string
	token := ""
	for {
		resp, err := e.logs.ListRuns(ctx, &logsv1.ListRunsRequest{JobId: job, PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatalf("ListRuns page: %v", err)
		}
		var page []string
		for _, r := range resp.GetRuns() {
			page = append(page, strings.TrimPrefix(r.GetId(), "106-"))
		}
		pages = append(pages, page)
		if token = resp.GetNextPageToken(); token == "" || len(pages) > 5 {
			break
		}
	}
	if got, want := fmt.Sprint(pages), "[[6 5 4] [3 2 1] [0]]"; got != want {
		t.Errorf("pages: got %s, want %s", got, want)
	}
	// Jumping to a page by number skips the runs before it; every page tells how many match.
	first, err := e.logs.ListRuns(ctx, &logsv1.ListRunsRequest{JobId: job, PageSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		req   *logsv1.ListRunsRequest
		want  string
		total int64
		next  bool
	}{
		{"page 2", &logsv1.ListRunsRequest{JobId: job, PageSize: 3, Skip: 3}, "[3 2 1]", 7, true},
		{"page 3", &logsv1.ListRunsRequest{JobId: job, PageSize: 3, Skip: 6}, "[0]", 7, false},
		{"past the end", &logsv1.ListRunsRequest{JobId: job, PageSize: 3, Skip: 9}, "[]", 7, false},
		{"skip after a token", &logsv1.ListRunsRequest{JobId: job, PageSize: 3, Skip: 1, PageToken: first.GetNextPageToken()}, "[2 1 0]", 7, false},
		{"filtered", &logsv1.ListRunsRequest{JobId: job, PageSize: 3, Status: logsv1.RunStatus_RUN_STATUS_FAIL}, "[1]", 1, false},
	} {
		resp, err := e.logs.ListRuns(ctx, c.req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var page []string
		for _, r := range resp.GetRuns() {
			page = append(page, strings.TrimPrefix(r.GetId(), "106-"))
		}
		if got := fmt.Sprint(page); got != c.want || resp.GetTotalSize() != c.total || resp.GetTotalSizeCapped() || (resp.GetNextPageToken() != "") != c.next {
			t.Errorf("%s: got %s of %d (capped %v, next %q), want %s of %d (next page: %v)", c.name, got, resp.GetTotalSize(),
				resp.GetTotalSizeCapped(), resp.GetNextPageToken(), c.want, c.total, c.next)
		}
	}
}

func testWatch(t *testing.T, e *env) {
	const job = 107
	w, cancel := watch(t, e, 0)
	defer cancel()
	e.mustRecords(t, record("107-a", job, base), record("107-b", job, base), record("107-c", job, base))
	e.mustResults(t, result("107-a", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
	e.mustResults(t, result("107-b", job, logsv1.RunStatus_RUN_STATUS_FAIL, base), result("107-c", job, logsv1.RunStatus_RUN_STATUS_TIMEOUT, base))
	first := collect(t, w, job, "107-c")
	if got, want := ids(first), []string{"107-a=SUCCESS", "107-b=FAIL", "107-c=TIMEOUT"}; !slices.Equal(got, want) {
		t.Errorf("completions: got %v, want %v", got, want)
	}
	for i := 1; i < len(first); i++ {
		if first[i].GetCursor() <= first[i-1].GetCursor() {
			t.Errorf("cursors not increasing: %d then %d", first[i-1].GetCursor(), first[i].GetCursor())
		}
	}
	// Resent results, a resent record and a result that came before its record: one more
	// completion only, sent when the record arrives.
	e.mustResults(t, result("107-a", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base), result("107-d", job, logsv1.RunStatus_RUN_STATUS_KILLED, base))
	e.mustRecords(t, record("107-b", job, base))
	e.mustRecords(t, record("107-d", job, base))
	if got, want := ids(collect(t, w, job, "107-d")), []string{"107-d=KILLED"}; !slices.Equal(got, want) {
		t.Errorf("completions after duplicates: got %v, want %v", got, want)
	}
	cancel()
	w2, cancel2 := watch(t, e, first[0].GetCursor())
	defer cancel2()
	if got, want := ids(collect(t, w2, job, "107-d")), []string{"107-b=FAIL", "107-c=TIMEOUT", "107-d=KILLED"}; !slices.Equal(got, want) {
		t.Errorf("resumed completions: got %v, want %v", got, want)
	}
}

func testTail(t *testing.T, e *env) {
	const job = 108
	id := "108-a"
	e.mustRecords(t, record(id, job, base))
	e.mustLines(t, line(id, 1, "one"), line(id, 2, "two"))
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	tail, err := e.logs.TailRun(ctx, &logsv1.TailRunRequest{Id: id})
	if err != nil {
		t.Fatalf("TailRun: %v", err)
	}
	var got []string
	next := func() *logsv1.TailRunResponse {
		t.Helper()
		resp, err := within(t, "tail", tail.Recv)
		if err != nil {
			t.Fatalf("tail: %v", err)
		}
		for _, l := range resp.GetLines() {
			got = append(got, l.GetText())
		}
		return resp
	}
	if resp := next(); resp.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING {
		t.Errorf("first tail message: got status %s, want RUNNING", resp.GetStatus())
	}
	for len(got) < 2 {
		next()
	}
	e.mustLines(t, line(id, 3, "three"))
	for len(got) < 3 {
		next()
	}
	e.mustResults(t, result(id, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
	if resp := next(); resp.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS {
		t.Errorf("last tail message: got status %s, want SUCCESS", resp.GetStatus())
	}
	if _, err := within(t, "tail end", tail.Recv); !errors.Is(err, io.EOF) {
		t.Errorf("after the final status: got %v, want EOF", err)
	}
	if want := []string{"one", "two", "three"}; !slices.Equal(got, want) {
		t.Errorf("tailed lines: got %q, want %q", got, want)
	}
	// A tail of a finished run sends what is left and ends.
	again, err := e.logs.TailRun(ctx, &logsv1.TailRunRequest{Id: id, FromLine: 2})
	if err != nil {
		t.Fatalf("TailRun: %v", err)
	}
	resp, err := within(t, "tail", again.Recv)
	if err != nil || len(resp.GetLines()) != 2 || resp.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS {
		t.Errorf("tail of a finished run: got %v, %v", resp, err)
	}
	if _, err := within(t, "tail end", again.Recv); !errors.Is(err, io.EOF) {
		t.Errorf("tail of a finished run: got %v, want EOF", err)
	}
	missing, err := e.logs.TailRun(ctx, &logsv1.TailRunRequest{Id: "108-missing"})
	if err != nil {
		t.Fatalf("TailRun: %v", err)
	}
	if _, err := within(t, "tail", missing.Recv); status.Code(err) != codes.NotFound {
		t.Errorf("tail of a missing run: got %v, want NotFound", err)
	}
}

func testClear(t *testing.T, e *env) {
	ctx := ctxFor(t)
	count := func(job int64) int {
		t.Helper()
		resp, err := e.logs.ListRuns(ctx, &logsv1.ListRunsRequest{JobId: job, PageSize: 1000})
		if err != nil {
			t.Fatalf("ListRuns: %v", err)
		}
		return len(resp.GetRuns())
	}
	// before_time: more runs than one delete batch, plus a run of another job at the same time.
	var recs []*logsv1.TriggerRecord
	for i := range deleteBatch + 200 {
		recs = append(recs, record(fmt.Sprintf("109-%05d", i), 109, base+int64(i)))
	}
	keep := record("109-keep", 109, base+1e6)
	other := record("110-a", 110, base)
	e.mustRecords(t, append(recs, keep, other)...)
	e.mustLines(t, line("109-00000", 1, "gone"), line("109-keep", 1, "kept"))
	resp, err := e.logs.ClearRuns(ctx, &logsv1.ClearRunsRequest{JobId: 109, BeforeTime: timestamppb.New(time.UnixMilli(base + 1e5))})
	if err != nil {
		t.Fatalf("ClearRuns before: %v", err)
	}
	if got, want := resp.GetDeleted(), int64(len(recs)); got != want {
		t.Errorf("deleted before: got %d, want %d", got, want)
	}
	if got := count(109); got != 1 {
		t.Errorf("runs of job 109 left: got %d, want 1", got)
	}
	if got := count(110); got != 1 {
		t.Errorf("runs of job 110 left: got %d, want 1", got)
	}
	if _, err := e.logs.ListRunLines(ctx, &logsv1.ListRunLinesRequest{Id: "109-00000"}); status.Code(err) != codes.NotFound {
		t.Errorf("lines of a cleared run: got %v, want NotFound", err)
	}
	if l, err := e.logs.ListRunLines(ctx, &logsv1.ListRunLinesRequest{Id: "109-keep"}); err != nil || len(l.GetLines()) != 1 {
		t.Errorf("lines of a kept run: got %v, %v", l, err)
	}

	// keep_newest: per job, within group 9.
	for i := range 5 {
		r := record(fmt.Sprintf("111-%d", i), 111, base)
		r.GroupId = 9
		e.mustRecords(t, r)
	}
	for i := range 2 {
		r := record(fmt.Sprintf("112-%d", i), 112, base)
		r.GroupId = 9
		e.mustRecords(t, r)
	}
	resp, err = e.logs.ClearRuns(ctx, &logsv1.ClearRunsRequest{GroupId: 9, KeepNewest: 2})
	if err != nil {
		t.Fatalf("ClearRuns keep: %v", err)
	}
	if got := resp.GetDeleted(); got != 3 {
		t.Errorf("deleted keep newest: got %d, want 3", got)
	}
	left, err := e.logs.ListRuns(ctx, &logsv1.ListRunsRequest{GroupId: 9})
	if err != nil {
		t.Fatalf("ListRuns: %v", err)
	}
	var got []string
	for _, r := range left.GetRuns() {
		got = append(got, r.GetId())
	}
	if want := []string{"112-1", "112-0", "111-4", "111-3"}; !slices.Equal(got, want) {
		t.Errorf("runs kept: got %v, want %v", got, want)
	}
}

func testInvalid(t *testing.T, e *env) {
	ctx := ctxFor(t)
	rec := record("113-a", 113, base)
	noOutcome := record("113-b", 113, base)
	noOutcome.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNSPECIFIED
	for _, c := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"empty trigger id", func() error {
			return e.records(t, rec, &logsv1.TriggerRecord{TriggerOutcome: logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK})
		}, "records[1].trigger_id"},
		{"no outcome", func() error { return e.records(t, noOutcome) }, "records[0].trigger_outcome"},
		{"unspecified status", func() error {
			_, err := e.results(t, result("113-a", 113, logsv1.RunStatus_RUN_STATUS_RUNNING, base),
				result("113-b", 113, logsv1.RunStatus_RUN_STATUS_UNSPECIFIED, base))
			return err
		}, "results[1].status"},
		{"unknown status", func() error {
			_, err := e.results(t, result("113-a", 113, logsv1.RunStatus(42), base))
			return err
		}, "results[0].status"},
		{"line zero", func() error { return e.lines(t, line("113-a", 1, "x"), line("113-a", 0, "y")) }, "lines[1].line_no"},
		{"page size", func() error { _, err := e.logs.ListRuns(ctx, &logsv1.ListRunsRequest{PageSize: 1001}); return err }, "page_size"},
		{"page token", func() error { _, err := e.logs.ListRuns(ctx, &logsv1.ListRunsRequest{PageToken: "nope"}); return err }, "page_token"},
		{"negative skip", func() error { _, err := e.logs.ListRuns(ctx, &logsv1.ListRunsRequest{Skip: -1}); return err }, "skip"},
		{"skip too far", func() error {
			_, err := e.logs.ListRuns(ctx, &logsv1.ListRunsRequest{Skip: 1_000_001})
			return err
		}, "skip"},
		{"line limit", func() error {
			_, err := e.logs.ListRunLines(ctx, &logsv1.ListRunLinesRequest{Id: "x", Limit: 10001})
			return err
		}, "limit"},
		{"get run id", func() error { _, err := e.logs.GetRun(ctx, &logsv1.GetRunRequest{}); return err }, "id"},
		{"clear neither", func() error { _, err := e.logs.ClearRuns(ctx, &logsv1.ClearRunsRequest{JobId: 113}); return err }, "before_time"},
		{"clear both", func() error {
			_, err := e.logs.ClearRuns(ctx, &logsv1.ClearRunsRequest{BeforeTime: timestamppb.Now(), KeepNewest: 3})
			return err
		}, "before_time"},
		{"keep newest", func() error { _, err := e.logs.ClearRuns(ctx, &logsv1.ClearRunsRequest{KeepNewest: -1}); return err }, "keep_newest"},
		{"report date", func() error {
			_, err := e.logs.GetReport(ctx, &logsv1.GetReportRequest{StartDate: "2001-13-01", EndDate: "2001-01-01"})
			return err
		}, "start_date"},
		{"lookup too many", func() error {
			_, err := e.logs.LookupTriggers(ctx, &logsv1.LookupTriggersRequest{TriggerIds: make([]string, maxLookupIDs+1)})
			return err
		}, "trigger_ids"},
		{"report range", func() error {
			_, err := e.logs.GetReport(ctx, &logsv1.GetReportRequest{StartDate: "2001-01-01", EndDate: "2002-01-03"})
			return err
		}, "end_date"},
	} {
		code, field := fieldOf(c.call())
		if code != codes.InvalidArgument || field != c.field {
			t.Errorf("%s: got %s naming %q, want InvalidArgument naming %q", c.name, code, field, c.field)
		}
	}
	// A rejected batch stores nothing, not even its valid records or RUNNING results.
	if _, err := e.logs.GetRun(ctx, &logsv1.GetRunRequest{Id: "113-a"}); status.Code(err) != codes.NotFound {
		t.Errorf("run of a rejected batch: got %v, want NotFound", err)
	}
}

func testAckAfterCommit(t *testing.T, e *env) {
	// A second handle on the same store: its own connections see only committed data.
	other := dbtest.Open(t, e.store.Config, "logs", MigrationsFS())
	ctx := ctxFor(t)
	e.mustRecords(t, record("114-a", 114, base))
	var st, outcome int32
	if err := other.QueryRowContext(ctx, other.Q(`SELECT status, trigger_outcome FROM runs WHERE trigger_id = $1`), "114-a").Scan(&st, &outcome); err != nil {
		t.Fatalf("read after ack: %v", err)
	}
	if st != statusRunning || outcome != outcomeOK {
		t.Errorf("row after ack: got status %d outcome %d, want %d %d", st, outcome, statusRunning, outcomeOK)
	}
	e.mustResults(t, result("114-a", 114, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
	var n int
	if err := other.QueryRowContext(ctx, other.Q(`SELECT COUNT(*) FROM completions WHERE trigger_id = $1`), "114-a").Scan(&n); err != nil {
		t.Fatalf("read after ack: %v", err)
	}
	if n != 1 {
		t.Errorf("completions after ack: got %d, want 1", n)
	}
	e.mustLines(t, line("114-a", 1, "x"))
	if err := other.QueryRowContext(ctx, other.Q(`SELECT COUNT(*) FROM run_lines WHERE trigger_id = $1`), "114-a").Scan(&n); err != nil {
		t.Fatalf("read after ack: %v", err)
	}
	if n != 1 {
		t.Errorf("lines after ack: got %d, want 1", n)
	}
}

func testKill(t *testing.T, e *env) {
	ctx := ctxFor(t)
	e.mustRecords(t, record("115-a", 115, base), record("115-b", 115, base))
	e.mustResults(t, result("115-b", 115, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
	resp, err := e.logs.KillRun(ctx, &logsv1.KillRunRequest{Id: "115-a"})
	if err != nil || !resp.GetKilled() {
		t.Errorf("KillRun: got %v, %v, want killed", resp, err)
	}
	e.killer.mu.Lock()
	calls := slices.Clone(e.killer.calls)
	e.killer.mu.Unlock()
	if !slices.Contains(calls, "115-a/115/10.0.0.1:9999") {
		t.Errorf("kills: got %v, want one of 115-a/115/10.0.0.1:9999", calls)
	}
	if _, err := e.logs.KillRun(ctx, &logsv1.KillRunRequest{Id: "115-b"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("kill a finished run: got %v, want FailedPrecondition", err)
	}
	if _, err := e.logs.KillRun(ctx, &logsv1.KillRunRequest{Id: "115-missing"}); status.Code(err) != codes.NotFound {
		t.Errorf("kill a missing run: got %v, want NotFound", err)
	}
}

func testReport(t *testing.T, e *env) {
	ctx := ctxFor(t)
	day := time.Date(1999, 6, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	e.mustRecords(t, record("116-a", 116, day), record("116-b", 116, day+dayMs-1), record("116-c", 116, day+3600_000),
		record("116-d", 116, day+2*dayMs))
	e.mustResults(t, result("116-a", 116, logsv1.RunStatus_RUN_STATUS_SUCCESS, day), result("116-b", 116, logsv1.RunStatus_RUN_STATUS_SUCCESS, day),
		result("116-c", 116, logsv1.RunStatus_RUN_STATUS_KILLED, day))
	rep, err := e.logs.GetReport(ctx, &logsv1.GetReportRequest{StartDate: "1999-06-01", EndDate: "1999-06-03"})
	if err != nil {
		t.Fatalf("GetReport: %v", err)
	}
	var got []string
	for _, d := range rep.GetDays() {
		got = append(got, fmt.Sprintf("%s %d/%d/%d", d.GetDate(), d.GetRunning(), d.GetSuccess(), d.GetFail()))
	}
	if want := []string{"1999-06-01 0/2/1", "1999-06-02 0/0/0", "1999-06-03 1/0/0"}; !slices.Equal(got, want) {
		t.Errorf("report: got %v, want %v", got, want)
	}

	now := time.Now().UnixMilli()
	e.mustRecords(t, record("117-a", 117, now), record("117-b", 117, now), record("117-c", 117, now))
	e.mustResults(t, result("117-a", 117, logsv1.RunStatus_RUN_STATUS_SUCCESS, now), result("117-b", 117, logsv1.RunStatus_RUN_STATUS_FAIL, now))
	dash, err := e.logs.GetDashboard(ctx, &logsv1.GetDashboardRequest{})
	if err != nil {
		t.Fatalf("GetDashboard: %v", err)
	}
	if now/dayMs != time.Now().UnixMilli()/dayMs {
		return // midnight passed: today is another day
	}
	if dash.GetRunCount() < 7 || dash.GetRunsToday() != 3 || dash.GetSuccessRateToday() != 0.5 {
		t.Errorf("dashboard: got %v, want run_count ≥ 7, runs_today 3, success_rate_today 0.5", dash)
	}
}

func testRetention(t *testing.T, e *env) {
	day := time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC)
	e.mustRecords(t, record("118-old", 118, day.UnixMilli()), record("118-new", 118, day.AddDate(0, 0, 50).UnixMilli()))
	p, err := New(Config{Retention: 30 * 24 * time.Hour}, e.db, e.killer)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	p.now = func() time.Time { return day.AddDate(0, 0, 60) }
	if _, err := p.prune(ctxFor(t)); err != nil {
		t.Fatalf("prune: %v", err)
	}
	resp, err := e.logs.ListRuns(ctxFor(t), &logsv1.ListRunsRequest{JobId: 118})
	if err != nil {
		t.Fatalf("ListRuns: %v", err)
	}
	if len(resp.GetRuns()) != 1 || resp.GetRuns()[0].GetId() != "118-new" {
		t.Errorf("after retention: got %v, want only 118-new", resp.GetRuns())
	}
}

// testConcurrent races records against results of the same runs on separate streams, from
// several senders at once: every run must complete exactly once, in cursor order.
func testConcurrent(t *testing.T, e *env) {
	const job, senders, perSender = 119, 4, 25
	w, cancel := watch(t, e, 0)
	defer cancel()
	ctx := ctxFor(t)
	send := func(id string, i int) error {
		if i%2 == 0 {
			st, err := e.ingest.IngestTriggerRecords(ctx)
			if err != nil {
				return err
			}
			if err := st.Send(&logsv1.IngestTriggerRecordsRequest{BatchId: 1, Records: []*logsv1.TriggerRecord{record(id, job, base)}}); err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}
		st, err := e.ingest.IngestResults(ctx)
		if err != nil {
			return err
		}
		if err := st.Send(&logsv1.IngestResultsRequest{BatchId: 1, Results: []*logsv1.RunResult{result(id, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base)}}); err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	errs := make(chan error, 2*senders*perSender)
	var wg sync.WaitGroup
	for s := range senders {
		for i := range perSender {
			id := fmt.Sprintf("119-%d-%02d", s, i)
			for k := range 2 {
				wg.Go(func() { errs <- send(id, k) })
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent ingest: %v", err)
		}
	}
	e.mustRecords(t, record("119-z", job, base))
	e.mustResults(t, result("119-z", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
	seen := map[string]int{}
	var last int64
	for _, c := range collect(t, w, job, "119-z") {
		seen[c.GetTriggerId()]++
		if c.GetCursor() <= last {
			t.Errorf("cursor %d after %d", c.GetCursor(), last)
		}
		last = c.GetCursor()
	}
	if len(seen) != senders*perSender+1 {
		t.Errorf("completed runs: got %d, want %d", len(seen), senders*perSender+1)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("completions of %s: got %d, want 1", id, n)
		}
	}
}

// running is the RUNNING result an executor sends when it accepts a fire.
func running(id string, job, startMs int64, address string) *logsv1.RunResult {
	return &logsv1.RunResult{TriggerId: id, JobId: job, Status: logsv1.RunStatus_RUN_STATUS_RUNNING, StartUnixMs: startMs, ExecutorAddress: address}
}

// completionsOf ends a watch with a sentinel run of job that completes after everything sent
// before it, and returns the completions of job received until then, the sentinel's excluded.
func completionsOf(t *testing.T, e *env, w grpc.ServerStreamingClient[logsv1.WatchCompletionsResponse], job int64) []string {
	t.Helper()
	sentinel := fmt.Sprintf("%d-sentinel", job)
	e.mustRecords(t, record(sentinel, job, base))
	e.mustResults(t, result(sentinel, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
	got := ids(collect(t, w, job, sentinel))
	return got[:len(got)-1]
}

func testLookup(t *testing.T, e *env) {
	const job = 120
	ctx := ctxFor(t)
	e.mustRecords(t, record("120-record", job, base))
	if got := e.mustResults(t, running("120-running", job, base, "10.0.0.2:9999")); len(got) != 0 {
		t.Errorf("refused: got %v, want none", got)
	}
	e.mustResults(t, result("120-final", job, logsv1.RunStatus_RUN_STATUS_FAIL, base))
	e.mustLines(t, line("120-lines", 1, "lines alone make no run"))
	var unrecorded []string
	lookup := func(req []string) []string {
		t.Helper()
		resp, err := e.logs.LookupTriggers(ctx, &logsv1.LookupTriggersRequest{TriggerIds: req})
		if err != nil {
			t.Fatalf("LookupTriggers: %v", err)
		}
		unrecorded = resp.GetUnrecordedTriggerIds()
		return resp.GetKnownTriggerIds()
	}
	req := []string{"120-unknown", "120-final", "120-lines", "120-record", "", "120-nul\x00", "120-running", "120-unknown-2"}
	if got, want := lookup(req), []string{"120-final", "120-record", "120-running"}; !slices.Equal(got, want) {
		t.Errorf("known: got %v, want %v", got, want)
	}
	// The runs made from results alone have no record.
	if want := []string{"120-final", "120-running"}; !slices.Equal(unrecorded, want) {
		t.Errorf("unrecorded: got %v, want %v", unrecorded, want)
	}
	if got := lookup(nil); len(got) != 0 {
		t.Errorf("empty request: got %v, want none", got)
	}
	// The most ids a request may carry, more than one SQLite statement takes, known ones spread
	// over the chunks and listed twice.
	var many, want []string
	for i := range maxLookupIDs - 2 {
		id := fmt.Sprintf("120-many-%05d", i)
		if i%(rowsPerStatement-1) == 0 {
			id = [...]string{"120-record", "120-running", "120-final"}[len(want)%3]
			want = append(want, id)
		}
		many = append(many, id)
	}
	many = append(many, "120-running", "120-zzz")
	want = append(want, "120-running")
	if got := lookup(many); !slices.Equal(got, want) {
		t.Errorf("known of %d ids: got %v, want %v", len(many), got, want)
	}
	if want := slices.DeleteFunc(want, func(id string) bool { return id == "120-record" }); !slices.Equal(unrecorded, want) {
		t.Errorf("unrecorded of %d ids: got %v, want %v", len(many), unrecorded, want)
	}
}

func testRunningThenFinal(t *testing.T, e *env) {
	const job = 121
	w, cancel := watch(t, e, 0)
	defer cancel()
	// Record first, then RUNNING, then the final result.
	e.mustRecords(t, record("121-a", job, base))
	if got := e.mustResults(t, running("121-a", job, base+3, "10.0.0.1:9999")); len(got) != 0 {
		t.Errorf("RUNNING refused: got %v, want none", got)
	}
	if got := e.mustResults(t, result("121-a", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+5)); len(got) != 0 {
		t.Errorf("final result refused: got %v, want none", got)
	}
	// RUNNING first (it creates the run), then the final result, then the record.
	e.mustResults(t, running("121-b", job, base+3, "10.0.0.2:9999"))
	e.mustResults(t, result("121-b", job, logsv1.RunStatus_RUN_STATUS_FAIL, base+5))
	e.mustRecords(t, record("121-b", job, base))
	// RUNNING and the final result in one batch, in either order.
	e.mustRecords(t, record("121-c", job, base), record("121-d", job, base))
	if got := e.mustResults(t, running("121-c", job, base+3, "10.0.0.1:9999"), result("121-c", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+5),
		result("121-d", job, logsv1.RunStatus_RUN_STATUS_TIMEOUT, base+5), running("121-d", job, base+3, "10.0.0.1:9999")); len(got) != 0 {
		t.Errorf("refused: got %v, want none", got)
	}
	got := completionsOf(t, e, w, job)
	slices.Sort(got)
	if want := []string{"121-a=SUCCESS", "121-b=FAIL", "121-c=SUCCESS", "121-d=TIMEOUT"}; !slices.Equal(got, want) {
		t.Errorf("completions: got %v, want %v", got, want)
	}
	a := e.run(t, "121-a")
	if a.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || a.GetStartTime().AsTime().UnixMilli() != base+5 || a.GetEndTime().AsTime().UnixMilli() != base+55 ||
		a.GetHandleMessage() != "done: RUN_STATUS_SUCCESS" {
		t.Errorf("run after RUNNING then SUCCESS: got %v", a)
	}
	b := e.run(t, "121-b")
	if b.GetStatus() != logsv1.RunStatus_RUN_STATUS_FAIL || b.GetScheduledTime().AsTime().UnixMilli() != base ||
		b.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK || b.GetHandler() != "demo" {
		t.Errorf("run after RUNNING, FAIL, record: got %v", b)
	}
	if got := e.run(t, "121-d").GetStatus(); got != logsv1.RunStatus_RUN_STATUS_TIMEOUT {
		t.Errorf("final result before RUNNING in one batch: got %s, want TIMEOUT", got)
	}
}

func testFinalThenRunning(t *testing.T, e *env) {
	const job = 122
	w, cancel := watch(t, e, 0)
	defer cancel()
	e.mustRecords(t, record("122-a", job, base))
	e.mustResults(t, result("122-a", job, logsv1.RunStatus_RUN_STATUS_KILLED, base+5))
	before := e.run(t, "122-a")
	late := running("122-a", job, base+1, "10.9.9.9:1")
	late.TraceId = "ffffffffffffffffffffffffffffffff"
	if got := e.mustResults(t, late); len(got) != 0 {
		t.Errorf("late RUNNING refused: got %v, want none (a start is never refused)", got)
	}
	if after := e.run(t, "122-a"); !sameRun(after, before) {
		t.Errorf("late RUNNING changed the run:\ngot  %v\nwant %v", after, before)
	}
	// A failed trigger ends the run without the executor's word: a RUNNING report after it
	// reopens the run, once; a RUNNING resent after that changes nothing.
	failed := record("122-b", job, base)
	failed.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
	e.mustRecords(t, failed)
	e.mustResults(t, running("122-b", job, base+1, "10.9.9.9:1"))
	before = e.run(t, "122-b")
	if before.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING || before.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK ||
		before.GetExecutorAddress() != "10.9.9.9:1" || before.GetEndTime() != nil || before.GetHandleMessage() != "" {
		t.Errorf("RUNNING after a failed trigger: got %v, want the run reopened, running at 10.9.9.9:1", before)
	}
	e.mustResults(t, running("122-b", job, base+2, "10.9.9.8:1"))
	if after := e.run(t, "122-b"); !sameRun(after, before) {
		t.Errorf("RUNNING resent changed the reopened run:\ngot  %v\nwant %v", after, before)
	}
	if got, want := completionsOf(t, e, w, job), []string{"122-a=KILLED", "122-b=FAIL", "122-b=RUNNING"}; !slices.Equal(got, want) {
		t.Errorf("completions: got %v, want %v", got, want)
	}
}

func testRunningAlone(t *testing.T, e *env) {
	const job = 123
	w, cancel := watch(t, e, 0)
	defer cancel()
	// Without a record: RUNNING creates the run, and a resend changes nothing.
	e.mustResults(t, running("123-a", job, base+7, "10.0.0.3:9999"))
	first := e.run(t, "123-a")
	e.mustResults(t, running("123-a", job, base+9, "10.0.0.4:9999"))
	if again := e.run(t, "123-a"); !sameRun(again, first) {
		t.Errorf("resent RUNNING changed the run:\ngot  %v\nwant %v", again, first)
	}
	if first.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING || first.GetExecutorAddress() != "10.0.0.3:9999" || first.GetJobId() != job ||
		first.GetStartTime().AsTime().UnixMilli() != base+7 || first.GetScheduledTime().AsTime().UnixMilli() != base+7 || first.GetEndTime() != nil ||
		first.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNSPECIFIED {
		t.Errorf("run from RUNNING alone: got %v", first)
	}
	// With a record without an address: RUNNING fills the address and the start, and the run
	// stays RUNNING.
	rec := record("123-c", job, base)
	rec.ExecutorAddress = ""
	e.mustRecords(t, rec)
	e.mustResults(t, running("123-c", job, base+4, "10.0.0.5:9999"))
	c := e.run(t, "123-c")
	if c.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING || c.GetExecutorAddress() != "10.0.0.5:9999" || c.GetStartTime().AsTime().UnixMilli() != base+4 ||
		c.GetScheduledTime().AsTime().UnixMilli() != base || c.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK {
		t.Errorf("recorded run after RUNNING: got %v", c)
	}
	// The record after RUNNING completes nothing either.
	e.mustRecords(t, record("123-a", job, base))
	// Nor does a FAILED record of a fire the executor reported RUNNING (the scheduler's Run timed
	// out after the executor accepted): the executor's own result decides.
	e.mustResults(t, running("123-d", job, base+2, "10.0.0.6:9999"))
	failedRec := record("123-d", job, base)
	failedRec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
	e.mustRecords(t, failedRec)
	if d := e.run(t, "123-d"); d.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING || d.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK {
		t.Errorf("run reported RUNNING, then a FAILED record: got %v, want RUNNING with outcome OK", d)
	}
	resp, err := e.logs.ListRuns(ctxFor(t), &logsv1.ListRunsRequest{JobId: job, Status: logsv1.RunStatus_RUN_STATUS_RUNNING})
	if err != nil {
		t.Fatalf("ListRuns: %v", err)
	}
	if got := len(resp.GetRuns()); got != 3 {
		t.Errorf("RUNNING runs of job %d: got %d, want 3", job, got)
	}
	if got := completionsOf(t, e, w, job); len(got) != 0 {
		t.Errorf("completions: got %v, want none", got)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{WatchBatch: -1}, "watch batch"},
		{Config{TailBatch: -1}, "tail batch"},
		{Config{FallbackPoll: -time.Second}, "fallback poll"},
		{Config{Retention: time.Hour}, "retention"},
	} {
		err := c.cfg.validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("validate(%+v): got %v, want an error naming %q", c.cfg, err, c.want)
		}
	}
	var cfg Config
	if err := cfg.validate(); err != nil || cfg.WatchBatch != 500 || cfg.FallbackPoll != time.Second || cfg.Retention != 30*24*time.Hour {
		t.Errorf("defaults: got %+v, %v", cfg, err)
	}
	if _, err := New(Config{}, nil, nil); err == nil {
		t.Errorf("New without a store: got nil error, want one")
	}
}
