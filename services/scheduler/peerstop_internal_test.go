package scheduler

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
)

// TestPeerStoppedWhenItsAddressRefuses: a peer whose server was up and then stopped (its
// listener and connections closed, as when its process ends) is reported stopped; an address
// that never answered is not.
func TestPeerStoppedWhenItsAddressRefuses(t *testing.T) {
	t.Parallel()
	p := newPeers([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, time.Second)
	t.Cleanup(p.close)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	healthgrpc.RegisterHealthServer(g, health.NewServer())
	go func() { _ = g.Serve(ln) }()
	up := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- p.stopped(t.Context(), ln.Addr().String(), func() { close(up) }) }()
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

	// An address that never answered refuses too, but nothing was ever up there: it may be a
	// replica still starting.
	never, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := never.Addr().String()
	never.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := p.stopped(ctx, addr, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("stopped(never up) = %v, want the ctx's deadline", err)
	}
}
