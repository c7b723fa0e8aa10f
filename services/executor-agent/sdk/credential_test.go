package sdk_test

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// TestExecutorCredential: an executor presents its group's access token and app name to a
// logsvc that refuses calls without them.
func TestExecutorCredential(t *testing.T) {
	t.Parallel()
	ingest := sdktest.NewIngest()
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(func(s any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if v, app := md.Get("authorization"), md.Get("x-jobmesh-executor-app"); len(v) != 1 || v[0] != "Bearer group-token" || len(app) != 1 || app[0] != "test-app" {
			return status.Error(codes.Unauthenticated, "no token")
		}
		return h(s, ss)
	}))
	logsv1.RegisterIngestServiceServer(srv, ingest)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	h := start(t, func(cfg *sdk.Config) { cfg.LogsvcAddr, cfg.AccessToken = ln.Addr().String(), "group-token" })
	h.ingest = ingest
	h.accept(t, bean("330-1-0-0", 330, "gate", ""))
	h.gates.release("330-1-0-0")
	h.wantResult(t, "330-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
}
