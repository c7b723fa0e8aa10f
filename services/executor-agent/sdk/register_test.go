package sdk_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// beatingRegistry is a registry that asks for a heartbeat every millisecond and tells, on
// beats, each heartbeat it gets and, on left, each registration stream that ended.
type beatingRegistry struct {
	registryv1.UnimplementedRegistryServiceServer
	beats chan struct{}
	left  chan error
}

func (r *beatingRegistry) RegisterExecutor(s grpc.BidiStreamingServer[registryv1.RegisterExecutorRequest, registryv1.RegisterExecutorResponse]) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	if err := s.Send(&registryv1.RegisterExecutorResponse{HeartbeatIntervalMs: 1, HeartbeatTimeoutMs: 1000}); err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err != nil {
			r.left <- err
			return nil
		}
		select {
		case r.beats <- struct{}{}:
		default:
		}
	}
}

// TestStopWhileHeartbeating: an executor stops while its registration sends heartbeats as fast
// as the registry asks; the stop ends the registration stream (the registry sees it end) with
// no heartbeat sent on it concurrently with the end (under -race: gRPC does not allow
// CloseSend concurrently with Send).
func TestStopWhileHeartbeating(t *testing.T) {
	t.Parallel()
	reg := &beatingRegistry{beats: make(chan struct{}), left: make(chan error, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	registryv1.RegisterRegistryServiceServer(srv, reg)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	for i := range 30 {
		e, err := sdk.New(sdk.Config{
			AppName: "beating", InstanceID: "b1", ListenAddr: "127.0.0.1:0", RegistryAddr: ln.Addr().String(),
			AccessToken: "beating-token", LogDir: t.TempDir(), Logger: testLogger(t), Insecure: true,
		})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if err := e.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		t.Cleanup(func() { _ = sdktest.Stop(e) }) // when the round fails before its Stop (idempotent)
		for range 20 {
			select {
			case <-reg.beats:
			case <-time.After(wait):
				t.Fatalf("round %d: no heartbeat within %v", i, wait)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		err = e.Stop(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: Stop: %v", i, err)
		}
		select {
		case <-reg.left:
		case <-time.After(wait):
			t.Fatalf("round %d: the registry did not see the registration end within %v", i, wait)
		}
	}
}
