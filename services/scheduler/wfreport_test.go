package scheduler

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// TestCountWorkflowInstances: instances are counted by status per UTC day of their scheduled
// time, and only those of the groups asked for; a bad range names its field.
func TestCountWorkflowInstances(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	g := r.graph(t, "A B", "A>B")
	g.MaxConcurrentInstances = 10
	w := r.create(t, g)
	ok, failed, running := r.trigger(t, w.GetId(), nil), r.trigger(t, w.GetId(), nil), r.trigger(t, w.GetId(), nil)
	r.run(t, ok, "A", stSuccess, nil)
	r.run(t, ok, "B", stSuccess, nil)
	r.run(t, failed, "A", stFail, nil)
	r.want(t, failed, "FAILED", "A=FAILED B=SKIPPED")
	r.run(t, running, "A", stSuccess, nil)
	killed := r.trigger(t, w.GetId(), nil)
	if _, err := r.s.KillWorkflowInstance(t.Context(), &schedulerv1.KillWorkflowInstanceRequest{Id: killed}); err != nil {
		t.Fatal(err)
	}
	r.clk.Advance(24 * time.Hour) // one more, the next day
	r.trigger(t, w.GetId(), nil)
	// A fire over max_concurrent_instances is a SKIPPED instance, counted too.
	g.Id, g.Version, g.MaxConcurrentInstances = w.GetId(), w.GetVersion(), 1
	if _, err := r.s.UpdateWorkflow(t.Context(), &schedulerv1.UpdateWorkflowRequest{Workflow: g}); err != nil {
		t.Fatal(err)
	}
	r.trigger(t, w.GetId(), nil)

	day := func(off int) string {
		return time.UnixMilli(1_700_000_000_000).UTC().AddDate(0, 0, off).Format(time.DateOnly)
	}
	count := func(groups ...int64) []*schedulerv1.WorkflowInstanceDay {
		t.Helper()
		resp, err := r.s.CountWorkflowInstances(t.Context(), &schedulerv1.CountWorkflowInstancesRequest{StartDate: day(-1), EndDate: day(1), GroupIds: groups})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetDays()
	}
	want := []*schedulerv1.WorkflowInstanceDay{
		{Date: day(-1), Counts: &schedulerv1.WorkflowInstanceCounts{}},
		{Date: day(0), Counts: &schedulerv1.WorkflowInstanceCounts{Running: 1, Success: 1, Failed: 1, Killed: 1}},
		{Date: day(1), Counts: &schedulerv1.WorkflowInstanceCounts{Running: 1, Skipped: 1}},
	}
	for _, groups := range [][]int64{nil, {1}, {2, 1}} {
		if got := count(groups...); !proto.Equal(&schedulerv1.CountWorkflowInstancesResponse{Days: got}, &schedulerv1.CountWorkflowInstancesResponse{Days: want}) {
			t.Fatalf("groups %v: got %v, want %v", groups, got, want)
		}
	}
	for _, d := range count(2) {
		if !proto.Equal(d.GetCounts(), &schedulerv1.WorkflowInstanceCounts{}) {
			t.Fatalf("group 2 (no workflows): got %v on %s", d.GetCounts(), d.GetDate())
		}
	}

	for _, c := range []struct {
		req   *schedulerv1.CountWorkflowInstancesRequest
		field string
	}{
		{&schedulerv1.CountWorkflowInstancesRequest{StartDate: "2026-13-01", EndDate: "2026-01-01"}, "start_date"},
		{&schedulerv1.CountWorkflowInstancesRequest{StartDate: "2026-01-02", EndDate: "2026-01-01"}, "end_date"},
		{&schedulerv1.CountWorkflowInstancesRequest{StartDate: "2026-01-01", EndDate: "2027-01-03"}, "end_date"},
		{&schedulerv1.CountWorkflowInstancesRequest{StartDate: "2026-01-01", EndDate: "2026-01-01", GroupIds: []int64{0}}, "group_ids[0]"},
	} {
		_, err := r.s.CountWorkflowInstances(t.Context(), c.req)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%v: got %v, want an error naming %s", c.req, err, c.field)
		}
	}
}
