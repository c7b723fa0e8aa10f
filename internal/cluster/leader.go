package cluster

import (
	"context"
	"time"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// Leader asks every replica whether it leads and returns the index of the one that does with the
// highest epoch (a deposed leader may not know yet), or -1 if none says so. A replica that does not
// answer within timeout counts as not leading.
func Leader(ctx context.Context, replicas []schedulerv1.SchedulerServiceClient, timeout time.Duration) (index int, epoch int64) {
	index = -1
	for i, r := range replicas {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		s, err := r.GetStatus(cctx, &schedulerv1.GetStatusRequest{})
		cancel()
		if err == nil && s.GetLeader() && s.GetEpoch() > epoch {
			index, epoch = i, s.GetEpoch()
		}
	}
	return index, epoch
}

// Led returns the partitions a replica's status says it leads (those whose leader is the replica
// itself), in order.
func Led(s *schedulerv1.GetStatusResponse) []int {
	var out []int
	for _, p := range s.GetPartitions() {
		if p.GetLeaderId() != "" && p.GetLeaderId() == s.GetReplicaId() {
			out = append(out, int(p.GetPartition()))
		}
	}
	return out
}
