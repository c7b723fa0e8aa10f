package scheduler

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// statusOnly serves SchedulerService.GetStatus as replica id.
type statusOnly struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	id string
}

func (s statusOnly) GetStatus(context.Context, *schedulerv1.GetStatusRequest) (*schedulerv1.GetStatusResponse, error) {
	return &schedulerv1.GetStatusResponse{ReplicaId: s.id}, nil
}

// serveAs serves replica id's status on a new loopback address.
func serveAs(t *testing.T, id string) (*grpc.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	schedulerv1.RegisterSchedulerServiceServer(g, statusOnly{id: id})
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return g, ln.Addr().String()
}

// TestPeerStoppedWhenItsAddressRefuses: a peer whose server was up, serving it, and then stopped
// (its listener and connections closed, as when its process ends) is reported stopped; an
// address that never answered is not, nor one that serves another replica.
func TestPeerStoppedWhenItsAddressRefuses(t *testing.T) {
	t.Parallel()
	p := newPeers([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, time.Second)
	t.Cleanup(p.close)

	g, addr := serveAs(t, "b")
	up := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- p.stopped(t.Context(), "b", addr, func() { close(up) }) }()
	select {
	case <-up:
	case err := <-done:
		t.Fatalf("stopped returned %v before the peer was up", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the connection to the peer did not come up within 10s")
	}
	g.Stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stopped = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a stopped peer was not reported within 10s")
	}

	// Another replica serves at the address: it is not watched as b.
	_, other := serveAs(t, "c")
	if err := p.stopped(t.Context(), "b", other, nil); err == nil || !strings.Contains(err.Error(), `serves replica "c"`) {
		t.Errorf("stopped(b at c's address) = %v; want an error naming c", err)
	}

	// An address that never answered refuses too, but nothing was ever up there: it may be a
	// replica still starting.
	never, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = never.Addr().String()
	never.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := p.stopped(ctx, "b", addr, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stopped(never up) = %v, want the ctx's deadline", err)
	}
}

// TestPrunePeers: a connection to an address no live replica advertises is closed at the second
// prune in a row that finds it so; one advertised again in between is kept.
func TestPrunePeers(t *testing.T) {
	t.Parallel()
	p := newPeers([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, time.Second)
	t.Cleanup(p.close)
	for _, addr := range []string{"10.0.0.1:9010", "10.0.0.2:9010", "10.0.0.3:9010"} {
		if _, err := p.conn(addr); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.prune(map[string]string{"a": "10.0.0.1:9010"}); n != 0 {
		t.Errorf("first prune closed %d; want 0", n)
	}
	if n := p.prune(map[string]string{"a": "10.0.0.1:9010", "c": "10.0.0.3:9010"}); n != 1 {
		t.Errorf("second prune closed %d; want 1 (10.0.0.2, unadvertised twice)", n)
	}
	if n := p.prune(map[string]string{"a": "10.0.0.1:9010"}); n != 0 {
		t.Errorf("third prune closed %d; want 0 (10.0.0.3 was advertised at the second)", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) != 2 || p.conns["10.0.0.2:9010"] != nil {
		t.Errorf("connections kept: %v; want 10.0.0.1 and 10.0.0.3", p.conns)
	}
}
