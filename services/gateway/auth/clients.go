package auth

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// BearerToken returns a dial option that presents token as "authorization: Bearer <token>" on
// every call of the connection: how services present the internal token and agents the agent
// token. It allows plaintext connections, as the mesh uses today; with TLS nothing changes.
func BearerToken(token string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearerCreds(token))
}

type bearerCreds string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: plaintext is allowed.
func (bearerCreds) RequireTransportSecurity() bool { return false }

var _ credentials.PerRPCCredentials = bearerCreds("")

// RemoteUsers authenticates people's tokens by asking the auth service (GetCurrentUser with the
// caller's token), for services that run in another process than auth, such as a `jobmesh
// scheduler` replica. Its connection must not carry the internal token.
type RemoteUsers struct {
	// Client is the auth service.
	Client authv1.AuthServiceClient
}

// AuthenticateToken implements Authenticator.
func (r RemoteUsers) AuthenticateToken(ctx context.Context, token string) (*authv1.User, error) {
	ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
	resp, err := r.Client.GetCurrentUser(ctx, &authv1.GetCurrentUserRequest{})
	switch status.Code(err) {
	case codes.OK:
		return resp.GetUser(), nil
	case codes.Unauthenticated:
		return nil, err
	}
	return nil, status.Errorf(codes.Unavailable, "checking the token with the auth service: %v", status.Convert(err).Message())
}

// ClientResolver is a GroupResolver over the services' own APIs. Its clients' connections must
// present the internal token (BearerToken), so the lookups pass the services' guards.
type ClientResolver struct {
	// Jobs finds a job's group.
	Jobs schedulerv1.JobServiceClient
	// Logs finds a run's group.
	Logs logsv1.LogServiceClient
	// Registry lists groups.
	Registry registryv1.RegistryServiceClient
	// Workflows finds a workflow's group.
	Workflows schedulerv1.WorkflowServiceClient
}

// WorkflowGroup implements GroupResolver.
func (r ClientResolver) WorkflowGroup(ctx context.Context, id int64) (int64, error) {
	if r.Workflows == nil {
		return 0, status.Error(codes.Unavailable, "looking up the workflow's executor group: no workflow client")
	}
	resp, err := r.Workflows.GetWorkflow(ctx, &schedulerv1.GetWorkflowRequest{Id: id})
	if err != nil {
		return 0, lookupErr("workflow", err)
	}
	return resp.GetWorkflow().GetGroupId(), nil
}

// JobGroup implements GroupResolver.
func (r ClientResolver) JobGroup(ctx context.Context, id int64) (int64, error) {
	resp, err := r.Jobs.GetJob(ctx, &schedulerv1.GetJobRequest{Id: id})
	if err != nil {
		return 0, lookupErr("job", err)
	}
	return resp.GetJob().GetGroupId(), nil
}

// RunGroup implements GroupResolver.
func (r ClientResolver) RunGroup(ctx context.Context, id string) (int64, error) {
	resp, err := r.Logs.GetRun(ctx, &logsv1.GetRunRequest{Id: id})
	if err != nil {
		return 0, lookupErr("run", err)
	}
	return resp.GetRun().GetGroupId(), nil
}

// GroupApps implements GroupResolver.
func (r ClientResolver) GroupApps(ctx context.Context) (map[int64]string, error) {
	resp, err := r.Registry.ListExecutorGroups(ctx, &registryv1.ListExecutorGroupsRequest{})
	if err != nil {
		return nil, lookupErr("executor groups", err)
	}
	apps := make(map[int64]string, len(resp.GetGroups()))
	for _, g := range resp.GetGroups() {
		apps[g.GetId()] = g.GetAppName()
	}
	return apps, nil
}

// lookupErr keeps NotFound and InvalidArgument (the caller named something that does not exist,
// or badly) and reports anything else as the lookup being unavailable.
func lookupErr(what string, err error) error {
	switch status.Code(err) {
	case codes.NotFound, codes.InvalidArgument:
		return err
	}
	return status.Errorf(codes.Unavailable, "looking up the %s's executor group: %s", what, fmt.Sprint(status.Convert(err).Message()))
}
