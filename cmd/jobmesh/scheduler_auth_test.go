package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/devstack"
)

// TestSchedulerReplicaEnforcesAuth runs a `jobmesh scheduler` replica against a dev stack
// without its own scheduler: the replica reaches the registry and logsvc with the internal
// token, checks people's tokens with the auth service, and applies the same rules as the stack.
func TestSchedulerReplicaEnforcesAuth(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	any0 := "127.0.0.1:0"
	st, err := devstack.Start(ctx, devstack.Config{
		DataDir: t.TempDir(), DatabaseURL: dbURL, UnsafeEtcd: true, NoScheduler: true, SchedulerAddr: "127.0.0.1:1",
		HTTPAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(st.Stop)

	rctx, stop := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runScheduler(rctx, []string{"--grpc-addr", any0, "--etcd-endpoints", st.EtcdEndpoint, "--database-url", dbURL,
			"--registry-addr", st.RegistryAddr, "--logs-addr", st.LogsAddr, "--auth-addr", st.AuthAddr,
			"--internal-token", st.InternalToken, "--session-ttl", "2s", "--log-level", "error",
			"--tls-cert", st.TLSFiles.Cert, "--tls-key", st.TLSFiles.Key, "--tls-ca", st.TLSFiles.CA,
			"--etcd-cert", st.EtcdTLSFiles.Cert, "--etcd-key", st.EtcdTLSFiles.Key, "--etcd-ca", st.EtcdTLSFiles.CA}, w, io.Discard)
		w.Close()
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("runScheduler: %v", err)
		}
	})
	var addr string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "scheduler grpc "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("the replica never printed its address")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	dial := func(target string) *grpc.ClientConn {
		c, err := grpc.NewClient(target, st.TLS.DialOption())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	jobs := schedulerv1.NewJobServiceClient(dial(addr))
	authc := authv1.NewAuthServiceClient(dial(st.AuthAddr))
	as := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	login, err := authc.Login(ctx, &authv1.LoginRequest{Username: "admin", Password: st.AdminPassword})
	if err != nil {
		t.Fatalf("Login: %v", err)
	}
	admin := as(login.GetToken())
	if _, err := authc.CreateUser(admin, &authv1.CreateUserRequest{Password: "viewer-password",
		User: &authv1.User{Username: "vic", Role: authv1.Role_ROLE_VIEWER, GroupIds: []int64{st.GroupID}}}); err != nil {
		t.Fatalf("CreateUser: %v", err)
	}
	vl, err := authc.Login(ctx, &authv1.LoginRequest{Username: "vic", Password: "viewer-password"})
	if err != nil {
		t.Fatalf("Login as the viewer: %v", err)
	}
	viewer := as(vl.GetToken())

	newJob := &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: st.GroupID, Name: "replica-job", Handler: "demo", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
	}}
	if _, err := jobs.CreateJob(ctx, newJob); status.Code(err) != codes.Unauthenticated {
		t.Errorf("CreateJob without a token: %v, want Unauthenticated", err)
	}
	if _, err := jobs.CreateJob(as("jms_not-a-real-token"), newJob); status.Code(err) != codes.Unauthenticated {
		t.Errorf("CreateJob with a made-up token: %v, want Unauthenticated", err)
	}
	if _, err := jobs.CreateJob(viewer, newJob); status.Code(err) != codes.PermissionDenied {
		t.Errorf("CreateJob as a viewer: %v, want PermissionDenied", err)
	}
	created, err := jobs.CreateJob(admin, newJob)
	if err != nil {
		t.Fatalf("CreateJob as the admin: %v", err)
	}
	// The viewer reads it: the replica looks the job's group up on itself.
	if _, err := jobs.GetJob(viewer, &schedulerv1.GetJobRequest{Id: created.GetJob().GetId()}); err != nil {
		t.Errorf("GetJob as a viewer of the job's group: %v", err)
	}
	// The replica writes its audit trail to the auth service.
	events, err := authc.ListAuditEvents(admin, &authv1.ListAuditEventsRequest{})
	if err != nil {
		t.Fatalf("ListAuditEvents: %v", err)
	}
	found := false
	for _, e := range events.GetEvents() {
		found = found || (e.GetUsername() == "admin" && e.GetAction() == schedulerv1.JobService_CreateJob_FullMethodName &&
			e.GetResource() == fmt.Sprintf("jobs/%d", created.GetJob().GetId()))
	}
	if !found {
		t.Errorf("audit events %v, want the admin's CreateJob of job %d", events.GetEvents(), created.GetJob().GetId())
	}
	_, err = authc.RecordAuditEvent(admin, &authv1.RecordAuditEventRequest{Event: &authv1.AuditEvent{Action: "forged"}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("RecordAuditEvent as the admin: %v, want PermissionDenied (internal only)", err)
	}
	if _, err := schedulerv1.NewSchedulerServiceClient(dial(addr)).KillTrigger(admin, &schedulerv1.KillTriggerRequest{TriggerId: "x"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("KillTrigger (internal only) as the admin: %v, want PermissionDenied", err)
	}
}
