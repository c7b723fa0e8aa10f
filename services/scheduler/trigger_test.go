package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// TestTriggerAddressesStayInTheJobsGroup: a manual fire may name executor addresses, but only
// the job's own group's (an online executor, or a manual address); another group's machine is
// refused with the field named, so firing a job cannot run code elsewhere.
func TestTriggerAddressesStayInTheJobsGroup(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var runs counter
	group := c.executor(t, "home-app", "work", func(_ context.Context, j *sdk.Job) error {
		runs.add(j)
		return nil
	})
	reg := registryv1.NewRegistryServiceClient(c.regConn)
	home, err := reg.GetExecutorGroup(t.Context(), &registryv1.GetExecutorGroupRequest{Id: group})
	if err != nil {
		t.Fatal(err)
	}
	online := home.GetGroup().GetAddresses()[0]
	manual, err := reg.CreateExecutorGroup(t.Context(), &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: "fixed-app", Title: "fixed", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL,
		ManualAddresses: []string{"127.0.0.1:7001", "127.0.0.1:7002"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := c.replica(t, "a")
	newJob := func(gid int64, name string) int64 {
		t.Helper()
		j, err := s.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
			GroupId: gid, Name: name, Handler: "work", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
			Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return j.GetJob().GetId()
	}
	homeJob, fixedJob := newJob(group, "home"), newJob(manual.GetGroup().GetId(), "fixed")

	for _, tt := range []struct {
		name  string
		job   int64
		addrs []string
		field string // empty: accepted
	}{
		{"another group's manual address", homeJob, []string{"127.0.0.1:7001"}, "addresses[0]"},
		{"an address no group has", homeJob, []string{online, "10.9.9.9:9999"}, "addresses[1]"},
		{"another group's online executor", fixedJob, []string{online}, "addresses[0]"},
		{"a manual address of the job's group", fixedJob, []string{"127.0.0.1:7002"}, ""},
		{"an online executor of the job's group", homeJob, []string{online}, ""},
	} {
		_, err := s.TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{Id: tt.job, Addresses: tt.addrs})
		if tt.field == "" {
			if err != nil {
				t.Errorf("%s: %v, want it accepted", tt.name, err)
			}
			continue
		}
		if st := status.Convert(apierr.ToStatus(err)); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.field) {
			t.Errorf("%s: %v, want InvalidArgument naming %s", tt.name, err, tt.field)
		}
	}
	// Only the accepted fire on the online executor ran there; the refused ones ran nowhere.
	eventually(t, 15*time.Second, "the accepted fire runs", func() bool {
		seen, _ := runs.snapshot()
		return len(seen) == 1
	})
	if seen, _ := runs.snapshot(); seen[0].ID != homeJob {
		t.Errorf("ran job %d, want %d", seen[0].ID, homeJob)
	}
}
