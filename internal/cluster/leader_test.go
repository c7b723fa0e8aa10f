package cluster

import (
	"slices"
	"testing"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

func TestLed(t *testing.T) {
	t.Parallel()
	s := &schedulerv1.GetStatusResponse{ReplicaId: "r2", Partitions: []*schedulerv1.PartitionStatus{
		{Partition: 0, LeaderId: "r1"}, {Partition: 1, LeaderId: "r2"}, {Partition: 2}, {Partition: 3, LeaderId: "r2"},
	}}
	if got := Led(s); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("Led = %v, want [1 3]", got)
	}
	if got := Led(&schedulerv1.GetStatusResponse{Partitions: []*schedulerv1.PartitionStatus{{Partition: 0}}}); got != nil {
		t.Errorf("Led of a replica without an id over a free partition = %v, want none", got)
	}
}
