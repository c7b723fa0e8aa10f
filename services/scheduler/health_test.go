package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	"github.com/jobmesh/jobmesh/internal/clock"
)

// TestRunErrorsSayWhetherTheFireMayHaveArrived: only an error that proves the call never left
// lets a fire go to another executor; a deadline or a broken call leaves it possibly taken.
func TestRunErrorsSayWhetherTheFireMayHaveArrived(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name               string
		err                error
		never, definite    bool
		refused, connError bool
	}{
		{"refused", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), true, false, true, true},
		{"handshake not done", status.Error(codes.DeadlineExceeded, "context deadline exceeded while waiting for connections to become ready"), true, false, false, true},
		{"expired in its lane", expiredInLane(context.DeadlineExceeded), true, false, false, false},
		{"address not dialled", fmt.Errorf("%w: %w", errNeverSent, errors.New("dial executor x: bad target")), true, false, false, false},
		{"deadline after sending", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false, false, false, false},
		{"connection broke mid-call", status.Error(codes.Unavailable, "error reading from server: EOF"), false, false, false, false},
		{"odd answer", errors.New("executor answered 1 acks for 2 fires"), false, false, false, false},
		{"bad token", status.Error(codes.Unauthenticated, "missing token"), false, true, false, false},
		{"old executor", status.Error(codes.Unimplemented, "method Run not implemented"), false, true, false, false},
	} {
		if got := neverSent(c.err); got != c.never {
			t.Errorf("%s: neverSent = %v, want %v", c.name, got, c.never)
		}
		if got := definiteRefusal(c.err); got != c.definite {
			t.Errorf("%s: definiteRefusal = %v, want %v", c.name, got, c.definite)
		}
		if got := connectionRefused(c.err); got != c.refused {
			t.Errorf("%s: connectionRefused = %v, want %v", c.name, got, c.refused)
		}
		if got := connectionFailed(c.err); got != c.connError {
			t.Errorf("%s: connectionFailed = %v, want %v", c.name, got, c.connError)
		}
	}
}

// TestRealConnectionErrorsSayWhetherTheFireMayHaveArrived: the errors the scheduler's own
// executor client gets from gRPC, not strings written for the test. A connection refused before
// anything was sent lets the fire go to another executor; a connection reset while the executor
// holds the call (it arrived) is not a failure to deliver: the fire stays pinned to that
// executor (neither never-sent nor a definite refusal), and the executor is not marked
// unreachable for routing.
func TestRealConnectionErrorsSayWhetherTheFireMayHaveArrived(t *testing.T) {
	t.Parallel()
	pool := newExecutorPool(nil)
	t.Cleanup(pool.close)
	run := func(addr string) error {
		t.Helper()
		cli, err := pool.client(addr)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cli.Run(t.Context(), &executorv1.RunRequest{Triggers: []*executorv1.Trigger{{TriggerId: "1-0-0-0"}}})
		return err
	}

	// Refused: nothing listens at the address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	err = run(gone)
	if err == nil || !neverSent(err) || !connectionRefused(err) || !connectionFailed(err) || definiteRefusal(err) {
		t.Errorf("refused connection: %v; want never sent, refused, a connection failure, no definite refusal", err)
	}

	// Broken mid-call: the executor has the call, and its connection is reset.
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &connsListener{Listener: ln}
	srv := grpc.NewServer()
	ex := &heldRun{arrived: make(chan struct{})}
	executorv1.RegisterExecutorServiceServer(srv, ex)
	go srv.Serve(cl)
	t.Cleanup(srv.Stop)
	go func() {
		<-ex.arrived
		cl.closeConns()
	}()
	err = run(ln.Addr().String())
	if status.Code(err) != codes.Unavailable || neverSent(err) || connectionFailed(err) || connectionRefused(err) || definiteRefusal(err) {
		t.Errorf("connection reset mid-call: %v; want Unavailable, neither never sent nor a connection failure nor a definite refusal", err)
	}
}

// connsListener keeps the connections it accepts, to close them under the server.
type connsListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *connsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *connsListener) closeConns() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

// heldRun is an executor that takes a Run call, says so, and never answers it.
type heldRun struct {
	executorv1.UnimplementedExecutorServiceServer
	arrived chan struct{}
}

func (e *heldRun) Run(ctx context.Context, _ *executorv1.RunRequest) (*executorv1.RunResponse, error) {
	close(e.arrived)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestRoutingPassesOverUnreachableAndFullExecutors: an executor whose connection failed is passed
// over for downFor or until it answers; a full one while another has room, for loadFresh; when
// nothing is left the full ones are kept, and when all are unreachable, all are.
func TestRoutingPassesOverUnreachableAndFullExecutors(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	h := newExecutorHealth(clk)
	all := []string{"a:1", "b:1", "c:1"}
	refused := status.Error(codes.Unavailable, "connection error: desc = connect: connection refused")
	use := func(byLoad bool) []string { u, _ := h.usable(all, byLoad); return u }

	h.unreachable("a:1", refused)
	h.answered("b:1", &executorv1.ExecutorLoad{Capacity: 2, Running: 2})
	if got := use(true); !slices.Equal(got, []string{"c:1"}) {
		t.Fatalf("a unreachable, b full: usable %v, want [c:1]", got)
	}
	if got, note := h.usable(all, false); !slices.Equal(got, []string{"b:1", "c:1"}) || note == "" {
		t.Fatalf("a unreachable, load not asked: usable %v (%q), want [b:1 c:1] and a note", got, note)
	}
	h.unreachable("c:1", refused)
	if got := use(true); !slices.Equal(got, []string{"b:1"}) {
		t.Fatalf("a and c unreachable, b full: usable %v, want the full one", got)
	}
	if h.hasRoom("b:1") || h.take("b:1", 5) != 1 || h.retryIn("b:1") == 0 {
		t.Fatal("a full executor: want no room, one fire to ask again, and a pause first")
	}
	clk.Advance(loadFresh + time.Millisecond)
	if got := use(true); !slices.Equal(got, []string{"b:1"}) || !h.hasRoom("b:1") || h.take("b:1", 5) != 5 {
		t.Fatalf("after loadFresh: usable %v, want b back with room (its load is old)", got)
	}
	h.answered("c:1", &executorv1.ExecutorLoad{Capacity: 4, Free: 3})
	if got := use(true); !slices.Equal(got, []string{"b:1", "c:1"}) || h.take("c:1", 5) != 3 || h.take("c:1", 5) != 1 {
		t.Fatalf("c answered with 3 free: usable %v; want b and c, and three fires for c, then one", got)
	}
	clk.Advance(downFor)
	if got := use(true); !slices.Equal(got, all) {
		t.Fatalf("after downFor: usable %v, want all", got)
	}
	h.unreachable("a:1", refused)
	h.unreachable("b:1", refused)
	h.unreachable("c:1", refused)
	if got := use(true); !slices.Equal(got, all) {
		t.Fatalf("all unreachable: usable %v, want all (the answers tell)", got)
	}
}

// TestFullExecutorPauseGrowsPerPause: the refusals of one answer (a burst the executor had no
// room for) start the shortest pause, not one doubled per refused fire; it doubles when the
// executor is still full after it, and ends once the executor says it has room.
func TestFullExecutorPauseGrowsPerPause(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC))
	h := newExecutorHealth(clk)
	for range 50 {
		h.full("a:1")
	}
	if got := h.retryIn("a:1"); got != minRetry {
		t.Fatalf("after one answer's 50 refusals: pause %v, want %v", got, minRetry)
	}
	clk.Advance(minRetry)
	h.full("a:1")
	h.full("a:1")
	if got := h.retryIn("a:1"); got != 2*minRetry {
		t.Fatalf("still full after the pause: pause %v, want %v", got, 2*minRetry)
	}
	h.answered("a:1", &executorv1.ExecutorLoad{Capacity: 4, Free: 1})
	if got := h.retryIn("a:1"); got != 0 {
		t.Fatalf("after an answer with room: pause %v, want 0", got)
	}
	h.full("a:1")
	if got := h.retryIn("a:1"); got != minRetry {
		t.Fatalf("full again: pause %v, want %v", got, minRetry)
	}
}
