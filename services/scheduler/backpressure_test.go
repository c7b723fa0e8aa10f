package scheduler

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/logtest"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
)

// bpWait bounds every wait of these tests; nothing sleeps.
const bpWait = 30 * time.Second

// recordingService is a scheduler on a scratch store whose trigger records go to a fake logsvc,
// driven by hand as dispatchService is, on a fake clock.
func recordingService(t *testing.T, cfg Config) (*Service, *sdktest.Ingest, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Now())
	cfg.ReplicaID, cfg.Clock = "t", clk
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ingest := sdktest.NewIngest()
	conn, err := grpc.NewClient(ingest.Serve(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	d := dbtest.Open(t, db.Config{DataDir: t.TempDir()}, "scheduler", MigrationsFS())
	s, err := New(cfg, Deps{
		Store: d, Etcd: &clientv3.Client{}, Registry: registryv1.NewRegistryServiceClient(nil),
		Ingest: logsv1.NewIngestServiceClient(conn), Logs: logsv1.NewLogServiceClient(nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.records.Start(t.Context())
	s.rowAcks.start()
	t.Cleanup(func() {
		s.waits.close()
		s.records.Stop()
		s.rowAcks.stop()
		s.execs.close()
	})
	return s, ingest, clk
}

// manualGroup puts a MANUAL group with addrs (in that order) in s's view.
func manualGroup(s *Service, id int64, addrs ...string) {
	s.groups.groups[id] = groupEntry{fetched: time.Now(), g: &registryv1.ExecutorGroup{Id: id,
		AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, Addresses: addrs}}
}

// runCounter counts an SDK handler's runs per trigger id and signals each start.
type runCounter struct {
	mu      sync.Mutex
	runs    map[string]int
	started chan string
	hold    chan struct{} // when not nil, a run waits for it to close
}

func newRunCounter(hold chan struct{}) *runCounter {
	return &runCounter{runs: map[string]int{}, started: make(chan string, 1000), hold: hold}
}

func (c *runCounter) handle(ctx context.Context, j *sdk.Job) error {
	c.mu.Lock()
	c.runs[j.TriggerID]++
	c.mu.Unlock()
	c.started <- j.TriggerID
	if c.hold != nil {
		select {
		case <-c.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (c *runCounter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

// waitStarts waits for n run starts.
func (c *runCounter) waitStarts(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-c.started:
		case <-time.After(bpWait):
			t.Fatalf("%d of %d runs started", i, n)
		}
	}
}

// agent starts an SDK executor with a "count" handler and returns its address.
func agent(t *testing.T, c *runCounter, configure func(*sdk.Config)) (*sdk.Executor, string) {
	t.Helper()
	cfg := sdk.Config{AppName: "bp-app", ListenAddr: "127.0.0.1:0", LogDir: t.TempDir(), Insecure: true,
		Logger: slog.New(slog.DiscardHandler)}
	if configure != nil {
		configure(&cfg)
	}
	e, err := sdk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.Handle("count", c.handle)
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdktest.Stop(e) })
	return e, e.Addr()
}

// fireOf is a fire of job id in group, due now on clk.
func fireOf(clk clock.Clock, id, group int64, strategy route.Strategy) *fire {
	now := clk.Now().UnixMilli()
	return &fire{job: &jobRow{ID: id, GroupID: group, Handler: "count", GlueType: glueBean, Route: strategy},
		fireMs: now, dueMs: now, kind: kindScheduled, trigType: triggerCron}
}

// waitRecords waits until the fake logsvc holds a trigger record for each of ids and returns them.
func waitRecords(t *testing.T, ingest *sdktest.Ingest, ids []string) map[string]*logsv1.TriggerRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bpWait)
	defer cancel()
	var recs map[string]*logsv1.TriggerRecord
	err := ingest.Wait(ctx, func() bool {
		recs = ingest.Records()
		for _, id := range ids {
			if recs[id] == nil {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("trigger records of %v: got %d of them: %v", ids, len(recs), err)
	}
	return recs
}

// lateProxy stands in front of an executor as a saturated one looks from the scheduler: it
// hands each Run call on at once (the executor takes the fires), but answers a call that carries
// a fire it has not passed on before only after the caller's deadline has passed.
type lateProxy struct {
	executorv1.UnimplementedExecutorServiceServer
	to executorv1.ExecutorServiceClient

	mu     sync.Mutex
	passed map[string]bool
	late   int
}

func (p *lateProxy) Run(ctx context.Context, req *executorv1.RunRequest) (*executorv1.RunResponse, error) {
	p.mu.Lock()
	fresh := false
	for _, tr := range req.GetTriggers() {
		fresh = fresh || !p.passed[tr.GetTriggerId()]
		p.passed[tr.GetTriggerId()] = true
	}
	if fresh {
		p.late++
	}
	p.mu.Unlock()
	resp, err := p.to.Run(context.WithoutCancel(ctx), req)
	if fresh {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return resp, err
}

// serveProxy serves srv on loopback and returns its address.
func serveProxy(t *testing.T, srv executorv1.ExecutorServiceServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	executorv1.RegisterExecutorServiceServer(g, srv)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// TestLateRunAnswersAreNotFailures: a saturated executor answers Run only after the scheduler's
// dispatch deadline, though it took the fires. The scheduler does not record those fires as
// failed, nor send them to another executor: it sends each again to the same executor under
// its trigger id, whose duplicate check answers, and records the fire OK. Every fire runs once.
func TestLateRunAnswersAreNotFailures(t *testing.T) {
	t.Parallel()
	runs := newRunCounter(nil)
	_, real := agent(t, runs, nil)
	proxy := &lateProxy{to: sdktest.Client(t, real, ""), passed: map[string]bool{}}
	late := serveProxy(t, proxy)
	_, other := agent(t, runs, nil) // ROUND would send a re-fire here: it must get none
	s, ingest, clk := recordingService(t, Config{DispatchTimeout: 200 * time.Millisecond})
	const group = 1
	manualGroup(s, group, late, other)

	const n = 5
	var ids []string
	done := make(chan []string, n)
	for i := range n {
		// FIRST: every fire goes to the late executor; the other one is where a re-route would go.
		f := fireOf(clk, int64(i+1), group, route.First)
		ids = append(ids, TriggerID(f.job.ID, f.fireMs, 0, 0))
		s.dispatch(f, trace.Link{}, func(got []string) { done <- got })
	}
	for range n {
		select {
		case <-done:
		case <-time.After(bpWait):
			t.Fatal("a dispatch did not end")
		}
	}
	recs := waitRecords(t, ingest, ids)
	runs.waitStarts(t, n) // an agent starts a handler after it answered ACCEPTED
	duplicates := 0
	for _, id := range ids {
		r := recs[id]
		if r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK || r.GetExecutorAddress() != late {
			t.Errorf("fire %s: recorded %v at %s: %q; want OK at %s", id, r.GetTriggerOutcome(), r.GetExecutorAddress(), r.GetTriggerMessage(), late)
		}
		if strings.HasSuffix(r.GetTriggerMessage(), ": DUPLICATE") {
			duplicates++
		}
		if got := runs.count(id); got != 1 {
			t.Errorf("fire %s ran %d times, want once", id, got)
		}
	}
	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	if proxy.late == 0 || duplicates == 0 {
		t.Fatalf("%d late answers, %d fires answered DUPLICATE when sent again: the test did not make answers late", proxy.late, duplicates)
	}
}

// TestBurstTwiceTheCapacityIsWorkedThrough: a burst of twice an executor's capacity is not
// dropped: what the executor refuses as busy waits in its backlog, goes out as the executor says
// it has room, and every fire runs once, within the misfire threshold, recorded OK.
func TestBurstTwiceTheCapacityIsWorkedThrough(t *testing.T) {
	t.Parallel()
	const capacity = 3
	hold := make(chan struct{})
	runs := newRunCounter(hold)
	ex, addr := agent(t, runs, func(c *sdk.Config) { c.Capacity = capacity })
	s, ingest, clk := recordingService(t, Config{DispatchTimeout: bpWait})
	const group = 1
	manualGroup(s, group, addr)

	var ids []string
	for i := range 2 * capacity {
		f := fireOf(clk, int64(i+1), group, route.First)
		ids = append(ids, TriggerID(f.job.ID, f.fireMs, 0, 0))
		s.dispatch(f, trace.Link{}, nil)
	}
	runs.waitStarts(t, capacity)
	waitFor(t, "the fires beyond the capacity wait in the backlog", func() bool { return s.waits.waiting() == capacity })
	// The first fire went alone, the next ones in one call: the executor took them in order.
	waitRecords(t, ingest, ids[:capacity])
	for _, id := range ids[capacity:] {
		if r := ingest.Records()[id]; r != nil {
			t.Fatalf("fire %s waits, yet recorded %v: %q", id, r.GetTriggerOutcome(), r.GetTriggerMessage())
		}
	}

	// The first wave ends; the executor has room once its runs are out of their slots.
	close(hold)
	cli := sdktest.Client(t, ex.Addr(), "")
	waitFor(t, "the first wave ended", func() bool {
		b, err := cli.Beat(t.Context(), &executorv1.BeatRequest{})
		return err == nil && b.GetRunning() == 0
	})
	var waited time.Duration
	for s.waits.waiting() > 0 || clk.Timers() > 0 {
		if clk.Timers() == 0 {
			waitFor(t, "a backlog waits on its timer, or is done", func() bool { return s.waits.waiting() == 0 || clk.Timers() > 0 })
			continue
		}
		clk.Advance(maxRetry)
		waited += maxRetry
	}
	runs.waitStarts(t, capacity)
	recs := waitRecords(t, ingest, ids)
	for _, id := range ids {
		if r := recs[id]; r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK {
			t.Errorf("fire %s: recorded %v: %q, want OK", id, r.GetTriggerOutcome(), r.GetTriggerMessage())
		}
		if got := runs.count(id); got != 1 {
			t.Errorf("fire %s ran %d times, want once", id, got)
		}
	}
	if waited >= s.cfg.MisfireThreshold {
		t.Errorf("the burst waited %v of the scheduler's clock, want less than the misfire threshold %v", waited, s.cfg.MisfireThreshold)
	}
}

// TestOverloadGivesUpPastTheMisfireThreshold: fires an executor keeps refusing as busy are given
// up once the misfire threshold has passed, recorded FAILED with "overloaded: no executor
// accepted within 5s"; a FIRE_ONCE_NOW job keeps one of its overdue fires waiting, which runs
// when the executor has room.
func TestOverloadGivesUpPastTheMisfireThreshold(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	runs := newRunCounter(hold)
	_, addr := agent(t, runs, func(c *sdk.Config) { c.Capacity = 1 })
	s, ingest, clk := recordingService(t, Config{DispatchTimeout: bpWait})
	const group = 1
	manualGroup(s, group, addr)

	first := fireOf(clk, 1, group, route.First)
	s.dispatch(first, trace.Link{}, nil)
	runs.waitStarts(t, 1)
	drop := fireOf(clk, 2, group, route.First)
	once := []*fire{fireOf(clk, 3, group, route.First), nil}
	once[0].job.Misfire = misfireFireOnceNow
	once[1] = &fire{job: once[0].job, fireMs: once[0].fireMs + 1, dueMs: once[0].dueMs + 1, kind: kindScheduled, trigType: triggerCron}
	for _, f := range []*fire{drop, once[0], once[1]} {
		s.dispatch(f, trace.Link{}, nil)
	}
	waitFor(t, "three fires wait", func() bool { return s.waits.waiting() == 3 })
	for clk.Now().Before(time.UnixMilli(once[1].dueMs).Add(s.cfg.MisfireThreshold)) {
		clk.BlockUntilTimers(1)
		clk.Advance(maxRetry)
	}
	dropID, onceIDs := TriggerID(2, drop.fireMs, 0, 0), []string{TriggerID(3, once[0].fireMs, 0, 0), TriggerID(3, once[1].fireMs, 0, 0)}
	recs := waitRecords(t, ingest, []string{dropID, onceIDs[1]})
	for _, id := range []string{dropID, onceIDs[1]} {
		r := recs[id]
		if r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED ||
			!strings.Contains(r.GetTriggerMessage(), "overloaded: no executor accepted within 5s") {
			t.Errorf("fire %s: recorded %v: %q; want FAILED, overloaded", id, r.GetTriggerOutcome(), r.GetTriggerMessage())
		}
	}
	if r := recs[onceIDs[0]]; r != nil {
		t.Fatalf("job 3's first overdue fire was given up (%q); want it kept as the job's fire once now", r.GetTriggerMessage())
	}
	close(hold)
	// The kept fire is retried on the scheduler's clock until the executor, done with the first
	// fire, has room: it may find it busy once more (the slot is freed just after the first
	// fire's end), and wait on a timer again after waiting() was 0 for a moment.
	recorded := func() bool { return ingest.Records()[onceIDs[0]] != nil }
	for !recorded() {
		if clk.Timers() > 0 {
			clk.Advance(maxRetry)
		}
		waitFor(t, "the kept fire is recorded, or waits on a timer", func() bool { return recorded() || clk.Timers() > 0 })
	}
	if r := waitRecords(t, ingest, onceIDs[:1])[onceIDs[0]]; r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK {
		t.Fatalf("the kept fire: recorded %v: %q, want OK", r.GetTriggerOutcome(), r.GetTriggerMessage())
	}
	runs.waitStarts(t, 1) // the kept fire's (the agent starts it after it answered ACCEPTED)
	if runs.count(dropID) != 0 || runs.count(onceIDs[1]) != 0 || runs.count(onceIDs[0]) != 1 {
		t.Fatalf("runs: given up %d and %d, kept %d; want 0, 0, 1", runs.count(dropID), runs.count(onceIDs[1]), runs.count(onceIDs[0]))
	}
}

// TestRefusedExecutorIsPassedOverAtOnce: a fire routed to an executor that refuses the
// connection goes to another executor of the group at once, and routing passes the refusing
// one over for the next fires, without waiting for its registration to expire; it is tried
// again after downFor.
func TestRefusedExecutorIsPassedOverAtOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there: connections are refused
	runs := newRunCounter(nil)
	_, live := agent(t, runs, nil)
	s, ingest, clk := recordingService(t, Config{DispatchTimeout: bpWait})
	const group = 1
	manualGroup(s, group, dead, live) // FIRST chooses the dead one while it is not passed over

	fireAt := func(job int64) *logsv1.TriggerRecord {
		t.Helper()
		f := fireOf(clk, job, group, route.First)
		done := make(chan []string, 1)
		s.dispatch(f, trace.Link{}, func(ids []string) { done <- ids })
		select {
		case <-done:
		case <-time.After(bpWait):
			t.Fatal("the dispatch did not end")
		}
		id := TriggerID(job, f.fireMs, 0, 0)
		r := waitRecords(t, ingest, []string{id})[id]
		if r.GetTriggerOutcome() == logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK {
			runs.waitStarts(t, 1) // the agent starts the handler after it answered ACCEPTED
		}
		if r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK || r.GetExecutorAddress() != live || runs.count(id) != 1 {
			t.Fatalf("fire of job %d: recorded %v at %s, ran %d times: %q; want OK at %s, once", job, r.GetTriggerOutcome(),
				r.GetExecutorAddress(), runs.count(id), r.GetTriggerMessage(), live)
		}
		return r
	}
	r := fireAt(1)
	if !strings.Contains(r.GetTriggerMessage(), "connection refused") || !strings.Contains(r.GetTriggerMessage(), "routed again") {
		t.Errorf("first fire's record %q: want the refusal and the route that followed", r.GetTriggerMessage())
	}
	r = fireAt(2)
	if want := "passed over, unreachable: " + dead; !strings.Contains(r.GetTriggerMessage(), want) || strings.Contains(r.GetTriggerMessage(), "routed again") {
		t.Errorf("second fire's record %q: want it routed past the dead executor at once (%q)", r.GetTriggerMessage(), want)
	}
	clk.Advance(downFor)
	r = fireAt(3)
	if !strings.Contains(r.GetTriggerMessage(), "routed again") {
		t.Errorf("fire after %v: record %q; want the dead executor tried again, then passed", downFor, r.GetTriggerMessage())
	}
}

// waitFor polls cond until it holds, failing the test after bpWait.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	giveUp := time.After(bpWait)
	for !cond() {
		select {
		case <-giveUp:
			t.Fatalf("%s: not within %v", what, bpWait)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestFireWarningsAreBounded: fires failing by the hundred write "trigger failed" for at most
// firesLoggedPerSecond of them a second and count the others in a line at the second's end,
// while every fire's record keeps its reason.
func TestFireWarningsAreBounded(t *testing.T) {
	t.Parallel()
	logs := logtest.New()
	s, ingest, clk := recordingService(t, Config{DispatchTimeout: bpWait, Logger: logs.Logger()})
	const group, fires = 1, 200
	manualGroup(s, group) // no executor: each fire fails at routing
	ids := make([]string, 0, fires)
	start := time.Now() // the limiter's windows are of the wall clock
	for i := range int64(fires) {
		f := fireOf(clk, 100+i, group, route.First)
		s.dispatch(f, trace.Link{}, nil)
		ids = append(ids, TriggerID(f.job.ID, f.fireMs, 0, 0))
	}
	for id, r := range waitRecords(t, ingest, ids) {
		if r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED || !strings.Contains(r.GetTriggerMessage(), "route") {
			t.Errorf("fire %s: recorded %v: %q; want FAILED, its routing failure", id, r.GetTriggerOutcome(), r.GetTriggerMessage())
		}
	}
	// Each line written one by one or counted: all the fires, once the last count is written.
	lines := func() (written, held int) {
		for _, l := range logs.Lines() {
			switch {
			case strings.HasPrefix(l, "WARN trigger failed (more, not written one by one) "):
				_, n, _ := strings.Cut(l, "held_back=")
				n, _, _ = strings.Cut(n, " ")
				c, err := strconv.Atoi(n)
				if err != nil {
					t.Fatalf("count line %q: %v", l, err)
				}
				held += c
			case strings.HasPrefix(l, "WARN trigger failed "):
				written++
			}
		}
		return written, held
	}
	waitFor(t, "every fire's warning written or counted", func() bool { w, h := lines(); return w+h == fires })
	// At most firesLoggedPerSecond lines in each second the fires took (and the one they began in).
	most := firesLoggedPerSecond * (int(time.Since(start)/time.Second) + 2)
	if w, h := lines(); w > most || h == 0 {
		t.Fatalf("%d fires failed: %d warnings written one by one, %d counted; want at most %d written", fires, w, h, most)
	}
}
