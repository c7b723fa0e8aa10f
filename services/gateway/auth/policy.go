package auth

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
)

// access is the least a caller needs to make a call.
type access int

const (
	public   access = iota // anyone, no token (Login)
	anyUser                // any valid token
	read                   // viewer, operator or admin
	write                  // operator or admin
	admin                  // admin
	executor               // an executor or a service (registration, result and log delivery)
	internal               // services only
)

func (a access) String() string {
	return [...]string{"no token", "a token", "the viewer role", "the operator role", "the admin role", "an executor group's access token", "the internal token"}[a]
}

// rule is the policy of one method.
type rule struct {
	access access
	// grouped: for a caller limited to executor groups, checkGroups checks (or fills in) the
	// groups the request touches.
	grouped bool
	// audit: a successful call by a person is written to the audit trail.
	audit bool
}

func (r rule) allows(c *Caller) bool {
	switch c.Kind {
	case KindInternal:
		return true
	case KindExecutor:
		return r.access == executor
	}
	switch r.access {
	case public, anyUser, read:
		return true
	case write:
		return c.User.GetRole() == authv1.Role_ROLE_ADMIN || c.User.GetRole() == authv1.Role_ROLE_OPERATOR
	case admin:
		return c.User.GetRole() == authv1.Role_ROLE_ADMIN
	}
	return false
}

var (
	readGrouped  = rule{access: read, grouped: true}
	writeGrouped = rule{access: write, grouped: true, audit: true}
	adminChange  = rule{access: admin, audit: true}
)

// rules is the method → permission table of every jobmesh gRPC service. A method missing here
// is open to internal callers only (TestEveryMethodHasARule keeps it complete).
var rules = map[string]rule{
	healthgrpc.Health_Check_FullMethodName:             {access: public},
	healthgrpc.Health_List_FullMethodName:              {access: public},
	healthgrpc.Health_Watch_FullMethodName:             {access: public},
	authv1.AuthService_Login_FullMethodName:            {access: public, audit: true},
	authv1.AuthService_Logout_FullMethodName:           {access: anyUser},
	authv1.AuthService_GetCurrentUser_FullMethodName:   {access: anyUser},
	authv1.AuthService_ChangePassword_FullMethodName:   {access: anyUser, audit: true},
	authv1.AuthService_ListUsers_FullMethodName:        {access: admin},
	authv1.AuthService_CreateUser_FullMethodName:       adminChange,
	authv1.AuthService_UpdateUser_FullMethodName:       adminChange,
	authv1.AuthService_DeleteUser_FullMethodName:       adminChange,
	authv1.AuthService_CreateApiToken_FullMethodName:   {access: anyUser, audit: true},
	authv1.AuthService_ListApiTokens_FullMethodName:    {access: anyUser},
	authv1.AuthService_RevokeApiToken_FullMethodName:   {access: anyUser, audit: true},
	authv1.AuthService_ListAuditEvents_FullMethodName:  {access: admin},
	authv1.AuthService_RecordAuditEvent_FullMethodName: {access: internal},

	schedulerv1.JobService_CreateJob_FullMethodName:          writeGrouped,
	schedulerv1.JobService_GetJob_FullMethodName:             readGrouped,
	schedulerv1.JobService_ListJobs_FullMethodName:           readGrouped,
	schedulerv1.JobService_UpdateJob_FullMethodName:          writeGrouped,
	schedulerv1.JobService_DeleteJob_FullMethodName:          writeGrouped,
	schedulerv1.JobService_StartJob_FullMethodName:           writeGrouped,
	schedulerv1.JobService_StopJob_FullMethodName:            writeGrouped,
	schedulerv1.JobService_TriggerJob_FullMethodName:         writeGrouped,
	schedulerv1.JobService_CopyJob_FullMethodName:            writeGrouped,
	schedulerv1.JobService_ListGlueVersions_FullMethodName:   readGrouped,
	schedulerv1.JobService_RestoreGlueVersion_FullMethodName: writeGrouped,
	schedulerv1.JobService_PreviewSchedule_FullMethodName:    {access: read},

	schedulerv1.WorkflowService_ValidateWorkflow_FullMethodName:       readGrouped,
	schedulerv1.WorkflowService_CreateWorkflow_FullMethodName:         writeGrouped,
	schedulerv1.WorkflowService_GetWorkflow_FullMethodName:            readGrouped,
	schedulerv1.WorkflowService_ListWorkflows_FullMethodName:          readGrouped,
	schedulerv1.WorkflowService_UpdateWorkflow_FullMethodName:         writeGrouped,
	schedulerv1.WorkflowService_DeleteWorkflow_FullMethodName:         writeGrouped,
	schedulerv1.WorkflowService_TriggerWorkflow_FullMethodName:        writeGrouped,
	schedulerv1.WorkflowService_ListWorkflowInstances_FullMethodName:  readGrouped,
	schedulerv1.WorkflowService_GetWorkflowInstance_FullMethodName:    readGrouped,
	schedulerv1.WorkflowService_CountWorkflowInstances_FullMethodName: readGrouped,
	schedulerv1.WorkflowService_KillWorkflowInstance_FullMethodName:   writeGrouped,
	schedulerv1.WorkflowService_RetryWorkflowInstance_FullMethodName:  writeGrouped,
	schedulerv1.WorkflowService_MarkWorkflowNodeDone_FullMethodName:   writeGrouped,
	schedulerv1.SchedulerService_GetStatus_FullMethodName:             {access: read},
	schedulerv1.SchedulerService_KillTrigger_FullMethodName:           {access: internal},
	schedulerv1.SchedulerService_XxlCallback_FullMethodName:           {access: internal},

	registryv1.RegistryService_ListExecutorGroups_FullMethodName:  {access: read}, // trimmed in Finish
	registryv1.RegistryService_CreateExecutorGroup_FullMethodName: adminChange,
	registryv1.RegistryService_GetExecutorGroup_FullMethodName:    readGrouped,
	registryv1.RegistryService_UpdateExecutorGroup_FullMethodName: adminChange,
	registryv1.RegistryService_DeleteExecutorGroup_FullMethodName: adminChange,
	registryv1.RegistryService_ListExecutors_FullMethodName:       {access: read}, // trimmed in Finish
	registryv1.RegistryService_WatchExecutors_FullMethodName:      readGrouped,
	registryv1.RegistryService_RegisterExecutor_FullMethodName:    {access: executor},
	registryv1.RegistryService_RegisterXxlExecutor_FullMethodName: {access: internal},
	registryv1.RegistryService_RemoveXxlExecutor_FullMethodName:   {access: internal},

	logsv1.IngestService_IngestTriggerRecords_FullMethodName: {access: internal},
	logsv1.IngestService_IngestResults_FullMethodName:        {access: executor},
	logsv1.IngestService_IngestLogLines_FullMethodName:       {access: executor},
	logsv1.LogService_ListRuns_FullMethodName:                readGrouped,
	logsv1.LogService_GetRun_FullMethodName:                  readGrouped,
	logsv1.LogService_ListRunLines_FullMethodName:            readGrouped,
	logsv1.LogService_TailRun_FullMethodName:                 readGrouped,
	logsv1.LogService_KillRun_FullMethodName:                 writeGrouped,
	logsv1.LogService_ClearRuns_FullMethodName:               writeGrouped,
	logsv1.LogService_GetReport_FullMethodName:               readGrouped,
	logsv1.LogService_GetDashboard_FullMethodName:            readGrouped,
	logsv1.LogService_CountRunningRuns_FullMethodName:        readGrouped,
	logsv1.LogService_LookupTriggers_FullMethodName:          {access: internal},
	logsv1.LogService_WatchCompletions_FullMethodName:        {access: internal},
	logsv1.LogService_SendWorkflowAlarm_FullMethodName:       {access: internal},
}

// GroupLister lists the executor groups that exist.
type GroupLister interface {
	// GroupApps returns the app name of every group, by group id.
	GroupApps(ctx context.Context) (map[int64]string, error)
}

// GroupResolver finds the executor group of what a request names, for callers limited to
// groups. ClientResolver asks the services over gRPC.
type GroupResolver interface {
	GroupLister
	// JobGroup returns the group of a job.
	JobGroup(ctx context.Context, jobID int64) (int64, error)
	// RunGroup returns the group of a run (trigger id).
	RunGroup(ctx context.Context, runID string) (int64, error)
	// WorkflowGroup returns the group of a workflow.
	WorkflowGroup(ctx context.Context, workflowID int64) (int64, error)
}

// checkGroups checks the groups a request of a grouped method touches against a caller limited
// to groups, filling in an unset group filter of a listing (see scope).
func (g *Guard) checkGroups(ctx context.Context, c *Caller, req any) error {
	res := g.cfg.Groups
	job := func(id int64) error {
		if res == nil {
			return errNoResolver
		}
		gid, err := res.JobGroup(ctx, id)
		if err != nil {
			return err
		}
		return allowed(c, gid)
	}
	workflow := func(id int64) error {
		if res == nil {
			return errNoResolver
		}
		gid, err := res.WorkflowGroup(ctx, id)
		if err != nil {
			return err
		}
		return allowed(c, gid)
	}
	instance := func(id string) error { // w<workflow>-<scheduled ms>
		w, _, _ := strings.Cut(strings.TrimPrefix(id, "w"), "-")
		wf, err := strconv.ParseInt(w, 10, 64)
		if err != nil || !strings.HasPrefix(id, "w") {
			return apierr.Field("id", "not a workflow instance id (w<workflow>-<scheduled ms>): %q", id)
		}
		return workflow(wf)
	}
	run := func(id string) error {
		if res == nil {
			return errNoResolver
		}
		gid, err := res.RunGroup(ctx, id)
		if err != nil {
			return err
		}
		return allowed(c, gid)
	}
	switch r := req.(type) {
	case *schedulerv1.CreateJobRequest:
		return allowed(c, r.GetJob().GetGroupId())
	case *schedulerv1.UpdateJobRequest:
		if gid := r.GetJob().GetGroupId(); gid != 0 { // moving it: the new group must be ours too
			if err := allowed(c, gid); err != nil {
				return err
			}
		}
		return job(r.GetJob().GetId())
	case *schedulerv1.ListJobsRequest:
		return scope(c, &r.GroupId, "group_id")
	case *schedulerv1.GetJobRequest:
		return job(r.GetId())
	case *schedulerv1.DeleteJobRequest:
		return job(r.GetId())
	case *schedulerv1.StartJobRequest:
		return job(r.GetId())
	case *schedulerv1.StopJobRequest:
		return job(r.GetId())
	case *schedulerv1.TriggerJobRequest:
		return job(r.GetId())
	case *schedulerv1.CopyJobRequest:
		return job(r.GetId())
	case *schedulerv1.ListGlueVersionsRequest:
		return job(r.GetJobId())
	case *schedulerv1.RestoreGlueVersionRequest:
		return job(r.GetJobId())

	case *schedulerv1.ValidateWorkflowRequest:
		return allowed(c, r.GetWorkflow().GetGroupId())
	case *schedulerv1.CreateWorkflowRequest:
		return allowed(c, r.GetWorkflow().GetGroupId())
	case *schedulerv1.UpdateWorkflowRequest:
		if err := allowed(c, r.GetWorkflow().GetGroupId()); err != nil { // the group it moves to (or stays in)
			return err
		}
		return workflow(r.GetWorkflow().GetId())
	case *schedulerv1.GetWorkflowRequest:
		return workflow(r.GetId())
	case *schedulerv1.ListWorkflowsRequest:
		return scope(c, &r.GroupId, "group_id")
	case *schedulerv1.DeleteWorkflowRequest:
		return workflow(r.GetId())
	case *schedulerv1.TriggerWorkflowRequest:
		return workflow(r.GetId())
	case *schedulerv1.ListWorkflowInstancesRequest:
		return workflow(r.GetWorkflowId())
	case *schedulerv1.CountWorkflowInstancesRequest:
		return scopeAll(c, &r.GroupIds)
	case *schedulerv1.GetWorkflowInstanceRequest:
		return instance(r.GetId())
	case *schedulerv1.KillWorkflowInstanceRequest:
		return instance(r.GetId())
	case *schedulerv1.RetryWorkflowInstanceRequest:
		return instance(r.GetId())
	case *schedulerv1.MarkWorkflowNodeDoneRequest:
		return instance(r.GetId())

	case *logsv1.ListRunsRequest:
		if r.GroupId == 0 && r.JobId != 0 {
			return job(r.JobId)
		}
		return scope(c, &r.GroupId, "group_id")
	case *logsv1.ClearRunsRequest:
		if r.GroupId == 0 && r.JobId != 0 {
			return job(r.JobId)
		}
		return scope(c, &r.GroupId, "group_id")
	case *logsv1.GetReportRequest:
		return scopeAll(c, &r.GroupIds)
	case *logsv1.GetDashboardRequest:
		return scopeAll(c, &r.GroupIds)
	case *logsv1.CountRunningRunsRequest:
		return scopeAll(c, &r.GroupIds)
	case *logsv1.GetRunRequest:
		return run(r.GetId())
	case *logsv1.ListRunLinesRequest:
		return run(r.GetId())
	case *logsv1.TailRunRequest:
		return run(r.GetId())
	case *logsv1.KillRunRequest:
		return run(r.GetId())

	case *registryv1.GetExecutorGroupRequest:
		return allowed(c, r.GetId())
	case *registryv1.WatchExecutorsRequest:
		apps, err := g.permittedApps(ctx, c)
		if err != nil {
			return err
		}
		if !slices.Contains(apps, r.GetAppName()) {
			return apierr.Statusf(codes.PermissionDenied, apierr.ReasonGroupNotAllowed, "app_name: want the app of one of your executor groups %v", c.User.GetGroupIds())
		}
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "no executor group check for %T", req)
}

// permittedApps lists the app names of the caller's groups.
func (g *Guard) permittedApps(ctx context.Context, c *Caller) ([]string, error) {
	if g.cfg.Groups == nil {
		return nil, errNoResolver
	}
	apps, err := g.cfg.Groups.GroupApps(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range c.User.GetGroupIds() {
		if a, ok := apps[id]; ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// trim removes from a listing what a caller limited to groups may not see.
func (g *Guard) trim(ctx context.Context, c *Caller, resp any) (any, error) {
	switch r := resp.(type) {
	case *registryv1.ListExecutorGroupsResponse:
		r.Groups = slices.DeleteFunc(r.Groups, func(gr *registryv1.ExecutorGroup) bool {
			return !slices.Contains(c.User.GetGroupIds(), gr.GetId())
		})
	case *registryv1.ListExecutorsResponse:
		apps, err := g.permittedApps(ctx, c)
		if err != nil {
			return nil, err
		}
		r.Executors = slices.DeleteFunc(r.Executors, func(e *registryv1.Executor) bool {
			return !slices.Contains(apps, e.GetAppName())
		})
	}
	return resp, nil
}

// describe names the resource a change touched and summarises it for the audit trail: which
// fields were set, never their values, so no secret (password, token, GLUE source, params) is
// ever written.
func describe(req, resp any) (resource, detail string) {
	id := func(kind string, n int64) string { return fmt.Sprintf("%s/%d", kind, n) }
	switch r := req.(type) {
	case *authv1.LoginRequest:
		return "users/" + r.GetUsername(), "login"
	case *authv1.ChangePasswordRequest:
		return "users/me", "password changed"
	case *authv1.CreateUserRequest:
		u := resp.(*authv1.CreateUserResponse).GetUser()
		return id("users", u.GetId()), fmt.Sprintf("username=%s role=%s groups=%v", u.GetUsername(), u.GetRole(), u.GetGroupIds())
	case *authv1.UpdateUserRequest:
		d := fmt.Sprintf("role=%s groups=%v", r.GetUser().GetRole(), r.GetUser().GetGroupIds())
		if r.GetPassword() != "" {
			d += " password changed"
		}
		return id("users", r.GetUser().GetId()), d
	case *authv1.DeleteUserRequest:
		return id("users", r.GetId()), "deleted"
	case *authv1.CreateApiTokenRequest:
		t := resp.(*authv1.CreateApiTokenResponse).GetToken()
		return id("api-tokens", t.GetId()), "created, name=" + t.GetName()
	case *authv1.RevokeApiTokenRequest:
		return id("api-tokens", r.GetId()), "revoked"

	case *schedulerv1.CreateJobRequest:
		j := resp.(*schedulerv1.CreateJobResponse).GetJob()
		return id("jobs", j.GetId()), fmt.Sprintf("created in group %d; set %s", j.GetGroupId(), setFields(r.GetJob()))
	case *schedulerv1.UpdateJobRequest:
		fields := setFields(r.GetJob())
		if m := r.GetUpdateMask(); len(m.GetPaths()) > 0 {
			fields = strings.Join(m.GetPaths(), ", ")
		}
		return id("jobs", r.GetJob().GetId()), "updated " + fields
	case *schedulerv1.DeleteJobRequest:
		return id("jobs", r.GetId()), "deleted"
	case *schedulerv1.StartJobRequest:
		return id("jobs", r.GetId()), "started"
	case *schedulerv1.StopJobRequest:
		return id("jobs", r.GetId()), "stopped"
	case *schedulerv1.TriggerJobRequest:
		d := "triggered"
		if len(r.GetAddresses()) > 0 {
			d += fmt.Sprintf(" on %v", r.GetAddresses())
		}
		return id("jobs", r.GetId()), d
	case *schedulerv1.CopyJobRequest:
		return id("jobs", resp.(*schedulerv1.CopyJobResponse).GetJob().GetId()), id("copied from jobs", r.GetId())
	case *schedulerv1.RestoreGlueVersionRequest:
		return id("jobs", r.GetJobId()), fmt.Sprintf("restored GLUE version %d", r.GetVersion())

	case *schedulerv1.CreateWorkflowRequest:
		w := resp.(*schedulerv1.CreateWorkflowResponse).GetWorkflow()
		return id("workflows", w.GetId()), fmt.Sprintf("created in group %d with %d nodes", w.GetGroupId(), len(w.GetNodes()))
	case *schedulerv1.UpdateWorkflowRequest:
		w := resp.(*schedulerv1.UpdateWorkflowResponse).GetWorkflow()
		return id("workflows", w.GetId()), fmt.Sprintf("updated to version %d", w.GetVersion())
	case *schedulerv1.DeleteWorkflowRequest:
		return id("workflows", r.GetId()), "deleted"
	case *schedulerv1.TriggerWorkflowRequest:
		return id("workflows", r.GetId()), "triggered: instance " + resp.(*schedulerv1.TriggerWorkflowResponse).GetInstance().GetId()
	case *schedulerv1.KillWorkflowInstanceRequest:
		return "workflow-instances/" + r.GetId(), "killed"
	case *schedulerv1.RetryWorkflowInstanceRequest:
		return "workflow-instances/" + r.GetId(), "retried"
	case *schedulerv1.MarkWorkflowNodeDoneRequest:
		return "workflow-instances/" + r.GetId(), "node " + r.GetNodeId() + " marked done"

	case *registryv1.CreateExecutorGroupRequest:
		gr := resp.(*registryv1.CreateExecutorGroupResponse).GetGroup()
		return id("executor-groups", gr.GetId()), "created, app_name=" + gr.GetAppName()
	case *registryv1.UpdateExecutorGroupRequest:
		fields := setFields(r.GetGroup())
		if m := r.GetUpdateMask(); len(m.GetPaths()) > 0 {
			fields = strings.Join(m.GetPaths(), ", ")
		}
		return id("executor-groups", r.GetGroup().GetId()), "updated " + fields
	case *registryv1.DeleteExecutorGroupRequest:
		return id("executor-groups", r.GetId()), "deleted"

	case *logsv1.KillRunRequest:
		return "runs/" + r.GetId(), "killed"
	case *logsv1.ClearRunsRequest:
		d := fmt.Sprintf("cleared group_id=%d job_id=%d", r.GetGroupId(), r.GetJobId())
		if r.GetKeepNewest() > 0 {
			d += fmt.Sprintf(" keep_newest=%d", r.GetKeepNewest())
		} else {
			d += " before " + r.GetBeforeTime().AsTime().UTC().Format("2006-01-02T15:04:05Z")
		}
		return "runs", d
	}
	return "", fmt.Sprintf("%T", req)
}

// setFields lists the populated fields of m by name.
func setFields(m proto.Message) string {
	if m == nil {
		return "nothing"
	}
	var names []string
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		names = append(names, string(fd.Name()))
		return true
	})
	if len(names) == 0 {
		return "nothing"
	}
	return strings.Join(names, ", ")
}
