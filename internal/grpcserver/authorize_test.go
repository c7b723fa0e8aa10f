package grpcserver_test

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/jobmesh/jobmesh/internal/grpcserver"
)

// recorder is an Authorizer that records what it saw, denies calls without "ok" metadata and
// services named "denied", and rewrites Check answers to NOT_SERVING.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

type key struct{}

func (r *recorder) Authorize(ctx context.Context, method string, req any) (context.Context, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	what := method + " nil"
	if req != nil {
		what = method + " " + req.(*healthpb.HealthCheckRequest).GetService()
	}
	r.seen = append(r.seen, what)
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("ok")) == 0 {
		return ctx, status.Error(codes.Unauthenticated, "no ok")
	}
	if req != nil && req.(*healthpb.HealthCheckRequest).GetService() == "denied" {
		return ctx, status.Error(codes.PermissionDenied, "denied")
	}
	return context.WithValue(ctx, key{}, "caller"), nil
}

func (r *recorder) Finish(ctx context.Context, _ string, _, resp any, err error) (any, error) {
	if ctx.Value(key{}) != "caller" {
		return nil, status.Error(codes.Internal, "Finish without Authorize's context")
	}
	if hr, ok := resp.(*healthpb.HealthCheckResponse); ok {
		hr.Status = healthpb.HealthCheckResponse_NOT_SERVING
	}
	return resp, err
}

func TestWithAuthorizer(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	g := grpcserver.New(slog.New(slog.DiscardHandler), grpcserver.WithAuthorizer(rec)...)
	// New serves the health service (SERVING for the server as a whole, service ""): the test
	// drives the authorizer through it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := healthpb.NewHealthClient(conn)
	ok := metadata.AppendToOutgoingContext(t.Context(), "ok", "1")

	if _, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Check refused by Authorize: %v, want Unauthenticated", err)
	}
	resp, err := c.Check(ok, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check = %v, %v; want the answer Finish rewrote", resp, err)
	}
	// A stream is authorized when it opens and again on the request it carries.
	w, err := c.Watch(ok, &healthpb.HealthCheckRequest{Service: "denied"})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Watch of a denied request: %v, want PermissionDenied", err)
	}
	w, err = c.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Watch without ok: %v, want Unauthenticated", err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []string{
		"/grpc.health.v1.Health/Check ", "/grpc.health.v1.Health/Check ",
		"/grpc.health.v1.Health/Watch nil", "/grpc.health.v1.Health/Watch denied",
		"/grpc.health.v1.Health/Watch nil",
	}
	if len(rec.seen) != len(want) {
		t.Fatalf("Authorize saw %q, want %q", rec.seen, want)
	}
	for i := range want {
		if rec.seen[i] != want[i] {
			t.Errorf("Authorize call %d = %q, want %q", i, rec.seen[i], want[i])
		}
	}
}
