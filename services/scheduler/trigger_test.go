package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/scheduler"
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

// TestSimultaneousManualTriggersAreRunsOfTheirOwn: 30 manual triggers of one job, sent at once
// through two replicas with different params, are 30 runs with 30 trigger ids, each with its
// own params. (Triggers in the same millisecond used to share a trigger id and merge.)
func TestSimultaneousManualTriggersAreRunsOfTheirOwn(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var runs counter
	group := c.executor(t, "burst-app", "work", func(_ context.Context, j *sdk.Job) error {
		runs.add(j)
		return nil
	})
	replicas := []*scheduler.Service{c.replica(t, "a"), c.replica(t, "b")}
	j, err := replicas[0].CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: group, Name: "burst", Handler: "work", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
	}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	ids := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			resp, err := replicas[i%2].TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{
				Id: j.GetJob().GetId(), Params: fmt.Sprintf("p%d", i)})
			if err == nil && len(resp.GetTriggerIds()) == 1 {
				ids[i] = resp.GetTriggerIds()[0]
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	want := map[string]string{} // trigger id → params
	for i := range n {
		if errs[i] != nil || ids[i] == "" {
			t.Fatalf("trigger %d: ids %v, error %v", i, ids[i], errs[i])
		}
		if p, dup := want[ids[i]]; dup {
			t.Errorf("triggers with params %s and p%d got the same id %s", p, i, ids[i])
		}
		want[ids[i]] = fmt.Sprintf("p%d", i)
	}
	eventually(t, 20*time.Second, "every trigger runs", func() bool {
		seen, _ := runs.snapshot()
		return len(seen) >= n
	})
	seen, perID := runs.snapshot()
	if len(seen) != n || len(perID) != n {
		t.Errorf("%d runs with %d trigger ids, want %d of each", len(seen), len(perID), n)
	}
	for _, r := range seen {
		if got, ok := want[r.TriggerID]; !ok || r.Params != got {
			t.Errorf("run %s had params %q, want %q", r.TriggerID, r.Params, got)
		}
	}
}
