// Package grpcserver builds the gRPC servers of the jobmesh services the same way: panics become
// Internal, domain errors become statuses (apierr.ToStatus), OpenTelemetry follows every call,
// and, with WithAuthorizer, every call is checked against the caller's token.
package grpcserver

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/jobmesh/jobmesh/internal/apierr"
)

// New returns a server with recovery, error translation and tracing installed, and the standard
// gRPC health service (grpc.health.v1, SERVING while the server serves; `jobmesh health` and
// container health checks ask it); opts follow them (interceptors in opts run inside recovery).
// A served service passes WithAuthorizer(guard)...; only tests of one service alone leave it out.
func New(log *slog.Logger, opts ...grpc.ServerOption) *grpc.Server {
	base := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithFilter(filters.Not(filters.HealthCheck())))), // health checks are not traced
		grpc.ChainUnaryInterceptor(unaryRecover(log)),
		grpc.ChainStreamInterceptor(streamRecover(log)),
	}
	g := grpc.NewServer(append(base, opts...)...)
	healthgrpc.RegisterHealthServer(g, health.NewServer())
	return g
}

func unaryRecover(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.ErrorContext(ctx, "panic in rpc", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = apierr.Status(codes.Internal, "", "internal error")
			}
		}()
		resp, err = h(ctx, req)
		return resp, apierr.ToStatus(err)
	}
}

func streamRecover(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.ErrorContext(ss.Context(), "panic in rpc", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = apierr.Status(codes.Internal, "", "internal error")
			}
		}()
		return apierr.ToStatus(h(srv, ss))
	}
}

// StopGrace is how long Stop lets running calls finish by default: streams that never end on
// their own (an agent's watch, a console's tail) are cut after it, so a shutdown always ends.
const StopGrace = 5 * time.Second

// Stop stops g gracefully, cutting the calls still running after grace.
func Stop(g *grpc.Server, grace time.Duration, log *slog.Logger) {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn("grpc calls still running after the grace period; cutting them", "grace", grace)
		g.Stop()
		<-done
	}
}
