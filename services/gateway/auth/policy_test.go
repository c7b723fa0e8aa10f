package auth

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// TestEveryMethodHasARule keeps the policy table complete: a method without a rule is open to
// internal callers only, which is safe but surely not what its author meant.
func TestEveryMethodHasARule(t *testing.T) {
	t.Parallel()
	served := []grpc.ServiceDesc{
		authv1.AuthService_ServiceDesc, schedulerv1.JobService_ServiceDesc, schedulerv1.SchedulerService_ServiceDesc,
		schedulerv1.WorkflowService_ServiceDesc,
		registryv1.RegistryService_ServiceDesc, logsv1.IngestService_ServiceDesc, logsv1.LogService_ServiceDesc,
		healthgrpc.Health_ServiceDesc,
	}
	seen := map[string]bool{}
	for _, sd := range served {
		var names []string
		for _, m := range sd.Methods {
			names = append(names, m.MethodName)
		}
		for _, s := range sd.Streams {
			names = append(names, s.StreamName)
		}
		for _, n := range names {
			full := "/" + sd.ServiceName + "/" + n
			seen[full] = true
			if _, ok := rules[full]; !ok {
				t.Errorf("no access rule for %s", full)
			}
		}
	}
	for m := range rules {
		if !seen[m] {
			t.Errorf("rule for %s, which no service serves", m)
		}
	}
}

func TestRolesAndKinds(t *testing.T) {
	t.Parallel()
	user := func(r authv1.Role) *Caller { return &Caller{Kind: KindUser, User: &authv1.User{Role: r}} }
	callers := map[string]*Caller{
		"viewer": user(authv1.Role_ROLE_VIEWER), "operator": user(authv1.Role_ROLE_OPERATOR), "admin": user(authv1.Role_ROLE_ADMIN),
		"executor": {Kind: KindExecutor, GroupID: 7, App: "app-seven"}, "internal": {Kind: KindInternal},
	}
	tests := []struct {
		method string
		want   string // callers allowed, in the order viewer operator admin executor internal
	}{
		{schedulerv1.JobService_ListJobs_FullMethodName, "viewer operator admin internal"},
		{schedulerv1.JobService_UpdateJob_FullMethodName, "operator admin internal"},
		{registryv1.RegistryService_CreateExecutorGroup_FullMethodName, "admin internal"},
		{authv1.AuthService_ListAuditEvents_FullMethodName, "admin internal"},
		{logsv1.IngestService_IngestResults_FullMethodName, "executor internal"},
		{logsv1.IngestService_IngestLogLines_FullMethodName, "executor internal"},
		{registryv1.RegistryService_RegisterExecutor_FullMethodName, "executor internal"},
		{registryv1.RegistryService_ListExecutorGroups_FullMethodName, "viewer operator admin internal"},
		{logsv1.IngestService_IngestTriggerRecords_FullMethodName, "internal"},
		{schedulerv1.SchedulerService_KillTrigger_FullMethodName, "internal"},
		{authv1.AuthService_CreateApiToken_FullMethodName, "viewer operator admin internal"},
	}
	for _, tt := range tests {
		var got []string
		for _, name := range []string{"viewer", "operator", "admin", "executor", "internal"} {
			if rules[tt.method].allows(callers[name]) {
				got = append(got, name)
			}
		}
		if g := strings.Join(got, " "); g != tt.want {
			t.Errorf("%s allows %q, want %q", tt.method, g, tt.want)
		}
	}
}

// TestAuditDetailHoldsNoSecrets: the audit trail names the fields a change set, never their
// values.
func TestAuditDetailHoldsNoSecrets(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-value"
	tests := []struct {
		req, resp any
		resource  string
	}{
		{&authv1.UpdateUserRequest{User: &authv1.User{Id: 4, Role: authv1.Role_ROLE_VIEWER}, Password: secret}, nil, "users/4"},
		{&authv1.CreateUserRequest{User: &authv1.User{Username: "u"}, Password: secret}, &authv1.CreateUserResponse{User: &authv1.User{Id: 5, Username: "u"}}, "users/5"},
		{&authv1.CreateApiTokenRequest{Token: &authv1.ApiToken{Name: "ci"}}, &authv1.CreateApiTokenResponse{Token: &authv1.ApiToken{Id: 6, Name: "ci"}, Secret: secret}, "api-tokens/6"},
		{&schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{GroupId: 1, GlueSource: "export TOKEN=" + secret, Params: secret}},
			&schedulerv1.CreateJobResponse{Job: &schedulerv1.Job{Id: 7, GroupId: 1}}, "jobs/7"},
		{&schedulerv1.UpdateJobRequest{Job: &schedulerv1.Job{Id: 7, Params: secret}}, nil, "jobs/7"},
		{&schedulerv1.TriggerJobRequest{Id: 7, Params: secret}, nil, "jobs/7"},
		{&registryv1.UpdateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{Id: 2, AccessToken: secret}}, nil, "executor-groups/2"},
		{&authv1.LoginRequest{Username: "ann", Password: secret}, nil, "users/ann"},
	}
	for _, tt := range tests {
		resource, detail := describe(tt.req, tt.resp)
		if resource != tt.resource {
			t.Errorf("describe(%T) resource = %q, want %q", tt.req, resource, tt.resource)
		}
		if strings.Contains(detail, secret) {
			t.Errorf("describe(%T) detail = %q, holds a secret", tt.req, detail)
		}
	}
}

// TestReportsScopedToGroups: reports, the dashboard and running counts of a caller limited to
// groups cover its groups when it names none, and may name only its own.
func TestReportsScopedToGroups(t *testing.T) {
	t.Parallel()
	g := &Guard{}
	op := &Caller{Kind: KindUser, User: &authv1.User{Role: authv1.Role_ROLE_OPERATOR, GroupIds: []int64{1, 3}}}
	none := &Caller{Kind: KindUser, User: &authv1.User{Role: authv1.Role_ROLE_VIEWER}}
	for _, tt := range []struct {
		name   string
		caller *Caller
		req    interface{ GetGroupIds() []int64 }
		want   string // the groups after the check, or the error code
	}{
		{"dashboard, no filter", op, &logsv1.GetDashboardRequest{}, "[1 3]"},
		{"dashboard, one of its groups", op, &logsv1.GetDashboardRequest{GroupIds: []int64{3}}, "[3]"},
		{"dashboard, another group", op, &logsv1.GetDashboardRequest{GroupIds: []int64{1, 2}}, "PermissionDenied"},
		{"report, no filter", op, &logsv1.GetReportRequest{StartDate: "2030-01-01", EndDate: "2030-01-01"}, "[1 3]"},
		{"report, another group", op, &logsv1.GetReportRequest{GroupIds: []int64{2}}, "PermissionDenied"},
		{"running runs, no filter", op, &logsv1.CountRunningRunsRequest{}, "[1 3]"},
		{"running runs, another group", op, &logsv1.CountRunningRunsRequest{GroupIds: []int64{4}}, "PermissionDenied"},
		{"a caller with no group", none, &logsv1.GetDashboardRequest{}, "PermissionDenied"},
	} {
		got := ""
		if err := g.checkGroups(t.Context(), tt.caller, tt.req); err != nil {
			got = status.Code(err).String()
		} else {
			got = fmt.Sprint(tt.req.GetGroupIds())
		}
		if got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
	// The caller's own list is copied, not shared with the request.
	req := &logsv1.GetDashboardRequest{}
	if err := g.checkGroups(t.Context(), op, req); err != nil {
		t.Fatal(err)
	}
	req.GroupIds[0] = 99
	if op.User.GetGroupIds()[0] != 1 {
		t.Error("the request shares the caller's group list")
	}
}
