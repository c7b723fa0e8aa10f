package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

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
