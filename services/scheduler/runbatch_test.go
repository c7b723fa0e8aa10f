package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
)

// gatedExecutor is an executor server that records every Run call (its fires and the token it
// carried) and, while gated, holds calls until the test opens the gate.
type gatedExecutor struct {
	executorv1.UnimplementedExecutorServiceServer
	mu      sync.Mutex
	calls   [][]string // trigger ids per call
	tokens  []string
	gate    chan struct{}
	arrived chan struct{} // one send per call, when it arrives
}

func (e *gatedExecutor) Run(ctx context.Context, req *executorv1.RunRequest) (*executorv1.RunResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var ids []string
	acks := make([]*executorv1.RunAck, len(req.GetTriggers()))
	for i, t := range req.GetTriggers() {
		ids = append(ids, t.GetTriggerId())
		acks[i] = &executorv1.RunAck{TriggerId: t.GetTriggerId(), Outcome: executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED, Message: "ok " + t.GetTriggerId()}
	}
	e.mu.Lock()
	e.calls = append(e.calls, ids)
	e.tokens = append(e.tokens, strings.Join(md.Get("authorization"), ","))
	gate := e.gate
	e.mu.Unlock()
	select {
	case e.arrived <- struct{}{}:
	default:
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return &executorv1.RunResponse{Acks: acks}, nil
}

func (e *gatedExecutor) snapshot() ([][]string, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls), slices.Clone(e.tokens)
}

// serveExecutor starts e on a loopback port over real gRPC and returns its address.
func serveExecutor(t *testing.T, e *gatedExecutor) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	executorv1.RegisterExecutorServiceServer(g, e)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

func trig(id string) *executorv1.Trigger { return &executorv1.Trigger{TriggerId: id, JobId: 1} }

// run sends one fire with runAsync and waits for its answer, or until ctx ends.
func (p *executorPool) run(ctx context.Context, addr string, t *executorv1.Trigger, dueMs int64) (*executorv1.RunAck, error) {
	type answer struct {
		ack *executorv1.RunAck
		err error
	}
	done := make(chan answer, 1)
	p.runAsync(ctx, addr, t, dueMs, nil, func(ack *executorv1.RunAck, err error) { done <- answer{ack, err} })
	select {
	case a := <-done:
		return a.ack, a.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// TestRunCoalescesFiresPerExecutor: a fire sent to an idle executor goes alone and at once; the
// fires that come while that call is held up go together in the next call (bounded by
// maxBatchFires), every caller gets the answer to its own fire, and fires under another access
// token never share a call.
func TestRunCoalescesFiresPerExecutor(t *testing.T) {
	t.Parallel()
	e := &gatedExecutor{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	addr := serveExecutor(t, e)
	p := newExecutorPool(nil)
	t.Cleanup(p.close)
	var batches []int
	var bmu sync.Mutex
	p.batched = func(n int) { bmu.Lock(); batches = append(batches, n); bmu.Unlock() }

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	type answer struct {
		id  string
		ack *executorv1.RunAck
		err error
	}
	answers := make(chan answer, 2000)
	fire := func(ctx context.Context, id string) {
		ack, err := p.run(ctx, addr, trig(id), 0)
		answers <- answer{id, ack, err}
	}
	go fire(ctx, "first")
	<-e.arrived // the first call is in flight and held

	const queued = maxBatchFires + 200
	for i := range queued {
		go fire(ctx, fmt.Sprintf("q-%d", i))
	}
	tokCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer other")
	go fire(tokCtx, "tok")
	// Wait until every fire has queued behind the held call (the token's lane is idle: it goes).
	waitQueued(t, p, addr, queued)
	close(e.gate)

	for range queued + 2 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("fire %s: %v", a.id, a.err)
		}
		if a.ack.GetTriggerId() != a.id || a.ack.GetMessage() != "ok "+a.id {
			t.Fatalf("fire %s got the answer %v", a.id, a.ack)
		}
	}
	calls, tokens := e.snapshot()
	if len(calls) != 4 {
		t.Fatalf("%d Run calls %v, want 4: first alone, the token's alone, then %d queued fires in 2", len(calls), sizes(calls), queued)
	}
	if !slices.Equal(calls[0], []string{"first"}) {
		t.Fatalf("first call carried %v", calls[0])
	}
	var queuedSeen int
	for i, c := range calls[1:] {
		tok := tokens[i+1]
		switch {
		case slices.Equal(c, []string{"tok"}):
			if tok != "Bearer other" {
				t.Fatalf("the token's fire went with authorization %q", tok)
			}
		default:
			if tok != "" || len(c) > maxBatchFires {
				t.Fatalf("call %d carried %d fires with authorization %q", i+1, len(c), tok)
			}
			queuedSeen += len(c)
		}
	}
	if queuedSeen != queued {
		t.Fatalf("queued fires sent: %d, want %d", queuedSeen, queued)
	}
	bmu.Lock()
	defer bmu.Unlock()
	if !slices.Contains(batches, maxBatchFires) {
		t.Fatalf("batch sizes recorded %v, want one of %d", batches, maxBatchFires)
	}
}

// TestRunDropsFiresWhoseCallerGaveUp: a fire whose deadline passes while it waits behind a held
// call answers DeadlineExceeded to its caller and is never sent; a call the executor does not
// answer in time fails every fire it carries.
func TestRunDropsFiresWhoseCallerGaveUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	e, addr, p, held := heldLane(t, ctx)
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	late := make(chan error, 1)
	p.runAsync(short, addr, trig("late"), 0, nil, func(_ *executorv1.RunAck, err error) { late <- err })
	<-short.Done()
	close(e.gate)
	if err := <-held; err != nil {
		t.Fatalf("held fire: %v", err)
	}
	select {
	case err := <-late:
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("a fire that timed out in the queue: %v, want DeadlineExceeded", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a fire that timed out in the queue never got an answer")
	}
	// The next fire goes out too; the timed-out one was never sent.
	if _, err := p.run(t.Context(), addr, trig("after"), 0); err != nil {
		t.Fatalf("fire after: %v", err)
	}
	calls, _ := e.snapshot()
	for _, c := range calls {
		if slices.Contains(c, "late") {
			t.Fatalf("the timed-out fire was sent: calls %v", calls)
		}
	}
}

// heldLane serves a gated executor and sends it a fire ("held", under ctx) that it holds
// until the test closes its gate; held gets that fire's answer. The lane then queues.
func heldLane(t *testing.T, ctx context.Context) (e *gatedExecutor, addr string, p *executorPool, held chan error) {
	t.Helper()
	e = &gatedExecutor{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	addr = serveExecutor(t, e)
	p = newExecutorPool(nil)
	t.Cleanup(p.close)
	held = make(chan error, 1)
	go func() { _, err := p.run(ctx, addr, trig("held"), 0); held <- err }()
	<-e.arrived
	return e, addr, p, held
}

// TestRunSkipsFiresAsTheirCallForms: a fire whose skip says so when its call is formed is not
// sent and gets errNotSent; the fires beside it go. Fires count as in flight from hand-over to
// answer.
func TestRunSkipsFiresAsTheirCallForms(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	e, addr, p, held := heldLane(t, ctx)
	var lost atomic.Bool
	skipped, kept := make(chan error, 1), make(chan error, 1)
	p.runAsync(ctx, addr, trig("skipped"), 0, lost.Load, func(_ *executorv1.RunAck, err error) { skipped <- err })
	p.runAsync(ctx, addr, trig("kept"), 0, nil, func(_ *executorv1.RunAck, err error) { kept <- err })
	waitQueued(t, p, addr, 2)
	if n := p.inflight.Load(); n != 3 {
		t.Errorf("%d fires in flight, want 3: the held one and the two queued", n)
	}
	lost.Store(true) // after it was queued: the call it would go in has not formed yet
	close(e.gate)
	if err := <-held; err != nil {
		t.Fatalf("held fire: %v", err)
	}
	if err := <-skipped; !errors.Is(err, errNotSent) {
		t.Fatalf("skipped fire: %v, want errNotSent", err)
	}
	if err := <-kept; err != nil {
		t.Fatalf("the fire beside it: %v", err)
	}
	if n := p.inflight.Load(); n != 0 {
		t.Errorf("%d fires in flight after every answer, want 0", n)
	}
	calls, _ := e.snapshot()
	for _, c := range calls {
		if slices.Contains(c, "skipped") {
			t.Fatalf("the skipped fire was sent: calls %v", calls)
		}
	}
}

// TestCallOutlivesOneFiresContext: a call that carries several fires is not cancelled when the
// first fire's context is (a manual trigger's client that went away): the other fires get
// their answers.
func TestCallOutlivesOneFiresContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	e, addr, p, held := heldLane(t, ctx)
	first, firstCancel := context.WithCancel(ctx)
	defer firstCancel()
	answers := make(chan error, 2)
	p.runAsync(first, addr, trig("first"), 0, nil, func(_ *executorv1.RunAck, err error) { answers <- err })
	p.runAsync(ctx, addr, trig("second"), 0, nil, func(_ *executorv1.RunAck, err error) { answers <- err })
	waitQueued(t, p, addr, 2)
	second := make(chan struct{})
	e.mu.Lock()
	gate := e.gate
	e.gate = second // the next call is held too
	e.mu.Unlock()
	close(gate)
	if err := <-held; err != nil {
		t.Fatalf("held fire: %v", err)
	}
	<-e.arrived // the call with both fires is in flight
	firstCancel()
	time.Sleep(50 * time.Millisecond) // a call under the first fire's context would fail now
	close(second)
	for range 2 {
		if err := <-answers; err != nil {
			t.Fatalf("a fire of the shared call: %v, want its ack", err)
		}
	}
	if calls, _ := e.snapshot(); len(calls) != 2 || len(calls[1]) != 2 {
		t.Fatalf("calls %v, want the held one, then one with both fires", calls)
	}
}

// TestRunBatchesStayUnderTheMessageLimit: fires with large glue sources are split so that no
// call exceeds maxBatchBytes.
func TestRunBatchesStayUnderTheMessageLimit(t *testing.T) {
	t.Parallel()
	e := &gatedExecutor{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	addr := serveExecutor(t, e)
	p := newExecutorPool(nil)
	t.Cleanup(p.close)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	errs := make(chan error, 100)
	go func() { _, err := p.run(ctx, addr, trig("first"), 0); errs <- err }()
	<-e.arrived
	const n = 40 // 40 × 64 KiB = 2.5 MiB of glue source
	src := strings.Repeat("x", 64<<10)
	for i := range n {
		go func() {
			_, err := p.run(ctx, addr, &executorv1.Trigger{TriggerId: fmt.Sprintf("big-%d", i), GlueSource: src}, 0)
			errs <- err
		}()
	}
	waitQueued(t, p, addr, n)
	close(e.gate)
	for range n + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	calls, _ := e.snapshot()
	per := maxBatchBytes / (64 << 10)
	for _, c := range calls[1:] {
		if len(c) > per {
			t.Fatalf("a call carried %d fires of 64 KiB (limit %d bytes): sizes %v", len(c), maxBatchBytes, sizes(calls))
		}
	}
	if len(calls) < 1+(n+per-1)/per {
		t.Fatalf("calls %v: want the %d big fires in at least %d calls", sizes(calls), n, (n+per-1)/per)
	}
}

// waitQueued waits until n fires wait in the token-less lane of addr.
func waitQueued(t *testing.T, p *executorPool, addr string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l := p.lane(addr, "")
		l.mu.Lock()
		q := len(l.queue)
		l.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d fires queued, want %d", q, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitIdle waits until the lane of addr (no token) has no sender.
func waitIdle(t *testing.T, p *executorPool, addr string) {
	t.Helper()
	l := p.lane(addr, "")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		sending := l.sending
		l.mu.Unlock()
		if !sending {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the lane's sender never ended")
		}
	}
}

func sizes(calls [][]string) []int {
	out := make([]int, len(calls))
	for i, c := range calls {
		out[i] = len(c)
	}
	return out
}

// TestPoolClosesIdleConnections: connections unused for idleConnAfter are closed and their idle
// lanes forgotten; an executor with a call in flight keeps both; a later call dials again.
func TestPoolClosesIdleConnections(t *testing.T) {
	t.Parallel()
	busy := &gatedExecutor{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	idle := &gatedExecutor{arrived: make(chan struct{}, 1)}
	busyAddr, idleAddr := serveExecutor(t, busy), serveExecutor(t, idle)
	p := newExecutorPool(nil)
	t.Cleanup(p.close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.run(ctx, idleAddr, trig("1-1-0-0"), 0); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, p, idleAddr) // its sender ends just after the answer
	done := make(chan error, 1)
	go func() { _, err := p.run(ctx, busyAddr, trig("2-1-0-0"), 0); done <- err }()
	select {
	case <-busy.arrived:
	case <-ctx.Done():
		t.Fatal("the busy executor's call never arrived")
	}
	if n := p.prune(time.Now().Add(-idleConnAfter)); n != 0 {
		t.Fatalf("pruned %d connections used just now", n)
	}
	// Both connections age past the cutoff; the busy lane's call is still in flight.
	p.mu.Lock()
	for _, c := range p.conns {
		c.lastUsed = c.lastUsed.Add(-2 * idleConnAfter)
	}
	p.mu.Unlock()
	if n := p.prune(time.Now().Add(-idleConnAfter)); n != 1 {
		t.Fatalf("pruned %d connections, want 1 (the idle executor's)", n)
	}
	p.mu.Lock()
	_, idleLane := p.lanes[laneKey{idleAddr, ""}]
	_, busyLane := p.lanes[laneKey{busyAddr, ""}]
	conns := len(p.conns)
	p.mu.Unlock()
	if idleLane || !busyLane || conns != 1 {
		t.Fatalf("after prune: idle lane kept %v, busy lane kept %v, %d connections; want false, true, 1", idleLane, busyLane, conns)
	}
	close(busy.gate)
	if err := <-done; err != nil {
		t.Fatalf("the call in flight during prune: %v", err)
	}
	if _, err := p.run(ctx, idleAddr, trig("1-2-0-0"), 0); err != nil {
		t.Fatalf("a call after prune: %v", err)
	}
	if calls, _ := idle.snapshot(); len(calls) != 2 {
		t.Errorf("idle executor got %d calls, want 2", len(calls))
	}
}
