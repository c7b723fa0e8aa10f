package sdk_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
)

// app is a small application serving HandlerService, as one in any language would.
type app struct {
	executorv1.UnimplementedHandlerServiceServer
	cancelled chan string // trigger ids whose Handle call was cancelled
}

func (a *app) ListHandlers(context.Context, *executorv1.ListHandlersRequest) (*executorv1.ListHandlersResponse, error) {
	return &executorv1.ListHandlersResponse{Handlers: []string{"greet", "refuse", "forever", "silent"}}, nil
}

func (a *app) Handle(req *executorv1.HandleRequest, s grpc.ServerStreamingServer[executorv1.HandleResponse]) error {
	t := req.GetTrigger()
	line := func(text string) error {
		return s.Send(&executorv1.HandleResponse{Event: &executorv1.HandleResponse_LogLine{LogLine: text}})
	}
	result := func(ok bool, msg string) error {
		return s.Send(&executorv1.HandleResponse{Event: &executorv1.HandleResponse_Result{Result: &executorv1.HandleResult{Success: ok, Message: msg}}})
	}
	switch t.GetHandler() {
	case "greet":
		if err := line(fmt.Sprintf("hello %s from shard %d/%d", t.GetParams(), t.GetShardIndex(), t.GetShardTotal())); err != nil {
			return err
		}
		if err := line("two\nlines"); err != nil {
			return err
		}
		return result(true, "")
	case "refuse":
		return result(false, "bad params: "+t.GetParams())
	case "forever":
		if err := line("waiting"); err != nil {
			return err
		}
		<-s.Context().Done()
		a.cancelled <- t.GetTriggerId()
		return s.Context().Err()
	default: // "silent": ends the stream without a result
		return nil
	}
}

func TestSidecarForwardsToApplication(t *testing.T) {
	t.Parallel()
	a := &app{cancelled: make(chan string, 2)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	executorv1.RegisterHandlerServiceServer(srv, a)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	h := start(t, nil)
	names, err := h.exec.ForwardHandlers(ctxFor(t), executorv1.NewHandlerServiceClient(conn))
	if err != nil || !slices.Equal(names, []string{"greet", "refuse", "forever", "silent"}) {
		t.Fatalf("ForwardHandlers: got %q %v", names, err)
	}

	greet := bean("101-1-0-0", 101, "greet", "world")
	greet.ShardIndex, greet.ShardTotal = 1, 2
	h.accept(t, greet)
	h.wantResult(t, "101-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if got, want := h.ingest.Texts("101-1-0-0"), []string{"hello world from shard 1/2", "two", "lines"}; !slices.Equal(got, want) {
		t.Errorf("lines: got %q, want %q", got, want)
	}

	h.accept(t, bean("102-1-0-0", 102, "refuse", "x=1"))
	h.wantResult(t, "102-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "bad params: x=1")
	h.accept(t, bean("103-1-0-0", 103, "silent", ""))
	h.wantResult(t, "103-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "ended without a result")

	// Kill reaches the application as the cancellation of its Handle call; so does a timeout.
	h.accept(t, bean("104-1-0-0", 104, "forever", ""))
	h.waitLines(t, "104-1-0-0", 1)
	if resp, err := h.cli.Kill(ctxFor(t), &executorv1.KillRequest{TriggerId: "104-1-0-0"}); err != nil || !resp.GetKilled() {
		t.Fatalf("Kill: got %v %v", resp, err)
	}
	h.wantResult(t, "104-1-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "killed by request")
	timed := bean("105-1-0-0", 105, "forever", "")
	timed.TimeoutSeconds = 1
	h.accept(t, timed)
	h.wantResult(t, "105-1-0-0", logsv1.RunStatus_RUN_STATUS_TIMEOUT, "timed out after 1s")
	var got []string
	for range 2 {
		select {
		case id := <-a.cancelled:
			got = append(got, id)
		case <-ctxFor(t).Done():
			t.Fatalf("the application saw cancellations of %q only, want both fires", got)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"104-1-0-0", "105-1-0-0"}) {
		t.Fatalf("cancelled at the application: got %q", got)
	}
}
