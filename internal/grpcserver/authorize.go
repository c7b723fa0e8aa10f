package grpcserver

import (
	"context"

	"google.golang.org/grpc"
)

// Authorizer decides who may make which call. Every jobmesh service installs the same one
// (services/gateway/auth.Guard) with WithAuthorizer, so a gRPC client meets exactly the rules a
// REST client meets through the gateway.
type Authorizer interface {
	// Authorize runs before the handler and returns the context the handler runs with (carrying
	// the caller). For a unary call it sees the request. For a stream it runs once when the
	// stream opens, with a nil request, and again for every message the client sends, with the
	// context it returned the first time. An error ends the call with that error's status.
	Authorize(ctx context.Context, method string, req any) (context.Context, error)
	// Finish sees a unary call's outcome before the client does. It may replace the response,
	// to trim what the caller may not see, and record the call, for an audit trail.
	Finish(ctx context.Context, method string, req, resp any, err error) (any, error)
}

// WithAuthorizer returns the server options that put every call through a. Pass them to New:
// they run inside recovery and error translation, so a panic or a domain error in a is handled
// like one in a handler.
func WithAuthorizer(a Authorizer) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ctx, err := a.Authorize(ctx, info.FullMethod, req)
			if err != nil {
				return nil, err
			}
			resp, err := h(ctx, req)
			return a.Finish(ctx, info.FullMethod, req, resp, err)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			ctx, err := a.Authorize(ss.Context(), info.FullMethod, nil)
			if err != nil {
				return err
			}
			return h(srv, &authorizedStream{ServerStream: ss, ctx: ctx, a: a, method: info.FullMethod})
		}),
	}
}

// authorizedStream runs the Authorizer on every message the client sends.
type authorizedStream struct {
	grpc.ServerStream
	ctx    context.Context
	a      Authorizer
	method string
}

func (s *authorizedStream) Context() context.Context { return s.ctx }

func (s *authorizedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	_, err := s.a.Authorize(s.ctx, s.method, m)
	return err
}
