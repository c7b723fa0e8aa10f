package devstack_test

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
)

// TestStopEndsWithStreamsOpen: a client that holds a stream open (an external agent's watch of
// the executors) does not keep the stack from stopping: its stream is cut after the grace.
func TestStopEndsWithStreamsOpen(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	tok, _ := tokens.Load(st.HTTPAddr)
	conn, err := grpc.NewClient(st.RegistryAddr, st.TLS.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok.(string))
	watch, err := registryv1.NewRegistryServiceClient(conn).WatchExecutors(ctx, &registryv1.WatchExecutorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil { // the snapshot: the stream is open on the server
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		st.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(2 * time.Minute):
		t.Fatal("Stop did not return while a watch stream was open")
	}
	// The stream has ended: what it still holds (the agent leaving) is read, then an error.
	for i := 0; ; i++ {
		if _, err := watch.Recv(); err != nil {
			break
		}
		if i == 100 {
			t.Fatal("the watch stream still delivers after Stop")
		}
	}
}
